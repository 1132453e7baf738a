"""Invariant 1 and 7 against a hostile server (tests/hostile.py, not the simulator).

Whatever a server answers (bodies, statuses, headers, encodings, timings), a run ends with a
frame holding every input row, or with one of the documented run-level exceptions carrying that
frame; the worst case for a row is its ``kx_error``. And the API key, which the server echoes in
every way it can, appears in none of: the frame, the exception (str and repr, cause included),
the log records at DEBUG.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import kimi_extract as kx
from kimi_extract.http.backends import BACKENDS
from kimi_extract.http.clock import use_clock

from ..conftest import SPEEDUP, FastClock
from ..hostile import (
    HostileServer,
    Pieces,
    Request,
    completion,
    encoded_echoes,
    http,
    key_leaks,
    sse,
    stream_completion,
)

KEY = "sk-hypo-Zq9Wm3Lx7Rt2Vb8Nc4Hk6Jd1Fs5Gp0Ya"
ROWS = ["first row", "second row", "third row"]
#: Every way a server has been seen to echo a key, and some it might.
ECHOES = [
    KEY,
    f"Incorrect API key provided: {KEY}",
    f"Incorrect API key provided: {KEY[:6]}...{KEY[-4:]}",
    f"{KEY[:8]}{'*' * 24}{KEY[-4:]}",
    f"fragment {KEY[12:24]}",
    "no secret here",
    *encoded_echoes(KEY),
    *(f"key: {echo}!" for echo in encoded_echoes(KEY)[::3]),
]


class Out(BaseModel):
    value: str


def key_parts(text: str) -> list[str]:
    """Every run of 8 characters of KEY that ``text`` reveals, as is or decoded (``key_leaks``:
    upper-cased, spaced out, ``\\u``-escaped, percent-encoded, base64)."""
    return key_leaks(text, KEY)


def escape_key(content: str) -> str:
    """A JSON answer with the key in it written as ``\\uXXXX`` escapes (still the same JSON)."""
    return content.replace(KEY, "".join(f"\\u{ord(c):04x}" for c in KEY))


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**20), max_value=10**20)
    | st.sampled_from([1e300, -1.0, 0.5, float("nan"), float("inf")])
    | st.text(max_size=6)
    | st.sampled_from(ECHOES),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.text(max_size=4) | st.sampled_from(["content", "error"]), children, max_size=3
        )
    ),
    max_leaves=8,
)
#: Places in a good completion a hostile server may put anything.
PATHS = [
    ("choices",),
    ("choices", 0),
    ("choices", 0, "message"),
    ("choices", 0, "message", "content"),
    ("choices", 0, "message", "tool_calls"),
    ("choices", 0, "finish_reason"),
    ("usage",),
    ("usage", "prompt_tokens"),
    ("usage", "completion_tokens"),
    ("usage", "prompt_tokens_details"),
    ("id",),
    ("error",),
]
ERROR_TYPES = [
    "invalid_request_error",
    "invalid_authentication_error",
    "permission_denied_error",
    "resource_not_found_error",
    "rate_limit_reached_error",
    "engine_overloaded_error",
    "exceeded_current_quota_error",
    "server_error",
    "something_new",
]
RETRY_AFTER = [
    "0",
    "0.01",
    "1",
    "5s",
    "soon",
    "-1",
    "nan",
    "inf",
    "1e309",
    "Wed, 21 Oct 2015 07:28:00 GMT",
]


@dataclass
class Plan:
    """One scripted response: what, how encoded, when."""

    status: int
    kind: str  # good | mutated | error | json | bytes
    text: str  # the answer's value, or the error message
    mutation: tuple[tuple[Any, ...], Any] | None
    error_type: str
    junk: Any
    raw: bytes
    encoding: str  # plain | gzip | fake-gzip | chunked | short-length | long-length
    headers: dict[str, str]
    delay: float
    pieces: int  # body split into this many pieces, 0.05 s apart
    stream_cut: bool
    escaped: bool = False  # the key in a good answer written as JSON \\u escapes


def _set(data: Any, path: tuple[Any, ...], value: Any) -> Any:
    target = data
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return data


def body_of(plan: Plan, streaming: bool) -> bytes:
    if plan.kind in ("good", "mutated"):
        content = json.dumps({"value": plan.text})
        if plan.escaped:
            content = escape_key(content)
        if streaming and plan.kind == "good":
            data = stream_completion(content)
            if plan.stream_cut:
                data = data[: len(data) // 2]
            return data
        body = completion(content)
        if plan.mutation is not None:
            path, value = plan.mutation
            body = _set(body, path, value)
        if streaming:
            chunk = {"id": "c", "choices": [{"index": 0, "delta": body.get("choices")}]}
            return sse([chunk, body], done=not plan.stream_cut)
        return json.dumps(body).encode()
    if plan.kind == "error":
        error = {"error": {"type": plan.error_type, "message": plan.text, "code": plan.text}}
        return sse([error]) if streaming and plan.status == 200 else json.dumps(error).encode()
    if plan.kind == "json":
        return json.dumps(plan.junk).encode()
    return plan.raw


def respond(plan: Plan, request: Request) -> Pieces:
    streaming = b'"stream":true' in request.body
    data = body_of(plan, streaming)
    headers = dict(plan.headers)
    if streaming:
        headers.setdefault("Content-Type", "text/event-stream")
    if plan.encoding == "gzip":
        pieces = http(plan.status, data, headers=headers, gzip_body=True)
    elif plan.encoding == "fake-gzip":
        pieces = http(plan.status, data, headers={**headers, "Content-Encoding": "gzip"})
    elif plan.encoding == "chunked":
        pieces = http(plan.status, data, headers=headers, chunked=True)
    elif plan.encoding == "short-length":
        pieces = http(plan.status, data, headers=headers, content_length=max(0, len(data) - 5))
    elif plan.encoding == "long-length":
        pieces = http(plan.status, data, headers=headers, content_length=len(data) + 50)
    else:
        pieces = http(plan.status, data, headers=headers, reason=plan.text[:40] or "X")
    whole = pieces[0][1]
    if plan.pieces > 1:
        size = max(1, len(whole) // plan.pieces)
        parts = [whole[i : i + size] for i in range(0, len(whole), size)]
        return [(plan.delay, parts[0])] + [(0.05, part) for part in parts[1:]]
    return [(plan.delay, whole)]


plans = st.builds(
    Plan,
    status=st.sampled_from(
        [200] * 12 + [400, 401, 403, 404, 408, 409, 418, 429, 500, 503, 204, 302]
    ),
    kind=st.sampled_from(["good", "good", "good", "mutated", "mutated", "error", "json", "bytes"]),
    text=st.sampled_from(ECHOES) | st.text(max_size=10),
    mutation=st.none() | st.tuples(st.sampled_from(PATHS), JSON),
    error_type=st.sampled_from(ERROR_TYPES),
    junk=JSON,
    raw=st.binary(max_size=64)
    | st.sampled_from([b"", b"[" * 50_000, b"data: {\n\n", KEY.encode(), b" " * 300_000]),
    encoding=st.sampled_from(
        ["plain", "plain", "gzip", "fake-gzip", "chunked", "short-length", "long-length"]
    ),
    headers=st.dictionaries(
        st.sampled_from(
            ["Retry-After", "retry-after-ms", "x-request-id", "Content-Type", "Set-Cookie"]
        ),
        st.sampled_from(RETRY_AFTER + ECHOES + ["text/html", "application/json"]),
        max_size=3,
    ),
    delay=st.sampled_from([0.0] * 5 + [0.02, 0.1, 0.6]),  # 0.6 s passes the 0.3 s deadline
    pieces=st.sampled_from([1, 1, 1, 3]),
    stream_cut=st.booleans(),
    escaped=st.booleans(),
)


class Collect(logging.Handler):
    """Keeps every formatted record (with tracebacks)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture(scope="module")
