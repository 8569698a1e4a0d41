"""The sampler transform: filters in llama.cpp's order, the floor, and sampling exactness."""

from __future__ import annotations

import numpy as np
import pytest

from specchat.engine.decode.sampling import FLOOR, SamplerSettings, distribution, greedy_token, make_rng


def softmax(x: np.ndarray) -> np.ndarray:
    z = np.exp(x - x.max())
    return z / z.sum()


def test_no_filters_is_the_tempered_softmax() -> None:
    row = np.random.default_rng(0).normal(size=50).astype(np.float32)
    d = distribution(row, SamplerSettings(temperature=0.8, top_k=0, top_p=1.0, min_p=0.0))
    expected = softmax(row.astype(np.float64) / 0.8)
    got = np.zeros(50)
    got[d.ids] = d.probs
    np.testing.assert_allclose(got, expected, atol=FLOOR * 10)
    assert d.ids[0] == np.argmax(row)
    assert np.all(np.diff(d.probs) <= 0)


def test_top_k_top_p_min_p() -> None:
    row = np.log(np.array([0.4, 0.3, 0.2, 0.06, 0.04], dtype=np.float32))
    k2 = distribution(row, SamplerSettings(temperature=1, top_k=2, top_p=1, min_p=0))
    assert list(k2.ids) == [0, 1]
    np.testing.assert_allclose(k2.probs, [4 / 7, 3 / 7])
    p = distribution(row, SamplerSettings(temperature=1, top_k=0, top_p=0.85, min_p=0))
    assert list(p.ids) == [0, 1, 2]  # 0.4+0.3 < 0.85 ≤ 0.4+0.3+0.2
    m = distribution(row, SamplerSettings(temperature=1, top_k=0, top_p=1, min_p=0.2))
    assert list(m.ids) == [0, 1, 2]  # ≥ 0.2 × 0.4
    # Temperature comes after the filters (llama.cpp's order): filters see T = 1.
    hot = distribution(row, SamplerSettings(temperature=5, top_k=0, top_p=1, min_p=0.2))
    assert list(hot.ids) == [0, 1, 2]


def test_floor_drops_only_negligible_tokens() -> None:
    row = np.array([0.0, -30.0, -1.0], dtype=np.float32)
    d = distribution(row, SamplerSettings(temperature=1, top_k=0, top_p=1, min_p=0))
    assert sorted(d.ids.tolist()) == [0, 2]


def test_ties_are_deterministic() -> None:
    row = np.zeros(10, dtype=np.float32)
    d = distribution(row, SamplerSettings(temperature=1, top_k=3, top_p=1, min_p=0))
    assert sorted(d.ids.tolist()) == sorted(
        distribution(row, SamplerSettings(temperature=1, top_k=3, top_p=1, min_p=0)).ids.tolist())
    assert greedy_token(row) == 0


def test_sampling_matches_the_distribution_chi_square() -> None:
    row = np.log(np.array([0.5, 0.25, 0.15, 0.1], dtype=np.float32))
    d = distribution(row, SamplerSettings(temperature=1, top_k=0, top_p=1, min_p=0))
    rng = make_rng(1234)
    n = 20_000
    counts = np.bincount([d.sample(rng) for _ in range(n)], minlength=4)
    expected = np.array([0.5, 0.25, 0.15, 0.1]) * n
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 16.27  # df = 3, p = 0.001


@pytest.mark.parametrize("bad", [{"temperature": -1}, {"top_p": 0}, {"min_p": 1}, {"top_k": -2},
                                 {"max_tokens": 0}])
def test_invalid_settings(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        SamplerSettings(**bad).validate()  # type: ignore[arg-type]


def test_top_k_window_shortcut_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """With top-k, ids are gathered from a narrow window below the max when it holds k of them;
    the distribution must be exactly the one the floor-only path gives."""
    import specchat.engine.decode.sampling as sampling

    rng = np.random.default_rng(0)
    cases = []
    for _ in range(500):
        row = (rng.standard_normal(400) * rng.uniform(0.5, 6)).astype(np.float32)
        s = SamplerSettings(temperature=float(rng.uniform(0.1, 2)), top_k=int(rng.integers(1, 80)),
                            top_p=float(rng.uniform(0.5, 1)), min_p=float(rng.uniform(0, 0.2)))
        cases.append((row, s, distribution(row, s)))
    monkeypatch.setattr(sampling, "_TOP_K_WINDOW", float("inf"))  # the floor-only path
    for row, s, fast in cases:
        slow = distribution(row, s)
        np.testing.assert_array_equal(fast.ids, slow.ids)
        np.testing.assert_array_equal(fast.probs, slow.probs)
