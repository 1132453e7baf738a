"""The command line: the README's demo, formats, exit codes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from kimi_extract.cli import main

ROOT = Path(__file__).resolve().parents[2]
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
    assert "sentiment" in captured.out and "20 (20 ok, 0 failed)" in captured.out
    frame = pd.read_csv(out)
    # The input's columns come first: no unnamed index column (the index was 0..n-1).
    assert list(frame.columns[:3]) == ["id", "product", "review"]
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


def demo_args(*extra: str) -> list[str]:
    schema = f"{EXAMPLES / 'review_schema.py'}:Review"
    return ["run", str(EXAMPLES / "reviews.csv"), "--schema", schema, "--text", "review", *extra]


def test_dry_run_prints_the_estimate_and_sends_nothing(capsys, monkeypatch):
    monkeypatch.delenv("KIMI_API_KEY", raising=False)
    monkeypatch.delenv("EVOLINK_API_KEY", raising=False)
    # No key and no simulator: any request would fail, so exit 0 proves none was sent.
    assert main(demo_args("--dry-run", "--no-progress")) == 0
    out = capsys.readouterr().out
    assert "20 rows -> 20 requests" in out and "$" in out


def test_store_flag_resumes_from_the_store(tmp_path: Path, capsys):
    store = tmp_path / "store.sqlite3"
    args = demo_args("--simulate", "--no-progress", "--store", str(store))
    assert main(args) == 0
    assert store.exists()
    capsys.readouterr()
    assert main(args) == 0
    out = capsys.readouterr().out
    assert re.search(r"from the result store\s+20\n", out)
    assert re.search(r"requests\s+0 ", out)


def test_max_cost_stops_the_run_with_exit_2(capsys):
    assert main(demo_args("--simulate", "--no-progress", "--max-cost", "0.0005")) == 2
    assert "budget" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--stream", "--web-search"])
def test_stream_and_web_search_flags(tmp_path: Path, flag: str):
    out = tmp_path / "out.jsonl"
    assert main(demo_args("--simulate", "--no-progress", flag, "--out", str(out))) == 0
    frame = pd.read_json(out, lines=True)
    assert len(frame) == 20 and frame["kx_error"].isna().all()
    if flag == "--web-search":
        assert (frame["kx_web_searches"] >= 1).all()


def extractor_options(monkeypatch, args: list[str]) -> dict:
    """The options the CLI would build the Extractor with (a spy stops it there: exit 2)."""
    seen: dict = {}

    class Spy:
        def __init__(self, output, **options):
            seen.update(options)
            raise ValueError("stop here")

    monkeypatch.setattr("kimi_extract.extractor.Extractor", Spy)
    assert main(args) == 2
    return seen


def test_limit_flags_reach_the_extractor(monkeypatch):
    args = demo_args("--concurrency", "7", "--rpm", "120", "--tpm", "9000", "--no-store")
    seen = extractor_options(monkeypatch, args)
    assert (seen["concurrency"], seen["rpm"], seen["tpm"], seen["store"]) == (7, 120, 9000, False)


def test_only_the_flags_given_reach_the_extractor(monkeypatch):
    """The CLI never re-lists a default: unset flags leave the ExtractorConfig defaults."""
    assert extractor_options(monkeypatch, demo_args()) == {}
    seen = extractor_options(monkeypatch, demo_args("--effort", "high", "--column-prefix", ""))
    assert seen == {"reasoning_effort": "high", "column_prefix": ""}


def test_the_old_prefix_flag_works_with_a_warning(monkeypatch, capsys):
    with pytest.warns(DeprecationWarning, match="use --column-prefix"):
        seen = extractor_options(monkeypatch, demo_args("--prefix", "out_"))
    assert seen == {"column_prefix": "out_"}
    assert "--prefix is deprecated: use --column-prefix" in capsys.readouterr().err
    with pytest.warns(DeprecationWarning):
        args = demo_args("--prefix", "a_", "--column-prefix", "b_")
        assert main(args) == 2
    assert "pass --column-prefix only" in capsys.readouterr().err


def test_store_path_flag_reaches_the_extractor(monkeypatch, tmp_path: Path):
    seen = extractor_options(monkeypatch, demo_args("--store", str(tmp_path / "s.sqlite3")))
    assert seen == {"store": str(tmp_path / "s.sqlite3")}


@pytest.mark.parametrize(("value", "store"), [("off", False), ("some/path.sqlite3", None)])
def test_old_cache_flag_warns_and_still_works(monkeypatch, capsys, value: str, store):
    with pytest.warns(DeprecationWarning, match="--store"):
        seen = extractor_options(monkeypatch, demo_args("--cache", value))
    assert seen == {"store": value if store is None else store}
    assert "--cache is deprecated" in capsys.readouterr().err


def test_videos_flag_names_the_video_column(capsys):
    # The column is checked before any request: an unknown one exits 2 naming it.
    assert main(demo_args("--videos", "no_such_column", "--no-progress", "--dry-run")) == 2
    assert "no_such_column" in capsys.readouterr().err


def test_run_docs_with_media_flags(tmp_path: Path, capsys):
    out = tmp_path / "tables.jsonl"
    schema = f"{EXAMPLES / 'tables_from_pdf.py'}:PageTable"
    args = ["run-docs", str(EXAMPLES / "docs" / "invoice.pdf"), "--schema", schema]
    args += ["--per-page", "--explode", "rows", "--max-image-pixels", "200000"]
    assert main([*args, "--simulate", "--no-progress", "--out", str(out)]) in (0, 1)
    frame = pd.read_json(out, lines=True)
    assert {"kx_source", "kx_page", "kx_item"} <= set(frame.columns)
    assert "rows" in capsys.readouterr().out


def test_images_column_with_fetch_urls_flag_reaches_the_extractor(monkeypatch):
    seen = extractor_options(monkeypatch, demo_args("--fetch-urls", "--max-image-pixels", "0"))
    assert seen["fetch_urls"] is True and seen["max_image_pixels"] is None
