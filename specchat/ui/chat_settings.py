"""What the settings screen edits, and how it maps to the user's config file. No Textual here.

γ (the draft length) has three modes: ``pair`` (the catalog's recommended γ for the pair),
``fixed`` (a number the user chose) and ``auto`` (tuned while generating). The config file
stores them as ``"pair"``, an integer, or ``"auto"``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from specchat.config import UserConfig
from specchat.engine.drafters import parse_names
from specchat.engine.sampling import SamplerSettings
from specchat.errors import SpecchatError

GammaMode = Literal["pair", "fixed", "auto"]
# What drafts, as the settings screen offers it: value (the config's ``drafter``) → label.
DRAFTER_CHOICES = {
    "model": "the draft model",
    "ngram,model": "n-gram lookup, then the draft model",
    "tree": "a token tree from the draft model",
    "ngram": "n-gram lookup only",
    "layerskip": "the target's own blocks, some skipped (models self-draft --layers)",
}
DEFAULT_GAMMA = 4  # when neither the user nor the pair names one
MAX_GAMMA = 32


@dataclass(frozen=True)
class ChatSettings:
    system_prompt: str = UserConfig.system_prompt
    sampling: SamplerSettings = field(default_factory=SamplerSettings)
    gamma_mode: GammaMode = "pair"
    gamma: int = DEFAULT_GAMMA  # the fixed value (also shown for "pair")
    drafter: str = "model"  # one of DRAFTER_CHOICES (or any drafter names, comma-separated)

    @classmethod
    def from_config(cls, cfg: UserConfig, pair_gamma: int | None = None) -> ChatSettings:
        if cfg.gamma == "auto":
            mode: GammaMode = "auto"
            gamma = pair_gamma or DEFAULT_GAMMA
        elif isinstance(cfg.gamma, int):
            mode, gamma = "fixed", cfg.gamma
        else:
            mode, gamma = "pair", pair_gamma or DEFAULT_GAMMA
        drafter = cfg.drafter or ("ngram,model" if cfg.ngram else "model")  # the old key too
        return cls(cfg.system_prompt, cfg.sampling, mode, gamma, drafter)

    def to_config(self, cfg: UserConfig) -> UserConfig:
        gamma: int | str = {"pair": "pair", "auto": "auto"}.get(self.gamma_mode, self.gamma)
        return cfg.with_(system_prompt=self.system_prompt, sampling=self.sampling, gamma=gamma,
                         drafter=self.drafter, ngram=False)

    def with_(self, **changes: Any) -> ChatSettings:
        return replace(self, **changes)

    @property
    def gamma_label(self) -> str:
        """How the stats bar names the γ mode."""
        return {"pair": "pair", "fixed": "fixed", "auto": "auto"}[self.gamma_mode]


def parse_settings(system_prompt: str, temperature: str, top_p: str, top_k: str, min_p: str,
                   max_tokens: str, seed: str, gamma_mode: str, gamma: str, drafter: str,
                   base: SamplerSettings) -> ChatSettings:
    """Build settings from the form's text fields; raise ValueError with a one-line reason."""

    def number(label: str, text: str, kind: type) -> Any:
        try:
            return kind(text.strip())
        except ValueError:
            raise ValueError(f"{label}: '{text.strip()}' is not a "
                             f"{'whole number' if kind is int else 'number'}") from None

    seed_value = None if not seed.strip() else number("seed", seed, int)
    sampling = base.with_(
        temperature=number("temperature", temperature, float),
        top_p=number("top-p", top_p, float), top_k=number("top-k", top_k, int),
        min_p=number("min-p", min_p, float), max_tokens=number("max tokens", max_tokens, int),
        seed=seed_value,
    ).validate()
    if gamma_mode not in ("pair", "fixed", "auto"):
        raise ValueError(f"γ mode must be pair, fixed or auto, not {gamma_mode!r}")
    g = number("γ", gamma, int)
    if not 0 <= g <= MAX_GAMMA:  # the config file's range; 0 = no drafting
        raise ValueError(f"γ must be between 0 and {MAX_GAMMA}")
    if drafter not in DRAFTER_CHOICES:
        try:
            drafter = ",".join(parse_names(drafter))
        except SpecchatError as e:
            raise ValueError(f"drafter: {e}") from None
    return ChatSettings(system_prompt, sampling, gamma_mode, g, drafter)  # type: ignore[arg-type]
