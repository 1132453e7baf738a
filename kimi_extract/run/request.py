"""Pure functions: build a row's chat-completions messages and body, and its store key. No I/O.

Message order puts everything shared by all rows first — the system instructions, then the
few-shot examples — and the row's own content last, so the request prefix is byte-identical across
rows and Kimi's prefix cache can serve it (caching needs a byte-identical prefix:
docs/reference/KIMI-NOTES.md, "Caching").
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from .. import tokens
from ..exceptions import ConfigurationError
from ..http.wire import Answer
from ..kimi import Mode
from ..records import Content
from ..schema.compiled import CompiledSchema

DEFAULT_INSTRUCTIONS = "Extract the requested information from the user's input."
#: Added to the system message with ``grounding="quotes"``.
QUOTES_INSTRUCTION = (
    "In each kx_quotes object, give for every field a short quote copied word for word from "
    "the input that supports its value (for a list, one quote per item)."
)


def system_prompt(instructions: str | None, compiled: CompiledSchema, mode: Mode) -> str:
    """The system message text. In json_object mode the schema travels here (no json_schema)."""
    text = instructions.strip() if instructions and instructions.strip() else DEFAULT_INSTRUCTIONS
    if compiled.quotes:  # grounding="quotes": the schema's kx_quotes objects
        text += f"\n\n{QUOTES_INSTRUCTION}"
    if mode == "json_object":
        schema = json.dumps(compiled.schema, ensure_ascii=False, indent=1)
        text += (
            "\n\nAnswer with one JSON object, and nothing else, that follows this JSON schema:\n"
            f"```json\n{schema}\n```"
        )
    return text


def example_messages(
    examples: Sequence[tuple[Content, BaseModel | dict[str, Any]]] | None, compiled: CompiledSchema
) -> list[dict[str, Any]]:
    """Few-shot pairs as user/assistant messages (answers in the compiled JSON shape)."""
    messages: list[dict[str, Any]] = []
    for index, pair in enumerate(examples or ()):
        try:
            example_input, example_output = pair
        except (TypeError, ValueError):
            raise ConfigurationError(f"examples[{index}] must be an (input, output) pair") from None
        if isinstance(example_output, dict):
            try:
                example_output = compiled.model.model_validate(example_output)
            except ValidationError as exc:
                raise ConfigurationError(
                    f"examples[{index}] output does not validate as {compiled.model.__name__}: "
                    f"{exc.errors(include_url=False)}"
                ) from None
        if not isinstance(example_output, compiled.model):
            raise ConfigurationError(
                f"examples[{index}] output must be a {compiled.model.__name__} or a dict, "
                f"got {type(example_output).__name__}"
            )
        if not isinstance(example_input, str | list):
            raise ConfigurationError(
                f"examples[{index}] input must be a str, got {type(example_input).__name__}"
            )
        dumped = compiled.encode(example_output.model_dump(mode="json", by_alias=True))
        messages.append({"role": "user", "content": example_input})
        messages.append({"role": "assistant", "content": json.dumps(dumped, ensure_ascii=False)})
    return messages


def response_format_for(compiled: CompiledSchema, mode: Mode) -> dict[str, Any]:
    """The ``response_format`` member for the mode."""
    if mode == "json_object":
        return {"type": "json_object"}
    return compiled.response_format()


def build_body(
    *,
    model: str,
    messages: list[dict[str, Any]],
    response_format: dict[str, Any],
    reasoning_effort: str | None,
    max_completion_tokens: int,
    prompt_cache_options: dict[str, Any] | None = None,
    tools: list[dict[str, Any]] | None = None,
    stream: bool = False,
) -> dict[str, Any]:
    """A chat-completions body. Never sends temperature/top_p (fixed by the model:
    docs/reference/kimi-chat-completions-reference.md, ``temperature``, ``top_p``)."""
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "response_format": response_format,
        "max_completion_tokens": max_completion_tokens,
    }
    if reasoning_effort is not None:
        body["reasoning_effort"] = reasoning_effort
    if prompt_cache_options:
        body["prompt_cache_options"] = prompt_cache_options
    if tools:
        body["tools"] = tools
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def tool_result_messages(answer: Answer) -> list[dict[str, Any]]:
    """For a ``$web_search`` tool-call answer: the tool messages that echo each call's arguments
    unchanged under the same ``tool_call_id`` (docs/reference/kimi-chat-completions-reference.md,
    its preface; docs/reference/KIMI-NOTES.md, "Web search")."""
    messages = []
    for call in answer.tool_calls or ():
        function = call.get("function") or {}
        messages.append(
            {
                "role": "tool",
                "tool_call_id": call.get("id", ""),
                "name": function.get("name", ""),
                "content": function.get("arguments", ""),
            }
        )
    return messages


def assistant_message(answer: Answer) -> dict[str, Any]:
    """The answer as a history message, with ``reasoning_content`` unchanged (the API requires it:
    docs/reference/kimi-chat-completions-reference.md, its preface; docs/reference/KIMI-NOTES.md,
    "Reasoning")."""
    message: dict[str, Any] = {"role": "assistant", "content": answer.content}
    message["reasoning_content"] = answer.reasoning_content or ""
    if answer.tool_calls:
        message["tool_calls"] = answer.tool_calls
    return message


def reask_message(errors: Sequence[str], kind: str) -> dict[str, Any]:
    """The user message that asks again after an invalid answer, listing every error."""
    what = "was not valid JSON" if kind == "json" else "did not match the required schema"
    lines = "\n".join(f"- {error}" for error in errors)
    return {
        "role": "user",
        "content": (
            f"Your previous answer {what}:\n{lines}\n"
            "Reply again with only the corrected JSON object."
        ),
    }


def estimate_prompt_tokens(messages: Sequence[dict[str, Any]], extra_text: str = "") -> int:
    """Approximate prompt tokens (kimi_extract.tokens rules) of messages plus schema/tool text."""
    total = tokens.count_text_tokens(extra_text) if extra_text else 0
    for message in messages:
        total += tokens.MESSAGE_OVERHEAD
        content = message.get("content")
        if isinstance(content, str):
            total += tokens.count_text_tokens(content)
        elif isinstance(content, list):
            for part in content:
                kind = part.get("type")
                if kind == "text":
                    total += tokens.count_text_tokens(part.get("text", ""))
                elif kind == "image_url":
                    total += tokens.image_tokens(None, None)
                elif kind == "video_url":
                    total += tokens.video_tokens(None)
        reasoning = message.get("reasoning_content")
        if reasoning:
            total += tokens.count_text_tokens(reasoning)
    return total


def request_key(
    *,
    model: str,
    messages: list[dict[str, Any]],
    response_format: dict[str, Any] | None,
    reasoning_effort: str | None,
    tools: list[dict[str, Any]] | tuple[dict[str, Any], ...] | None,
    mode: str,
) -> str:
    """The stable key of a row's request for the result store.

    A SHA-256 over the canonical JSON (sorted keys, no whitespace) of everything that determines
    the answer: model, messages, response format, reasoning effort, tools and mode. Never the API
    key, the base URL or the output budget; identical in every process and ``PYTHONHASHSEED``.
    The last message is the row's own; the rest is hashed once per run (see ``RequestKeys``).
    """
    keys = RequestKeys(
        model=model,
        static_messages=messages[:-1],
        response_format=response_format,
        reasoning_effort=reasoning_effort,
        tools=tools,
        mode=mode,
    )
    return keys.key(messages[-1])


#: A str as JSON without escaping non-ASCII: what ``json.dumps(..., ensure_ascii=False)`` uses.
_json_string = json.encoder.encode_basestring


def _canonical(value: Any) -> bytes:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode()


class RequestKeys:
    """``request_key`` for many rows sharing one prefix: the shared part is hashed once.

    key = SHA-256(version byte string, SHA-256 of the canonical shared material, canonical row
    message), so the per-row cost is one small JSON encode and one hash.
    """

    def __init__(
        self,
        *,
        model: str,
        static_messages: list[dict[str, Any]] | tuple[dict[str, Any], ...],
        response_format: dict[str, Any] | None,
        reasoning_effort: str | None,
        tools: list[dict[str, Any]] | tuple[dict[str, Any], ...] | None,
        mode: str,
    ) -> None:
        shared = {
            "model": model,
            "messages": list(static_messages),
            "response_format": response_format,
            "reasoning_effort": reasoning_effort,
            "tools": list(tools or ()),
            "mode": mode,
        }
        self._prefix = b"kx-key-v2\n" + hashlib.sha256(_canonical(shared)).digest()

    def key(self, user: dict[str, Any]) -> str:
        """The key of the request whose last message is ``user``."""
        content = user.get("content")
        if type(content) is str and len(user) == 2 and user.get("role") == "user":
            # The canonical JSON of a text row, written directly: the same bytes as
            # ``_canonical`` (sorted keys, no spaces, ensure_ascii=False), a fraction of the CPU.
            text = '{"content":' + _json_string(content) + ',"role":"user"}'
            return hashlib.sha256(self._prefix + text.encode()).hexdigest()
        return hashlib.sha256(self._prefix + _canonical(user)).hexdigest()
