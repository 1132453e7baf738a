"""Ctrl-C stops a run promptly and closes its connections (checked in a child process)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kimi_extract.run.store import ResultStore

from ..conftest import CTRL_C_BOUND_S, INTERRUPTIBLE

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
            # Every request hangs 60 s: an answered one would mean the run waited for it.
            answered = sum(1 for h in sim.history if h.status == 200)
            print("interrupted", answered, flush=True)
    """
)


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


MODES = ["sync", "in-running-loop"]
PARENT_SIGINT = ["default", "ignored"]
ENTRIES = ["run", "run_documents", "extract"]

#: Children started ahead by ``_children_ahead``, by case; a test takes its own (or, when run
#: alone, e.g. with -k, starts it then).
_AHEAD: dict[tuple[str, ...], subprocess.Popen[str]] = {}


def _stop_child(mode: str, parent_sigint: str) -> subprocess.Popen[str]:
    # "ignored": started the way a shell starts a background job (`pytest &`), which passes
    # SIGINT's "ignore" disposition on to every child.
    return subprocess.Popen(
        [sys.executable, "-c", SCRIPT, "sync" if mode == "sync" else "loop"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_ignore_sigint if parent_sigint == "ignored" else None,
    )


def _entry_child(entry: str, where: str, folder: Path) -> subprocess.Popen[str]:
    store = folder / "store.sqlite3"
    return subprocess.Popen(
        [sys.executable, "-c", ENTRY_SCRIPT, entry, where, str(folder), str(store)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _folder(factory: pytest.TempPathFactory, entry: str, where: str) -> Path:
    return factory.getbasetemp() / f"interrupt-{entry}-{where}"


@pytest.fixture(scope="module", autouse=True)
def _children_ahead(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Start every case's child process at once: a child spends most of its second importing
    and starting its simulator, which the two cores do side by side instead of one case after
    another. Each waits (its requests hang) until its test interrupts it."""
    for mode in MODES:
        for parent_sigint in PARENT_SIGINT:
            _AHEAD[("stop", mode, parent_sigint)] = _stop_child(mode, parent_sigint)
    for entry in ENTRIES:
        for where in MODES:
            folder = _folder(tmp_path_factory, entry, where)
            folder.mkdir()
            _AHEAD[("entry", entry, where)] = _entry_child(entry, where, folder)
    yield
    for proc in _AHEAD.values():  # cases deselected or failed early
        proc.kill()
        proc.communicate()
    _AHEAD.clear()


@pytest.mark.parametrize("parent_sigint", PARENT_SIGINT)
@pytest.mark.parametrize("mode", MODES)
def test_ctrl_c_stops_promptly_without_unclosed_warnings(mode, parent_sigint):
    proc = _AHEAD.pop(("stop", mode, parent_sigint), None) or _stop_child(mode, parent_sigint)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "started"
    assert proc.stdout.readline().strip() == "in flight"  # the first request reached the server
    time.sleep(0.2)  # and the others are on their way too
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    elapsed = time.monotonic() - sent
    # In the order of events: the run stopped while every request still hung (none answered).
    assert "interrupted 0" in out, (out, err)
    # Wall time only as a sanity bound (the machine may be busy): 10x docs/reliability.md's
    # "about two seconds", still well below the 60 s the requests hang. Typically well under a
    # second.
    assert elapsed < CTRL_C_BOUND_S, elapsed
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


@pytest.mark.parametrize("where", MODES)
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
    tmp_path_factory, entry, expected, where
):
    folder = _folder(tmp_path_factory, entry, where)
    store = folder / "store.sqlite3"
    proc = _AHEAD.pop(("entry", entry, where), None)
    if proc is None:
        folder.mkdir(exist_ok=True)
        proc = _entry_child(entry, where, folder)
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
    import kimi_extract.pipeline.base as pipeline_base

    def ctrl_c(coro):  # the sync shell's view of a Ctrl-C during the run
        coro.close()
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline_base, "run_sync", ctrl_c)
    ex = make_extractor()
    for call in (lambda: ex.run_to(tmp_path / "out.jsonl", ["a"]), lambda: ex.extract("a")):
        ex.last_partial = pd.DataFrame({"from an earlier run": [1]})
        with pytest.raises(kx.RunInterrupted) as caught:
            call()
        assert caught.value.partial is None
