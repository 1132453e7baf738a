"""One model answer for a validated request: content, reasoning, tool calls, usage, chunks.

Pure functions (no I/O). ``compose`` decides what the model does:

- a ``Reply`` from the responder overrides any part it sets;
- ``tool_choice`` naming a function -> a call of that function, on every turn;
- ``{"type": "web_search"}`` in tools and a last message from the user -> a ``$web_search``
  ``builtin_function`` call (``docs/reference/kimi-chat-completions-reference.md``;
  ``docs/reference/KIMI-NOTES.md``, "Web search"), ``finish_reason`` "tool_calls";
- function tools and ``tool_choice`` "auto" (or absent) -> a call when the last message is the
  user's (the first function whose name the user text contains, with ``_`` read as a space too;
  else the first function); after a tool result (or an assistant message) the model answers with
  content. ``tool_choice`` "required" -> a call on every turn (same pick); "none" -> no call.
  Arguments are generated from the function's ``parameters`` schema;
- otherwise content: JSON from the json_schema; for ``json_object``, JSON following the JSON
  Schema the prompt states (``prompted.prompt_guide``: the last object, fenced or not, that reads
  as a schema, system messages before user messages), else shaped like the last JSON object the
  prompt shows as an example, else with the keys the prompt names in words, else a small object
  ``{"answer": ...}``; for text, a short sentence, unless the prompt asks for JSON and states its
  shape: then that JSON, in a ```json fence if the prompt asks for one.
  With ``answers_mode="extractive"`` the plain strings of JSON answers are spans of the user text
  (``extractive``). With a ``quality`` model, a json_schema answer to a user text that holds an
  answer key comes from the key, with mistakes (``quality``).

Completion tokens = reasoning + content + tool calls (name and arguments), counted with
``kimi_extract.tokens``. When they exceed the output budget (``max_completion_tokens`` or legacy
``max_tokens``, default 131072, capped by the context left), reasoning is cut first, then the
content, and ``finish_reason`` is "length".
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from .. import tokens
from ..kimi import BUILTIN_FUNCTION, CONTEXT_WINDOW, SERVER_DEFAULT_MAX_COMPLETION_TOKENS
from . import answers, prompted, values
from .extractive import PERTURBATIONS, QUOTES, Source
from .prompt import count_tokens
from .protocol import Reply, invalid_request, to_compact_json, to_json, user_text
from .quality import ANSWER_KEY, QualityModel, answer_from_key
from .recall import KeyIndex
from .rules import WEB_SEARCH, normalized_effort

DEFAULT_MAX_COMPLETION_TOKENS = SERVER_DEFAULT_MAX_COMPLETION_TOKENS  # the reference's (kimi.py)


@dataclass
class Outcome:
    """What the model answers, before usage is attached."""

    content: str
    reasoning_content: str
    finish_reason: str
    tool_calls: list[dict[str, Any]] | None = None
    json_content: bool = False
    #: Tokens of ``reasoning_content`` when already known (generated reasoning), else None.
    reasoning_tokens: int | None = None
    _counts: tuple[int, int] | None = field(default=None, init=False, repr=False)

    def completion_tokens(self) -> tuple[int, int]:
        """(completion tokens, of which reasoning). Computed once: do not mutate an Outcome."""
        if self._counts is None:
            reasoning = self.reasoning_tokens
            if reasoning is None:
                reasoning = self.reasoning_tokens = count_tokens(self.reasoning_content)
            total = reasoning + count_tokens(self.content)
            for call in self.tool_calls or ():
                function = call.get("function") or {}
                total += count_tokens(str(function.get("name", "")))
                total += count_tokens(str(function.get("arguments", "")))
            self._counts = (total, reasoning)
        return self._counts


def output_budget(body: dict[str, Any], prompt_tokens: int) -> int:
    """max_completion_tokens (or max_tokens; default 131072), capped by the context left."""
    budget = body.get("max_completion_tokens") or body.get("max_tokens")
    budget = DEFAULT_MAX_COMPLETION_TOKENS if budget is None else int(budget)
    return max(0, min(budget, CONTEXT_WINDOW - prompt_tokens))


def _schema_fields(schema: Any) -> list[str]:
    if isinstance(schema, dict) and isinstance(schema.get("properties"), dict):
        return list(schema["properties"])
    return []


def _content(
    body: dict[str, Any],
    rng: random.Random,
    words: list[str],
    schema_key: str | None,
    keyed: Callable[[Any], Any] | None = None,
) -> tuple[str, bool]:
    """(content, whether it is JSON) for the request's response_format; ``keyed`` turns a
    json_schema answer into the one the row's answer key gives (``quality``).

    Raises ``values.AnswerTooLarge`` for an answer larger than the simulator draws.
    """
    response_format = body.get("response_format") or {}
    kind = response_format.get("type", "text")
    if kind == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema", {})
        key = schema_key if schema_key is not None else to_compact_json(schema)
        value = values.json_value(rng, schema, words, key)
        if keyed is not None:
            value = keyed(value)
        if isinstance(words, Source) and QUOTES in key:  # a client's grounding="quotes"
            value = words.fill_quotes(rng, value)
        return _json_text(value), True
    if kind == "json_object":
        return _json_text(_json_object_value(body["messages"], rng, words)), True
    messages = body["messages"]
    if prompted.asks_for_json(messages) and prompted.prompt_guide(messages) is not None:
        # no response_format, but the prompt asks for JSON (instructor's MD_JSON)
        text = _json_text(_json_object_value(messages, rng, words))
        if prompted.wants_fence(messages):
            return f"```json\n{text}\n```", False
        return text, True
    return answers.text_answer(rng, words), False


def _json_text(value: Any) -> str:
    try:
        return to_json(value)
    except RecursionError:  # an answer nested deeper than the C encoder goes
        return values.dump_json(value)


def check_answerable(body: dict[str, Any], schema_key: str | None = None) -> None:
    """400 when the ``json_schema`` response_format or a function's ``parameters`` has no
    valid value at all (``values.problem_of``): no answer could follow it, so the request is
    refused up front, unbilled, in walle's words for where and why."""
    response_format = body.get("response_format") or {}
    if response_format.get("type") == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema")
        if isinstance(schema, dict):
            key = schema_key if schema_key is not None else to_compact_json(schema)
            problem = values.problem_of(schema, key)
            if problem is not None:
                raise invalid_request(
                    f"response_format.json_schema.schema has no valid instance: <{problem}>"
                )
    for index, tool in enumerate(body.get("tools") or ()):
        parameters = (tool.get("function") or {}).get("parameters")
        if tool.get("type") == "function" and isinstance(parameters, dict):
            problem = values.problem_of(parameters, to_compact_json(parameters))
            if problem is not None:
                raise invalid_request(
                    f"tools[{index}].function.parameters has no valid instance: <{problem}>"
                )


