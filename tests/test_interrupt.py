"""Ctrl-C stops a run promptly and closes its connections (checked in a child process)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kimi_extract.run.store import ResultStore

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
    arrived = []

    def hang(request):
        if not arrived:
            arrived.append(request)
            print("in flight", flush=True)
        return Reply(delay=60)

    with Simulator(responder=hang) as sim:
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
    assert proc.stdout.readline().strip() == "in flight"  # the first request reached the server
    time.sleep(0.2)  # and the others are on their way too
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


ENTRY_SCRIPT = INTERRUPTIBLE + textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    import kimi_extract as kx
    from kimi_extract.simulator import Reply, Simulator
    from pydantic import BaseModel

    class Out(BaseModel):
        value: str

    ENTRY, WHERE, folder, store = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4]
    # Three documents of four chunks each; only document 0's chunks are answered.
    for i in range(3):
        words = " ".join(f"w{i}x{j}" for j in range(60))
        (folder / f"doc{i}.txt").write_text("\\n\\n".join(f"doc {i} {words}" for _ in range(4)))
    slow = lambda r: None if "doc0" in r.user_text else Reply(delay=60)
    with Simulator(responder=slow) as sim:
        ex = kx.Extractor(Out, base_url=sim.base_url, api_key=sim.api_key, progress=False,
                          concurrency=4, store=store)
        if ENTRY == "extract":
            call = lambda: ex.extract("doc 1: hangs")
        elif ENTRY == "run":
            call = lambda: ex.run(["doc0 answered", "doc1 hangs", "doc2 hangs"])
        else:
            call = lambda: ex.run_documents(folder, chunk_chars=500)
        print("started", flush=True)
        try:
            if WHERE == "sync":
                call()
            else:  # a notebook cell: a running loop, SIGINT raises KeyboardInterrupt
                async def cell():
                    return call()
                loop = asyncio.new_event_loop()
                try:
                    loop.run_until_complete(cell())
                finally:
                    loop.close()
        except KeyboardInterrupt as stop:
            part = getattr(stop, "partial", None)
            shape = "none" if part is None else (
                f"{len(part)}:{list(part.get('kx_chunks', []))}:"
                f"{int(part['kx_error'].isna().sum())}:"
                f"{sorted(c for c in part.columns if c.startswith('kx_doc'))}"
            )
            print(type(stop).__name__, shape, flush=True)
    """
)


def _wait_for_stored(store: Path, rows: int) -> None:
    """Until ``rows`` rows are committed to ``store`` (then a moment for their delivery)."""
    deadline = time.monotonic() + 30
    while rows and time.monotonic() < deadline:
        if store.exists():
            opened = ResultStore(store)
            try:
                if len(opened) >= rows:
                    break
            finally:
                opened.close()
        time.sleep(0.05)
    time.sleep(0.5)


@pytest.mark.parametrize("where", ["sync", "in-running-loop"])
@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        # Every row; the answered one holds its value (in a notebook too: the wait for the run
        # to hand over its partial must survive the Ctrl-C).
        ("run", "RunInterrupted 3:[]:1:[]"),
        # One row per document (not per chunk): document 0 finished, the others say why not.
        ("run_documents", "RunInterrupted 3:[4, 4, 4]:1:[]"),
        ("extract", "RunInterrupted none"),
    ],
)
def test_ctrl_c_raises_run_interrupted_with_the_entry_points_partial(
    tmp_path, entry, expected, where
):
    store = tmp_path / "store.sqlite3"
    proc = subprocess.Popen(
        [sys.executable, "-c", ENTRY_SCRIPT, entry, where, str(tmp_path), str(store)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "started"
    # Document 0's chunks (the first row) are answered and stored; the other requests hang.
    _wait_for_stored(store, {"run": 1, "run_documents": 4, "extract": 0}[entry])
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert out.strip() == expected, err


def test_run_to_and_extract_never_carry_an_earlier_runs_partial(
    make_extractor, monkeypatch, tmp_path
):
    import pandas as pd

    import kimi_extract as kx
    import kimi_extract.extractor as extractor_module

    def ctrl_c(coro):  # the sync shell's view of a Ctrl-C during the run
        coro.close()
        raise KeyboardInterrupt

    monkeypatch.setattr(extractor_module, "run_sync", ctrl_c)
    ex = make_extractor()
    for call in (lambda: ex.run_to(tmp_path / "out.jsonl", ["a"]), lambda: ex.extract("a")):
        ex.last_partial = pd.DataFrame({"from an earlier run": [1]})
        with pytest.raises(kx.RunInterrupted) as caught:
            call()
        assert caught.value.partial is None
