"""Sending an answer: a JSON body, or an SSE stream of ``chat.completion.chunk`` objects.

Stream layout (OpenAI chunk format, ``docs/reference/KIMI-NOTES.md``, "Streaming"): a first delta
with ``role``, then ``reasoning_content`` deltas, then ``content`` deltas (a few chunks each), then
any ``tool_calls`` (each with its ``index``), then a final chunk with ``finish_reason``, then
``data: [DONE]``. Usage placement, by ``stream_usage``:

- ``"choices"`` (default, as Kimi does): the final chunk carries ``usage`` both at top level and in
  ``choices[0].usage``, whatever ``stream_options`` says;
- ``"separate"`` (as OpenAI does): the final chunk has no usage; an extra chunk with
  ``choices: []`` and top-level ``usage`` follows, only when ``stream_options.include_usage`` is
  true.

With ``tokens_per_s`` set, chunks are spread over ``tokens / tokens_per_s`` seconds; otherwise the
whole stream goes out in one write. A ``cut`` fault sends about half the chunks and drops the
connection (no final chunk, no ``[DONE]``); on a non-streaming answer it sends half the body.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from .. import tokens
from .completion import chunk, stream_deltas
from .protocol import to_json

if TYPE_CHECKING:
    from .config import SimAnswer, SimulatorConfig


def _event(data: dict[str, Any]) -> bytes:
    return b"data: " + to_json(data).encode("utf-8") + b"\n\n"


def _drop(request: web.Request) -> None:
    if request.transport is not None:
        request.transport.close()


async def send_json(
    request: web.Request,
    config: SimulatorConfig,
    answer: SimAnswer,
    on_complete: Callable[[], None],
) -> tuple[web.StreamResponse, bool]:
    """The non-streaming response; (response, whether it is complete).

    ``on_complete`` runs before the last bytes go out, so a client that has the whole answer
    always finds it recorded.
    """
    data = to_json(answer.body).encode("utf-8")
    headers = {"Content-Type": "application/json", **answer.headers}
    if "cut" in answer.faults:
        response = web.StreamResponse(status=200, headers=headers)
        response.content_length = len(data)
        try:
            await response.prepare(request)
            await response.write(data[: len(data) // 2])
        except ConnectionError:
            pass
        _drop(request)
        return response, False
    on_complete()
    return web.Response(body=data, headers=headers), True


def stream_events(config: SimulatorConfig, answer: SimAnswer) -> tuple[list[bytes], list[bytes]]:
    """The SSE events of the stream: (deltas, tail). The tail is the final chunk, any usage
    chunk, and ``[DONE]``."""
    body = answer.body
    response_id, created, model = body["id"], body["created"], body["model"]
    outcome = answer.outcome
    events = [_event(chunk(response_id, created, model, d)) for d in stream_deltas(outcome)]
    final = chunk(response_id, created, model, {}, outcome.finish_reason)
    tail: list[bytes] = []
    if config.stream_usage == "separate":
        tail.append(_event(final))
        if (answer.request_body.get("stream_options") or {}).get("include_usage") is True:
            usage_chunk = chunk(response_id, created, model, None)
            usage_chunk["usage"] = answer.usage
            tail.append(_event(usage_chunk))
    else:
        final["usage"] = answer.usage
        final["choices"][0]["usage"] = answer.usage
        tail.append(_event(final))
    tail.append(b"data: [DONE]\n\n")
    return events, tail


async def send_stream(
    request: web.Request,
    config: SimulatorConfig,
    answer: SimAnswer,
    on_complete: Callable[[], None],
) -> tuple[web.StreamResponse, bool]:
    """The SSE response; (response, whether it was sent completely).

    ``on_complete`` runs before the final chunk goes out, so a client that has seen the
    finish_reason always finds the exchange recorded.
    """
    headers = {
        "Content-Type": "text/event-stream; charset=utf-8",
        "Cache-Control": "no-cache",
        **answer.headers,
    }
    response = web.StreamResponse(status=200, headers=headers)
    events, tail = stream_events(config, answer)
    cut = "cut" in answer.faults
    if cut:
        events = events[: max(1, len(events) // 2)]
    try:
        await response.prepare(request)
        if config.tokens_per_s:
            for event in events:
                await response.write(event)
                await asyncio.sleep(_event_tokens(event) / config.tokens_per_s)
        elif events:
            await response.write(b"".join(events))
        if cut:
            _drop(request)
            return response, False
        on_complete()
        await response.write(b"".join(tail))
        await response.write_eof()
    except ConnectionError:
        return response, False
    return response, True


def _event_tokens(event: bytes) -> int:
    """Approximate tokens of the text an event carries (for the tokens_per_s pacing)."""
    try:
        data = json.loads(event[len(b"data: ") :])
        delta = data["choices"][0]["delta"]
    except (ValueError, KeyError, IndexError, TypeError):
        return 0
    text = (delta.get("reasoning_content") or "") + (delta.get("content") or "")
    for call in delta.get("tool_calls") or ():
        text += (call.get("function") or {}).get("arguments", "")
    return tokens.count_text_tokens(text)