def _json_object_value(messages: list[Any], rng: random.Random, words: list[str]) -> Any:
    """A JSON object for json_object mode, following the prompt's schema or example."""
    guide = prompted.prompt_guide(messages)
    if guide is None:
        return {"answer": answers.text_answer(rng, words)}
    kind, found, key = guide
    schema = values.schema_of_example(found) if kind == "example" else found
    if values.problem_of(schema, kind + ":" + key) is not None:  # nothing could follow it
        return {"answer": answers.text_answer(rng, words)}
    value = values.json_value(rng, schema, words, kind + ":" + key)
    if isinstance(words, Source) and QUOTES in key:  # a client's grounding="quotes"
        value = words.fill_quotes(rng, value)
    return value if isinstance(value, dict) else {"result": value}


def _wanted_function(body: dict[str, Any], text: str) -> dict[str, Any] | None:
    """The function the model calls under the tool_choice policy (module docstring), or None."""
    functions = [t["function"] for t in body.get("tools") or () if t.get("type") == "function"]
    choice = body.get("tool_choice") or "auto"
    if not functions or choice == "none":
        return None
    if isinstance(choice, dict):
        name = choice["function"]["name"]
        return next((f for f in functions if f["name"] == name), None)
    if choice != "required" and body["messages"][-1]["role"] != "user":
        return None
    lowered = text.lower()
    for function in functions:
        name = function["name"].lower()
        if name in lowered or name.replace("_", " ") in lowered:
            return function
    return functions[0]


