"""HTTP backends for the transport: one POST, returning status, headers and body (or SSE lines).

Three interchangeable backends, chosen by ``Extractor(http_backend=...)``:

- ``"aiohttp"`` (default): an ``aiohttp.ClientSession`` used directly. Cheapest in CPU per
  request at high concurrency (figures in benchmarks/RESULTS.md).
- ``"httpx-aiohttp"``: an ``httpx.AsyncClient`` over the ``httpx-aiohttp`` transport.
- ``"httpx"``: a plain ``httpx.AsyncClient`` (its pool costs the most CPU with many connections).

Each new connection's round trip goes to ``on_connect`` (the limiter's opening holds its pacing
that long past the first answer): aiohttp times the connection it opens, TCP and TLS together,
and counts ``TLS_ROUND_TRIPS`` in a TLS one (TCP's handshake, then TLS 1.3's); httpx times TCP's
handshake alone, on its first ``TRACED_REQUESTS`` requests. httpx-aiohttp reports none.

Each maps its own failures to ``APIConnectionError`` / ``APITimeoutError``; status handling and
retries live in ``transport``. Every backend's pool is sized to the run's concurrency. Bodies are
read in chunks and counted after decompression: past ``max_response_bytes`` the attempt fails with
``ResponseTooLargeError`` and the rest is never read (a gzip bomb cannot fill memory).
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import socket
import time
import zlib
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from ..exceptions import (
    APIConnectionError,
    APITimeoutError,
    ConfigurationError,
    ResponseTooLargeError,
)

BACKENDS = ("aiohttp", "httpx-aiohttp", "httpx")
#: Default cap on one response body, counted after decompression (``max_response_bytes``).
DEFAULT_MAX_RESPONSE_BYTES = 32 * 1024 * 1024
#: The HTTP libraries' loggers that may log what a server sent (httpcore logs response headers
#: at DEBUG, aiohttp bad Set-Cookie values): while a backend is open their records are redacted.
HTTP_LOGGERS = (
    "httpx",
    "httpcore.connection",
    "httpcore.http11",
    "httpcore.http2",
    "httpcore.proxy",
    "httpcore.socks",
    "aiohttp.client",
    "aiohttp.internal",
)


#: Round trips in opening a TLS connection: TCP's handshake and TLS 1.3's (TLS 1.2 takes one
#: more: its round trip is then read half as long again, and the opening holds a little longer).
TLS_ROUND_TRIPS = 2
#: httpx reports the connections opened by its first requests (tracing each costs CPU).
TRACED_REQUESTS = 64


class RedactingFilter(logging.Filter):
    """A logging filter that passes every record through ``redact`` (the key never gets logged
    by the HTTP libraries either)."""

    def __init__(self, redact: Callable[[str], str]) -> None:
        super().__init__()
        self.redact = redact

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken record is logging's problem, not ours
            return True
        clean = self.redact(message)
        if clean != message:
            record.msg, record.args = clean, ()
        return True

    def install(self) -> None:
        """Attach to every logger in ``HTTP_LOGGERS``."""
        for name in HTTP_LOGGERS:
            logging.getLogger(name).addFilter(self)

    def remove(self) -> None:
        """Detach from every logger in ``HTTP_LOGGERS``."""
        for name in HTTP_LOGGERS:
            logging.getLogger(name).removeFilter(self)


@dataclass
class HttpReply:
    """A finished HTTP response."""

    status: int
    headers: Mapping[str, str]
    body: bytes


@dataclass
class StreamReply:
    """An open streaming response: status, headers, and its body as text lines."""

    status: int
    headers: Mapping[str, str]
    lines: AsyncIterator[str]
    read: Any  # async () -> bytes, for error bodies (capped like any body)


class Backend(Protocol):
    """What the transport needs from an HTTP client."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def post(self, url: str, payload: bytes) -> HttpReply: ...

    def stream(self, url: str, payload: bytes) -> Any: ...


#: Told each new connection's round trip in seconds.
OnConnect = Callable[[float], None]


@functools.cache
def _timed_connector() -> type:
    """An aiohttp ``TCPConnector`` that tells ``on_connect`` how long each connection took to
    open (per round trip: ``TLS_ROUND_TRIPS`` in a TLS one)."""
    import aiohttp

    class TimedConnector(aiohttp.TCPConnector):
        on_connect: OnConnect | None = None

        async def _create_connection(self, req: Any, traces: Any, timeout: Any) -> Any:
            start = time.monotonic()
            proto = await super()._create_connection(req, traces, timeout)
            if self.on_connect is not None:
                trips = TLS_ROUND_TRIPS if req.is_ssl() else 1
                self.on_connect((time.monotonic() - start) / trips)
            return proto

    return TimedConnector


