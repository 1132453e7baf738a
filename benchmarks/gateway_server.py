"""An independent rate-limited chat-completions server for the limiter matrix (section 10).

    python benchmarks/gateway_server.py '{"port": 8123, "shape": {...}, "style": "kimi"}'

Not the simulator: a small aiohttp server whose limit is a ``ratelimits.Shape`` (fixed window,
sliding log, token bucket, concurrency; RPM or TPM; a limit that changes; random refusals) and
whose 429s come in one of ``ratelimits.STYLES`` (Kimi's text, a generic 429 with or without
``Retry-After``). A refused request is answered at once; an accepted one after ``latency_s``
with a fixed valid answer for the benchmark's ``Review`` model and its usage (prompt tokens: a
quarter of the body's bytes; these tokens are what a TPM shape counts). Any API key is accepted.

``GET /stats``: requests, accepted, refused by limit, the first and last request times (seconds
on this server's monotonic clock), tokens accepted, and the time the limit changed;
``GET /stats?arrivals=1`` adds every request's arrival as ``[seconds after the first, status]``
(a run's timeline as the server saw it). ``POST /reset``: fresh limits and counters (a new run).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import Counter
from typing import Any

from aiohttp import web
from ratelimits import COMPLETION_TOKENS, Shape, body_tokens, completion_body, refusal_reply


class Gateway:
    """The server's state: one shape, its counters."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.reset()

    def reset(self) -> None:
        self.shape = Shape(**self.spec["shape"])
        self.style = self.spec.get("style", "kimi")
        self.latency_s = float(self.spec.get("latency_s", 1.0))
        self.requests = 0
        self.accepted = 0
        self.refused: Counter[str] = Counter()
        self.tokens = 0
        self.first: float | None = None
        self.last = 0.0
        self.arrivals: list[tuple[float, int]] = []

    async def chat(self, request: web.Request) -> web.Response:
        body = await request.read()
        now = time.monotonic()
        self.requests += 1
        self.first = now if self.first is None else self.first
        self.last = now
        prompt = body_tokens(body)
        refusal = self.shape.admit(now, prompt + COMPLETION_TOKENS)
        self.arrivals.append((now - self.first, 200 if refusal is None else 429))
        if refusal is not None:
            self.refused[refusal.limit] += 1
            headers, payload = refusal_reply(refusal, self.style)
            return web.Response(
                status=429, body=payload, headers=headers, content_type="application/json"
            )
        self.accepted += 1
        self.tokens += prompt + COMPLETION_TOKENS
        try:
            await asyncio.sleep(self.latency_s)
        finally:
            self.shape.finish()
        return web.Response(
            body=completion_body(prompt, time.time), content_type="application/json"
        )

    async def stats(self, request: web.Request) -> web.Response:
        changed = None
        if self.shape.change_at is not None and self.first is not None:
            changed = self.first + self.shape.change_at
        data = {
            "requests": self.requests,
            "accepted": self.accepted,
            "refused": dict(self.refused),
            "tokens": self.tokens,
            "first": self.first,
            "last": self.last,
            "changed": changed,
        }
        if request.query.get("arrivals"):
            data["arrivals"] = self.arrivals
        return web.json_response(data)

    async def reset_handler(self, request: web.Request) -> web.Response:
        self.reset()
        return web.json_response({"ok": True})


def main() -> None:
    spec = json.loads(sys.argv[1])
    gateway = Gateway(spec)
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/chat/completions", gateway.chat)
    app.router.add_get("/stats", gateway.stats)
    app.router.add_post("/reset", gateway.reset_handler)
    web.run_app(
        app, host="127.0.0.1", port=int(spec["port"]), print=None, access_log=None, backlog=2048
    )


if __name__ == "__main__":
    main()
