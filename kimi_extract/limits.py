"""Client-side limits: concurrency, RPM and TPM, an adaptive send rate, and server-asked pauses.

``Limiter`` gates every HTTP attempt (first tries and retries alike):

- **Concurrency**: at most ``concurrency`` requests in flight. It starts lower (slow start: 32,
  one more slot per answer, so doubling every round trip, while no 429
  arrives) so a run never opens with a burst the server rejects.
- **RPM / TPM**: a sliding 60-second log of sends; a request waits until the last 60 s hold fewer
  than ``rpm`` requests and at most ``tpm`` tokens with it. Its tokens are estimated before
  sending (prompt estimate + expected completion, the running mean of observed completions) and
  corrected to the real usage when the answer arrives. So no 60-second window ever exceeds a
  configured limit. Sends are also paced at ``rpm / 60`` per second (bursts up to one second's
  worth) so they spread over the window instead of front-loading it.
- **Adaptive rate** (CUBIC, as in botocore's adaptive retry mode): a 429
  ``rate_limit_reached_error`` / ``engine_overloaded_error`` cuts the send rate to 70 % of the
  rate it was measured at and then grows it back along a cubic curve towards (and past) the old
  maximum. Kimi's 429 messages name the limit that was hit ("max organization concurrency: 50",
  "max RPM: 3000", "max TPM: ..."); the limiter adopts it, so later sends stay under it.
  Throttles that arrive together (one burst of in-flight requests all refused) count as one
  congestion event: the rate and the window are cut at most once per ``CUT_EPOCH_S``. A 429
  naming a concurrency limit that our own in-flight count exceeded is fully explained: the limit
  is adopted and nothing else slows down (no cut, no pause of other senders).
- **Window**: after a throttle the in-flight window drops to what was in flight, then grows back
  by one slot per window's worth of answers (TCP-style congestion avoidance) up to the limit.
- **Pause**: when the server says how long to wait, every sender waits that long, not only the
  request that was told.

``adaptive=False`` turns off slow start, learned limits and the rate/window cuts; the configured
limits and server-asked pauses stay.

The clock and sleep are injectable so tests can check the windows on a simulated clock.

An *outer gate* (``OUTER_GATE``, set by ``kimi_extract.dask`` on workers) is passed after the
limiter's own checks by every ``Limiter`` created while it is set, for limits shared beyond one run.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

logger = logging.getLogger("kimi_extract")

WINDOW_S = 60.0
#: The lowest Kimi tier allows 50 concurrent requests: opening below that overshoots no tier.
SLOW_START = 32
BETA = 0.7  # botocore adaptive mode: multiplicative decrease
SCALE = 0.4  # botocore adaptive mode: cubic scale constant
MIN_RATE = 0.5  # requests per second; the adaptive rate never drops below this
CUT_EPOCH_S = 1.0  # throttles within this long of a cut are the same congestion event
DEFAULT_COMPLETION_GUESS = 512

_LIMIT_PATTERNS = {
    "concurrency": re.compile(r"max(?:imum)?\s+(?:organization\s+)?concurrency:?\s*(\d+)", re.I),
    "rpm": re.compile(r"max(?:imum)?\s+(?:organization\s+)?RPM:?\s*(\d+)", re.I),
    "tpm": re.compile(r"max(?:imum)?\s+(?:organization\s+)?TPM:?\s*(\d+)", re.I),
}


def limits_in_message(message: str) -> dict[str, int]:
    """The limits a Kimi 429 message names, e.g. ``{"rpm": 3000}``."""
    found = {}
    for name, pattern in _LIMIT_PATTERNS.items():
        match = pattern.search(message)
        if match:
            found[name] = int(match.group(1))
    return found


class OuterGate(Protocol):
    """A limit shared beyond one run; ``acquire`` returns a handle given back to ``release``."""

    async def acquire(self, tokens: int) -> Any: ...

    def release(self, handle: Any, actual_tokens: int | None) -> None: ...


#: The outer gate of every ``Limiter`` created while it is set (None: none).
OUTER_GATE: ContextVar[OuterGate | None] = ContextVar("kimi_extract_outer_gate", default=None)


@dataclass
class Permit:
    """One admitted request: when it was sent and the tokens charged for it."""

    sent_at: float
    entry: list[float]
    outer: Any = None


class Limiter:
    """See the module docstring. One per run; safe for many tasks of one event loop."""

    def __init__(
        self,
        *,
        concurrency: int,
        rpm: int | None = None,
        tpm: int | None = None,
        adaptive: bool = True,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        self.max_concurrency = concurrency
        self.rpm = rpm
        self.tpm = tpm
        self.adaptive = adaptive
        self.clock = clock
        self.sleep = sleep
        self.outer = OUTER_GATE.get()
        self.window_allowed = min(concurrency, SLOW_START) if adaptive else concurrency
        self.in_flight = 0
        self.peak_in_flight = 0
        self.pause_until = 0.0
        self.throttles = 0
        self.sends = 0
        self._log: deque[list[float]] = deque()  # [sent_at, tokens, in window]
        self._tokens_in_window = 0.0
        self._completion_mean = float(DEFAULT_COMPLETION_GUESS)
        self._completions_seen = 0
        # Adaptive send rate (requests/s); None means "not limited yet".
        self.rate: float | None = None
        self._w_max = 0.0
        self._last_throttle = 0.0
        self._last_cut = -math.inf
        self._window_credit = 0.0
        self._bucket = 1.0
        self._bucket_time = clock()
        self._slot_waiters: deque[asyncio.Future[None]] = deque()

    # -- public ----------------------------------------------------------------------------

    @property
    def concurrency(self) -> int:
        """The in-flight limit in force now (slow start and learned limits included)."""
        return max(1, min(self.max_concurrency, self.window_allowed))

    def estimate(self, prompt_tokens: int) -> int:
        """Tokens to charge before sending: prompt estimate + expected completion."""
        return int(prompt_tokens + self._completion_mean)

    def send_rate(self) -> float | None:
        """The current pacing rate in requests per second (None when unpaced)."""
        rates = [r for r in (self.rate, self.rpm / WINDOW_S if self.rpm else None) if r]
        return min(rates) if rates else None

    async def acquire(self, tokens: int) -> Permit:
        """Wait until a request carrying ``tokens`` may be sent; the caller must ``release``.

        Check-and-take runs without an ``await`` in between, so on one event loop no lock is
        needed: waiting for a concurrency slot parks on a FIFO of futures, other waits sleep.
        """
        while True:
            wait = self._wait_needed(tokens)
            if wait <= 0:
                break
            if wait == math.inf:
                waiter = asyncio.get_running_loop().create_future()
                self._slot_waiters.append(waiter)
                try:
                    await waiter
                finally:
                    if not waiter.done():
                        waiter.cancel()
            else:
                await self.sleep(wait)
        now = self.clock()
        entry = [now, float(tokens), 1.0]  # sent_at, tokens, still in the window
        self._log.append(entry)
        self._tokens_in_window += tokens
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        self.sends += 1
        self._take_pacing_token(now)
        permit = Permit(sent_at=now, entry=entry)
        if self.outer is not None:
            try:
                permit.outer = await self.outer.acquire(tokens)
            except BaseException:
                self.release(permit, 0)
                raise
        return permit

    def release(self, permit: Permit, actual_tokens: int | None = None) -> None:
        """The request finished; correct its token charge to ``actual_tokens`` when known."""
        self.in_flight -= 1
        if actual_tokens is not None:
            if permit.entry[2]:
                self._tokens_in_window += actual_tokens - permit.entry[1]
            permit.entry[1] = float(actual_tokens)
        if self.outer is not None and permit.outer is not None:
            self.outer.release(permit.outer, actual_tokens)
        self._wake_slots()

    def observe_completion(self, completion_tokens: int) -> None:
        """Feed an observed completion size into the running mean used by ``estimate``."""
        self._completions_seen += 1
        self._completion_mean += (completion_tokens - self._completion_mean) / min(
            self._completions_seen, 50
        )

    def succeeded(self) -> None:
        """A request got an answer: grow the window and the adaptive rate."""
        if self.window_allowed < self.max_concurrency:
            if self.throttles == 0:  # slow start: one more slot per answer, 2x per round trip
                self.window_allowed = min(self.max_concurrency, self.window_allowed + 1)
            else:
                self._window_credit += 1 / self.window_allowed
                if self._window_credit >= 1:
                    self._window_credit = 0.0
                    self.window_allowed += 1
        if self.rate is not None:
            elapsed = self.clock() - self._last_throttle
            k = (self._w_max * (1 - BETA) / SCALE) ** (1 / 3)
            self.rate = max(MIN_RATE, SCALE * (elapsed - k) ** 3 + self._w_max)
            ceiling = self.rpm / WINDOW_S if self.rpm else None
            if ceiling is not None and self.rate >= ceiling:
                self.rate = None  # back at the configured pace: stop adapting
        self._wake_slots()

    def throttled(self, retry_after: float | None, message: str) -> None:
        """A 429 rate limit / overload: cut the rate, adopt named limits, pause if asked."""
        now = self.clock()
        self.throttles += 1
        learned = limits_in_message(message) if self.adaptive else {}
        if "concurrency" in learned:
            self.max_concurrency = min(self.max_concurrency, learned["concurrency"])
            if self.in_flight > learned["concurrency"]:
                # Our own excess explains it, and the adopted limit removes it: nothing to slow
                # down or pause (the refused request still waits the server's time to retry).
                logger.info("server limit learned from a 429: %s", learned)
                self._wake_slots()
                return
        if retry_after is not None:
            self.pause_until = max(self.pause_until, now + retry_after)
        if not self.adaptive:
            self._wake_slots()
            return
        if "rpm" in learned and (self.rpm is None or learned["rpm"] < self.rpm):
            self.rpm = learned["rpm"]
        if "tpm" in learned and (self.tpm is None or learned["tpm"] < self.tpm):
            self.tpm = learned["tpm"]
        if learned:
            logger.info("server limit learned from a 429: %s", learned)
        if now - self._last_cut >= CUT_EPOCH_S:
            self._last_cut = now
            self.window_allowed = max(1, min(self.window_allowed, self.in_flight))
            self._window_credit = 0.0
            current = self.rate or self._current_send_rate(now) or MIN_RATE
            self._w_max = current
            self.rate = max(MIN_RATE, current * BETA)
            self._last_throttle = now
        self._wake_slots()

    # -- internals -------------------------------------------------------------------------

    def _wake_slots(self) -> None:
        """Wake as many slot waiters as there are free slots (they re-check on waking)."""
        free = self.concurrency - self.in_flight
        while free > 0 and self._slot_waiters:
            waiter = self._slot_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                free -= 1

    def _current_send_rate(self, now: float) -> float:
        recent = [e for e in self._log if e[0] > now - 1.0]
        return float(len(recent))

    def _expire(self, now: float) -> None:
        while self._log and self._log[0][0] <= now - WINDOW_S:
            entry = self._log.popleft()
            entry[2] = 0.0
            self._tokens_in_window -= entry[1]

    def _take_pacing_token(self, now: float) -> None:
        rate = self.send_rate()
        if rate is None:
            return
        self._refill(now, rate)
        self._bucket -= 1.0

    def _refill(self, now: float, rate: float) -> None:
        capacity = max(1.0, rate)  # one second's worth of sends
        self._bucket = min(capacity, self._bucket + (now - self._bucket_time) * rate)
        self._bucket_time = now

    def _wait_needed(self, tokens: int) -> float:
        """Seconds to wait before this request may go (inf: wait for a release)."""
        now = self.clock()
        self._expire(now)
        waits = [self.pause_until - now]
        if self.in_flight >= self.concurrency:
            return math.inf
        if self.rpm is not None and len(self._log) >= self.rpm:
            waits.append(self._log[len(self._log) - self.rpm][0] + WINDOW_S - now)
        if self.tpm is not None and self._log and self._tokens_in_window + tokens > self.tpm:
            excess = self._tokens_in_window + tokens - self.tpm
            for sent_at, charged, _ in self._log:
                excess -= charged
                if excess <= 0:
                    waits.append(sent_at + WINDOW_S - now)
                    break
            else:
                waits.append(self._log[-1][0] + WINDOW_S - now)
        rate = self.send_rate()
        if rate is not None:
            self._refill(now, rate)
            if self._bucket < 1.0 - 1e-9:
                waits.append((1.0 - self._bucket) / rate)
        wait = max(waits)
        # Sleep a hair past the boundary so float rounding cannot leave it a hair short.
        return wait + 1e-6 if wait > 0 else wait


#: Prompt tokens are estimated before sending (``kimi_extract.tokens``); the budget reserves this
#: much more, for tokenizer differences, so a billed prompt never outgrows its reservation.
PROMPT_MARGIN = 1.10


@dataclass
class Reservation:
    """One attempt's worst case, held against the budget while it is in flight."""

    tokens: int
    cost: float


