"""Retry-after parsing, error mapping and the retry policy (pure parts; HTTP in test_retries)."""

from __future__ import annotations

import asyncio
import email.utils
import gzip
import json
import logging
import math
import socket
import statistics
import time
import zlib

import httpx
import pytest
from pydantic import BaseModel

import kimi_extract as kx
from kimi_extract.config import Connection
from kimi_extract.exceptions import (
    AuthenticationError,
    BadRequestError,
    NotFoundError,
    PermissionDeniedError,
    QuotaExceededError,
    RateLimitError,
    ServerError,
)
from kimi_extract.http.backends import BACKENDS, connect_failure
from kimi_extract.http.clock import use_clock
from kimi_extract.http.transport import (
    Exchange,
    Secret,
    Transport,
    chat_url,
    error_from_response,
    retry_after_seconds,
)

from ..conftest import CTRL_C_BOUND_S, SPEEDUP, FastClock
from ..hostile import HostileServer, completion, http, sse


def headers(**values: str) -> httpx.Headers:
    return httpx.Headers({k.replace("_", "-"): v for k, v in values.items()})


def test_retry_after_ms_wins():
    assert retry_after_seconds(headers(retry_after_ms="1500", retry_after="9"), None) == 1.5


def test_retry_after_seconds_and_http_date():
    assert retry_after_seconds(headers(retry_after="2"), None) == 2.0
    future = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 28 <= retry_after_seconds(headers(retry_after=future), None) <= 31
    past = email.utils.formatdate(time.time() - 30, usegmt=True)
    assert retry_after_seconds(headers(retry_after=past), None) == 0.0


def test_retry_after_from_kimi_message():
    message = (
        "Your account org-x request reached organization max RPM: 3, please try again after "
        "1 seconds"
    )
    assert retry_after_seconds(headers(), message) == 1.0
    assert retry_after_seconds(headers(), "try again after 250 ms") == 0.25
    assert retry_after_seconds(headers(), "slow down") is None


def response(
    status: int, error_type: str | None, message: str = "m", **hdrs: str
) -> httpx.Response:
    body = {"error": {"message": message, "type": error_type, "code": None}}
    return httpx.Response(status, json=body, headers=headers(**hdrs))


@pytest.mark.parametrize(
    ("status", "error_type", "cls", "retryable"),
    [
        (400, "invalid_request_error", BadRequestError, False),
        (401, "invalid_authentication_error", AuthenticationError, False),
        (403, "permission_denied_error", PermissionDeniedError, False),
        (404, "resource_not_found_error", NotFoundError, False),
        (429, "rate_limit_reached_error", RateLimitError, True),
        (429, "engine_overloaded_error", RateLimitError, True),
        (429, "exceeded_current_quota_error", QuotaExceededError, False),
        (500, "server_error", ServerError, True),
        (503, None, ServerError, True),
        (408, None, ServerError, True),
        (409, None, ServerError, True),
    ],
)
def test_error_mapping(status, error_type, cls, retryable):
    resp = response(status, error_type, x_request_id="req-1")
    exc = error_from_response(resp.status_code, resp.headers, resp.content)
    assert type(exc) is cls
    assert exc.retryable is retryable
    assert exc.status == status and exc.error_type == error_type
    assert "req-1" in str(exc)


def test_error_body_not_json():
    resp = httpx.Response(502, content=b"<html>bad gateway</html>")
    exc = error_from_response(resp.status_code, resp.headers, resp.content)
    assert isinstance(exc, ServerError) and "bad gateway" in str(exc)


def test_429_reads_wait_from_message_without_header():
    resp = response(
        429, "rate_limit_reached_error", "max concurrency: 1, please try again after 3 seconds"
    )
    assert error_from_response(resp.status_code, resp.headers, resp.content).retry_after == 3.0


def test_chat_url_and_secret():
    assert chat_url("https://direct.evolink.ai") == "https://direct.evolink.ai/v1/chat/completions"
    assert chat_url("http://h:1/v1/") == "http://h:1/v1/chat/completions"
    secret = Secret("sk-very-secret-value")
    assert "sk-very" not in repr(secret) and "sk-very" not in str(secret)
    assert secret.get() == "sk-very-secret-value"


# -- hostile responses through real HTTP (tests/hostile.py, not the simulator) ------------------

KEY = "sk-hostile-A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6"


class Out(BaseModel):
    value: str


def key_parts(text: str) -> list[str]:
    """Every run of 8 characters of KEY found in ``text`` (the redaction promise)."""
    return [KEY[i : i + 8] for i in range(len(KEY) - 7) if KEY[i : i + 8] in text]


