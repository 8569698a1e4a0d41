"""The target's frozen output matrix, read from its GGUF and dequantized with ``gguf``.

llama.cpp computes logits as ``output.weight · h`` (``token_embd.weight`` when the model ties
them, as SmolLM2 does). The tensor is found with the project's own header reader (the ``gguf``
package's reader parses every vocabulary entry in Python: minutes on a loaded 2-core box), read
through a memory map, and only the rows asked for are dequantized: on Qwen2.5-Coder-1.5B the
whole matrix would be 151,936 × 1,536 floats (0.9 GB).
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import numpy.typing as npt

from specchat.errors import ModelFileError, SpecchatError
from specchat.formats.gguf_checks import split_parts
from specchat.formats.gguf_file import TensorInfo, read_header


def _tensor(path: Path) -> tuple[TensorInfo, int]:
    if len(split_parts(path)) > 1:
        raise SpecchatError(f"{path.name} is split into several files: heads need the output "
                            "matrix from one file (merge it with llama-gguf-split --merge)")
    header = read_header(path, token_texts=False)
    tensors = {t.name: t for t in header.tensors}
    t = tensors.get("output.weight") or tensors.get("token_embd.weight")
    if t is None:
        raise ModelFileError(f"{path.name} has no output matrix (output.weight or "
                             "token_embd.weight)")
    return t, header.data_start


def output_type(path: Path) -> str:
    t, _ = _tensor(Path(path))
    try:
        return gguf.GGMLQuantizationType(t.ggml_type).name
    except ValueError:
        return f"type {t.ggml_type}"


def output_rows(path: Path, rows: npt.NDArray[np.int64] | None = None
                ) -> npt.NDArray[np.float32]:
    """Rows ``rows`` (all when None) of the output matrix, (len(rows), n_embd) float32."""
    path = Path(path)
    t, start = _tensor(path)
    n_embd, n_vocab = t.shape[0], t.shape[-1]  # GGUF lists the fastest-moving dimension first
    qtype = gguf.GGMLQuantizationType(t.ggml_type)
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    row_bytes = n_embd // block * size
    raw = np.memmap(path, dtype=np.uint8, mode="r", offset=start + t.offset,
                    shape=(n_vocab, row_bytes))
    picked = np.asarray(raw if rows is None else raw[np.asarray(rows)])
    if qtype in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16,
                 gguf.GGMLQuantizationType.BF16):
        # gguf.dequantize takes these as arrays of their own element type, not as bytes.
        as_type = {gguf.GGMLQuantizationType.F32: np.float32,
                   gguf.GGMLQuantizationType.F16: np.float16}.get(qtype)
        if as_type is not None:
            return np.ascontiguousarray(picked.view(as_type), dtype=np.float32)
    try:
        out = gguf.dequantize(picked, qtype)
    except (NotImplementedError, KeyError, ValueError) as e:
        raise SpecchatError(f"{path.name}'s output matrix is {qtype.name}, which the gguf "
                            f"package cannot dequantize ({e}): heads cannot be trained for it"
                            ) from None
    return np.ascontiguousarray(out, dtype=np.float32).reshape(picked.shape[0], n_embd)
