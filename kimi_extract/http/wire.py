"""The wire format of chat completions: request bodies to bytes, responses and SSE streams to an
``Answer``. Pure functions, no I/O; the transport calls them around each HTTP attempt.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..records import Usage


@dataclass(frozen=True)
class Answer:
    """One model answer: the assistant message fields, finish reason and usage."""

    content: str | None
    reasoning_content: str | None
    finish_reason: str | None
    usage: Usage
    tool_calls: list[dict[str, Any]] | None = None
    request_id: str | None = None


_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
#: A str as JSON, as ``_dumps`` writes it (``ensure_ascii=False``): the C encoder it uses.
_json_string = json.encoder.encode_basestring
#: Values compared by equality (and type) when checking a body against the cached template
#: (not floats: 0.0 == -0.0 but their JSON differs).
_SCALARS = (str, int, bool)
#: Stands for the row's messages in the template's values.
_MESSAGES = object()


def _same(value: Any, cached: Any) -> bool:
    """Whether ``value`` encodes exactly as ``cached``: the same object, an equal scalar of the
    same type, or a list of such (``tools`` is a fresh list of the same objects per body)."""
    if value is cached:
        return True
    kind = type(value)
    if kind is not type(cached):
        return False
    if kind in _SCALARS:
        return bool(value == cached)
    if kind is list:
        return len(value) == len(cached) and all(map(_same, value, cached))
    return False


def _message_json(message: Any) -> str:
    """One message as ``_dumps`` writes it; a plain ``{"role": str, "content": str}`` message
    (every text row) is spliced from two string encodes instead of a whole encoder pass."""
    if type(message) is dict and len(message) == 2:
        (k1, role), (k2, content) = message.items()
        if k1 == "role" and k2 == "content" and type(role) is str and type(content) is str:
            return f'{{"role":{_json_string(role)},"content":{_json_string(content)}}}'
    return _dumps(message)


class BodyEncoder:
    """Serializes request bodies, reusing the JSON of the parts every row shares.

    The static messages and the response format are encoded once. A body whose first messages
    are those very objects is assembled from cached bytes: everything before the row's own
    messages (model, the static messages) and after them (response format, budget, options) is
    kept as the template of the last such body, reused while the body's other fields are the
    same objects or equal scalars of the same type (so a changed budget or option rebuilds it);
    only the row's messages are encoded. Anything else falls back to a full encode. Output is
    compact JSON either way, byte-identical to ``encode_body``, so the bytes of the shared prefix
    are identical across rows.
    """

    def __init__(
        self, static_messages: Sequence[dict[str, Any]], response_format: dict[str, Any] | None
    ) -> None:
        self.static = tuple(static_messages)
        self.static_json = ",".join(_dumps(m) for m in self.static)
        self.response_format = response_format
        self.response_format_json = _dumps(response_format) if response_format else ""
        #: The template: the body's keys, its other values (None for messages), head and tail.
        self._keys: tuple[str, ...] = ()
        self._values: list[Any] = []
        self._head = self._tail = b""

    def __call__(self, body: dict[str, Any]) -> bytes:
        messages = body.get("messages")
        static = self.static
        count = len(static)
        if type(messages) is not list or len(messages) < count:
            return _dumps(body).encode()
        for a, b in zip(messages, static, strict=False):
            if a is not b:
                return _dumps(body).encode()
        if not self._matches(body):
            self._template(body)
        rest = ",".join([_message_json(m) for m in messages[count:]])
        if rest and self.static_json:
            rest = "," + rest
        return b"".join((self._head, rest.encode(), self._tail))

    def _matches(self, body: dict[str, Any]) -> bool:
        if tuple(body) != self._keys:
            return False
        for value, cached in zip(body.values(), self._values, strict=True):
            if value is not cached and cached is not _MESSAGES and not _same(value, cached):
                return False
        return True

    def _template(self, body: dict[str, Any]) -> None:
        """Encode every part of ``body`` but the row's messages, as its head and tail."""
        parts: list[str] = []
        head = ""
        for key, value in body.items():
            if key == "messages":
                parts.append('"messages":[' + self.static_json)
                head, parts = ",".join(parts), []
            elif key == "response_format" and value is self.response_format:
                parts.append(f'"response_format":{self.response_format_json}')
            else:
                parts.append(f"{_dumps(key)}:{_dumps(value)}")
        tail = "]" + "".join("," + p for p in parts) + "}"
        self._head = ("{" + head).encode()
        self._tail = tail.encode()
        self._keys = tuple(body)
        # The values it was made from (kept, not copied: a body's parts are not mutated once
        # built); the row's messages are compared apart.
        self._values = [_MESSAGES if k == "messages" else v for k, v in body.items()]


