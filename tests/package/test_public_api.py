"""The public surface is the list in docs/api.md, and the docs use nothing else.

- every module docs/api.md lists imports, and its ``__all__`` is exactly the names listed there
  (the top-level ``kimi_extract.__all__`` is kept by tests/package/test_exports.py);
- every ``kimi_extract.<path>`` the README, docs/, examples/ and notebooks/ mention (in text or
  in an import) is a public module or one of its names;
- the deprecated paths docs/api.md lists still work, as the same objects, and warn naming the
  new path; the two 0.1 paths work in the forms 0.1 documented.
"""

from __future__ import annotations

import importlib
import json
import re
import warnings
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from pydantic import BaseModel

import kimi_extract as kx

ROOT = Path(__file__).resolve().parents[2]
API_PAGE = ROOT / "docs" / "api.md"
API = API_PAGE.read_text(encoding="utf-8")

SECTION = re.compile(r"^## `(?P<module>kimi_extract[\w.]*)`\n(?P<body>.*?)(?=^## |\Z)", re.M | re.S)
NAMES = re.compile(r"^Names: (?P<names>.*?)(?:\n\n|\Z)", re.M | re.S)
DEPRECATED = re.compile(
    r"^\| `(?P<old>kimi_extract[\w.]+)` \| `(?P<new>kimi_extract[\w.]+)` \|$", re.M
)


def public_modules() -> dict[str, list[str]]:
    """docs/api.md's modules -> the names listed for each (the package itself: its __all__)."""
    found: dict[str, list[str]] = {}
    for section in SECTION.finditer(API):
        module = section["module"]
        names = NAMES.search(section["body"])
        assert names is not None, f"docs/api.md: {module} has no 'Names:' line"
        if module == "kimi_extract":
            assert "`kimi_extract.__all__`" in names["names"]
            found[module] = list(kx.__all__)
        else:
            found[module] = re.findall(r"`(\w+)`", names["names"])
    return found


PUBLIC = public_modules()
OLD_PATHS = {m["old"]: m["new"] for m in DEPRECATED.finditer(API)}

#: Mentions that look like module paths but are not import paths.
NOT_PATHS = {"kimi_extract.corrections": "the format tag of a corrections file"}
#: OpenTelemetry span, event, attribute and metric names (``kimi_extract.row``,
#: ``kimi_extract.usage.cost``): every ``"kimi_extract.*"`` string in kimi_extract/otel.py. They
#: name telemetry, not modules.
TELEMETRY_NAMES = set(
    re.findall(r'"(kimi_extract\.[\w.]+)"', (ROOT / "kimi_extract" / "otel.py").read_text())
)
#: Internal modules named in text written before docs/api.md; each should become a file path
#: (``kimi_extract/cluster.py``) or a public name. A fixed one must leave this list.
KNOWN_INTERNAL = {
    "kimi_extract.run.estimate": "notebook 01 (and notebooks/build.py): the estimate's assumptions",
    "kimi_extract.exceptions.install_hint": "examples/tables_from_pdf.py imports it",
}


def test_the_page_lists_the_modules_users_import():
    assert list(PUBLIC)[0] == "kimi_extract"
    for module in (
        "kimi_extract.dask",
        "kimi_extract.testing",
        "kimi_extract.simulator",
        "kimi_extract.quality",
        "kimi_extract.schema.dialect",
        "kimi_extract.table.explode",
        "kimi_extract.media.parts",
    ):
        assert module in PUBLIC, module
    assert "kimi_extract.media.media_options" in OLD_PATHS
    assert "kimi_extract.explode.explode" in OLD_PATHS
    assert "Every other module is internal and may change without notice" in API


@pytest.mark.parametrize("module", [m for m in PUBLIC if m != "kimi_extract"])
def test_each_public_modules_all_is_exactly_what_the_page_lists(module: str):
    imported = importlib.import_module(module)
    listed = PUBLIC[module]
    assert sorted(getattr(imported, "__all__", ())) == sorted(listed)
    for name in listed:
        assert hasattr(imported, name), f"{module}.{name}"


def test_the_packages_summary_names_only_exported_names():
    summary = next(s["body"] for s in SECTION.finditer(API) if s["module"] == "kimi_extract")
    named = set(re.findall(r"`([A-Za-z_]\w*)`", summary))
    assert named and sorted(named - set(kx.__all__)) == []


# -- what the docs mention ----------------------------------------------------------------------

MENTION = re.compile(r"\bkimi_extract(?:\.[A-Za-z_]\w*)+")
FROM_IMPORT = re.compile(r"\bfrom (kimi_extract(?:\.\w+)*) import (?:\(([^)]*)\)|([^\n#]*))")


