"""The pairing wizard: ``WizardScreen`` (a modal returning the saved ``PairEntry`` or None) and
``WizardApp``, a minimal host for ``specchat models wizard``."""

from specchat.ui.wizard.screen import WizardScreen

__all__ = ["WizardScreen"]
