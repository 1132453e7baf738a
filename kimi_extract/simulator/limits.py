"""Rate limits, overload, quota, seeded faults and latency (``docs/reference/KIMI-NOTES.md``,
"Errors and limits").

Limits, all off by default:

- ``max_concurrency``: requests admitted and not yet finished. One more -> 429.
- ``rpm``: requests admitted per minute, enforced in one of three shapes (``rate_shape``):

  - ``"sliding"`` (default): at most ``rpm`` requests in any 60 s of the injectable clock;
  - ``"fixed"``: at most ``rpm`` requests per 60 s window, the count starting again at each
    boundary; the first window starts at the first request (after start or ``reset``);
  - ``"bucket"``: a token bucket refilled at ``rpm / 60`` per second holding at most
    ``burst_s`` seconds' worth (at least one request): a smooth rate with a small burst.

- ``tpm``: tokens of the requests admitted per minute, in the same shape as ``rpm``. A request
  is charged, at admission, ``prompt_tokens + completion_tokens`` of the answer it is about to get
  (the answer is deterministic, so it is known before it is sent; it never exceeds
  ``max_completion_tokens``). A request whose charge does not fit -> 429. (So the TPM check comes
  after the responder has been asked for the answer; the other limits come before it.) In the
  bucket shape a request larger than the bucket goes once the bucket is full.
- ``window_s``: the window of the sliding and fixed shapes (default 60). Limits stay stated per
  minute: a window of ``window_s`` holds ``limit * window_s / 60`` (at least 1). Benchmarks use a
  short window to see many windows in a short run; Kimi's is 60 s.
- ``overload_rate``: that share of requests -> 429 ``engine_overloaded_error`` (seeded).
- ``spurious_429_rate``: that share of requests -> 429 ``rate_limit_reached_error`` in Kimi's
  form, naming the configured RPM (else the concurrency limit, else "max RPM: 3000") and "please
  try again after 1 seconds", whatever the real load (seeded). Kimi's gateway refuses like this
  at times when the organisation is nowhere near its limit: a 429 that is not a rate signal.
- ``quota_usd``: once the billed spend reaches it -> 429 ``exceeded_current_quota_error``.

Requests rejected by a limit are not billed, not cached and do not count toward the windows (an
admitted request that then gets a fault still counts toward RPM and TPM, as the server did work).
The 429 messages are Kimi's ("Your account org-sim request reached organization max RPM: 3, please
try again after 1 seconds"); the wait they state is when the window will have room, rounded up to
whole seconds (at least 1 s; 1 s for concurrency). Real Kimi sends no Retry-After header;
``retry_after_header=True`` adds one with the same number of seconds.

Faults draw from one ``random.Random(seed)``: every request that reaches the fault stage draws the
same number of values, so a given seed and arrival order give the same faults. ``Latency`` draws
each answer's delay (fixed, or lognormal with a given median and 99th percentile) from its own
seeded generator.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..exceptions import ConfigurationError
from .protocol import ORG, SimError

WINDOW_S = 60.0
RATE_SHAPES = ("sliding", "fixed", "bucket")
LATENCY_SHAPES = ("fixed", "lognormal")
#: z of the 99th percentile of the standard normal distribution.
_Z99 = 2.3263478740408408


def _rate_limited(message: str, wait_s: float, header: bool) -> SimError:
    seconds = max(1, math.ceil(wait_s - 1e-9))
    headers = {"Retry-After": str(seconds)} if header else None
    return SimError(
        429,
        "rate_limit_reached_error",
        f"Your account {ORG} request reached {message}, please try again after {seconds} seconds",
        headers,
    )


class Meter:
    """One per-minute limit (requests or tokens) in one shape; amounts are whole units."""

    def __init__(self, per_minute: int, shape: str, window_s: float, burst_s: float) -> None:
        if shape not in RATE_SHAPES:
            raise ConfigurationError(f"rate_shape must be one of {RATE_SHAPES}, got {shape!r}")
        self.per_minute = per_minute
        self.shape = shape
        self.window_s = window_s
        #: What one window holds (sliding, fixed) or the bucket's size (bucket).
        if shape == "bucket":
            self.capacity = max(1.0, per_minute / WINDOW_S * burst_s)
        else:
            self.capacity = max(1.0, float(math.floor(per_minute * window_s / WINDOW_S)))
        self.rate = per_minute / WINDOW_S  # units per second (bucket refill)
        self.reset()

    def reset(self) -> None:
        """Empty windows; a full bucket."""
        self._log: deque[tuple[float, int]] = deque()
        self._sum = 0
        self._window_index: int | None = None
        self._epoch: float | None = None
        self._level = self.capacity
        self._level_time: float | None = None

    def _update(self, now: float) -> None:
        if self.shape == "sliding":
            while self._log and self._log[0][0] <= now - self.window_s:
                self._sum -= self._log.popleft()[1]
        elif self.shape == "fixed":
            if self._epoch is None:
                self._epoch = now
            index = math.floor((now - self._epoch) / self.window_s)
            if index != self._window_index:
                self._window_index = index
                self._sum = 0
                self._log.clear()
        else:
            if self._level_time is not None:
                elapsed = max(0.0, now - self._level_time)
                self._level = min(self.capacity, self._level + elapsed * self.rate)
            self._level_time = now

    def wait(self, now: float, amount: int) -> float:
        """Seconds until ``amount`` fits (0: it fits now)."""
        self._update(now)
        if self.shape == "bucket":
            need = min(float(amount), self.capacity)
            return 0.0 if self._level >= need - 1e-9 else (need - self._level) / self.rate
        if self._sum + amount <= self.capacity:
            return 0.0
        if self.shape == "fixed":
            start = self._epoch + (self._window_index + 1) * self.window_s  # type: ignore[operator]
            return start - now
        if amount > self.capacity or not self._log:
            return self.window_s
        freed = self._sum + amount - self.capacity
        for when, charged in self._log:
            freed -= charged
            if freed <= 0:
                return when + self.window_s - now
        return self.window_s

    def take(self, now: float, amount: int) -> None:
        """Count ``amount`` admitted now (after ``wait`` said 0)."""
        self._update(now)
        if self.shape == "bucket":
            self._level -= amount
        else:
            self._log.append((now, amount))
            self._sum += amount

    def untake(self, amount: int) -> None:
        """Undo the last ``take`` of ``amount`` (a request rejected after admission)."""
        if self.shape == "bucket":
            self._level = min(self.capacity, self._level + amount)
        elif self._log:
            self._log.pop()
            self._sum -= amount


class SimLimits:
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
        rate_shape: str = "sliding",
        window_s: float = WINDOW_S,
        burst_s: float = 0.1,
        spurious_429_rate: float = 0.0,
        seed: int = 0,
    ) -> None:
        if rate_shape not in RATE_SHAPES:
            raise ConfigurationError(f"rate_shape must be one of {RATE_SHAPES}, got {rate_shape!r}")
        if not (window_s > 0 and burst_s > 0):
            raise ConfigurationError("window_s and burst_s must be > 0")
        self.clock = clock
        self.rng = rng
        self.spurious_rng = random.Random(f"spurious-{seed}")
        self.max_concurrency = max_concurrency
        self.rpm = rpm
        self.tpm = tpm
        self.retry_after_header = retry_after_header
        self.overload_rate = overload_rate
        self.spurious_429_rate = spurious_429_rate
        self.quota_usd = quota_usd
        self.rate_shape = rate_shape
        self.in_flight = 0
        self.spend_usd = 0.0
        self._requests = Meter(rpm, rate_shape, window_s, burst_s) if rpm is not None else None
        self._tokens = Meter(tpm, rate_shape, window_s, burst_s) if tpm is not None else None

    def reset(self) -> None:
        """Clear the windows and the spend (in-flight requests keep counting)."""
        for meter in (self._requests, self._tokens):
            if meter is not None:
                meter.reset()
        self.spend_usd = 0.0

    def _spurious_message(self) -> str:
        if self.rpm is not None:
            return f"organization max RPM: {self.rpm}"
        if self.max_concurrency is not None:
            return f"organization max concurrency: {self.max_concurrency}"
        return "organization max RPM: 3000"

    def admit(self) -> None:
        """Admit one request or raise its 429; an admitted request must be ``release``d."""
        now = self.clock()
        header = self.retry_after_header
        overloaded = self.rng.random() < self.overload_rate
        spurious = self.spurious_429_rate > 0 and (
            self.spurious_rng.random() < self.spurious_429_rate
        )
        if self.max_concurrency is not None and self.in_flight >= self.max_concurrency:
            raise _rate_limited(
                f"organization max concurrency: {self.max_concurrency}", 1.0, header
            )
        if self._requests is not None:
            wait = self._requests.wait(now, 1)
            if wait > 0:
                raise _rate_limited(f"organization max RPM: {self.rpm}", wait, header)
        if spurious:
            raise _rate_limited(self._spurious_message(), 1.0, header)
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
        if self._requests is not None:
            self._requests.take(now, 1)
        self.in_flight += 1

    def charge_tokens(self, tokens: int) -> None:
        """Charge an admitted request's tokens to the TPM window, or raise its 429."""
        if self._tokens is None:
            return
        now = self.clock()
        wait = self._tokens.wait(now, tokens)
        if wait > 0:
            raise _rate_limited(f"organization max TPM: {self.tpm}", wait, self.retry_after_header)
        self._tokens.take(now, tokens)

    def uncount(self) -> None:
        """Undo the RPM count of an admitted request that was then rejected."""
        if self._requests is not None:
            self._requests.untake(1)

    def release(self) -> None:
        """An admitted request finished."""
        self.in_flight -= 1

    def bill(self, usd: float) -> None:
        """Add a completed request's cost to the spend."""
        self.spend_usd += usd