@pytest.fixture
def server():
    with HostileServer() as running:
        yield running


@pytest.fixture(autouse=True)
def _fast_retry_waits(fast_time):
    """Retry waits on the fast clock: this module checks what is retried and what errors say, not
    how long a retry waits (test_retries.py, test_faults.py and test_conversation_unit.py do)."""
    return fast_time


def make(server, **options):
    options.setdefault("base_url", server.base_url)
    options.setdefault("api_key", KEY)
    options.setdefault("progress", False)
    options.setdefault("max_retries", 1)
    options.setdefault("max_retry_wait", 0.2)
    options.setdefault("concurrency", 1)
    options.setdefault("timeout", 5)
    return kx.Extractor(Out, **options)


OK_USAGE = {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}
NO_USAGE = completion('{"value": "x"}')
del NO_USAGE["usage"]


@pytest.mark.parametrize(
    "body",
    [
        {"choices": [None], "usage": OK_USAGE},
        {"choices": [{"message": "hello", "finish_reason": "stop"}], "usage": OK_USAGE},
        {"choices": [{"message": {"content": 7}, "finish_reason": "stop"}], "usage": OK_USAGE},
        completion('{"value": "x"}', usage=[1, 2]),
        completion('{"value": "x"}', usage={"prompt_tokens": [1], "completion_tokens": "2"}),
        completion('{"value": "x"}', usage={"prompt_tokens": 1e300, "completion_tokens": 1}),
        completion('{"value": "x"}', usage={"prompt_tokens": -50, "completion_tokens": 5}),
        NO_USAGE,
        "[" * 100_000,
    ],
    ids=[
        "choices-null",
        "message-str",
        "content-int",
        "usage-list",
        "usage-list-str-fields",
        "usage-1e300",
        "usage-negative",
        "usage-missing",
        "nested-100k",
    ],
)
def test_malformed_200_is_retried_then_the_rows_error(server, body):
    """No raw crash, no silent $0 / negative cost: retried, then each row's kx_error."""
    server.respond = lambda r: http(200, body)
    out = make(server).run(["a", "b"])
    assert len(out) == 2 and out["value"].isna().all()
    assert all(e.startswith("ServerError: 200") and "malformed" in e for e in out["kx_error"])
    assert len(server.requests) == 4  # each row: first attempt + one retry


@pytest.mark.parametrize("value", ["5s", "soon", "nan", ""])
def test_unreadable_retry_after_is_ignored(server, value):
    def respond(request):
        if request.index == 0:
            error = {"error": {"type": "rate_limit_reached_error", "message": "slow"}}
            return http(429, error, headers={"Retry-After": value})
        return http(200, completion('{"value": "ok"}'))

    server.respond = respond
    out = make(server).run(["a"])
    assert out.loc[0, "kx_error"] is None and out.loc[0, "value"] == "ok"
    assert len(server.requests) == 2


def test_unreadable_retry_after_parses_to_none():
    for value in ("5s", "soon", "nan", "Mon, 99 Foo 2026", "-"):
        assert retry_after_seconds(headers(retry_after=value), None) is None
    assert retry_after_seconds(headers(retry_after_ms="soon", retry_after="2"), None) == 2.0


def test_200_error_object_is_mapped_like_the_http_error(server):
    error = {"error": {"type": "invalid_authentication_error", "message": "bad key"}}
    server.respond = lambda r: http(200, error)
    with pytest.raises(kx.RunStopped) as info:
        make(server).run(["a", "b"])
    assert isinstance(info.value.cause, kx.AuthenticationError)
    assert len(server.requests) == 1  # not retried as "no choices"
    assert len(info.value.partial) == 2


def test_200_error_object_rate_limit_is_retried(server):
    def respond(request):
        if request.index == 0:
            return http(200, {"error": {"type": "engine_overloaded_error", "message": "busy"}})
        return http(200, completion('{"value": "ok"}'))

    server.respond = respond
    out = make(server).run(["a"])
    assert out.loc[0, "value"] == "ok" and len(server.requests) == 2


def test_stream_error_event_is_mapped_like_the_http_error(server):
    error = {"error": {"type": "exceeded_current_quota_error", "message": "no balance"}}
    server.respond = lambda r: http(
        200, sse([error]), headers={"Content-Type": "text/event-stream"}
    )
    with pytest.raises(kx.RunStopped) as info:
        make(server, stream=True).run(["a"])
    assert isinstance(info.value.cause, kx.QuotaExceededError)
    assert len(server.requests) == 1


