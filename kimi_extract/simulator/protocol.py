"""The simulator's public records (``Reply``, ``SimRequest``, ``SimExchange``) and its error bodies.

Error bodies follow the reference's ``ErrorResponse``
(``docs/reference/kimi-chat-completions-reference.md``): ``{"error": {"message", "type", "code"}}``
with ``code`` null, and the error types of ``docs/reference/KIMI-NOTES.md`` ("Errors and limits").
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

#: The key clients must send unless ``Simulator(api_key=...)`` says otherwise.
DEFAULT_API_KEY = "sk-sim-0123456789abcdef0123456789abcdef"
#: The organization named in rate-limit and quota messages.
ORG = "org-sim"

#: Error type used when a ``Reply`` gives a status but no ``error_type``
#: (``docs/reference/KIMI-NOTES.md``, the error table).
DEFAULT_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_authentication_error",
    403: "permission_denied_error",
    404: "resource_not_found_error",
    429: "rate_limit_reached_error",
}


#: Reused encoders: ``json.dumps`` with any option builds a new encoder on every call.
to_json = json.JSONEncoder(ensure_ascii=False).encode
to_compact_json = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def default_error_type(status: int) -> str:
    """The Kimi error type a bare HTTP status stands for (5xx and unknown -> server_error)."""
    return DEFAULT_ERROR_TYPES.get(status, "server_error")


def error_body(error_type: str, message: str) -> dict[str, Any]:
    """The reference's ``ErrorResponse`` body."""
    return {"error": {"message": message, "type": error_type, "code": None}}


class SimError(Exception):
    """A request the simulator answers with an error status (not billed, not cached)."""

    def __init__(
        self,
        status: int,
        error_type: str,
        message: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        """The JSON error body."""
        return error_body(self.error_type, self.message)


def invalid_request(message: str) -> SimError:
    """400 ``invalid_request_error`` with Kimi's "Invalid request: ..." message prefix."""
    return SimError(400, "invalid_request_error", f"Invalid request: {message}")


@dataclass
class Reply:
    """What a responder may return to script one answer; every field is optional.

    ``None`` fields keep the simulator's own behaviour: ``content`` None -> the generated answer (a
    dict or list is sent as JSON text), ``reasoning_content`` None -> generated reasoning,
    ``finish_reason`` None -> "stop" (or "tool_calls" when ``tool_calls`` is given, or "length" when
    the answer does not fit ``max_completion_tokens``), ``usage`` None -> computed usage. ``status``
    other than 200 sends the reference's error body with ``error_type`` (default: the type for that
    status) and ``error_message``. ``headers`` are added to the response (e.g. ``{"Retry-After":
    "2"}``); ``delay`` waits that many seconds before answering; ``fault``: "reset" closes the
    connection without a response, "cut" sends part of the response then drops the connection,
    "hang" never answers.
    """

    status: int = 200
    content: str | dict[str, Any] | list[Any] | None = None
    reasoning_content: str | None = None
    finish_reason: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    usage: dict[str, Any] | None = None
    error_type: str | None = None
    error_message: str | None = None
    headers: dict[str, str] | None = None
    delay: float = 0.0
    fault: str | None = None


@dataclass(frozen=True)
class SimRequest:
    """What a responder sees of one valid chat-completions request.

    ``index`` is the 0-based number of the HTTP request (its ``SimExchange.index``); ``user_text``
    the text of the last user message (text parts joined by newlines); ``schema`` the
    ``response_format.json_schema.schema`` or None; ``headers`` exclude Authorization.
    """

    body: dict[str, Any]
    index: int
    model: str
    messages: list[dict[str, Any]]
    user_text: str
    schema: dict[str, Any] | None
    headers: dict[str, str]


@dataclass
class SimExchange:
    """One HTTP request the simulator received, and what it answered.

    Appended to ``Simulator.history`` on arrival and completed when the response ends: until then
    ``status`` and ``t_end`` are None. Times are ``time.monotonic()`` seconds. For streams
    ``response`` is the assembled final message in the non-streaming shape. ``fault`` names the
    injected fault(s), comma-separated: "500", "reset", "cut", "hang", "slow_first_byte",
    "invalid_json", "truncate", "responder_error".
    """

    index: int
    t_start: float
    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any] | None = None
    t_end: float | None = None
    status: int | None = None
    error_type: str | None = None
    response: dict[str, Any] | None = None
    usage: dict[str, Any] | None = None
    stream: bool = False
    fault: str | None = None


def user_text(messages: list[Any]) -> str:
    """Text of the last user message; text parts joined by newlines."""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return message_text(message.get("content"))
    return ""


def message_text(content: Any) -> str:
    """The text of a message's content (a string, or the text parts of a list, joined by \\n)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"]
            for part in content
            if isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
        )
    return ""
