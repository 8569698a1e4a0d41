"""What the settings screen edits, and how it maps to the user's config file. No Textual here.

γ (the draft length) has four modes, those of :class:`specchat.engine.policy.gamma.GammaSetting`:
``plan`` (the planner: chain, tree or plain each step, from measured costs — the default),
``auto`` (a chain length tuned while generating), ``pair`` (the pair's calibrated γ) and
``fixed`` (a number the user chose). The config file stores them as ``"plan"``, ``"auto"``,
``"pair"`` or an integer.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from specchat.config import UserConfig
from specchat.engine.decode.registry import parse_names
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.policy.gamma import GAMMA_DEFAULT, GAMMA_KINDS, GammaKind, GammaSetting, parse_gamma
from specchat.errors import SpecchatError
from specchat.runtime.decoders import DEFAULT_PAIR_DRAFTERS

GammaMode = GammaKind
# What drafts, as the settings screen offers it: value (the config's ``drafter``) → label.
DRAFTER_CHOICES = {
    "model": "the draft model",
    "model,ngram": "the draft model or n-gram lookup, whichever pays here (the planner)",
    "ngram,model": "n-gram lookup where it matches, else the draft model, as each pays (default)",
    "tree": "a token tree from the draft model",
    "ngram": "n-gram lookup only",
    "layerskip": "the target's own blocks, some skipped (models self-draft --layers)",
    "lookahead": "Lookahead decoding: the target guesses ahead itself (no draft model)",
    "medusa": "Medusa heads on the target's hidden state (models train-heads)",
    "kangaroo": "the target's first blocks + a trained adapter (models train-heads --kind kangaroo)",
    "mtp": "the target's own MTP heads, when the model ships them",
}


@dataclass(frozen=True)
class ChatSettings:
    system_prompt: str = UserConfig.system_prompt
    sampling: SamplerSettings = field(default_factory=SamplerSettings)
    gamma_mode: GammaMode = "plan"
    gamma: int = GAMMA_DEFAULT  # the fixed value (also shown for the other modes)
    # One of DRAFTER_CHOICES (or any drafter names, comma-separated).
    drafter: str = ",".join(DEFAULT_PAIR_DRAFTERS)
    # The prediction drafter is offered each message's attached files (the chat's decoder;
    # not a setting of the config file). A race has no files: its decoder goes without.
    predicted_outputs: bool = True

    @classmethod
    def from_config(cls, cfg: UserConfig, pair_gamma: int | None = None) -> ChatSettings:
        g = cfg.gamma
        shown = g.n if g.kind == "fixed" else (pair_gamma if pair_gamma is not None
                                               else GAMMA_DEFAULT)
        drafter = cfg.drafter or ("ngram,model" if cfg.ngram else ChatSettings.drafter)  # old key
        return cls(cfg.system_prompt, cfg.sampling, g.kind, shown, drafter)

    @property
    def gamma_setting(self) -> GammaSetting:
        return GammaSetting(self.gamma_mode, self.gamma)

    def to_config(self, cfg: UserConfig) -> UserConfig:
        return cfg.with_(system_prompt=self.system_prompt, sampling=self.sampling,
                         gamma=self.gamma_setting, drafter=self.drafter, ngram=False)

    def with_(self, **changes: Any) -> ChatSettings:
        return replace(self, **changes)

    @property
    def gamma_label(self) -> str:
        """How the stats bar names the γ setting: the mode, with its number where it has one
        ("fixed 4", "pair 3", "plan", "auto")."""
        return f"{self.gamma_mode} {self.gamma}" if self.gamma_mode in ("fixed", "pair") \
            else self.gamma_mode


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
    if gamma_mode not in GAMMA_KINDS:
        raise ValueError(f"γ mode must be {', '.join(GAMMA_KINDS)}, not {gamma_mode!r}")
    g = parse_gamma(number("γ", gamma, int)).n  # the config file's range; 0 = no drafting
    if drafter not in DRAFTER_CHOICES:
        try:
            drafter = ",".join(parse_names(drafter))
        except SpecchatError as e:
            raise ValueError(f"drafter: {e}") from None
    return ChatSettings(system_prompt, sampling, gamma_mode, g, drafter)  # type: ignore[arg-type]