def server():
    with HostileServer() as running:
        yield running


@pytest.fixture(scope="module")
def logs():
    root = logging.getLogger()
    handler, level = Collect(), root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield handler
    root.removeHandler(handler)
    root.setLevel(level)


DOCUMENTED = (kx.RunStopped,)  # BudgetExceeded is one; RunInterrupted needs a Ctrl-C


@settings(
    max_examples=int(os.environ.get("KX_HOSTILE_EXAMPLES", "40")),  # raise it for a soak run
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    responses=st.lists(plans, min_size=1, max_size=4),
    backend=st.sampled_from(BACKENDS),
    stream=st.booleans(),
)
def test_any_server_answer_ends_in_row_errors_and_never_leaks_the_key(
    server, logs, responses, backend, stream
):
    server.respond = lambda request: respond(responses[request.index % len(responses)], request)
    server.requests.clear()
    logs.lines.clear()
    extractor = kx.Extractor(
        Out,
        base_url=server.base_url,
        api_key=KEY,
        progress=False,
        concurrency=3,
        max_retries=1,
        max_retry_wait=0.2,
        timeout=0.3,
        adaptive=False,
        http_backend=backend,
        stream=stream,
        max_response_bytes=200_000,
    )
    texts: list[str] = []
    try:
        with use_clock(FastClock(SPEEDUP)):  # retry waits are not what is checked here
            frame = extractor.run(ROWS)
    except DOCUMENTED as stopped:
        event(f"stopped: {type(stopped.cause).__name__}")
        frame = stopped.partial
        texts += [str(stopped), repr(stopped), str(stopped.cause), repr(stopped.cause)]
    assert frame is not None and len(frame) == len(ROWS)
    for _, row in frame.iterrows():
        missing = row["value"] is None or row["value"] != row["value"]  # None or NaN
        assert (row["kx_error"] is None) == (not missing), row.to_dict()
        event(f"row: {(row['kx_error'] or 'ok').split(':')[0]}")
    texts.append(frame.to_json())
    texts += [str(value) for value in frame.to_numpy().ravel()]
    texts += logs.lines
    for text in texts:
        assert not key_parts(text), text


