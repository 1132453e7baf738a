"""Ctrl-C stops a run promptly and closes its connections (checked in a child process)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

from .conftest import INTERRUPTIBLE

SCRIPT = INTERRUPTIBLE + textwrap.dedent(
    """
    import asyncio, sys, time, warnings
    warnings.simplefilter("always")
    import kimi_extract as kx
    from kimi_extract.simulator import Reply, Simulator
    from pydantic import BaseModel

    class Out(BaseModel):
        value: str

    MODE = sys.argv[1]
    with Simulator(responder=lambda r: Reply(delay=60)) as sim:
        ex = kx.Extractor(Out, base_url=sim.base_url, api_key=sim.api_key, progress=False,
                          concurrency=4)
        print("started", flush=True)
        try:
            if MODE == "sync":
                ex.run([f"row {i}" for i in range(20)])
            else:
                # Like a notebook kernel: a running loop, and SIGINT raises KeyboardInterrupt
                # (asyncio.run would instead swallow the first SIGINT as a cancel).
                async def cell():
                    return ex.run([f"row {i}" for i in range(20)])
                loop = asyncio.new_event_loop()
                try:
                    loop.run_until_complete(cell())
                finally:
                    loop.close()
        except KeyboardInterrupt:
            print("interrupted", flush=True)
    """
)


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("parent_sigint", ["default", "ignored"])
@pytest.mark.parametrize("mode", ["sync", "in-running-loop"])
def test_ctrl_c_stops_promptly_without_unclosed_warnings(mode, parent_sigint):
    # "ignored": started the way a shell starts a background job (`pytest &`), which passes
    # SIGINT's "ignore" disposition on to every child.
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, "sync" if mode == "sync" else "loop"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_ignore_sigint if parent_sigint == "ignored" else None,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "started"
    time.sleep(1.0)  # requests are in flight now
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    elapsed = time.monotonic() - sent
    assert "interrupted" in out, err
    assert elapsed < 5, elapsed  # generous bound; typically well under a second
    # aiohttp / asyncio name what was left open: client session, connector, transport, socket.
    for leak in (
        "Unclosed client session",
        "Unclosed connector",
        "unclosed transport",
        "unclosed <socket",
        "unclosed event loop",
    ):
        assert leak not in err, err
