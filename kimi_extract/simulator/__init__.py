"""A local Kimi chat-completions API for tests, benchmarks and demos (no network needed).

``Simulator`` serves the API reference's (``docs/reference/kimi-chat-completions-reference.md``)
``POST /v1/chat/completions`` on a real HTTP port: request validation against its OpenAPI schema
(``docs/reference/kimi-openapi.yaml``), Kimi's schema dialect and per-model rules, deterministic
schema-valid answers with reasoning, usage from ``kimi_extract.tokens``, an implicit prefix cache,
rate limits, seeded faults, SSE streaming, function tools and web search. Of the library it imports
only layer 0 (``kimi_extract.tokens``, ``kimi_extract.kimi``...) and ``kimi_extract.schema.dialect``
(tests/package/test_layers.py checks it).

What the model does follows two deterministic policies (details in ``completion``), so clients
such as the openai SDK, instructor and pydantic-ai work unmodified:

- tool calls: with function tools and ``tool_choice`` "auto" (or absent), a request whose last
  message is the user's gets a call (the function the user text names, else the first); after a
  tool result the model answers in text; "required" always calls, a named function is always
  called, "none" never; ``{"type": "web_search"}`` gets a ``$web_search`` call first;
- ``json_object`` mode: the answer follows the JSON Schema stated anywhere in the prompt (system
  messages first, fenced or not), else imitates the prompt's last JSON example object, else has
  the keys the prompt names in words, else is ``{"answer": ...}``; without ``response_format``,
  a prompt that asks for JSON and states its shape gets it (fenced when it asks for a fence).

Every answer validates against its schema (``values``); a schema with no valid value at all is
a 400 naming where, and the work per answer is bounded (a larger answer is cut, "length").

A malformed request is always a 4xx in the API's error shape (never a 500), and every request is
finished in the counters however it ends.

Modules: ``server`` (Simulator, serve), ``app`` (routes and the request pipeline), ``validation``
(the reference's OpenAPI request schema, from ``openapi.json``), ``rules`` (Kimi's rules beyond it),
``prompt`` (prompt tokens), ``cache`` (prefix cache), ``limits`` (limits and faults),
``completion`` / ``answers`` / ``prompted`` / ``values`` (what the model answers; ``values``
draws through ``constraints``, ``domains``, ``patterns``, ``plans``, ``ranks``, ``drawing``;
``quality``: answers from a row's answer key, with mistakes at per-model, per-effort rates),
``streaming`` (JSON and SSE sending), ``protocol`` (Reply, SimRequest, SimExchange, error
bodies), ``config`` (SimulatorConfig: every setting; SimAnswer: the record ``app`` hands
``streaming``), ``options`` (the settings groups: FaultOptions, LimitOptions, LatencyOptions,
AnswerOptions, CacheOptions), ``docs`` (docs/simulator-settings.md, generated from the settings'
docstrings).

Quick start::

    with Simulator() as sim:                      # a real HTTP server on a free port
        client = openai.OpenAI(base_url=sim.openai_base_url, api_key=sim.api_key)
        client.chat.completions.create(model="kimi-k3.1-pro", messages=[...])
        sim.responder = lambda request: Reply(status=429, error_type="engine_overloaded_error")
        ...                                       # every request now gets that 429
        print(sim.history[0].usage, sim.stats())
"""

from __future__ import annotations

from .config import SimulatorConfig
from .options import AnswerOptions, CacheOptions, FaultOptions, LatencyOptions, LimitOptions
from .protocol import DEFAULT_API_KEY, Reply, SimExchange, SimRequest
from .server import Simulator, serve

__all__ = [
    "AnswerOptions",
    "CacheOptions",
    "DEFAULT_API_KEY",
    "FaultOptions",
    "LatencyOptions",
    "LimitOptions",
    "Reply",
    "SimExchange",
    "SimRequest",
    "Simulator",
    "SimulatorConfig",
    "serve",
]


def __getattr__(name: str) -> object:
    # ``Exchange`` was renamed ``SimExchange`` (the client has its own ``Exchange``): the old
    # name still works for one release.
    if name == "Exchange":
        import warnings

        warnings.warn(
            "kimi_extract.simulator.Exchange is now SimExchange; the old name goes in the next "
            "release",
            DeprecationWarning,
            stacklevel=2,
        )
        return SimExchange
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
