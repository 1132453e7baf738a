"""Rate limits, overload, quota and seeded faults (KIMI-NOTES "Errors and limits").

Limits, all off by default:

- ``max_concurrency``: requests admitted and not yet finished. One more -> 429.
- ``rpm``: requests admitted in the last 60 s of the injectable clock (sliding window).
- ``tpm``: tokens of the requests admitted in the last 60 s. A request is charged, at admission,
  ``prompt_tokens + completion_tokens`` of the answer it is about to get (the answer is
  deterministic, so it is known before it is sent; it never exceeds ``max_completion_tokens``).
  A request whose charge would take the window over ``tpm`` -> 429. (So the TPM check comes
  after the responder has been asked for the answer; the other limits come before it.)
- ``overload_rate``: that share of requests -> 429 ``engine_overloaded_error`` (seeded).
- ``quota_usd``: once the billed spend reaches it -> 429 ``exceeded_current_quota_error``.

Requests rejected by a limit are not billed, not cached and do not count toward the windows (an
admitted request that then gets a fault still counts toward RPM and TPM, as the server did work).
The 429 messages are Kimi's ("Your account org-sim request reached organization max RPM: 3, please
try again after 1 seconds"); the wait they state is when the window will have room (at least 1 s;
1 s for concurrency). Real Kimi sends no Retry-After header; ``retry_after_header=True`` adds one
with the same number of seconds.

Faults draw from one ``random.Random(seed)``: every request that reaches the fault stage draws the
same number of values, so a given seed and arrival order give the same faults.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .protocol import ORG, SimError

WINDOW_S = 60.0
FAULT_KINDS = ("500", "reset", "cut", "slow_first_byte", "invalid_json", "truncate")


def _rate_limited(message: str, wait_s: float, header: bool) -> SimError:
    seconds = max(1, math.ceil(wait_s))
    headers = {"Retry-After": str(seconds)} if header else None
    return SimError(
        429,
        "rate_limit_reached_error",
        f"Your account {ORG} request reached {message}, please try again after {seconds} seconds",
        headers,
    )


class Limits:
    """Admission control; see the module docstring. Not thread-safe: the caller holds a lock."""

    def __init__(
        self,
        clock: Callable[[], float],
        rng: random.Random,
        *,
        max_concurrency: int | None = None,
        rpm: int | None = None,
        tpm: int | None = None,
        retry_after_header: bool = False,
        overload_rate: float = 0.0,
        quota_usd: float | None = None,
    ) -> None:
        self.clock = clock
        self.rng = rng
        self.max_concurrency = max_concurrency
        self.rpm = rpm
        self.tpm = tpm
        self.retry_after_header = retry_after_header
        self.overload_rate = overload_rate
        self.quota_usd = quota_usd
        self.in_flight = 0
        self.spend_usd = 0.0
        self._requests: deque[float] = deque()
        self._tokens: deque[tuple[float, int]] = deque()
        self._token_sum = 0

    def reset(self) -> None:
        """Clear the windows and the spend (in-flight requests keep counting)."""
        self._requests.clear()
        self._tokens.clear()
        self._token_sum = 0
        self.spend_usd = 0.0

    def _expire(self, now: float) -> None:
        while self._requests and self._requests[0] <= now - WINDOW_S:
            self._requests.popleft()
        while self._tokens and self._tokens[0][0] <= now - WINDOW_S:
            self._token_sum -= self._tokens.popleft()[1]

    def admit(self) -> None:
        """Admit one request or raise its 429; an admitted request must be ``release``d."""
        now = self.clock()
        self._expire(now)
        header = self.retry_after_header
        overloaded = self.rng.random() < self.overload_rate
        if self.max_concurrency is not None and self.in_flight >= self.max_concurrency:
            raise _rate_limited(
                f"organization max concurrency: {self.max_concurrency}", 1.0, header
            )
        if self.rpm is not None and len(self._requests) >= self.rpm:
            wait = self._requests[0] + WINDOW_S - now
            raise _rate_limited(f"organization max RPM: {self.rpm}", wait, header)
        if overloaded:
            raise SimError(
                429,
                "engine_overloaded_error",
                "The engine is currently overloaded, please try again later",
            )
        if self.quota_usd is not None and self.spend_usd >= self.quota_usd:
            raise SimError(
                429,
                "exceeded_current_quota_error",
                f"Your account {ORG} is suspended due to insufficient balance, please recharge "
                "your account or check your plan and billing details",
            )
        self._requests.append(now)
        self.in_flight += 1

    def charge_tokens(self, tokens: int) -> None:
        """Charge an admitted request's tokens to the TPM window, or raise its 429."""
        if self.tpm is None:
            return
        now = self.clock()
        self._expire(now)
        if self._token_sum + tokens > self.tpm:
            wait = 1.0
            if self._tokens and tokens <= self.tpm:
                freed = self._token_sum + tokens - self.tpm
                for when, amount in self._tokens:
                    freed -= amount
                    if freed <= 0:
                        wait = when + WINDOW_S - now
                        break
            raise _rate_limited(f"organization max TPM: {self.tpm}", wait, self.retry_after_header)
        self._tokens.append((now, tokens))
        self._token_sum += tokens

    def uncount(self) -> None:
        """Undo the RPM count of an admitted request that was then rejected."""
        if self._requests:
            self._requests.pop()

    def release(self) -> None:
        """An admitted request finished."""
        self.in_flight -= 1

    def bill(self, usd: float) -> None:
        """Add a completed request's cost to the spend."""
        self.spend_usd += usd


