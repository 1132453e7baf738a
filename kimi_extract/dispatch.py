"""The one seam that observes a run: a ``Dispatcher`` builds the events (``kimi_extract.hooks``)
and hands them to the run's hooks.

``run.setup`` makes one per run and hands it to the scheduler (run start and end), the row
runner (row start and end, reasks) and the transport (attempts, responses, retries, chunks).
Its listeners are of two kinds:

- internal ones, first and in the order given: the run's budget (``run.budget.BudgetHook``:
  it charges attempts whose billing is unknown and may refuse a retry by raising), the
  progress bar, the consumer of ``Extractor.stream``. Their errors propagate.
- the user's ``hooks=``, each isolated: one that raises is logged once and gets no more events
  in this run (``kimi_extract.hooks`` says what users are promised).

Nothing is built for an event no listener wants: call sites test ``name in listening`` (a
frozenset) first, so a run without hooks or budget pays one set lookup per event.
``Exchange`` (one row's requests as the transport sees them) travels with every request, so
an event knows its row without a context variable.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import traceback
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .exceptions import APIConnectionError, APIError, ConfigurationError, did_you_mean
from .hooks import (
    EVENTS,
    Attempt,
    Chunk,
    Reask,
    Response,
    Retry,
    RowEnd,
    RowStart,
    RunEnd,
    RunStart,
)
from .records import RowResult, Usage

__all__ = ["Dispatcher", "Exchange", "billing_unknown", "check_hooks", "one_line"]

logger = logging.getLogger("kimi_extract")

#: The longest error text a log line about a failed hook quotes.
MAX_HOOK_ERROR = 300


@dataclass
class Exchange:
    """One row's requests as the transport sees them: the row they belong to, the request and
    attempt in flight, and the time spent inside requests (``latency_s``).

    The row runner makes one per row and numbers its requests (``next_request``); the
    transport numbers the attempts of each (``next_attempt``)."""

    latency_s: float = 0.0
    row: int = -1
    label: Any = None
    #: The row's request in flight, from 1 (reasks, truncation retries and tool rounds count).
    request: int = 0
    #: The attempt of that request, from 1 (retries count).
    attempt: int = 0
    #: HTTP attempts of the whole row.
    attempts: int = 0
    reasks: int = 0
    #: Streamed pieces of the attempt in flight already told (``Dispatcher.chunk``).
    pieces: int = 0
    chunks: int = 0
    chars: int = 0

    def next_request(self) -> None:
        """The row sends its next request (its attempts count from 1 again)."""
        self.request += 1
        self.attempt = 0

    def next_attempt(self) -> None:
        """The next HTTP attempt of the request in flight begins (its stream from nothing)."""
        self.attempt += 1
        self.attempts += 1
        self.pieces = self.chunks = self.chars = 0


def one_line(exc: BaseException) -> str:
    """An error as one line: the type name and the message."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def billing_unknown(exc: BaseException) -> bool:
    """An attempt that may have been billed without telling us how much: a timeout, a reset or
    cut stream after sending, or a 200 whose body or usage was unusable. An error status is
    not."""
    if isinstance(exc, APIConnectionError):
        return True
    return isinstance(exc, APIError) and exc.status in (None, 200)


def check_hooks(hooks: Any) -> tuple[Any, ...]:
    """The ``hooks`` setting as a tuple, or a ``ConfigurationError`` naming it: a list of
    objects, each with at least one method named in ``EVENTS`` and no other ``on_*`` method (a
    misspelt event name would never be called)."""
    if hooks is None:
        return ()
    if isinstance(hooks, str | bytes | Mapping) or not isinstance(hooks, Iterable):
        raise ConfigurationError(f"hooks must be a list of hook objects, got {hooks!r}"[:300])
    checked = tuple(hooks)
    for hook in checked:
        kind = type(hook).__name__
        names = [n for n in dir(hook) if n.startswith("on_") and callable(getattr(hook, n, None))]
        unknown = [n for n in names if n not in EVENTS]
        if unknown:
            raise ConfigurationError(
                f"hooks: {kind} has {unknown[0]!r}, which is not a hook event"
                f"{did_you_mean(unknown[0], EVENTS)}; the events are {', '.join(EVENTS)}"
            )
        if not names:
            raise ConfigurationError(
                f"hooks: {kind} has none of the hook methods ({', '.join(EVENTS)})"
            )
        capture = getattr(hook, "capture_content", False)
        if not isinstance(capture, bool):
            raise ConfigurationError(
                f"hooks: {kind}.capture_content must be True or False, got {capture!r}"[:300]
            )
    return checked


@dataclass(frozen=True)
class _Listener:
    hook: Any
    method: Callable[[Any], Any]
    capture: bool
    internal: bool


