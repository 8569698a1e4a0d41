"""A layer-skip self-draft: a GGUF holding a subset of the target's own blocks (Draft & Verify).

The cut file keeps the embeddings, the output norm and head, the tokenizer and every other
metadata key of the target; the kept blocks are renumbered 0..k−1 and ``<arch>.block_count``
becomes k. Tensors are copied byte for byte (quantized ones included), so a cut keeping every
block computes exactly what the target computes. Only architectures whose blocks do not depend on
their index are cut: renumbering would silently change what a block does in the others.
The file is written under a temporary name and renamed when complete.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf

from specchat.errors import ModelFileError, SpecchatError

# Architectures whose blocks are identical in kind (a block's behaviour does not depend on its
# index), so any subset renumbered is a valid smaller model of the same architecture.
CUTTABLE = frozenset({"llama", "qwen2", "qwen3", "mistral", "granite", "olmo", "olmo2",
                      "internlm2", "stablelm", "starcoder2", "phi3", "smollm3"})
# Known reasons for the others (what the user is told).
WHY_NOT = {
    "gemma3": "its blocks alternate sliding-window and global attention by block index",
    "gemma2": "its blocks alternate sliding-window and global attention by block index",
    "cohere2": "its blocks alternate sliding-window and global attention by block index",
    "llama4": "its blocks alternate attention kinds and experts by block index",
    "gemma3n": "its blocks share per-layer inputs and KV caches by block index",
}
LAYERS_KEY = "specchat.layerskip.kept"  # the target's block indices, kept in the cut file
_BLOCK = re.compile(r"^blk\.(\d+)\.(.+)$")


class CutError(SpecchatError):
    """A target cannot be cut as asked."""


@dataclass(frozen=True)
class CutSource:
    """What the cutter needs from the target, read once (a search writes many cuts)."""

    path: Path
    arch: str
    n_layer: int
    reader: gguf.GGUFReader

    @property
    def block_key(self) -> str:
        return f"{self.arch}.block_count"


def open_source(path: Path) -> CutSource:
    """Read the target's header; refuse (saying why) an architecture that cannot be cut."""
    path = Path(path)
    if not path.is_file():
        raise ModelFileError(f"model file not found: {path}")
    try:
        reader = gguf.GGUFReader(path, "r")
    except (ValueError, OSError) as e:
        raise ModelFileError(f"{path.name} is not a readable GGUF file: {e}") from e
    arch = _value(reader, "general.architecture")
    if not isinstance(arch, str):
        raise CutError(f"{path.name} names no architecture (general.architecture)")
    if arch not in CUTTABLE:
        why = WHY_NOT.get(arch, "its blocks are not known to be independent of their index")
        raise CutError(f"cannot make a layer-skip draft of a {arch} model: {why} "
                       f"(cuttable: {', '.join(sorted(CUTTABLE))})")
    n = _value(reader, f"{arch}.block_count")
    if not isinstance(n, int) or n < 1:
        raise CutError(f"{path.name} has no {arch}.block_count")
    for t in reader.tensors:
        m = _BLOCK.match(t.name)
        if t.name.startswith("blk.") and (m is None or int(m.group(1)) >= n):
            raise CutError(f"{path.name}: tensor {t.name} is not one of its {n} blocks")
    return CutSource(path, arch, int(n), reader)


def _value(reader: gguf.GGUFReader, key: str) -> Any:
    f = reader.fields.get(key)
    return None if f is None else f.contents()


def parse_layers(text: str, n_layer: int) -> tuple[int, ...]:
    """``"0-11,14,20-"`` → the kept block indices (sorted); refuses empty, out of range, twice."""
    kept: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        m = re.fullmatch(r"(\d*)\s*-\s*(\d*)|(\d+)", part)
        if m is None:
            raise CutError(f"'{part}' is not a block number or range (e.g. 0-11,14,20-)")
        if m.group(3) is not None:
            kept.append(int(m.group(3)))
        else:
            lo = int(m.group(1)) if m.group(1) else 0
            hi = int(m.group(2)) if m.group(2) else n_layer - 1
            if hi < lo:
                raise CutError(f"the range '{part}' is empty")
            kept.extend(range(lo, hi + 1))
    return check_layers(kept, n_layer)


def check_layers(kept: Sequence[int], n_layer: int) -> tuple[int, ...]:
    if not kept:
        raise CutError("a layer-skip draft needs at least one block (this subset keeps none)")
    bad = [i for i in kept if not 0 <= i < n_layer]
    if bad:
        raise CutError(f"block {bad[0]} does not exist (the model has blocks 0-{n_layer - 1})")
    if len(set(kept)) != len(kept):
        twice = next(i for i in kept if list(kept).count(i) > 1)
        raise CutError(f"block {twice} is named twice")
    return tuple(sorted(kept))


def write_cut(src: CutSource, dest: Path, kept: Sequence[int],
              cancel: Callable[[], bool] | None = None) -> int:
    """Write the cut keeping blocks ``kept`` to ``dest``; returns its size in bytes."""
    kept = check_layers(list(kept), src.n_layer)
    new_index = {old: new for new, old in enumerate(kept)}
    dest = Path(dest)
    tmp = dest.with_name(dest.name + ".part")
    reader = src.reader
    try:
        writer = gguf.GGUFWriter(str(tmp), src.arch, endianess=reader.endianess)
        for field in reader.fields.values():
            if field.name == "general.architecture" or field.name.startswith("GGUF.") \
                    or field.name == LAYERS_KEY:
                continue
            vtype = field.types[0]
            sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
            value = field.contents()
            if field.name == src.block_key:
                value = len(kept)
            elif (sub is not None and field.name.startswith(src.arch + ".")
                  and isinstance(value, list) and len(value) == src.n_layer):
                value = [value[i] for i in kept]  # a per-block array (heads per layer, …)
            writer.add_key_value(field.name, value, vtype, sub_type=sub)
        writer.add_key_value(LAYERS_KEY, list(kept), gguf.GGUFValueType.ARRAY,
                             sub_type=gguf.GGUFValueType.UINT32)
        tensors = []
        for t in reader.tensors:
            m = _BLOCK.match(t.name)
            name = t.name
            if m is not None:
                old = int(m.group(1))
                if old not in new_index:
                    continue
                name = f"blk.{new_index[old]}.{m.group(2)}"
            tensors.append(t)
            writer.add_tensor_info(name, t.data.shape, t.data.dtype, t.data.nbytes,
                                   t.tensor_type)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for t in tensors:
            if cancel is not None and cancel():
                raise SpecchatError("cancelled")
            writer.write_tensor_data(t.data, tensor_endianess=reader.endianess)
        writer.close()
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return dest.stat().st_size


def kept_layers(path: Path) -> tuple[int, ...] | None:
    """The target blocks a cut file holds (None: not a layer-skip draft)."""
    reader = gguf.GGUFReader(Path(path), "r")
    v = _value(reader, LAYERS_KEY)
    return tuple(int(x) for x in v) if isinstance(v, list) else None
