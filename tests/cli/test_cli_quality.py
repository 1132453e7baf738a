"""``kimi-extract eval`` and ``kimi-extract compare``: exit 0 with the scores, or exit 2 with one
line and nothing sent. Every test was checked to fail without the behaviour it names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import kimi_extract as kx
from kimi_extract import cli

from ..quality.test_compare import invoices
from .test_cli_errors import assert_one_line_exit_2

SCHEMA_SOURCE = """
from datetime import date
from typing import Literal

from pydantic import BaseModel, Field


class Item(BaseModel):
    name: str
    quantity: int = Field(ge=1)
    price: float


class Invoice(BaseModel):
    vendor: str
    currency: Literal["EUR", "USD", "GBP"]
    issued: date
    due: date | None
    paid: bool
    total: float
    items: list[Item]
"""


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """An input table with answer keys, its gold table, and the schema file."""
    data, gold = invoices(25)
    paths = {
        "schema": tmp_path / "invoice.py",
        "input": tmp_path / "input.csv",
        "gold": tmp_path / "gold.jsonl",
        "pred": tmp_path / "pred.jsonl",
    }
    paths["schema"].write_text(SCHEMA_SOURCE)
    data.to_csv(paths["input"], index=False)
    gold_frame = pd.DataFrame([g.model_dump(mode="json") for g in gold])
    gold_frame.to_json(paths["gold"], orient="records", lines=True)
    pred = gold_frame.copy()
    pred.loc[3, "total"] = 1.0  # one wrong number
    pred.loc[5, "vendor"] = "<script>alert(1)</script>"  # one wrong text, to be escaped
    pred["kx_cost"] = 0.001
    pred.to_json(paths["pred"], orient="records", lines=True)
    return paths


def _schema(files: dict[str, Path]) -> str:
    return f"{files['schema']}:Invoice"


@pytest.fixture
def nothing_sent(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []

    def refuse(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append("run")
        raise AssertionError("a run was about to start")

    monkeypatch.setattr(kx.Extractor, "run", refuse)
    return calls


def test_eval_prints_the_scores_and_writes_an_escaped_static_report(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "report.html"
    code = cli.main(
        [
            "eval",
            str(files["pred"]),
            str(files["gold"]),
            "--schema",
            _schema(files),
            "--html",
            str(report),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    gold = pd.read_json(files["gold"], lines=True)
    evaluation = kx.evaluate(pd.read_json(files["pred"], lines=True), gold, kx_model(files))
    assert evaluation.overall["row_exact"] == pytest.approx(23 / 25)
    assert f"rows entirely right {evaluation.overall['row_exact']:.1%}" in out
    assert "total" in out and "vendor" in out  # the rows to look at first name their fields
    page = report.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page  # no script: a static page
    assert "http://" not in page and "https://" not in page and "src=" not in page
    assert "92.0%" in page and "vendor" in page and "total" in page


def kx_model(files: dict[str, Path]) -> Any:
    from kimi_extract.cli_io import load_model

    return load_model(_schema(files))


def test_eval_escapes_every_text_from_the_data(files: dict[str, Path], tmp_path: Path) -> None:
    gold = pd.read_json(files["gold"], lines=True)
    gold.index = [f"<b>row {i}</b>" for i in range(len(gold))]
    gold["key"] = gold.index
    gold_path = tmp_path / "gold_keyed.jsonl"
    gold.to_json(gold_path, orient="records", lines=True)
    pred = pd.read_json(files["pred"], lines=True)
    pred["key"] = gold["key"].to_numpy()
    pred_path = tmp_path / "pred_keyed.jsonl"
    pred.to_json(pred_path, orient="records", lines=True)
    report = tmp_path / "keyed.html"
    code = cli.main(
        [
            "eval",
            str(pred_path),
            str(gold_path),
            "--schema",
            _schema(files),
            "--on",
            "key",
            "--html",
            str(report),
        ]
    )
    assert code == 0
    page = report.read_text()
    assert "&lt;b&gt;row 3&lt;/b&gt;" in page and "<b>row" not in page


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda g: g.assign(colour="red"), ["colour"]),
        (lambda g: g.assign(total="lots"), ["field total", "not a number"]),
    ],
)
def test_eval_of_gold_that_does_not_fit_exits_2_in_one_line(
    files: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    change: Any,
    words: list[str],
) -> None:
    bad = tmp_path / "bad_gold.jsonl"
    change(pd.read_json(files["gold"], lines=True)).to_json(bad, orient="records", lines=True)
    argv = ["eval", str(files["pred"]), str(bad), "--schema", _schema(files)]
    assert_one_line_exit_2(argv, capsys, *words)


CANDIDATES_TOML = """
[base]
instructions = "Copy the invoice's fields."

[candidates.pro-low]
model = "kimi-k3.1-pro"
reasoning_effort = "low"

