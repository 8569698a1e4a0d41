"""Prompt-lookup drafting."""

from __future__ import annotations

import random

import numpy as np
import pytest

from specchat.engine.decode.drafting import DraftRequest, Proposal
from specchat.engine.decode.plan import chain
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.decode.verify import Verdict
from specchat.engine.drafters.ngram import NgramDrafter


def test_proposes_what_followed_the_most_recent_match() -> None:
    d = NgramDrafter(n_max=3, n_min=1)
    #              0  1  2  3  4  5  6  7  8  9
    d.reset([1, 2, 3, 4, 5, 1, 2, 3, 9, 8, 1, 2, 3])
    # "1 2 3" last occurred at 5..7, followed by 9 8 1 2 3 (the earlier one by 4 5).
    assert d.lookup(3) == [9, 8, 1]
    assert d.lookup(10) == [9, 8, 1, 2, 3]  # bounded by the sequence


def test_longest_n_first_then_shorter() -> None:
    d = NgramDrafter(n_max=3, n_min=1)
    d.reset([7, 5, 6, 0, 4, 5, 6, 1, 3, 6])
    # no earlier "1 3 6" nor "3 6"; "6" last occurred at 6, followed by 1 3 6
    assert d.lookup(2) == [1, 3]
    d.reset([7, 5, 6, 0, 4, 5, 6, 1, 8, 5, 6])
    assert d.lookup(2) == [1, 8]  # "5 6" matches (most recent earlier: index 5..6)


def test_a_copy_with_one_token_changed_goes_on_after_the_replaced_token() -> None:
    """"Every 'river' becomes 'canal'": right after the new word nothing is proposed — not a
    guess that the copy skipped one word (right 5 % of the time on real replies), nor where the
    new word was last seen (the instruction that named it) —; once the copy goes on, it is
    followed from after the old word."""
    passage = [10, 11, 12, 13, 14, 15, 16, 17]  # 13 is "river"
    prompt = [90, 13, 91, 99, 92, *passage, 93]  # the instruction names 13 and its new word 99
    d = NgramDrafter(n_max=3, n_min=1)
    d.reset([*prompt, 10, 11, 12, 99])  # the reply copies 10 11 12, then writes 99 for 13
    assert d.lookup(3) == []  # neither [14, 15, 16] (a guess) nor [92, …] (the instruction)
    d.reset([*prompt, 10, 11, 12, 99, 14, 15])  # back on the passage: followed again
    assert d.lookup(2) == [16, 17]
    d.reset([*prompt, 10, 11, 12, 13])  # no edit: the longest exact match, as always
    assert d.lookup(2) == [14, 15]


def test_a_new_token_after_one_token_of_context_proposes_nothing() -> None:
    d = NgramDrafter(n_max=3, n_min=1)
    d.reset([5, 1, 2, 6, 7, 3, 5, 8])  # only "5" before the new token 8 matches earlier
    assert d.lookup(2) == []  # 8 never seen, and one token of context is no evidence of a copy
    d.reset([5, 1, 2, 6, 7, 3, 5, 1])  # the control: "5 1" was seen, followed by 2 6
    assert d.lookup(2) == [2, 6]


# A passage with "river" (13) twice, and a prompt that names it and its new word (99).
RIVER, CANAL = 13, 99
PASSAGE = [10, 11, RIVER, 14, 15, 16, 17, 18, 19, 20, 21, RIVER, 22, 23, 24]
PROMPT = [90, RIVER, 91, CANAL, 92, *PASSAGE, 93]


def test_an_edit_seen_once_is_made_in_later_proposals() -> None:
    d = NgramDrafter(n_max=3, n_min=1)
    d.reset([*PROMPT, 10, 11, CANAL, 14, 15])  # the reply changes the first river and goes on
    assert d.lookup(11) == [16, 17, 18, 19, 20, 21, CANAL, 22, 23, 24, 93]
    # A tail holding the new word is matched as the text it copies ("21 canal" → "21 river").
    d.reset([*PROMPT, 10, 11, CANAL, 14, 15, 16, 17, 18, 19, 20, 21, CANAL])
    assert d.lookup(3) == [22, 23, 24]


