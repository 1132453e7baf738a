"""A local Kimi chat-completions API for tests, benchmarks and demos (no network needed).

``Simulator`` serves the seed reference's ``POST /v1/chat/completions`` on a real HTTP port:
request validation against the seed's OpenAPI schema, Kimi's schema dialect and per-model rules,
deterministic schema-valid answers with reasoning, usage from ``kimi_extract.tokens``, an implicit
prefix cache, rate limits, seeded faults, SSE streaming, function tools and web search. It imports
only ``kimi_extract.tokens``, ``kimi_extract.mfjs`` and ``kimi_extract.models`` of the library.

Modules: ``server`` (Simulator, serve), ``app`` (routes and the request pipeline), ``validation``
(OpenAPI schema), ``rules`` (Kimi's rules), ``prompt`` (prompt tokens), ``cache`` (prefix cache),
``limits`` (limits and faults), ``answers`` / ``completion`` (answers), ``streaming`` (SSE),
``protocol`` (Reply, SimRequest, Exchange).
"""

from __future__ import annotations

from .protocol import DEFAULT_API_KEY, Exchange, Reply, SimRequest
from .server import Simulator, serve

__all__ = ["DEFAULT_API_KEY", "Exchange", "Reply", "SimRequest", "Simulator", "serve"]
