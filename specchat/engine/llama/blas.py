"""numpy's BLAS thread count, set for a block (no extra dependency: OpenBLAS's own calls)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import numpy as np


@contextlib.contextmanager
def blas_threads(n: int) -> Iterator[None]:
    """numpy's OpenBLAS on ``n`` threads inside the block, when the library says how.

    Heads' matrices are small (a training batch of 64 × d, one hidden state when drafting):
    on a busy small machine OpenBLAS's threads spin waiting for each other, and one thread is
    far faster (docs/performance.md). Nothing happens where the symbols are absent.
    """
    lib = _openblas()
    if lib is None:
        yield
        return
    get, set_ = lib
    before = int(get())
    set_(n)
    try:
        yield
    finally:
        set_(before)


@functools.cache
def _openblas() -> tuple[Any, Any] | None:
    import ctypes
    import glob
    import os

    libs = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    for path in glob.glob(os.path.join(libs, "libscipy_openblas*.so*")) + glob.glob(
            os.path.join(libs, "libopenblas*.so*")):
        try:
            dll = ctypes.CDLL(path)
        except OSError:
            continue
        for get_name, set_name in (("scipy_openblas_get_num_threads64_",
                                    "scipy_openblas_set_num_threads64_"),
                                   ("openblas_get_num_threads", "openblas_set_num_threads")):
            # FFI: which of the two BLAS builds' symbol pairs this library exports
            get, set_ = getattr(dll, get_name, None), getattr(dll, set_name, None)
            if get is not None and set_ is not None:
                return get, set_
    return None
