"""A token tree in a context's KV cache: each root-to-leaf path its own sequence, the cached
tokens shared by all, so one batch verifies every branch (see :meth:`TokenTree.decode_tree`);
the tree ends when one branch is kept or all are dropped. A base of ``LlamaContext``, over its
batch and bookkeeping."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import llama_cpp
import numpy as np
import numpy.typing as npt

from specchat.engine.llama.side_branch import SideBranch
from specchat.errors import ContextFullError


class TokenTree:
    """The token-tree part of a llama.cpp context (see the module's docstring)."""

    if TYPE_CHECKING:  # what the context this is a base of provides
        mem: Any
        batch: Any
        tokens: list[int]
        seq_base: int
        n_ctx: int
        n_batch: int
        n_seq_max: int
        _tok: npt.NDArray[np.int32]
        _pos: npt.NDArray[np.int32]
        _out: npt.NDArray[np.int8]
        _n_seq: npt.NDArray[np.int32]
        # A token tree beyond ``tokens``: its shape, and the sequences 1..n that its paths
        # other than the first occupy (set by the context's _sequence_state).
        _tree_shape: tuple[int, ...] | None
        _tree_seqs: int
        _tree_paths: list[tuple[int, ...]]
        on_decode: Any

        def _run_batch(self, m: int, start: int) -> None: ...

        def _linear_batch(self, rows: int | None = None) -> None: ...

        def _logits(self, rows: int) -> npt.NDArray[np.float32]: ...

    def decode_tree(self, shape: Sequence[int], nodes: Sequence[int], tokens: Sequence[int],
                    side: SideBranch | None = None) -> npt.NDArray[np.float32]:
        """Evaluate nodes of a token tree after the cache's tokens in one batch; logits for each.

        ``shape`` is the whole tree as parent indices (−1: the node follows the cached tokens;
        parents come first); ``nodes`` are the ones to evaluate now, with their ``tokens``.
        Their ancestors must have been evaluated by earlier calls on the same shape, so a tree
        can be grown level by level (a drafter) or evaluated at once (the target). Each
        root-to-leaf path of ``shape`` is a sequence of its own: a node carries the ids of
        every path through it and the cached tokens are shared by all, so llama.cpp's
        attention mask (keyed on a token's first sequence, and causal in position) gives each
        node exactly its ancestors. ``tokens`` stays the linear part; :meth:`keep_branch` or
        :meth:`drop_tree` end the tree.

        ``side``: rows in sequences numbered after the tree's (the root, node 0, joins them
        all), evaluated in the same batch; their wanted logits go to ``side.receive``. They
        need a tree whose node 0 is its only root, evaluated in this call; ending the tree
        drops them.
        """
        n = len(nodes)
        if n == 0 or n != len(tokens):
            raise ValueError("a tree decode needs one token per node")
        n_side = side.size if side is not None else 0
        if n + n_side > self.n_batch:
            raise ValueError(f"{n + n_side} tree nodes do not fit a batch of {self.n_batch}")
        shape = tuple(shape)
        start = len(self.tokens)
        depth: list[int] = []
        for p in shape:
            depth.append(0 if p < 0 else depth[p] + 1)
        reach = max(depth[i] for i in nodes)
        if side is not None:
            if 0 not in nodes or sum(1 for p in shape if p < 0) != 1:
                raise ValueError("a side branch needs the tree's single root in the batch")
            reach = max(reach, side.reach)
        if start + reach + 1 > self.n_ctx or start + n + n_side > self.n_ctx:
            raise ContextFullError(f"the context is full ({self.n_ctx} tokens)")
        seqs = self._tree_paths if shape == self._tree_shape else tree_paths(shape)
        n_paths = 1 + max(max(s) for s in seqs)
        n_all = n_paths + (side.n_seqs if side is not None else 0)
        if n_all > self.n_seq_max:
            raise ValueError(f"a tree of {n_all} sequences needs more than {self.n_seq_max}")
        base = self.seq_base
        if side is not None or shape != self._tree_shape:
            self.drop_tree()
            for s in range(1, n_all):
                llama_cpp.llama_memory_seq_cp(self.mem, base, base + s, -1, -1)
            self._tree_seqs, self._tree_shape, self._tree_paths = n_all - 1, shape, seqs
        b = self.batch
        for i, (node, tok) in enumerate(zip(nodes, tokens, strict=True)):
            self._tok[i] = tok
            self._pos[i] = start + depth[node]
            ids = seqs[node] if side is None or node != 0 else (
                *seqs[node], *range(n_paths, n_all))
            self._n_seq[i] = len(ids)
            for j, sid in enumerate(ids):
                b.seq_id[i][j] = base + sid
        self._out[:n] = 1
        wanted = sorted(set(side.logits)) if side is not None else []
        if side is not None:
            self._out[n : n + n_side] = 0
            for r, (tok, off, ids) in enumerate(zip(side.tokens, side.offsets, side.seqs,
                                                    strict=True)):
                i = n + r
                self._tok[i] = tok
                self._pos[i] = start + off
                self._n_seq[i] = len(ids)
                for j, sid in enumerate(ids):
                    b.seq_id[i][j] = base + n_paths + sid
            for r in wanted:
                self._out[n + r] = 1
        b.n_tokens = n + n_side
        try:
            self._run_batch(n + n_side, start)
        finally:
            self._linear_batch(n + n_side)
        if self.on_decode is not None:
            self.on_decode(start, None)
        rows = self._logits(n + len(wanted))
        if side is not None and wanted:
            at = {r: n + k for k, r in enumerate(wanted)}
            side.receive(rows[[at[r] for r in side.logits]])
        return rows[:n]

    def keep_branch(self, shape: Sequence[int], node: int, path_tokens: Sequence[int]) -> None:
        """End a tree (see :meth:`decode_tree`) keeping the path from its root to ``node``
        (−1: none of it), whose tokens are ``path_tokens``: the cache then holds ``tokens``
        plus that path, as sequence 0."""
        if node < 0 or self._tree_shape is None:
            self.drop_tree()
            return
        start = len(self.tokens)
        shape = tuple(shape)
        # The first path through ``node`` holds its ancestors (the paths as decode_tree found
        # them, when it is the tree decoded).
        paths = self._tree_paths if shape == self._tree_shape else tree_paths(shape)
        base = self.seq_base
        sid = base + paths[node][0]
        if self._tree_seqs:
            self._keep_only(sid)
            if sid != base:
                llama_cpp.llama_memory_seq_cp(self.mem, sid, base, -1, -1)
                llama_cpp.llama_memory_seq_rm(self.mem, sid, -1, -1)
        self._tree_seqs, self._tree_shape = 0, None
        llama_cpp.llama_memory_seq_rm(self.mem, base, start + len(path_tokens), -1)
        self.tokens.extend(int(t) for t in path_tokens)

    def _keep_only(self, sid: int) -> None:
        """Of the cache's sequences, keep ``sid`` alone (its cells lose every other id)."""
        llama_cpp.llama_memory_seq_keep(self.mem, sid)

    def drop_tree(self) -> None:
        """Forget any token tree: the cache holds exactly ``tokens`` again."""
        if self._tree_shape is not None:
            base = self.seq_base
            for s in range(1, self._tree_seqs + 1):
                llama_cpp.llama_memory_seq_rm(self.mem, base + s, -1, -1)
            llama_cpp.llama_memory_seq_rm(self.mem, base, len(self.tokens), -1)
            self._tree_seqs, self._tree_shape = 0, None


def tree_paths(parents: Sequence[int]) -> list[tuple[int, ...]]:
    """For each node of a tree (parent indices, parents first), the ids of the root-to-leaf
    paths through it, numbered by leaf in node order (the first leaf's path is 0)."""
    n = len(parents)
    has_child = [False] * n
    for p in parents:
        if p >= 0:
            has_child[p] = True
    seqs: list[list[int]] = [[] for _ in range(n)]
    leaf = 0
    for i in range(n):
        if not has_child[i]:
            j = i
            while j >= 0:
                seqs[j].append(leaf)
                j = parents[j]
            leaf += 1
    return [tuple(sorted(s)) for s in seqs]
