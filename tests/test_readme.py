"""The README's examples run as written, offline, with nothing the text does not show.

Every ```python block runs in a fresh ``python`` process, started in a scratch copy of the
checkout's ``examples/`` the way the README says to run it (a checkout, ``pip install -e .``),
with no API key, no ``KIMI_*`` variable and a fresh ``HOME``: only what the block itself shows.
A block whose first line is ``# continues ...`` runs after the block before it, in the same
process, as if pasted into the same session; any other block starts a new one, so a missing
import fails. A block may opt out only with an HTML comment ``<!-- not run: reason -->`` on the
line before it. A session whose first block follows ``<!-- no requests: reason -->`` (one that
scores frames it builds itself, say) runs the same way and must not start the simulator. The
quick-start command runs through the CLI exactly as printed.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kimi_extract.cli import main

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCK = re.compile(r"(?P<before>[^\n]*)\n```(?P<lang>\w*)\n(?P<code>.*?)\n```", re.S)
#: Printed when a process starts the bundled simulator (kimi_extract.shared_simulator).
SIMULATOR_BANNER = "requests go to the bundled Kimi simulator"


def blocks(lang: str) -> list[tuple[str, str]]:
    return [(m["before"], m["code"]) for m in BLOCK.finditer(README) if m["lang"] == lang]


def sessions() -> list[str]:
    """The Python blocks grouped into the sessions a reader pastes them into, in order."""
    grouped: list[list[str]] = []
    for before, code in blocks("python"):
        if before.startswith("<!-- not run"):
            continue
        if code.startswith("# continues") and grouped:
            grouped[-1].append(code)
        else:
            grouped.append([code])
    return ["\n\n".join(group) for group in grouped]


def sends_requests(session: str) -> bool:
    """False for a session whose first block the README marks ``<!-- no requests: ... -->``."""
    return not any(
        before.startswith("<!-- no requests") and session.startswith(code)
        for before, code in blocks("python")
    )


def _bare_environment(home: Path) -> dict[str, str]:
    """What a fresh shell in a checkout has: no key, no KIMI_* setting, an empty HOME. Only the
    interpreter's own PATH and the PYTHONPATH that selects this checkout are kept."""
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "MPLBACKEND": "Agg"}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


SESSIONS = sessions()


def test_the_readme_has_its_python_blocks() -> None:
    assert len(SESSIONS) >= 5 and len(blocks("python")) >= 7
    assert all("KIMI_" not in code and "api_key" not in code for code in SESSIONS)


@pytest.mark.parametrize("number", range(len(SESSIONS)))
def test_python_block_runs_offline_as_written(number: int, tmp_path: Path) -> None:
    # A scratch copy of the repository's examples, so files the blocks write land in tmp.
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    home = tmp_path / "home"
    home.mkdir()
    code = SESSIONS[number]
    done = subprocess.run(
        [sys.executable, "-"],
        input=code,
        cwd=tmp_path,
        env=_bare_environment(home),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{code}\n--- stderr:\n{done.stderr[-3000:]}"
    if sends_requests(code):
        assert SIMULATOR_BANNER in done.stderr  # it ran, offline, against the bundled simulator
    else:
        assert SIMULATOR_BANNER not in done.stderr  # as the README says: no request at all
    assert list(home.iterdir()) == []  # no default result store, nothing else written there


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
    # The demo shows the prompt cache at work: its schema (the annotation guide) is a shared
    # prefix past Kimi's 256-token minimum, written once and read by the other rows.
    summary = capsys.readouterr().out
    cached = re.search(r"cached\s+([\d,]+) \((\d+)%\)", summary)
    assert cached is not None, summary
    assert int(cached.group(2)) >= 50
