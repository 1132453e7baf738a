"""The example scripts run offline with ``--simulate`` and fail loudly, not with empty tables."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from kimi_extract.exceptions import install_hint

ROOT = Path(__file__).resolve().parents[2]
#: Runs a script as ``python SCRIPT ARGS`` would, with the named packages missing (as on the base
#: install) and deprecation warnings as errors.
RUNNER = (
    "import runpy, sys, warnings\n"
    "warnings.simplefilter('error', DeprecationWarning)\n"
    "script, missing, *args = sys.argv[1:]\n"
    "for name in filter(None, missing.split(',')):\n"
    "    sys.modules[name] = None\n"
    "sys.argv = [script, *args]\n"
    "runpy.run_path(script, run_name='__main__')\n"
)


def _run(script: str, *args: str, missing: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "EVOLINK_"))}
    return subprocess.run(
        [sys.executable, "-c", RUNNER, str(ROOT / "examples" / script), missing, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_tables_from_pdf_runs_offline_without_deprecated_options() -> None:
    done = _run("tables_from_pdf.py", "--simulate")
    assert done.returncode == 0, done.stderr
    assert "invoice.pdf" in done.stdout and "DeprecationWarning" not in done.stderr
    assert "bundled Kimi simulator" in done.stderr


def test_tables_from_pdf_without_pypdfium2_says_how_to_install_and_fails() -> None:
    # It printed a table of None values and exited 0.
    done = _run("tables_from_pdf.py", "--simulate", missing="pypdfium2")
    assert done.returncode == 1
    assert install_hint("pdf") in done.stderr
    assert done.stdout == ""


def test_caption_images_runs_offline_and_reports_failed_rows() -> None:
    done = _run("caption_images.py", "--simulate")
    assert done.returncode == 0, done.stderr
    assert "sunset.bmp" in done.stdout
    # Without Pillow the .bmp cannot be converted: that row fails, says why, and so does the exit.
    done = _run("caption_images.py", "--simulate", missing="PIL")
    assert done.returncode == 1
    assert "sunset.bmp" in done.stderr and install_hint("images") in done.stderr
