"""The README's two commands work as printed: the quick start, and the test command CI runs.

Its Python blocks (and those of docs/) are run by tests/promises/test_docs.py.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

from kimi_extract.cli import main

from ..docs_pages import ROOT, blocks

README = ROOT / "README.md"


def _bash(start: str) -> str:
    (command,) = [b.code for b in blocks(README) if b.lang == "bash" and b.code.startswith(start)]
    return command


def test_quick_start_command_works_as_printed(tmp_path: Path, monkeypatch, capsys) -> None:
    # .ci/run takes the first bash block under "## Quick start" and runs it in a fresh venv.
    text = README.read_text(encoding="utf-8")
    first = re.search(r"## Quick start.*?```bash\n(.*?)```", text, re.S)
    assert first is not None
    command = _bash("pip install -e . && kimi-extract run")
    assert first.group(1).strip() == command
    install, _, run = command.partition("&&")
    assert install.strip() == "pip install -e ."
    argv = shlex.split(run.strip())
    assert argv[0] == "kimi-extract" and "--simulate" in argv
    monkeypatch.chdir(ROOT)
    out = tmp_path / "out.csv"
    argv = [str(out) if a.endswith("_out.csv") else a for a in argv[1:]]
    assert main([*argv, "--no-progress"]) == 0
    assert out.exists()
    assert os.path.getsize(out) > 0
    # The demo shows the prompt cache at work: its schema (the annotation guide) is a shared
    # prefix past Kimi's 256-token minimum, written once and read by the other rows.
    summary = capsys.readouterr().out
    cached = re.search(r"cached\s+([\d,]+) \((\d+)%\)", summary)
    assert cached is not None, summary
    assert int(cached.group(2)) >= 50


def test_the_test_command_is_the_one_ci_runs() -> None:
    command = _bash('pip install -e ".[dev]"')
    assert command == 'pip install -e ".[dev]" && pytest -q'
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert 'pip install -q -e ".[dev]"' in ci and "pytest -q" in ci