class Budget:
    """A run's hard spending cap in USD and/or tokens, checked before every attempt is sent.

    Each attempt reserves its worst case before it is sent: its prompt (estimated, plus
    ``PROMPT_MARGIN``) and its whole ``max_completion_tokens``, priced at the dearest input rate
    (regular, cached or cache write) and the output rate. It is sent only when
    ``spent + reserved by attempts in flight + its worst case`` stays within every cap; otherwise
    it waits for attempts in flight to settle, and when nothing is in flight and it still does not
    fit, the budget is exhausted (``reserve`` returns None). When the answer arrives the reservation
    is replaced by the billed usage, which can only be lower. So the billed total never exceeds
    ``max_tokens`` / ``max_cost`` (as long as the server bills no more than the request allows).
    """

    def __init__(
        self,
        *,
        max_cost: float | None,
        max_tokens: int | None,
        pricing: Any = None,
        separate_cache_writes: bool = True,
        cache_ttl: str = "5m",
    ) -> None:
        self.max_cost = max_cost
        self.max_tokens = max_tokens
        self.pricing = pricing
        self.separate_cache_writes = separate_cache_writes
        self.cache_ttl = cache_ttl
        self.spent_cost = 0.0
        self.spent_tokens = 0
        self.reserved_cost = 0.0
        self.reserved_tokens = 0
        self.in_flight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    def worst_case(self, prompt_tokens: int, completion_tokens: int) -> Reservation:
        """The most an attempt with this prompt estimate and completion cap can bill."""
        prompt = math.ceil(prompt_tokens * PROMPT_MARGIN)
        cost = 0.0
        pricing = self.pricing
        if pricing is not None:
            input_rate = max(pricing.input, pricing.cached_input)
            if self.separate_cache_writes:
                write = pricing.cache_write
                if self.cache_ttl == "1h" and pricing.cache_write_1h is not None:
                    write = pricing.cache_write_1h
                input_rate = max(input_rate, write)
            cost = (prompt * input_rate + completion_tokens * pricing.output) / 1_000_000
        return Reservation(tokens=prompt + completion_tokens, cost=cost)

    def fits_alone(self, worst: Reservation) -> bool:
        """Whether ``worst`` fits in an untouched budget (False: no run could ever send it)."""
        return self._fits(worst, 0, 0.0)

    def describe(self) -> str:
        """The caps, for messages: ``max_tokens=20,000, max_cost=$0.05``."""
        parts = []
        if self.max_tokens is not None:
            parts.append(f"max_tokens={self.max_tokens:,}")
        if self.max_cost is not None:
            parts.append(f"max_cost=${self.max_cost:g}")
        return ", ".join(parts)

    def _fits(self, worst: Reservation, tokens: int, cost: float) -> bool:
        if self.max_tokens is not None and tokens + worst.tokens > self.max_tokens:
            return False
        return not (self.max_cost is not None and cost + worst.cost > self.max_cost + 1e-12)

    async def reserve(self, worst: Reservation) -> Reservation | None:
        """Hold ``worst`` for one attempt, waiting for attempts in flight to settle if needed.

        Returns None when it does not fit even with nothing in flight (the budget is spent).
        """
        while True:
            committed_tokens = self.spent_tokens + self.reserved_tokens
            committed_cost = self.spent_cost + self.reserved_cost
            if self._fits(worst, committed_tokens, committed_cost):
                self.reserved_tokens += worst.tokens
                self.reserved_cost += worst.cost
                self.in_flight += 1
                return worst
            if self.in_flight == 0:
                return None
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if not waiter.done():
                    waiter.cancel()

    def settle(self, reservation: Reservation, usage: Any) -> None:
        """Replace a reservation by the attempt's billed usage (a ``Usage``; None: unknown)."""
        self.reserved_tokens -= reservation.tokens
        self.reserved_cost -= reservation.cost
        self.in_flight -= 1
        if usage is not None:
            self.spent_tokens += max(0, usage.prompt_tokens) + max(0, usage.completion_tokens)
            if usage.cost == usage.cost:  # not NaN
                self.spent_cost += max(0.0, usage.cost)
        waiters, self._waiters = self._waiters, deque()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
