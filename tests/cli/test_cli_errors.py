"""The command line when it cannot start: exit 2, one line on stderr, no traceback, nothing sent;
and when the output cannot be written after a run: the rows go to a file the message names.

Exit 1 means only "some rows failed". Each test was checked to fail on the code before its fix.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import kimi_extract as kx
from kimi_extract import cli

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SCHEMA = f"{EXAMPLES / 'review_schema.py'}:Review"


def run_args(*extra: str, source: str | Path = EXAMPLES / "reviews.csv") -> list[str]:
    return ["run", str(source), "--schema", SCHEMA, "--text", "review", *extra]


@pytest.fixture
def nothing_sent(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record any run or simulator start (a command that could not start has none)."""
    calls: list[str] = []

    def refuse(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append("run")
        raise AssertionError("a run was about to start")

    monkeypatch.setattr(kx.Extractor, "run", refuse)
    monkeypatch.setattr(kx.Extractor, "run_documents", refuse)
    return calls


def assert_one_line_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str], *names: str):
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert "Traceback" not in err
    for name in names:
        assert name in err, err
    return err


def _bad_inputs(tmp: Path) -> dict[str, Path]:
    """Tables no reader can take, by kind."""
    files = {
        "missing": tmp / "missing.csv",
        "unsupported": tmp / "in.xlsx",
        "empty csv": tmp / "empty.csv",
        "unterminated csv": tmp / "open.csv",
        "binary csv": tmp / "binary.csv",
        "bad jsonl line": tmp / "bad.jsonl",
        "truncated parquet": tmp / "cut.parquet",
        "directory": tmp / "dir.csv",
    }
    files["unsupported"].write_text("review\nfine\n")
    files["empty csv"].write_bytes(b"")
    files["unterminated csv"].write_text('review,id\n"it never ends,1\nnext,2\n')
    files["binary csv"].write_bytes(bytes(range(256)) * 40)
    files["bad jsonl line"].write_text('{"review": "fine"}\n{"review": oops}\n')
    pd.DataFrame({"review": [f"row {i}" for i in range(200)]}).to_parquet(tmp / "whole.parquet")
    whole = (tmp / "whole.parquet").read_bytes()
    files["truncated parquet"].write_bytes(whole[: len(whole) // 2])
    files["directory"].mkdir()
    return files


BAD_INPUTS = [
    "missing",
    "unsupported",
    "empty csv",
    "unterminated csv",
    "binary csv",
    "bad jsonl line",
    "truncated parquet",
    "directory",
]


@pytest.mark.parametrize("kind", BAD_INPUTS)
def test_run_on_an_unreadable_table_exits_2_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], nothing_sent: list[str], kind: str
) -> None:
    source = _bad_inputs(tmp_path)[kind]
    assert_one_line_exit_2(run_args("--simulate", source=source), capsys, str(source))
    assert nothing_sent == []


@pytest.mark.parametrize("kind", BAD_INPUTS)
def test_review_of_an_unreadable_table_exits_2_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    source = _bad_inputs(tmp_path)[kind]
    html = tmp_path / "page.html"
    assert_one_line_exit_2(["review", str(source), "--html", str(html)], capsys, str(source))
    assert not html.exists()


def _schema_file(tmp: Path, text: str) -> str:
    path = tmp / "schema.py"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        # output: unknown format, a directory as the file, a place that takes no file
        (lambda t: run_args("--out", str(t / "o.xlsx")), ["o.xlsx"]),
        (lambda t: run_args("--out", str(t)), [None]),
        (lambda t: run_args("--out", str(t / "missing" / "o.csv")), ["missing"]),
        (lambda t: run_args("--out", "/sys/o.csv"), ["/sys/o.csv"]),
        (lambda t: run_args("--out", "/proc/o.csv"), ["/proc/o.csv"]),
        # schema: missing file, bad spec, no such class, a module that does not import
        (lambda t: ["run", str(EXAMPLES / "reviews.csv"), "--schema", "nope.py:X"], ["nope.py"]),
        (lambda t: ["run", str(EXAMPLES / "reviews.csv"), "--schema", "no_colon"], ["no_colon"]),
        (lambda t: run_args()[:3] + [f"{EXAMPLES / 'review_schema.py'}:Nope"], ["Nope"]),
        (
            lambda t: (
                ["run", str(EXAMPLES / "reviews.csv"), "--schema"]
                + [_schema_file(t, "class Broken(\n") + ":Broken"]
            ),
            ["schema.py", "SyntaxError"],
        ),
        (
            lambda t: ["run", str(EXAMPLES / "reviews.csv"), "--schema", "no_such_module:X"],
            ["no_such_module"],
        ),
        # arguments argparse refuses
        (lambda t: ["run", str(EXAMPLES / "reviews.csv")], ["--schema"]),
        (lambda t: run_args("--concurrency", "many"), ["--concurrency"]),
        (lambda t: run_args("--no-such-flag"), ["--no-such-flag"]),
        (lambda t: ["frobnicate"], ["frobnicate"]),
        (lambda t: [], ["command"]),
        # settings the extractor refuses (with --simulate: no simulator banner first)
        (lambda t: run_args("--effort", "extreme", "--simulate"), ["extreme"]),
        (lambda t: run_args("--concurrency", "0", "--simulate"), ["concurrency"]),
    ],
)
def test_every_usage_or_configuration_error_exits_2_in_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    nothing_sent: list[str],
    argv: Any,
    names: list[str | None],
) -> None:
    args = argv(tmp_path)
    expected = [str(tmp_path) if name is None else name for name in names]
    assert_one_line_exit_2(args, capsys, *expected)
    assert nothing_sent == []


