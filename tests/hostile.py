"""A tiny HTTP/1.1 server on loopback that answers whatever a test scripts, byte for byte.

Not the simulator: it knows nothing of Kimi. Each request is answered by ``server.respond(index,
request)``, which returns a list of ``(delay_seconds, bytes)`` pieces written in order (a delay
sleeps before its piece, so trickles, stalls and cut connections are easy to script); the
connection is closed after the last piece. ``http(...)`` builds the usual response shapes,
including wrong Content-Length, chunked and gzip bodies.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import gzip
import json
import re
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Pieces = list[tuple[float, bytes]]

_BASE64_RUN = re.compile(r"[A-Za-z0-9+/_-]{11,}")
_UNICODE_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})")


def encoded_echoes(key: str) -> list[str]:
    """Every encoded way a server may echo ``key``: upper-cased, spaced out (spaces, zero-width
    characters, JSON newline escapes), JSON ``\\u``-escaped, percent-encoded, and base64 of the
    key and of ``Bearer <key>`` (standard and URL-safe, after a prefix of 0-2 bytes)."""
    raw = key.encode()
    echoes = [
        key.upper(),
        " ".join(key),
        "\u200b".join(key),
        "\\n".join(key),
        "".join(f"\\u{ord(c):04x}" for c in key),
        "".join(f"%{ord(c):02X}" for c in key),
        "".join(f"%{ord(c):02x}" for c in key),
        f"Authorization: Bearer%20{''.join(f'%{ord(c):02X}' for c in key)}",
    ]
    for data in (raw, b"Bearer " + raw, b"x Bearer " + raw, b"xy:" + raw):
        echoes.append(base64.b64encode(data).decode())
        echoes.append(base64.urlsafe_b64encode(data).decode().rstrip("="))
    return echoes


#: One token of an echo read character by character: a JSON ``\\uXXXX`` escape (``\\U`` once
#: upper-cased), a percent-encoded byte, a JSON newline / return / tab escape (a gap, in either
#: case), or a lone backslash (a gap: the escape of a text escaped twice).
_ECHO_TOKEN = re.compile(r"\\[uU]([0-9a-fA-F]{4})|%([0-9a-fA-F]{2})|\\[nrtNRT]|\\")
_INVISIBLE = frozenset("\u00ad\u200b\u200c\u200d\u200e\u200f\u2060\ufeff")


def _echo_readings(text: str, size: int) -> list[str]:
    """From every offset of ``text``, the first ``size`` characters an echo starting there spells
    when each character is read its own way (as is, ``\\u``-escaped or percent-encoded, in any
    case, with gaps between): the library's decoding model, written plainly, one offset at a
    time, so an escape-like run just before an echo (``%0`` + ``000...``) cannot hide it."""
    readings = []
    for start in range(len(text)):
        chars: list[str] = []
        at = start
        while at < len(text) and len(chars) < size:
            match = _ECHO_TOKEN.match(text, at)
            if match:
                code = match.group(1) or match.group(2)
                char, at = (chr(int(code, 16)) if code else ""), match.end()
            else:
                char, at = text[at], at + 1
            if char and not char.isspace() and char not in _INVISIBLE:
                chars.append(char.lower())
        readings.append("".join(chars))
    return readings


def key_leaks(text: str, key: str) -> list[str]:
    """Every run of 8 characters of ``key`` that ``text`` reveals, read as is and decoded in every
    way ``encoded_echoes`` encodes (independent of the library's own redaction code): whole-text
    decodings, and an echo starting at any offset that mixes encodings character by character;
    in base64, every run of 12 or the whole key (base64 is redacted from about 11 characters of
    the key)."""
    views = [text, text.lower(), "".join(text.split()).lower()]
    visible = "".join(char for char in text if char not in _INVISIBLE)
    views.append("".join(visible.split()).lower())  # an echo with no escape, from any offset
    if "%" in text or "\\" in text:
        views += _echo_readings(text, 8)
    unescaped = _UNICODE_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), text)
    views += [unescaped.lower(), "".join(unescaped.replace("\\n", "").split()).lower()]
    views.append(urllib.parse.unquote(text).lower())
    both = urllib.parse.unquote(unescaped).replace("\\n", "").replace("\u200b", "")
    views.append("".join(both.split()).lower())
    views.append("".join(text.replace("\u200b", "").split()).lower())
    decoded = []
    for run in _BASE64_RUN.findall(text):
        for offset in range(4):
            piece = run[offset:]
            piece = piece[:-1] if len(piece) % 4 == 1 else piece + "=" * (-len(piece) % 4)
            for decode in (base64.b64decode, base64.urlsafe_b64decode):
                try:
                    decoded.append(decode(piece).decode("latin-1").lower())
                except (binascii.Error, ValueError):
                    pass
    lowered = key.lower()
    runs = {lowered[i : i + 8] for i in range(len(key) - 7)}
    size = min(12, len(key))
    long_runs = {lowered[i : i + size] for i in range(len(key) - size + 1)}
    found = {run for run in runs for view in views if run in view}
    found |= {run for run in long_runs for view in decoded if run in view}
    return sorted(found)


@dataclass
class Request:
    """One request as received: the request line, headers (lower-cased names) and body."""

    index: int
    line: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def http(
    status: int = 200,
    body: bytes | str | Any = b"",
    *,
    headers: dict[str, str] | None = None,
    gzip_body: bool = False,
    chunked: bool = False,
    content_length: int | None = None,
    reason: str = "X",
) -> Pieces:
    """One response as pieces. ``body`` that is not bytes/str is sent as JSON. ``content_length``
    overrides the true length (a lie); ``chunked`` uses chunked transfer encoding."""
    if not isinstance(body, bytes | str):
        body = json.dumps(body)
    data = body.encode() if isinstance(body, str) else body
    hdrs = {"Content-Type": "application/json", "Connection": "close"}
    if gzip_body:
        data = gzip.compress(data)
        hdrs["Content-Encoding"] = "gzip"
    hdrs.update(headers or {})
    if chunked:
        hdrs["Transfer-Encoding"] = "chunked"
        data = (b"%x\r\n" % len(data) + data + b"\r\n" if data else b"") + b"0\r\n\r\n"
    else:
        hdrs["Content-Length"] = str(len(data) if content_length is None else content_length)
    head = f"HTTP/1.1 {status} {reason}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items())
    return [(0.0, head.encode("latin-1") + b"\r\n" + data)]


def completion(content: str, usage: Any = None, **extra: Any) -> dict[str, Any]:
    """A chat-completion body with one choice."""
    if usage is None:
        usage = {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}
    body = {
        "id": "cmpl-1",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": usage,
    }
    body.update(extra)
    return body


def sse(events: list[Any], *, done: bool = True) -> bytes:
    """An SSE body from events (dicts are JSON-encoded)."""
    lines = [f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in events]
    if done:
        lines.append("data: [DONE]\n\n")
    return "".join(lines).encode()


def stream_completion(content: str, usage: Any = None) -> bytes:
    """A well-formed SSE stream answering ``content``."""
    if usage is None:
        usage = {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}
    chunk = {"id": "c1", "object": "chat.completion.chunk", "choices": []}
    return sse(
        [
            {
                **chunk,
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": content}}],
            },
            {
                **chunk,
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop", "usage": usage}],
                "usage": usage,
            },
        ]
    )


@dataclass
class HostileServer:
    """Serves on 127.0.0.1 in a background thread. Use as a context manager."""

    respond: Callable[[Request], Pieces] = field(default=lambda r: http(500, b"unset"))
    requests: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> HostileServer:
        self._thread.start()
        self._ready.wait(5)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(5)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())
        self._loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0, limit=2**24)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._stop.wait()
            server.close()
            for task in [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]:
                task.cancel()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            headers = {}
            for line in lines[1:]:
                if ":" in line:
                    name, value = line.split(":", 1)
                    headers[name.strip().lower()] = value.strip()
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            request = Request(len(self.requests), lines[0], headers, body)
            self.requests.append(request)
            for delay, piece in self.respond(request):
                if delay:
                    await asyncio.sleep(delay)
                writer.write(piece)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            writer.close()
