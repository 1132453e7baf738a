"""The README's examples run as written (against the simulator), so they cannot drift.

Every ```python block runs in order in one namespace, next to a copy of ``examples/``, with
``KIMI_BASE_URL`` / ``KIMI_API_KEY`` pointing at a local simulator (the way a user points the
library at an endpoint). A block may opt out only with an HTML comment ``<!-- not run: reason -->``
on the line before it. The quick-start command runs through the CLI exactly as printed.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
import types
from pathlib import Path

import pytest

from kimi_extract.cli import main

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCK = re.compile(r"(?P<before>[^\n]*)\n```(?P<lang>\w*)\n(?P<code>.*?)\n```", re.S)


def blocks(lang: str) -> list[tuple[str, str]]:
    return [(m["before"], m["code"]) for m in BLOCK.finditer(README) if m["lang"] == lang]


def test_python_examples_run(
    sim, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fast_time: object
) -> None:
    # fast_time: the examples' retry waits pass 40x faster (that they run is what is checked).
    # A scratch copy of the repository's examples, so files the examples write land in tmp.
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KIMI_BASE_URL", sim.base_url)
    monkeypatch.setenv("KIMI_API_KEY", sim.api_key)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    module = types.ModuleType("readme_examples")  # a real module, so pydantic resolves names
    monkeypatch.setitem(sys.modules, module.__name__, module)
    namespace = module.__dict__
    ran = 0
    for before, code in blocks("python"):
        if before.startswith("<!-- not run"):
            continue
        exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102
        ran += 1
    assert ran >= 3
    assert len(sim.history) > 0


def test_quick_start_command_works_as_printed(tmp_path: Path, monkeypatch, capsys) -> None:
    command = next(code for _, code in blocks("bash") if "--simulate" in code)
    run = command.split("&&")[-1].strip()
    argv = shlex.split(run)
    assert argv[0] == "kimi-extract"
    monkeypatch.chdir(ROOT)
    out = tmp_path / "out.csv"
    argv = [str(out) if a.endswith("_out.csv") else a for a in argv[1:]]
    assert main([*argv, "--no-progress"]) == 0
    assert out.exists()
    assert os.path.getsize(out) > 0