@pytest.mark.parametrize(
    "argv",
    [
        run_args("--text", "nope", "--simulate", "--no-progress"),
        ["run", str(EXAMPLES / "reviews.csv"), "--schema", SCHEMA, "--template", "{nope}"]
        + ["--simulate", "--no-progress"],
    ],
)
def test_inputs_the_run_refuses_exit_2_in_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """A column or template field the input lacks: refused before any request, in one line
    (no simulator banner before it)."""
    assert_one_line_exit_2(argv, capsys, "nope")


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"kimi-extract {kx.__version__}"


def test_usage_errors_exit_2_from_the_shell_too(tmp_path: Path) -> None:
    """The console entry point (python -m): exit status 2, one stderr line, no traceback."""
    result = subprocess.run(
        [sys.executable, "-m", "kimi_extract", *run_args("--out", str(tmp_path / "o.xlsx"))],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "o.xlsx" in result.stderr
    assert result.stdout == ""


# -- writing after the run fails: the rows are kept, and named -----------------------------------


def _run_then(monkeypatch: pytest.MonkeyPatch, damage: Any) -> None:
    """Make ``Extractor.run`` do its run, then ``damage()`` (the output place breaks)."""
    real_run = kx.Extractor.run

    def run_then_damage(self: Any, *args: Any, **kwargs: Any) -> Any:
        frame = real_run(self, *args, **kwargs)
        damage()
        return frame

    monkeypatch.setattr(kx.Extractor, "run", run_then_damage)


def test_out_that_fails_after_the_run_keeps_the_rows_beside_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out.csv"
    _run_then(monkeypatch, out.mkdir)  # something took the name meanwhile
    code = cli.main(run_args("--simulate", "--no-progress", "--out", str(out)))
    captured = capsys.readouterr()
    kept = tmp_path / "out.partial.csv"
    assert code == 2
    assert f"cannot write {out}" in captured.err and str(kept) in captured.err
    assert "Traceback" not in captured.err
    assert len(pd.read_csv(kept)) == 20


def test_out_whose_directory_is_gone_keeps_the_rows_in_the_temp_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    outdir, spare = tmp_path / "results", tmp_path / "spare"
    outdir.mkdir()
    spare.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spare))

    def replace_dir() -> None:
        shutil.rmtree(outdir)
        outdir.write_text("a file now")

    _run_then(monkeypatch, replace_dir)
    code = cli.main(run_args("--simulate", "--no-progress", "--out", str(outdir / "o.jsonl")))
    err = capsys.readouterr().err
    kept = spare / "o.partial.jsonl"
    assert code == 2 and str(kept) in err and "Traceback" not in err
    assert len(pd.read_json(kept, lines=True)) == 20


def test_rows_with_lone_surrogates_print_and_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run whose rows hold lone surrogates (a cell, an error text) prints them and writes
    them, escaped; the failed row makes exit 1, not a crash."""
    source = tmp_path / "in.jsonl"
    source.write_text('{"review": "fine"}\n{"review": "bad \\udc80 text"}\n')
    out = tmp_path / "out.csv"
    code = cli.main(run_args("--simulate", "--no-progress", "--out", str(out), source=source))
    assert code == 1
    assert "\\udc80" in capsys.readouterr().out
    back = pd.read_csv(out)
    assert back["kx_error"].notna().tolist() == [False, True]
    assert back["review"].tolist() == ["fine", "bad \\udc80 text"]
