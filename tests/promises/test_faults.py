"""The fault matrix: every failure the API can produce, checked from the server's history.

Every input row must come out exactly once, with values or with a reason."""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import random
import socket
import statistics
import time
import traceback
from pathlib import Path

import pandas as pd
import pytest

import kimi_extract as kx
from kimi_extract.http.clock import use_clock
from kimi_extract.http.transport import Exchange, Secret, Transport
from kimi_extract.simulator import Reply, Simulator

from ..conftest import FastClock, Review, chat_requests

SECRET = "sk-fault-matrix-0123456789abcdef"


def rows(n: int) -> list[str]:
    return [f"row {i} about a kettle" for i in range(n)]


def by_row(sim: Simulator) -> dict[str, list]:
    grouped: dict[str, list] = {}
    for h in chat_requests(sim):
        grouped.setdefault(h.body["messages"][-1]["content"], []).append(h)
    return grouped


@pytest.mark.parametrize(
    ("status", "error_type", "stops"),
    [
        (400, "invalid_request_error", False),
        (401, "invalid_authentication_error", True),
        (403, "permission_denied_error", True),
        (404, "resource_not_found_error", True),
        (429, "exceeded_current_quota_error", True),
    ],
)
def test_non_retryable_errors_are_sent_once(sim, make_extractor, status, error_type, stops):
    # The first row succeeds, so a 400 for every other row is per-row, not a run stop.
    sim.responder = lambda r: (
        None
        if r.user_text == "row 0 about a kettle"
        else Reply(status=status, error_type=error_type, error_message="no")
    )
    ex = make_extractor(concurrency=1)
    if stops:
        with pytest.raises(kx.RunStopped):
            ex.run(rows(20))
        assert len(chat_requests(sim)) == 2  # the good row, then the one that stopped the run
    else:
        out = ex.run(rows(20))
        assert out["kx_error"].notna().sum() == 19
    assert all(len(hs) == 1 for hs in by_row(sim).values())


def kimi_429(kind: str) -> Reply:
    message = "Your account org-sim request reached organization max RPM: 1000, please try again"
    headers = {
        "retry-after": {"Retry-After": "2"},
        "retry-after-ms": {"retry-after-ms": "1500"},
        "http-date": {"Retry-After": email.utils.formatdate(time.time() + 2, usegmt=True)},
        "past-date": {"Retry-After": email.utils.formatdate(time.time() - 30, usegmt=True)},
    }.get(kind)
    return Reply(
        status=429,
        error_type="rate_limit_reached_error",
        # Without a header, only Kimi's message says how long to wait.
        error_message=message + (" later" if headers else " after 1 seconds"),
        headers=headers,
    )


WAITS = {
    "retry-after": 2.0,
    "retry-after-ms": 1.5,
    "http-date": 1.0,
    "past-date": 0.0,
    "message-only": 1.0,
}


#: The 429 matrix's client waits on a clock this much faster than real time (``FastClock``).
MATRIX_SPEEDUP = 10.0


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(WAITS))
def test_30_percent_429s_lose_nothing_and_never_retry_early(sim, make_extractor, kind):
    # The waits are what is checked: each one still passes, in 1/MATRIX_SPEEDUP of its real
    # time, between the server's 429 and the retry it records.
    n = 1000
    rng = random.Random(7)
    refusals: dict[str, int] = {}

    def responder(request):
        # 30 % of requests refused, but no row more than 4 times in a row, so the retry cap (8)
        # is never what decides the outcome (0.3^9 per row would make the test flaky).
        if rng.random() < 0.30 and refusals.get(request.user_text, 0) < 4:
            refusals[request.user_text] = refusals.get(request.user_text, 0) + 1
            return kimi_429(kind)
        return None

    sim.responder = responder
    # Random 429s are not a rate limit, so the adaptive rate would (rightly) slow the run right
    # down; this test is about retry timing, so it keeps a fixed window.
    with use_clock(FastClock(MATRIX_SPEEDUP)):
        out = make_extractor(concurrency=200, adaptive=False).run(rows(n))
    assert len(out) == n
    assert out["kx_error"].isna().all(), out["kx_error"].dropna().unique()[:3]
    assert sum(1 for h in chat_requests(sim) if h.status == 429) > 0.2 * n
    for history in by_row(sim).values():
        for before, after in zip(history, history[1:], strict=False):
            assert before.status == 429
            # HTTP dates have 1 s resolution, so their wait is at least the whole seconds left.
            # Measured from the refused request's arrival, which comes before the client can
            # read the 429 whatever the load (the simulator stamps a reply's end only after
            # sending it, so on a busy machine the client may read it before ``t_end``).
            assert after.t_start - before.t_start >= WAITS[kind] / MATRIX_SPEEDUP


