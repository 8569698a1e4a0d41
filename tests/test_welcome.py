"""The first run's recommendation: qwen-coder when this machine can hold it, else the demo,
with the reason in plain words; sizes as they are on disk or will be."""

from __future__ import annotations

from specchat.models.catalog import load_catalog
from specchat.models.resolver import ModelResolver
from specchat.paths import AppPaths
from specchat.ui.wizard.welcome import (
    DEMO,
    STARTER,
    Machine,
    PairSize,
    pair_size,
    read_machine,
    recommend,
)

GB = 10**9
QWEN = PairSize(STARTER, int(1.6 * GB), int(1.6 * GB), present=False)


def test_a_roomy_cpu_machine_gets_qwen_coder() -> None:
    advice = recommend(Machine(16 * GB, 8, None, 100 * GB), QWEN)
    assert advice.pair == STARTER
    assert advice.why == ("this computer has 16.0 GB of memory free (it needs about 2.3 GB), "
                          "8 CPU cores and no GPU: replies come at reading speed")


def test_a_gpu_is_named() -> None:
    advice = recommend(Machine(64 * GB, 16, "NVIDIA H200", 100 * GB), QWEN)
    assert advice.pair == STARTER and "a GPU (NVIDIA H200)" in advice.why


def test_too_little_memory_or_disk_means_the_demo() -> None:
    low = recommend(Machine(1 * GB, 4, None, 100 * GB), QWEN)
    assert low.pair == DEMO and low.why.startswith("this computer has 1.0 GB of memory free")
    full = recommend(Machine(16 * GB, 4, None, GB // 2), QWEN)
    assert full.pair == DEMO and full.why == "qwen-coder needs 1.6 GB of disk and 500.0 MB is free"
    on_disk = PairSize(STARTER, 0, int(1.6 * GB), present=True)
    assert recommend(Machine(16 * GB, 4, None, GB // 2), on_disk).pair == STARTER


def test_unknown_readings_do_not_block_the_starter() -> None:
    assert recommend(Machine(None, 1, None, None), QWEN).pair == STARTER


def test_sizes_of_the_two_pairs_in_an_empty_home(home: AppPaths) -> None:
    cat = load_catalog()
    res = ModelResolver(cat, home)
    qwen, demo = pair_size(res, cat, STARTER), pair_size(res, cat, DEMO)
    assert qwen == PairSize(STARTER, 1_608_720_832, 1_608_720_832, False)
    # the demo downloads the Q4_1 file and makes two precisions from it: ~700 MB on disk
    assert demo.download == 98_362_432 and 600e6 < demo.on_disk < 800e6 and not demo.present
    m = read_machine(res)
    assert m.cores >= 1 and (m.disk_free is None or m.disk_free > 0)
