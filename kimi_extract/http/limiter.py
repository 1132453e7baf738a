"""Client-side limits: concurrency, RPM and TPM, an adaptive send rate, and server-asked pauses.

``Limiter`` gates every HTTP attempt (first tries and retries alike):

- **Concurrency**: at most ``concurrency`` requests in flight. It starts lower (slow start: 8
  slots, doubling every ``GROWTH_DOUBLING_S`` of time and growing by one slot per answer, while no
  429 that signals a limit has arrived), so a run never opens with a burst the server rejects and
  yet reaches a large concurrency within a fraction of a second, whatever the latency.
- **RPM / TPM**: sends are paced at ``PACING_SHARE`` of ``rpm / 60`` requests and ``tpm / 60``
  tokens per second, with a burst of at most ``PACING_BURST_S`` worth, so they spread evenly over
  any window the server counts in (sliding, fixed or a token bucket) instead of front-loading it.
  A sliding 60-second log of sends also holds every 60 s to ``rpm`` requests and ``tpm`` tokens.
  A request's tokens are estimated before sending (prompt estimate + expected completion, the
  running mean of observed completions) and corrected to the real usage when the answer arrives.
- **Learned limits**: Kimi's 429 messages name the limit that was hit ("max organization
  concurrency: 50", "max RPM: 3000", "max TPM: ..."). A named limit below the one in force is
  adopted at once (a learned concurrency also ends the slow start): the excess that caused the
  429 was ours, and the adopted limit removes it, so nothing else slows down. A 429 naming a limit
  we adopted while bursting above it, within a window of adopting it, is the rest of that burst
  still in the server's window: every sender waits the time the server states (``LEFTOVER_WAIT_S``
  when that is "1 seconds", Kimi's rounding of any shorter wait), nothing is cut.
  Otherwise a 429 naming a limit we are clearly below (under ``BELOW_LIMIT`` of it, measured over
  the last moments) is not a rate signal: only the refused request waits.
- **Adaptive rate** (CUBIC, as in botocore's adaptive retry mode): a 429 naming a limit we have
  kept for a whole window (someone else shares the quota), or unnamed 429s
  (``engine_overloaded_error``, a bare message) that are the majority of recent answers, cut the
  send rate to 70 % of the rate it was measured at and then grow it back along a cubic curve
  towards (and past) the old maximum. Throttles that arrive together count as one congestion
  event: the rate and the window are cut at most once per ``CUT_EPOCH_S``. After a cut the
  in-flight window drops to what was in flight and grows back by one slot per window's worth of
  answers (TCP-style congestion avoidance) up to the limit. Unnamed 429s at a steady share below
  that (random refusals) cut nothing.
- **Pause**: on a congestion event the time the server asked for is waited by every sender, not
  only the request that was told.

``adaptive=False`` turns off slow start, learned limits and the rate/window cuts; the configured
limits stay, and every server-asked wait pauses every sender.

``bound_by()`` says which limit held sends back most often and at what rate (the run summary and
the progress bar show it). Every wait reads and sleeps on a ``clock.Clock`` (``clock=``), so tests
can check the windows on a simulated clock.

An *outer gate* (``OUTER_GATE``, set by ``kimi_extract.dask`` on workers) is passed after the
limiter's own checks by every ``Limiter`` created while it is set, for limits shared beyond one run.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import Counter, deque
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

from ..kimi import LIMIT_MESSAGES, RATE_WINDOW_S
from .clock import Clock, default_clock

logger = logging.getLogger("kimi_extract")

WINDOW_S = RATE_WINDOW_S
#: Slots open at the start; far below the lowest Kimi tier's 50, so the opening never overshoots.
SLOW_START = 8
#: While no 429 signals a limit, the window doubles this often (and grows by one per answer).
GROWTH_DOUBLING_S = 0.05
BETA = 0.7  # botocore adaptive mode: multiplicative decrease
SCALE = 0.4  # botocore adaptive mode: cubic scale constant
MIN_RATE = 0.5  # requests per second; the adaptive rate never drops below this
CUT_EPOCH_S = 1.0  # throttles within this long of a cut are the same congestion event
DEFAULT_COMPLETION_GUESS = 512
#: RPM/TPM pacing: this share of the limit, so jitter on the way never tips a window over it...
PACING_SHARE = 0.99
#: ...and bursts of at most this many seconds' worth (at least one request).
PACING_BURST_S = 0.05
#: After a 429 that is the rest of our own burst and asks for at most a second (Kimi rounds up
#: to whole seconds), every sender waits this long, not the whole second.
LEFTOVER_WAIT_S = 0.25
#: A 429 naming a limit while our recent rate is below this share of it is not a rate signal.
BELOW_LIMIT = 0.8
#: Unnamed 429s cut the rate only when their share of recent answers (decaying mean, weight
#: ``REFUSAL_WEIGHT`` per answer) exceeds this: random refusals at a steady lower share do not.
REFUSAL_SHARE = 0.6
REFUSAL_WEIGHT = 0.02

_LABELS = {"concurrency": "concurrency", "rpm": "RPM", "tpm": "TPM"}


def limits_in_message(message: str) -> dict[str, int]:
    """The limits a Kimi 429 message names, e.g. ``{"rpm": 3000}``."""
    found = {}
    for name, pattern in LIMIT_MESSAGES.items():
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


class _Pacer:
    """A token bucket: ``rate`` units per second, at most ``capacity`` saved up; may go negative
    (a request larger than the bucket goes when the bucket is full, then the next ones wait)."""

    def __init__(self, rate: float, now: float, *, full: bool) -> None:
        self.rate = rate
        self.capacity = max(1.0, rate * PACING_BURST_S)
        # Not full: a limit just learned from a burst that emptied the server's own bucket; the
        # first sends wait a burst's worth, so the server's bucket is not left at the edge.
        self.level = self.capacity if full else -self.capacity
        self.time = now

    def wait(self, now: float, amount: float) -> float:
        if self.level < self.capacity:  # a credit above it (an over-estimate returned) stays
            self.level = min(self.capacity, self.level + (now - self.time) * self.rate)
        self.time = now
        need = min(amount, self.capacity)
        return 0.0 if self.level >= need - 1e-9 else (need - self.level) / self.rate

    def take(self, amount: float) -> None:
        self.level -= amount


class Limiter:
    """See the module docstring. One per run; safe for many tasks of one event loop."""

    def __init__(
        self,
        *,
        concurrency: int,
        rpm: int | None = None,
        tpm: int | None = None,
        adaptive: bool = True,
        clock: Clock | None = None,
    ) -> None:
        self.max_concurrency = concurrency
        self.rpm = rpm
        self.tpm = tpm
        self.adaptive = adaptive
        timer = clock or default_clock()
        self.clock = timer.now
        self.sleep = timer.sleep
        self.outer = OUTER_GATE.get()
        now = self.clock()
        self.window_allowed = min(concurrency, SLOW_START) if adaptive else concurrency
        #: Slow start by time: from when the window first fills, until a 429 signals a limit.
        self._growing = adaptive and self.window_allowed < concurrency
        self._growth_start: float | None = None
        self._growth_sleepers = 0
        self.in_flight = 0
        self.peak_in_flight = 0
        self.pause_until = 0.0
        self.throttles = 0
        self._sends = 0  # for the run rate in bound_by()
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
        self._refusals = 0.0  # decaying share of recent answers that were unnamed 429s
        #: Where each limit came from ("set" or "learned") and since when it has been kept.
        self._source = {name: "set" for name in ("concurrency", "rpm", "tpm")}
        self._kept_since = {"rpm": now, "tpm": now}
        #: Whether we were sending above a limit when we learned it (so the server's window may
        #: still hold that burst for up to a window).
        self._burst_before = {"rpm": False, "tpm": False}
        self._request_pacer = self._new_pacer(rpm, now, full=True)
        self._token_pacer = self._new_pacer(tpm, now, full=True)
        self._rate_pacer: _Pacer | None = None
        self._held: Counter[str] = Counter()
        self._first_send: float | None = None
        self._last_send = 0.0
        self._slot_waiters: deque[asyncio.Future[None]] = deque()

    # -- public ----------------------------------------------------------------------------

    @property
    def concurrency(self) -> int:
        """The in-flight limit in force now (slow start and learned limits included)."""
        return max(1, min(self.max_concurrency, self._window(self.clock())))

    def estimate(self, prompt_tokens: int) -> int:
        """Tokens to charge before sending: prompt estimate + expected completion."""
        return int(prompt_tokens + self._completion_mean)

    def send_rate(self) -> float | None:
        """The current pacing rate in requests per second (None when unpaced)."""
        paced = self.rpm * PACING_SHARE / WINDOW_S if self.rpm else None
        rates = [r for r in (self.rate, paced) if r]
        return min(rates) if rates else None

    async def acquire(self, tokens: int) -> Permit:
        """Wait until a request carrying ``tokens`` may be sent; the caller must ``release``.

        Check-and-take runs without an ``await`` in between, so on one event loop no lock is
        needed: waiting for a concurrency slot parks on a FIFO of futures, other waits sleep.
        """
        held: str | None = None
        while True:
            wait, cause = self._wait_needed(tokens)
            if wait <= 0:
                break
            held = held or cause
            if wait == math.inf:
                waiter = asyncio.get_running_loop().create_future()
                self._slot_waiters.append(waiter)
                try:
                    await waiter
                finally:
                    if not waiter.done():
                        waiter.cancel()
            elif cause == "growth":
                self._growth_sleepers += 1
                try:
                    await self.sleep(wait)
                finally:
                    self._growth_sleepers -= 1
            else:
                await self.sleep(wait)
        if held is not None and held != "growth":
            self._held[held] += 1
        now = self.clock()
        if self._first_send is None:
            self._first_send = now
        self._last_send = now
        entry = [now, float(tokens), 1.0]  # sent_at, tokens, still in the window
        self._log.append(entry)
        self._tokens_in_window += tokens
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        self._sends += 1
        if self._request_pacer is not None:
            self._request_pacer.take(1.0)
        if self._token_pacer is not None:
            self._token_pacer.take(tokens)
        if self._rate_pacer is not None:
            self._rate_pacer.take(1.0)
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
            if self._token_pacer is not None:
                self._token_pacer.take(actual_tokens - permit.entry[1])
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
        self._refusals *= 1 - REFUSAL_WEIGHT
        if self.window_allowed < self.max_concurrency:
            if self._growing or self.throttles == 0:  # slow start: one more slot per answer
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
            ceiling = self.rpm * PACING_SHARE / WINDOW_S if self.rpm else None
            if ceiling is not None and self.rate >= ceiling:
                self.rate = None  # back at the configured pace: stop adapting
                self._rate_pacer = None
            elif self._rate_pacer is not None:
                self._rate_pacer.rate = self.rate
        self._wake_slots()

    def throttled(self, retry_after: float | None, message: str) -> None:
        """A 429 rate limit / overload: adopt named limits; pause or cut only for a rate signal.

        See the module docstring for how a 429 is read.
        """
        now = self.clock()
        self.throttles += 1
        if not self.adaptive:
            if retry_after is not None:
                self.pause_until = max(self.pause_until, now + retry_after)
            self._wake_slots()
            return
        learned = limits_in_message(message)
        if learned:
            verdict = self._read_named(learned, now)
        else:
            self._refusals += REFUSAL_WEIGHT * (1 - self._refusals)
            verdict = "congestion" if self._refusals > REFUSAL_SHARE else "noise"
        if verdict == "leftover" and retry_after is not None:
            # Kimi rounds its wait up to whole seconds, so "1 seconds" means "within a second":
            # everyone else waits only a moment before trying again.
            wait = retry_after if retry_after > 1.0 else min(retry_after, LEFTOVER_WAIT_S)
            self.pause_until = max(self.pause_until, now + wait)
        elif verdict == "congestion":
            self._growing = False
            if retry_after is not None:
                self.pause_until = max(self.pause_until, now + retry_after)
            self._cut(now)
        self._wake_slots()

    def bound_by(self) -> str | None:
        """Which limit held sends back most often, and the send rate over the run, e.g.
        ``"RPM 3,000 (learned from a 429): 49.5 requests/s"``; None when nothing held them."""
        cause = self._main_cause()
        if cause is None:
            return None
        return f"{self._describe(cause)}: {self._run_rate():,.1f} requests/s"

    def binding(self) -> str | None:
        """A short form of ``bound_by`` for the progress bar, e.g. ``"RPM 3,000 (learned)"``."""
        cause = self._main_cause()
        return None if cause is None else self._describe(cause, short=True)

    # -- internals -------------------------------------------------------------------------

    def _main_cause(self) -> str | None:
        if self._held:
            return self._held.most_common(1)[0][0]
        # Nothing waited, but the requests filled every slot: the concurrency bound the run.
        return "concurrency" if self.peak_in_flight >= self.max_concurrency else None

    def _describe(self, cause: str, short: bool = False) -> str:
        if cause == "concurrency":
            if self.window_allowed < self.max_concurrency:
                return "concurrency window (adaptive)"
            value, name = self.max_concurrency, "concurrency"
        elif cause in ("rpm", "tpm"):
            value, name = (self.rpm if cause == "rpm" else self.tpm) or 0, cause
        elif cause == "rate":
            return "adaptive rate (after 429s)"
        else:
            return "server-asked pauses"
        source = self._source[name]
        suffix = "" if source == "set" else (" (learned)" if short else " (learned from a 429)")
        return f"{_LABELS[name]} {value:,}{suffix}"

    def _run_rate(self) -> float:
        if self._first_send is None or self._sends < 2 or self._last_send <= self._first_send:
            return 0.0
        return (self._sends - 1) / (self._last_send - self._first_send)

    @staticmethod
    def _new_pacer(limit: int | None, now: float, *, full: bool) -> _Pacer | None:
        if limit is None:
            return None
        return _Pacer(limit * PACING_SHARE / WINDOW_S, now, full=full)

    def _window(self, now: float) -> int:
        """The in-flight window now: slow start's time growth included."""
        if self._growing and self._growth_start is not None:
            doublings = min(40.0, (now - self._growth_start) / GROWTH_DOUBLING_S)
            grown = SLOW_START * 2**doublings
            if grown >= self.max_concurrency:
                self._growing = False
                self.window_allowed = self.max_concurrency
            elif grown > self.window_allowed:
                self.window_allowed = int(grown)
        return self.window_allowed

    def _recent_rate(self, now: float, requests_per_s: float | None, tokens: bool) -> float:
        """Our rate of admitted sends (requests or tokens per second; sends refused with a 429
        carry 0 tokens and do not count) over the last moments: the time the limit takes to
        allow 20 requests (2 s for tokens), within 2 s .. one window."""
        span = 2.0 if requests_per_s is None else 20 / max(requests_per_s, 1e-9)
        span = min(WINDOW_S, max(2.0, span))
        total = 0.0
        for entry in reversed(self._log):
            if entry[0] <= now - span:
                break
            if entry[1] > 0:
                total += entry[1] if tokens else 1.0
        return total / span

    def _read_named(self, learned: dict[str, int], now: float) -> str:
        """How to read a 429 that names limits: "adopted", "noise", "leftover" or "congestion"."""
        verdicts = []
        if "concurrency" in learned:
            limit = learned["concurrency"]
            if limit < self.max_concurrency:
                self.max_concurrency = limit
                self.window_allowed = limit
                self._source["concurrency"] = "learned"
                self._growing = False
                logger.info("server limit learned from a 429: concurrency %d", limit)
            if self.in_flight > limit:
                verdicts.append("adopted")  # our own excess explains it
            elif self.in_flight < BELOW_LIMIT * limit:
                verdicts.append("noise")
            else:
                verdicts.append("congestion")  # someone else uses the org's slots too
        for name in ("rpm", "tpm"):
            if name not in learned:
                continue
            limit = learned[name]
            current = self.rpm if name == "rpm" else self.tpm
            per_s = limit / WINDOW_S
            recent = self._recent_rate(now, per_s if name == "rpm" else None, name == "tpm")
            if current is None or limit < current:
                self._adopt(name, limit, now)
                self._burst_before[name] = recent >= BELOW_LIMIT * per_s
                verdicts.append("adopted")
            elif self._burst_before[name] and now - self._kept_since[name] < WINDOW_S:
                verdicts.append("leftover")  # the server still counts our burst from before
            elif recent < BELOW_LIMIT * per_s:
                verdicts.append("noise")
            else:
                verdicts.append("congestion")
        for verdict in ("congestion", "leftover", "adopted"):
            if verdict in verdicts:
                return verdict
        return "noise"

    def _adopt(self, name: str, limit: int, now: float) -> None:
        if name == "rpm":
            self.rpm = limit
            self._request_pacer = self._new_pacer(limit, now, full=False)
        else:
            self.tpm = limit
            self._token_pacer = self._new_pacer(limit, now, full=False)
        self._source[name] = "learned"
        self._kept_since[name] = now
        logger.info("server limit learned from a 429: %s %d", _LABELS[name], limit)

    def _cut(self, now: float) -> None:
        if now - self._last_cut < CUT_EPOCH_S:
            return
        self._last_cut = now
        self.window_allowed = max(1, min(self.window_allowed, self.in_flight))
        self._window_credit = 0.0
        current = self.rate or self._current_send_rate(now) or MIN_RATE
        self._w_max = current
        self.rate = max(MIN_RATE, current * BETA)
        self._rate_pacer = _Pacer(self.rate, now, full=False)
        self._last_throttle = now

    def _wake_slots(self) -> None:
        """Wake as many slot waiters as there are free slots (they re-check on waking)."""
        if not self._slot_waiters and not self._growing:
            return  # nobody to wake, and the window does not move with time: nothing to do
        free = self.concurrency - self.in_flight
        while free > 0 and self._slot_waiters:
            waiter = self._slot_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                free -= 1

    def _current_send_rate(self, now: float) -> float:
        count = 0
        for entry in reversed(self._log):
            if entry[0] <= now - 1.0:
                break
            count += 1
        return float(count)

    def _expire(self, now: float) -> None:
        while self._log and self._log[0][0] <= now - WINDOW_S:
            entry = self._log.popleft()
            entry[2] = 0.0
            self._tokens_in_window -= entry[1]

    def _wait_needed(self, tokens: int) -> tuple[float, str]:
        """Seconds to wait before this request may go (inf: wait for a release), and why."""
        now = self.clock()
        self._expire(now)
        waits = [(self.pause_until - now, "pause")]
        window = self._window(now)
        if self.in_flight >= min(self.max_concurrency, window):
            if not self._growing or window >= self.max_concurrency:
                return math.inf, "concurrency"
            if self._growth_start is None:  # time growth starts once the window is full
                self._growth_start = now - GROWTH_DOUBLING_S * math.log2(window / SLOW_START)
            # Sleep until the growing window has a slot for this waiter (and those ahead of it).
            wanted = self.in_flight + 1 + self._growth_sleepers
            when = self._growth_start + GROWTH_DOUBLING_S * math.log2(wanted / SLOW_START)
            return max(when - now, 1e-3), "growth"
        if self.rpm is not None and len(self._log) >= self.rpm:
            waits.append((self._log[len(self._log) - self.rpm][0] + WINDOW_S - now, "rpm"))
        if self.tpm is not None and self._log and self._tokens_in_window + tokens > self.tpm:
            excess = self._tokens_in_window + tokens - self.tpm
            for sent_at, charged, _ in self._log:
                excess -= charged
                if excess <= 0:
                    waits.append((sent_at + WINDOW_S - now, "tpm"))
                    break
            else:
                waits.append((self._log[-1][0] + WINDOW_S - now, "tpm"))
        if self._request_pacer is not None:
            waits.append((self._request_pacer.wait(now, 1.0), "rpm"))
        if self._token_pacer is not None:
            waits.append((self._token_pacer.wait(now, tokens), "tpm"))
        if self._rate_pacer is not None:
            waits.append((self._rate_pacer.wait(now, 1.0), "rate"))
        wait, cause = max(waits)
        # Sleep a hair past the boundary so float rounding cannot leave it a hair short.
        return (wait + 1e-6 if wait > 0 else wait), cause
