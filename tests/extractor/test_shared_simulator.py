"""``base_url="simulator"``: the bundled simulator, chosen in code only; no key, no store."""

from __future__ import annotations

import dataclasses
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import kimi_extract as kx

from ..conftest import Review

REAL_KEY = "sk-real-key-0123456789abcdef"


def test_a_run_needs_no_key_and_keeps_no_store(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KIMI_API_KEY", REAL_KEY)  # present, and never read for the simulator
    monkeypatch.delenv("KIMI_EXTRACT_STORE", raising=False)  # the default store switched on
    monkeypatch.setenv("KIMI_EXTRACT_STORE_DIR", str(tmp_path))
    ex = kx.Extractor(Review, base_url="simulator", progress=False)
    assert ex.config.secret is None and ex.store_path is None
    assert "base_url='simulator'" in repr(ex)
    out = ex.run(["great phone", "broke in a week"])
    assert out["kx_error"].isna().all() and out["kx_prompt_tokens"].gt(0).all()
    assert list(tmp_path.iterdir()) == []


def test_the_switch_survives_replace_and_pickling() -> None:
    config = kx.ExtractorConfig(base_url="simulator")
    derived = dataclasses.replace(config, rpm=60)  # what a Dask partition gets
    assert derived.simulated and pickle.loads(pickle.dumps(derived)).simulated
    assert kx.Extractor(Review, config=derived).base_url.startswith("http://127.0.0.1:")


def test_a_key_with_the_simulator_is_refused() -> None:
    with pytest.raises(kx.ConfigurationError, match="api_key: base_url='simulator'"):
        kx.Extractor(Review, base_url="simulator", api_key=REAL_KEY)


def test_one_simulator_per_process_announced_once() -> None:
    script = textwrap.dedent(
        """
        import kimi_extract as kx
        from pydantic import BaseModel

        class Out(BaseModel):
            value: str

        first = kx.Extractor(Out, base_url="simulator", progress=False)
        second = kx.Extractor(Out, base_url="simulator", progress=False)
        assert first.base_url == second.base_url
        print(second.run(["one", "two"])["kx_error"].isna().all())
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "EVOLINK_"))}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
    assert done.stderr.count("requests go to the bundled Kimi simulator") == 1
