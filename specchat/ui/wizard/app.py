"""``specchat models wizard``: a minimal app hosting the pairing wizard on its own.

The chat app opens the same :class:`WizardScreen`; this host lets a person pair models now.
"""

from __future__ import annotations

import sys

from textual.app import App

from specchat.models.calibration import CalibrationOptions
from specchat.models.catalog import PairEntry
from specchat.paths import AppPaths
from specchat.ui.safe_content import guard_textual_content
from specchat.ui.wizard.screen import WizardScreen


class WizardApp(App[PairEntry | None]):
    TITLE = "specchat — pair a draft with a target"

    def __init__(self, paths: AppPaths, calibration: CalibrationOptions | None = None) -> None:
        super().__init__()
        guard_textual_content()  # file names and metadata are shown, never obeyed
        self.paths = paths
        self.calibration = calibration

    def on_mount(self) -> None:
        self.push_screen(WizardScreen(self.paths, calibration=self.calibration), self.exit)


def run_wizard_app(paths: AppPaths) -> int:
    from specchat.models.catalog import load_catalog

    load_catalog(paths.user_catalog)  # a broken catalog is a one-line error before the UI
    pair = WizardApp(paths).run()
    if pair is None:
        sys.stdout.write("wizard cancelled: nothing saved\n")
        return 1
    gamma = f" (γ={pair.gamma})" if pair.gamma is not None else ""
    sys.stdout.write(f"saved pair '{pair.id}': {pair.target} ← {pair.draft}{gamma} in "
                     f"{paths.user_catalog}\nchat with it: specchat --pair {pair.id}\n")
    return 0