def test_retry_after_beyond_the_cap_never_retries_early(sim, make_extractor):
    sim.responder = lambda r: Reply(
        status=429,
        error_type="rate_limit_reached_error",
        error_message="busy",
        headers={"Retry-After": "30"},
    )
    out = make_extractor(max_retry_wait=5, concurrency=2).run(rows(4))
    assert out["kx_error"].str.startswith("RateLimitError").all()
    assert all(len(hs) == 1 for hs in by_row(sim).values())
    # Other rows pause for at most the cap (not the 30 s asked), so the run does not stall.
    sends = sorted(h.t_start for h in chat_requests(sim))
    assert max(b - a for a, b in zip(sends, sends[1:], strict=False)) < 30


def test_all_503_backoff_is_bounded_jittered_and_capped_in_attempts(sim, make_extractor):
    sim.responder = lambda r: Reply(status=503, error_type="server_error", error_message="down")
    started = time.monotonic()
    out = make_extractor(max_retries=3, concurrency=8).run(rows(8))
    assert out["kx_error"].str.startswith("ServerError").all()
    # A sanity bound (at most 1 + 2 + 4 s of waits per row, in parallel); the exact waits are
    # checked on the virtual clock in test_conversation_unit.
    assert time.monotonic() - started < 60
    gaps_by_attempt: dict[int, list[float]] = {}
    for history in by_row(sim).values():
        assert len(history) == 4  # 1 + max_retries: no nested retry layers
        for n, (a, b) in enumerate(zip(history, history[1:], strict=False)):
            gap = b.t_start - a.t_end
            # Full jitter in [0, base * 2^n]: never early; late only by what a busy machine
            # adds (the exact bound: test_conversation_unit, on the virtual clock).
            assert 0 <= gap <= 10 * 0.5 * 2 ** (n + 1)
            gaps_by_attempt.setdefault(n, []).append(gap)
    # Not in lock step: rows wait different times before the same retry.
    assert all(statistics.pstdev(g) > 0.01 for g in gaps_by_attempt.values())


def test_read_timeout_aborts_at_the_timeout(sim, make_extractor):
    sim.responder = lambda r: Reply(fault="hang")
    out = make_extractor(timeout=1.0, max_retries=1, concurrency=1).run(rows(1))
    assert out.loc[0, "kx_error"].startswith("APITimeoutError")
    per_attempt = out.loc[0, "kx_latency_s"] / 2
    assert 0.9 <= per_attempt <= 10  # never early; the server would hang for an hour


def test_connect_timeout():
    # A listening socket whose backlog is full drops further SYNs, so connect never completes.
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    fillers = []
    for _ in range(4):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        fillers.append(s)
    time.sleep(0.1)
    probe = socket.socket()
    probe.settimeout(0.5)
    try:
        probe.connect(("127.0.0.1", port))
        pytest.skip("this kernel accepts connections beyond the backlog")
    except (TimeoutError, OSError):
        pass
    finally:
        probe.close()

    async def attempt() -> float:
        transport = Transport(
            base_url=f"http://127.0.0.1:{port}",
            api_key=Secret("k"),
            concurrency=1,
            connection=kx.Connection(timeout=30),
            connect_timeout=1.0,
        )
        async with transport:
            started = time.monotonic()
            with pytest.raises(kx.APIConnectionError):
                await transport.send({"model": "m", "messages": []}, Exchange())
            return time.monotonic() - started

    try:
        assert 0.9 <= asyncio.run(attempt()) <= 10  # never early; connect would never finish
    finally:
        for s in fillers:
            s.close()
        server.close()


def extractor_for(server: Simulator, **options) -> kx.Extractor:
    """An extractor pointed at a simulator started with fault options (not the ``sim`` fixture)."""
    return kx.Extractor(
        Review,
        base_url=server.base_url,
        api_key=server.api_key,
        progress=False,
        concurrency=16,
        **options,
    )


@pytest.mark.parametrize("stream", [False, True])
def test_resets_and_cut_streams_are_retried_and_nothing_is_lost(fast_time, stream):
    # The backoff waits (fast_time) are not what is checked here: that every row comes out.
    with Simulator(fault_reset=0.15, fault_stream_cut=0.15, seed=3) as server:
        ex = extractor_for(server, stream=stream)
        out = ex.run(rows(200))
        assert out["kx_error"].isna().all()
        faults = [h for h in server.history if h.fault]
        assert len(faults) > 20
        assert out["kx_attempts"].sum() == sum(
            1 for h in server.history if h.status == 200 and not h.fault
        )