@dataclass(frozen=True)
class FaultRates:
    """Per-request probabilities of each injected fault (0..1)."""

    server_error: float = 0.0
    reset: float = 0.0
    stream_cut: float = 0.0
    slow_first_byte: float = 0.0
    invalid_json: float = 0.0
    truncate: float = 0.0

    def any(self) -> bool:
        """Whether any fault is enabled."""
        return any(
            rate > 0
            for rate in (
                self.server_error,
                self.reset,
                self.stream_cut,
                self.slow_first_byte,
                self.invalid_json,
                self.truncate,
            )
        )


def draw_faults(
    rng: random.Random, rates: FaultRates, *, stream: bool, json_content: bool
) -> list[str]:
    """The faults for one request. Six draws always, so one request never shifts another's.

    At most one of 500 / reset / cut / invalid_json / truncate (first in that order wins);
    ``slow_first_byte`` combines with any. A cut applies to streams only, invalid_json to JSON
    answers only.
    """
    draws = [rng.random() for _ in range(6)]
    faults: list[str] = []
    if draws[3] < rates.slow_first_byte:
        faults.append("slow_first_byte")
    if draws[0] < rates.server_error:
        faults.append("500")
    elif draws[1] < rates.reset:
        faults.append("reset")
    elif stream and draws[2] < rates.stream_cut:
        faults.append("cut")
    elif json_content and draws[4] < rates.invalid_json:
        faults.append("invalid_json")
    elif draws[5] < rates.truncate:
        faults.append("truncate")
    return faults


def cost_usd(
    usage: Mapping[str, Any], pricing: Mapping[str, float], *, separate_writes: bool, ttl: str
) -> float:
    """USD cost of one response's usage (seed ``ChatUsage`` billing rules).

    ``pricing`` is USD per 1M tokens: ``input``, ``cached_input``, ``cache_write``, ``output``
    (optional ``cache_write_1h``). K3.1: regular input = prompt - cached - cache_write; kimi-k3:
    prompt - cached.
    """
    details = usage.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens", 0)
    writes = details.get("cache_write_tokens", 0) if separate_writes else 0
    regular = usage.get("prompt_tokens", 0) - cached - writes
    write_rate = pricing.get("cache_write", pricing.get("input", 0.0))
    if ttl == "1h" and pricing.get("cache_write_1h") is not None:
        write_rate = pricing["cache_write_1h"]
    total = (
        regular * pricing.get("input", 0.0)
        + cached * pricing.get("cached_input", 0.0)
        + writes * write_rate
        + usage.get("completion_tokens", 0) * pricing.get("output", 0.0)
    )
    return total / 1_000_000
