"""The benchmark suite's reduced run (``benchmarks/run.py --quick``), so the suite cannot rot.

No timing assertions: only that every measurement completes and the report files are written.
Peers (openai, instructor) and the plot (matplotlib) are skipped by the suite when not installed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_quick_benchmark_run_writes_its_report(tmp_path: Path) -> None:
    env = dict(os.environ)
    # The clients' default on-disk store must not touch the user's cache directory.
    env["KIMI_EXTRACT_STORE_DIR"] = str(tmp_path / "store")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick", "--out", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,  # a hung client (a scheduling bug) fails here instead of stalling CI
    )
    assert proc.returncode == 0, proc.stderr[-3000:]

    sections = json.loads((tmp_path / "results.json").read_text())
    assert [s["key"] for s in sections] == ["1", "2", "3", "4", "5", "6", "7", "8"]
    assert all(s["quick"] and s["rows"] and s["targets"] for s in sections)

    results = (tmp_path / "RESULTS.md").read_text()
    assert "--quick run" in results
    for number in range(1, 9):
        assert f"\n## {number}. " in results
    assert (tmp_path / "results.png").exists() == (
        importlib.util.find_spec("matplotlib") is not None
    )
