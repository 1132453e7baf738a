"""Observing a run: the events a hook receives, and what each one carries.

``kx.Extractor(Model, hooks=[counter])``: a hook is any object with one or more of these
methods, each a plain function or a coroutine function (``async def``), taking one event::

    on_run_start(RunStart)    a run begins (before its first row)
    on_row_start(RowStart)    a row begins (before the store lookup)
    on_attempt(Attempt)       an HTTP attempt is about to be sent
    on_response(Response)     an HTTP attempt ended: an answer, or the error it got
    on_retry(Retry)           a failed attempt is retried after a wait (429s included)
    on_reask(Reask)           an answer did not validate: the model is asked again
    on_chunk(Chunk)           a streamed answer grew (``stream=True``, ``ex.stream``)
    on_row_end(RowEnd)        a row ended: its value or its error, what it cost
    on_run_end(RunEnd)        the run ended (finished, stopped or interrupted)

Events are small frozen dataclasses. They carry the run, row and attempt they belong to, usage
(priced), timing, status, the request or response id and the model, never the API key. The
prompt and the answer (``Attempt.messages``, ``Response.content`` / ``reasoning``,
``Chunk.delta`` / ``text``, ``Reask.errors`` / ``answer``, ``RowEnd.value``) are filled only
for a hook whose class says ``capture_content = True``; every text in them has the key
removed, as server texts are everywhere in the library.

A hook that raises is logged once (WARNING on the ``kimi_extract`` logger, naming the hook, the
event and where it raised) and gets no more events in that run; the row and the run go on as
if it were not there. An ``async`` hook is awaited where its event happens (inline): it delays
the row that fired the event by its own time, never the other rows. A hook's own state is
shared by the rows of a run, which run concurrently on one event loop (a sync hook is never
entered twice at once). Each Dask worker gets its own copy of the hooks.

``on_retry`` comes before the wait; the attempt that follows is an ``on_attempt`` with
``attempt`` one higher. Counting: over a run, ``on_row_end`` calls equal ``ok + failed`` of its
``RunReport`` (rows a stopped run never reached get none), ``on_retry`` calls ``retries``,
responses with ``ok`` ``usage.requests``, and their ``usage`` adds up to ``usage``; rows served
from the result store (``from_store``) have ``RowEnd.from_store`` and make no attempt.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .records import Usage

__all__ = [
    "EVENTS",
    "OPERATION",
    "SYSTEM",
    "Attempt",
    "Chunk",
    "Reask",
    "Response",
    "Retry",
    "RowEnd",
    "RowStart",
    "RunEnd",
    "RunStart",
]

#: The hook methods, in the order a run calls them.
EVENTS = (
    "on_run_start",
    "on_row_start",
    "on_attempt",
    "on_chunk",
    "on_response",
    "on_retry",
    "on_reask",
    "on_row_end",
    "on_run_end",
)
#: The operation of every request (OpenTelemetry GenAI ``gen_ai.operation.name``).
OPERATION = "chat"
#: Who serves the model (``gen_ai.system`` / ``gen_ai.provider.name``).
SYSTEM = "moonshot_ai"


@dataclass(frozen=True, slots=True, kw_only=True)
class RunStart:
    """A run begins. ``rows``: how many, when known (None for an iterator)."""

    run_id: str
    """Names the run in every event of it (a fresh hex id per run)."""
    model: str
    """The model requested."""
    rows: int | None
    concurrency: int
    """Rows in flight at most."""
    stream: bool
    """Whether answers are requested as SSE streams."""
    operation: str = OPERATION
    system: str = SYSTEM


@dataclass(frozen=True, slots=True, kw_only=True)
class RowEvent:
    """What every row event carries: the run, the row and the model."""

    run_id: str
    row: int
    """The row's position in the input, from 0."""
    label: Any
    """The row's label: its index label in the input frame (a document chunk's own label)."""
    model: str
    """The model requested."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RowStart(RowEvent):
    """A row begins (before its result-store lookup)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Attempt(RowEvent):
    """An HTTP attempt is about to be sent.

    ``request``: which request of the row (1 for the first; a reask, a truncation retry with
    a larger budget or a tool round sends the next); ``attempt``: which attempt of that request
    (1 for the first, 2 after the first retry ...)."""

    request: int
    attempt: int
    stream: bool
    prompt_tokens: int
    """The prompt's estimated tokens (the answer's usage has the billed count)."""
    messages: list[dict[str, Any]] | None = None
    """The messages sent (``capture_content`` only)."""
    operation: str = OPERATION
    system: str = SYSTEM


