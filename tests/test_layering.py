"""The layer order of ARCHITECTURE.md, enforced: import-linter's contracts (pyproject.toml), no
import cycles between or inside packages, and no UI toolkit outside the UI."""

from __future__ import annotations

import ast
import os
import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path

import specchat

ROOT = Path(__file__).resolve().parent.parent
# The modules that start the app: they import the UI, and so the toolkit, on purpose.
LAUNCHERS = ("specchat.cli.app",)


LINT = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """import-linter over the ``specchat`` package under ``root`` (not the installed one)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-c", LINT, "--no-cache", "--config", str(root / "pyproject.toml")]
    return subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)


def test_import_contracts_are_kept() -> None:
    out = lint_imports(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


def test_import_contracts_catch_an_upward_import_and_a_cycle(tmp_path: Path) -> None:
    # The control: the same contracts over a copy with one upward import and one cycle.
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    shutil.copytree(ROOT / "specchat", tmp_path / "specchat",
                    ignore=shutil.ignore_patterns("__pycache__"))
    plain = tmp_path / "specchat/engine/decode/plain.py"
    plain.write_text(plain.read_text() + "\nimport specchat.runtime\n")
    paths = tmp_path / "specchat/paths.py"  # the leaf layer importing the engine
    paths.write_text(paths.read_text() + "\nimport specchat.engine.decode.sampling\n")
    (tmp_path / "specchat/store/cycle_a.py").write_text("import specchat.store.cycle_b\n")
    (tmp_path / "specchat/store/cycle_b.py").write_text("import specchat.store.cycle_a\n")
    out = lint_imports(tmp_path).stdout
    assert "Layers: each imports only from the layers below it BROKEN" in out
    assert "specchat.engine.decode.plain -> specchat.runtime" in out
    assert "specchat.paths -> specchat.engine.decode.sampling" in out
    assert "No import cycles between sibling packages or modules, at any depth BROKEN" in out


def module_imports(root: Path) -> dict[str, set[str]]:
    """Each module's imports of other ``specchat`` modules, module level only: imports inside
    functions and under ``if TYPE_CHECKING:`` run later or never, so they make no import cycle."""
    files = {}
    for f in (root / "specchat").rglob("*.py"):
        name = ".".join(f.relative_to(root).with_suffix("").parts)
        files[name.removesuffix(".__init__")] = f

    def deps(tree: ast.Module) -> set[str]:
        out: set[str] = set()

        def walk(nodes: list[ast.stmt]) -> None:
            for n in nodes:
                if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test):
                    continue
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                if isinstance(n, ast.Import):
                    out.update(a.name for a in n.names)
                elif isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
                    out.add(n.module)
                    out.update(f"{n.module}.{a.name}" for a in n.names)
                walk([c for c in ast.iter_child_nodes(n) if isinstance(c, ast.stmt)])

        walk(tree.body)
        return out

    return {m: {d for d in deps(ast.parse(f.read_text(encoding="utf-8"))) if d in files} - {m}
            for m, f in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while (w := stack.pop()) != v:
                comp.append(w)
            if comp:
                found.append(sorted([v, *comp]))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def import_cycles(root: Path) -> list[str]:
    mods = module_imports(root)
    package = {m: ".".join(m.split(".")[:2]) for m in mods}  # specchat.engine, specchat.errors...
    between: dict[str, set[str]] = {}
    for m, ds in mods.items():
        between.setdefault(package[m], set()).update(package[d] for d in ds if package[d] != package[m])
    return ([f"between packages: {' <-> '.join(c)}" for c in cycles(between)]
            + [f"between modules: {' <-> '.join(c)}" for c in cycles(mods)])


def test_no_import_cycles_between_or_inside_packages() -> None:
    assert import_cycles(ROOT) == []


def test_the_cycle_finder_lists_a_cycle_between_packages_and_inside_one(tmp_path: Path) -> None:
    for name, text in {"__init__": "", "engine/__init__": "", "engine/a": "import specchat.engine.b\n",
                       "engine/b": "def f() -> None:\n    import specchat.engine.a\n",
                       "engine/c": "from specchat.engine import d\n",
                       "engine/d": "import specchat.engine.c\nimport specchat.models.m\n",
                       "models/__init__": "", "models/m": "from specchat.engine.a import x\n"}.items():
        (tmp_path / "specchat" / f"{name}.py").parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "specchat" / f"{name}.py").write_text(text)
    # a -> b only inside a function: no cycle there.
    assert import_cycles(tmp_path) == [
        "between packages: specchat.engine <-> specchat.models",
        "between modules: specchat.engine.c <-> specchat.engine.d",
    ]


def non_ui_modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(specchat.__path__, "specchat."):
        if info.name.startswith(("specchat.ui.", *LAUNCHERS)) or info.name.endswith("__main__"):
            continue
        names.append(info.name)
    return names


def test_non_ui_modules_do_not_import_textual() -> None:
    mods = non_ui_modules()
    assert "specchat.engine.decode.plain" in mods and "specchat.models.catalog" in mods
    names = {info.name for info in pkgutil.walk_packages(specchat.__path__, "specchat.")}
    assert set(LAUNCHERS) <= names  # an excluded module that no longer exists is a stale exclusion
    code = (
        "import importlib, sys\n"
        f"for m in {mods!r}:\n"
        "    importlib.import_module(m)\n"
        "bad = sorted(k for k in sys.modules if k == 'textual' or k.startswith('textual.'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"textual imported by a non-UI module: {out.stdout}"


def test_package_data_catalog_matches_top_level_file() -> None:
    top = ROOT / "models.yaml"
    from specchat.models.catalog import shipped_catalog_text

    assert top.read_text(encoding="utf-8") == shipped_catalog_text()
