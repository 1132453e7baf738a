"""HTTP backends for the transport: one POST, returning status, headers and body (or SSE lines).

Three interchangeable backends, chosen by ``Extractor(http_backend=...)``:

- ``"aiohttp"`` (default): an ``aiohttp.ClientSession`` used directly. Cheapest in CPU per
  request at high concurrency (figures in benchmarks/RESULTS.md).
- ``"httpx-aiohttp"``: an ``httpx.AsyncClient`` over the ``httpx-aiohttp`` transport.
- ``"httpx"``: a plain ``httpx.AsyncClient`` (its pool costs the most CPU with many connections).

Each maps its own failures to ``APIConnectionError`` / ``APITimeoutError``; status handling and
retries live in ``transport``. Every backend's pool is sized to the run's concurrency.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from .exceptions import APIConnectionError, APITimeoutError

BACKENDS = ("aiohttp", "httpx-aiohttp", "httpx")


@dataclass
class Reply:
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
    read: Any  # async () -> bytes, for error bodies


class Backend(Protocol):
    """What the transport needs from an HTTP client."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def post(self, url: str, payload: bytes) -> Reply: ...

    def stream(self, url: str, payload: bytes) -> Any: ...


def make_backend(
    name: str, *, headers: dict[str, str], concurrency: int, timeout: float, connect_timeout: float
) -> Backend:
    """The backend called ``name`` (one of ``BACKENDS``)."""
    if name == "aiohttp":
        return AiohttpBackend(headers, concurrency, timeout, connect_timeout)
    if name in ("httpx", "httpx-aiohttp"):
        return HttpxBackend(headers, concurrency, timeout, connect_timeout, aiohttp=name != "httpx")
    raise ValueError(f"unknown http backend {name!r}; use one of {BACKENDS}")


class AiohttpBackend:
    """aiohttp used directly."""

    def __init__(
        self, headers: dict[str, str], concurrency: int, timeout: float, connect_timeout: float
    ) -> None:
        self.headers = headers
        self.concurrency = concurrency
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._session: Any = None

    async def open(self) -> None:
        import aiohttp

        self._errors = (aiohttp.ClientError,)
        connector = aiohttp.TCPConnector(limit=self.concurrency, limit_per_host=self.concurrency)
        self._session = aiohttp.ClientSession(
            connector=connector,
            headers=self.headers,
            timeout=aiohttp.ClientTimeout(
                total=None, sock_connect=self.connect_timeout, sock_read=self.timeout
            ),
            auto_decompress=True,
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def post(self, url: str, payload: bytes) -> Reply:
        try:
            async with self._session.post(url, data=payload) as response:
                body = await response.read()
                return Reply(response.status, response.headers, body)
        except TimeoutError as exc:
            raise APITimeoutError(f"request timed out ({type(exc).__name__})") from None
        except self._errors as exc:
            raise APIConnectionError(f"connection failed: {type(exc).__name__}: {exc}") from None

    @asynccontextmanager
    async def stream(self, url: str, payload: bytes) -> AsyncIterator[StreamReply]:
        try:
            async with self._session.post(url, data=payload) as response:

                async def lines() -> AsyncIterator[str]:
                    try:
                        async for raw in response.content:
                            yield raw.decode("utf-8").rstrip("\r\n")
                    except TimeoutError as exc:
                        raise APITimeoutError(f"stream timed out ({type(exc).__name__})") from None
                    except self._errors as exc:
                        raise APIConnectionError(
                            f"stream broken: {type(exc).__name__}: {exc}"
                        ) from None

                yield StreamReply(response.status, response.headers, lines(), response.read)
        except TimeoutError as exc:
            raise APITimeoutError(f"request timed out ({type(exc).__name__})") from None
        except self._errors as exc:
            raise APIConnectionError(f"connection failed: {type(exc).__name__}: {exc}") from None


class HttpxBackend:
    """An httpx.AsyncClient, natively pooled or over the httpx-aiohttp transport."""

    def __init__(
        self,
        headers: dict[str, str],
        concurrency: int,
        timeout: float,
        connect_timeout: float,
        *,
        aiohttp: bool,
    ) -> None:
        self.headers = headers
        self.concurrency = concurrency
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.aiohttp = aiohttp
        self._client: Any = None

    async def open(self) -> None:
        import httpx

        limits = httpx.Limits(
            max_connections=self.concurrency, max_keepalive_connections=self.concurrency
        )
        transport = None
        if self.aiohttp:
            from httpx_aiohttp import AiohttpTransport

            transport = AiohttpTransport(limits=limits)
        self._client = httpx.AsyncClient(
            headers=self.headers,
            timeout=httpx.Timeout(self.timeout, connect=self.connect_timeout),
            limits=limits,
            transport=transport,
        )
        self._timeouts = (httpx.TimeoutException, asyncio.TimeoutError)
        self._errors = (httpx.TransportError,)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def post(self, url: str, payload: bytes) -> Reply:
        try:
            response = await self._client.post(url, content=payload)
            return Reply(response.status_code, response.headers, response.content)
        except self._timeouts as exc:
            raise APITimeoutError(f"request timed out ({type(exc).__name__})") from None
        except self._errors as exc:
            raise APIConnectionError(f"connection failed: {type(exc).__name__}: {exc}") from None

    @asynccontextmanager
    async def stream(self, url: str, payload: bytes) -> AsyncIterator[StreamReply]:
        try:
            async with self._client.stream("POST", url, content=payload) as response:

                async def lines() -> AsyncIterator[str]:
                    try:
                        async for line in response.aiter_lines():
                            yield line
                    except self._timeouts as exc:
                        raise APITimeoutError(f"stream timed out ({type(exc).__name__})") from None
                    except self._errors as exc:
                        raise APIConnectionError(
                            f"stream broken: {type(exc).__name__}: {exc}"
                        ) from None

                yield StreamReply(response.status_code, response.headers, lines(), response.aread)
        except self._timeouts as exc:
            raise APITimeoutError(f"request timed out ({type(exc).__name__})") from None
        except self._errors as exc:
            raise APIConnectionError(f"connection failed: {type(exc).__name__}: {exc}") from None
