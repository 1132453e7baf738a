"""Rate-limit shapes of the independent benchmark server (``gateway_server.py``): pure logic on an
injected clock, so the tests can run the same shapes on a virtual clock.

Written apart from ``kimi_extract.simulator.limits`` on purpose: the client is measured against
limits it was not written beside. A ``Shape`` decides, when a request arrives, whether the server
takes it; a refusal says which limit refused it, the limit's value and how long until there is
room. ``refusal_reply`` turns a refusal into the 429 a server would send, in one of three styles:

- ``"kimi"``: Kimi's own text, which names the limit and the wait ("... reached organization max
  RPM: 300, please try again after 7 seconds"), no header; random refusals are Kimi's
  ``engine_overloaded_error``;
- ``"retry-after"``: a gateway's generic "Rate limit reached" naming nothing, with a
  ``Retry-After`` header in whole seconds (rounded up);
- ``"bare"``: the same generic 429 with nothing else.

Kinds (``per_minute`` is requests per minute, or tokens per minute for ``unit="tokens"``):

- ``fixed``: at most ``per_minute * window_s / 60`` per window, windows back to back from the
  first request;
- ``sliding``: at most that much in any trailing ``window_s``;
- ``bucket``: a token bucket refilled at ``per_minute / 60`` per second holding at most ``burst``;
- ``concurrency``: at most ``concurrency`` requests in flight.

``change_at`` / ``change_to``: ``change_at`` seconds after the first request the limit becomes
``change_to`` (a limit that drops mid-run). ``random_share``: that share of requests is refused at
random (seeded), whatever the rate; those refusals take nothing from any limit.
"""

from __future__ import annotations

import json
import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

KINDS = ("fixed", "sliding", "bucket", "concurrency")
STYLES = ("kimi", "retry-after", "bare")


@dataclass(frozen=True)
class Refusal:
    """A refused request: which limit (``"rpm"``, ``"tpm"``, ``"concurrency"`` or
    ``"random"``), its value then, and seconds until the server has room."""

    limit: str
    value: int
    wait: float


@dataclass
class Shape:
    """One server's limit (module docstring). ``admit(now, tokens)`` -> None or a ``Refusal``;
    ``finish()`` when an admitted request ends."""

    kind: str
    per_minute: int = 0
    unit: str = "requests"
    window_s: float = 60.0
    burst: float = 1.0
    concurrency: int = 0
    change_at: float | None = None
    change_to: int | None = None
    random_share: float = 0.0
    seed: int = 0
    _start: float | None = field(default=None, repr=False)
    _log: deque[tuple[float, float]] = field(default_factory=deque, repr=False)
    _total: float = field(default=0.0, repr=False)
    _window_start: float = field(default=0.0, repr=False)
    _level: float = field(default=0.0, repr=False)
    _level_time: float = field(default=0.0, repr=False)
    _in_flight: int = field(default=0, repr=False)
    _rng: random.Random = field(default_factory=random.Random, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        self._rng = random.Random(self.seed)
        self._level = self.burst

    def limit_now(self, now: float) -> int:
        """The per-minute limit (or concurrency) in force at ``now``."""
        if self.kind == "concurrency":
            return self.concurrency
        changed = (
            self.change_at is not None
            and self.change_to is not None
            and self._start is not None
            and now - self._start >= self.change_at
        )
        return self.change_to if changed and self.change_to is not None else self.per_minute

    def capacity(self, now: float) -> float:
        """How much one window holds at ``now`` (bucket: its burst)."""
        if self.kind == "bucket":
            return self.burst
        return self.limit_now(now) * self.window_s / 60.0

    def admit(self, now: float, tokens: float = 1.0) -> Refusal | None:
        if self._start is None:
            self._start = self._window_start = self._level_time = now
        if self.random_share and self._rng.random() < self.random_share:
            return Refusal("random", 0, 1.0)
        amount = tokens if self.unit == "tokens" else 1.0
        name = "tpm" if self.unit == "tokens" else "rpm"
        if self.kind == "concurrency":
            if self._in_flight >= self.concurrency:
                return Refusal("concurrency", self.concurrency, 1.0)
            self._in_flight += 1
            return None
        if self.kind == "bucket":
            rate = self.limit_now(now) / 60.0
            self._level = min(self.burst, self._level + (now - self._level_time) * rate)
            self._level_time = now
            if self._level < amount:
                return Refusal(name, self.limit_now(now), (amount - self._level) / rate)
            self._level -= amount
            return None
        capacity = self.capacity(now)
        if self.kind == "fixed":
            while now >= self._window_start + self.window_s:
                self._window_start += self.window_s
                self._log.clear()
                self._total = 0.0
            if self._total + amount > capacity:
                wait = self._window_start + self.window_s - now
                return Refusal(name, self.limit_now(now), wait)
        else:
            while self._log and self._log[0][0] <= now - self.window_s:
                self._total -= self._log.popleft()[1]
            if self._total + amount > capacity:
                excess = self._total + amount - capacity
                wait = self.window_s
                for when, counted in self._log:
                    excess -= counted
                    if excess <= 1e-9:
                        wait = when + self.window_s - now
                        break
                return Refusal(name, self.limit_now(now), max(wait, 1e-3))
        self._log.append((now, amount))
        self._total += amount
        return None

    def finish(self) -> None:
        if self.kind == "concurrency" and self._in_flight > 0:
            self._in_flight -= 1


GENERIC_MESSAGE = "Rate limit reached. Please slow down and try again later."
OVERLOADED_MESSAGE = "The engine is currently overloaded, please try again later"


def refusal_reply(refusal: Refusal, style: str) -> tuple[dict[str, str], bytes]:
    """The headers and JSON body of the 429 a server in ``style`` sends for ``refusal``."""
    if style not in STYLES:
        raise ValueError(f"style must be one of {STYLES}, got {style!r}")
    seconds = max(1, math.ceil(refusal.wait - 1e-9))
    headers: dict[str, str] = {}
    if style == "kimi":
        if refusal.limit == "random":
            error = {"type": "engine_overloaded_error", "message": OVERLOADED_MESSAGE}
        else:
            named = {
                "concurrency": f"max organization concurrency: {refusal.value}",
                "rpm": f"organization max RPM: {refusal.value}",
                "tpm": f"organization max TPM: {refusal.value}",
            }[refusal.limit]
            error = {
                "type": "rate_limit_reached_error",
                "message": f"Your account org-bench request reached {named}, please try again "
                f"after {seconds} seconds",
            }
    else:
        error = {"type": "rate_limit_error", "code": "rate_limit_exceeded"}
        error["message"] = GENERIC_MESSAGE
        if style == "retry-after":
            headers["Retry-After"] = str(seconds)
    return headers, json.dumps({"error": error}).encode()


def body_tokens(body: bytes) -> int:
    """The prompt tokens this server charges for a request body (a quarter of its bytes)."""
    return max(1, len(body) // 4)


#: The answer every accepted request gets (valid for the benchmark's ``Review`` model).
ANSWER = json.dumps({"sentiment": "positive", "aspects": ["battery", "screen"]})
COMPLETION_TOKENS = 20


def completion_body(prompt_tokens: int, now: Callable[[], float] | None = None) -> bytes:
    """An OpenAI-compatible chat completion carrying ``ANSWER`` and its usage."""
    created = int(now()) if now is not None else 0
    payload: dict[str, Any] = {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": created,
        "model": "kimi-k3.1-pro",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": ANSWER},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": COMPLETION_TOKENS,
            "total_tokens": prompt_tokens + COMPLETION_TOKENS,
        },
    }
    return json.dumps(payload).encode()