def encode_body(body: dict[str, Any]) -> bytes:
    """Compact JSON bytes of a body (no cached parts)."""
    return _dumps(body).encode()


#: Most JSON values a response body (or one stream event) may hold outside its strings, counted
#: as its ``{``, ``[`` and ``,`` (each value but the first in a container follows a comma, each
#: container opens with a bracket). A chat completion holds a few dozen; the bound keeps what one
#: body can become in Python objects small (about 100 bytes per value: ~10 MB) whatever its size.
MAX_RESPONSE_VALUES = 100_000
_OPENERS = b"{[,"
#: A JSON string (the unrolled form: no backtracking per character).
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


def json_values(data: bytes | str, limit: int) -> int:
    """How many JSON values ``data`` holds outside its strings (its ``{``, ``[`` and ``,``), read
    before anything is parsed; exact only past ``limit``.

    Data no longer than ``limit`` cannot hold more and is not read (0: nearly every body).
    Otherwise, below ``limit`` the raw count is returned (what strings hold is counted too, so it
    can only be higher): one pass in C. Past it, the strings are cut out first (one regex pass)
    and the rest counted.
    """
    if len(data) <= limit:  # no more values than characters: nothing to count
        return 0
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    count = len(raw) - len(raw.translate(None, _OPENERS))  # one pass in C
    if count <= limit:
        return count
    bare = _JSON_STRING.sub(b"", raw)
    return len(bare) - len(bare.translate(None, _OPENERS))


class TooManyValues(ValueError):
    """A body or event holding more than ``MAX_RESPONSE_VALUES`` values (refused unparsed)."""


def check_values(data: bytes | str, limit: int = MAX_RESPONSE_VALUES) -> None:
    """Raise ``TooManyValues`` when ``data`` holds more than ``limit`` JSON values."""
    if json_values(data, limit) > limit:
        raise TooManyValues(
            f"the response holds more than {limit:,} JSON values outside its strings; "
            "refused before parsing"
        )


class ErrorObject(Exception):
    """A body or stream event that is an API error object (``{"error": {...}}``), not an answer.

    ``error`` is the object as sent; the transport maps it like the matching HTTP error.
    """

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__("the response is an error object")
        self.error = error


def _error_object(data: dict[str, Any]) -> None:
    error = data.get("error")
    if isinstance(error, dict) and "choices" not in data:
        raise ErrorObject(error)
    if error is not None and not isinstance(error, dict) and "choices" not in data:
        raise ErrorObject({"message": str(error)[:200]})


