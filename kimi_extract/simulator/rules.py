"""Kimi's rules beyond the OpenAPI schema: models, MFJS, per-model parameters, tool history.

Sources: ``docs/reference/kimi-chat-completions-reference.md`` (``model``, ``reasoning_effort``,
``prompt_cache_options``, ``temperature``, ``top_p``), ``docs/reference/KIMI-NOTES.md``
(reasoning_content in tool-call history, tool names) and MoonshotAI/walle (the schema dialect:
``response_format`` schemas and tool ``parameters`` are checked by ``mfjs`` at the simulator's
``schema_level``, ``strict`` by default as on Moonshot's server). Each check raises a ``SimError``
carrying Kimi's error type and message form.
"""

from __future__ import annotations

import json
from typing import Any

from ..kimi import EFFORT_ALIASES, MODELS, TOOL_NAME, WEB_SEARCH_FUNCTION
from ..schema import dialect as mfjs
from .protocol import SimError, invalid_request

# Kimi's rules (tool names, the built-in search function) are in the profile, kimi.py.
WEB_SEARCH = WEB_SEARCH_FUNCTION


def check_model(body: Any) -> None:
    """404 ``resource_not_found_error`` for a model name the API does not serve."""
    if not isinstance(body, dict):
        return
    model = body.get("model")
    if isinstance(model, str) and model not in MODELS:
        raise SimError(
            404,
            "resource_not_found_error",
            f"Not found the model {model} or Permission denied",
        )


def normalized_effort(body: dict[str, Any]) -> str:
    """The effective reasoning effort: the reference's aliases applied, default ``max``."""
    return EFFORT_ALIASES.get(body.get("reasoning_effort") or "max", "max")


def mfjs_message(name: str, problem: str) -> str:
    """Kimi's message for a schema outside its dialect (kimi-cli issues 1595, 2061)."""
    return f"{name} is not a valid moonshot flavored json schema, details: <{problem}>"


_MFJS_MEMO: dict[tuple[str, str], str | None] = {}


def _first_problem(schema: Any, schema_text: str | None, level: mfjs.Level) -> str | None:
    """mfjs.first_problem, memoized by level and the schema's JSON text (rows share one schema)."""
    if schema_text is None:
        return mfjs.first_problem(schema, level)
    key = (level, schema_text)
    if key not in _MFJS_MEMO:
        if len(_MFJS_MEMO) >= 1024:
            _MFJS_MEMO.clear()
        _MFJS_MEMO[key] = mfjs.first_problem(schema, level)
    return _MFJS_MEMO[key]


def check_response_format(
    body: dict[str, Any], schema_text: str | None = None, level: mfjs.Level = "strict"
) -> None:
    """400 for a ``json_schema`` response_format without a schema or outside MFJS at ``level``.

    ``schema_text`` is the schema's compact JSON when the caller has it (used as a memo key).
    """
    response_format = body.get("response_format")
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        return
    json_schema = response_format.get("json_schema")
    if not isinstance(json_schema, dict):
        raise invalid_request(
            "response_format.json_schema is required when response_format.type is json_schema"
        )
    problem = _first_problem(json_schema.get("schema"), schema_text, level)
    if problem is not None:
        raise invalid_request(mfjs_message("response_format.json_schema.schema", problem))


def check_model_rules(body: dict[str, Any]) -> None:
    """kimi-k3 takes only reasoning_effort max, no prompt_cache_options, temperature 1, top_p 0.95.

    The K3.1 series ignore temperature/top_p (the reference).
    """
    if body.get("model") != "kimi-k3":
        return
    effort = body.get("reasoning_effort")
    if effort is not None and EFFORT_ALIASES.get(effort) != "max":
        raise invalid_request(
            f"invalid reasoning_effort: {effort!r} is not supported for this model, only max is "
            "allowed"
        )
    if "prompt_cache_options" in body:
        raise invalid_request("prompt_cache_options is not supported for this model")
    temperature = body.get("temperature")
    if temperature is not None and temperature != 1:
        raise invalid_request("invalid temperature: only 1 is allowed for this model")
    top_p = body.get("top_p")
    if top_p is not None and top_p != 0.95:
        raise invalid_request("invalid top_p: only 0.95 is allowed for this model")


def check_tools(body: dict[str, Any], level: mfjs.Level = "strict") -> None:
    """400 for a bad tool name, duplicate names, or ``parameters`` outside MFJS at ``level``."""
    seen: set[str] = set()
    for index, tool in enumerate(body.get("tools") or ()):
        if tool.get("type") != "function":
            continue
        function = tool["function"]
        name = function["name"]
        if not TOOL_NAME.match(name):
            raise invalid_request(
                f"tools[{index}].function.name {name!r} must match {TOOL_NAME.pattern}"
            )
        if name in seen:
            raise invalid_request(f"tools[{index}].function.name {name!r} is duplicated")
        seen.add(name)
        if "parameters" in function:
            problem = mfjs.first_problem(function["parameters"], level)
            if problem is not None:
                raise invalid_request(mfjs_message("tools.function.parameters", problem))
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        wanted = choice["function"]["name"]
        if wanted not in seen:
            raise invalid_request(f"tool_choice names function {wanted!r}, which is not in tools")
    elif choice == "required" and not body.get("tools"):
        raise invalid_request("tool_choice is required but no tools are given")


def check_history(messages: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Check tool-call history; return the earlier tool calls by id.

    An assistant message with ``tool_calls`` must carry ``reasoning_content`` (an empty string
    passes; bytedance/deer-flow 3043), and every tool message must answer an earlier tool call. A
    ``$web_search`` tool message must carry the call's arguments (the reference: sent back
    unchanged).
    """
    calls: dict[str, dict[str, Any]] = {}
    for index, message in enumerate(messages):
        role = message["role"]
        if role == "assistant" and message.get("tool_calls"):
            if not isinstance(message.get("reasoning_content"), str):
                raise invalid_request(
                    "thinking is enabled but reasoning_content is missing in assistant tool call "
                    f"message at index {index}"
                )
            for call in message["tool_calls"]:
                calls[call["id"]] = call
        elif role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                raise invalid_request(f"tool_call_id is missing in tool message at index {index}")
            call = calls.get(call_id)
            if call is None:
                raise invalid_request(
                    f"tool_call_id {call_id} is not found: the tool message at index {index} "
                    "answers no tool call of an earlier assistant message"
                )
            if (call.get("function") or {}).get("name") == WEB_SEARCH:
                search_result_tokens(message, index)
    return calls


def search_result_tokens(message: dict[str, Any], index: int) -> int:
    """Tokens of the search results a ``$web_search`` tool message stands for (billed as input).

    The content must be the call's arguments unchanged: ``{"search_result": {...}, "usage":
    {"total_tokens": N}}``.
    """
    content = message.get("content")
    try:
        data = json.loads(content) if isinstance(content, str) else None
    except ValueError:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("search_result"), dict):
        raise invalid_request(
            f"the $web_search tool message at index {index} must carry the tool call's "
            "arguments unchanged as its content"
        )
    total = (data.get("usage") or {}).get("total_tokens", 0)
    return total if isinstance(total, int) and total > 0 else 0


def check_request(
    body: dict[str, Any], schema_text: str | None = None, schema_level: mfjs.Level = "strict"
) -> dict[str, dict[str, Any]]:
    """Every Kimi rule after schema validation; returns the earlier tool calls by id.

    ``schema_level``: the ``mfjs`` level for response_format schemas and tool parameters.
    """
    check_response_format(body, schema_text, schema_level)
    check_model_rules(body)
    check_tools(body, schema_level)
    return check_history(body["messages"])
