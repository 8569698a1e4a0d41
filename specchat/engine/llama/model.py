"""A loaded GGUF model on llama.cpp: its file checked and loaded with the kernels that work on
this machine, its vocabulary, tokenizer and token pieces. Its KV caches are contexts
(:mod:`.context`)."""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Callable, Sequence
from pathlib import Path

import llama_cpp

from specchat.engine.llama import amx, rpc
from specchat.engine.llama.cpu_kernels import Kernels
from specchat.engine.llama.llama_lib import (
    capture_log,
    clear_log,
    ensure_backend,
    last_error,
    supports_gpu_offload,
)
from specchat.engine.llama.load_report import LoadReport
from specchat.engine.llama.model_settings import ModelSettings
from specchat.errors import ModelFileError
from specchat.formats.gguf_checks import validate
from specchat.formats.gguf_file import GgufHeader


class LlamaModel:
    """Weights and vocabulary of one GGUF file."""

    def __init__(self, path: Path | str, settings: ModelSettings = ModelSettings(),
                 progress: Callable[[float], None] | None = None) -> None:
        """``progress``: called from this thread with the share of the weights loaded so far
        (0 … 1), as llama.cpp reports it while it reads the tensors."""
        ensure_backend()
        self.path = Path(path).expanduser()
        self.header: GgufHeader = validate(self.path)
        self.settings = settings
        params = llama_cpp.llama_model_default_params()
        if settings.rpc:
            rpc.connect(settings.rpc)  # before the offload question: the servers are devices
        # Held in a local for the whole load. Only the model that names servers uses them.
        devices = rpc.device_list(settings.rpc)
        if devices is not None:
            params.devices = ctypes.cast(devices, ctypes.c_void_p)
        params.n_gpu_layers = settings.n_gpu_layers if supports_gpu_offload() else 0
        if settings.main_gpu is not None:
            params.split_mode = llama_cpp.LLAMA_SPLIT_MODE_NONE
            params.main_gpu = settings.main_gpu
        # (llama_model_params has no use_mmap: the load mode says it. AUTO maps the file where
        # every device can read mapped memory, as llama-server does by default.)
        params.load_mode = (llama_cpp.LLAMA_LOAD_MODE_AUTO if settings.use_mmap
                            else llama_cpp.LLAMA_LOAD_MODE_NONE)
        params.vocab_only = settings.vocab_only
        callback = None
        if progress is not None:
            def on_progress(share: float, _user_data: object) -> bool:
                with contextlib.suppress(Exception):  # a report that fails never stops a load
                    progress(min(1.0, max(0.0, float(share))))
                return True  # go on loading

            # Held in a local for the whole load: ctypes must not free it while C calls it.
            callback = llama_cpp.llama_progress_callback(on_progress)
            params.progress_callback = callback
        params.load_mtp = settings.load_mtp
        # The CPU kernels the weights run on (see cpu_kernels): llama.cpp's own choice, or its
        # weight repacking without the AMX kernels where those crash, or the plain kernels.
        self.kernels: Kernels | None = None
        overrides = None  # held in a local for the whole load: llama.cpp reads its strings
        if not settings.vocab_only:
            self.kernels = amx.kernels_for(self.path, self.header, params.n_gpu_layers)
            params.use_extra_bufts = self.kernels.use_extra_bufts
            overrides = self.kernels.overrides()
            if overrides is not None:
                params.tensor_buft_overrides = overrides.pointer
        clear_log()
        with capture_log() as lines:
            ptr = llama_cpp.llama_model_load_from_file(str(self.path).encode(), params)
        del overrides
        if not ptr:
            why = last_error() or "no reason given"
            raise ModelFileError(f"llama.cpp could not load {self.path.name}: {why}")
        self.ptr = ptr
        self.n_layer: int = llama_cpp.llama_model_n_layer(ptr)
        # Where the weights went, as llama.cpp reported it (offloaded layers, buffers per device).
        self.load_report = LoadReport.parse(lines)
        self.vocab = llama_cpp.llama_model_get_vocab(ptr)
        self.n_vocab: int = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self.n_ctx_train: int = llama_cpp.llama_model_n_ctx_train(ptr)
        self.n_params: int = llama_cpp.llama_model_n_params(ptr)
        self.size_bytes: int = llama_cpp.llama_model_size(ptr)
        self.bos: int = llama_cpp.llama_vocab_bos(self.vocab)
        self.eos: int = llama_cpp.llama_vocab_eos(self.vocab)
        self.add_bos: bool = bool(llama_cpp.llama_vocab_get_add_bos(self.vocab))
        self._pieces: dict[int, bytes] = {}
        self._eog_ids = frozenset(
            t for t in self._special_candidates() if llama_cpp.llama_vocab_is_eog(self.vocab, t)
        )
        tmpl = llama_cpp.llama_model_chat_template(ptr, None)
        self.chat_template: str | None = tmpl.decode("utf-8", errors="replace") if tmpl else None

    def _special_candidates(self) -> list[int]:
        # End-of-generation tokens are control or user-defined tokens (plus EOS/EOT themselves).
        ids = []
        for t in range(self.n_vocab):
            attr = llama_cpp.llama_vocab_get_attr(self.vocab, t)
            special = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED
            if attr & special:
                ids.append(t)
        for t in (self.eos, llama_cpp.llama_vocab_eot(self.vocab)):
            if t >= 0:
                ids.append(t)
        return ids

    @property
    def name(self) -> str:
        return str(self.header.metadata.get("general.name") or self.path.stem)

    def is_eog(self, token: int) -> bool:
        return token in self._eog_ids

    def tokenize(self, text: str, *, add_special: bool = False,
                 parse_special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        n_max = len(data) + 8
        buf = (llama_cpp.llama_token * n_max)()
        n = llama_cpp.llama_tokenize(self.vocab, data, len(data), buf, n_max, add_special,
                                     parse_special)
        if n < 0:
            n_max = -n
            buf = (llama_cpp.llama_token * n_max)()
            n = llama_cpp.llama_tokenize(self.vocab, data, len(data), buf, n_max, add_special,
                                         parse_special)
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        """The bytes a token adds to the text (special tokens render as nothing)."""
        cached = self._pieces.get(token)
        if cached is None:
            buf = ctypes.create_string_buffer(64)
            n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, 64, 0, False)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, -n, 0, False)
            cached = buf.raw[:n]
            self._pieces[token] = cached
        return cached

    def token_text(self, token: int) -> str:
        """The vocabulary entry itself (as stored in the GGUF), for comparing vocabularies."""
        return self.token_bytes(token).decode("utf-8", errors="replace")

    def token_bytes(self, token: int) -> bytes:
        """The vocabulary entry's bytes: compared without decoding (two models' 150k entries
        each, at every pair load)."""
        return llama_cpp.llama_vocab_get_text(self.vocab, token) or b""

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", errors="replace")

    def close(self) -> None:
        if getattr(self, "ptr", None):  # FFI: none when __init__ failed before llama.cpp made one
            llama_cpp.llama_model_free(self.ptr)
            self.ptr = None

    def __del__(self) -> None:
        self.close()
