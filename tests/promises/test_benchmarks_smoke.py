"""The benchmark suite's reduced run (``benchmarks/run.py --quick``), so the suite cannot rot.

No timing assertions: only that every measurement completes and the report files are written.
Peers (openai, instructor) and the plot (matplotlib) are skipped by the suite when not installed.

The run takes a minute or more in its own processes, so when this test is collected it starts at
once (``start_in_background``, called from conftest's ``pytest_collection_finish``) and runs beside
the rest of the suite; the test then waits for it. Run alone, the test starts it itself.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: A hung client (a scheduling bug) fails the test after this long instead of stalling CI.
TIMEOUT_S = 300


class QuickRun:
    """``benchmarks/run.py --quick`` in its own process, writing into a fresh directory."""

    def __init__(self) -> None:
        self.out = Path(tempfile.mkdtemp(prefix="kx-bench-quick-"))
        env = dict(os.environ)
        # The clients' default on-disk store must not touch the user's cache directory.
        env["KIMI_EXTRACT_STORE"] = "off"
        env["KIMI_EXTRACT_STORE_DIR"] = str(self.out / "store")
        self.log = (self.out / "run.log").open("w")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "benchmarks" / "run.py"),
                "--quick",
                "--out",
                str(self.out),
            ],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its own process group: stop() ends its servers and clients
        )

    def wait(self) -> int:
        try:
            return self.proc.wait(timeout=TIMEOUT_S)
        finally:
            self.stop()

    def output(self) -> str:
        return (self.out / "run.log").read_text(errors="replace")

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # any process it left behind, too
        self.proc.wait()
        self.log.close()

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.out, ignore_errors=True)


_background: list[QuickRun] = []


def start_in_background() -> None:
    """Start the quick run now, for the test to collect later (conftest calls this)."""
    if not _background:
        _background.append(QuickRun())


def stop_background() -> None:
    """End a quick run the session did not get to (conftest calls this at the session's end)."""
    while _background:
        _background.pop().remove()


@pytest.mark.slow
def test_quick_benchmark_run_writes_its_report() -> None:
    run = _background.pop() if _background else QuickRun()
    try:
        check_quick_run(run)
    finally:
        run.remove()


def check_quick_run(run: QuickRun) -> None:
    returncode = run.wait()
    assert returncode == 0, run.output()[-3000:]
    out = run.out

    sections = json.loads((out / "results.json").read_text())
    assert [s["key"] for s in sections] == [str(n) for n in range(1, 13)]
    assert all(s["quick"] and s["rows"] and s["targets"] for s in sections)

    results = (out / "RESULTS.md").read_text()
    assert "--quick run" in results
    for number in range(1, 13):
        assert f"\n## {number}. " in results
    assert (out / "results.png").exists() == (importlib.util.find_spec("matplotlib") is not None)