ECHOES = [
    f"Incorrect API key provided: {KEY}",
    f"Incorrect API key provided: {KEY[:6]}...{KEY[-4:]}",
    f"Incorrect API key provided: {KEY[:8]}{'*' * 20}{KEY[-4:]}.",
    f"key fragment {KEY[10:30]} rejected",
]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("backend", ["aiohttp", "httpx", "httpx-aiohttp"])
@pytest.mark.parametrize("status", [400, 401, 403, 404, 429, 500])
def test_a_server_echoing_the_key_never_leaks_it(server, caplog, status, backend, stream):
    error_type = {401: "invalid_authentication_error", 429: "rate_limit_reached_error"}.get(
        status, "invalid_request_error"
    )

    def respond(request):
        message = ECHOES[request.index % len(ECHOES)]
        body = {"error": {"type": error_type, "message": message, "code": KEY}}
        return http(status, body, headers={"x-request-id": KEY, "retry-after-ms": "1"})

    server.respond = respond
    caplog.set_level(logging.DEBUG)
    ex = make(server, http_backend=backend, stream=stream, adaptive=False)
    texts = []
    try:
        out = ex.run(["a", "b", "c"])
    except kx.RunStopped as exc:
        out = exc.partial
        texts += [str(exc), repr(exc), str(exc.cause), repr(exc.cause)]
    assert len(out) == 3 and out["kx_error"].notna().all()
    texts.append(out.to_json())
    with pytest.raises(kx.KimiExtractError) as info:
        ex.extract("d")
    texts += [str(info.value), repr(info.value)]
    texts.append(caplog.text)
    assert len(server.requests) >= 2  # the run and extract() both reached the server
    for text in texts:
        assert not key_parts(text), text
    assert "[redacted]" in out.to_json()


def test_run_to_file_never_holds_the_key(server, tmp_path):
    server.respond = lambda r: http(
        400, {"error": {"type": "invalid_request_error", "message": f"bad key {KEY}"}}
    )
    path = tmp_path / "out.jsonl"
    make(server).run_to(path, ["a", "b"])
    text = path.read_text()
    assert "kx_error" in text and "[redacted]" in text and not key_parts(text)


def test_redact_whole_partial_and_elided_key():
    secret = Secret(KEY)
    assert secret.redact(f"key {KEY}!") == "key [redacted]!"
    assert not key_parts(secret.redact(f"a{KEY[3:20]}b {KEY[25:34]}"))
    for elided in (
        f"{KEY[:6]}...{KEY[-3:]}",
        f"{KEY[:3]}***{KEY[-4:]}",
        f"{KEY[:7]}\u2026{KEY[-2:]}",
    ):
        assert secret.redact(f"provided: {elided}.") == "provided: [redacted]."
    unrelated = "sk-other...zz and a row about sk-host fans, 1.5... 2.0"
    assert secret.redact(unrelated) == unrelated
    assert secret.redact_value({"a": [KEY, 1, None]}) == {"a": ["[redacted]", 1, None]}


def test_suspect_finds_every_piece_redact_would_remove():
    """``suspect`` (the one-search check before redacting an answer) is never False for a text
    ``redact`` would change: every 8-character run of the key, and its elided forms."""
    secret = Secret(KEY)
    texts = [f"x{KEY[i : i + 8]}y" for i in range(len(KEY) - 7)]
    texts += [f"{KEY[:3]}...{KEY[-3:]}", f"({KEY[:4]}\u2026{KEY[-1:]})", KEY]
    for text in texts:
        assert secret.redact(text) != text and secret.suspect(text), text
        assert secret.suspect("\n".join(["clean", text, "clean"]))
    assert not secret.suspect('{"sentiment":"positive","aspects":["battery"]}')
    assert not Secret("").suspect(KEY)


def trickle(head: bytes, total: int = 300, every: float = 0.2) -> list[tuple[float, bytes]]:
    """Headers, then one byte every ``every`` seconds for ``total * every`` seconds."""
    return [(0.0, head)] + [(every, b" ")] * total


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("backend", ["aiohttp", "httpx"])
def test_timeout_is_a_deadline_for_a_trickling_server(server, backend, stream):
    """One byte every 0.2 s never trips a per-read timeout; the attempt's deadline does."""
    content_type = "text/event-stream" if stream else "application/json"
    head = (
        f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: 100000\r\n\r\n"
    ).encode()
    server.respond = lambda r: trickle(head + (b"data: {" if stream else b"{"))
    started = time.monotonic()
    out = make(server, http_backend=backend, stream=stream, timeout=1, max_retries=0).run(["a"])
    assert time.monotonic() - started < 10  # without the deadline: 60 s
    assert out.loc[0, "kx_error"].startswith("APITimeoutError")


