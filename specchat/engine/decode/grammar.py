"""Constrained decoding: a grammar is a mask on the target's and the drafts' distributions.

llguidance (the grammar engine behind llama.cpp's, vLLM's and SGLang's structured output)
compiles a JSON schema, a Lark or GBNF grammar or a regex, and its matcher says, after any
token sequence, which tokens may come next. Its matcher rolls back, which speculation needs:
a step's drafts advance it along the draft path, and the verdict takes it back to what was
committed.

Exactness. The reply's distribution at each position is the target's logits with the tokens
the grammar forbids set to −∞, then the sampler's transform (:mod:`.sampling`): the masked,
renormalised distribution, the same in plain and speculative decoding because both mask the
row before anything else reads it. Speculation verifies against those masked rows, each row
masked by the matcher advanced along the path to it, so the rule (:mod:`.verify`) makes
exactly that distribution whatever the drafts. A drafter that runs a model masks its own rows
the same way (draws only tokens the grammar allows, and reports the masked q it drew from):
that is what keeps drafts accepted, not what keeps the reply exact — an unmasked draft token
the grammar forbids has p = 0 and is simply rejected.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Literal

import llguidance
import numpy as np
import numpy.typing as npt

from specchat.engine.llama.grammar_vocab import grammar_tokenizer
from specchat.engine.llama.model import LlamaModel
from specchat.errors import SpecchatError

GrammarKind = Literal["json_object", "json_schema", "grammar"]


class GrammarError(SpecchatError):
    """A grammar or schema llguidance cannot compile, or a matcher that failed."""


def compile_grammar(kind: GrammarKind, text: str | None = None) -> str:
    """The llguidance grammar for a request's constraint, checked.

    ``json_object``: any JSON object (``text`` unused). ``json_schema``: ``text`` is the schema
    (JSON). ``grammar``: ``text`` is a Lark grammar or a GBNF one (llama.cpp's format, which
    llguidance converts). Raises :class:`GrammarError` with llguidance's reason.
    """
    try:
        if kind == "json_object":
            g = llguidance.LLMatcher.grammar_from_json_schema({"type": "object"})
        elif kind == "json_schema":
            schema = json.loads(text or "")
            if not isinstance(schema, dict):
                raise GrammarError("a JSON schema must be a JSON object")
            g = llguidance.LLMatcher.grammar_from_json_schema(schema)
        else:
            if not (text or "").strip():
                raise GrammarError("the grammar is empty")
            g = llguidance.grammar_from("gbnf", text or "")  # Lark as is; GBNF converted
    except json.JSONDecodeError as e:
        raise GrammarError(f"the JSON schema is not valid JSON: {e}") from None
    except ValueError as e:  # llguidance's own (a GBNF it cannot convert, a schema's shape)
        raise GrammarError(_one_line(str(e))) from None
    error = llguidance.LLMatcher.validate_grammar(g)
    if error:
        what = "JSON schema" if kind == "json_schema" else "grammar"
        raise GrammarError(f"the {what} does not compile: {_one_line(error)}")
    return g


def _one_line(text: str) -> str:
    """llguidance's messages can quote the grammar over several lines: its first line says it."""
    first = text.strip().splitlines()[0] if text.strip() else "no reason given"
    return first[:300]


