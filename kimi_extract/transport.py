"""HTTP: the client, auth, error mapping and the retry policy.

One HTTP client per run (see ``backends``: aiohttp by default, or httpx with or without the
httpx-aiohttp transport), its pool sized to the run's concurrency. With a ``routing.Router`` each
attempt's host is chosen per body (multimodal vs text host, failover) and its outcome reported back.

Retry policy (tenacity): retried are 408, 409, 429 ``rate_limit_reached_error`` /
``engine_overloaded_error``, 5xx, timeouts and connection errors, with full-jitter exponential
backoff capped at ``max_wait`` (60 s). A server-given wait is honoured exactly, read from
``retry-after-ms``, ``Retry-After`` (seconds or an HTTP date) or, when no header is present, Kimi's
message form "please try again after N seconds" (real Kimi 429s carry no header; notes). A wait
longer than ``max_wait`` is never shortened: the request fails instead. Never retried: 400, 401,
403, 404, and 429 ``exceeded_current_quota_error`` (an empty balance).
"""

from __future__ import annotations

import email.utils
import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from .backends import Backend, make_backend
from .exceptions import (
    APIConnectionError,
    APIError,
    AuthenticationError,
    BadRequestError,
    NotFoundError,
    PermissionDeniedError,
    QuotaExceededError,
    RateLimitError,
    ServerError,
)
from .request import Answer, StreamAssembler, encode_body, parse_completion
from .routing import Router

logger = logging.getLogger("kimi_extract")

CHAT_PATH = "/v1/chat/completions"
_RETRY_AFTER_MESSAGE = re.compile(r"try again after (\d+(?:\.\d+)?) ?(milliseconds|ms|seconds|s)\b")
_REQUEST_ID_HEADERS = ("x-request-id", "request-id", "msh-request-id", "x-trace-id")