def test_an_edit_needs_the_copy_to_go_on_after_it() -> None:
    d = NgramDrafter(n_max=3, n_min=1)
    d.reset([*PROMPT, 10, 11, CANAL, 50])  # a new word, then not the passage: no edit
    assert CANAL not in d.lookup(30)
    d.reset([*PROMPT, 10, 11, CANAL, 14, 50])  # one token of the passage can be chance
    assert CANAL not in d.lookup(30)
    d.reset([*PROMPT, 10, 11, CANAL, 14, 15, 16])
    assert d.lookup(6)[-1] == CANAL  # the control: going on after it, it is an edit


def test_an_edit_is_forgotten_where_the_reply_keeps_the_old_word() -> None:
    passage = [*PASSAGE, 30, 31, RIVER, 32, 33]  # a third river
    d = NgramDrafter(n_max=3, n_min=1)
    body = [10, 11, CANAL, 14, 15, 16, 17, 18, 19, 20, 21]
    d.reset([*PROMPT[:-1], 30, 31, RIVER, 32, 33, 93, *body])
    assert d.lookup(2) == [CANAL, 22]  # the control: the edit holds
    d.reset([*PROMPT[:-1], 30, 31, RIVER, 32, 33, 93, *body, RIVER, 22])  # the second one kept
    assert d.lookup(6) == passage[13:19] == [23, 24, 30, 31, RIVER, 32]


# A function that uses `total` three times; the reply renames it to `running sum` (two tokens).
TOTAL, RUNNING, SUM = 40, 41, 42
FUNC = [60, 59, 58, TOTAL, 61, 62, 63, 64, 65, TOTAL, 66, 67, 68, 69, 70, 71, TOTAL, 72, 73, 74]
ASK = [80, TOTAL, 81, RUNNING, SUM, 82, *FUNC, 83]


def test_a_copy_re_joins_its_passage_after_an_edit_of_several_tokens() -> None:
    d = NgramDrafter(n_min=2)
    start = [60, 59, 58]
    d.reset([*ASK, *start, RUNNING, SUM, 61])  # `total` written as two tokens, then one more
    assert 66 not in d.lookup(8)  # one token of the passage after a change can be chance
    d.reset([*ASK, *start, RUNNING, SUM, 61, 62])  # two: the copy goes on after `total`
    assert d.lookup(4) == [63, 64, 65, RUNNING]  # ... and `total` is proposed renamed
    assert d.lookup(7) == [63, 64, 65, RUNNING, SUM, 66, 67]
    d.reset([*ASK, *start, RUNNING, SUM, 61, 62, 63, 64, 65, RUNNING, SUM, 66, 67])
    assert d.lookup(8) == [68, 69, 70, 71, RUNNING, SUM, 72, 73]  # the second use: no miss
    d.reset([*ASK, *start, RUNNING, SUM, 50])  # the control: the copy does not go on
    assert RUNNING not in d.lookup(10) and not d._spans


def test_a_copy_re_joins_after_an_inserted_word() -> None:
    passage = [10, 11, 12, 13, 14, 15, 16, 17, 18]
    d = NgramDrafter()
    d.reset([90, *passage, 91, 10, 11, 12, 13, 55, 56, 13, 14])  # "13" again, then on
    assert d.lookup(3) == [15, 16, 17]


def test_a_several_token_edit_is_forgotten_where_the_reply_keeps_the_old_text() -> None:
    d = NgramDrafter(n_min=2)
    reply = [60, 59, 58, RUNNING, SUM, 61, 62, 63, 64, 65]
    d.reset([*ASK, *reply])
    assert d.lookup(2) == [RUNNING, SUM]  # the control: the edit holds
    d.reset([*ASK, *reply, TOTAL])  # kept as it was here
    assert d.lookup(7) == [66, 67, 68, 69, 70, 71, TOTAL]


def test_a_copy_of_a_passage_with_edits_token_by_token_equals_one_built_at_once() -> None:
    rng = random.Random(3)
    for _ in range(30):
        source = [rng.randrange(20) for _ in range(40)]
        copy: list[int] = []
        for t in source:  # replace, insert or drop a few spans of 1–3 tokens
            r = rng.random()
            if r < 0.05:
                copy += [rng.randrange(20, 30) for _ in range(rng.randrange(1, 4))]
            elif r < 0.08:
                continue
            copy.append(t)
        assert_built_token_by_token_as_at_once([*source, 99, *copy], start=20, k=10)