def _optional_str(value: Any, name: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise ValueError(f"{name} is not a string ({type(value).__name__})")


def _tool_calls(value: Any) -> list[dict[str, Any]] | None:
    """Complete tool calls from a message: a list of objects whose ``function`` holds strings."""
    if not value:
        return None
    if not isinstance(value, list):
        raise ValueError("message.tool_calls is not a list")
    for call in value:
        if not isinstance(call, dict):
            raise ValueError("a tool call is not an object")
        _optional_str(call.get("id"), "tool_calls[].id")
        function = call.get("function")
        if function is not None:
            if not isinstance(function, dict):
                raise ValueError("tool_calls[].function is not an object")
            _optional_str(function.get("name"), "tool_calls[].function.name")
            _optional_str(function.get("arguments"), "tool_calls[].function.arguments")
    return value


def parse_completion(data: Any, request_id: str | None = None) -> Answer:
    """Read a non-streaming response body.

    Raises ``ErrorObject`` for a body that is an API error object, and ValueError for anything
    else that is not a chat completion (no choices, a choice or message that is not an object,
    fields of the wrong type, missing or bad usage: see ``Usage.from_api``).
    """
    if not isinstance(data, dict):
        raise ValueError("response body is not a JSON object")
    _error_object(data)
    choices = data.get("choices")
    if not choices or not isinstance(choices, list):
        raise ValueError("response has no choices")
    choice = choices[0]
    if not isinstance(choice, dict):
        raise ValueError("choices[0] is not an object")
    message = choice.get("message")
    if message is None:
        message = {}
    if not isinstance(message, dict):
        raise ValueError("choices[0].message is not an object")
    usage = data.get("usage") or choice.get("usage")
    response_id = data.get("id")
    return Answer(
        content=_optional_str(message.get("content"), "message.content"),
        reasoning_content=_optional_str(
            message.get("reasoning_content"), "message.reasoning_content"
        ),
        finish_reason=_optional_str(choice.get("finish_reason"), "finish_reason"),
        usage=Usage.from_api(usage),
        tool_calls=_tool_calls(message.get("tool_calls")),
        request_id=request_id or (response_id if isinstance(response_id, str) else None),
    )


class StreamAssembler:
    """Builds an ``Answer`` from SSE ``chat.completion.chunk`` events.

    Reads ``reasoning_content`` and ``content`` deltas, tool-call fragments (merged by ``index``),
    the ``finish_reason``, and usage wherever it comes: top-level ``usage`` (also on a final chunk
    whose ``choices`` is empty) or ``choices[0].usage`` (both occur in the wild:
    docs/reference/KIMI-NOTES.md, "Streaming"). An event that is an error object raises
    ``ErrorObject``; any other malformed event, ValueError.
    """

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.tool_calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.response_id: str | None = None
        self.done = False

    def feed_line(self, line: str) -> None:
        """Feed one SSE line (``data: ...``); other lines (comments, events) are ignored."""
        if not line.startswith("data:"):
            return
        data = line[5:].strip()
        if data == "[DONE]":
            self.done = True
            return
        if data:
            check_values(data)
            try:
                chunk = json.loads(data)
            except RecursionError:
                raise ValueError("stream event nested too deeply") from None
            self.feed(chunk)

    def feed(self, chunk: Any) -> None:
        """Feed one parsed chunk."""
        if not isinstance(chunk, dict):
            raise ValueError("stream event is not a JSON object")
        _error_object(chunk)
        chunk_id = chunk.get("id")
        if self.response_id is None and isinstance(chunk_id, str):
            self.response_id = chunk_id
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        choices = chunk.get("choices") or ()
        if not isinstance(choices, list | tuple):
            raise ValueError("stream event choices is not a list")
        for choice in choices:
            if not isinstance(choice, dict):
                raise ValueError("a stream choice is not an object")
            if choice.get("usage"):
                self.usage = choice["usage"]
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                raise ValueError("a stream delta is not an object")
            reasoning = _optional_str(delta.get("reasoning_content"), "delta.reasoning_content")
            if reasoning:
                self.reasoning.append(reasoning)
            content = _optional_str(delta.get("content"), "delta.content")
            if content:
                self.content.append(content)
            fragments = delta.get("tool_calls") or ()
            if not isinstance(fragments, list | tuple):
                raise ValueError("delta.tool_calls is not a list")
            for fragment in fragments:
                self._merge_tool_call(fragment)
            finish_reason = _optional_str(choice.get("finish_reason"), "finish_reason")
            if finish_reason:
                self.finish_reason = finish_reason

    def _merge_tool_call(self, fragment: Any) -> None:
        if not isinstance(fragment, dict):
            raise ValueError("a tool-call fragment is not an object")
        index = fragment.get("index", len(self.tool_calls))
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < 1024:
            raise ValueError("a tool-call fragment has a bad index")
        call = self.tool_calls.setdefault(
            index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
        )
        if fragment.get("id"):
            call["id"] = _optional_str(fragment["id"], "tool_calls[].id")
        if fragment.get("type"):
            call["type"] = _optional_str(fragment["type"], "tool_calls[].type")
        function = fragment.get("function") or {}
        if not isinstance(function, dict):
            raise ValueError("tool_calls[].function is not an object")
        name = _optional_str(function.get("name"), "tool_calls[].function.name")
        if name:
            call["function"]["name"] += name
        arguments = _optional_str(function.get("arguments"), "tool_calls[].function.arguments")
        if arguments:
            call["function"]["arguments"] += arguments

    def answer(self, request_id: str | None = None) -> Answer:
        """The assembled answer; raises ValueError if the stream did not finish or its usage is
        missing or bad."""
        if not self.done or self.finish_reason is None:
            raise ValueError("the stream ended before its final chunk")
        return Answer(
            content="".join(self.content),
            reasoning_content="".join(self.reasoning),
            finish_reason=self.finish_reason,
            usage=Usage.from_api(self.usage),
            tool_calls=[self.tool_calls[i] for i in sorted(self.tool_calls)] or None,
            request_id=request_id or self.response_id,
        )
