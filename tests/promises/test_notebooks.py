"""The example notebooks run top to bottom against the simulator, so they cannot rot.

Each committed notebook in ``notebooks/`` is executed with nbclient in a kernel running this
interpreter (``notebooks/build.py`` registers a temporary kernelspec for ``sys.executable``, so a
fresh ``pip install -e ".[dev]"`` needs no ``ipykernel install``); any cell error fails the test
with the cell and its traceback. The committed files must match ``build.py`` and carry their
outputs, plots included.
"""

from __future__ import annotations

import copy
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NAMES = [
    "01_dataframe_enrichment.ipynb",
    "02_tables_from_documents.ipynb",
    "03_image_captioning.ipynb",
    "04_choosing_a_model.ipynb",
]
#: Notebooks that draw a plot, which must be saved as a PNG output.
WITH_PLOTS = {
    "01_dataframe_enrichment.ipynb",
    "03_image_captioning.ipynb",
    "04_choosing_a_model.ipynb",
}


def _load_build() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kx_notebooks_build", NOTEBOOKS / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


build = _load_build()


@pytest.fixture(scope="module")
def kernel_name() -> Iterator[str]:
    with build.kernel_for_this_python() as name:
        yield name


def _read(name: str) -> Any:
    return nbformat.read(NOTEBOOKS / name, as_version=4)


def _outputs(notebook: Any) -> list[dict[str, Any]]:
    return [out for cell in notebook.cells if cell.cell_type == "code" for out in cell.outputs]


def _has_png(notebook: Any) -> bool:
    return any("image/png" in out.get("data", {}) for out in _outputs(notebook))


#: The notebook that reads a review page's corrections back as gold.
CORRECTIONS = "04_choosing_a_model.ipynb"


def _check_corrections_read_back(notebook: Any) -> None:
    """The cell calling ``kx.read_corrections`` reads the file the notebook wrote in the page's
    format without a warning (so its data hash is the page's), and the gold it returns scores
    the reviewed rows exactly as the invoices' own gold did."""
    (cell,) = [
        c for c in notebook.cells if c.cell_type == "code" and "kx.read_corrections(" in c.source
    ]
    assert "kx.evaluate(" in cell.source
    streams = [o for o in cell.outputs if o.output_type == "stream"]
    assert not [o for o in streams if o.name == "stderr"], "read_corrections warned"
    text = "".join(o.text for o in streams)
    assert "5 rows of gold from review.corrections.json" in text
    assert "Evaluation of Invoice: 5 rows" in text
    assert "row scores equal those against the invoices' gold: True" in text


def test_build_lists_exactly_these_notebooks():
    assert sorted(build.NOTEBOOKS) == NAMES
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_committed_notebook_matches_build_and_has_outputs(name: str):
    committed = _read(name)
    nbformat.validate(committed)
    expected = build.build(name)
    assert [(c.cell_type, c.source) for c in committed.cells] == [
        (c.cell_type, c.source) for c in expected.cells
    ], f"{name} differs from notebooks/build.py: run `python notebooks/build.py {name[:2]}`"
    code_cells = [c for c in committed.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code_cells), f"{name} saved unexecuted"
    assert not [o for o in _outputs(committed) if o.output_type == "error"]
    assert "SIMULATE = True" in code_cells[0].source
    assert "Running against the real API" in committed.cells[0].source
    if name in WITH_PLOTS:
        assert _has_png(committed), f"{name} was saved without its plot"
    if name == CORRECTIONS:
        _check_corrections_read_back(committed)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_notebook_executes_without_errors(name: str, kernel_name: str):
    notebook = copy.deepcopy(_read(name))
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    build.execute(notebook, kernel_name=kernel_name)  # raises CellExecutionError on a failure
    assert not [o for o in _outputs(notebook) if o.output_type == "error"]
    if name in WITH_PLOTS:
        assert _has_png(notebook), f"{name} drew no PNG"
    if name == CORRECTIONS:
        _check_corrections_read_back(notebook)
