"""Prompt token accounting with ``kimi_extract.tokens``, and the prompt as a prefix-cache stream.

Prompt tokens of a request, in prefix order:

1. ``tools`` as compact JSON text (when present);
2. the ``response_format.json_schema.schema`` as compact JSON text (when present);
3. each message: ``tokens.MESSAGE_OVERHEAD`` plus its text (string content or text parts), its
   ``reasoning_content``, its ``tool_calls`` as compact JSON; each image part
   ``tokens.image_tokens(width, height)`` with the size read from the PNG/JPEG/GIF/WEBP header of
   a base64 data URL (unknown for a remote URL); each video part ``tokens.video_tokens(decoded
   bytes)``; a ``$web_search`` tool message also the search result tokens its content names.

The cache stream has exactly one unit per prompt token, in the same order: text units are
``tokens.split_tokens`` pieces, role markers stand for the message overhead, and an image, video or
search result is that many copies of a unit derived from a hash of its URL / search id. So cached
and written tokens are always whole parts of ``prompt_tokens``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import tokens
from .protocol import to_compact_json
from .rules import WEB_SEARCH, search_result_tokens

_MEMO_LIMIT = 4096
_MEMO_CHARS = 20_000_000
_MEMO_MIN_CHARS = 48


def _memo(function: Callable[[str], Any]) -> Callable[[str], Any]:
    """Memoize a function of long strings (shared prompt prefixes repeat across requests)."""
    store: dict[str, Any] = {}
    size = [0]

    def wrapper(text: str) -> Any:
        if len(text) < _MEMO_MIN_CHARS:
            return function(text)
        hit = store.get(text)
        if hit is None:
            if len(store) >= _MEMO_LIMIT or size[0] > _MEMO_CHARS:
                store.clear()
                size[0] = 0
            hit = store[text] = function(text)
            size[0] += len(text)
        return hit

    return wrapper


_CHUNK_TOKENS: dict[str, int] = {}
_CHUNK_LIMIT = 200_000


def count_tokens(text: str) -> int:
    """``tokens.count_text_tokens(text)``, summed over whitespace-separated chunks with a memo.

    Exact, not an estimate: under the tokens rules whitespace is free and no token spans it, so
    a text's count is the sum of its chunks' counts; chunks (words, JSON keys, enum values)
    repeat across requests, so the memo makes counting cheap.
    """
    memo = _CHUNK_TOKENS
    total = 0
    for chunk in text.split():
        count = memo.get(chunk)
        if count is None:
            if len(memo) >= _CHUNK_LIMIT:
                memo.clear()
            count = memo[chunk] = tokens.count_text_tokens(chunk)
        total += count
    return total


count_text = _memo(count_tokens)
split_text = _memo(tokens.split_tokens)


def compact_json(value: Any) -> str:
    """The compact JSON text of a value (how schemas and tools are billed)."""
    return to_compact_json(value)


#: One piece of the prompt: (tokens, text, False) for text, or (tokens, key, True) for an opaque
#: run of ``tokens`` identical cache units (role markers; an image or video by its URL; search
#: results by their tool message).
Part = tuple[int, str, bool]


@dataclass
class Prompt:
    """The billed prompt of one request."""

    tokens: int
    parts: list[Part] = field(repr=False)
    search_tokens: int = 0
    schema_text: str | None = None

    def units(self) -> list[str]:
        """One cache unit per prompt token, in prefix order."""
        out: list[str] = []
        for count, text, opaque in self.parts:
            if opaque:  # a long key (a data URL) is hashed only here, when the cache needs it
                unit = text if len(text) <= 64 else "\x00" + _digest(text)
                out.extend([unit] * count)
            else:
                out.extend(split_text(text))
        return out


def _text(parts: list[Part], text: str) -> int:
    if not text:
        return 0
    count: int = count_text(text)
    parts.append((count, text, False))
    return count


def _opaque(parts: list[Part], count: int, key: str) -> int:
    parts.append((count, "\x00" + key, True))
    return count


def schema_text(body: dict[str, Any]) -> str | None:
    """The compact JSON of a json_schema response_format's schema (billed as prompt), or None."""
    response_format = body.get("response_format") or {}
    if response_format.get("type") != "json_schema":
        return None
    schema = (response_format.get("json_schema") or {}).get("schema")
    return None if schema is None else compact_json(schema)


