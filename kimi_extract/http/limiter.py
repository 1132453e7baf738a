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
- **The opening** (``adaptive``, nothing known yet; ``opening.Opening``): sends paced at
  ``OPENING_RATE`` until a round trip after the first answer (``connected``: the backend measures
  it as it opens connections), then an in-flight window that grows by answers and by the time
  the event loop could have seen a 429 in, until a 429 signals a limit.
- **Learned limits**: Kimi's 429 messages name the limit that was hit ("max organization
  concurrency: 50", "max RPM: 3000", "max TPM: ..."). A named limit below the one in force is
  adopted at once for every later send (sends waiting for their turn check again): the excess
  that caused the 429 was ours. RPM and TPM (``named.Limit``) are counted in Kimi's 60 s unless
  the server shows a shorter window, and a lower limit applies from now on, owing the past only
  as long as the server says. A 429 that is the rest of our own burst, or one at a window's edge,
  pauses every sender for the time stated (``LEFTOVER_WAIT_S`` when that is "1 seconds", Kimi's
  rounding of any shorter wait); one naming a limit we are clearly below only makes its request
  wait; one naming a limit again and again at its rate is congestion (someone else shares it).
- **429s that name nothing** and congestion: ``congestion.Congestion`` tells rate 429s from
  random refusals by their pattern, cuts the rate (CUBIC on the delivered rate), pauses every
  sender and probes when the server has no room at all. A stall whose probe finds room again
  seconds later shows a window (``shown``): it is kept to like a named limit's, as ``count`` per
  ``length`` in the log, and taken whole when it refills. Read again after a drop from the least
  it holds, it is scanned up, sends past it a moment apart (at most ``SCAN_OUT`` out before
  they are judged), until the server refuses one. So is an RPM limit named or shown that has
  held the run for ``named.UP_AFTER_S`` (``Limit.rising``): a limit that rose is used (a 429
  naming more is taken; one naming nothing, up to ``UP_STEP`` times the window), and the first
  refusal of a send made since, within ``RISE_HELD`` windows, undoes the rise (a fixed
  window's refill looks like room to a trailing log). A window first shown with a stated wait is
  probed for being fixed (``shown.FixedProbe``): fixed, each of its windows goes whole as it
  begins (doubling from one send as each round is judged, ``_ramp_wait``); sliding, it is kept
  to at the length the probe found. One that comes while the server's named concurrency, or
  the window a stall clamped (429s that name nothing), has held its slots full of accepted
  requests of ours (``FULL_SLOTS`` of them, on average over ``OCCUPIED_S``) is no rate signal:
  the concurrency holds the run.

``adaptive=False`` turns off the opening, learned limits and the rate/window cuts; the configured
limits stay, and every server-asked wait pauses every sender.

``bound_by()`` says which limit held sends back most often, where it came from, the send rate and
how many requests were refused (the run summary and the progress bar show it). Every wait reads
and sleeps on a ``clock.Clock`` (``clock=``), so tests can check the windows on a simulated clock.
Waiters that would check at the same moment for the same request wait as one cohort: one sleeps,
the rest park behind it and check in turn as each goes (``Limiter._wait_turn``), so rows held
by a pacer cost about one check for each send, not one for each row waiting.

An *outer gate* (``OUTER_GATE``, set by ``kimi_extract.dask`` on workers) is passed after the
limiter's own checks by every ``Limiter`` created while it is set, for limits shared beyond one run.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import statistics
from collections import defaultdict, deque
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

from .clock import Clock, default_clock
from .congestion import (
    AGAIN_WITHIN,
    BEFORE_SENDS,
    MIN_WINDOW_LEVEL,
    PROBE_AFTER_S,
    PROBE_FIRST_S,
    SHARE_SENDS,
    WINDOW_LENGTHS_S,
    Congestion,
)
from .named import (
    BELOW_LIMIT,
    PACING_SHARE,
    UP_AFTER_S,
    Adoption,
    Limit,
    describe,
    limits_in_message,
)
from .opening import Opening
from .pacing import MAX_WINDOW_S, Send, SendLog, Share, pace_of
from .shown import (
    HALVING_PROBES,
    LEAVE_PROBES,
    MIN_COUNT,
    FixedProbe,
    Shown,
    Stall,
    held,
    probed_length,
    scannable,
    shortest_length,
)

logger = logging.getLogger("kimi_extract")

WINDOW_S = MAX_WINDOW_S
DEFAULT_COMPLETION_GUESS = 512
#: A learned prompt scale stays within this factor of our own estimate.
MAX_PROMPT_SCALE = 10.0
#: After a 429 that is the rest of our own burst and asks for at most a second (Kimi rounds up
#: to whole seconds), every sender waits this long, not the whole second.
LEFTOVER_WAIT_S = 0.25
#: The delivered rate is measured over at least this long (a cut in the opening's first moments
#: reads the rate of the few sends judged so far).
DELIVERY_FLOOR_S = 0.25
#: ...and a cut's over this many sends at least (a rate read from a send or two is no measure).
DELIVERY_SENDS = 10
#: A stall's probe that went this soon after its pause ended went when it was meant to (not
#: held back for a slot): the room it found is where the probes looked for it.
PROBE_ON_TIME_S = 0.25
#: A window read again after a drop is scanned up with at most this many sends past it out at
#: once, each counted once judged accepted (the first refused ends the scan, and the others
#: out then are its own too: at most this many refused).
SCAN_OUT = 3
#: A rise a scan up found (``Limit.rising``) is borne out after this many of the limit's
#: windows with none of the sends made since refused.
RISE_HELD = 2
#: ...and a scan up goes to this many times what the window held at most.
UP_STEP = 2.0
#: A 429 that names nothing while the concurrency a 429 named has held this share of its slots
#: with accepted requests of ours, on average over the last ``OCCUPIED_S`` (or since the first
#: send), is not read as a rate signal: the concurrency holds the run, and a rate limit below
#: it would leave slots empty (a refused request holds none). A gateway's limit at 95 % of the
#: concurrency's rate leaves them 5 % empty. (A concurrency we were told is not counted: an
#: opening burst a bucket takes can fill all of it.)
FULL_SLOTS, OCCUPIED_S = 0.98, 2.0
#: A send that went alone after a refusal and was accepted with this many fewer of ours in the
#: window than the refused one had does not show the refusal random (``_wary_taken``).
WARY_DROP = 2
#: A stall's probes go past the window it clamped (full of ours, none answered) until this
#: many of them were refused there: a window shorter than the answers is found as one of the
#: usual lengths (1, 2, 5 s) ends; a concurrency limit then waits for an answer of ours (when
#: the stall took enough to show a window and nothing said when the server has room, they go
#: on as the longer lengths end: ``Limiter._past_probes``).
PAST_PROBES = 3
#: Sends after a stall's last refusal, all taken, that show the server's rate is at least the
#: pace they went at (``_restart_rate``).
TAKEN_RUN = 5
#: The round trip the opening holds for is the median of this many connections' last.
RTT_SAMPLES = 16
#: Waiters that would check at the same moment for the same request wait as one cohort, one of
#: them sleeping (``Limiter._wait_turn``). False: each sleeps and checks for itself, as the
#: cohort's members would one after another (the tests compare the two).
COHORTS = True


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
    #: Refused as ours to refuse: a probe sent past what a window has room for (its stated wait
    #: is the window's, which the limiter keeps to: the row goes again as it admits it).
    own: bool = field(default=False)


@dataclass(eq=False)
class _Parked:
    """A waiter parked behind one sleeping toward the same moment for the same request: it
    waits in the sleeper's cohort (``Limiter._wait_turn``), held by ``cause`` since
    ``held_from``."""

    future: asyncio.Future[None]
    held_from: float
    cause: str
    request: tuple[int, float]  # its tokens and its prompt, counted our way
    #: The cohort's rest, handed on with its turn (None: woken to check for itself).
    handed: deque[_Parked] | None = None


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
        self.limits = {"rpm": Limit("rpm", rpm, since=now), "tpm": Limit("tpm", tpm, since=now)}
        for limit in self.limits.values():
            limit.pacer = limit.new_pacer(now, full=True)
        self.concurrency_source = "set"
        self.opening = Opening(concurrency, adaptive=adaptive, now=now)
        self.congestion = Congestion()
        self.in_flight = 0
        self._refused_in_flight = 0
        self.peak_in_flight = 0
        #: From when, how many of ours in flight were not refused (the last ``OCCUPIED_S``)...
        self._occupancy: deque[tuple[float, int]] = deque()
        #: ...and when each refused one went and came back (it held no slot at the server).
        self._refused_spans: deque[tuple[float, float]] = deque()
        self.pause_until = 0.0
        self.throttles = 0
        self.stated_waits = 0  # of them, 429s that said how long to wait
        self._probe_late = 0.0  # how long after the stall's pause the last probe went
        #: Whether the stall's last refused probe went past the window the stall clamped
        #: (full of ours), and whether its probe now did.
        self._probes_past = (False, False)
        #: In a stall, an answer of ours frees a slot: the next probe goes then, or at this time
        #: if later (``succeeded``; None: it waits for the stall's pause)...
        self._freed_after: float | None = None
        #: ...and when the answer came later than that, the probe went as one held back for a
        #: slot would (not when the pause ended: ``_restart``).
        self._freed_late = False
        self._deferred = False  # (the stall's first probe waited for a usual length's end)
        self._past_refused = 0  # probes of the stall refused past its clamp
        self._told = False  # (the stall's first refusal said when the server has room)
        #: A probe was taken past the clamp: one more may go past it (this many in flight,
        #: 0: none), and went (send).
        self._confirm_slots = 0
        self._confirm_send: Send | None = None
        self._sends = 0
        self._completion_mean = float(DEFAULT_COMPLETION_GUESS)
        self._completions_seen = 0
        #: When the first answer calibrated the token estimates (prompt scale, completion).
        self._calibrated_at: float | None = None
        self._prompt_scale = 1.0  # the server's prompt tokens per one of ours (learned)
        self._prompts_seen = 0
        #: Seconds sends waited, summed over them, by what held them (``bound_by``).
        self._held: defaultdict[str, float] = defaultdict(float)
        self._first_send: float | None = None
        self._last_send = 0.0
        self._slot_waiters: deque[asyncio.Future[None]] = deque()
        #: The cohorts parked behind a sleeper, by when it wakes and the request it asks for.
        self._cohorts: dict[tuple[float, tuple[int, float] | None], deque[_Parked]] = {}
        self.stall = Stall()  # what the stall now (if any) shows of a window
        #: A window re-read after a drop from the least it holds is scanned up, sends past
        #: what it holds a moment apart, each counted once judged accepted, until one is
        #: refused or it holds ``_scan_upper`` less one (0: no scan).
        self._scan_upper = 0.0
        #: The scan's sends out, not yet judged (once it ended, their 429s are still its own).
        self._scan: list[Send] = []
        self._scan_next = False  # the send about to go is the scan's
        #: A scan past a limit that may have risen (``Limit.rising``): its value then (kept
        #: until the scan's sends out are judged).
        self._scan_up: int | None = None
        #: A rise a scan up found, not yet borne out: when the scan first found room (the
        #: value before is ``Limit.risen_from``). A refusal of a send made since undoes it (a
        #: fixed window's refill looks like room to a trailing log), until ``RISE_HELD`` of its
        #: windows went by...
        self._rose: float | None = None
        #: ...and one undone: the sends made while it was kept were refused as ours.
        self._undone_rise: tuple[float, float] | None = None
        self.up_scans = 0  # scans past a limit that may have risen
        self.up_refused = 0  # ...and refusals they cost (their own, and rises undone)
        #: Is a window first shown by a stall with a stated wait fixed? (``shown.FixedProbe``)
        self._fixed: FixedProbe | None = None
        self._fixed_next = False  # the send about to go is its probe's
        #: After one refusal in a clean window shown before, the next send goes alone: refused
        #: too, the window is full (a stall); judged accepted, the refusal was random.
        self._wary = False  # the next send goes alone
        self._wary_send: Send | None = None  # ...and went: the others wait for its verdict
        self._wary_held = 0  # what the window held of ours with the refused send in it
        self._rtts: deque[float] = deque(maxlen=RTT_SAMPLES)  # connections' round trips

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
    def window_allowed(self) -> int:
        """The slow start's in-flight window (the concurrency once it has ended)."""
        return self.opening.window

    @property
    def concurrency(self) -> int:
        """The in-flight limit in force now (the growing window and learned limits included)."""
        learned = self.congestion.window
        grown = self.opening.current(self.max_concurrency)
        window = grown if learned is None else min(learned, grown)
        return max(1, min(self.max_concurrency, window))

    def estimate(self, prompt_tokens: int) -> int:
        """Tokens to charge before sending: the prompt estimate, scaled to what the server
        counted for the prompts before (``observe_prompt``), and the expected completion."""
        return int(prompt_tokens * self._prompt_scale + self._completion_mean)

    def send_rate(self) -> float | None:
        """The current pacing rate in requests per second (None when unpaced)."""
        paced = self.rpm * PACING_SHARE / WINDOW_S if self.rpm else None
        rates = [r for r in (self.congestion.rate, paced) if r]
        return min(rates) if rates else None

    # -- the gate ---------------------------------------------------------------------------

    async def acquire(self, tokens: int) -> Permit:
        """Wait until a request carrying ``tokens`` may be sent; the caller must ``release``.

        Check-and-take runs without an ``await`` in between, so on one event loop no lock is
        needed: waiting for a concurrency slot parks on a FIFO of futures, other waits sleep (one
        waiter for each moment, the rest parked behind it: ``_wait_turn``), and every waiter
        checks again when its turn comes (a limit learned meanwhile holds it). ``tokens``
        is an ``estimate`` made just before: while the request waits, its expected completion
        follows the answers that come in, and so does its prompt's scale to the server's count
        (an estimate made before the first answer is mostly a guess: charged as it was, a request
        that waited since goes at the guess's size, and a paced TPM sends too much at once).
        """
        tokens = await self._wait_turn(tokens)
        now = self.clock()
        if self._first_send is None:
            self._first_send = now
        self._last_send = now
        send = self.log.add(now, tokens)
        send.ahead = self._accepted_in_flight()
        self.in_flight += 1
        self._occupy(now)
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        self._sends += 1
        # (past the window: not taken from its pacer either)
        scan = self._scan_next or self._fixed_next
        for name, amount in (("rpm", 0.0 if scan else 1.0), ("tpm", float(tokens))):
            pacer = self.limits[name].pacer
            if pacer is not None:
                pacer.take(amount)
        self.opening.took()
        congestion = self.congestion
        congestion.sent(now)
        if congestion.stalls and not congestion.probing:
            congestion.probing, congestion.probe_sent = True, now  # this send is the probe
            self._probe_late = now - self.pause_until  # (held back for a slot, or not)
            if self._freed_late:
                self._probe_late, self._freed_late = math.inf, False
            # (the stall's last probe, refused, and this one: past the full clamp, or not)
            past = self.in_flight > self.concurrency
            self._probes_past = (congestion.stalls > 1 and self._probes_past[1], past)
            self._freed_after = None
        elif self._confirm_slots and self.in_flight > self.concurrency:
            self._confirm_slots, self._confirm_send = 0, send
        if self._fixed_next and self._fixed is not None:
            self._fixed_next = False
            self._fixed.took(send)
        elif scan:
            self._scan_next = False
            self._scan.append(send)
        if self._wary:
            self._wary, self._wary_send = False, send
        permit = Permit(sent_at=now, send=send)
        if self.outer is not None:
            try:
                permit.outer = await self.outer.acquire(tokens)
            except BaseException:
                self.release(permit, 0)
                raise
        return permit

    async def _wait_turn(self, tokens: int) -> int:
        """Wait until a request of ``tokens`` may go (``acquire``); its tokens, rescaled to the
        answers that came in meanwhile.

        Waiters that check at the same moment for the same request get the same answer. So a
        timed wait (a pacer's, a window's, a pause's) is slept by one of them, and the others
        park in its cohort: when it wakes it checks, and if it goes, the next in the cohort
        checks in its turn; if it must wait again, the whole cohort waits with it. Woken each
        for itself, a hundred waiters behind a pacer would each check, one go, and the rest
        sleep again, at every send."""
        scale, mean = self._prompt_scale, self._completion_mean
        prompt = max(0.0, tokens - mean) / scale  # the prompt, counted our way
        cohort: deque[_Parked] = deque()  # parked behind this waiter: they check after it
        try:
            while True:
                if (self._prompt_scale, self._completion_mean) != (scale, mean):
                    scale, mean = self._prompt_scale, self._completion_mean
                    tokens = max(1, int(prompt * scale + mean))
                wait, cause = self._wait_needed(tokens)
                if wait <= 0:
                    self._hand_on(cohort)
                    return tokens
                now = held_from = self.clock()
                loop = asyncio.get_running_loop()
                stall = cause == "pause" and self._freed_after is not None
                if wait == math.inf or (stall and self.congestion.stalls):
                    self._dissolve(cohort)  # (each waits for a slot on its own)
                    waiter = loop.create_future()
                    self._slot_waiters.append(waiter)
                    if wait == math.inf:
                        try:
                            await waiter
                        finally:
                            if not waiter.done():
                                waiter.cancel()
                    else:
                        # A stall's pause that an answer of ours may end (``succeeded``): a
                        # slot waiter too.
                        sleeper = asyncio.ensure_future(self.sleep(wait))
                        try:
                            await asyncio.wait(
                                (waiter, sleeper), return_when=asyncio.FIRST_COMPLETED
                            )
                        finally:
                            for pending in (waiter, sleeper):
                                if not pending.done():
                                    pending.cancel()
                else:
                    request = (tokens, prompt)
                    self._carry(cohort, now, cause, request)
                    due = now + wait
                    # (to the microsecond: on the real clock, one moment computed from two
                    # others rounds apart; the tokens make no difference while no TPM is known)
                    key = (round(due, 6), request if self.limits["tpm"].value is not None else None)
                    ahead = self._cohorts.get(key) if COHORTS else None
                    if ahead is not None:  # another sleeps till then: the same answer
                        me = _Parked(loop.create_future(), now, cause, request)
                        ahead.append(me)
                        ahead.extend(cohort)
                        cohort = deque()
                        try:
                            await me.future
                        except BaseException:
                            if me.handed is not None:
                                self._hand_on(me.handed)  # (cancelled with its turn come)
                            raise
                        cohort = me.handed if me.handed is not None else deque()
                        held_from, cause = me.held_from, me.cause
                    else:
                        self._cohorts[key] = cohort
                        try:
                            await self.sleep(wait)
                        finally:
                            if self._cohorts.get(key) is cohort:
                                del self._cohorts[key]
                        # (as if each of the cohort had woken)
                        self.opening.woke(max(0.0, self.clock() - due), 1 + len(cohort))
                if cause != "opening":
                    self._held[cause] += self.clock() - held_from
        except BaseException:
            self._dissolve(cohort)
            raise

    def _carry(
        self, cohort: deque[_Parked], now: float, cause: str, request: tuple[int, float]
    ) -> None:
        """The cohort waits on with its sleeper (``request``), now held by ``cause``; with a
        TPM known, a waiter for another request checks for itself."""
        held = self._held
        tpm = self.limits["tpm"].value is not None
        staying = []
        for parked in cohort:
            if parked.cause != "opening":
                held[parked.cause] += now - parked.held_from
            parked.held_from, parked.cause = now, cause
            if not tpm or parked.request == request:
                staying.append(parked)
            elif not parked.future.done():
                parked.future.set_result(None)
        if len(staying) < len(cohort):
            cohort.clear()
            cohort.extend(staying)

    @staticmethod
    def _hand_on(cohort: deque[_Parked]) -> None:
        """The cohort's first waiter checks next, the rest parked behind it."""
        while cohort:
            parked = cohort.popleft()
            if not parked.future.done():
                parked.handed = cohort
                parked.future.set_result(None)
                return

    @staticmethod
    def _dissolve(cohort: deque[_Parked]) -> None:
        """Every waiter of the cohort checks for itself."""
        while cohort:
            parked = cohort.popleft()
            if not parked.future.done():
                parked.future.set_result(None)

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
        self._occupy(self.clock())
        if self.outer is not None and permit.outer is not None:
            self.outer.release(permit.outer, 0 if permit.refused else actual_tokens)
        self._wake_slots()

    def connected(self, rtt: float) -> None:
        """A connection to the server was opened, its round trip ``rtt`` seconds (the backend's
        measure): the opening's pacing holds that long past the first answer (the median of the
        last ``RTT_SAMPLES``: the first connections wait for the name to resolve)."""
        samples = self._rtts
        samples.append(max(0.0, rtt))
        self.opening.rtt = statistics.median(samples)

    def observe_prompt(self, estimated: int, actual: int) -> None:
        """The server counted ``actual`` prompt tokens for a prompt we ``estimated``: later
        estimates are scaled toward it (another tokenizer, or text we did not count, would
        otherwise charge a TPM limit too little and correct it in bursts after every answer)."""
        if estimated <= 0 or actual <= 0:
            return
        self._prompts_seen += 1
        ratio = min(MAX_PROMPT_SCALE, max(1 / MAX_PROMPT_SCALE, actual / estimated))
        self._prompt_scale += (ratio - self._prompt_scale) / min(self._prompts_seen, 50)

    def observe_completion(self, completion_tokens: int) -> None:
        """Feed an observed completion size into the running mean used by ``estimate``."""
        self._completions_seen += 1
        if self._calibrated_at is None:
            self._calibrated_at = self.clock()
        self._completion_mean += (completion_tokens - self._completion_mean) / min(
            self._completions_seen, 50
        )

    def succeeded(self, permit: Permit | None = None) -> None:
        """A request got an answer: end the opening, grow the window and the adaptive rate."""
        now = self.clock()
        self._saw_response()
        self.opening.answered(self.in_flight, self.max_concurrency, now)
        congestion = self.congestion
        if congestion.probing and permit is not None and permit.sent_at >= congestion.probe_sent:
            self._restart(now)
        elif congestion.stalls and not congestion.probing and self._freed_after is not None:
            # The stall's last refusal came with the window it clamped full, and an answer of
            # ours has freed a slot: the next probe goes now, as one held back for a slot did
            # (a concurrency limit has room now; ``_restart`` reads it so).
            self._freed_late = now > self._freed_after
            self.pause_until = min(self.pause_until, max(now, self._freed_after))
            self._freed_after = None
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
        self.stated_waits += retry_after is not None
        self._saw_response()
        if permit is not None and not permit.refused:
            self.congestion.saw_refusal(now - permit.sent_at)
            permit.refused = True
            self._refused_in_flight += 1
            self._occupy(now)
            self._refused_spans.append((permit.sent_at, now))
            self._hand_back(permit)
        if not self.adaptive:
            if retry_after is not None:
                self.pause_until = max(self.pause_until, now + retry_after)
            self._wake_slots()
            return
        learned = limits_in_message(message)
        rpm = self.limits["rpm"]
        if not learned and permit is not None and self._fixed is not None:
            if self._fixed.refused(permit.send):
                # Past what a trailing window has room for: it trails (not a stall).
                permit.own = True
                if rpm.source == "shown" and rpm.fixed is None:
                    rpm.trails(self._fixed.least, now, self.log, self.congestion.refusal_rtt)
                self._wake_slots()
                return
        if not learned and permit is not None and rpm.fixed and rpm.source == "shown":
            # A fixed window refused a send: its edges are not where they were read.
            rpm.unfix(now, self.log, self.congestion.refusal_rtt)
        if permit is not None and permit.send is self._confirm_send:
            # One more past the clamp, refused: the room was a bucket's token, not a window's
            # (the clamp stays; not a stall, nor a rate signal).
            self._confirm_send = None
            permit.own = True
            self._wake_slots()
            return
        if (
            permit is not None
            and permit.send in self._scan
            and (not learned or (self._scan_up is not None and set(learned) == {"rpm"}))
        ):
            # One past what the window holds: the scan ends (not a stall). The others out are
            # judged still (one sent before this may be refused too: its 429 on its way).
            self._scan.remove(permit.send)
            self._scan_upper = 0.0
            if self._scan_up is not None:
                # A scan past a limit that may have risen: the limit a 429 names is the limit
                # now (the room a scan of a named limit finds is not counted: a fixed window's
                # refill looks like it; the server says what rose).
                named = learned.get("rpm", 0)
                if named > self._scan_up:
                    rpm.rise(named, now, named=True)
                    logger.info("server limit rose: %s", describe("rpm", self, short=True))
                self._end_scan_up(now, rose=named > self._scan_up or self._rose is not None)
                permit.own = True
                self.up_refused += 1
            self._wake_slots()
            return
        if permit is not None and self._refused_past_rise(permit, learned, now):
            permit.own = True
            self.up_refused += 1
            self._wake_slots()
            return
        holding: int | None = None  # what a window shown before held of ours with it in
        if not learned and permit is not None:
            shown = self._shown()
            holding = (
                None
                if shown is None
                else held(self.log, permit.sent_at, shown.length, through=permit.send)
            )
            self.stall.refused(permit.send, now, retry_after, holding=holding, log=self.log)
        sent_at = permit.sent_at if permit is not None else None
        window_before = self.opening.window
        growing_before = self.opening.growing or self.opening.pacing
        congestion = self.congestion
        recent = self._judged(now)
        verdict = (
            self._read_named(learned, now, retry_after, permit.send if permit else None)
            if learned
            else None
        )
        if learned and permit is not None:
            permit.send.named = True
        in_shown = self._shown() is not None
        wary = permit is not None and self._wary_send is permit.send
        was_probing = congestion.probing
        clean = False
        if verdict is None:
            streak, later = self.log.refused_run(permit.send) if permit is not None else (1, 0)
            # No refusal before this run of them (those sent after it may have come back first).
            clean = self.throttles == streak + later
            accepted = self.log.before_refused() if clean else 0
            verdict = congestion.refused(
                now,
                sent_at,
                recent,
                streak,
                retry_after,
                clean=clean,
                accepted=accepted,
                wary=in_shown and wary,
                close=self.log.refused_among(AGAIN_WITHIN),
                slots_full=self._slots_full(now),
            )
        self._wary_send = None
        self._wary = verdict == "noise" and in_shown and not wary and congestion.clean(recent)
        if self._wary and holding is not None:
            self._wary_held = holding
        if verdict != "noise" or learned:
            self.opening.stop(self.max_concurrency)
        elif permit is not None:
            self.opening.hold(now, sent_at, congestion.refusal_rtt, streak=clean)
        if verdict == "leftover" and retry_after is not None:
            # Kimi rounds its wait up to whole seconds, so "1 seconds" means "within a second":
            # everyone else waits only a moment before trying again.
            wait = retry_after if retry_after > 1.0 else min(retry_after, LEFTOVER_WAIT_S)
            self.pause_until = max(self.pause_until, now + wait)
        elif verdict == "stall":
            if self._scan_upper and self._scan_up is not None:
                self._end_scan_up(now, rose=self._rose is not None)
            self._scan, self._scan_upper, self._fixed, self._scan_up = [], 0.0, None, None
            congestion.stalled(now)
            if congestion.stalls == 1 and not congestion.probing and self.stall.taken is None:
                # In a window shown before: what the server holds in it (its sends before the
                # last probe too); else what it took since the last stall.
                shown = self._shown()
                self.stall.start(
                    self.log,
                    since=congestion.epoch if shown is None else -math.inf,
                    window=WINDOW_S if shown is None else shown.length,
                    known=shown is not None,
                )
            taken, shown = self.stall.taken, self._shown()
            pause = self.stall.pause(retry_after, now)
            if shown is not None and taken is not None:
                if pause is None:
                    if congestion.stalls <= LEAVE_PROBES:
                        pause = self.stall.leaving(self.log, now, shown.length)
                elif congestion.stalls <= HALVING_PROBES:
                    sooner = self.stall.halving(self.log, now, shown.length)
                    pause = pause if sooner is None else min(pause, sooner)
            # What the server held of ours when the refused one came (429s a round trip late:
            # those sent in that round trip were refused too, not held).
            accepted = (
                self._accepted_in_flight() if permit is None else self.log.held_ahead(permit.send)
            )
            full = accepted >= MIN_WINDOW_LEVEL
            pause = congestion.stall_pause(
                pause,
                since=None if taken is None else taken.first - now,
                last=None if taken is None else taken.last - now,
                full=was_probing and self._probes_past[1],
            )
            self.pause_until = max(self.pause_until, now + pause)
            congestion.clamp(now, accepted, sent_at=sent_at, probe=was_probing)
            # Refused with the clamp full (the stall's own refusals, or a probe that went past
            # it), and nothing says when the server has room (no wait stated, no window shown
            # before): an answer of ours ends the pause (``succeeded``), no sooner than the
            # first probe would go.
            full_now = self._probes_past[1] if was_probing else full
            soonest = now if was_probing else now + PROBE_FIRST_S
            told = retry_after is not None or shown is not None  # (when it will have room)
            self._freed_after = soonest if full_now and not told else None
            self._freed_late = False
            if not was_probing and congestion.stalls == 1:
                self._deferred = self._told = told  # (the server's wait, or a window's)
                self._past_refused = self._confirm_slots = 0
            elif was_probing and self._probes_past[1]:
                self._past_refused += 1
        elif congestion.full_window(verdict, self._accepted_in_flight()):
            congestion.clamp(now, self._accepted_in_flight(), stall=False)
        elif verdict in ("cut", "again", "congestion"):
            short = self.log.span_of(now, DELIVERY_SENDS, 2.0, since=congestion.epoch)
            if retry_after is not None:
                self.pause_until = max(self.pause_until, now + retry_after)
            # The lowest of the last 2 s (or DELIVERY_SENDS sends), 10 s and the time since the
            # first refusal: a burst the server took once (a bucket's saved tokens) does not make
            # its rate look higher. The limit found again is cut to that rate, as when the server
            # says how long to wait ("told"): it is the server's rate measured, not guessed from
            # above.
            again = verdict == "again"
            delivered, measured = self._delivered_for_cut(now, retry_after, short, again=again)
            congestion.cut(
                now,
                delivered,
                self._judged(now, count=BEFORE_SENDS),
                told=(retry_after is not None and verdict == "cut") or again,
                limiter_window=window_before,
                growing_before=growing_before,
                measured=measured or again,
            )
        self._judge_trial(now)
        self._wake_slots()

    # -- what bound the run -----------------------------------------------------------------

    def bound_by(self) -> str | None:
        """Which limit held sends back longest (the seconds each send waited for it, summed),
        learned from what, the send rate over the run and the requests refused, e.g. ``"RPM
        3,000 (learned from a 429 naming it): 49.5 requests/s; 2 of 1,000 requests refused
        (0.2 %)"``; None when nothing held them."""
        cause = self._main_cause()
        if cause is None:
            return None
        text = f"{describe(cause, self)}: {self._run_rate():,.1f} requests/s"
        if self.throttles:
            share = self.throttles / max(1, self._sends)
            text += f"; {self.throttles:,} of {self._sends:,} requests refused ({share:.1%})"
        return text

    def binding(self) -> str | None:
        """A short form of ``bound_by`` for the progress bar, e.g. ``"RPM 3,000 (learned)"``."""
        cause = self._main_cause()
        return None if cause is None else describe(cause, self, short=True)

    def _main_cause(self) -> str | None:
        held = dict(self._held)
        if self.limits["rpm"].source == "shown" and "pause" in held:
            # The pauses of a stall that showed a window were that window's.
            held["rpm"] = held.get("rpm", 0.0) + held.pop("pause")
        if any(held.values()):
            return max(held, key=held.__getitem__)
        # Nothing waited, but the requests filled every slot: the concurrency bound the run.
        return "concurrency" if self.peak_in_flight >= self.max_concurrency else None

    def _run_rate(self) -> float:
        if self._first_send is None or self._sends < 2 or self._last_send <= self._first_send:
            return 0.0
        return (self._sends - 1) / (self._last_send - self._first_send)

    # -- internals -------------------------------------------------------------------------

    def _saw_response(self) -> None:
        self.opening.saw_response(self.clock())

    def _occupy(self, now: float) -> None:
        """Our requests in flight not refused changed at ``now``: note it (``_occupied``)."""
        points, spans = self._occupancy, self._refused_spans
        points.append((now, self._accepted_in_flight()))
        while len(points) > 1 and points[1][0] <= now - OCCUPIED_S:
            points.popleft()
        while spans and spans[0][1] <= now - OCCUPIED_S:
            spans.popleft()

    def _occupied(self, now: float) -> float:
        """How many requests of ours the server held on average over the last ``OCCUPIED_S``
        (or since the first send): in flight, less the time a refused one was out before its
        429 came back (it held no slot there)."""
        points, spans = self._occupancy, self._refused_spans
        if not points:
            return 0.0
        start = max(points[0][0], now - OCCUPIED_S)
        while spans and spans[0][1] <= start:
            spans.popleft()
        if now <= start:
            return float(points[-1][1])
        total = 0.0
        for (at, count), (until, _) in itertools.pairwise([*points, (now, 0)]):
            total += count * max(0.0, until - max(at, start))
        total -= sum(max(0.0, back - max(went, start)) for went, back in spans)
        return total / (now - start)

    def _slots_full(self, now: float) -> bool:
        """Whether the server's concurrency has held its slots full of accepted requests of
        ours (``FULL_SLOTS`` of them on average over ``OCCUPIED_S``): the concurrency a 429
        named, else the window a stall's clamp found the server holding (429s that name
        nothing). A rate limit below the slots' rate would leave them empty: a refusal now is
        no rate signal. (Our own concurrency, told, says nothing of the server's.)"""
        if self.concurrency_source == "learned":
            return self._occupied(now) >= FULL_SLOTS * self.max_concurrency
        clamp = self.congestion.window
        if clamp is not None and self.congestion.window_level:
            return self._occupied(now) >= FULL_SLOTS * clamp
        return False

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

    def _delivered_for_cut(
        self, now: float, stated: float | None, short: float, *, again: bool
    ) -> tuple[float, bool]:
        """The delivered rate a cut goes from: the lowest of the last 10 s (the ``stated`` wait
        in it), the last ``short`` seconds, and the time since the oldest refusal since the last
        cut or restart (of the last 10 s), when ``DELIVERY_SENDS`` or more sends went after it:
        the server's rate once its saved room was spent. A bucket's burst, taken before its
        first refusal, is not its rate: a 10/s bucket of burst 10 read as 40/s was cut to 28/s,
        its trial refused at 65 % read the refusals as random, and 600 rows behind bare 429s
        with 8 s answers took 127 s, 57 refused (now 72 s, 19). When the rate was ``again``
        at the one refused before, the oldest refusal of the last 10 s counts, with half as
        many sends after it, over ``DELIVERY_FLOOR_S`` at least. With it, whether that third
        rate counted (the server's rate measured)."""
        rates = [self._delivered(now, stated), self._delivered(now, None, span=short)]
        since = 10.0 if again else min(10.0, now - self.congestion.cut_at)
        after = DELIVERY_SENDS // 2 if again else DELIVERY_SENDS
        found = self.log.refusing_since(now, since, after=after)
        if found is not None and now > found[0]:
            first, taken = found
            # (ten sends make a rate over any span: a fast bucket's 13 in 0.13 s are 100/s)
            span = max(DELIVERY_FLOOR_S, now - first) if again else now - first
            # Told how long to wait (the cut goes to this rate, not below it), the pace of the
            # sends taken since: a handful over the whole span reads up to one send low (a
            # 50/s bucket behind a rounded "Retry-After: 1" was cut to 45/s, 2,000 rows at 99 %
            # of its rate, now 102 %).
            pace = None if again or stated is None else self.log.taken_pace(first)
            rates.append(taken / span if pace is None else max(taken / span, pace))
        return min(rates), len(rates) > 2

    def _judged_at(self, send: Send) -> float:
        """When ``send`` counts as accepted if no 429 has come for it by then."""
        return send.sent_at + self.congestion.judge_after()

    def _judged(self, now: float, since: float | None = None, count: int = SHARE_SENDS) -> Share:
        """The recent judged sends (``SendLog.judged``; a 429 is seen within
        ``judge_after()``)."""
        congestion = self.congestion
        return self.log.judged(now - congestion.judge_after(), since, count, epoch=congestion.epoch)

    def _adoption(self, sent_at: float | None) -> Adoption:
        return Adoption(
            self.log,
            self.clock() - self.congestion.judge_after(),
            self.congestion.refusal_rtt,
            float(self.estimate(0)),
            sent_at,
            self._calibrated_at,
        )

    def _judge_trial(self, now: float) -> None:
        congestion = self.congestion
        trial = congestion.trial
        if trial is None:
            return
        if congestion.judge(now, self._judged(now, trial.at + congestion.settle_s())) == "noise":
            self._undo_cut()

    def _hand_back(self, permit: Permit) -> None:
        """A refused request: its reservation goes back, in the log and every pacer it was
        taken from (never above a pacer's capacity: no credit is made of it; not to a pacer made
        since it was sent, which never held it)."""
        self.log.refuse(permit.send)
        for name, amount in (("rpm", 1.0), ("tpm", permit.send.tokens)):
            pacer = self.limits[name].pacer
            if pacer is not None and pacer.since <= permit.sent_at:
                pacer.give_back(amount)

    def _judge_scan(self, now: float) -> None:
        """Each of the scan's sends out with no 429 after ``judge_after()`` was accepted: the
        window holds what it held of ours with it in (``widen``); at the scan's bound it
        ends."""
        limit = self.limits["rpm"]
        while self._scan and now >= self._judged_at(self._scan[0]):
            scan = self._scan.pop(0)
            count = self._scan_count(scan, limit)
            if limit.source == "learned" and self._scan_up is not None:
                # One past a named limit taken: it rose (or a fixed window refilled). Twice it
                # from now on, on trial: past the new one, the server names it.
                self._rose = scan.sent_at
                limit.note_rise()
                limit.rise(math.ceil(UP_STEP * self._scan_up), now, named=False)
                logger.info("server limit may have risen: room past %d", self._scan_up)
                self._scan, self._scan_upper = [], 0.0
                self._end_scan_up(now, rose=True)
                break
            if limit.source == "shown" and count > limit.window_count():
                if self._scan_up is not None and self._rose is None:
                    self._rose = scan.sent_at
                    limit.note_rise()
                    logger.info(
                        "server limit may have risen: room past %s",
                        describe("rpm", self, short=True),
                    )
                limit.widen(count, now)
            if self._scan_upper and count + 1 >= self._scan_upper:
                self._scan_upper = 0.0
                if self._scan_up is not None:
                    self._end_scan_up(now, rose=True)  # (twice what it was: one scan's worth)
        if not self._scan and not self._scan_upper:
            self._scan_up = None

    def _judge_fixed(self, now: float) -> None:
        """Each of the fixed probe's sends out with no 429 after ``judge_after()`` was
        accepted; once it is decided, the window is fixed (``Limit.fix``) or not."""
        fixed, limit = self._fixed, self.limits["rpm"]
        if fixed is None:
            return
        while fixed.out and now >= self._judged_at(fixed.out[0]):
            fixed.judge(self.log, now, round(limit.window_count()))
        if fixed.verdict is not None and limit.fixed is None and limit.source == "shown":
            if fixed.verdict:
                limit.fix(fixed.origin, now, self.log)
            else:
                limit.fixed = False
        if fixed.verdict is not None and not fixed.out:
            self._fixed = None

    def _ramp_wait(self, now: float) -> float:
        """A fixed window refills whole, but a limit that dropped (or another client taking
        part of it) refuses what goes past it: as it begins, no more of ours are out unjudged
        than were judged accepted in it, and one more (1, 2, 4, ... at once: the first alone,
        and a drop refuses at most one round's excess, not the window's worth)."""
        judged = out = 0
        due = math.inf
        for send in self.log.requests.queue:
            if send.refused:
                continue
            at = self._judged_at(send)
            if at <= now:
                judged += 1
            else:
                out, due = out + 1, min(due, at)
        return 0.0 if out <= judged else due - now

    def _scan_wait(self, now: float, wait: float) -> float:
        """A full window being scanned (``_scan_upper``): how long the next send waits, its
        window ``wait`` before: none (the next send is the scan's) unless ``SCAN_OUT`` are out
        unjudged, or the last went less than ``judge_after() / SCAN_OUT`` ago (a moment apart,
        the 429 of one past what the window holds stops the scan before the next goes)."""
        self._judge_scan(now)
        if not self._scan_upper:
            return wait
        if self._scan:
            judge_after = self.congestion.judge_after()
            due = self._scan[0].sent_at + judge_after
            # (past a named limit, one: taken, the limit rose)
            if len(self._scan) < SCAN_OUT and self.limits["rpm"].source == "shown":
                due = self._scan[-1].sent_at + judge_after / SCAN_OUT
            if now < due:
                return min(wait, due - now)
        self._scan_next = True
        return 0.0

    def _may_scan_up(self, now: float) -> bool:
        """Whether a scan may look past the RPM limit now (``Limit.rising``): nothing else
        going on (no stall, trial, pause or fixed probe)."""
        congestion = self.congestion
        return (
            self.limits["rpm"].rising(now)
            and not congestion.stalls
            and congestion.trial is None
            and self._fixed is None
            and now >= self.pause_until
        )

    def _end_scan_up(self, now: float, *, rose: bool) -> None:
        """The scan past a limit that may have risen ended (refused, or at its bound): when to
        look again (its sends still out may yet find room: ``_judge_scan``)."""
        self.limits["rpm"].scanned(now, rose=rose)
        if not self._scan:
            self._scan_up = None

    def _rise_held(self, now: float) -> None:
        """A rise a scan up found is borne out once ``RISE_HELD`` of the limit's windows went
        by with none of the sends made since refused: the next scan goes ``UP_AFTER_S`` on."""
        rose, rpm = self._rose, self.limits["rpm"]
        if rose is not None and now >= rose + RISE_HELD * rpm.window_s:
            self._rose, rpm.risen_from = None, None
            rpm.up_every = UP_AFTER_S
            rpm.up_at = min(rpm.up_at, now + rpm.up_gap(UP_AFTER_S))

    def _past_rise_wait(self, now: float) -> float:
        """While a rise a scan found is not borne out (``_rose``), the sends past what the
        window held before go one at a time, each judged before the next: a rise misread from
        a fixed window's refill costs one refusal, not a burst (429s 200 ms late, 8 s answers:
        eight at once into a fixed window of 10)."""
        since, rpm = self._rose, self.limits["rpm"]
        if since is None or rpm.risen_from is None:
            return 0.0
        before = rpm.risen_from[0]
        if self.log.requests.wait(now, 1.0, before * rpm.window_s / WINDOW_S) <= 0:
            return 0.0  # within what the window held before
        last = self.log.sends[-1] if self.log.sends else None
        if last is None or last.sent_at < since or last.refused:
            return 0.0
        return max(0.0, self._judged_at(last) - now)

    def _refused_past_rise(self, permit: Permit, learned: dict[str, int], now: float) -> bool:
        """Whether ``permit``'s refusal was of a send made while a rise a scan up found was
        kept: the first undoes the rise (back to the value before; a refusal naming another
        limit, or more than that value, does not), the others were on their way. Ours, not a
        rate signal."""
        sent, undone = permit.sent_at, self._undone_rise
        if undone is not None and undone[0] <= sent <= undone[1]:
            return True
        rose, rpm = self._rose, self.limits["rpm"]
        if rose is None or rpm.risen_from is None or sent < rose:
            return False
        before = rpm.risen_from[0]
        if learned and (set(learned) != {"rpm"} or learned["rpm"] > before):
            if learned.get("rpm", 0) > before:
                # More than before, named: the limit now (adopted as a lower one than twice).
                self._rose, rpm.risen_from = None, None
            return False
        rpm.fall_back(now)
        rpm.scanned(now, rose=False)
        self._rose, self._undone_rise = None, (rose, now)
        logger.info("server limit did not rise: back to %s", describe("rpm", self, short=True))
        return True

    def _scan_count(self, scan: Send, limit: Limit) -> int:
        """What the window held of ours with ``scan`` in it (if accepted): the sends accepted
        up to and including it in the log, over the shortest length the window can have."""
        shown = limit.source == "shown" and limit.how != "probe"
        length = shortest_length(limit.window_s) if shown else limit.window_s
        return held(self.log, scan.sent_at, length, through=scan)

    def _shown(self) -> Shown | None:
        """The window a stall showed, if one is kept to."""
        rpm = self.limits["rpm"]
        if rpm.source != "shown":
            return None
        return Shown(round(rpm.window_count()), rpm.window_s)

    def _restart(self, now: float) -> None:
        """A stall's probe was accepted: go on at the rate the server delivered, or keep to the
        window the stall showed (``shown``)."""
        congestion, stall, rpm = self.congestion, self.stall, self.limits["rpm"]
        stated = stall.room_by < math.inf  # (the stall's 429s said how long to wait)
        first = math.inf if stall.taken is None else stall.taken.first
        # (the server took next to none before the stall: its span shows no rate)
        slow = stall.taken is None or stall.taken.count < MIN_COUNT
        shown = stall.end(
            self.log,
            now,
            congestion.probe_sent,
            self._shown(),
            on_time=self._probe_late <= PROBE_ON_TIME_S,
        )
        if self._probes_past == (True, False):
            # Refused past the full clamp, accepted once answers of ours freed slots: a
            # concurrency limit shows so, as does a window that began meanwhile. Read as a
            # concurrency limit, as a probe held back for a slot is (``_slots``).
            shown = None
        adopted = shown is not None and rpm.infer(shown, now, self.log, congestion.refusal_rtt)
        if adopted and shown is not None and scannable(shown.count, shown.upper):
            self._scan, self._scan_upper, self._scan_up = [], shown.upper, None
        elif adopted and stated and rpm.fixed is None and first < math.inf:
            # A window first shown with a stated wait, its probe sent as one of the usual
            # lengths ended (it is that long; the probe went at the end, or as the wait stated
            # ended there): fixed, or trailing? (``FixedProbe``; a wait in whole seconds leaves
            # any other length unknown to within a second.)
            probe = congestion.probe_sent
            least = probed_length(probe + PROBE_AFTER_S, first, WINDOW_LENGTHS_S)
            if least is not None:
                self._fixed = FixedProbe(probe, least)
                self._fixed.round(self.log, now, round(rpm.window_count()), least)
        # Taken past the clamp with none of ours answered: one more goes past it at once, and
        # the clamp is let go if that is taken too (a window that began, not a bucket's token).
        confirm = congestion.restart(
            now,
            self._restart_rate(now),
            paced=not adopted,
            slow=slow,
            past_clamp=self._probes_past[1],
        )
        # (the probe is still out, past the clamp: one more than what is out now)
        self._confirm_slots = self.in_flight + 1 if confirm else 0
        self._wake_slots()

    def _restart_rate(self, now: float) -> float:
        """What a stall's accepted probe restarts the rate at: what the server delivered over
        all the log remembers (the stall's pause in it), or, when the sends after the stall's
        last refusal went at a steady pace and the server took every one of them
        (``TAKEN_RUN`` or more before the probe: a bucket of burst one refused the opening's
        burst, not its pace), that pace, if higher."""
        delivered = self._delivered(now, None, whole=True)
        taken = pace_of(*self.log.taken_after_refusals(self.congestion.probe_sent), TAKEN_RUN)
        return delivered if taken is None else max(delivered, taken)

    def _wary_taken(self, wary: Send, now: float) -> None:
        """The send that went alone after one refusal in a window shown before was accepted.
        With as many of ours in the window as the refused one had, the refusal was random; with
        fewer (ours left it in between: a 429 a round trip late, or a loop reading it late), the
        room may be theirs, and the window may hold less now (a limit that dropped): it is read
        from what it held with the accepted send in it and scanned up to what refused."""
        shown, rpm = self._shown(), self.limits["rpm"]
        if shown is None:
            return
        holding = held(self.log, wary.sent_at, shown.length, through=wary)
        if holding + WARY_DROP > self._wary_held:
            return
        read = Shown(max(MIN_COUNT, holding), shown.length, upper=self._wary_held)
        if rpm.infer(read, now, self.log, self.congestion.refusal_rtt):
            self._scan, self._scan_upper, self._scan_up = [], float(self._wary_held), None

    def _undo_cut(self) -> None:
        """A trial found the refusals random: the in-flight window (and its growth) as it was."""
        trial = self.congestion.undone
        self.congestion.undone = None
        if trial is not None:
            self.opening.resume(trial.limiter_window, trial.growing_before, self.max_concurrency)

    def _read_named(
        self, learned: dict[str, int], now: float, stated: float | None, send: Send | None
    ) -> str:
        """How to read a 429 that names limits, refusing ``send``: "adopted", "noise",
        "leftover" or "congestion"."""
        sent_at = send.sent_at if send is not None else None
        verdicts = []
        if "concurrency" in learned:
            limit = learned["concurrency"]
            if limit < self.max_concurrency:
                self.max_concurrency = limit
                self.opening.window = limit
                self.concurrency_source = "learned"
                logger.info("server limit learned from a 429: concurrency %d", limit)
            # What the server held of ours when the refused one came (it was in flight too):
            # the requests since, a 429 a round trip late, do not explain it.
            ahead = self._accepted_in_flight() if send is None else send.ahead
            in_flight = ahead + 1
            if in_flight > limit:
                verdicts.append("adopted")  # our own excess explains it
            elif in_flight < BELOW_LIMIT * limit:
                verdicts.append("noise")
            else:
                verdicts.append("congestion")  # someone else uses the org's slots too
        for name in ("rpm", "tpm"):
            if name in learned:
                verdict = self.limits[name].read(
                    learned[name], now, stated, self._adoption(sent_at)
                )
                verdicts.append(verdict)
        for verdict in ("congestion", "leftover", "adopted"):
            if verdict in verdicts:
                return verdict
        return "noise"

    def _wake_slots(self) -> None:
        """Wake as many slot waiters as there are free slots (they re-check on waking)."""
        if not self._slot_waiters:
            return
        free = self._slots() - self.in_flight
        while free > 0 and self._slot_waiters:
            waiter = self._slot_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                free -= 1

    def _slots(self) -> int:
        """The in-flight limit a send is held to now: ``concurrency``, and one more for a
        stall's probe when the window the stall clamped is full (the probe asks the server for
        room; held back by our own clamp, a rate window whose answers outlast it reads as a
        concurrency limit: 5 per 5 s with 8 s answers was held to 5 in flight, 0.7/s)."""
        slots = self.concurrency
        congestion = self.congestion
        if self._confirm_slots:
            return min(self.max_concurrency, max(slots, self._confirm_slots))
        if (
            congestion.stalls
            and not congestion.probing
            and congestion.window is not None
            and self._past_refused < self._past_probes()
        ):
            return min(self.max_concurrency, slots + 1)
        return slots

    def _past_probes(self) -> int:
        """How many of a stall's probes may be refused past the window it clamped before the
        next waits for an answer of ours: ``PAST_PROBES``; one for each of the usual lengths
        when the stall took enough of ours to show a window (``MIN_COUNT``) and nothing said
        when the server has room, so that a window of 10 s or more whose answers outlast it is
        found as it ends too (a concurrency limit pays one refusal more for each length that
        ends before its first answer)."""
        taken = self.stall.taken
        if taken is not None and taken.count >= MIN_COUNT and not self._told:
            return len(WINDOW_LENGTHS_S)
        return PAST_PROBES

    def _first_probe_past(self, now: float) -> bool:
        """Whether the stall's first probe is due now, and would go past the window the stall
        clamped (full of ours, none answered), with nothing saying when the server has room (no
        wait stated, no window shown before) and not yet deferred."""
        congestion = self.congestion
        return (
            congestion.stalls == 1
            and not congestion.probing
            and not self._deferred
            and congestion.window is not None
            and now >= self.pause_until
            and self.in_flight >= self.concurrency
        )

    def _wait_needed(self, tokens: int) -> tuple[float, str]:
        """Seconds to wait before this request may go (inf: wait for a release), and why."""
        now = self.clock()
        self.log.expire(now)
        self._scan_next = self._fixed_next = False
        self._rise_held(now)
        if self._scan:
            self._judge_scan(now)
        if self._fixed is not None:
            self._judge_fixed(now)
        waits = [(self.pause_until - now, "pause")]
        congestion = self.congestion
        judging: list[float] = []  # when a send out past the clamp (or the probe) is judged
        if congestion.probing:
            deadline = congestion.probe_sent + congestion.judge_after()
            if now >= deadline:  # no 429 for the probe: the server has room again
                self._restart(now)
            else:
                waits.append((deadline - now, "rate"))
                judging.append(deadline)
        elif self._first_probe_past(now):
            # The stall's first probe would go past the window it clamped, full of ours: it
            # goes as the next of the usual lengths ends (a bucket may have room within a
            # moment, which says nothing of its rate: its saved burst does).
            taken = self.stall.taken
            if taken is not None:
                pause = congestion.stall_pause(
                    None, since=taken.first - now, last=taken.last - now, full=True
                )
                self.pause_until = max(self.pause_until, now + pause)
                waits.append((self.pause_until - now, "pause"))
            self._deferred = True
        confirm = self._confirm_send
        if confirm is not None:
            due = self._judged_at(confirm)
            if now >= due:  # taken too: no concurrency limit held the clamp
                self._confirm_send = None
                congestion.unclamp()
                self._wake_slots()  # (those parked for a slot: nothing else may wake them)
            else:
                judging.append(due)
        wary = self._wary_send
        if wary is not None:
            due = self._judged_at(wary)
            if now < due and not wary.refused:
                waits.append((due - now, "rate"))
            else:
                self._wary_send = None
                if not wary.refused:
                    self._wary_taken(wary, now)
        if self.in_flight >= self._slots():
            if judging:
                # (wake to judge it: parked for a slot, none might wake before its answer)
                return min(judging) - now + 1e-6, "rate"
            # The slow start's window, while it grows, is the opening's (no limit holds it).
            learned = congestion.window
            most = self.max_concurrency if learned is None else min(learned, self.max_concurrency)
            return math.inf, "opening" if self.opening.window < most else "concurrency"
        for name, amount in (("rpm", 1.0), ("tpm", float(tokens))):
            limit = self.limits[name]
            if limit.value is None:
                continue
            limit.rejudge(now, self.log)
            window = self.log.tokens if name == "tpm" else self.log.requests
            capacity = limit.value * limit.window_s / WINDOW_S
            if name == "tpm":
                amount = min(amount, capacity)
            wait = 0.0 if limit.how == "bucket" else window.wait(now, amount, capacity)
            fixed = self._fixed
            if name == "rpm" and fixed is not None and fixed.left and limit.source == "shown":
                self._fixed_next = True
                continue  # the fixed probe's: past the window and its pacer
            if name == "rpm" and wait > 0 and not self._scan_upper and self._may_scan_up(now):
                # Held by it for long: look past it (the limit may have risen). Until a 429
                # names it; one that names nothing, up to twice what it holds (a fixed
                # window's refill, seen by a trailing log, looks like up to that much room: a
                # rise found past it is undone, back to what it was).
                named = limit.source == "learned"
                upper = math.inf if named else UP_STEP * limit.window_count() + 1
                self._scan, self._scan_upper, self._scan_up = [], upper, limit.value
                self.up_scans += 1
            if name == "rpm" and wait > 0 and self._scan_upper and limit.source != "set":
                wait = self._scan_wait(now, wait)
                if wait <= 0:
                    continue  # the scan's next send: past the window and its pacer
            waits.append((wait, name))
            if name == "rpm" and self._rose is not None:
                waits.append((self._past_rise_wait(now), name))
            if name == "rpm" and window.fixed_from is not None:
                waits.append((self._ramp_wait(now), name))
            if limit.pacer is not None:
                waits.append((limit.pacer.wait(now, amount), name))
        waits.append((self.opening.wait(now), "opening"))
        if congestion.pacer is not None:
            waits.append((congestion.pacer.wait(now, 1.0), "rate"))
        wait, cause = max(waits)
        if self._scan:
            # Wake when the scan's next send out is judged: the window may then hold more.
            wait = min(wait, self._judged_at(self._scan[0]) - now)
        if self._fixed is not None and self._fixed.out:
            wait = min(wait, self._judged_at(self._fixed.out[0]) - now)
        # Sleep a hair past the boundary so float rounding cannot leave it a hair short.
        return (wait + 1e-6 if wait > 0 else wait), cause
