"""llama.cpp's own quantizer, one blocking call (``llama_model_quantize``)."""

from __future__ import annotations

from pathlib import Path

import llama_cpp


def quantize_file(src: Path, out: Path, ftype: int, n_threads: int = 0) -> int:
    """Write ``out`` as ``src`` in the llama_ftype ``ftype`` (requantizing allowed); llama.cpp's
    return code, 0 on success. It cannot be interrupted."""
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.allow_requantize = True
    params.nthread = n_threads
    return int(llama_cpp.llama_model_quantize(str(src).encode(), str(out).encode(), params))