def _wants_search(body: dict[str, Any]) -> bool:
    tools = body.get("tools") or ()
    choice = body.get("tool_choice") or "auto"
    return (
        any(t.get("type") == "web_search" for t in tools)
        and choice in ("auto", "required")
        and body["messages"][-1]["role"] == "user"
    )


def _call_id(rng: random.Random) -> str:
    return f"call_{rng.getrandbits(96):024x}"


def compose(
    body: dict[str, Any],
    seed: int,
    reply: Reply | None,
    schema_key: str | None = None,
    *,
    answers_mode: str = "generated",
    perturb: float = 0.0,
    perturb_kinds: tuple[str, ...] = PERTURBATIONS,
    quote_faults: float = 0.0,
    quality: QualityModel | None = None,
    keys: KeyIndex | None = None,
    sample: int = 0,
) -> Outcome:
    """The model's answer to ``body`` (uncut); ``reply`` fields override the generated ones.

    ``schema_key``: the response_format schema's compact JSON, when the caller has it.
    ``answers_mode`` "extractive": plain strings are spans of the user text, perturbed with
    probability ``perturb`` by one of ``perturb_kinds`` (``extractive``); the quotes of a quoted
    schema (``kx_quotes``) quote those spans, a share ``quote_faults`` of them bad.

    One ``random.Random(seed)`` draws the reasoning first, then the tool call or the content, so
    scripting the content does not change the reasoning. ``quality``: a json_schema answer to
    a user text holding an answer key comes from the key, with mistakes (``quality``); so does
    one whose conversation shows the located texts of a key in ``keys`` (``recall``; ``sample``:
    how many identical requests came before).
    """
    text = user_text(body["messages"])
    words = answers.words_of(text)
    if answers_mode == "extractive":
        words = Source(text, words, perturb, perturb_kinds, quote_faults)
    effort = normalized_effort(body)
    response_format = body.get("response_format") or {}
    schema = (response_format.get("json_schema") or {}).get("schema")
    tool_calls: list[dict[str, Any]] | None = None
    content = ""
    json_content = False
    rng = random.Random(seed)
    reasoning_tokens: int | None = None
    cut_short = False
    if reply is not None and reply.reasoning_content is not None:
        reasoning = reply.reasoning_content
    else:
        fields = _schema_fields(schema) or [
            t["function"]["name"] for t in body.get("tools") or () if t.get("type") == "function"
        ]
        reasoning, reasoning_tokens = answers.reasoning_text(rng, effort, words, fields)
    if reply is not None and reply.tool_calls is not None:
        tool_calls = reply.tool_calls
    elif (reply is None or reply.content is None) and body.get("tools"):
        if _wants_search(body):
            arguments = {
                "search_result": {"search_id": f"ws-{rng.getrandbits(64):016x}"},
                "usage": {"total_tokens": rng.randint(800, 4000)},
            }
            tool_calls = [
                {
                    "id": _call_id(rng),
                    "type": BUILTIN_FUNCTION,
                    "function": {"name": WEB_SEARCH, "arguments": json.dumps(arguments)},
                }
            ]
        elif (function := _wanted_function(body, text)) is not None:
            parameters = function.get("parameters", {})
            key = to_compact_json(parameters)
            try:
                arguments_value = values.json_value(rng, parameters, words, key)
            except values.AnswerTooLarge:  # the call's arguments never end: no call, cut
                return Outcome("", reasoning, "length", None, False, reasoning_tokens)
            tool_calls = [
                {
                    "id": _call_id(rng),
                    "type": "function",
                    "function": {
                        "name": function["name"],
                        "arguments": _json_text(arguments_value),
                    },
                }
            ]
    if tool_calls is None:
        if reply is not None and reply.content is not None:
            value = reply.content
            content = value if isinstance(value, str) else to_json(value)
            json_content = not isinstance(value, str)
        else:
            keyed = None
            if quality is not None and (ANSWER_KEY in text or keys):
                keyed = partial(
                    answer_from_key,
                    quality,
                    body,
                    text,
                    effort,
                    seed,
                    words=words,
                    keys=keys,
                    sample=sample,
                )
            try:
                content, json_content = _content(body, rng, words, schema_key, keyed)
            except values.AnswerTooLarge as cut:  # as a model stopped by its output budget
                content, json_content = cut.text, True
                cut_short = True
    finish = "tool_calls" if tool_calls else "length" if cut_short else "stop"
    if reply is not None and reply.finish_reason is not None:
        finish = reply.finish_reason
    return Outcome(content, reasoning, finish, tool_calls, json_content, reasoning_tokens)


