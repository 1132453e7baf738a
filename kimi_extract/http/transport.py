"""HTTP: the client, auth, error mapping and the retry policy.

One HTTP client per run (see ``backends``: aiohttp by default, or httpx with or without the
httpx-aiohttp transport), its pool sized to the run's concurrency. With a ``routing.Router`` each
attempt's host is chosen per body (multimodal vs text host, failover) and its outcome reported back.

Retry policy (tenacity): retried are 408, 409, 429 ``rate_limit_reached_error`` /
``engine_overloaded_error``, 5xx, timeouts and connection errors, with full-jitter exponential
backoff capped at ``max_wait`` (60 s). A server-given wait is honoured exactly, read from
``retry-after-ms``, ``Retry-After`` (seconds or an HTTP date) or, when no header is present, Kimi's
message form "please try again after N seconds" (real Kimi 429s carry no header:
docs/reference/KIMI-NOTES.md). A wait
longer than ``max_wait`` is never shortened: the request fails instead. 429s that ask the client
to slow down do not count toward ``max_retries`` while the run makes progress (``_Budget``): the
limiter paces their retries. Never retried: 400, 401,
403, 404, and 429 ``exceeded_current_quota_error`` (an empty balance). Waits sleep on the
transport's ``clock.Clock`` (``clock=``), so tests can run them on virtual time.

The run's observer (``dispatch.Dispatcher``, ``dispatcher=``) hears every attempt: before it is
sent, when it ends (an answer or an error), before a retry's wait, and each time a streamed
answer grows. An internal listener (the run's budget) may refuse a retry by raising.
"""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import functools
import json
import logging
import math
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    wait_random_exponential,
)

from ..config.groups import Connection
from ..dispatch import Dispatcher, Exchange
from ..exceptions import (
    APIConnectionError,
    APIError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    KimiExtractError,
    NotFoundError,
    PermissionDeniedError,
    QuotaExceededError,
    RateLimitError,
    ResponseTooLargeError,
    ServerError,
)
from ..kimi import QUOTA_ERROR_TYPE, RETRY_AFTER_MESSAGE, STATUS_OF_ERROR_TYPE
from .backends import Backend, HttpReply, make_backend
from .clock import Clock, default_clock
from .pacing import MAX_WINDOW_S
from .routing import Router
from .secret import MAX_SERVER_TEXT, Secret, server_text
from .wire import (
    Answer,
    ErrorObject,
    StreamAssembler,
    TooManyValues,
    check_values,
    encode_body,
    parse_completion,
)

logger = logging.getLogger("kimi_extract")

CHAT_PATH = "/v1/chat/completions"
_REQUEST_ID_HEADERS = ("x-request-id", "request-id", "msh-request-id", "x-trace-id")
#: Default stall limit between stream lines (never above ``timeout``).
DEFAULT_STALL_TIMEOUT = 120.0
#: When no attempt of a run has ever connected, connection failures stop retrying (and the run)
#: once the next attempt would start this many seconds after the run's first one (transport
#: clock): an unreachable endpoint stops a run within about this plus one attempt's ``timeout``.
UNREACHABLE_AFTER = 10.0
#: A run answering at its own slow pace is making progress while the time since its last answer
#: is within this many times its mean gap between answers (``Transport.patience``).
PROGRESS_GAPS = 4.0


@dataclass(frozen=True)
class RetryPolicy:
    """How transient failures are retried (made from the ``Connection`` settings).

    ``max_retries`` extra attempts after the first (default 8); backoff is full-jitter exponential:
    a uniform wait in ``[0, min(max_wait, base * 2**n)]`` (base 0.5 s, cap 60 s) unless the server
    says how long to wait, which is honoured exactly (a wait over ``max_wait`` fails the request).
    """

    max_retries: int = 8
    base: float = 0.5
    max_wait: float = 60.0


