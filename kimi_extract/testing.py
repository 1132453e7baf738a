"""Fast fakes for testing code that uses kimi_extract: scripted replies and a virtual clock.

No server, no network and no real waiting (as httpx's ``MockTransport`` and pydantic-ai's
``FunctionModel`` do for theirs). The real ``Extractor`` runs, with its retries, reasks,
validation, budget and columns; only the HTTP client is replaced by a script, and every wait can
be made virtual:

- ``ScriptedBackend(script)``: answers each request with the next scripted reply, or with what
  ``script(body)`` returns. It keeps every request body it got in ``requests``.
- ``use_backend(backend)``: within the block, every run's HTTP goes to ``backend``. Point the
  extractor at ``BASE_URL`` (a local URL, so the run keeps no default result store and scripted
  answers never mix with a real run's).
- ``VirtualClock`` and ``use_clock(clock)``: retry backoff, the server's ``Retry-After``, the rate
  limiter's pacing take no real time; ``clock.sleeps`` lists every wait.
- ``completion(answer)`` and ``api_error(status, error_type)``: the replies Kimi would send.

A script entry (or what a script function returns) is one of: a dict or a Pydantic model (the
model's JSON answer), a str (the answer's raw text, to test invalid answers), an ``HttpReply``
(any status, headers and body), or an exception instance, raised as the HTTP client would raise
it (``kx.APIConnectionError``, ``kx.APITimeoutError``). docs/testing.md has a worked example.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import json
import math
import selectors
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar, TypeVarTuple, Unpack

from multidict import CIMultiDict
from pydantic import BaseModel

from .exceptions import ConfigurationError
from .http import transport as _transport
from .http.backends import Backend, HttpReply, StreamReply
from .http.clock import use_clock
from .kimi import STATUS_OF_ERROR_TYPE

__all__ = [
    "BASE_URL",
    "HttpReply",
    "ScriptedBackend",
    "VirtualClock",
    "api_error",
    "completion",
    "use_backend",
    "use_clock",
]

#: The base URL to give an extractor under test. Local (``*.localhost``), so a run keeps no
#: default result store; ``ScriptedBackend`` answers only requests sent here.
BASE_URL = "http://kimi.test.localhost/v1"

#: One scripted reply (see the module docstring).
Scripted = HttpReply | BaseException | BaseModel | Mapping[str, Any] | str
T = TypeVar("T")
#: The error type of the 400s the backend sends for a request it has no reply for (the Kimi
#: profile's first 400: the plain invalid request).
_REFUSED = next(kind for kind, status in STATUS_OF_ERROR_TYPE.items() if status == 400)
_Ts = TypeVarTuple("_Ts")


def completion(
    answer: BaseModel | Mapping[str, Any] | str | None,
    *,
    finish_reason: str = "stop",
    reasoning: str | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
    prompt_tokens: int = 100,
    completion_tokens: int = 20,
    cached_tokens: int = 0,
) -> HttpReply:
    """A 200 chat completion whose message content is ``answer``.

    ``answer``: a Pydantic model or dict (sent as its JSON), a str (sent as is), or None (no
    content, as with tool calls). ``reasoning``: the message's ``reasoning_content``. The usage
    is what you give (tokens are not counted from the request); ``cached_tokens`` is the part of
    ``prompt_tokens`` read from Kimi's prompt cache.
    """
    message: dict[str, Any] = {"role": "assistant", "content": _content(answer)}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    if tool_calls:
        message["tool_calls"] = tool_calls
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if cached_tokens:
        usage["cached_tokens"] = cached_tokens
    body = {
        "id": "cmpl-scripted",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": usage,
    }
    return HttpReply(200, CIMultiDict(), json.dumps(body).encode())


def api_error(
    status: int,
    error_type: str,
    message: str = "scripted error",
    headers: Mapping[str, str] | None = None,
) -> HttpReply:
    """An error reply in Kimi's shape, e.g. ``api_error(429, "rate_limit_reached_error",
    headers={"Retry-After": "3"})``. Header names are case-insensitive, as from a server."""
    body = {"error": {"type": error_type, "message": message}}
    return HttpReply(status, CIMultiDict(headers or {}), json.dumps(body).encode())


def _content(answer: BaseModel | Mapping[str, Any] | str | None) -> str | None:
    if answer is None or isinstance(answer, str):
        return answer
    if isinstance(answer, BaseModel):
        return answer.model_dump_json()
    return json.dumps(dict(answer))


def _as_reply(entry: Scripted) -> HttpReply:
    if isinstance(entry, BaseException):
        raise entry
    if isinstance(entry, HttpReply):
        return entry
    if isinstance(entry, BaseModel | Mapping | str):
        return completion(entry)
    raise ConfigurationError(
        f"a scripted reply is a dict, a Pydantic model, a str, an HttpReply or an exception; "
        f"got {type(entry).__name__}"
    )


class ScriptedBackend:
    """An HTTP backend that answers from a script instead of a server.

    ``script``: a list of replies, sent in the order requests arrive (with several rows in
    flight that is not row order: use ``concurrency=1``, or a function), or a function
    ``script(body) -> reply`` given each request body as a dict. A request past the end of a
    list gets a 400 saying so, and counts in ``extra_requests``; so does a request to another
    URL than ``base_url`` (default ``BASE_URL``; None: any URL). Streaming requests
    (``stream=True``) get the same replies as server-sent events, the content in pieces of
    ``chunk_chars`` characters.
    """

    def __init__(
        self,
        script: Sequence[Scripted] | Callable[[dict[str, Any]], Scripted],
        *,
        base_url: str | None = BASE_URL,
        chunk_chars: int = 8,
    ) -> None:
        self.base_url = base_url
        self._function = script if callable(script) else None
        #: The replies not sent yet (a list script).
        self.remaining: list[Scripted] = [] if callable(script) else list(script)
        #: Every request body received, parsed, in the order they arrived.
        self.requests: list[dict[str, Any]] = []
        #: Requests that had no reply to get (past the script's end, or to another URL).
        self.extra_requests = 0
        self.chunk_chars = max(1, chunk_chars)

    def __repr__(self) -> str:
        return f"ScriptedBackend(requests={len(self.requests)}, remaining={len(self.remaining)})"

    async def open(self) -> None:
        """Nothing to open (part of the backend protocol)."""

    async def close(self) -> None:
        """Nothing to close (part of the backend protocol)."""

    async def post(self, url: str, payload: bytes) -> HttpReply:
        """The scripted reply to one request (an exception entry is raised here)."""
        body = json.loads(payload)
        self.requests.append(body)
        if self.base_url is not None and not url.startswith(_transport.chat_url(self.base_url)):
            self.extra_requests += 1
            return api_error(
                400,
                _REFUSED,
                f"ScriptedBackend answers requests to base_url={self.base_url} (use "
                f"kimi_extract.testing.BASE_URL: a local URL, so a test keeps no result store); "
                f"this one went to {url}",
            )
        if self._function is not None:
            return _as_reply(self._function(body))
        if not self.remaining:
            self.extra_requests += 1
            return api_error(
                400,
                _REFUSED,
                f"ScriptedBackend: no scripted reply left for request {len(self.requests)}",
            )
        return _as_reply(self.remaining.pop(0))

    @asynccontextmanager
    async def stream(self, url: str, payload: bytes) -> AsyncIterator[StreamReply]:
        """The scripted reply as a stream: SSE chunks for a 200 completion, else its body."""
        reply = await self.post(url, payload)

        async def read() -> bytes:
            return reply.body

        lines = self._events(reply) if reply.status == 200 else _lines([])
        yield StreamReply(reply.status, reply.headers, lines, read)

    def _events(self, reply: HttpReply) -> AsyncIterator[str]:
        """A completion as Kimi streams it: the deltas, then finish reason and usage, [DONE]."""
        done = json.loads(reply.body)
        choice, step = done["choices"][0], self.chunk_chars
        message = choice["message"]
        deltas: list[dict[str, Any]] = [{"role": "assistant"}]
        if message.get("reasoning_content"):
            deltas.append({"reasoning_content": message["reasoning_content"]})
        text = message.get("content") or ""
        deltas += [{"content": text[i : i + step]} for i in range(0, len(text), step)]
        if message.get("tool_calls"):
            calls = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
            deltas.append({"tool_calls": calls})
        chunks = [{"id": done["id"], "choices": [{"index": 0, "delta": d}]} for d in deltas]
        final = {"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}
        chunks.append({"id": done["id"], "choices": [{**final, "usage": done["usage"]}]})
        return _lines([f"data: {json.dumps(c)}" for c in chunks] + ["data: [DONE]"])


async def _lines(lines: list[str]) -> AsyncIterator[str]:
    for line in lines:
        yield line


@contextmanager
def use_backend(backend: Backend) -> Iterator[Backend]:
    """Within the block, every transport that opens uses ``backend`` instead of an HTTP client.

    It covers every run of every ``Extractor`` (sync or async, in any thread) started in the
    block, process-wide: it stands in for the function the transport makes its HTTP client
    with. Blocks nest, and the previous one comes back at the end.
    """
    previous = _transport.make_backend

    def make_backend(name: str, **options: Any) -> Backend:
        return backend

    _transport.make_backend = make_backend
    try:
        yield backend
    finally:
        _transport.make_backend = previous


class VirtualClock:
    """A clock (``now()``, ``await sleep(seconds)``) on which waits take no real time.

    Give it to ``use_clock(clock)`` (every transport, limiter and router made in the block uses
    it), or as ``clock=`` to one of them. ``time`` starts at ``start``; ``sleeps`` lists every
    wait asked for, in order; ``advance(seconds)`` moves the clock by hand.

    A ``sleep`` returns at once, the clock moved by the wait: exact for one task at a time.
    For many tasks, run them with ``clock.run(main())``: there a sleeper wakes when the clock
    reaches its time, and the clock jumps to the next wake-up only when no task can run, so
    concurrent waits overlap as in real time (``asyncio.sleep`` and timeouts run on this
    clock too). Work in threads (``asyncio.to_thread``) does not hold the clock back.
    """

    def __init__(self, start: float = 0.0) -> None:
        #: The current time, in seconds.
        self.time = float(start)
        #: Every wait asked for through ``sleep``, in seconds, in order.
        self.sleeps: list[float] = []

    def __repr__(self) -> str:
        return f"VirtualClock(time={self.time:g}, sleeps={len(self.sleeps)})"

    def now(self) -> float:
        """The current virtual time, in seconds."""
        return self.time

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of virtual time (recorded in ``sleeps``)."""
        self.sleeps.append(seconds)
        loop = asyncio.get_running_loop()
        if isinstance(loop, _VirtualLoop) and loop.clock is self:
            await asyncio.sleep(max(0.0, seconds))
        else:
            self.time += max(0.0, seconds)
            await asyncio.sleep(0)  # let other tasks run, as a real wait would

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds`` (under ``run``: sleepers now due wake up)."""
        if seconds < 0:
            raise ConfigurationError(f"a clock only moves forward; got {seconds}")
        self.time += seconds

    def run(self, main: Coroutine[Any, Any, T]) -> T:
        """Run ``main`` to its end on an event loop whose time is this clock; returns its
        result (as ``asyncio.run``). Call it from sync code."""
        with asyncio.Runner(loop_factory=lambda: _VirtualLoop(self)) as runner:
            return runner.run(main)


class _VirtualSelector(selectors.DefaultSelector):
    """The loop's selector: where a real loop would block until its next timer, the clock
    jumps there instead (ready I/O, such as a thread finishing, still comes first)."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__()
        self.clock = clock
        #: Every timer's deadline (a heap): the clock lands on one exactly, with no float drift.
        self.deadlines: list[float] = []

    def select(self, timeout: float | None = None) -> list[tuple[Any, int]]:
        events: list[tuple[Any, int]] = super().select(0)
        if events or (timeout is not None and timeout <= 0):
            return events
        if timeout is None:  # no timer at all: only I/O (a thread's result) can wake the loop
            return super().select(None)
        clock, deadlines = self.clock, self.deadlines
        while deadlines and deadlines[0] <= clock.time:
            heapq.heappop(deadlines)
        target = clock.time + timeout
        # The loop asked for ``deadline - time``: land on the deadline itself, not on a float
        # a few ulps off it (a cancelled timer's earlier deadline is just a shorter step).
        if deadlines and deadlines[0] <= target + 4 * math.ulp(target):
            target = deadlines[0]
        clock.time = target
        return []


class _VirtualLoop(asyncio.SelectorEventLoop):
    """An event loop whose ``time()`` is a ``VirtualClock``."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self._virtual = _VirtualSelector(clock)
        super().__init__(self._virtual)

    def time(self) -> float:
        return self.clock.time

    def call_at(
        self,
        when: float,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        heapq.heappush(self._virtual.deadlines, when)
        return super().call_at(when, callback, *args, context=context)