[candidates.pro-max]
model = "kimi-k3.1-pro"
reasoning_effort = "max"
"""


def test_compare_runs_the_candidates_of_a_toml_file(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    candidates = tmp_path / "candidates.toml"
    candidates.write_text(CANDIDATES_TOML)
    table = tmp_path / "table.csv"
    argv = [
        "compare",
        str(candidates),
        "--input",
        str(files["input"]),
        "--gold",
        str(files["gold"]),
        "--schema",
        _schema(files),
        "--text",
        "text",
        "--simulate",
        "--no-progress",
        "--out",
        str(table),
    ]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "2 candidates on 25 rows" in out and "pro-low" in out and "pro-max" in out
    written = pd.read_csv(table, index_col="candidate")
    assert list(written.index) == ["pro-low", "pro-max"]
    assert written.loc["pro-max", "micro_f1"] > written.loc["pro-low", "micro_f1"]
    assert written.loc["pro-max", "cost"] > written.loc["pro-low", "cost"]


def test_compare_reads_json_and_estimate_only_sends_nothing(
    files: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    nothing_sent: list[str],
) -> None:
    candidates = tmp_path / "candidates.json"
    candidates.write_text(
        json.dumps(
            {
                "candidates": {
                    "low": {"reasoning_effort": "low"},
                    "k3": {"model": "kimi-k3", "reasoning_effort": "max"},
                }
            }
        )
    )
    argv = [
        "compare",
        str(candidates),
        "--input",
        str(files["input"]),
        "--gold",
        str(files["gold"]),
        "--schema",
        _schema(files),
        "--text",
        "text",
        "--simulate",
        "--estimate-only",
    ]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "nothing sent" in out and "low" in out and "k3" in out
    assert nothing_sent == []


@pytest.mark.parametrize(
    ("content", "suffix", "words"),
    [
        ('[candidates.a]\nmodle = "kimi-k3"\n', ".toml", ["candidate 'a'", "'modle'"]),
        ('[candidates.a]\nreasoning_effort = "lots"\n', ".toml", ["candidate 'a'", "lots"]),
        ('[candidate.a]\nmodel = "kimi-k3"\n', ".toml", ["unknown top-level", "candidate"]),
        ("[candidates]\n", ".toml", ["non-empty"]),
        ("[candidates.a\n", ".toml", ["cannot read the candidates file"]),
        ('{"candidates": {"a": 3}}', ".json", ["'a' must be a table"]),
        ("candidates: {}", ".yaml", [".toml or .json"]),
    ],
)
def test_compare_with_a_bad_candidates_file_exits_2_and_sends_nothing(
    files: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    nothing_sent: list[str],
    content: str,
    suffix: str,
    words: list[str],
) -> None:
    candidates = tmp_path / f"candidates{suffix}"
    candidates.write_text(content)
    argv = [
        "compare",
        str(candidates),
        "--input",
        str(files["input"]),
        "--gold",
        str(files["gold"]),
        "--schema",
        _schema(files),
        "--text",
        "text",
        "--simulate",
    ]
    assert_one_line_exit_2(argv, capsys, *words)
    assert nothing_sent == []


def test_compare_with_gold_rows_missing_from_the_input_exits_2(
    files: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    nothing_sent: list[str],
) -> None:
    candidates = tmp_path / "candidates.toml"
    candidates.write_text(CANDIDATES_TOML)
    short = tmp_path / "short.csv"
    pd.read_csv(files["input"]).iloc[:10].to_csv(short, index=False)
    argv = [
        "compare",
        str(candidates),
        "--input",
        str(short),
        "--gold",
        str(files["gold"]),
        "--schema",
        _schema(files),
        "--text",
        "text",
        "--simulate",
    ]
    assert_one_line_exit_2(argv, capsys, "gold row 10", "no row in data")
    assert nothing_sent == []


def test_simulate_takes_a_quality_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr("kimi_extract.simulator.serve", lambda **options: seen.update(options))
    assert cli.main(["simulate", "--quality", "exact"]) == 0
    assert seen["quality"] == "exact"
    seen.clear()
    assert cli.main(["simulate"]) == 0
    assert "quality" not in seen  # the simulator's default


def test_the_quality_pages_candidates_file_reads_as_shown(tmp_path: Path) -> None:
    from kimi_extract.cli_quality import read_candidates

    page = Path(__file__).resolve().parents[2] / "docs" / "quality.md"
    block = page.read_text(encoding="utf-8").split("```toml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "candidates.toml"
    path.write_text(block)
    base, candidates = read_candidates(path)
    assert base == {"instructions": "Copy the order's fields."}
    assert candidates == {
        "pro-low": {"model": "kimi-k3.1-pro", "reasoning_effort": "low"},
        "k3": {"model": "kimi-k3", "reasoning_effort": "max"},
    }