def build_prompt(body: dict[str, Any], schema: str | None = None) -> Prompt:
    """Count the prompt tokens of a validated request body (``schema``: its ``schema_text``)."""
    parts: list[Part] = []
    total = 0
    if body.get("tools"):
        total += _text(parts, compact_json(body["tools"]))
    if schema is None:
        schema = schema_text(body)
    if schema is not None:
        total += _text(parts, schema)
    search_total = 0
    tool_names: dict[str, str] = {}
    for index, message in enumerate(body["messages"]):
        role = message["role"]
        total += _opaque(parts, tokens.MESSAGE_OVERHEAD - 1, "<|im_" + role + "|>")
        content = message.get("content")
        if isinstance(content, str):
            total += _text(parts, content)
        elif isinstance(content, list):
            for part in content:
                total += _content_part(parts, part)
        reasoning = message.get("reasoning_content")
        if isinstance(reasoning, str):
            total += _text(parts, reasoning)
        for call in message.get("tool_calls") or ():
            tool_names[call["id"]] = (call.get("function") or {}).get("name", "")
        if message.get("tool_calls"):
            total += _text(parts, compact_json(message["tool_calls"]))
        if role == "tool" and tool_names.get(message.get("tool_call_id", "")) == WEB_SEARCH:
            found = search_result_tokens(message, index)
            if found:
                search_total += found
                total += _opaque(parts, found, "search:" + str(content))
        total += _opaque(parts, 1, "<|im_end|>")
    return Prompt(total, parts, search_total, schema)


def _content_part(parts: list[Part], part: dict[str, Any]) -> int:
    kind = part.get("type")
    if kind == "text":
        return _text(parts, part.get("text", ""))
    if kind == "image_url":
        url = _url(part.get("image_url"))
        width, height = image_size(url)
        return _opaque(parts, tokens.image_tokens(width, height), "image:" + url)
    if kind == "video_url":
        url = _url(part.get("video_url"))
        return _opaque(parts, tokens.video_tokens(data_url_size(url)), "video:" + url)
    return 0


def _url(value: Any) -> str:
    if isinstance(value, dict):
        value = value.get("url", "")
    return value if isinstance(value, str) else ""


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()


def _data_payload(url: str, limit: int | None = None) -> bytes | None:
    """The decoded bytes of a base64 data URL (the first ``limit`` bytes at least), or None."""
    if not url.startswith("data:"):
        return None
    header, _, data = url.partition(",")
    if not header.endswith(";base64"):
        return None
    if limit is not None:
        data = data[: (limit // 3 + 1) * 4]
    try:
        return base64.b64decode(data + "=" * (-len(data) % 4))
    except (binascii.Error, ValueError):
        return None


def data_url_size(url: str) -> int | None:
    """Decoded byte size of a base64 data URL, without decoding it; None for a remote URL."""
    if not url.startswith("data:"):
        return None
    header, _, data = url.partition(",")
    if not header.endswith(";base64"):
        return len(data)
    data = data.rstrip("=")
    return len(data) * 3 // 4


def image_size(url: str) -> tuple[int | None, int | None]:
    """(width, height) from a base64 data URL's PNG/GIF/WEBP/JPEG header, else (None, None)."""
    head = _data_payload(url, 64)
    if not head:
        return None, None
    if head.startswith(b"\x89PNG\r\n\x1a\n") and len(head) >= 24:
        width, height = struct.unpack(">II", head[16:24])
        return width, height
    if head[:6] in (b"GIF87a", b"GIF89a") and len(head) >= 10:
        width, height = struct.unpack("<HH", head[6:10])
        return width, height
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP" and len(head) >= 30:
        return _webp_size(head)
    if head[:2] == b"\xff\xd8":
        full = _data_payload(url)
        return _jpeg_size(full) if full else (None, None)
    return None, None


def _webp_size(head: bytes) -> tuple[int | None, int | None]:
    chunk = head[12:16]
    if chunk == b"VP8 ":
        width, height = struct.unpack("<HH", head[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L":
        bits = int.from_bytes(head[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X":
        width = int.from_bytes(head[24:27], "little") + 1
        height = int.from_bytes(head[27:30], "little") + 1
        return width, height
    return None, None


def _jpeg_size(data: bytes) -> tuple[int | None, int | None]:
    """Scan JPEG markers for a start-of-frame segment."""
    offset = 2
    while offset + 9 < len(data):
        if data[offset] != 0xFF:
            offset += 1
            continue
        marker = data[offset + 1]
        if marker == 0xFF:
            offset += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            offset += 2
            continue
        (length,) = struct.unpack(">H", data[offset + 2 : offset + 4])
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[offset + 5 : offset + 9])
            return width, height
        offset += 2 + length
    return None, None