class Constraint:
    """One reply's matcher: the tokens the grammar allows after what was committed, and after
    any draft path from there.

    The matcher holds the committed tokens plus a *path* of speculative ones; ``allowed(path)``
    moves it there (rolling back to the common prefix, consuming the rest) and caches each
    path's mask until the next commit, so a draft model's masks serve the target's rows too.
    """

    def __init__(self, tokenizer: llguidance.LLTokenizer, grammar: str, n_vocab: int) -> None:
        self._m = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
        if self._m.is_error():
            raise GrammarError(f"the grammar does not compile: {_one_line(self._m.get_error())}")
        self.n_vocab = n_vocab
        self._ends = frozenset(tokenizer.eos_tokens)
        self._path: list[int] = []
        self._masks: dict[tuple[int, ...], npt.NDArray[np.bool_]] = {}

    def _goto(self, path: Sequence[int]) -> bool:
        """Move the matcher to committed + ``path``; False (and as far as it went) when the
        grammar forbids a token of it."""
        have = self._path
        n = min(len(have), len(path))
        c = 0
        while c < n and have[c] == path[c]:
            c += 1
        if c < len(have):
            self._m.rollback(len(have) - c)
            del have[c:]
        rest = [int(t) for t in path[c:]]
        if rest:
            done = self._m.try_consume_tokens(rest)
            have.extend(rest[:done])
            return done == len(rest)
        return True

    def reachable(self, path: Sequence[int]) -> bool:
        """Whether the matcher can stand after committed + ``path`` (not past an end token)."""
        return self._goto(path)

    def allows_path(self, path: Sequence[int]) -> bool:
        """Whether the grammar allows every token of ``path`` after the committed ones: an
        end token last when what comes before it is complete."""
        if self._goto(path):
            return True
        return (len(self._path) == len(path) - 1 and int(path[-1]) in self._ends
                and bool(self._m.is_accepting()))

    def allowed(self, path: Sequence[int] = ()) -> npt.NDArray[np.bool_]:
        """Which token ids may come after committed + ``path`` (a path the grammar allows)."""
        key = tuple(int(t) for t in path)
        mask = self._masks.get(key)
        if mask is not None:
            return mask
        if not self._goto(key):
            # A token the mask allowed that the matcher then refuses: llguidance does so where
            # the vocabulary cannot spell what the grammar asks (a tiny one without '_').
            raise GrammarError("the grammar forbids a token it allowed: the model's "
                               "vocabulary cannot write what the grammar asks")
        bits = np.frombuffer(self._m.compute_bitmask(), dtype=np.uint8)
        mask = np.unpackbits(bits, bitorder="little")[: self.n_vocab].astype(bool)
        if self._m.is_error() or not mask.any():
            raise GrammarError("no token of the model's vocabulary can go on here under the "
                               "grammar"
                               + (f": {_one_line(self._m.get_error())}" if self._m.is_error()
                                  else ""))
        self._masks[key] = mask
        return mask

    def mask(self, row: npt.NDArray[np.float32], path: Sequence[int] = ()
             ) -> npt.NDArray[np.float32]:
        """``row`` (logits) with the tokens the grammar forbids after committed + ``path`` set
        to −∞; a copy (rows are views of llama.cpp's buffers). A draft's row may be shorter
        than the target's vocabulary (the ids both know)."""
        allowed = self.allowed(path)[: row.shape[0]]
        return np.where(allowed, row, np.float32(-np.inf)).astype(np.float32, copy=False)

    def advance(self, tokens: Sequence[int]) -> None:
        """The step committed ``tokens``: the matcher moves past them, drafts forgotten."""
        if not self._goto(()) or not self._goto(tokens):
            raise GrammarError("a committed token breaks the grammar: the model's vocabulary "
                               "cannot write what the grammar asks")
        self._path = []
        self._masks.clear()

    @property
    def accepting(self) -> bool:
        """Whether what was committed is complete under the grammar."""
        self._goto(())
        return bool(self._m.is_accepting())


def masked(row: npt.NDArray[np.float32], grammar: Constraint | None,
           path: Sequence[int] = ()) -> npt.NDArray[np.float32]:
    """``row`` masked by ``grammar`` after ``path``; ``row`` itself without a grammar."""
    return row if grammar is None else grammar.mask(row, path)


def start(model: LlamaModel, grammar: str | None) -> Constraint | None:
    """A reply's matcher for ``grammar`` (an llguidance grammar, :func:`compile_grammar`) over
    ``model``'s vocabulary; None without one."""
    if grammar is None:
        return None
    return Constraint(grammar_tokenizer(model), grammar, model.n_vocab)