def make_backend(
    name: str,
    *,
    headers: dict[str, str],
    concurrency: int,
    timeout: float,
    connect_timeout: float,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    redact: Callable[[str], str] | None = None,
    on_connect: OnConnect | None = None,
) -> Backend:
    """The backend called ``name`` (one of ``BACKENDS``). ``redact`` cleans the HTTP libraries'
    log records while the backend is open; ``on_connect`` is told new connections' round trips
    (module docstring)."""
    backend: AiohttpBackend | HttpxBackend
    if name == "aiohttp":
        backend = AiohttpBackend(headers, concurrency, timeout, connect_timeout, max_response_bytes)
    elif name in ("httpx", "httpx-aiohttp"):
        backend = HttpxBackend(
            headers,
            concurrency,
            timeout,
            connect_timeout,
            max_response_bytes,
            aiohttp=name != "httpx",
        )
    else:
        raise ConfigurationError(f"unknown http backend {name!r}; use one of {BACKENDS}")
    backend.log_filter = RedactingFilter(redact) if redact is not None else None
    backend.on_connect = on_connect
    return backend


class ErrorMapping:
    """A backend's own failures as the library's errors, in one place for every backend.

    ``timeouts`` become ``APITimeoutError``, ``errors`` (connection and protocol failures)
    ``APIConnectionError``; anything else passes unchanged. Used as ``with mapping("request"):``
    around opening a response, and ``with mapping("stream"):`` around reading its lines.
    """

    _WORDS = {
        "request": ("request timed out", "connection failed"),
        "stream": ("stream timed out", "stream broken"),
    }

    def __init__(
        self,
        timeouts: tuple[type[BaseException], ...],
        errors: tuple[type[BaseException], ...],
    ) -> None:
        self.timeouts = timeouts
        self.errors = errors

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        try:
            yield
        except self.timeouts as exc:
            raise self.mapped(phase, exc) from None
        except self.errors as exc:
            raise self.mapped(phase, exc) from None

    def mapped(self, phase: str, exc: BaseException) -> APITimeoutError | APIConnectionError:
        """The library's error for ``exc``, one of ``timeouts`` or ``errors`` (for callers that
        catch them themselves: a ``with`` block costs a generator per request). A failure to
        connect says so in ``connect_failure``."""
        timed_out, failed = self._WORDS[phase]
        error: APITimeoutError | APIConnectionError
        if isinstance(exc, self.timeouts):
            error = APITimeoutError(f"{timed_out} ({type(exc).__name__})")
        else:
            error = APIConnectionError(f"{failed}: {type(exc).__name__}: {exc}")
        if phase == "request":
            error.connect_failure = connect_failure(exc)
        return error


#: Exception types (by name, across aiohttp, httpx and httpcore) raised only while connecting.
_CONNECT_TIMEOUTS = frozenset({"ConnectionTimeoutError", "ConnectTimeout"})
_CONNECT_ERRORS = frozenset({"ClientConnectorError", "ConnectError"})


def connect_failure(exc: BaseException) -> str | None:
    """What went wrong when ``exc`` (an HTTP library's error) means the request never reached
    a server: "connection refused", "DNS lookup failed", "connect timed out" or "could not
    connect (...)"; None for a failure after connecting (reset, cut, read timeout).

    Read from the whole chain of causes, since wrappers rename them (httpx-aiohttp reports a
    refused connection as ``ConnectTimeout``)."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(chain) < 8 and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    # A wrapper's own type can mislead (httpx-aiohttp turns a server disconnect into a
    # ConnectTimeout): when aiohttp's error is in the chain, only its types count.
    origin = [e for e in chain if type(e).__module__.startswith("aiohttp")] or chain
    names = {klass.__name__ for error in origin for klass in type(error).__mro__}
    for error in chain:
        if isinstance(error, socket.gaierror) or type(error).__name__ == "ClientConnectorDNSError":
            return "DNS lookup failed"
        if isinstance(error, ConnectionRefusedError) or (
            isinstance(error, OSError) and error.errno == errno.ECONNREFUSED
        ):
            return "connection refused"
    if "ClientConnectorError" in names:  # aiohttp's: the cause is the real story
        os_error = next((e for e in chain[1:] if isinstance(e, OSError)), None)
        return f"could not connect ({os_error})" if os_error else "could not connect"
    if names & _CONNECT_TIMEOUTS:
        return "connect timed out"
    if names & _CONNECT_ERRORS:
        return f"could not connect ({exc})"
    return None


def _too_large(status: int, limit: int) -> ResponseTooLargeError:
    return ResponseTooLargeError(
        f"the response body exceeded max_response_bytes={limit:,} (after decompression); "
        "the attempt was abandoned",
        status=status,
    )


def _check_declared_length(status: int, headers: Mapping[str, str], limit: int) -> None:
    """Fail at once when an uncompressed body's Content-Length already says it is too large."""
    if headers.get("Content-Encoding"):
        return
    try:
        declared = int(headers.get("Content-Length") or -1)
    except ValueError:
        return
    if declared > limit:
        raise _too_large(status, limit)


