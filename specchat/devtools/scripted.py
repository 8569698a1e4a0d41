"""A scripted-logits stand-in for a llama.cpp context, for exactness tests with power.

A ``ScriptedContext`` is a "model" whose next-token logits depend only on the last token and
its position (a Markov chain over a tiny vocabulary), so its output distribution is known
exactly and a reply costs microseconds instead of a forward pass: the real decoder, drafters
and verification rule can be sampled 10⁵ times in a test. It keeps the cache bookkeeping
(``tokens``, trees ended by ``keep_branch``) the decoder relies on and checks it: a node of a
tree must follow its parent, a kept path must be one the tree held. Its model and it declare
what the engine reads of a ``LlamaModel`` and a ``LlamaContext`` (names, a BOS rule, the
hidden-state capability), so no product code needs a branch for them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from specchat.engine.llama.model_settings import ModelSettings
from specchat.engine.llama.prefix import common_prefix
from specchat.engine.llama.side_branch import SideBranch


class ScriptedModel:
    def __init__(self, n_vocab: int, eog: int | None = None) -> None:
        self.n_vocab = n_vocab
        self.eog = eog
        self.size_bytes = 0  # no weights: no size ratio for a planner's priors
        # As a loaded file names itself; two scripted vocabularies of one size are the same
        # (every piece is "<id>"), so the size is the file's identity (cross_map keys on it).
        self.path = Path(f"scripted-{n_vocab}.gguf")
        self.name = f"scripted-{n_vocab}"
        self.settings = ModelSettings()  # loaded as a file is by default (no MTP layers)
        self.add_bos, self.bos = False, -1  # no BOS token

    def token_bytes(self, token: int) -> bytes:
        return self.piece(token)

    def is_eog(self, token: int) -> bool:
        return token == self.eog

    def piece(self, token: int) -> bytes:
        return f"<{token}>".encode()

    def detokenize(self, tokens: Sequence[int]) -> str:
        return "".join(f"<{t}>" for t in tokens)


class ScriptedContext:
    """Logits row for "after token t at position i" = ``table[(t + i * stride) % len(table)]``."""

    def __init__(self, table: npt.NDArray[np.float32], stride: int = 1, n_ctx: int = 4096,
                 n_batch: int = 512, n_seq_max: int = 16, eog: int | None = None) -> None:
        self.table = np.asarray(table, dtype=np.float32)
        self.stride = stride
        self.model = ScriptedModel(self.table.shape[1], eog)
        self.n_vocab = self.table.shape[1]
        self.n_ctx, self.n_batch, self.n_seq_max = n_ctx, n_batch, n_seq_max
        self.tokens: list[int] = []
        self.decode_s = 0.0
        self.cancel = threading.Event()
        self._tree: dict[int, tuple[int, int]] | None = None  # node → (token, parent node)
        self.side_rows = 0  # side-branch rows evaluated (see SideBranch)
        self._last_hidden: tuple[float, npt.NDArray[np.float32]] | None = None

    def row(self, token: int, position: int) -> npt.NDArray[np.float32]:
        return self.table[(token + position * self.stride) % len(self.table)]

    def clock(self) -> float:
        """Wall time, as a context of its own times its steps (see LlamaContext.clock)."""
        return time.perf_counter()

    # The hidden-state capability (engine.llama.hidden_output.HiddenOutput): the state after
    # token t at position i is the one-hot of its row's index, which determines the next-token
    # logits as a real final hidden state does.

    @property
    def n_embd(self) -> int:
        return len(self.table)

    def _states(self, pairs: Sequence[tuple[int, int]]) -> npt.NDArray[np.float32]:
        out = np.zeros((len(pairs), len(self.table)), dtype=np.float32)
        for i, (tok, pos) in enumerate(pairs):
            out[i, (tok + pos * self.stride) % len(self.table)] = 1.0
        return out

    def decode_with_hidden(self, tokens: Sequence[int]
                           ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        start = len(self.tokens)
        rows = self.decode(tokens, logits="all")
        return rows, self._mark(self._states([(int(t), start + i) for i, t in enumerate(tokens)]))

    def decode_tree_with_hidden(self, shape: Sequence[int], nodes: Sequence[int],
                                tokens: Sequence[int]
                                ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        rows = self.decode_tree(shape, nodes, tokens)
        pairs = []
        for node, tok in zip(nodes, tokens, strict=True):
            depth, p = 0, shape[node]
            while p >= 0:
                depth, p = depth + 1, shape[p]
            pairs.append((int(tok), len(self.tokens) + depth))
        return rows, self._mark(self._states(pairs))

    def _mark(self, hidden: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        self._last_hidden = (self.decode_s, hidden)
        return hidden

    def last_hidden(self) -> npt.NDArray[np.float32] | None:
        mark = self._last_hidden
        return mark[1] if mark is not None and mark[0] == self.decode_s else None

    def decode(self, tokens: Sequence[int], *, logits: str = "last") -> npt.NDArray[np.float32]:
        self.decode_s += 1e-9  # each decode moves the clock (last_hidden reads it)
        self.drop_tree()
        start = len(self.tokens)
        if start + len(tokens) > self.n_ctx:
            raise ValueError("scripted context overflow")
        self.tokens.extend(int(t) for t in tokens)
        if logits == "none":
            return np.empty((0, self.n_vocab), dtype=np.float32)
        idx = range(len(tokens)) if logits == "all" else [len(tokens) - 1]
        return np.stack([self.row(tokens[i], start + i) for i in idx])

    def decode_tree(self, shape: Sequence[int], nodes: Sequence[int], tokens: Sequence[int],
                    side: SideBranch | None = None) -> npt.NDArray[np.float32]:
        self.decode_s += 1e-9
        if side is not None:
            # Rows of their own sequences, as LlamaContext lays them out: they must fit the
            # batch, the sequences and the context like the real thing, and never stay.
            paths = sum(1 for i, _ in enumerate(shape) if i not in set(shape))
            if len(nodes) + side.size > self.n_batch or paths + side.n_seqs > self.n_seq_max:
                raise AssertionError("a side branch that does not fit the batch")
            if len(self.tokens) + len(nodes) + side.size > self.n_ctx:
                raise AssertionError("a side branch that does not fit the context")
            self._tree = None
            self.side_rows += side.size
            if side.logits:
                side.receive(np.stack([self.row(side.tokens[r],
                                                len(self.tokens) + side.offsets[r])
                                       for r in side.logits]))
        if self._tree is None:
            self._tree = {}
        rows = []
        for node, tok in zip(nodes, tokens, strict=True):
            parent = shape[node]
            if parent >= 0 and parent not in self._tree:
                raise AssertionError(f"node {node} evaluated before its parent {parent}")
            depth, p = 0, parent
            while p >= 0:
                depth, p = depth + 1, shape[p]
            self._tree[node] = (int(tok), parent)
            rows.append(self.row(int(tok), len(self.tokens) + depth))
        return np.stack(rows)

    def keep_branch(self, shape: Sequence[int], node: int, path_tokens: Sequence[int]) -> None:
        tree, self._tree = self._tree, None
        if node < 0:
            return
        assert tree is not None, "keep_branch without a tree"
        path: list[int] = []
        i = node
        while i >= 0:
            path.append(tree[i][0])
            i = tree[i][1]
        assert path[::-1] == [int(t) for t in path_tokens], "kept path is not the tree's"
        self.tokens.extend(int(t) for t in path_tokens)

    def drop_tree(self) -> None:
        self._tree = None

    def truncate(self, n: int) -> None:
        self.drop_tree()
        del self.tokens[n:]

    def common_prefix(self, tokens: Sequence[int]) -> int:
        return common_prefix(self.tokens, tokens)

    def reuse_prefix(self, tokens: Sequence[int]) -> int:
        n = self.common_prefix(tokens)
        self.truncate(n)
        return n

    def clear(self) -> None:
        self.tokens.clear()
        self._tree = None