def test_the_server_can_serve_every_shape(server):
    """The strategy's building blocks produce what they claim (a test of the test)."""
    server.respond = lambda r: http(200, gzip.decompress(gzip.compress(b"x")))
    plan = Plan(200, "good", "ok", None, "", None, b"", "gzip", {}, 0.0, 3, False)
    server.respond = lambda request: respond(plan, request)
    out = kx.Extractor(Out, base_url=server.base_url, api_key=KEY, progress=False).run(["a"])
    assert out.loc[0, "value"] == "ok"
    plan.encoding = "chunked"
    out = kx.Extractor(Out, base_url=server.base_url, api_key=KEY, progress=False, stream=True).run(
        ["a"]
    )
    assert out.loc[0, "value"] == "ok"


@pytest.mark.parametrize("form", ["escaped", *range(len(encoded_echoes(KEY)))])
def test_a_key_echoed_in_a_valid_answer_reaches_no_frame_file_or_page(server, tmp_path, form):
    """The key in the answer itself, ``\\u``-escaped inside the JSON (decoded only when the
    answer is parsed) or in any other encoded form: the value holds ``[redacted]`` instead, in
    the frame, the output file and the review page."""
    if form == "escaped":
        content = escape_key(json.dumps({"value": f"id {KEY} ok"}))
    else:
        content = json.dumps({"value": f"id {encoded_echoes(KEY)[form]} ok"})
    server.respond = lambda request: http(200, completion(content))
    extractor = kx.Extractor(Out, base_url=server.base_url, api_key=KEY, progress=False)
    frame = extractor.run(["a"])
    assert frame.loc[0, "kx_error"] is None and "[redacted]" in frame.loc[0, "value"]
    extractor.run_to(tmp_path / "out.jsonl", ["a"])
    page = kx.review(frame, tmp_path / "review.html", text_column=None)
    texts = [frame.loc[0, "value"], (tmp_path / "out.jsonl").read_text(), page.read_text()]
    for text in texts:
        assert not key_parts(text)