#: Inflate at most this much per step, so one compressed network chunk cannot balloon in memory.
_INFLATE_STEP = 1 << 16


async def _inflate(raw: AsyncIterator[bytes], encoding: str) -> AsyncIterator[bytes]:
    """gzip / deflate bodies decoded in bounded steps (httpx's own decoder inflates a whole
    network chunk at once: ~1,000x its size for a gzip bomb). A bad stream raises zlib.error."""
    zlib_or_raw_deflate = encoding == "deflate"
    decoder = zlib.decompressobj(zlib.MAX_WBITS | (0 if zlib_or_raw_deflate else 16))
    first = True
    async for chunk in raw:
        data = chunk
        if first and zlib_or_raw_deflate and data:
            first = False
            try:  # "deflate" is zlib-wrapped by the RFC, raw in practice now and then
                decoder.copy().decompress(data[:64])
            except zlib.error:
                decoder = zlib.decompressobj(-zlib.MAX_WBITS)
        while data:
            out = decoder.decompress(data, _INFLATE_STEP)
            if out:
                yield out
            data = decoder.unconsumed_tail
    tail = decoder.flush()
    if tail:
        yield tail


def _decoded_chunks(response: Any) -> AsyncIterator[bytes]:
    """An httpx response's body, decoded in bounded steps where we can (gzip, deflate)."""
    encoding = response.headers.get("Content-Encoding", "").strip().lower()
    if encoding in ("gzip", "x-gzip", "deflate"):
        return _inflate(response.aiter_raw(), "deflate" if encoding == "deflate" else "gzip")
    result: AsyncIterator[bytes] = response.aiter_bytes()
    return result


async def _read_capped(chunks: AsyncIterator[bytes], status: int, limit: int) -> bytes:
    """The whole body from decoded chunks, or ResponseTooLargeError past ``limit`` bytes."""
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise _too_large(status, limit)
        parts.append(chunk)
    return b"".join(parts)


async def _capped_lines(
    chunks: AsyncIterator[bytes], status: int, limit: int
) -> AsyncIterator[str]:
    """Text lines (without line endings) from decoded chunks, at most ``limit`` bytes in all.

    A line that is not UTF-8 raises ValueError (a malformed stream)."""
    size = 0
    pending = bytearray()
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise _too_large(status, limit)
        pending += chunk
        if b"\n" not in chunk:
            continue
        *complete, rest = pending.split(b"\n")
        pending = bytearray(rest)
        for raw in complete:
            yield raw.rstrip(b"\r").decode("utf-8")
    if pending:
        yield pending.rstrip(b"\r").decode("utf-8")