def test_stream_stall_limit_between_events(server):
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    first = {"id": "c", "choices": [{"index": 0, "delta": {"content": "{"}}]}
    server.respond = lambda r: [(0.0, head + sse([first], done=False)), (30.0, b"data: x\n\n")]

    async def go():
        transport = Transport(
            base_url=server.base_url,
            api_key=Secret(KEY),
            concurrency=1,
            connection=Connection(timeout=60, max_retries=0),
            stall_timeout=0.5,
        )
        async with transport:
            await transport.complete({"model": "m", "stream": True}, Exchange())

    started = time.monotonic()
    with pytest.raises(kx.APITimeoutError, match="stalled"):
        asyncio.run(go())
    assert time.monotonic() - started < 10


def bomb(size: int) -> bytes:
    """``size`` zero bytes, gzip-compressed (about 1,000:1)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1 << 20)
    parts = [compressor.compress(block) for _ in range(size >> 20)]
    return b"".join(parts) + compressor.flush()


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("backend", ["aiohttp", "httpx"])
@pytest.mark.parametrize("kind", ["gzip-bomb", "plain-large", "chunked-large"])
def test_response_bytes_are_capped(server, backend, stream, kind):
    limit = 1 << 20
    if kind == "gzip-bomb":
        data = bomb(64 << 20)
        head = (
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
            f"Content-Length: {len(data)}\r\n\r\n"
        ).encode()
        server.respond = lambda r: [(0.0, head + data)]
    elif kind == "plain-large":
        server.respond = lambda r: http(200, b"x" * (4 * limit))
    else:
        server.respond = lambda r: http(200, b"data: " + b"y" * (4 * limit) + b"\n", chunked=True)
    out = make(server, http_backend=backend, stream=stream, max_response_bytes=limit).run(["a"])
    assert out.loc[0, "kx_error"].startswith("ResponseTooLargeError")
    assert "max_response_bytes=1,048,576" in out.loc[0, "kx_error"]
    assert len(server.requests) == 1  # not retried


def test_max_response_bytes_is_checked():
    for bad in (0, -1, 1.5, "big"):
        with pytest.raises(kx.ConfigurationError, match="max_response_bytes"):
            kx.Extractor(Out, api_key=KEY, max_response_bytes=bad)


CTRL_C_SCRIPT = """
import sys
import kimi_extract as kx
from pydantic import BaseModel
from tests.hostile import HostileServer

class Out(BaseModel):
    value: str

head = b"HTTP/1.1 200 OK\\r\\nContent-Type: text/event-stream\\r\\n"
head += b"Content-Length: 99999\\r\\n\\r\\n"
arrived = []

def trickle(request):
    if not arrived:
        arrived.append(request)
        print("trickling", flush=True)
    return [(0.0, head)] + [(0.2, b" ")] * 1000

with HostileServer(trickle) as server:
    ex = kx.Extractor(Out, base_url=server.base_url, api_key="sk-x", progress=False,
                      concurrency=4, http_backend=sys.argv[1], stream=sys.argv[2] == "1")
    print("started", flush=True)
    try:
        ex.run([f"row {i}" for i in range(8)])
    except KeyboardInterrupt:
        print("interrupted", flush=True)