def urlsplit_without_userinfo(url: str) -> str:
    """``url`` without any ``user:password@`` part (for messages)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def chat_url(base_url: str) -> str:
    """The chat-completions URL; a base URL already ending in /v1 is not doubled."""
    base = base_url.rstrip("/")
    if base.endswith("/v1"):
        base = base[: -len("/v1")]
    return base + CHAT_PATH


def retry_after_seconds(headers: Mapping[str, str], message: str | None) -> float | None:
    """Seconds the server asked us to wait, from headers or Kimi's message; None if unsaid or
    unreadable (``Retry-After: soon`` or ``5s`` is ignored, not an error)."""
    value = headers.get("retry-after-ms")
    if value:
        seconds = _seconds(value, scale=1000.0)
        if seconds is not None:
            return seconds
    value = headers.get("retry-after")
    if value:
        seconds = _seconds(value)
        if seconds is not None:
            return seconds
        try:
            parsed = email.utils.parsedate_to_datetime(value)
            return max(0.0, parsed.timestamp() - time.time())
        except (TypeError, ValueError, OverflowError, IndexError):
            pass
    if message:
        match = RETRY_AFTER_MESSAGE.search(message)
        if match:
            amount = float(match.group(1))
            return amount / 1000.0 if match.group(2) in ("milliseconds", "ms") else amount
    return None


def _seconds(value: str, scale: float = 1.0) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if math.isnan(number):
        return None
    return max(0.0, number / scale)  # inf stays inf: longer than any max_wait, so the row fails


def error_from_response(
    status: int, headers: Mapping[str, str], body: bytes, secret: Secret | None = None
) -> APIError:
    """Map an error status and Kimi's error body to a specific exception.

    Every text taken from the response (message, type, code, request id) is cut to
    ``MAX_SERVER_TEXT`` characters and redacted of the key.
    """
    message: Any = None
    error: dict[str, Any] | None = None
    try:
        payload = json.loads(body)
        error = payload.get("error") if isinstance(payload, dict) else None
        if not isinstance(error, dict):
            error = None
            if isinstance(payload, dict) and payload.get("message"):
                message = payload["message"]
    except (ValueError, RecursionError):
        message = body[:MAX_SERVER_TEXT].decode("utf-8", "replace").strip() or None
    if error is not None:
        return error_from_object(error, status, headers, secret)
    return _api_error(status, headers, message, None, None, secret)


def error_from_object(
    error: dict[str, Any], status: int, headers: Mapping[str, str], secret: Secret | None = None
) -> APIError:
    """Map an API error object (``{"type", "message", "code"}``) to an exception.

    With ``status`` 200 (an error object in a 200 body or a stream event) the error type decides
    the status it stands for, so ``invalid_authentication_error`` stops the run like a 401; an
    unknown type is a server fault (retried).
    """
    error_type = error.get("type")
    if status == 200:
        status = STATUS_OF_ERROR_TYPE.get(error_type, 500) if isinstance(error_type, str) else 500
    return _api_error(status, headers, error.get("message"), error_type, error.get("code"), secret)


def _api_error(
    status: int,
    headers: Mapping[str, str],
    message: Any,
    error_type: Any,
    code: Any,
    secret: Secret | None,
) -> APIError:
    text = server_text(message, secret) if message else f"HTTP {status}"
    kind = server_text(error_type, secret, 100) if isinstance(error_type, str) else None
    request_id = _request_id(headers, secret)
    cls: type[APIError]
    if status == 400:
        cls = BadRequestError
    elif status == 401:
        cls = AuthenticationError
    elif status == 403:
        cls = PermissionDeniedError
    elif status == 404:
        cls = NotFoundError
    elif status == 429:
        cls = QuotaExceededError if kind == QUOTA_ERROR_TYPE else RateLimitError
    elif status >= 500 or status in (408, 409):
        cls = ServerError
    else:
        cls = APIError
    retry_after = retry_after_seconds(headers, text) if cls.retryable else None
    return cls(
        text,
        status=status,
        error_type=kind,
        code=server_text(code, secret, 100) if isinstance(code, str) else None,
        request_id=request_id,
        retry_after=retry_after,
    )


def _request_id(headers: Mapping[str, str], secret: Secret | None = None) -> str | None:
    for name in _REQUEST_ID_HEADERS:
        value = headers.get(name)
        if value is not None:
            return server_text(value, secret, 200) if value else None
    return None


def is_retryable(exc: BaseException) -> bool:
    """True for errors worth another attempt (see the module docstring)."""
    return bool(getattr(exc, "retryable", False))


class _Budget:
    """One request's retries: the wait before each and when to stop (tenacity's wait and stop).

    A server-given wait is honoured exactly, and one over ``max_wait`` fails the request. Errors
    (5xx, timeouts, connection errors, ...) count toward ``max_retries`` and back off with full
    jitter. 429s that ask the client to slow down (``RateLimitError``) and state no wait are
    retried after a jitter of at most ``base`` (the gate paces retries, and pauses every sender
    when the server has no room). They do not count while the run makes progress, that is while
    some request got an answer within the last ``max_wait`` seconds; once the run has had an
    answer, within a window (``MAX_WINDOW_S``) more, or ``PROGRESS_GAPS`` times its mean gap
    between answers when that is longer (``Transport.progressing``: a limit counted
    per minute holds the next answer back a whole window, and one that lets a request through
    every 30 s, with random refusals on top, leaves longer gaps): a row is never lost to a rate
    limit the run is working through. When nothing has been answered for that long they count
    like errors, so a server that refuses everything still ends the run.
    """

    def __init__(self, policy: RetryPolicy, progressing: Callable[[], bool]) -> None:
        self.policy = policy
        self.progressing = progressing
        self.backoff = wait_random_exponential(multiplier=policy.base, max=policy.max_wait)
        self._free: dict[int, bool] = {}  # attempt number -> a 429 not counted

    def _is_free(self, state: RetryCallState) -> bool:
        number = state.attempt_number
        if number not in self._free:
            exc = state.outcome.exception() if state.outcome else None
            self._free[number] = isinstance(exc, RateLimitError) and self.progressing()
        return self._free[number]

    def counted(self, state: RetryCallState) -> int:
        """Failed attempts so far that count toward ``max_retries``."""
        self._is_free(state)
        return state.attempt_number - sum(self._free.values())

    def wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        server_wait = getattr(exc, "retry_after", None)
        if server_wait is not None:
            return float(server_wait)
        if self._is_free(state):
            # A jitter so refused rows do not come back together; the gate does the pacing.
            return random.uniform(0, min(self.policy.max_wait, self.policy.base))
        # Backoff by the failures that count, so free 429s do not inflate an error's wait.
        counted = max(1, self.counted(state))
        return float(self.backoff(_AtAttempt(counted)))  # type: ignore[arg-type]

    def stop(self, state: RetryCallState) -> bool:
        exc = state.outcome.exception() if state.outcome else None
        server_wait = getattr(exc, "retry_after", None)
        if server_wait is not None and server_wait > self.policy.max_wait:
            return True
        return self.counted(state) >= self.policy.max_retries + 1


@dataclass
class _AtAttempt:
    """The one field tenacity's exponential backoff reads."""

    attempt_number: int


