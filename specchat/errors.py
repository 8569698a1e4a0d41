"""User-facing errors: each carries a one-line message that names the problem.

The CLI prints these without a traceback; the app shows them in a notice. Anything else that
escapes is a bug.
"""

from __future__ import annotations


class SpecchatError(Exception):
    """An error whose message is meant for the user, as is."""


class CatalogError(SpecchatError):
    """models.yaml (or the user's catalog) is malformed or names something unknown."""


class ModelFileError(SpecchatError):
    """A model file is missing, not GGUF, truncated or cannot be loaded."""


class FetchError(SpecchatError):
    """A model could not be fetched (no network, package missing, checksum mismatch)."""


class NoSpaceError(FetchError):
    """Not enough free disk for a fetch: no other source would fare better."""


class IncompatiblePairError(SpecchatError):
    """The draft model cannot draft for the target (vocabularies differ)."""


class ContextFullError(SpecchatError):
    """The prompt alone does not fit in the context window."""


class ConfigError(SpecchatError):
    """The user's config file is malformed."""


class NotEnoughMemoryError(SpecchatError):
    """A model or pair would not fit in free GPU or host memory with the settings asked for."""


class Cancelled(SpecchatError):
    """The user cancelled a long operation (download, quantization, calibration)."""


class StoreError(SpecchatError):
    """The chat database cannot be opened or written, is too new, or has no such chat.

    ``kind`` says what went wrong so the app can keep what was not saved and retry:
    ``full`` (disk full), ``locked`` (another program is writing), ``corrupt`` (a damaged
    file: ``specchat chats --repair``), ``readonly``, ``owned`` (the chat is open in another
    specchat), ``missing`` (no such chat) or ``other``.
    """

    def __init__(self, message: str, kind: str = "other") -> None:
        super().__init__(message)
        self.kind = kind


class BadLogitsError(SpecchatError):
    """A model produced NaN or infinite logits: its weights (or their quantization) are broken."""


class BusyError(SpecchatError):
    """Another specchat holds a shared file (a model being fetched, a settings file being
    written) and did not let go in time."""
