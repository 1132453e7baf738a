"""The real ``Transport`` and ``Limiter`` against the benchmark's independent rate-limit shapes
(``benchmarks/ratelimits.py``), on a virtual clock: a run of minutes takes a fraction of a second
and nothing depends on how fast this machine is.

``VirtualTime`` jumps straight to the next wake-up once every task waits. ``VirtualGateway`` is
an HTTP backend whose server decides on that clock: a refusal comes back at once, an answer after
``latency_s``. ``run`` sends ``rows`` requests through ``Transport.complete`` with ``workers``
rows in flight (as the scheduler does) and returns what happened, with every attempt's time.
"""

from __future__ import annotations

import asyncio
import heapq
import importlib.util
import itertools
import json
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from multidict import CIMultiDict

from kimi_extract.config.groups import Connection
from kimi_extract.exceptions import KimiExtractError
from kimi_extract.http.backends import HttpReply
from kimi_extract.http.limiter import Limiter
from kimi_extract.http.transport import Exchange, Secret, Transport

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "ratelimits.py"
_spec = importlib.util.spec_from_file_location("kx_bench_ratelimits", _PATH)
assert _spec is not None and _spec.loader is not None
ratelimits = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = ratelimits  # dataclasses look their module up
_spec.loader.exec_module(ratelimits)
Shape = ratelimits.Shape


class VirtualTime:
    """A clock and a sleep that jump straight to the next wake-up once every task is waiting."""

    def __init__(self, start: float = 0.0) -> None:
        self.time = start
        self._heap: list[tuple[float, int, asyncio.Future[None]]] = []
        self._ids = itertools.count()

    def now(self) -> float:
        return self.time

    async def sleep(self, seconds: float) -> None:
        future = asyncio.get_running_loop().create_future()
        heapq.heappush(self._heap, (self.time + max(0.0, seconds), next(self._ids), future))
        await future

    async def run_due(self) -> None:
        """Wake every sleeper whose time has come and let the woken tasks run until they wait
        again (the clock does not move)."""
        loop = asyncio.get_running_loop()
        while True:
            for _ in range(1000):
                await asyncio.sleep(0)
                if not loop._ready:  # type: ignore[attr-defined]
                    break
            if not self._heap or self._heap[0][0] > self.time:
                return
            while self._heap and self._heap[0][0] <= self.time:
                _, _, future = heapq.heappop(self._heap)
                if not future.done():
                    future.set_result(None)

    async def drive(self, tasks: list[asyncio.Task[Any]]) -> None:
        loop = asyncio.get_running_loop()
        while not all(t.done() for t in tasks):
            for _ in range(1000):  # let every runnable task reach its next wait
                await asyncio.sleep(0)
                if not loop._ready:  # type: ignore[attr-defined]
                    break
            if self._heap:
                when, _, future = heapq.heappop(self._heap)
                self.time = max(self.time, when)
                if not future.done():
                    future.set_result(None)
            elif not all(t.done() for t in tasks):
                await asyncio.sleep(0)
        for task in tasks:
            task.result()


@dataclass
class Behind:
    """A gateway's own limit (``gate``, any ``Shape``) in front of the server's (``inner``): a
    request the gate refuses never reaches the server, and its 429 names nothing (the style's
    text for a refusal that names no limit: Kimi's "engine overloaded", or the generic one)."""

    gate: Any
    inner: Any

    def admit(self, now: float, tokens: float = 1.0) -> Any:
        refusal = self.gate.admit(now, tokens)
        if refusal is not None:
            return ratelimits.Refusal("random", 0, refusal.wait)
        return self.inner.admit(now, tokens)

    def finish(self) -> None:
        self.inner.finish()


@dataclass
class Attempt:
    """One HTTP attempt the server saw: when, and whether it was refused (and why)."""

    at: float
    refused: str | None