"""


@pytest.mark.parametrize(("backend", "stream"), [("aiohttp", "0"), ("httpx", "1")])
def test_ctrl_c_ends_a_run_against_a_trickling_server_within_2_s(backend, stream):
    import signal
    import subprocess
    import sys
    from pathlib import Path

    proc = subprocess.Popen(
        [sys.executable, "-c", CTRL_C_SCRIPT, backend, stream],
        cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "started"
    assert proc.stdout.readline().strip() == "trickling"  # the first request is being answered
    time.sleep(0.2)  # and the others are trickling in too
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    line = proc.stdout.readline().strip()  # printed as soon as run() has raised
    elapsed = time.monotonic() - sent
    out, err = proc.communicate(timeout=60)
    assert line == "interrupted", err
    # Promised: 2 s (typically ~0.1 s); the trickle would go on for 200 s. 10x the promise, so
    # a loaded machine does not flake.
    assert elapsed < CTRL_C_BOUND_S, elapsed


@pytest.mark.parametrize("backend", ["aiohttp", "httpx", "httpx-aiohttp"])
@pytest.mark.parametrize("encoding", ["gzip", "deflate-zlib", "deflate-raw", "bad-gzip"])
def test_compressed_answers_are_read_in_bounded_steps(server, backend, encoding):
    body = json.dumps(completion('{"value": "' + "z" * 200_000 + '"}')).encode()
    if encoding == "gzip":
        data, name = gzip.compress(body), "gzip"
    elif encoding == "deflate-zlib":
        data, name = zlib.compress(body), "deflate"
    elif encoding == "deflate-raw":
        raw = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
        data, name = raw.compress(body) + raw.flush(), "deflate"
    else:
        data, name = b"\x1f\x8b not gzip at all", "gzip"
    server.respond = lambda r: http(200, data, headers={"Content-Encoding": name})
    out = make(server, http_backend=backend, max_retries=0).run(["a"])
    if encoding == "bad-gzip":
        assert out.loc[0, "kx_error"].startswith("APIConnectionError")
    else:
        assert out.loc[0, "kx_error"] is None and len(out.loc[0, "value"]) == 200_000


# -- an endpoint no attempt reaches --------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_closed_port_stops_the_run_with_one_line_naming_the_url(backend, capsys):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    with use_clock(FastClock(SPEEDUP)), pytest.raises(kx.RunStopped) as info:
        kx.Extractor(
            Out,
            base_url=f"http://127.0.0.1:{port}",
            api_key=KEY,
            http_backend=backend,
            progress=True,
        ).run([f"row {i}" for i in range(40)])
    assert time.monotonic() - started < 60  # a sanity bound (the window is 10 s / SPEEDUP)
    message = str(info.value)
    assert "\n" not in message
    assert f"cannot reach http://127.0.0.1:{port}/v1/chat/completions: connection refused" in (
        message
    )
    assert isinstance(info.value.cause, kx.APIConnectionError)
    assert info.value.cause.connect_failure == "connection refused"
    assert len(info.value.partial) == 40
    assert "connection retries=" in capsys.readouterr().err  # shown while it retried


def _raised(error: BaseException, cause: BaseException) -> BaseException:
    try:
        try:
            raise cause
        except BaseException as inner:
            raise error from inner
    except BaseException as outer:
        return outer


def test_connect_failures_are_told_apart_from_failures_after_connecting():
    import aiohttp

    refused = ConnectionRefusedError(111, "Connection refused")
    dns = socket.gaierror(-2, "Name or service not known")
    assert connect_failure(_raised(httpx.ConnectError("x"), refused)) == "connection refused"
    assert connect_failure(_raised(httpx.ConnectError("x"), dns)) == "DNS lookup failed"
    assert connect_failure(httpx.ConnectTimeout("x")) == "connect timed out"
    assert connect_failure(httpx.ReadTimeout("x")) is None
    assert connect_failure(httpx.RemoteProtocolError("x")) is None
    # httpx-aiohttp calls a server that hung up a ConnectTimeout: aiohttp's cause decides.
    hung_up = aiohttp.ServerDisconnectedError()
    assert connect_failure(_raised(httpx.ConnectTimeout("x"), hung_up)) is None
    assert connect_failure(aiohttp.ConnectionTimeoutError()) == "connect timed out"


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_new_connection_tells_the_limiter_its_round_trip(sim, backend):
    # The opening holds its pacing one round trip past the first answer (#26); the round trip
    # is the backends' measure of opening a connection. httpx-aiohttp has none to give.
    from kimi_extract.http.limiter import Limiter

    class Recording(Limiter):
        def connected(self, rtt: float) -> None:
            trips.append(rtt)
            super().connected(rtt)

    trips: list[float] = []
    limiter = Recording(concurrency=4)
    body = {"model": "kimi-k3.1-pro", "messages": [{"role": "user", "content": "hi"}]}

    async def go() -> None:
        transport = Transport(
            base_url=sim.base_url,
            api_key=Secret(sim.api_key),
            concurrency=4,
            connection=Connection(http_backend=backend),
            gate=limiter,
        )
        async with transport:
            for _ in range(2):  # the second round reuses the first's connections
                await asyncio.gather(*(transport.complete(body, Exchange()) for _ in range(4)))

    asyncio.run(go())
    if backend == "httpx-aiohttp":
        assert trips == [] and limiter.opening.rtt == 0.0
        return
    assert 1 <= len(trips) <= 4, trips  # one per connection opened, none for those reused
    # A connection's setup time, on a busy machine as long as it takes: no wall-time bound.
    assert all(math.isfinite(t) and t >= 0.0 for t in trips), trips
    assert limiter.opening.rtt == statistics.median(trips)
