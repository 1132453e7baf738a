"""The command line: the README's demo, formats, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from kimi_extract.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def test_demo_command_runs_offline(tmp_path: Path, capsys):
    out = tmp_path / "reviews_out.csv"
    code = main(
        [
            "run",
            str(EXAMPLES / "reviews.csv"),
            "--schema",
            f"{EXAMPLES / 'review_schema.py'}:Review",
            "--text",
            "review",
            "--out",
            str(out),
            "--simulate",
            "--no-progress",
        ]
    )
    assert code == 0
    captured = capsys.readouterr()
    assert "simulator" in captured.err
    assert "sentiment" in captured.out and "kimi_extract: 20 rows (20 ok, 0 failed)" in captured.out
    frame = pd.read_csv(out, index_col=0)
    assert len(frame) == 20 and frame["kx_error"].isna().all()
    assert all(isinstance(json.loads(a), list) for a in frame["aspects"])


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_other_formats_round_trip(tmp_path: Path, suffix: str):
    src = tmp_path / f"in{suffix}"
    data = pd.DataFrame({"review": ["great", "awful"]})
    if suffix == ".jsonl":
        data.to_json(src, orient="records", lines=True)
    else:
        data.to_parquet(src)
    out = tmp_path / f"out{suffix}"
    code = main(
        [
            "run",
            str(src),
            "--schema",
            f"{EXAMPLES / 'review_schema.py'}:Review",
            "--text",
            "review",
            "--out",
            str(out),
            "--simulate",
            "--no-progress",
        ]
    )
    assert code == 0
    back = pd.read_json(out, lines=True) if suffix == ".jsonl" else pd.read_parquet(out)
    assert len(back) == 2 and "sentiment" in back.columns


def test_some_failed_rows_exit_1(tmp_path: Path):
    src = tmp_path / "in.csv"
    pd.DataFrame({"review": ["great", None]}).to_csv(src, index=False)
    code = main(
        [
            "run",
            str(src),
            "--schema",
            f"{EXAMPLES / 'review_schema.py'}:Review",
            "--text",
            "review",
            "--simulate",
            "--no-progress",
        ]
    )
    assert code == 1


def test_bad_column_exits_2(tmp_path: Path, capsys):
    code = main(
        [
            "run",
            str(EXAMPLES / "reviews.csv"),
            "--schema",
            f"{EXAMPLES / 'review_schema.py'}:Review",
            "--text",
            "nope",
            "--simulate",
            "--no-progress",
        ]
    )
    assert code == 2
    assert "nope" in capsys.readouterr().err


def test_python_dash_m_entry_point():
    result = subprocess.run(
        [sys.executable, "-m", "kimi_extract", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0 and "run" in result.stdout and "simulate" in result.stdout
