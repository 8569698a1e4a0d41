"""Does a GGUF ship MTP (multi-token prediction, "NextN") layers, and can llama.cpp run them?

How llama.cpp stores them (``convert_hf_to_gguf.py`` and ``src/llama-model.cpp``): the key
``<arch>.nextn_predict_layers`` says how many there are, ``<arch>.block_count`` counts them
with the trunk's blocks, and they are the *last* blocks: ``blk.N.*`` for
N ≥ block_count − nextn_predict_layers, each an ordinary block of the architecture plus the
MTP parts ``blk.N.nextn.{eh_proj, enorm, hnorm, shared_head_norm, …}`` (eh_proj mixes the
embedding of the next token with the trunk's hidden state). Conversions that drop the layers
keep the key but not the tensors. llama.cpp 0.3.36 loads them only when asked
(``llama_model_params.load_mtp``) and runs them for the architectures in :data:`RUNNABLE` (the
classes with an MTP graph in its library); Gemma 4's MTP is a separate file of architecture
``gemma4-assistant`` instead.

Read from the header alone (:mod:`specchat.formats.gguf_file`), so a model can be described
before it is downloaded in full or loaded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from specchat.formats.gguf_checks import split_index
from specchat.formats.gguf_file import GgufHeader, read_header

# Architectures llama.cpp 0.3.36 builds an MTP graph for (llama_model_<arch>::graph_mtp).
RUNNABLE = frozenset({"qwen35", "qwen35moe", "qwen3next", "glm4moe", "glm-dsa", "deepseek2",
                      "deepseek32", "deepseek4", "mimo2", "step35", "hy_v3", "cohere2moe",
                      "bailingmoe3", "nemotron_h_moe"})
ASSISTANT_ARCHS = frozenset({"gemma4-assistant"})  # an MTP head shipped as its own file
_NEXTN = re.compile(r"^blk\.(\d+)\.nextn\.")


@dataclass(frozen=True)
class MtpHeads:
    """What a file says about its MTP layers."""

    arch: str
    layers: int  # ``<arch>.nextn_predict_layers`` (0 when only the tensors say so)
    blocks: tuple[int, ...]  # blocks holding nextn tensors, in the tensors this header lists
    whole_file: bool  # the header lists every tensor (not one part of a split file)
    separate: bool = False  # a separate MTP head file (gemma4-assistant), not a target's own

    @property
    def count(self) -> int:
        return self.layers or len(self.blocks)

    @property
    def stripped(self) -> bool:
        """The metadata names MTP layers but the file holds none of their tensors."""
        return self.layers > 0 and not self.blocks and self.whole_file

    @property
    def runnable(self) -> bool:
        """``--drafter mtp`` can use them (this llama.cpp runs them, and they are there)."""
        return self.arch in RUNNABLE and not self.stripped and not self.separate

    def line(self) -> str:
        """One line for ``models check`` and the wizard."""
        n = self.count
        layers = f"{n} layer{'s' if n != 1 else ''}"
        if self.separate:
            return ("is an MTP draft head for Gemma 4 (a file of its own): specchat cannot "
                    "drive it yet")
        if self.stripped:
            return (f"its metadata names {layers} of MTP heads, but the file holds none (they "
                    "were left out when it was converted): no --drafter mtp")
        if self.arch not in RUNNABLE:
            return (f"has MTP heads ({layers}), but llama.cpp does not run them for {self.arch} "
                    "models: no --drafter mtp")
        return f"has MTP heads ({layers}): can self-draft with --drafter mtp"

    def why_not(self, name: str) -> str | None:
        """Why ``--drafter mtp`` cannot use this file (None: it can)."""
        if self.runnable:
            return None
        return f"{name} {self.line()}"


def detect(header: GgufHeader) -> MtpHeads | None:
    """The file's MTP layers from its header (None: it has none)."""
    arch = header.architecture
    if arch in ASSISTANT_ARCHS:
        return MtpHeads(arch, 1, (), True, separate=True)
    raw = header.arch_value("nextn_predict_layers")
    layers = raw if isinstance(raw, int) and not isinstance(raw, bool) and raw > 0 else 0
    blocks = sorted({int(m.group(1)) for t in header.tensors if (m := _NEXTN.match(t.name))})
    if not layers and not blocks:
        return None
    return MtpHeads(arch, layers, tuple(blocks), split_index(header.path.name) is None)


def detect_path(path: Path | str) -> MtpHeads | None:
    """:func:`detect` on a file (its first part, for a split file)."""
    return detect(read_header(Path(path), token_texts=False))


def no_heads(name: str) -> str:
    """The message for ``--drafter mtp`` on a model without MTP layers."""
    return (f"{name} has no MTP heads (no nextn layers in the file): --drafter mtp needs a "
            "model that ships them, such as a Qwen3.5/3.6 or GLM-4.5 GGUF converted with its "
            "MTP layers")
