"""Client-side limits: concurrency, RPM and TPM, the opening, limits learned from 429s, an
adaptive send rate, and server-asked pauses.

``Limiter`` gates every HTTP attempt (first tries and retries alike):

- **Concurrency**: at most ``concurrency`` requests in flight.
- **RPM / TPM**: sends are paced at ``PACING_SHARE`` of ``rpm / 60`` requests and ``tpm / 60``
  tokens per second (``pacing.Pacer``), so they spread evenly over any window the server counts
  in (sliding, fixed or a token bucket) instead of front-loading it; and a trailing log of sends
  (``pacing.SendLog``) holds every window of the limit's length to its share of the limit (60 s
  and the whole limit, Kimi's window, unless a shorter one is learned). A request's tokens are
  estimated before sending (prompt estimate + expected completion, the running mean of observed
  completions) and corrected to the real usage when the answer arrives; a refused request hands
  its reservation back, and a pacer never holds more than its capacity.
- **The opening** (``adaptive``, nothing known yet): until the first answer, sends go at most
  ``OPENING_RATE`` per second after ``OPENING_BURST`` at once (measured in
  benchmarks/bench_rate_gateway.py: the first 429 of a server that allows less comes back before
  more than a few more have gone). After the first answer the in-flight window starts at what is
  in flight, grows by one per answer and doubles every ``GROWTH_DOUBLING_S`` of *seen* time: time
  counts only as the event loop delivers responses, at most ``SEEN_STEP_S`` per response, so a
  loop too busy to read the 429s waiting for it does not let the window grow meanwhile. The first
  429 that signals a limit ends the opening and the growth.
- **Learned limits**: Kimi's 429 messages name the limit that was hit ("max organization
  concurrency: 50", "max RPM: 3000", "max TPM: ..."). A named limit below the one in force is
  adopted at once for every later send (sends waiting for their turn re-check it): the excess that
  caused the 429 was ours. Its window is Kimi's 60 s unless the server shows a shorter one: the
  longest window our accepted sends already fill (a server counting in 60 s would not have
  refused), or the wait the server states when it is shorter than the log implies. When our own
  burst showed how much a window takes, that much may go at once later (``BURST_SHARE`` of it).
  A lower limit thus applies to the future: what the log still holds is owed only as long as the
  server says it is owed. A 429 naming a limit we adopted while bursting above it, within a
  window of adopting it, is the rest of that burst in the server's window: every sender waits the
  time stated (``LEFTOVER_WAIT_S`` when that is "1 seconds", Kimi's rounding of any shorter wait).
  A 429 naming a limit we are clearly below (under ``BELOW_LIMIT`` of it) is not a rate signal:
  only the refused request waits. One naming a limit we have kept for a window, at its rate, is
  congestion (someone else shares the quota): see below.
- **429s that name nothing** and congestion: ``congestion.Congestion`` tells rate 429s from
  random refusals by their pattern, cuts the rate (CUBIC on the delivered rate) and the in-flight
  window, pauses every sender and probes when the server has no room at all.

``adaptive=False`` turns off the opening, learned limits and the rate/window cuts; the configured
limits stay, and every server-asked wait pauses every sender.

``bound_by()`` says which limit held sends back most often, where it came from, the send rate and
how many requests were refused (the run summary and the progress bar show it). Every wait reads
and sleeps on a ``clock.Clock`` (``clock=``), so tests can check the windows on a simulated clock.

An *outer gate* (``OUTER_GATE``, set by ``kimi_extract.dask`` on workers) is passed after the
limiter's own checks by every ``Limiter`` created while it is set, for limits shared beyond one run.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import Counter, deque
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..kimi import LIMIT_MESSAGES
from .clock import Clock, default_clock
from .congestion import BEFORE_SENDS, SHARE_SENDS, Congestion, Share
from .pacing import MAX_WINDOW_S, MIN_WINDOW_S, Pacer, Send, SendLog

logger = logging.getLogger("kimi_extract")

WINDOW_S = MAX_WINDOW_S
#: The opening: this many at once, then at most ``OPENING_RATE`` per second until an answer.
OPENING_BURST = 8
OPENING_RATE = 50.0
#: Slots the in-flight window keeps at least when the opening ends.
SLOW_START = 8
#: After the first answer, while no 429 signals a limit, the window doubles this often (seen
#: time) and grows by one per answer.
GROWTH_DOUBLING_S = 0.05
#: Seen time: at most this much per response the loop delivers.
SEEN_STEP_S = 0.025
DEFAULT_COMPLETION_GUESS = 512
#: RPM/TPM pacing: this share of the limit, so jitter on the way never tips a window over it...
PACING_SHARE = 0.99
#: ...and bursts of at most this many seconds' worth (at least one request)...
PACING_BURST_S = 0.05
#: ...or, when a burst of ours showed what a learned window takes, this share of that burst.
BURST_SHARE = 0.9
#: A learned window is counted this much longer in the log: twice the time a 429 took to come
#: back, within these bounds.
EDGE_MIN_S, EDGE_MAX_S = 0.1, 0.5
#: After a 429 that is the rest of our own burst and asks for at most a second (Kimi rounds up
#: to whole seconds), every sender waits this long, not the whole second.
LEFTOVER_WAIT_S = 0.25
#: The delivered rate is measured over at least this long (a cut in the opening's first moments
#: reads the rate of the few sends judged so far).
DELIVERY_FLOOR_S = 0.25
#: A 429 naming a limit while our recent rate is below this share of it is not a rate signal.
BELOW_LIMIT = 0.8

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
    send: Send
    outer: Any = None
    refused: bool = field(default=False)


@dataclass
class _Limit:
    """A per-minute limit on requests or tokens: its value, where it came from, its window."""

    name: str
    value: int | None
    source: str = "set"  # "set" or "learned"
    since: float = 0.0  # when it was adopted
    window_s: float = MAX_WINDOW_S
    how: str = ""  # how the window was learned ("" when it is the default)
    burst_before: bool = False  # we were above it when we learned it
    refused_at: float = -math.inf  # the last 429 naming it
    pacer: Pacer | None = None


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
        self.adaptive = adaptive
        timer = clock or default_clock()
        self.clock = timer.now
        self.sleep = timer.sleep
        self.outer = OUTER_GATE.get()
        now = self.clock()
        self.log = SendLog()
        self.limits = {"rpm": _Limit("rpm", rpm, since=now), "tpm": _Limit("tpm", tpm, since=now)}
        for limit in self.limits.values():
            limit.pacer = self._pacer(limit, now, full=True, burst=None)
        self._concurrency_source = "set"
        self.window_allowed = concurrency
        #: The opening: paced until the first answer, then the window grows until a 429 signals.
        self._opening = adaptive
        self._opening_pacer = Pacer(OPENING_RATE, OPENING_BURST, now, full=True)
        self._growing = adaptive
        self._growth_base = float(SLOW_START)
        self._seen = 0.0  # seen time since the growth started
        self._last_event = now
        self.congestion = Congestion()
        self.in_flight = 0
        self._refused_in_flight = 0
        self.peak_in_flight = 0
        self.pause_until = 0.0
        self.throttles = 0
        self._sends = 0
        self._completion_mean = float(DEFAULT_COMPLETION_GUESS)
        self._completions_seen = 0
        self._held: Counter[str] = Counter()
        self._first_send: float | None = None
        self._last_send = 0.0
        self._slot_waiters: deque[asyncio.Future[None]] = deque()

    # -- the limits in force ----------------------------------------------------------------

    @property
    def rpm(self) -> int | None:
        """The RPM limit in force (set or learned)."""
        return self.limits["rpm"].value

    @property
    def tpm(self) -> int | None:
        """The TPM limit in force (set or learned)."""
        return self.limits["tpm"].value

    @property
    def rate(self) -> float | None:
        """The adaptive send rate after 429s (requests/s), None when not cut."""
        return self.congestion.rate

    @property
    def concurrency(self) -> int:
        """The in-flight limit in force now (the growing window and learned limits included)."""
        learned = self.congestion.window
        window = self._window() if learned is None else min(learned, self._window())
        return max(1, min(self.max_concurrency, window))

    def estimate(self, prompt_tokens: int) -> int:
        """Tokens to charge before sending: prompt estimate + expected completion."""
        return int(prompt_tokens + self._completion_mean)

    def send_rate(self) -> float | None:
        """The current pacing rate in requests per second (None when unpaced)."""
        paced = self.rpm * PACING_SHARE / WINDOW_S if self.rpm else None
        rates = [r for r in (self.congestion.rate, paced) if r]
        return min(rates) if rates else None

    # -- the gate ---------------------------------------------------------------------------

    async def acquire(self, tokens: int) -> Permit:
        """Wait until a request carrying ``tokens`` may be sent; the caller must ``release``.

        Check-and-take runs without an ``await`` in between, so on one event loop no lock is
        needed: waiting for a concurrency slot parks on a FIFO of futures, other waits sleep, and
        every waiter checks again when it wakes (a limit learned meanwhile holds it).
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
            else:
                await self.sleep(wait)
        if held is not None and held != "opening":
            self._held[held] += 1
        now = self.clock()
        if self._first_send is None:
            self._first_send = now
        self._last_send = now
        send = self.log.add(now, tokens)
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        self._sends += 1
        for name, amount in (("rpm", 1.0), ("tpm", float(tokens))):
            pacer = self.limits[name].pacer
            if pacer is not None:
                pacer.take(amount)
        if self._opening:
            self._opening_pacer.take(1.0)
        congestion = self.congestion
        if congestion.pacer is not None:
            congestion.pacer.take(1.0)
        if congestion.stalls and not congestion.probing:
            congestion.probing, congestion.probe_sent = True, now  # this send is the probe
        permit = Permit(sent_at=now, send=send)
        if self.outer is not None:
            try:
                permit.outer = await self.outer.acquire(tokens)
            except BaseException:
                self.release(permit, 0)
                raise
        return permit

    def release(self, permit: Permit, actual_tokens: int | None = None) -> None:
        """The request finished; correct its token charge to ``actual_tokens`` when known (a
        refused request's reservation was handed back when it was refused)."""
        self.in_flight -= 1
        self._saw_response()
        if permit.refused:
            self._refused_in_flight -= 1
        elif actual_tokens is not None:
            charged = permit.send.tokens
            self.log.correct(permit.send, actual_tokens)
            pacer = self.limits["tpm"].pacer
            if pacer is not None:
                if actual_tokens > charged:
                    pacer.take(actual_tokens - charged)
                else:
                    pacer.give_back(charged - actual_tokens)
        if self.outer is not None and permit.outer is not None:
            self.outer.release(permit.outer, 0 if permit.refused else actual_tokens)
        self._wake_slots()

    def observe_completion(self, completion_tokens: int) -> None:
        """Feed an observed completion size into the running mean used by ``estimate``."""
        self._completions_seen += 1
        self._completion_mean += (completion_tokens - self._completion_mean) / min(
            self._completions_seen, 50
        )

    def succeeded(self, permit: Permit | None = None) -> None:
        """A request got an answer: end the opening, grow the window and the adaptive rate."""
        now = self.clock()
        self._saw_response()
        if self._opening:
            self._opening = False
            self.window_allowed = max(SLOW_START, self.in_flight + 1)
            self._growth_base, self._seen = float(self.window_allowed), 0.0
        if self._growing and self.window_allowed < self.max_concurrency:
            self.window_allowed += 1  # slow start: one more slot per answer
        congestion = self.congestion
        if congestion.probing and permit is not None and permit.sent_at >= congestion.probe_sent:
            congestion.restart(now, self._delivered(now, None, whole=True))
        congestion.accepted(now)
        self._judge_trial(now)
        self._wake_slots()

    def throttled(
        self, retry_after: float | None, message: str, permit: Permit | None = None
    ) -> None:
        """A 429 rate limit / overload for ``permit``'s request: adopt named limits; pause or cut
        only for a rate signal (module docstring)."""
        now = self.clock()
        self.throttles += 1
        self._saw_response()
        if permit is not None and not permit.refused:
            self.congestion.saw_refusal(now - permit.sent_at)
            permit.refused = True
            self._refused_in_flight += 1
            self._hand_back(permit)
        if not self.adaptive:
            if retry_after is not None:
                self.pause_until = max(self.pause_until, now + retry_after)
            self._wake_slots()
            return
        learned = limits_in_message(message)
        sent_at = permit.sent_at if permit is not None else None
        window_before, growing_before = self.window_allowed, self._growing or self._opening
        congestion = self.congestion
        recent = self._judged(now)
        verdict = self._read_named(learned, now, retry_after) if learned else None
        if learned and permit is not None:
            permit.send.named = True
        if verdict is None:
            streak = self._refused_run(permit.send) if permit is not None else 1
            verdict = congestion.refused(now, sent_at, recent, streak)
        if verdict != "noise" or learned:
            self._stop_growing()
        if verdict == "leftover" and retry_after is not None:
            # Kimi rounds its wait up to whole seconds, so "1 seconds" means "within a second":
            # everyone else waits only a moment before trying again.
            wait = retry_after if retry_after > 1.0 else min(retry_after, LEFTOVER_WAIT_S)
            self.pause_until = max(self.pause_until, now + wait)
        elif verdict == "stall":
            pause = congestion.stall_pause(retry_after)
            self.pause_until = max(self.pause_until, now + pause)
            congestion.clamp(now, self._accepted_in_flight())
        elif verdict in ("cut", "congestion"):
            if retry_after is not None:
                self.pause_until = max(self.pause_until, now + retry_after)
            congestion.cut(
                now,
                # The lower of the last 2 s and 10 s: a burst the server took once (a bucket's
                # saved tokens) does not make its rate look higher than it is.
                min(self._delivered(now, retry_after), self._delivered(now, retry_after, span=2.0)),
                self._accepted_in_flight(),
                self._judged(now, count=BEFORE_SENDS),
                told=retry_after is not None and verdict == "cut",
                limiter_window=window_before,
                growing_before=growing_before,
            )
        self._judge_trial(now)
        self._wake_slots()

    # -- what bound the run -----------------------------------------------------------------

    def bound_by(self) -> str | None:
        """Which limit held sends back most often, learned from what, the send rate over the run
        and the requests refused, e.g. ``"RPM 3,000 (learned from a 429 naming it): 49.5
        requests/s; 2 of 1,000 requests refused (0.2 %)"``; None when nothing held them."""
        cause = self._main_cause()
        if cause is None:
            return None
        text = f"{self._describe(cause)}: {self._run_rate():,.1f} requests/s"
        if self.throttles:
            share = self.throttles / max(1, self._sends)
            text += f"; {self.throttles:,} of {self._sends:,} requests refused ({share:.1%})"
        return text

    def binding(self) -> str | None:
        """A short form of ``bound_by`` for the progress bar, e.g. ``"RPM 3,000 (learned)"``."""
        cause = self._main_cause()
        return None if cause is None else self._describe(cause, short=True)

    def _main_cause(self) -> str | None:
        if self._held:
            return self._held.most_common(1)[0][0]
        # Nothing waited, but the requests filled every slot: the concurrency bound the run.
        return "concurrency" if self.peak_in_flight >= self.max_concurrency else None

    def _describe(self, cause: str, short: bool = False) -> str:
        congestion = self.congestion
        if cause == "concurrency":
            learned = congestion.window
            if learned is not None and learned < self.max_concurrency:
                return (
                    "adaptive concurrency"
                    if short
                    else (f"adaptive concurrency {learned:,} (from 429s that named no limit)")
                )
            if self.window_allowed < self.max_concurrency:
                return "concurrency window (adaptive)"
            value, source, how = self.max_concurrency, self._concurrency_source, ""
            label = "concurrency"
        elif cause in ("rpm", "tpm"):
            limit = self.limits[cause]
            value, source, label = limit.value or 0, limit.source, _LABELS[cause]
            how = f", counted in {limit.window_s:g} s" if limit.how and not short else ""
        elif cause == "rate":
            if short:
                return "adaptive rate"
            rate = f"{congestion.w_max:,.1f}/s" if congestion.w_max else "?"
            return (
                f"adaptive rate (cut at {rate} after {congestion.cuts:,} rate signals among "
                f"unnamed 429s; {congestion.random_refusals:,} read as random)"
            )
        else:
            return "server-asked pauses"
        if source == "set":
            return f"{label} {value:,}"
        suffix = " (learned)" if short else f" (learned from a 429 naming it{how})"
        return f"{label} {value:,}{suffix}"

    def _run_rate(self) -> float:
        if self._first_send is None or self._sends < 2 or self._last_send <= self._first_send:
            return 0.0
        return (self._sends - 1) / (self._last_send - self._first_send)

    # -- internals -------------------------------------------------------------------------

    @staticmethod
    def _pacer(limit: _Limit, now: float, *, full: bool, burst: float | None) -> Pacer | None:
        if limit.value is None:
            return None
        rate = limit.value * PACING_SHARE / WINDOW_S
        capacity = max(rate * PACING_BURST_S, BURST_SHARE * burst if burst else 0.0)
        return Pacer(rate, capacity, now, full=full)

    def _window(self) -> int:
        """The in-flight window now: the opening's, or slow start's grown by seen time."""
        if self._opening:
            return self.max_concurrency
        if self._growing:
            doublings = min(40.0, self._seen / GROWTH_DOUBLING_S)
            grown = self._growth_base * 2**doublings
            if grown >= self.max_concurrency:
                self._growing = False
                self.window_allowed = self.max_concurrency
            elif grown > self.window_allowed:
                self.window_allowed = int(grown)
        return self.window_allowed

    def _saw_response(self) -> None:
        """The loop delivered a response: time up to now was seen (at most ``SEEN_STEP_S``)."""
        now = self.clock()
        if self._growing and not self._opening:
            self._seen += min(max(0.0, now - self._last_event), SEEN_STEP_S)
        self._last_event = now

    def _stop_growing(self) -> None:
        """A 429 signalled a limit: the opening and the slow start end (the limit learned, or the
        adaptive window and rate, hold sends from now on)."""
        self._opening = False
        self._growing = False
        self.window_allowed = self.max_concurrency

    def _accepted_in_flight(self) -> int:
        """Requests in flight that the server has not refused (as far as we know)."""
        return self.in_flight - self._refused_in_flight

    def _delivered(
        self, now: float, stated_wait: float | None, *, whole: bool = False, span: float = 10.0
    ) -> float:
        """Requests per second the server accepted over the last ``span`` seconds (``whole``:
        all the log remembers), the time it asked to wait included (a window that took a burst
        and then waits is read at its real rate)."""
        if self._first_send is None:
            return 0.0
        span = min(WINDOW_S if whole else span, now - self._first_send)
        accepted = self.log.accepted(now, span + 1e-9)  # the first send included
        return accepted / max(DELIVERY_FLOOR_S, span + (stated_wait or 0.0))

    def _judged(self, now: float, since: float | None = None, count: int = SHARE_SENDS) -> Share:
        """The recent judged sends (the last ``count``, or all since ``since``): refused, or
        gone long enough without a 429 to count as accepted; a 429 is seen within
        ``judge_after()``."""
        young = now - self.congestion.judge_after()
        share = Share()
        for send in self.log.newest():
            if since is not None and send.sent_at < since:
                break
            # Only sends old enough to be judged both ways: counting the refusals of a moment
            # before its acceptances are known would overstate the share. Refusals by a named
            # limit are that limit's business, not a sign of an unnamed one.
            if send.sent_at > young or send.named:
                continue
            share.sends += 1
            share.refused += send.refused
            if since is None and share.sends >= count:
                break
        return share

    def _refused_run(self, send: Send) -> int:
        """Refused sends in a row, in the order sent, ending with ``send``."""
        run = 0
        for other in self.log.newest():
            if other.sent_at > send.sent_at or (run == 0 and other is not send):
                continue
            if not other.refused:
                break
            run += 1
        return run

    def _judge_trial(self, now: float) -> None:
        congestion = self.congestion
        trial = congestion.trial
        if trial is None:
            return
        if congestion.judge(now, self._judged(now, trial.at + congestion.settle_s())) == "noise":
            self._undo_cut()

    def _hand_back(self, permit: Permit) -> None:
        """A refused request: its reservation goes back, in the log and every pacer (never
        above a pacer's capacity: no credit is made of it)."""
        self.log.refuse(permit.send)
        for name, amount in (("rpm", 1.0), ("tpm", permit.send.tokens)):
            pacer = self.limits[name].pacer
            if pacer is not None:
                pacer.give_back(amount)

    def _undo_cut(self) -> None:
        """A trial found the refusals random: the in-flight window (and its growth) as it was."""
        trial = self.congestion.undone
        self.congestion.undone = None
        if trial is not None:
            self.window_allowed = max(1, min(self.max_concurrency, trial.limiter_window))
            if trial.growing_before and self.window_allowed < self.max_concurrency:
                self._growing = True
                self._growth_base, self._seen = float(self.window_allowed), 0.0

    def _recent_rate(self, now: float, limit: _Limit) -> float:
        """Our accepted rate (requests or tokens per second) over two of the limit's windows
        (sends may come in a window's worth at once), or the time it takes to allow 20 requests
        when that is longer; at least 2 s, at most a minute."""
        tokens = limit.name == "tpm"
        per_s = (limit.value or 0) / WINDOW_S
        span = 2.0 if tokens or not per_s else 20 / per_s
        span = min(WINDOW_S, max(2.0, span, 2 * limit.window_s))
        return self.log.accepted(now, span, tokens=tokens) / span

    def _read_named(self, learned: dict[str, int], now: float, stated: float | None) -> str:
        """How to read a 429 that names limits: "adopted", "noise", "leftover" or
        "congestion"."""
        verdicts = []
        if "concurrency" in learned:
            limit = learned["concurrency"]
            if limit < self.max_concurrency:
                self.max_concurrency = limit
                self.window_allowed = limit
                self._concurrency_source = "learned"
                logger.info("server limit learned from a 429: concurrency %d", limit)
            in_flight = self._accepted_in_flight() + 1  # the refused one was in flight too
            if in_flight > limit:
                verdicts.append("adopted")  # our own excess explains it
            elif in_flight < BELOW_LIMIT * limit:
                verdicts.append("noise")
            else:
                verdicts.append("congestion")  # someone else uses the org's slots too
        for name in ("rpm", "tpm"):
            if name not in learned:
                continue
            value = learned[name]
            kept = self.limits[name]
            if kept.value is None or value < kept.value:
                self._adopt(kept, value, now, stated)
                verdicts.append("adopted")
            elif value > kept.value:
                verdicts.append("noise")  # a limit above ours: not what holds us
            elif kept.burst_before and now - kept.since < kept.window_s:
                verdicts.append("leftover")  # the server still counts our burst from before
            elif self._recent_rate(now, kept) < BELOW_LIMIT * value / WINDOW_S:
                verdicts.append("noise")
            elif now - kept.refused_at > kept.window_s:
                # At the limit but refused only once in a window: a send that met the edge of
                # the server's window a moment early (clocks and the way differ). A short pause.
                verdicts.append("leftover")
            else:
                verdicts.append("congestion")  # again and again: someone else shares the quota
            kept.refused_at = now
        for verdict in ("congestion", "leftover", "adopted"):
            if verdict in verdicts:
                return verdict
        return "noise"

    def _adopt(self, limit: _Limit, value: int, now: float, stated: float | None) -> None:
        """Adopt a named limit: its window (learned from our sends and the stated wait), its
        pacer and its log; from now on, not as a debt beyond what the server says it is owed."""
        tokens = limit.name == "tpm"
        previous = limit.value
        judged_before = now - self.congestion.judge_after()
        window = (
            # Only an opening burst shows a window: after a while at a steady rate every window
            # of the log is full of a lower limit.
            self.log.window_for(now, value, tokens=tokens, judged_before=judged_before)
            if previous is None
            else None
        )
        length, how = (window, "burst") if window is not None else (limit.window_s, limit.how)
        # What a window took at once, as our burst showed (a later burst goes up to that much).
        burst = value * window / WINDOW_S if window is not None else None
        if stated is not None:
            # What the log would make the next send wait may not exceed what the server says
            # (Kimi rounds its wait up to whole seconds): a shorter window shows instead.
            # The log must let the limit's pace go on once the wait is over: what it allows by
            # then, and the next send, fit.
            each = float(self.estimate(0)) if tokens else 1.0
            amount = each + value / WINDOW_S * stated
            owed = self.log.wait_under(now, value, length, tokens=tokens, amount=amount)
            allowed = stated + min(1.0, 0.2 * stated)  # (whole seconds, rounded up)
            if owed > allowed:
                low, high = MIN_WINDOW_S, length
                for _ in range(20):
                    middle = (low + high) / 2
                    owes = self.log.wait_under(now, value, middle, tokens=tokens, amount=amount)
                    low, high = (middle, high) if owes <= allowed else (low, middle)
                length, how = low, "stated wait"
            length = max(length, min(stated, MAX_WINDOW_S))
        recent = self._recent_rate(now, limit) if previous is not None else None
        limit.value, limit.source, limit.since = value, "learned", now
        limit.window_s, limit.how = length, how
        window_log = self.log.tokens if tokens else self.log.requests
        # The log holds the window's share of the limit over a little longer than the window:
        # a send that takes the place of one a window ago may reach the server a moment sooner
        # than that one did (the way there varies by about the time a 429 takes to come back).
        edge = min(EDGE_MAX_S, max(EDGE_MIN_S, 2 * self.congestion.refusal_rtt))
        self.log.set_length(window_log, length + edge, now)
        per_s = value / WINDOW_S
        if recent is None:
            recent = self.log.accepted(now, min(length, 2.0), tokens=tokens) / min(length, 2.0)
        limit.burst_before = recent >= BELOW_LIMIT * per_s
        limit.pacer = self._pacer(limit, now, full=burst is not None, burst=burst)
        logger.info(
            "server limit learned from a 429: %s %d (counted in %g s)",
            _LABELS[limit.name],
            value,
            length,
        )

    def _wake_slots(self) -> None:
        """Wake as many slot waiters as there are free slots (they re-check on waking)."""
        if not self._slot_waiters:
            return
        free = self.concurrency - self.in_flight
        while free > 0 and self._slot_waiters:
            waiter = self._slot_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                free -= 1

    def _wait_needed(self, tokens: int) -> tuple[float, str]:
        """Seconds to wait before this request may go (inf: wait for a release), and why."""
        now = self.clock()
        self.log.expire(now)
        waits = [(self.pause_until - now, "pause")]
        congestion = self.congestion
        if congestion.probing:
            deadline = congestion.probe_sent + congestion.judge_after()
            if now >= deadline:  # no 429 for the probe: the server has room again
                congestion.restart(now, self._delivered(now, None, whole=True))
            else:
                waits.append((deadline - now, "rate"))
        if self.in_flight >= self.concurrency:
            return math.inf, "concurrency"
        for name, amount in (("rpm", 1.0), ("tpm", float(tokens))):
            limit = self.limits[name]
            if limit.value is None:
                continue
            window = self.log.tokens if name == "tpm" else self.log.requests
            capacity = limit.value * limit.window_s / WINDOW_S
            if name == "tpm":
                amount = min(amount, capacity)
            waits.append((window.wait(now, amount, capacity), name))
            if limit.pacer is not None:
                waits.append((limit.pacer.wait(now, amount), name))
        if self._opening:
            waits.append((self._opening_pacer.wait(now, 1.0), "opening"))
        if congestion.pacer is not None:
            waits.append((congestion.pacer.wait(now, 1.0), "rate"))
        wait, cause = max(waits)
        # Sleep a hair past the boundary so float rounding cannot leave it a hair short.
        return (wait + 1e-6 if wait > 0 else wait), cause