def test_invalid_json_and_truncation_are_fixed_by_reask_and_budget_doubling():
    with Simulator(fault_invalid_json=0.10, fault_truncate=0.05, seed=5) as server:
        ex = extractor_for(server, validation_retries=2)
        out = ex.run(rows(300))
        failed = out["kx_error"].notna()
        # A row fails only if every reask is broken too (~0.1 % for JSON, ~0.25 % for length).
        assert failed.sum() <= 9
        assert out.loc[failed, "kx_error"].str.contains("ValidationFailed|truncated").all()
        broken = [h for h in server.history if h.fault and "invalid_json" in h.fault]
        truncated = [h for h in server.history if h.fault and "truncate" in h.fault]
        assert len(broken) > 15 and len(truncated) > 5
        # Every answer is counted on its row, and every row that got a broken answer asked again.
        assert out["kx_attempts"].sum() == sum(1 for h in server.history if h.status == 200)
        # ... except a JSON answer wrapped in prose, which the parser recovers as it is.
        rows_out = out.set_index("input")
        for h in broken + truncated:
            row = rows_out.loc[h.body["messages"][1]["content"]]
            if row["kx_attempts"] == 1:
                content = h.response["choices"][0]["message"]["content"]
                embedded = json.loads(content[content.index("{") : content.rindex("}") + 1])
                assert embedded == {"sentiment": row["sentiment"], "aspects": row["aspects"]}


def test_permanently_invalid_rows_are_reported_with_status_type_and_request_id(sim, make_extractor):
    bad = set(random.Random(1).sample(range(1000), 50))

    def responder(request):
        index = int(request.user_text.split()[1])
        if index in bad:
            return Reply(
                status=400,
                error_type="invalid_request_error",
                error_message=f"content of row {index} is not acceptable",
            )
        return None

    sim.responder = responder
    out = make_extractor(concurrency=32).run(rows(1000))
    failed = out["kx_error"].notna()
    assert failed.sum() == 50 and (~failed).sum() == 950
    assert set(out.index[failed]) == bad
    assert (
        out.loc[failed, "kx_error"]
        .str.match(r"BadRequestError: 400 invalid_request_error: .* \(request id req-\w+\)")
        .all()
    )
    statuses = pd.Series([h.status for h in chat_requests(sim)]).value_counts()
    assert statuses[400] == 50 and statuses[200] == 950


def test_key_never_leaks_into_logs_errors_store_or_outputs(tmp_path: Path, caplog, fast_time):
    for name in ("kimi_extract", "httpx", "httpcore", "tenacity", "aiohttp", "asyncio"):
        logging.getLogger(name).setLevel(logging.DEBUG)
    caplog.set_level(logging.DEBUG)
    fragments = [SECRET, SECRET[:8], SECRET[-4:]]
    texts: list[str] = []
    scenarios = [
        Reply(
            status=429,
            error_type="rate_limit_reached_error",
            error_message="slow",
            headers={"retry-after-ms": "10"},
        ),
        Reply(status=500, error_type="server_error", error_message="boom"),
        Reply(fault="hang"),
    ]
    for backend in ("aiohttp", "httpx"):
        for reply in scenarios:
            with Simulator(api_key=SECRET, responder=lambda r, reply=reply: reply) as server:
                ex = kx.Extractor(
                    Review,
                    base_url=server.base_url,
                    api_key=SECRET,
                    progress=False,
                    max_retries=1,
                    timeout=0.3,
                    http_backend=backend,
                    store=tmp_path / "store.sqlite3",
                )
                texts.append(repr(ex))
                out = ex.run(rows(2))
                texts.extend(str(e) for e in out["kx_error"])
                ex.run_to(tmp_path / f"out-{backend}.jsonl", rows(1))
        with Simulator(api_key="sk-other") as server:  # 401 with our key
            ex = kx.Extractor(
                Review,
                base_url=server.base_url,
                api_key=SECRET,
                progress=False,
                http_backend=backend,
                store=False,
            )
            with pytest.raises(kx.RunStopped) as info:
                ex.run(rows(3))
            texts.append("".join(traceback.format_exception(info.value)))
            texts.append(repr(info.value) + repr(info.value.cause))
            texts.append(info.value.partial.to_csv())
    texts.append(caplog.text)
    for path in tmp_path.iterdir():
        texts.append(path.read_bytes().decode("utf-8", "replace"))
    blob = "\n".join(texts)
    assert "HTTP" in caplog.text or caplog.records  # logging really was on
    for fragment in fragments:
        assert fragment not in blob
