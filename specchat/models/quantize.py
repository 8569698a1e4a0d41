"""Derive another precision of a model with llama.cpp's own quantizer (``llama_model_quantize``).

Requantizing an already quantized file is allowed (``allow_requantize``): it is how the demo
pair's F32 target and Q3_K_S draft are made from the Q4_1 file shipped on PyPI. The quantizer
has no progress callback, so progress is the output file's growth against its expected size.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from specchat.errors import Cancelled, ModelFileError
from specchat.formats.gguf_checks import validate
from specchat.models.progress import Progress, ProgressFn

# llama_ftype values (llama.h) and the dominant tensor type of each, for the size estimate.
FTYPES: dict[str, tuple[int, str]] = {
    "F32": (0, "F32"), "F16": (1, "F16"), "Q4_0": (2, "Q4_0"), "Q4_1": (3, "Q4_1"),
    "Q8_0": (7, "Q8_0"), "Q5_0": (8, "Q5_0"), "Q2_K": (10, "Q2_K"), "Q3_K_S": (11, "Q3_K"),
    "Q3_K_M": (12, "Q3_K"), "Q3_K_L": (13, "Q3_K"), "Q4_K_S": (14, "Q4_K"), "Q4_K_M": (15, "Q4_K"),
    "Q5_K_S": (16, "Q5_K"), "Q5_K_M": (17, "Q5_K"), "Q6_K": (18, "Q6_K"), "BF16": (32, "BF16"),
}


def estimated_size(n_params: int, quant: str) -> int:
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType[FTYPES[quant][1]]]
    return n_params * size // block


SELF_DRAFT_QUANTS = ("Q4_0", "Q3_K_S", "Q2_K")  # small and fast enough to draft for their source


def quantize(src: Path, dest: Path, quant: str, report: ProgressFn, n_threads: int = 0,
             cancel: threading.Event | None = None) -> Path:
    """Write ``dest`` as ``src`` re-quantized to ``quant``; atomic (temp name, then rename).

    llama.cpp's quantizer cannot be interrupted: on ``cancel`` we wait for it, then delete its
    output and raise :class:`Cancelled`, so nothing half-written is ever left under ``dest``.
    """
    # heavy: only when a model is actually derived
    from specchat.engine.llama.llama_lib import ensure_backend, last_error
    from specchat.engine.llama.quantize import quantize_file

    if quant not in FTYPES:
        raise ModelFileError(f"unknown quantization type {quant}; known: {', '.join(FTYPES)}")
    header = validate(src)
    ensure_backend()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f"{dest.name}.{os.getpid()}.partial")
    total = estimated_size(header.n_params, quant)
    task = f"derive {dest.name} ({quant})"
    result: list[int] = []

    def work() -> None:
        result.append(quantize_file(src, tmp, FTYPES[quant][0], n_threads))

    t = threading.Thread(target=work, daemon=True)
    t.start()
    try:
        while t.is_alive():
            t.join(0.25)
            done = tmp.stat().st_size if tmp.exists() else 0
            report(Progress(task, min(done, total * 0.99), total))
        if cancel is not None and cancel.is_set():
            report(Progress(task, failed=True))
            raise Cancelled(f"cancelled: {dest.name} was not made")
        if not result or result[0] != 0:
            report(Progress(task, failed=True))
            raise ModelFileError(f"llama.cpp could not quantize {src.name} to {quant}: "
                                 f"{last_error() or 'unknown error'}")
        validate(tmp)
        os.replace(tmp, dest)
        report(Progress(task, dest.stat().st_size, dest.stat().st_size, finished=True))
    finally:
        if t.is_alive():
            t.join()  # the quantizer cannot be interrupted; never leave it writing behind us
        tmp.unlink(missing_ok=True)
    return dest