@dataclass(frozen=True, slots=True, kw_only=True)
class Response(RowEvent):
    """An HTTP attempt ended, with an answer (``ok``) or an error.

    ``status``: the HTTP status (200 for an answer, also for a 200 whose body was unusable);
    None when no response came (a timeout, a reset, a cut stream). ``usage``: the answer's
    billed tokens and cost (zero when the attempt failed). ``billing_unknown``: the attempt
    failed in a way that may still have been billed (a budget counts it at its worst case)."""

    request: int
    attempt: int
    ok: bool
    status: int | None
    latency_s: float
    """Seconds from sending to the last byte (or the failure)."""
    usage: Usage = dataclasses.field(default_factory=Usage)
    response_id: str | None = None
    """The response's request id (header) or completion id, when the server gave one."""
    finish_reason: str | None = None
    """``stop``, ``length``, ``tool_calls`` ... (None when the attempt failed)."""
    error: str | None = None
    """The error, one line (``ServerError: 500 ...``), when the attempt failed."""
    error_type: str | None = None
    """The error's class name (``RateLimitError``) when the attempt failed."""
    billing_unknown: bool = False
    content: str | None = None
    """The answer's text (``capture_content`` only)."""
    reasoning: str | None = None
    """The answer's reasoning text (``capture_content`` only)."""
    operation: str = OPERATION
    system: str = SYSTEM


@dataclass(frozen=True, slots=True, kw_only=True)
class Retry(RowEvent):
    """A failed attempt is retried after ``wait_s`` seconds.

    ``attempt`` is the attempt that failed (the next one is ``attempt + 1``). ``rate_limited``:
    it was a 429 asking to slow down; ``retry_after``: the wait the server asked for, if any."""

    request: int
    attempt: int
    wait_s: float
    status: int | None
    error: str
    error_type: str
    rate_limited: bool = False
    retry_after: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Reask(RowEvent):
    """An answer did not validate; the model is asked again with the errors.

    ``request``: the request whose answer was invalid; ``reask``: 1 for the row's first reask;
    ``kind``: ``"json"`` (not JSON) or ``"validation"`` (JSON the output model rejects)."""

    request: int
    reask: int
    kind: str
    error_count: int
    errors: list[str] | None = None
    """One line per problem, as sent back to the model (``capture_content`` only)."""
    answer: str | None = None
    """The invalid answer (``capture_content`` only)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Chunk(RowEvent):
    """A streamed answer grew. ``index``: the chunk's number in this attempt (from 1);
    ``chars``: the answer's length so far."""

    request: int
    attempt: int
    index: int
    chars: int
    delta: str | None = None
    """The text this chunk added (``capture_content`` only)."""
    text: str | None = None
    """The answer so far (``capture_content`` only)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RowEnd(RowEvent):
    """A row ended. ``ok``: it holds a validated value; else ``error`` is its ``kx_error``.

    ``usage``: what its requests cost (zero when served from the store: ``saved`` is what the
    stored answer cost when it was made). ``requests``: requests sent (reasks and tool rounds
    included); ``attempts``: HTTP attempts (retries included); ``latency_s``: seconds spent
    inside requests."""

    ok: bool
    error: str | None
    usage: Usage
    requests: int
    attempts: int
    reasks: int
    from_store: bool
    latency_s: float
    web_searches: int = 0
    saved: Usage | None = None
    value: Any = None
    """The validated model instance (``capture_content`` only)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunEnd:
    """A run ended. ``report``: its ``kx.RunReport`` (None when interrupted); ``error``: what
    stopped it early, one line (``"interrupted"`` for Ctrl-C), or None when it finished."""

    run_id: str
    model: str
    report: Any
    error: str | None = None
    operation: str = OPERATION
    system: str = SYSTEM