class AiohttpBackend:
    """aiohttp used directly."""

    def __init__(
        self,
        headers: dict[str, str],
        concurrency: int,
        timeout: float,
        connect_timeout: float,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        self.headers = headers
        self.concurrency = concurrency
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.max_response_bytes = max_response_bytes
        self._session: Any = None
        self.log_filter: RedactingFilter | None = None
        self.on_connect: OnConnect | None = None

    async def open(self) -> None:
        import aiohttp

        if self.log_filter is not None:
            self.log_filter.install()

        self._mapping = ErrorMapping((TimeoutError,), (aiohttp.ClientError,))
        connector = _timed_connector()(limit=self.concurrency, limit_per_host=self.concurrency)
        connector.on_connect = self.on_connect
        # The per-attempt deadline (connect to last byte, every read within it) is the
        # transport's; only connecting has its own bound. No per-read timeout: it would re-arm a
        # timer on every chunk received, and can never fire before the attempt's deadline.
        self._session = aiohttp.ClientSession(
            connector=connector,
            headers=self.headers,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout),
            auto_decompress=True,
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self.log_filter is not None:
            self.log_filter.remove()

    async def post(self, url: str, payload: bytes) -> HttpReply:
        mapping = self._mapping
        try:
            async with self._session.post(url, data=payload, allow_redirects=False) as response:
                limit = self.max_response_bytes
                status, headers = response.status, response.headers
                length = headers.get("Content-Length")
                if (
                    length is not None
                    and length.isascii()
                    and length.isdigit()
                    and "Content-Encoding" not in headers
                    and "Transfer-Encoding" not in headers
                ):
                    # A plain body of a declared size: the parser reads exactly that many bytes,
                    # so it is read in one call once the size is known to fit.
                    if int(length) > limit:
                        raise _too_large(status, limit)
                    return HttpReply(status, headers, await response.read())
                _check_declared_length(status, headers, limit)
                body = await _read_capped(response.content.iter_any(), status, limit)
                return HttpReply(status, headers, body)
        except mapping.timeouts as exc:
            raise mapping.mapped("request", exc) from None
        except mapping.errors as exc:
            raise mapping.mapped("request", exc) from None

    @asynccontextmanager
    async def stream(self, url: str, payload: bytes) -> AsyncIterator[StreamReply]:
        mapping = self._mapping
        with mapping("request"):
            async with self._session.post(url, data=payload, allow_redirects=False) as response:
                limit = self.max_response_bytes
                status = response.status

                async def lines() -> AsyncIterator[str]:
                    with mapping("stream"):
                        async for line in _capped_lines(response.content.iter_any(), status, limit):
                            yield line

                async def read() -> bytes:
                    return await _read_capped(response.content.iter_any(), status, limit)

                yield StreamReply(status, response.headers, lines(), read)


class HttpxBackend:
    """An httpx.AsyncClient, natively pooled or over the httpx-aiohttp transport."""

    def __init__(
        self,
        headers: dict[str, str],
        concurrency: int,
        timeout: float,
        connect_timeout: float,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        *,
        aiohttp: bool,
    ) -> None:
        self.headers = headers
        self.concurrency = concurrency
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.max_response_bytes = max_response_bytes
        self.aiohttp = aiohttp
        self._client: Any = None
        self.log_filter: RedactingFilter | None = None
        self.on_connect: OnConnect | None = None
        self._traced = 0  # requests sent with a trace of their connection

    async def open(self) -> None:
        import httpx

        if self.log_filter is not None:
            self.log_filter.install()

        limits = httpx.Limits(
            max_connections=self.concurrency, max_keepalive_connections=self.concurrency
        )
        transport = None
        errors: tuple[type[BaseException], ...] = (
            httpx.TransportError,
            httpx.DecodingError,
            zlib.error,  # from _inflate
        )
        if self.aiohttp:
            import aiohttp
            from httpx_aiohttp import AiohttpTransport

            transport = AiohttpTransport(limits=limits)
            errors = (*errors, aiohttp.ClientError)
        self._client = httpx.AsyncClient(
            headers=self.headers,
            timeout=httpx.Timeout(self.timeout, connect=self.connect_timeout),
            limits=limits,
            transport=transport,
        )
        self._mapping = ErrorMapping((httpx.TimeoutException, asyncio.TimeoutError), errors)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        if self.log_filter is not None:
            self.log_filter.remove()

    @staticmethod
    def _tracer(on_connect: OnConnect) -> Callable[[str, Any], Any]:
        """httpcore's trace of one request: the round trip of TCP's handshake, if it opened a
        connection."""
        started = 0.0

        async def trace(event: str, info: Any) -> None:
            nonlocal started
            if event == "connection.connect_tcp.started":
                started = time.monotonic()
            elif event == "connection.connect_tcp.complete":
                on_connect(time.monotonic() - started)

        return trace

    async def post(self, url: str, payload: bytes) -> HttpReply:
        # Streamed, so the body is counted as it is decoded and never held past the cap.
        async with self.stream(url, payload) as reply:
            body = await reply.read()
            return HttpReply(reply.status, reply.headers, body)

    @asynccontextmanager
    async def stream(self, url: str, payload: bytes) -> AsyncIterator[StreamReply]:
        mapping = self._mapping
        with mapping("request"):
            extensions = None
            if self.on_connect is not None and not self.aiohttp and self._traced < TRACED_REQUESTS:
                self._traced += 1
                extensions = {"trace": self._tracer(self.on_connect)}
            async with self._client.stream(
                "POST", url, content=payload, extensions=extensions
            ) as response:
                limit = self.max_response_bytes
                status = response.status_code
                _check_declared_length(status, response.headers, limit)

                async def lines() -> AsyncIterator[str]:
                    with mapping("stream"):
                        async for line in _capped_lines(_decoded_chunks(response), status, limit):
                            yield line

                async def read() -> bytes:
                    return await _read_capped(_decoded_chunks(response), status, limit)

                yield StreamReply(status, response.headers, lines(), read)