def test_a_copy_goes_on_from_the_occurrence_it_was_copying() -> None:
    # "1 2 3" is said twice (", and the"): a copy of the first goes on as the first did.
    passage = [0, 9, 1, 2, 3, 40, 8, 7, 1, 2, 3, 41, 99]
    d = NgramDrafter(n_max=3, n_min=1)
    d.reset([*passage, 0, 9, 1, 2, 3])
    assert d.lookup(2) == [40, 8]
    d.reset([*passage, 5, 1, 2, 3])  # the control: nothing copied before it, so the latest
    assert d.lookup(2) == [41, 99]


def test_an_index_with_edits_built_token_by_token_equals_one_built_at_once() -> None:
    rng = random.Random(7)
    for _ in range(40):
        source = [rng.randrange(12) for _ in range(30)]
        copy = [t if rng.random() > 0.15 else rng.randrange(12, 16) for t in source]
        seq = source + copy + [rng.randrange(16) for _ in range(5)] + copy[:10]
        assert_built_token_by_token_as_at_once(seq, start=3, k=8)


def test_no_match_proposes_nothing() -> None:
    d = NgramDrafter(n_max=3, n_min=2)
    d.reset([1, 2, 3, 4])
    assert d.lookup(4) == []
    assert d.lookup(0) == []
    d.reset([])
    assert d.lookup(3) == []


def test_extend_matches_a_full_rebuild() -> None:
    seq = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4, 3, 3, 8, 3, 2]
    assert_built_token_by_token_as_at_once(seq, start=5, k=4)


def assert_built_token_by_token_as_at_once(seq: list[int], start: int, k: int) -> None:
    inc = NgramDrafter()
    inc.reset(seq[:start])
    for i in range(start, len(seq)):
        inc.extend(seq[i : i + 1])
        full = NgramDrafter()
        full.reset(seq[: i + 1])
        assert inc.lookup(k) == full.lookup(k), (seq, i)


def test_reset_keeps_the_index_when_the_conversation_grows_and_rebuilds_otherwise() -> None:
    d = NgramDrafter()
    d.reset([1, 2, 3, 1, 2])
    assert d.lookup(1) == [3]
    d.reset([1, 2, 3, 1, 2, 7, 1, 2])  # next turn: extends the last one
    assert d.lookup(1) == [7]
    d.reset([5, 6, 5])  # a different conversation
    assert d.lookup(2) == [6, 5]
    assert d.tokens == [5, 6, 5]


def test_bad_sizes() -> None:
    with pytest.raises(ValueError):
        NgramDrafter(n_max=1, n_min=2)


def _state(d: NgramDrafter) -> tuple[object, ...]:
    return (d.tokens, d._index, d._before, d._edits, d._unedit, d._pending, d._cursor,
            d._follow, d._lost, d._spans)


def test_commit_after_a_rejection_indexes_only_what_was_committed() -> None:
    """commit reads only the new tokens: after steps whose drafts were cut by a rejection (the
    rejected drafts never indexed) and after a rollback to another sequence, the index is the
    one built from the committed sequence at once."""
    rng = random.Random(11)
    source = [rng.randrange(10) for _ in range(40)]
    seq = source[:20]
    d = NgramDrafter()
    d.reset(seq)
    drafted = 0
    while len(seq) < 120:
        proposal = d.propose(_request(seq, 4))
        drafts = proposal.tokens
        drafted += len(drafts)
        kept = rng.randrange(len(drafts) + 1)
        corrected = rng.randrange(14)  # the target's own token: a rejection or a bonus
        seq = [*seq, *drafts[:kept], corrected]
        d.commit(seq, proposal, Verdict(kept, corrected, None, path=tuple(range(kept))))
        full = NgramDrafter()
        full.reset(seq)
        assert _state(d) == _state(full)
        assert d.lookup(6) == full.lookup(6)
    assert drafted > 20  # the steps drafted, and some drafts were cut
    rolled = [*seq[:50], 13, 12]  # a rollback (an edited turn): indexed afresh
    d.commit(rolled, Proposal("none"), Verdict(0, 12, None))
    full = NgramDrafter()
    full.reset(rolled)
    assert _state(d) == _state(full)


def _request(seq: list[int], k: int) -> DraftRequest:
    return DraftRequest(seq, chain("ngram", k), SamplerSettings(temperature=0.0),
                        np.random.default_rng(0))