class Latency:
    """Each answer's delay before its first byte: ``ttft_s``, or lognormal (seeded).

    ``shape="lognormal"``: ``exp(N(mu, sigma))`` with ``mu = ln(median_s)`` and ``sigma`` such
    that the 99th percentile is ``p99_s`` (median 1 s, p99 10 s: sigma 0.99, mean 1.63 s).
    """

    def __init__(
        self,
        ttft_s: float,
        *,
        shape: str = "fixed",
        median_s: float = 1.0,
        p99_s: float = 10.0,
        seed: int = 0,
    ) -> None:
        if shape not in LATENCY_SHAPES:
            raise ConfigurationError(f"latency must be one of {LATENCY_SHAPES}, got {shape!r}")
        if shape == "lognormal" and not 0 < median_s <= p99_s:
            raise ConfigurationError("latency_median_s must be > 0 and <= latency_p99_s")
        self.ttft_s = ttft_s
        self.shape = shape
        self.mu = math.log(median_s) if median_s > 0 else 0.0
        self.sigma = math.log(p99_s / median_s) / _Z99 if median_s > 0 else 0.0
        self._rng = random.Random(f"latency-{seed}")

    def mean_s(self) -> float:
        """The mean delay."""
        if self.shape == "fixed":
            return self.ttft_s
        return self.ttft_s + math.exp(self.mu + self.sigma**2 / 2)

    def draw(self) -> float:
        """One answer's delay in seconds."""
        if self.shape == "fixed":
            return self.ttft_s
        return self.ttft_s + self._rng.lognormvariate(self.mu, self.sigma)


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
    """USD cost of one response's usage (``docs/reference/kimi-chat-completions-reference.md``,
    ``ChatUsage`` billing rules).

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
