"""The first run's welcome: the real starter pair or the toy demo, chosen for this machine.

``qwen-coder`` gives real answers (1.6 GB from PyPI); ``demo`` is a toy model for trying the
interface. :func:`recommend` reads the machine (free memory, cores, a GPU, free disk) and says
which fits and why, in plain words; :class:`WelcomeStep` offers both. Esc keeps the old
behaviour: the demo pair.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Button, Static

from specchat.models.catalog import Catalog, DerivedSource
from specchat.models.families import params_value
from specchat.models.progress import format_bytes
from specchat.models.resolver import ModelResolver

STARTER = "qwen-coder"
DEMO = "demo"
# What the starter pair needs in memory besides its files: contexts, KV caches, the app.
RUN_OVERHEAD = 700 << 20


@dataclass(frozen=True)
class Machine:
    memory_free: int | None  # bytes a new allocation can get
    cores: int
    gpu: str | None  # the first GPU's description, if the build can use one
    disk_free: int | None  # bytes free where models are stored


@dataclass(frozen=True)
class PairSize:
    pair: str
    download: int  # bytes still to fetch
    on_disk: int  # bytes it takes (or will take) on disk
    present: bool  # every file already on disk


@dataclass(frozen=True)
class Advice:
    pair: str  # the one to recommend
    why: str


def read_machine(resolver: ModelResolver) -> Machine:
    """This computer, as the engine sees it (never raises: unknowns stay None)."""
    try:
        from specchat.engine.llama.hardware import gpu_devices, host_memory

        mem = host_memory().available
        gpus = gpu_devices()
        gpu = gpus[0].description if gpus else None
    except Exception:  # a build without the device API: say less, never fail the welcome
        mem, gpu = None, None
    try:
        folder = resolver.paths.models_dir
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        disk: int | None = shutil.disk_usage(folder).free
    except OSError:
        disk = None
    return Machine(mem, os.cpu_count() or 1, gpu, disk)


def pair_size(resolver: ModelResolver, catalog: Catalog, pair_id: str) -> PairSize:
    pair = catalog.pair(pair_id)
    seen: set[str] = set()
    todo = [pair.target, pair.draft]
    download = disk = 0
    present = True
    while todo:
        mid = todo.pop()
        if mid in seen or mid not in catalog.models:
            continue
        seen.add(mid)
        entry = catalog.models[mid]
        st = resolver.state(entry)
        if st.present:
            disk += st.size
            continue
        if mid in (pair.target, pair.draft):
            present = False
        src = entry.source
        if isinstance(src, DerivedSource):
            params = params_value(entry.params)
            if params is not None:
                from specchat.models.quantize import estimated_size

                disk += estimated_size(int(params), src.quant)
            todo.append(src.base)
        else:
            size = entry.size or 0
            download += size
            disk += size
    return PairSize(pair_id, download, disk, present)


def recommend(machine: Machine, starter: PairSize) -> Advice:
    """qwen-coder when it fits in memory and on disk; else the demo, saying what is short."""
    need_mem = starter.on_disk + RUN_OVERHEAD
    if machine.memory_free is not None and machine.memory_free < need_mem:
        return Advice(DEMO, f"this computer has {format_bytes(machine.memory_free)} of memory "
                      f"free and {STARTER} needs about {format_bytes(need_mem)}")
    if (not starter.present and machine.disk_free is not None
            and machine.disk_free < starter.download + (64 << 20)):
        return Advice(DEMO, f"{STARTER} needs {format_bytes(starter.download)} of disk and "
                      f"{format_bytes(machine.disk_free)} is free")
    parts = []
    if machine.memory_free is not None:
        parts.append(f"{format_bytes(machine.memory_free)} of memory free (it needs about "
                     f"{format_bytes(need_mem)})")
    where = f"a GPU ({machine.gpu})" if machine.gpu else (
        f"{machine.cores} CPU cores and no GPU: replies come at reading speed")
    parts.append(where)
    return Advice(STARTER, "this computer has " + ", ".join(parts))


class WelcomeStep(Vertical):
    """Two buttons (qwen-coder, demo), the recommendation, and the way to the full wizard."""

    DEFAULT_CSS = """
    WelcomeStep { height: 1fr; }
    WelcomeStep Button { width: 100%; margin: 0 0 1 0; }
    WelcomeStep #welcome-advice { margin: 0 0 1 0; min-height: 2; }  /* no jump when it fills in */
    WelcomeStep Horizontal { height: auto; }
    """

    @dataclass
    class Chosen(Message):
        choice: str  # "qwen-coder" | "demo" | "pair" (the full wizard)

    def __init__(self) -> None:
        super().__init__(id="step-welcome")

    def compose(self) -> ComposeResult:
        yield Static("Welcome to specchat. Which models shall we start with?", classes="hint")
        yield Button(f"{STARTER}: real answers to coding and everyday questions", id="welcome-qwen",
                     variant="primary")
        yield Button(f"{DEMO}: a toy model for trying the interface", id="welcome-demo")
        yield Static("qwen-coder writes and explains code and answers everyday questions; the "
                     "demo's answers are often nonsense.", classes="hint")
        yield Static("Reading this computer…", id="welcome-advice")
        yield Button("Pair other models…", id="welcome-pair")
        yield Static("Esc starts on the demo.", classes="hint")

    def show(self, machine: Machine, starter: PairSize, demo: PairSize) -> Advice:
        advice = recommend(machine, starter)
        q = self.query_one("#welcome-qwen", Button)
        d = self.query_one("#welcome-demo", Button)
        q.label = f"{STARTER}: real answers (Qwen2.5 Coder 1.5B) · " + _size_words(starter)
        d.label = f"{DEMO}: a toy for trying the interface (SmolLM2 135M) · " + _size_words(demo)
        mark = q if advice.pair == STARTER else d
        other = d if mark is q else q
        mark.variant, other.variant = "primary", "default"
        self.query_one("#welcome-advice", Static).update(Text.assemble(
            ("Recommended here: ", "bold"), (advice.pair, "bold"), f" — {advice.why}."))
        mark.focus()
        return advice

    @on(Button.Pressed, "#welcome-qwen")
    def _qwen(self) -> None:
        self.post_message(self.Chosen(STARTER))

    @on(Button.Pressed, "#welcome-demo")
    def _demo(self) -> None:
        self.post_message(self.Chosen(DEMO))

    @on(Button.Pressed, "#welcome-pair")
    def _pair(self) -> None:
        self.post_message(self.Chosen("pair"))


def demo_words(resolver: ModelResolver, catalog: Catalog) -> str:
    """Where the demo pair's files stand, for the first run's intro: ", already on this
    computer (600 MB)" or ", about 94 MB from PyPI, ~664 MB on disk once made"; "" when
    the catalog has no demo."""
    if DEMO not in catalog.pairs:
        return ""
    p = pair_size(resolver, catalog, DEMO)
    if p.present:
        return f", already on this computer ({format_bytes(p.on_disk)})"
    return f", about {format_bytes(p.download)} to fetch, ~{format_bytes(p.on_disk)} on disk " \
        "once made"


def _size_words(p: PairSize) -> str:
    if p.present:
        return f"already on disk ({format_bytes(p.on_disk)})"
    if p.download and p.on_disk > p.download * 1.2:
        return f"{format_bytes(p.download)} download, ~{format_bytes(p.on_disk)} on disk"
    return f"{format_bytes(p.download)} download"
