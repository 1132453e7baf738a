"""The package layout is a one-way data path: no import cycles, no import from a lower layer up.

Every module of ``kimi_extract`` is assigned a layer in ``LAYERS`` below (a new module fails the
test until it is given one: placing it is a design decision). A module may import modules of its
own layer or lower ones; every import counts, including imports inside functions and under
``TYPE_CHECKING``. The simulator is an island: it may import only layer 0 and ``schema.dialect``,
and nothing outside it imports it except the top-level shells (``cli``, the package facade).

The graph is read from the source (``ast``), so it needs no import of the package.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "kimi_extract"
ROOT = Path(__file__).resolve().parents[2] / PACKAGE

#: Layer names, low -> high.
LAYER_NAMES = {
    0: "records and the Kimi profile",
    1: "schema / media (pure)",
    2: "http, and the settings below the run (config)",
    3: "run",
    4: "table",
    5: "pipeline (the machinery behind the facade)",
    6: "extractor (facade)",
    7: "accessor / dask / cli",
    8: "package facade",
}

#: Module (dotted, without the ``kimi_extract.`` prefix; "" is the package) -> layer.
LAYERS: dict[str, int] = {
    # 0: plain records every layer passes, the Kimi profile, token estimates
    "exceptions": 0,
    "records": 0,
    "kimi": 0,
    "tokens": 0,
    # the hook events (public) and the dispatcher that hands them out: every layer that
    # observes a run (the transport, the row runner, the scheduler) calls it
    "hooks": 0,
    "dispatch": 0,
    # attribute docstrings and the generated settings pages (the client's and the simulator's)
    "settings_docs": 0,
    # 1: pure transformations: the schema compiler and codec, media loading
    "schema": 1,
    "schema.codec": 1,
    "schema.compile": 1,
    "schema.compiled": 1,
    "schema.dialect": 1,
    "schema.dialect_base": 1,
    "schema.dialect_keywords": 1,
    "schema.dialect_refs": 1,
    "schema.gojson": 1,
    "schema.partial": 1,
    "schema.quotes": 1,
    "schema.source": 1,
    "media": 1,
    "media.chunks": 1,
    "media.documents": 1,
    "media.fetch": 1,
    "media.formats": 1,
    "media.parts": 1,
    "ground": 1,
    "ground.align": 1,
    "ground.calibrate": 1,
    "ground.dates": 1,
    "ground.forms": 1,
    "ground.match": 1,
    "ground.nearmiss": 1,
    "ground.normalize": 1,
    "ground.numbers": 1,
    "ground.search": 1,
    "ground.source": 1,
    "ground.work": 1,
    # 2: talking to the server
    "http": 2,
    "http.backends": 2,
    "http.clock": 2,
    "http.congestion": 2,
    "http.limiter": 2,
    "http.named": 2,
    "http.opening": 2,
    "http.pacing": 2,
    "http.routing": 2,
    "http.secret": 2,
    "http.shown": 2,
    "http.transport": 2,
    "http.wire": 2,
    # 2: the settings, below the run so the run takes them as they are (the transport takes
    # the Connection group); they import nothing from run/
    "config": 2,
    "config.core": 2,
    "config.docs": 2,
    "config.endpoint": 2,
    "config.fields": 2,
    "config.groups": 2,
    "config.location": 2,
    # 3: one row's conversation and many rows
    "run": 3,
    "run.budget": 3,
    "run.conversation": 3,
    "run.document_merge": 3,
    "run.documents": 3,
    "run.estimate": 3,
    "run.gc_scope": 3,
    "run.grounding": 3,
    "run.inputs": 3,
    "run.merge": 3,
    "run.merge_fields": 3,
    "run.passes": 3,
    "run.report": 3,
    "run.request": 3,
    "run.scheduler": 3,
    "run.settings": 3,
    "run.setup": 3,
    "run.store": 3,
    "run.store_base": 3,
    "run.store_postgres": 3,
    "run.store_sqlite": 3,
    "run.sync": 3,
    # 4: rows <-> DataFrames
    "table": 4,
    "table.columns": 4,
    "table.corrections": 4,
    "table.documents": 4,
    "table.explode": 4,
    "table.export": 4,
    "table.frame": 4,
    "table.plot": 4,
    "table.review": 4,
    "table.review_cards": 4,
    "table.review_check": 4,
    "table.review_edit": 4,
    "table.review_page": 4,
    "table.review_controls": 4,
    "table.review_script": 4,
    "table.review_sources": 4,
    "table.review_spans": 4,
    "table.review_types": 4,
    # 4: measuring quality (reads finished outputs: the table layer's columns)
    "quality": 4,
    "quality.assign": 4,
    "quality.bootstrap": 4,
    "quality.comparison": 4,
    "quality.evaluate": 4,
    "quality.fields": 4,
    "quality.html": 4,
    "quality.matching": 4,
    "quality.plot": 4,
    "quality.report": 4,
    "quality.score": 4,
    # 5: the pipelines behind the Extractor's entry points (run -> frames and files)
    "pipeline": 5,
    "pipeline.base": 5,
    "pipeline.documents": 5,
    "pipeline.output": 5,
    "pipeline.stream": 5,
    # 6..8
    "extractor": 6,
    "accessor": 7,
    "cluster": 7,
    "cluster_rate": 7,
    "cluster_budget": 7,
    "dask": 7,
    "explode": 7,  # the deprecated 0.1 path of table.explode
    "otel": 7,  # an add-on hook users import: OpenTelemetry spans and metrics from the events
    "testing": 7,  # fakes for users' tests: scripted HTTP replies, a virtual clock
    "cli": 7,
    "cli_io": 7,
    "cli_quality": 7,
    "quality.compare": 7,
    "store_cli": 7,
    "shared_simulator": 7,
    "": 8,
    "__main__": 8,
}

#: The local Kimi API: separate from the library's layers.
SIMULATOR = "simulator"
#: What the simulator may import besides itself: layer 0 and Kimi's schema dialect.
SIMULATOR_MAY_IMPORT = {"schema.dialect"} | {m for m, layer in LAYERS.items() if layer == 0}
#: Who may import the simulator: the shells that start it.
MAY_IMPORT_SIMULATOR = {"cli", "cli_quality", "shared_simulator", ""}


def _modules() -> dict[str, Path]:
    """Dotted name (without the package prefix) -> file, for every module of the package."""
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The module a dotted import target lands in (the longest existing prefix)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return "" if name in MODULES else None


def _arrows() -> dict[str, dict[str, int]]:
    """Module -> {imported module: first line number}, over every import statement."""
    arrows: dict[str, dict[str, int]] = {m: {} for m in MODULES}
    for module, path in MODULES.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    here = [PACKAGE, *module.split(".")] if module else [PACKAGE]
                    base = here if is_package else here[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                # ``from pkg import sub`` imports the submodule; ``from mod import name`` the module
                targets = [f"{target}.{alias.name}" for alias in node.names]
            else:
                continue
            for target in targets:
                if target != PACKAGE and not target.startswith(PACKAGE + "."):
                    continue
                resolved = _resolve(target.removeprefix(PACKAGE).removeprefix("."))
                if resolved is not None and resolved != module:
                    arrows[module].setdefault(resolved, node.lineno)
    return arrows


ARROWS = _arrows()


def _name(module: str) -> str:
    return f"{PACKAGE}.{module}" if module else PACKAGE


def _where(module: str, line: int) -> str:
    return f"{MODULES[module].relative_to(ROOT.parent)}:{line}"


def _island(module: str) -> bool:
    return module == SIMULATOR or module.startswith(SIMULATOR + ".")


def test_every_module_has_a_layer():
    library = {m for m in MODULES if not _island(m)}
    unplaced = sorted(library - set(LAYERS))
    stale = sorted(set(LAYERS) - library)
    assert not unplaced, (
        f"modules without a layer: {[_name(m) for m in unplaced]}; add each to LAYERS in "
        "tests/package/test_layers.py (where it sits in the data path is a design decision)"
    )
    assert not stale, f"LAYERS names modules that do not exist: {[_name(m) for m in stale]}"


def test_no_import_goes_up_a_layer():
    broken = []
    for module, targets in sorted(ARROWS.items()):
        for target, line in sorted(targets.items()):
            if _island(module):
                if not _island(target) and target not in SIMULATOR_MAY_IMPORT:
                    broken.append(
                        f"{_name(module)} -> {_name(target)} ({_where(module, line)}): the "
                        "simulator may import only layer 0 and schema.dialect"
                    )
                continue
            if _island(target):
                if module not in MAY_IMPORT_SIMULATOR:
                    broken.append(
                        f"{_name(module)} -> {_name(target)} ({_where(module, line)}): only "
                        f"{sorted(_name(m) for m in MAY_IMPORT_SIMULATOR)} may import the simulator"
                    )
                continue
            if module not in LAYERS or target not in LAYERS:
                continue  # test_every_module_has_a_layer names it
            low, high = LAYERS[module], LAYERS[target]
            if high > low:
                broken.append(
                    f"{_name(module)} (layer {low}, {LAYER_NAMES[low]}) -> {_name(target)} "
                    f"(layer {high}, {LAYER_NAMES[high]}) at {_where(module, line)}: a module "
                    "imports only its own layer or lower ones"
                )
    assert not broken, f"{len(broken)} import(s) break the layering:\n" + "\n".join(broken)


def _cycles() -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in ARROWS[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(ARROWS):
        if v not in index:
            visit(v)
    return found


def _arrows_within(component: list[str]) -> list[str]:
    members = set(component)
    return [
        f"{_name(a)} -> {_name(b)} ({_where(a, line)})"
        for a in component
        for b, line in sorted(ARROWS[a].items())
        if b in members
    ]


def test_no_import_cycles():
    cycles = _cycles()
    assert not cycles, "import cycle(s):\n" + "\n".join(
        " <-> ".join(_name(m) for m in c) + ":\n    " + "\n    ".join(_arrows_within(c))
        for c in cycles
    )


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from . import tokens", {"tokens"}),
        ("from .schema import dialect as mfjs, codec", {"schema.dialect", "schema.codec"}),
        ("from ..table.frame import build_frame", {"table.frame"}),
        ("import kimi_extract.run.store", {"run.store"}),
        ("def f():\n    from .cli import main", {"cli"}),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .dask import x", {"dask"}),
    ],
)
def test_the_graph_sees_every_import_form(tmp_path, monkeypatch, source, expected):
    """The reader finds relative, absolute, aliased, in-function and TYPE_CHECKING imports."""
    module = "table.probe" if source.startswith("from ..") else "probe"
    path = ROOT / (module.replace(".", "/") + ".py")
    monkeypatch.setitem(MODULES, module, path)
    real_read = Path.read_text

    def read_text(self: Path, *args: object, **kwargs: object) -> str:
        return source if self == path else real_read(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", read_text)
    assert set(_arrows()[module]) == expected


# -- the tests tree mirrors the package ------------------------------------------------------------

TESTS = ROOT.parent / "tests"

#: Folders of tests/ that are not a subpackage of kimi_extract: what each one holds. Every
#: subpackage of kimi_extract has its own folder of the same name (tests/schema/, tests/http/...).
TEST_FOLDERS = {
    "core": "layer 0's modules: kimi.py (the model table), records.py (usage), tokens.py",
    "extractor": "the facade: extractor.py, accessor.py, testing.py, shared_simulator.py",
    "cli": "the command line: cli.py, cli_io.py, cli_quality.py, store_cli.py",
    "dask": "dask.py, cluster.py, cluster_budget.py",
    "package": "rules over the whole package: layers, exports, public API, exceptions, Kimi rules",
    "promises": "the guarantees (docs/reliability.md), hostile servers, faults, Ctrl-C, the "
    "README, docs, examples, notebooks and benchmarks as written",
}


def _subpackages() -> set[str]:
    return {path.parent.name for path in ROOT.glob("*/__init__.py")}


def _test_files() -> list[Path]:
    return sorted(TESTS.rglob("test_*.py"))


def test_no_test_file_sits_at_the_root_of_tests():
    """A test file goes in the folder of the package it tests (CONTRIBUTING.md, "A test"); the
    root of tests/ holds only the shared helpers (conftest.py, cdp.py, hostile.py, pg.py...)."""
    stray = [path.name for path in _test_files() if path.parent == TESTS]
    assert stray == [], f"move these into the folder of the package they test: {stray}"


def test_every_test_folder_mirrors_a_subpackage_or_is_listed():
    """tests/<name>/ is kimi_extract/<name>/'s tests, or one of TEST_FOLDERS; every subpackage
    has its folder; each folder is a package (its modules import as tests.<name>.test_x, so two
    folders never collide on a module name)."""
    folders = {path.parent.relative_to(TESTS).as_posix() for path in _test_files()}
    subpackages = _subpackages()
    assert folders - subpackages - set(TEST_FOLDERS) == set(), "a folder with no package"
    assert subpackages - folders == set(), "a subpackage with no tests/<name>/ folder"
    assert sorted(set(TEST_FOLDERS) - folders) == [], "TEST_FOLDERS lists an empty folder"
    assert [f for f in sorted(folders) if not (TESTS / f / "__init__.py").is_file()] == []


def test_test_file_names_are_unique_across_folders():
    """A test file is named by its base name in docs and commit messages: one file per name."""
    names = [path.name for path in _test_files()]
    assert sorted({name for name in names if names.count(name) > 1}) == []
