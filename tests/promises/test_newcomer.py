"""A newcomer's first minutes: missing extras, outputs checked before sending, the simulator CLI.

Each test removes an optional package the way a base install lacks it (``sys.modules[name] =
None`` makes ``import name`` fail) and checks the failure is early and names the install line, or
is confined to the rows that need the package.
"""

from __future__ import annotations

import io
import re
import socket
import sys
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image
from pydantic import BaseModel

import kimi_extract as kx
from kimi_extract import cli
from kimi_extract.exceptions import EXTRAS, install_hint
from kimi_extract.simulator.protocol import DEFAULT_API_KEY
from kimi_extract.table.export import TableWriter, write_table

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
DEMO = [
    "run",
    str(EXAMPLES / "reviews.csv"),
    "--schema",
    f"{EXAMPLES / 'review_schema.py'}:Review",
    "--text",
    "review",
    "--simulate",
    "--no-progress",
]


def _refuse_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record any attempt to run the extractor (there must be none)."""
    calls: list[str] = []

    def refuse(self, *args, **kwargs):
        calls.append("run")
        raise AssertionError("a request was about to be sent")

    monkeypatch.setattr(kx.Extractor, "run", refuse)
    return calls


def test_parquet_output_without_pyarrow_exits_2_before_any_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = _refuse_runs(monkeypatch)
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    out = tmp_path / "out.parquet"
    assert cli.main([*DEMO, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and install_hint("parquet") in err
    assert calls == [] and not out.exists() and list(tmp_path.iterdir()) == []
    assert "simulator" not in err  # it never even started


@pytest.mark.parametrize("name", ["out.xlsx", "out"])
def test_unknown_output_format_exits_2_before_any_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    calls = _refuse_runs(monkeypatch)
    assert cli.main([*DEMO, "--out", str(tmp_path / name)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ".csv, .jsonl or .parquet" in err and name in err
    assert calls == []


def test_csv_output_keeps_an_informative_index_under_a_name(tmp_path: Path) -> None:
    frame = pd.DataFrame({"a": [1, 2]}, index=pd.Index(["x", "y"]))
    write_table(frame, tmp_path / "labelled.csv")
    assert pd.read_csv(tmp_path / "labelled.csv").columns.tolist() == ["index", "a"]
    write_table(frame.reset_index(drop=True), tmp_path / "plain.csv")
    assert pd.read_csv(tmp_path / "plain.csv").columns.tolist() == ["a"]
    write_table(frame.rename_axis("sku"), tmp_path / "named.jsonl")
    assert pd.read_json(tmp_path / "named.jsonl", lines=True).columns.tolist() == ["sku", "a"]


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_the_cli_and_run_to_write_a_frame_the_same_way(tmp_path: Path, suffix: str) -> None:
    """One writer: ``--out`` and ``run_to`` give the same file for the same rows (nested values
    as JSON text in parquet and csv)."""
    frame = pd.DataFrame(
        {"index": ["taken", "too"], "tags": [["a", "b"], []], "where": [{"x": 1}, None]},
        index=pd.Index(["r1", "r2"]),
    )
    write_table(frame, tmp_path / f"cli{suffix}")
    writer = TableWriter(tmp_path / f"run_to{suffix}")
    writer.write(frame.iloc[:1])
    writer.write(frame.iloc[1:])
    writer.commit()
    read = {
        ".parquet": pd.read_parquet,
        ".csv": pd.read_csv,
        ".jsonl": lambda p: pd.read_json(p, lines=True),
    }[suffix]
    cli_back, run_to_back = read(tmp_path / f"cli{suffix}"), read(tmp_path / f"run_to{suffix}")
    pd.testing.assert_frame_equal(cli_back, run_to_back)
    assert cli_back.columns.tolist() == ["kx_index", "index", "tags", "where"]
    if suffix != ".jsonl":
        assert cli_back["tags"].tolist() == ['["a", "b"]', "[]"]


def test_images_without_pillow_fail_only_the_rows_that_need_it(
    sim, make_extractor, monkeypatch: pytest.MonkeyPatch
) -> None:
    def png(side: int) -> bytes:
        buffer = io.BytesIO()
        Image.new("RGB", (side, side), "red").save(buffer, "PNG")
        return buffer.getvalue()

    big, small = png(3000), png(30)
    for module in [m for m in sys.modules if m == "PIL" or m.startswith("PIL.")]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setitem(sys.modules, "PIL", None)

    class Caption(BaseModel):
        caption: str

    rows = [{"t": "a", "img": big}, {"t": "b", "img": small}, {"t": "c", "img": None}]
    out = make_extractor(Caption).run(rows, text="t", images="img")
    assert install_hint("images") in out.loc[0, "kx_error"]
    assert out["kx_error"].iloc[1:].isna().all()


def test_simulate_on_a_busy_port_says_so_without_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = cli.main(["simulate", "--port", str(port)])
    err = capsys.readouterr().err
    assert code == cli.EXIT_STOPPED
    assert f"127.0.0.1:{port}" in err and "--port" in err and "Traceback" not in err


def test_simulator_key_is_in_help_and_readme(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.DEFAULT_SIMULATOR_KEY == DEFAULT_API_KEY
    with pytest.raises(SystemExit):
        cli.main(["simulate", "--help"])
    assert DEFAULT_API_KEY in capsys.readouterr().out.replace("\n", " ")
    pages = [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    assert any(DEFAULT_API_KEY in page.read_text(encoding="utf-8") for page in pages)


def test_run_docs_offers_no_dry_run(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["run-docs", "--help"])
    assert "--dry-run" not in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    assert "--dry-run" in capsys.readouterr().out


def test_license_uses_the_spdx_form() -> None:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'license = "MIT"' in text and "license = {" not in text


def test_every_install_hint_is_the_one_helper_and_names_a_checkout() -> None:
    # kimi-extract is not on PyPI: `pip install 'kimi-extract[pdf]'` fails for every user. Each
    # hint is install_hint's text, which works from a checkout, and its extras are pyproject's.
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert set(EXTRAS) == set(extras) - {"dev", "bench"}
    for extra, package in EXTRAS.items():
        assert any(spec.startswith(package) for spec in extras[extra]), (extra, package)
        assert f"pip install -e '.[{extra}]'" in install_hint(extra)
    texts = [*ROOT.glob("kimi_extract/**/*.py"), *ROOT.glob("examples/*.py")]
    texts += [*ROOT.glob("notebooks/*.ipynb"), ROOT / "notebooks" / "build.py", ROOT / "README.md"]
    texts += [ROOT / "CONTRIBUTING.md", *ROOT.glob("docs/*.md")]
    unpublished = re.compile(r"pip install '?kimi-extract\[")
    offenders = [
        str(path.relative_to(ROOT))
        for path in texts
        if path.name != "exceptions.py" and unpublished.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def test_kimi_extract_dask_without_dask_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    for name in ("dask", "dask.dataframe", "dask.dataframe.extensions", "distributed"):
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "kimi_extract.dask", raising=False)
    with pytest.raises(ImportError, match=re.escape(install_hint("dask"))):
        importlib.import_module("kimi_extract.dask")