class Secret:
    """Holds the API key; its repr and str never show it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get(self) -> str:
        """The key itself, for the Authorization header only."""
        return self._value

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__


@dataclass(frozen=True)
class RetryPolicy:
    """How transient failures are retried.

    ``max_retries`` extra attempts after the first (default 8); backoff is full-jitter exponential:
    a uniform wait in ``[0, min(max_wait, base * 2**n)]`` (base 0.5 s, cap 60 s) unless the server
    says how long to wait, which is honoured exactly (a wait over ``max_wait`` fails the request).
    """

    max_retries: int = 8
    base: float = 0.5
    max_wait: float = 60.0


def chat_url(base_url: str) -> str:
    """The chat-completions URL; a base URL already ending in /v1 is not doubled."""
    base = base_url.rstrip("/")
    if base.endswith("/v1"):
        base = base[: -len("/v1")]
    return base + CHAT_PATH


def retry_after_seconds(headers: Mapping[str, str], message: str | None) -> float | None:
    """Seconds the server asked us to wait, from headers or Kimi's message; None if unsaid."""
    value = headers.get("retry-after-ms")
    if value:
        try:
            return max(0.0, float(value) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value:
        try:
            return max(0.0, float(value))
        except ValueError:
            parsed = email.utils.parsedate_to_datetime(value) if value else None
            if parsed is not None:
                return max(0.0, parsed.timestamp() - time.time())
    if message:
        match = _RETRY_AFTER_MESSAGE.search(message)
        if match:
            amount = float(match.group(1))
            return amount / 1000.0 if match.group(2) in ("milliseconds", "ms") else amount
    return None


def error_from_response(status: int, headers: Mapping[str, str], body: bytes) -> APIError:
    """Map an error status and Kimi's error body to a specific exception."""
    message, error_type, code = f"HTTP {status}", None, None
    try:
        payload = json.loads(body)
        error = payload.get("error") if isinstance(payload, dict) else None
        if isinstance(error, dict):
            message = str(error.get("message") or message)
            error_type = error.get("type")
            code = error.get("code")
        elif isinstance(payload, dict) and payload.get("message"):
            message = str(payload["message"])
    except ValueError:
        text = body[:200].decode("utf-8", "replace").strip()
        if text:
            message = text
    request_id = _request_id(headers)
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
        cls = QuotaExceededError if error_type == "exceeded_current_quota_error" else RateLimitError
    elif status >= 500 or status in (408, 409):
        cls = ServerError
    else:
        cls = APIError
    retry_after = retry_after_seconds(headers, message) if cls.retryable else None
    return cls(
        message,
        status=status,
        error_type=error_type,
        code=code if isinstance(code, str) else None,
        request_id=request_id,
        retry_after=retry_after,
    )


def _request_id(headers: Mapping[str, str]) -> str | None:
    return next((headers[h] for h in _REQUEST_ID_HEADERS if h in headers), None)


def is_retryable(exc: BaseException) -> bool:
    """True for errors worth another attempt (see the module docstring)."""
    return bool(getattr(exc, "retryable", False))


class _Wait:
    """Tenacity wait: the server's time when given, else full-jitter exponential backoff."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.backoff = wait_random_exponential(multiplier=policy.base, max=policy.max_wait)

    def __call__(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        server_wait = getattr(exc, "retry_after", None)
        if server_wait is not None:
            return float(server_wait)
        return float(self.backoff(state))


class _Stop:
    """Stop after ``max_retries`` retries, or when the server asks for more than ``max_wait``."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.attempts = stop_after_attempt(policy.max_retries + 1)
        self.max_wait = policy.max_wait

    def __call__(self, state: RetryCallState) -> bool:
        exc = state.outcome.exception() if state.outcome else None
        server_wait = getattr(exc, "retry_after", None)
        if server_wait is not None and server_wait > self.max_wait:
            return True
        return bool(self.attempts(state))


@dataclass
class Exchange:
    """What one row's requests cost: HTTP attempts and time spent inside requests."""

    http_attempts: int = 0
    latency_s: float = 0.0


class Gate(Protocol):
    """What the transport asks before and tells after every HTTP attempt (``limits.Limiter``)."""

    def estimate(self, prompt_tokens: int) -> int: ...

    async def acquire(self, tokens: int) -> Any: ...

    def release(self, permit: Any, actual_tokens: int | None = None) -> None: ...

    def succeeded(self) -> None: ...

    def observe_completion(self, completion_tokens: int) -> None: ...

    def throttled(self, retry_after: float | None, message: str) -> None: ...


class Transport:
    """An async chat-completions client with retries. Use as ``async with Transport(...) as t``."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: Secret,
        concurrency: int,
        timeout: float,
        connect_timeout: float = 10.0,
        retry: RetryPolicy | None = None,
        http_backend: str = "aiohttp",
        on_retry: Callable[[BaseException, float], None] | None = None,
        gate: Gate | None = None,
        encoder: Callable[[dict[str, Any]], bytes] = encode_body,
        router: Router | None = None,
    ) -> None:
        self.url = chat_url(base_url)
        self.router = router  # when set, it picks each attempt's host (base_url is unused)
        self.encoder = encoder
        self._api_key = api_key
        self.concurrency = concurrency
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.retry = retry or RetryPolicy()
        self.http_backend = http_backend
        self.on_retry = on_retry
        self.gate = gate
        self.retries = 0
        self._backend: Backend | None = None

    def __repr__(self) -> str:
        return f"Transport(url={self.url!r}, backend={self.http_backend!r})"

    async def __aenter__(self) -> Transport:
        headers = {
            "Authorization": f"Bearer {self._api_key.get()}",
            "Content-Type": "application/json",
            "User-Agent": "kimi-extract/0.1",
        }
        backend = make_backend(
            self.http_backend,
            headers=headers,
            concurrency=self.concurrency,
            timeout=self.timeout,
            connect_timeout=self.connect_timeout,
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
            return await self._send(body, exchange)
        permit = await gate.acquire(gate.estimate(prompt_tokens))
        actual: int | None = None  # unknown: the charge stays at the estimate
        try:
            answer = await self._send(body, exchange)
            actual = answer.usage.prompt_tokens + answer.usage.completion_tokens
        except RateLimitError as exc:
            actual = 0  # rejected before any work: no tokens
            # Everyone pauses for the server's time, but never longer than a retry may wait: a
            # longer ask fails the row that got it (see _Wait), it does not stall the whole run.
            pause = exc.retry_after
            if pause is not None:
                pause = min(pause, self.retry.max_wait)
            gate.throttled(pause, exc.message)
            raise
        finally:
            gate.release(permit, actual)
        gate.succeeded()
        gate.observe_completion(answer.usage.completion_tokens)
        return answer

    async def _send(self, body: dict[str, Any], exchange: Exchange) -> Answer:
        """One HTTP attempt; raises a mapped error for anything but a usable 200.

        A streaming body (``"stream": true``) is read as SSE and assembled; a stream that ends
        before its final chunk and ``[DONE]`` is a connection error (retried).
        """
        backend = self._backend
        if backend is None:
            raise RuntimeError("Transport used outside 'async with'")
        payload = self.encoder(body)
        router = self.router
        if router is None:
            return await self._attempt(backend, self.url, body, payload, exchange)
        base_url = router.base_url_for(body)
        try:
            answer = await self._attempt(backend, chat_url(base_url), body, payload, exchange)
        except Exception as exc:
            router.report(base_url, exc)
            raise
        router.report(base_url, None)
        return answer

    async def _attempt(
        self, backend: Backend, url: str, body: dict[str, Any], payload: bytes, exchange: Exchange
    ) -> Answer:
        started = time.perf_counter()
        exchange.http_attempts += 1
        try:
            if body.get("stream"):
                return await self._send_streaming(backend, url, payload)
            reply = await backend.post(url, payload)
        finally:
            exchange.latency_s += time.perf_counter() - started
        if reply.status != 200:
            raise error_from_response(reply.status, reply.headers, reply.body)
        try:
            return parse_completion(json.loads(reply.body), _request_id(reply.headers))
        except ValueError as exc:
            # A 200 whose body is not a chat completion: treat like a server fault (retried).
            raise ServerError(f"malformed response body: {exc}", status=200) from None

    async def _send_streaming(self, backend: Backend, url: str, payload: bytes) -> Answer:
        async with backend.stream(url, payload) as reply:
            if reply.status != 200:
                raise error_from_response(reply.status, reply.headers, await reply.read())
            assembler = StreamAssembler()
            try:
                async for line in reply.lines:
                    assembler.feed_line(line)
                    if assembler.done:
                        break
            except ValueError as exc:
                raise ServerError(f"malformed stream chunk: {exc}", status=200) from None
            try:
                return assembler.answer(_request_id(reply.headers))
            except ValueError as exc:
                raise APIConnectionError(f"stream cut: {exc}") from None

    async def complete(
        self, body: dict[str, Any], exchange: Exchange, prompt_tokens: int = 0
    ) -> Answer:
        """Send with the retry policy; raises the last error when retries are exhausted.

        The first attempt runs outside tenacity (most requests succeed at once, and building a
        retry loop per request costs CPU); a retryable failure then enters the loop as its first
        attempt, so waits and the attempt cap are exactly those of one retry layer.
        """
        try:
            return await self.send(body, exchange, prompt_tokens)
        except Exception as exc:
            if not is_retryable(exc):
                raise
            first: BaseException | None = exc
        retrying = AsyncRetrying(
            stop=_Stop(self.retry),
            wait=_Wait(self.retry),
            retry=retry_if_exception(is_retryable),
            reraise=True,
            before_sleep=self._before_sleep,
        )
        async for attempt in retrying:
            with attempt:
                if first is not None:  # the attempt already made above
                    failed, first = first, None
                    raise failed
                return await self.send(body, exchange, prompt_tokens)
        raise AssertionError("unreachable")  # pragma: no cover

    def _before_sleep(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        self.retries += 1
        logger.debug("retrying in %.2f s after %s", wait, exc)
        if self.on_retry is not None and exc is not None:
            self.on_retry(exc, wait)
