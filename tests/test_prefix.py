"""The one common-prefix helper every cache and "what is new" check uses."""

from __future__ import annotations

import random

from specchat.engine.llama.prefix import common_prefix


def _slow(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_common_prefix_matches_the_plain_loop() -> None:
    rng = random.Random(3)
    for _ in range(300):
        a = [rng.randrange(3) for _ in range(rng.randrange(8))]
        b = a[: rng.randrange(len(a) + 1)] + [rng.randrange(3) for _ in range(rng.randrange(4))]
        assert common_prefix(a, b) == _slow(a, b) == common_prefix(b, a)


def test_start_skips_tokens_known_to_agree() -> None:
    assert common_prefix([9, 2, 3], [1, 2, 4], start=1) == 2  # position 0 is not compared
    assert common_prefix([1, 2], [1, 2, 3], start=1) == 2
    assert common_prefix([], [5], start=1) == 1  # start past the shorter one: start
    assert common_prefix((1, 2, 3), [1, 2, 3]) == 3