class Dispatcher:
    """Calls one run's hooks (see the module docstring).

    ``hooks``: the user's (isolated); ``internal``: the library's own (errors propagate).
    ``model``: the model requested; ``redact``: removes the key from a text (``Secret.redact``);
    ``redact_value``: from a JSON value; ``price``: a billed ``Usage`` -> the same, priced.
    """

    def __init__(
        self,
        hooks: Iterable[Any] = (),
        *,
        internal: Iterable[Any] = (),
        model: str = "",
        redact: Callable[[str], str] | None = None,
        redact_value: Callable[[Any], Any] | None = None,
        price: Callable[[Usage], Usage] | None = None,
        run_id: str | None = None,
    ) -> None:
        #: Names the run in every event.
        self.run_id = run_id or uuid.uuid4().hex
        self.model = model
        self._redact = redact or (lambda text: text)
        self._redact_value = redact_value or (lambda value: value)
        self._price = price
        self._listeners: dict[str, list[_Listener]] = {name: [] for name in EVENTS}
        self._disabled: set[int] = set()
        #: The events some listener wants.
        self.listening: frozenset[str] = frozenset()
        for hook in internal:
            self.add(hook, internal=True)
        for hook in hooks:
            self.add(hook)

    def __repr__(self) -> str:
        return f"Dispatcher(run_id={self.run_id!r}, listening={sorted(self.listening)})"

    def add(self, hook: Any, *, internal: bool = False) -> None:
        """Listen with ``hook`` too (internal ones go before the user's)."""
        capture = getattr(hook, "capture_content", False) is True
        for name in EVENTS:
            method = getattr(hook, name, None)
            if not callable(method):
                continue
            listener = _Listener(hook, method, capture, internal)
            listeners = self._listeners[name]
            if internal:
                position = sum(1 for one in listeners if one.internal)
                listeners.insert(position, listener)
            else:
                listeners.append(listener)
        self._update()

    def remove(self, hook: Any) -> None:
        """Stop calling ``hook``."""
        for name, listeners in self._listeners.items():
            self._listeners[name] = [one for one in listeners if one.hook is not hook]
        self._update()

    def _update(self) -> None:
        self.listening = frozenset(name for name, found in self._listeners.items() if found)

    async def _emit(self, name: str, event: Any, content: Mapping[str, Any] | None = None) -> None:
        """Hand ``event`` to every listener of ``name``; listeners that capture content get it
        with ``content`` filled in (key removed)."""
        full = None
        for listener in self._listeners[name]:
            payload = event
            if listener.capture and content:
                if full is None:
                    full = dataclasses.replace(event, **self._clean(content))
                payload = full
            if listener.internal:
                result = listener.method(payload)
                if inspect.isawaitable(result):
                    await result
                continue
            if id(listener.hook) in self._disabled:
                continue
            try:
                result = listener.method(payload)
                if inspect.isawaitable(result):
                    await result
            except Exception as exc:  # noqa: BLE001 - a hook never fails a row or a run
                self._failed(listener.hook, name, exc)

    def _clean(self, content: Mapping[str, Any]) -> dict[str, Any]:
        clean: dict[str, Any] = {}
        for field, value in content.items():
            if isinstance(value, str):
                value = self._redact(value)
            elif isinstance(value, list | dict):
                value = self._redact_value(value)
            clean[field] = value
        return clean

    def _failed(self, hook: Any, name: str, exc: Exception) -> None:
        """Log a hook's error once and call it no more in this run."""
        if id(hook) in self._disabled:
            return
        self._disabled.add(id(hook))
        self.remove(hook)
        frames = traceback.extract_tb(exc.__traceback__)
        where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
        message = self._redact(" ".join(str(exc).split()))[:MAX_HOOK_ERROR]
        logger.warning(
            "hook %s raised %s in %s%s: %s; it gets no more events in this run",
            type(hook).__qualname__,
            type(exc).__name__,
            name,
            where,
            message,
        )

    # -- the run ----------------------------------------------------------------------------

    async def run_start(self, *, rows: int | None, concurrency: int, stream: bool) -> None:
        """``on_run_start``."""
        if "on_run_start" in self.listening:
            event = RunStart(
                run_id=self.run_id,
                model=self.model,
                rows=rows,
                concurrency=concurrency,
                stream=stream,
            )
            await self._emit("on_run_start", event)

    async def run_end(self, report: Any, error: BaseException | str | None) -> None:
        """``on_run_end``: ``error`` stopped the run early (None: it finished)."""
        if "on_run_end" in self.listening:
            text = error if isinstance(error, str) or error is None else one_line(error)
            event = RunEnd(
                run_id=self.run_id,
                model=self.model,
                report=report,
                error=self._redact(text) if text else None,
            )
            await self._emit("on_run_end", event)

    # -- rows -------------------------------------------------------------------------------

    async def row_start(self, exchange: Exchange) -> None:
        """``on_row_start``."""
        if "on_row_start" in self.listening:
            event = RowStart(
                run_id=self.run_id, row=exchange.row, label=exchange.label, model=self.model
            )
            await self._emit("on_row_start", event)

    async def row_end(self, exchange: Exchange, result: RowResult) -> None:
        """``on_row_end``, from the row's result."""
        if "on_row_end" not in self.listening:
            return
        event = RowEnd(
            run_id=self.run_id,
            row=exchange.row,
            label=exchange.label,
            model=self.model,
            ok=result.ok,
            error=self._redact(result.error) if result.error else None,
            usage=result.usage,
            requests=exchange.request,
            attempts=exchange.attempts,
            reasks=exchange.reasks,
            from_store=result.from_store,
            latency_s=exchange.latency_s,
            web_searches=result.web_searches,
            saved=result.saved,
        )
        await self._emit("on_row_end", event, {"value": result.value})

    def _at(self, exchange: Exchange, *, attempt: bool = True) -> dict[str, Any]:
        """The fields every request-level event starts with: where in the run it happened."""
        where: dict[str, Any] = {
            "run_id": self.run_id,
            "row": exchange.row,
            "label": exchange.label,
            "model": self.model,
            "request": exchange.request,
        }
        if attempt:
            where["attempt"] = exchange.attempt
        return where

    async def reask(
        self, exchange: Exchange, kind: str, errors: list[str], answer: str | None
    ) -> None:
        """``on_reask``: the answer of the request in flight is invalid; asked again."""
        exchange.reasks += 1
        if "on_reask" in self.listening:
            event = Reask(
                **self._at(exchange, attempt=False),
                reask=exchange.reasks,
                kind=kind,
                error_count=len(errors),
            )
            await self._emit("on_reask", event, {"errors": list(errors), "answer": answer})

    # -- attempts ---------------------------------------------------------------------------

    async def attempt(self, exchange: Exchange, body: Mapping[str, Any], prompt: int) -> None:
        """``on_attempt``: the attempt ``exchange`` numbers is about to be sent."""
        if "on_attempt" in self.listening:
            event = Attempt(
                **self._at(exchange),
                stream=bool(body.get("stream")),
                prompt_tokens=prompt,
            )
            await self._emit("on_attempt", event, {"messages": body.get("messages")})

    async def response(
        self, exchange: Exchange, latency_s: float, answer: Any = None, error: Any = None
    ) -> None:
        """``on_response``: the attempt in flight ended with ``answer`` (an ``http.wire.Answer``)
        or ``error``."""
        if "on_response" not in self.listening:
            return
        common = {**self._at(exchange), "latency_s": latency_s}
        if error is not None:
            event = Response(
                **common,
                ok=False,
                status=getattr(error, "status", None),
                error=self._redact(one_line(error)),
                error_type=type(error).__name__,
                billing_unknown=billing_unknown(error),
            )
            await self._emit("on_response", event)
            return
        usage = answer.usage
        event = Response(
            **common,
            ok=True,
            status=200,
            usage=self._price(usage) if self._price is not None else usage,
            response_id=answer.request_id,
            finish_reason=answer.finish_reason,
        )
        content = {"content": answer.content, "reasoning": answer.reasoning_content}
        await self._emit("on_response", event, content)

    async def retry(self, exchange: Exchange, error: BaseException, wait_s: float) -> None:
        """``on_retry``: the attempt in flight failed with ``error``; the next one starts after
        ``wait_s`` seconds. An internal listener may refuse the retry by raising."""
        if "on_retry" in self.listening:
            status = getattr(error, "status", None)
            event = Retry(
                **self._at(exchange),
                wait_s=wait_s,
                status=status,
                error=self._redact(one_line(error)),
                error_type=type(error).__name__,
                rate_limited=status == 429,
                retry_after=getattr(error, "retry_after", None),
            )
            await self._emit("on_retry", event)

    async def chunk(self, exchange: Exchange, pieces: list[str]) -> None:
        """``on_chunk`` when the streamed answer (its ``pieces`` so far) grew since the last
        call for this attempt."""
        if len(pieces) <= exchange.pieces or "on_chunk" not in self.listening:
            return
        delta = "".join(pieces[exchange.pieces :])
        exchange.pieces = len(pieces)
        exchange.chunks += 1
        exchange.chars += len(delta)
        event = Chunk(
            **self._at(exchange),
            index=exchange.chunks,
            chars=exchange.chars,
        )
        captured = any(one.capture for one in self._listeners["on_chunk"])
        content = {"delta": delta, "text": "".join(pieces)} if captured else None
        await self._emit("on_chunk", event, content)