def fit(outcome: Outcome, budget: int) -> Outcome:
    """Cut an answer to ``budget`` completion tokens: reasoning first, then content."""
    total, reasoning = outcome.completion_tokens()
    if total <= budget:
        return outcome
    if reasoning >= budget:
        return Outcome(
            "",
            answers.cut_to_tokens(outcome.reasoning_content, budget),
            "length",
            None,
            outcome.json_content,
        )
    if outcome.tool_calls:
        return Outcome(
            "", outcome.reasoning_content, "length", None, outcome.json_content, reasoning
        )
    content = answers.cut_to_tokens(outcome.content, budget - reasoning)
    return Outcome(
        content, outcome.reasoning_content, "length", None, outcome.json_content, reasoning
    )


def break_json(outcome: Outcome, rng: random.Random) -> Outcome:
    """The invalid-JSON fault: prose around the JSON, or JSON cut short (finish stays stop)."""
    if rng.random() < 0.5:
        content = "Sure! Here is the JSON you asked for:\n" + outcome.content
    else:
        content = outcome.content[: max(1, len(outcome.content) // 2)]
    return Outcome(
        content,
        outcome.reasoning_content,
        outcome.finish_reason,
        None,
        True,
        outcome.reasoning_tokens,
    )


def truncate(outcome: Outcome) -> Outcome:
    """The truncation fault: about half the content, finish_reason "length"."""
    half = tokens.count_text_tokens(outcome.content) // 2
    content = answers.cut_to_tokens(outcome.content, half)
    return Outcome(
        content,
        outcome.reasoning_content,
        "length",
        None,
        outcome.json_content,
        outcome.reasoning_tokens,
    )


def usage_dict(
    prompt_tokens: int, completion: int, reasoning: int, cached: int, cache_write: int
) -> dict[str, Any]:
    """Usage in the reference's ``ChatUsage`` shape."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": prompt_tokens + completion,
        "prompt_tokens_details": {"cached_tokens": cached, "cache_write_tokens": cache_write},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }


def message_of(outcome: Outcome) -> dict[str, Any]:
    """The assistant message of a response."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": outcome.content,
        "reasoning_content": outcome.reasoning_content,
    }
    if outcome.tool_calls:
        message["tool_calls"] = outcome.tool_calls
    return message


def completion_body(
    response_id: str, created: int, model: str, outcome: Outcome, usage: dict[str, Any]
) -> dict[str, Any]:
    """A non-streaming response in the reference's ``ChatCompletionResponse`` shape."""
    return {
        "id": response_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {"index": 0, "message": message_of(outcome), "finish_reason": outcome.finish_reason}
        ],
        "usage": usage,
    }


def _pieces(text: str, approx: int = 6) -> list[str]:
    """Split text into a few stream deltas (at most ``approx``, about 24+ characters each)."""
    if not text:
        return []
    count = max(1, min(approx, len(text) // 24))
    size = -(-len(text) // count)
    return [text[i : i + size] for i in range(0, len(text), size)]


def stream_deltas(outcome: Outcome) -> list[dict[str, Any]]:
    """The deltas of a stream, in order: role, reasoning pieces, content pieces, tool calls."""
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    deltas += [{"reasoning_content": piece} for piece in _pieces(outcome.reasoning_content)]
    deltas += [{"content": piece} for piece in _pieces(outcome.content)]
    if outcome.tool_calls:
        deltas.append(
            {"tool_calls": [{"index": i, **call} for i, call in enumerate(outcome.tool_calls)]}
        )
    return deltas


def chunk(
    response_id: str,
    created: int,
    model: str,
    delta: dict[str, Any] | None,
    finish_reason: str | None = None,
) -> dict[str, Any]:
    """One ``chat.completion.chunk``; ``delta`` None makes a usage-only chunk with no choices."""
    choices = (
        [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish_reason}]
    )
    return {
        "id": response_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": choices,
    }