def _texts() -> dict[str, str]:
    """Every user-facing document: path -> its text (a notebook: its cells' sources)."""
    paths = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for folder in ("examples", "notebooks"):
        found = (ROOT / folder).rglob("*")
        paths += sorted(p for p in found if p.suffix in (".py", ".md", ".ipynb"))
    texts = {}
    for path in paths:
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".ipynb":
            cells = json.loads(text)["cells"]
            text = "\n\n".join("".join(cell["source"]) for cell in cells)
        texts[path.relative_to(ROOT).as_posix()] = text
    return texts


TEXTS = _texts()


def mentions(text: str) -> set[str]:
    """Dotted ``kimi_extract`` paths in ``text``; for ``from M import a, b``: ``M.a``, ``M.b``."""
    found = set()
    for module, grouped, plain in FROM_IMPORT.findall(text):
        for item in (grouped or plain).split(","):
            name = item.split(" as ")[0].strip()
            if name:
                found.add(f"{module}.{name}")
    return found | {m.rstrip(".") for m in MENTION.findall(FROM_IMPORT.sub("", text))}


def is_public(path: str) -> bool:
    """Whether ``path`` is a public module or a name listed for the public module it is in."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        if module in PUBLIC:
            rest = parts[cut:]
            return not rest or rest[0] in PUBLIC[module] or rest[0] == "__all__"
    return False


def test_mentions_and_imports_are_read_from_text():
    text = (
        "see `kimi_extract.dask.extract(ddf)` and kimi_extract.table.explode.\n"
        "from kimi_extract.quality import (\n    TextMatcher,\n    paired_difference as pd_,\n)\n"
        "from kimi_extract import Extractor  # the facade\n"
    )
    assert mentions(text) == {
        "kimi_extract.dask.extract",
        "kimi_extract.table.explode",
        "kimi_extract.quality.TextMatcher",
        "kimi_extract.quality.paired_difference",
        "kimi_extract.Extractor",
    }
    assert is_public("kimi_extract.dask.extract") and is_public("kimi_extract.Extractor")
    assert not is_public("kimi_extract.cluster") and not is_public("kimi_extract.run.estimate")
    assert not is_public("kimi_extract.quality.score")


def test_the_docs_mention_only_public_paths():
    wrong = []
    for where, text in TEXTS.items():
        for path in sorted(mentions(text)):
            if is_public(path) or path in NOT_PATHS or path in KNOWN_INTERNAL:
                continue
            if path in TELEMETRY_NAMES:
                continue
            if where == "docs/api.md" and path in OLD_PATHS:
                continue
            wrong.append(f"{where}: {path}")
    assert wrong == [], (
        "these are not in docs/api.md: cite internal code by file path (kimi_extract/x/y.py), "
        "or make the name public there"
    )


def test_every_known_exception_is_still_needed():
    seen = set()
    for text in TEXTS.values():
        seen |= mentions(text)
    assert sorted(set(KNOWN_INTERNAL) - seen) == [] and sorted(set(NOT_PATHS) - seen) == []


# -- deprecated paths ---------------------------------------------------------------------------


def _resolve(path: str) -> Any:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("old", sorted(OLD_PATHS))
def test_a_deprecated_path_is_the_new_object_and_warns_naming_it(old: str):
    new = OLD_PATHS[old]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new path itself never warns
        current = _resolve(new)
    with pytest.warns(DeprecationWarning, match=re.escape(new.rpartition(".")[2])) as caught:
        assert _resolve(old) is current
    assert all(issubclass(w.category, DeprecationWarning) for w in caught)


def test_0_1_media_options_works_as_0_1_wrote_it_and_warns():
    import kimi_extract

    with pytest.warns(DeprecationWarning, match=r"kimi_extract\.media\.parts\.media_options"):
        with kimi_extract.media.media_options(max_image_pixels=1000) as options:
            assert options.max_image_pixels == 1000
    with pytest.warns(DeprecationWarning, match=r"kimi_extract\.media\.parts\.media_options"):
        exec("from kimi_extract.media import media_options", {})
    with pytest.raises(AttributeError):
        kimi_extract.media.not_a_name  # noqa: B018


class Row(BaseModel):
    name: str


class Table(BaseModel):
    rows: list[Row]


def test_0_1_explode_works_as_0_1_wrote_it_and_warns():
    frame = pd.DataFrame({"rows": [[{"name": "a"}, {"name": "b"}], []]})
    with pytest.warns(DeprecationWarning, match=r"kimi_extract\.table\.explode\.explode") as w:
        namespace: dict[str, Any] = {}
        exec("from kimi_extract.explode import explode", namespace)
    assert w[0].filename == "<string>"  # the warning points at the user's line
    exploded = namespace["explode"](frame, Table, "rows")
    assert exploded["name"].tolist() == ["a", "b", None]
    import kimi_extract.explode
    from kimi_extract.table.explode import explode

    with pytest.warns(DeprecationWarning, match=r"kimi_extract\.table\.explode\.explode"):
        assert kimi_extract.explode.explode is explode
    with pytest.raises(AttributeError):
        kimi_extract.explode.not_a_name  # noqa: B018