@dataclass
class VirtualGateway:
    """A ``Backend`` answering from a rate-limit ``Shape`` on a ``VirtualTime``."""

    vt: VirtualTime
    shape: Any
    style: str = "kimi"
    latency_s: float = 1.0
    refusal_s: float = 0.0  # how long a 429 takes to come back (a loaded loop reads it late)
    #: ...plus up to this much more, drawn for each 429 from ``jitter`` (a real clock's disorder)
    refusal_jitter_s: float = 0.0
    jitter: random.Random = field(default_factory=random.Random)
    attempts: list[Attempt] = field(default_factory=list)
    #: The round trip a new connection reports (``on_connect``, set by the transport), one per
    #: request past the most in flight so far, as a pool opens them (0: none reported).
    connect_s: float = 0.0
    on_connect: Any = None
    _in_flight: int = 0
    _pool: int = 0

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def post(self, url: str, payload: bytes) -> HttpReply:
        self._in_flight += 1
        try:
            if self._in_flight > self._pool:
                self._pool = self._in_flight
                if self.connect_s and self.on_connect is not None:
                    self.on_connect(self.connect_s)
            return await self._post(payload)
        finally:
            self._in_flight -= 1

    async def _post(self, payload: bytes) -> HttpReply:
        now = self.vt.now()
        prompt = ratelimits.body_tokens(payload)
        refusal = self.shape.admit(now, prompt + ratelimits.COMPLETION_TOKENS)
        if refusal is not None:
            self.attempts.append(Attempt(now, refusal.limit))
            headers, body = ratelimits.refusal_reply(refusal, self.style)
            late = self.refusal_s + self.jitter.uniform(0.0, self.refusal_jitter_s)
            if late:
                await self.vt.sleep(late)
            return HttpReply(429, CIMultiDict(headers), body)
        self.attempts.append(Attempt(now, None))
        try:
            await self.vt.sleep(self.latency_s)
        finally:
            self.shape.finish()
        return HttpReply(200, CIMultiDict(), ratelimits.completion_body(prompt))

    def stream(self, url: str, payload: bytes) -> Any:
        raise AssertionError("not streamed here")

    def refused(self, since: float = 0.0, until: float = float("inf")) -> int:
        return sum(1 for a in self.attempts if a.refused and since <= a.at < until)

    def sent(self, since: float = 0.0, until: float = float("inf")) -> int:
        return sum(1 for a in self.attempts if since <= a.at < until)

    def accepted_times(self) -> list[float]:
        return [a.at for a in self.attempts if a.refused is None]


@dataclass
class Outcome:
    """What a virtual run did."""

    gateway: VirtualGateway
    limiter: Limiter
    ok: int
    lost: list[str]
    end: float  # virtual time the last row finished

    @property
    def refused_share(self) -> float:
        return self.gateway.refused() / max(1, len(self.gateway.attempts))


def run(
    shape: Any,
    *,
    rows: int,
    workers: int = 100,
    style: str = "kimi",
    latency_s: float = 1.0,
    max_retries: int = 8,
    max_retry_wait: float = 60.0,
    pad: int = 0,
    refusal_s: float = 0.0,
    refusal_jitter_s: float = 0.0,
    connect_s: float = 0.0,
    seed: int = 0,
    **limits: Any,
) -> Outcome:
    """``rows`` one-request rows through a fresh Transport and Limiter (``limits``: its
    keyword arguments besides ``concurrency=workers``) against ``shape``; ``pad`` characters
    added to each prompt (a larger body: more tokens per request); ``refusal_s``: how long each
    429 takes to come back, and up to ``refusal_jitter_s`` more (drawn for each);
    ``connect_s``: the round trip each new connection reports (``VirtualGateway.connect_s``);
    ``seed``: the transport's retry jitter and those draws (a run is reproducible)."""
    vt = VirtualTime()
    gateway = VirtualGateway(
        vt,
        shape,
        style,
        latency_s,
        refusal_s,
        refusal_jitter_s,
        random.Random(seed),
        connect_s=connect_s,
    )
    limiter = Limiter(concurrency=workers, clock=vt, **limits)
    transport = Transport(
        base_url="http://gateway.invalid",
        api_key=Secret("sk-virtual-0123456789"),
        concurrency=workers,
        connection=Connection(timeout=600, max_retries=max_retries, max_retry_wait=max_retry_wait),
        gate=limiter,
        clock=vt,
        backend=gateway,
    )
    counter = itertools.count()
    ok = 0
    lost: list[str] = []
    end = 0.0

    async def worker() -> None:
        nonlocal ok, end
        while (index := next(counter)) < rows:
            body = {
                "model": "kimi-k3.1-pro",
                "messages": [{"role": "user", "content": f"Review {index}: fine." + " " * pad}],
            }
            try:
                await transport.complete(body, Exchange(), prompt_tokens=30)
                ok += 1
            except KimiExtractError as exc:
                lost.append(f"{type(exc).__name__}: {exc}")
            end = max(end, vt.time)

    async def main() -> None:
        async with transport:
            tasks = [asyncio.create_task(worker()) for _ in range(workers)]
            await vt.drive(tasks)

    state = random.getstate()
    random.seed(seed)
    try:
        asyncio.run(main())
    finally:
        random.setstate(state)
    return Outcome(gateway, limiter, ok, lost, end)


def longest_gap(times: list[float], since: float = 0.0) -> float:
    """The longest stretch with no time in ``times`` after ``since``."""
    points = sorted(t for t in times if t >= since)
    return max((b - a for a, b in zip(points, points[1:], strict=False)), default=0.0)


def dumps(outcome: Outcome) -> str:
    """A one-line account of a run, for assertion messages."""
    g = outcome.gateway
    return json.dumps(
        {
            "ok": outcome.ok,
            "lost": len(outcome.lost),
            "attempts": len(g.attempts),
            "refused": g.refused(),
            "end": round(outcome.end, 2),
            "bound_by": outcome.limiter.bound_by(),
        }
    )
