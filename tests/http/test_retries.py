"""Retries through real HTTP: server waits honoured, non-retryable statuses sent once, run stops."""

from __future__ import annotations

import email.utils
import time

import pandas as pd
import pytest

import kimi_extract as kx
from kimi_extract.simulator import Reply

from ..conftest import chat_requests

KIMI_429 = (
    "Your account org-sim request reached organization max RPM: 3, please try again after 1 seconds"
)


def fail_first(n: int, reply: Reply):
    """A responder failing the first n requests with ``reply``, then answering normally."""

    def responder(request):
        return reply if request.index < n else None

    return responder


def gaps(sim) -> list[float]:
    """Seconds between the end of each request and the start of the next."""
    history = chat_requests(sim)
    return [b.t_start - a.t_end for a, b in zip(history, history[1:], strict=False)]


@pytest.mark.parametrize(
    ("headers", "message", "wait", "fast"),
    [
        ({"Retry-After": "1"}, "slow down", 1.0, False),
        ({"retry-after-ms": "400"}, "slow down", 0.4, False),
        # Two seconds ahead when the test starts; HTTP dates have 1 s resolution.
        ("http-date", "slow down", 1.0, False),
        ({}, "Engine overloaded, please try again after 1 seconds", 1.0, False),
        # Kimi's message names the RPM it hit (3), so the next send also keeps to 3 per minute:
        # ~40 s of pacing, on a fast clock.
        ({}, KIMI_429, 1.0, True),
    ],
    ids=[
        "retry-after",
        "retry-after-ms",
        "http-date",
        "message-no-header",
        "kimi-message-no-header",
    ],
)
def test_429_waits_what_the_server_said(sim, make_extractor, request, headers, message, wait, fast):
    scale = request.getfixturevalue("fast_time").speedup if fast else 1.0
    if headers == "http-date":
        headers = {"Retry-After": email.utils.formatdate(time.time() + 2, usegmt=True)}
    sim.responder = fail_first(
        1,
        Reply(
            status=429,
            error_type="rate_limit_reached_error",
            error_message=message,
            headers=headers,
        ),
    )
    out = make_extractor(concurrency=1).run(["a"])
    assert out.loc[0, "kx_error"] is None
    history = chat_requests(sim)
    assert [h.status for h in history] == [429, 200]
    assert gaps(sim)[0] * scale >= wait - 0.01
    assert out.loc[0, "kx_attempts"] == 1  # error responses are not model answers


def test_500_is_retried_with_backoff(sim, make_extractor, fast_time):
    sim.responder = fail_first(
        2, Reply(status=500, error_type="server_error", error_message="boom")
    )
    out = make_extractor(concurrency=1).run(["a"])
    assert out.loc[0, "kx_error"] is None
    assert [h.status for h in chat_requests(sim)] == [500, 500, 200]


def test_engine_overloaded_is_retried(sim, make_extractor, fast_time):
    sim.responder = fail_first(
        1,
        Reply(
            status=429,
            error_type="engine_overloaded_error",
            error_message="overloaded",
            headers={"retry-after-ms": "50"},
        ),
    )
    out = make_extractor(concurrency=1).run(["a"])
    assert out.loc[0, "kx_error"] is None and len(chat_requests(sim)) == 2


def test_read_timeout_is_retried(sim, make_extractor):
    sim.responder = fail_first(1, Reply(delay=3.0))
    out = make_extractor(concurrency=1, timeout=0.5).run(["a"])
    assert out.loc[0, "kx_error"] is None
    assert len(chat_requests(sim)) == 2


def test_retries_exhausted_gives_row_error(sim, make_extractor):
    sim.responder = lambda r: Reply(
        status=503, error_message="unavailable", headers={"retry-after-ms": "10"}
    )
    out = make_extractor(concurrency=1, max_retries=2).run(["a"])
    assert len(chat_requests(sim)) == 3
    assert out.loc[0, "kx_error"].startswith("ServerError: 503")


def test_server_wait_beyond_cap_is_not_shortened(sim, make_extractor):
    sim.responder = lambda r: Reply(
        status=429,
        error_type="rate_limit_reached_error",
        error_message="busy",
        headers={"Retry-After": "120"},
    )
    out = make_extractor(concurrency=1, max_retry_wait=5).run(["a"])
    assert len(chat_requests(sim)) == 1
    assert out.loc[0, "kx_error"].startswith("RateLimitError")


def test_400_is_sent_once_per_row(sim, make_extractor):
    def responder(request):
        if "bad" in request.user_text:
            return Reply(
                status=400,
                error_type="invalid_request_error",
                error_message=f"rejected {request.user_text}",
            )
        return None

    sim.responder = responder
    out = make_extractor(concurrency=2).run(["good 1", "bad 1", "good 2", "bad 2"])
    statuses = [h.status for h in chat_requests(sim)]
    assert statuses.count(400) == 2 and statuses.count(200) == 2
    assert out["kx_error"].notna().tolist() == [False, True, False, True]
    assert "BadRequestError: 400 invalid_request_error" in out.loc[1, "kx_error"]


@pytest.mark.parametrize(
    ("status", "error_type", "cls"),
    [
        (401, "invalid_authentication_error", kx.AuthenticationError),
        (403, "permission_denied_error", kx.PermissionDeniedError),
        (404, "resource_not_found_error", kx.NotFoundError),
        (429, "exceeded_current_quota_error", kx.QuotaExceededError),
    ],
)
def test_run_level_errors_stop_the_run_without_retry(sim, make_extractor, status, error_type, cls):
    sim.responder = lambda r: Reply(status=status, error_type=error_type, error_message="no")
    rows = [f"row {i}" for i in range(50)]
    with pytest.raises(kx.RunStopped) as info:
        make_extractor(concurrency=2).run(rows)
    assert isinstance(info.value.cause, cls)
    requests = chat_requests(sim)
    assert len(requests) <= 2  # stopped at once: no retries, no more rows
    partial = info.value.partial
    assert isinstance(partial, pd.DataFrame) and len(partial) == 50
    assert partial["kx_error"].notna().all()


def test_same_400_for_first_rows_stops_the_run(sim, make_extractor):
    sim.responder = lambda r: Reply(
        status=400, error_type="invalid_request_error", error_message="response_format is invalid"
    )
    with pytest.raises(kx.RunStopped) as info:
        make_extractor(concurrency=1).run([f"row {i}" for i in range(30)])
    assert isinstance(info.value.cause, kx.BadRequestError)
    assert len(chat_requests(sim)) == 3


def test_wrong_key_is_an_authentication_stop(sim, make_extractor):
    with pytest.raises(kx.RunStopped) as info:
        make_extractor(api_key="sk-wrong").run(["a", "b", "c"])
    assert isinstance(info.value.cause, kx.AuthenticationError)
    assert all(h.status == 401 for h in chat_requests(sim))