class Gate(Protocol):
    """What the transport asks before and tells after every HTTP attempt (``limits.Limiter``)."""

    def estimate(self, prompt_tokens: int) -> int: ...

    async def acquire(self, tokens: int) -> Any: ...

    def release(self, permit: Any, actual_tokens: int | None = None) -> None: ...

    def succeeded(self, permit: Any = None) -> None: ...

    def observe_prompt(self, estimated: int, actual: int) -> None: ...

    def observe_completion(self, completion_tokens: int) -> None: ...

    def throttled(self, retry_after: float | None, message: str, permit: Any = None) -> None: ...

    def connected(self, rtt: float) -> None: ...


class Transport:
    """An async chat-completions client with retries. Use as ``async with Transport(...) as t``."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: Secret,
        concurrency: int,
        connection: Connection | None = None,
        dispatcher: Dispatcher | None = None,
        gate: Gate | None = None,
        encoder: Callable[[dict[str, Any]], bytes] = encode_body,
        router: Router | None = None,
        connect_timeout: float = 10.0,
        stall_timeout: float | None = None,
        clock: Clock | None = None,
        backend: Backend | None = None,
    ) -> None:
        """``connection``: the settings group of each attempt and its retries, taken as it is
        (timeout, retries, response cap, HTTP backend); ``concurrency``: the pool size;
        ``dispatcher``: the run's observer (default: one with no listeners).
        ``connect_timeout`` / ``stall_timeout`` (default ``min(timeout, 120)``), ``clock`` and
        ``backend`` are for tests."""
        connection = connection or Connection()
        self.connection = connection
        # The router picks each attempt's host; without one, every attempt goes to base_url.
        self.router = router if router is not None else Router(base_url)
        self.clock = clock or default_clock()
        self.encoder = encoder
        self._api_key = api_key
        self.concurrency = concurrency
        self.timeout = connection.timeout
        self.connect_timeout = connect_timeout
        # Streams: the longest silence between two lines, within the attempt's deadline.
        self.stall_timeout = (
            stall_timeout if stall_timeout is not None else min(self.timeout, DEFAULT_STALL_TIMEOUT)
        )
        self.max_response_bytes = connection.max_response_bytes
        self.retry = RetryPolicy(
            max_retries=connection.max_retries, max_wait=connection.max_retry_wait
        )
        self.http_backend = connection.http_backend
        self.dispatcher = dispatcher if dispatcher is not None else Dispatcher()
        self.gate = gate
        self.retries = 0
        #: When the last answer (any request's) arrived, on ``clock``: the run's progress.
        self.last_answer = self.clock.now()
        self._first_answer = 0.0
        self._answers = 0
        #: Retries after a connection failure (shown by the progress bar).
        self.connection_retries = 0
        #: Some attempt of this run reached a server (any answer, even an error status).
        self.connected = False
        #: Set when no attempt has connected for ``UNREACHABLE_AFTER`` s: the run stops with it.
        self.unreachable: APIConnectionError | None = None
        self._first_attempt: float | None = None
        self._last_connect_failure: tuple[str, str] | None = None  # (url, what failed)
        #: Given: used instead of making one from ``http_backend`` (tests: a scripted backend).
        self._given_backend = backend
        self._backend: Backend | None = None
        #: base URL -> its chat-completions URL (``chat_url``), per host the router picks.
        self._urls: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"Transport(router={self.router!r}, backend={self.http_backend!r})"

    async def __aenter__(self) -> Transport:
        # New connections' round trips go to the gate (the opening's pacing holds that long).
        on_connect = self.gate.connected if self.gate is not None else None
        if self._given_backend is not None:
            if hasattr(self._given_backend, "on_connect"):
                self._given_backend.on_connect = on_connect
            await self._given_backend.open()
            self._backend = self._given_backend
            return self
        headers = {
            "Authorization": f"Bearer {self._api_key.get()}",
            "Content-Type": "application/json",
            "User-Agent": self.connection.user_agent_header,
        }
        backend = make_backend(
            self.http_backend,
            headers=headers,
            concurrency=self.concurrency,
            timeout=self.timeout,
            # Within the attempt's deadline, so a connect that hangs is told as one (it counts
            # toward an unreachable endpoint) rather than as a deadline that says nothing.
            connect_timeout=min(self.connect_timeout, 0.9 * self.timeout),
            max_response_bytes=self.max_response_bytes,
            redact=self._api_key.redact,
            on_connect=on_connect,
        )
        await backend.open()
        self._backend = backend
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._backend is not None:
            await self._backend.close()
            self._backend = None

    async def send(
        self, body: dict[str, Any], exchange: Exchange, prompt_tokens: int = 0
    ) -> Answer:
        """One HTTP attempt, admitted by the gate (when there is one) and reported back to it."""
        gate = self.gate
        if gate is None:
            answer = await self._send(body, exchange)
            self._answered()
            return answer
        permit = await gate.acquire(gate.estimate(prompt_tokens))
        actual: int | None = None  # unknown: the charge stays at the estimate
        try:
            answer = await self._send(body, exchange)
            actual = answer.usage.prompt_tokens + answer.usage.completion_tokens
        except RateLimitError as exc:
            actual = 0  # rejected before any work: no tokens
            # Everyone pauses for the server's time, but never longer than a retry may wait: a
            # longer ask fails the row that got it (see _Budget), it does not stall the whole run.
            pause = exc.retry_after
            if pause is not None:
                pause = min(pause, self.retry.max_wait)
            gate.throttled(pause, exc.message, permit)
            if getattr(permit, "own", False):
                exc.retry_after = 0.0  # (the gate's own probe: it goes again as the gate admits it)
            raise
        finally:
            gate.release(permit, actual)
        self._answered()
        gate.succeeded(permit)
        gate.observe_prompt(prompt_tokens, answer.usage.prompt_tokens)
        gate.observe_completion(answer.usage.completion_tokens)
        return answer

    async def _send(self, body: dict[str, Any], exchange: Exchange) -> Answer:
        """One HTTP attempt under the deadline ``timeout`` (connect to last byte); raises a
        mapped error for anything but a usable 200.

        A streaming body (``"stream": true``) is read as SSE and assembled; a stream that ends
        before its final chunk and ``[DONE]`` is a connection error (retried). Whatever goes
        wrong comes out as one of the library's errors, with any text the server sent redacted
        of the key; an error no backend or parser mapped is a connection error. The router
        hears every attempt's outcome.
        """
        backend = self._backend
        if backend is None:
            raise RuntimeError("Transport used outside 'async with'")
        payload = self.encoder(body)
        router = self.router
        base_url = router.base_url_for(body)
        url = self._urls.get(base_url) or self._urls.setdefault(base_url, chat_url(base_url))
        if self._first_attempt is None:
            self._first_attempt = self.clock.now()
        started = time.perf_counter()
        failure: KimiExtractError
        try:
            async with asyncio.timeout(self.timeout):
                if body.get("stream"):
                    answer = await self._send_streaming(backend, url, payload, exchange)
                else:
                    answer = self._read_reply(await backend.post(url, payload))
            answer = self._clean_answer(answer)
        except TimeoutError:
            failure = APITimeoutError(
                f"no complete response within timeout={self.timeout:g} s (connect to last byte)"
            )
        except KimiExtractError as exc:
            failure = self._redacted(exc)
        except Exception as exc:  # noqa: BLE001 - any other failure is this attempt's, not the run's
            detail = server_text(str(exc), self._api_key, 300)
            failure = APIConnectionError(f"broken response: {type(exc).__name__}: {detail}")
        else:
            router.report(base_url, None)
            self.connected = True
            return answer
        finally:
            exchange.latency_s += time.perf_counter() - started
        router.report(base_url, failure)
        if not self.connected:
            self._note_unconnected(failure, url)
        # Raised outside the except blocks, so no chained context carries the server's raw text.
        raise failure

    def _note_unconnected(self, failure: KimiExtractError, url: str) -> None:
        """A failed attempt while no attempt of the run has connected: a connection failure is
        remembered (and declares the endpoint unreachable once ``UNREACHABLE_AFTER`` has
        passed); anything else means a server answered."""
        what = getattr(failure, "connect_failure", None)
        if what is None:
            self.connected = True
            return
        self._last_connect_failure = (url, what)
        if self.clock.now() - (self._first_attempt or 0.0) >= UNREACHABLE_AFTER:
            self._declare_unreachable()

    def _declare_unreachable(self) -> None:
        if self.unreachable is not None or self._last_connect_failure is None:
            return
        url, what = self._last_connect_failure
        elapsed = self.clock.now() - (self._first_attempt or 0.0)
        shown = server_text(urlsplit_without_userinfo(url), self._api_key, 300)
        self.unreachable = APIConnectionError(
            f"cannot reach {shown}: {what}; no attempt of this run got an answer in "
            f"{elapsed:.0f} s of trying (check base_url, its host and port, and the network)"
        )
        self.unreachable.connect_failure = what

    def _stop_unreachable(self, state: RetryCallState) -> bool:
        """Tenacity stop: give up once the endpoint is known unreachable, or when the next
        attempt would start ``UNREACHABLE_AFTER`` s after the run's first with none connected."""
        if self.unreachable is not None:
            return True
        if self.connected or self._first_attempt is None:
            return False
        exc = state.outcome.exception() if state.outcome else None
        if getattr(exc, "connect_failure", None) is None:
            return False
        start_of_next = self.clock.now() + state.upcoming_sleep
        if start_of_next - self._first_attempt >= UNREACHABLE_AFTER:
            self._declare_unreachable()
            return True
        return False

    def since_answer(self) -> float:
        """Seconds since any request got an answer (since the transport was made, before)."""
        return self.clock.now() - self.last_answer

    def _answered(self) -> None:
        self.last_answer = self.clock.now()
        if not self._answers:
            self._first_answer = self.last_answer
        self._answers += 1

    def progressing(self) -> bool:
        """Whether the run is making progress: an answer within ``patience()``."""
        return self.since_answer() <= self.patience()

    def patience(self) -> float:
        """How long the run may go without an answer and still be making progress:
        ``max_retry_wait`` until the first answer; after it a window longer (``MAX_WINDOW_S``:
        a limit counted per minute may hold the next answer back a whole window after its
        sends went in the first seconds), or ``PROGRESS_GAPS`` times the run's mean gap between
        answers when that is longer."""
        wait = self.retry.max_wait
        if self._answers:
            wait += MAX_WINDOW_S
        if self._answers >= 2:
            gap = (self.last_answer - self._first_answer) / (self._answers - 1)
            wait = max(wait, PROGRESS_GAPS * gap)
        return wait

    def _read_reply(self, reply: HttpReply) -> Answer:
        secret = self._api_key
        if reply.status != 200:
            raise error_from_response(reply.status, reply.headers, reply.body, secret)
        try:
            check_values(reply.body)  # before json builds a Python object per value
            return parse_completion(json.loads(reply.body), _request_id(reply.headers, secret))
        except TooManyValues as exc:
            raise ResponseTooLargeError(str(exc), status=200) from None
        except ErrorObject as exc:
            raise error_from_object(exc.error, 200, reply.headers, secret) from None
        except (ValueError, RecursionError) as exc:
            # A 200 whose body is not a chat completion: treat like a server fault (retried).
            raise ServerError(
                f"malformed response body: {server_text(str(exc), secret, 300)}", status=200
            ) from None

    async def _send_streaming(
        self, backend: Backend, url: str, payload: bytes, exchange: Exchange
    ) -> Answer:
        secret = self._api_key
        hooks = self.dispatcher
        chunks = "on_chunk" in hooks.listening
        async with backend.stream(url, payload) as reply:
            if reply.status != 200:
                body = await reply.read()
                raise error_from_response(reply.status, reply.headers, body, secret)
            assembler = StreamAssembler()
            lines = reply.lines
            try:
                while not assembler.done:
                    try:
                        async with asyncio.timeout(self.stall_timeout):
                            line = await anext(lines)
                    except StopAsyncIteration:
                        break
                    except TimeoutError:
                        raise APITimeoutError(
                            f"the stream stalled: nothing for {self.stall_timeout:g} s"
                        ) from None
                    assembler.feed_line(line)
                    if chunks:
                        await hooks.chunk(exchange, assembler.content)
            except ErrorObject as exc:
                raise error_from_object(exc.error, 200, reply.headers, secret) from None
            except TooManyValues as exc:
                raise ResponseTooLargeError(str(exc), status=200) from None
            except (ValueError, RecursionError) as exc:
                raise ServerError(
                    f"malformed stream chunk: {server_text(str(exc), secret, 300)}", status=200
                ) from None
            finally:
                close = getattr(lines, "aclose", None)
                if close is not None:
                    await close()
            if not assembler.done or assembler.finish_reason is None:
                raise APIConnectionError("stream cut: the stream ended before its final chunk")
            try:
                return assembler.answer(_request_id(reply.headers, secret))
            except ValueError as exc:
                raise ServerError(
                    f"malformed stream: {server_text(str(exc), secret, 300)}", status=200
                ) from None

    def _redacted(self, exc: KimiExtractError) -> KimiExtractError:
        """``exc``, or a copy of it with the key removed from every server-given text."""
        secret = self._api_key
        if isinstance(exc, APIError):
            fields = (exc.message, exc.error_type, exc.code, exc.request_id)
            clean = tuple(secret.redact(f) if f else f for f in fields)
            if clean == fields:
                return exc
            return type(exc)(
                clean[0] or "",
                status=exc.status,
                error_type=clean[1],
                code=clean[2],
                request_id=clean[3],
                retry_after=exc.retry_after,
            )
        text = str(exc)
        clean_text = server_text(text, secret)
        if clean_text == text:
            return exc
        try:
            return type(exc)(clean_text)
        except Exception:  # noqa: BLE001 - an exception type with another signature
            return APIConnectionError(clean_text)

    def _clean_answer(self, answer: Answer) -> Answer:
        """The answer with the key removed from every text in it (a server may echo it)."""
        secret = self._api_key
        texts = (answer.content, answer.reasoning_content, answer.finish_reason, answer.request_id)
        # One search over the texts joined by a character no key holds (nearly always clean).
        if not answer.tool_calls and not secret.suspect("\n".join([t for t in texts if t])):
            return answer
        changes: dict[str, Any] = {}
        for name in ("content", "reasoning_content", "finish_reason", "request_id"):
            value = getattr(answer, name)
            if value:
                clean = secret.redact(value)
                if clean != value:
                    changes[name] = clean
        if answer.tool_calls:
            clean_calls = secret.redact_value(answer.tool_calls)
            if clean_calls != answer.tool_calls:
                changes["tool_calls"] = clean_calls
        return dataclasses.replace(answer, **changes) if changes else answer

    async def complete(
        self, body: dict[str, Any], exchange: Exchange, prompt_tokens: int = 0
    ) -> Answer:
        """Send with the retry policy; raises the last error when retries are exhausted.

        The first attempt runs outside tenacity (most requests succeed at once, and building a
        retry loop per request costs CPU); a retryable failure then enters the loop as its first
        attempt, so waits and the attempt cap are exactly those of one retry layer.
        """
        try:
            return await self._attempt(body, exchange, prompt_tokens)
        except Exception as exc:
            if not is_retryable(exc):
                raise
            first: BaseException | None = exc
        budget = _Budget(self.retry, self.progressing)
        retrying = AsyncRetrying(
            stop=lambda state: budget.stop(state) or self._stop_unreachable(state),
            wait=budget.wait,
            retry=retry_if_exception(is_retryable),
            reraise=True,
            before_sleep=functools.partial(self._before_sleep, exchange=exchange),
            sleep=self.clock.sleep,
        )
        async for attempt in retrying:
            with attempt:
                if first is not None:  # the attempt already made above
                    failed, first = first, None
                    raise failed
                return await self._attempt(body, exchange, prompt_tokens)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _attempt(
        self, body: dict[str, Any], exchange: Exchange, prompt_tokens: int
    ) -> Answer:
        """``send``, numbered on ``exchange`` and told to the observer (``on_attempt``, then
        ``on_response`` with the answer or the error)."""
        exchange.next_attempt()
        hooks = self.dispatcher
        if not hooks.listening:
            return await self.send(body, exchange, prompt_tokens)
        if "on_attempt" in hooks.listening:
            await hooks.attempt(exchange, body, prompt_tokens)
        before = exchange.latency_s
        try:
            answer = await self.send(body, exchange, prompt_tokens)
        except Exception as exc:
            await hooks.response(exchange, exchange.latency_s - before, error=exc)
            raise
        await hooks.response(exchange, exchange.latency_s - before, answer=answer)
        return answer

    async def _before_sleep(self, state: RetryCallState, *, exchange: Exchange) -> None:
        exc = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        self.retries += 1
        if isinstance(exc, APIConnectionError):
            self.connection_retries += 1
        logger.debug("retrying in %.2f s after %s", wait, exc)
        if exc is not None and "on_retry" in self.dispatcher.listening:
            await self.dispatcher.retry(exchange, exc, wait)  # the budget may refuse it here
