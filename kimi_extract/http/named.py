"""Per-minute limits (RPM, TPM): told, or named in a 429 and learned with their window.

A ``Limit`` is one of them: its value and where it came from, the window it is counted in (Kimi's
60 s unless the server shows a shorter one), its ``Pacer`` and how a 429 that names it is read
(``read``). The ``Limiter`` keeps one per kind and checks its log and pacer before every send.

- **Adopting** a named limit below the one in force (``adopt``): its window is the longest in
  which our accepted sends already fill it, as a burst of ours shows (only an opening burst
  can: after a while at a steady rate every window is full of a lower limit; and a burst of
  tokens only once they are known, each its usage or estimated after an answer calibrated the
  estimates: ``SendLog.tokens_known``), and no longer than makes
  the log owe more than the wait the server states (Kimi rounds it up to whole seconds): a lower
  limit applies from now on, and the past is owed only as long as the server says. When a burst
  showed what the window takes, ``BURST_SHARE`` of it may go at once later (a lower limit later
  adopted in that window too: its window is taken whole as it refills). The log counts the
  window a little longer (``EDGE_MIN_S`` .. ``EDGE_MAX_S``), so a send that takes the place of one
  a window ago does not reach the server first.
- **A token bucket** (``bucket_burst``): when the first limit a 429 names is taken in the window
  its stated wait allows (Kimi states "1 seconds" for any shorter wait, so 2.2 s for 50/s with
  100 saved), but our accepted requests hold more than 1.5 times what a log of that window could,
  no such log is what the server keeps. The pacer alone holds it: at the limit's rate, empty at
  the 429, saving up to ``BURST_SHARE`` of the burst the server let through. Held by the log,
  each pause let out only what had left its short window, and what the bucket saved meanwhile
  was never used (2,000 rows behind 50/s with 100 saved: 41.0 s, not 39.4 s; 1/s buckets took
  twice as long).
- **Reading** a 429 that names a limit we keep (``read``): within a window of adopting it while we
  were above it, it is the rest of that burst in the server's window ("leftover": everyone waits
  the stated time); below ``BELOW_LIMIT`` of it, not a rate signal ("noise": only that request
  waits); at its rate but the first in a window, a send at the window's edge ("leftover"); again
  within a window, someone else shares the quota ("congestion"). A 429 for a request sent before
  the last one naming the limit came back is that same moment (a busy loop or a long round trip
  reads 429s late, and the requests sent meanwhile are refused too), read as it was; so is one
  for a request sent at a window's edge before the wait its 429 stated ran out (Kimi states "1
  seconds" for any shorter wait, and everyone waits only ``LEFTOVER_WAIT_S`` of it: a request
  sent after that, refused, is of the same edge). Again within a window, but with our own sends
  filling ``EDGE_FULL`` of it or more by the log (not a token bucket's: it has no window), it is
  the window's edge again, not someone else: under load a TPM's window, refilling in the bursts
  it was filled in, was refused at one edge twice 0.5 s apart, or at two edges 8 s apart, and
  cut to an adaptive rate of 34-46/s against its 51/s (2,000 rows in 42-45 s, not 36.5 s).
  When it is for a request of the burst a window was read from, the window is read again
  without it (counted as taken, the refused sends made the window look longer, and a longer
  one held more). So is a
  window the stated wait bounded, or a token bucket read from it, whole, unless it was read
  shorter than ``SHORT_WINDOW_S`` (``reread``): Kimi's text on a server counting RPM 300 in
  10 s, answers of 0.3 s and 429s 50 ms late, read 41 sends refused in that moment as taken,
  and the opening as a bucket's burst; after every window the next send was refused and
  everyone waited (36.3 s for 160 rows, now 30.95 s).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from typing import Protocol

from ..kimi import LIMIT_MESSAGES
from .congestion import Congestion
from .pacing import MAX_WINDOW_S, MIN_WINDOW_S, Pacer, SendLog
from .shown import Shown

logger = logging.getLogger("kimi_extract")

WINDOW_S = MAX_WINDOW_S
#: Pacing at this share of the limit, so jitter on the way never tips a window over it...
PACING_SHARE = 0.99
#: ...and bursts of at most this many seconds' worth (at least one request)...
PACING_BURST_S = 0.05
#: ...or, when a burst of ours showed what a learned window takes, this share of that burst.
BURST_SHARE = 0.9
#: A limit named in a 429 or shown by a stall is looked past (``Limiter``'s scan up, ``rising``)
#: this long after it was adopted: a tier that rose mid-run (Kimi's rise with top-ups) is found
#: and used; twice as long after each scan that found no room past it, up to ``UP_MAX_S``.
UP_AFTER_S, UP_MAX_S = 120.0, 960.0
#: A limit that takes fewer requests than this in ``UP_AFTER_S`` is scanned past on the clock of
#: its requests, not of seconds: first once it took this many, then twice as many, ... (a scan
#: costs a refusal or two: a fixed 60 s window of 5 with 180 s answers, 300 rows in 3,760 s,
#: was scanned past four times, 16 of 316 requests refused where 9 of 309 were before any scan).
UP_SENDS = 100
#: A learned window is counted this much longer in the log: twice the time a 429 took to come
#: back, within these bounds; a window a stall showed, at least ``SHOWN_EDGE_MIN_S``. (0.1 s cost
#: 4 % of the 2.2 s window a token bucket's burst showed with Kimi's text, when a log held it.
#: At 0.05 s for a window a stall showed, the real matrix's halving limit with bare 429s refused
#: 18 of 218 requests in two runs of three, not 10 of 210: not seen on the virtual clock, not
#: examined.)
EDGE_MIN_S, EDGE_MAX_S = 0.05, 0.5
SHOWN_EDGE_MIN_S = 0.1
#: A 429 naming a limit while our recent rate is below this share of it is not a rate signal.
BELOW_LIMIT = 0.8
#: ...and one for a send that, by our log, filled at least this share of the limit's window is
#: at its edge: ours, not someone else's use of the quota.
EDGE_FULL = 0.95
#: Accepted sends above this many times what the log of a window the stated wait allows could
#: hold show a token bucket (``bucket_burst``), not a window.
BUCKET_EVIDENCE = 1.5
#: Windows read from a burst of ours (or bounded by the wait a 429 stated): what may go at once
#: is read again once all of the burst is judged (``rejudge``).
READ = ("burst", "stated wait")
#: A window bounded by a stated wait, or a bucket read from it, read shorter than this is not
#: read again (``reread``): a window of a second or two, read again without the refused sends,
#: holds fewer than the log's edge (``log_margin``) costs. Read again, with 429s 200 ms late the
#: sweep's 1 s windows and 10/s buckets of burst 1 (read as 1.4 s) ended up to 14 % later, and
#: with them 10 ms late its 1/s buckets of burst 1 (read as 2 s) 4 % later; its windows of 5 s
#: and more gained.
SHORT_WINDOW_S = 2.5
LABELS = {"concurrency": "concurrency", "rpm": "RPM", "tpm": "TPM"}


def limits_in_message(message: str) -> dict[str, int]:
    """The limits a Kimi 429 message names, e.g. ``{"rpm": 3000}``."""
    found = {}
    for name, pattern in LIMIT_MESSAGES.items():
        match = pattern.search(message)
        if match:
            found[name] = int(match.group(1))
    return found


def bucket_burst(log: SendLog, now: float, per_minute: int, length: float) -> float | None:
    """The burst a token bucket let through, when our accepted requests show one: they hold
    more than ``BUCKET_EVIDENCE`` times what a trailing log of ``length`` could (the longest
    window the server's stated wait allows), so no such log holds them. Returns the most they
    went above the limit's rate over any span ending now (what the server had saved up), or
    None. (Requests only: tokens sent before any answer came back are estimates.)"""
    rate = per_minute / MAX_WINDOW_S
    if log.accepted(now, length) <= BUCKET_EVIDENCE * rate * length:
        return None
    count, most = 0.0, 0.0
    for send in log.newest():
        if not send.refused:
            count += 1.0
            most = max(most, count - rate * (now - send.sent_at))
    return most


def log_margin(refusal_rtt: float, least: float = EDGE_MIN_S) -> float:
    """How much longer the log counts a learned window: twice the time a 429 takes to come
    back, within ``least`` .. ``EDGE_MAX_S``."""
    return min(EDGE_MAX_S, max(least, 2 * refusal_rtt))


@dataclass
class Adoption:
    """What adopting a limit reads from the limiter: its log, the time a 429 takes to come back
    (sends younger than ``judged_before`` may still be refused), and one request's tokens."""

    log: SendLog
    judged_before: float
    refusal_rtt: float
    each_tokens: float
    sent_at: float | None = None  # when the refused request was sent
    calibrated_at: float | None = None  # when an answer first calibrated the token estimates


@dataclass
class Limit:
    """A per-minute limit on requests (``"rpm"``) or tokens (``"tpm"``); module docstring."""

    name: str
    value: int | None
    source: str = "set"  # "set", "learned" (named in a 429) or "shown" (by a stall: ``shown``)
    since: float = 0.0  # when it was adopted
    window_s: float = MAX_WINDOW_S
    how: str = ""  # how the window was learned ("" when it is the default; "bucket": none)
    least_s: float = MIN_WINDOW_S  # the shortest the server's stated wait allows it to be
    read_at: float | None = None  # when the window was read from a burst of ours (``reread``)
    stated: float | None = None  # the wait the 429 it was read from stated
    #: ...and when all of that burst's sends are judged: what may go at once was read from
    #: those judged then, and is read again from them all (``rejudge``; None: nothing to read).
    burst_judged_at: float | None = None
    burst_before: bool = False  # we were above it when we learned it
    refused_at: float = -math.inf  # the last 429 naming it
    verdict: str = "noise"  # how it was read
    #: A send at the window's edge was refused ("leftover"): until the wait its 429 stated
    #: runs out (we wait less when it is a second or less), a refused send is of that edge.
    edge_until: float = -math.inf
    pacer: Pacer | None = None
    #: A window a stall showed: fixed (True: it refills whole as each of its windows begins),
    #: trailing (False: a probe of it found a sliding log, or a fixed reading failed) or not
    #: known (None).
    fixed: bool | None = None
    #: When a scan may next look for room past it (``rising``), and how long after that.
    up_at: float = math.inf
    up_every: float = UP_AFTER_S
    #: What it was before a rise a scan found, not yet borne out: its value and its pacer's
    #: capacity (``fall_back``).
    risen_from: tuple[int, float | None] | None = None
    #: The value a 429 named when a scan past it found room and twice it was taken (None: the
    #: value is the one named).
    scanned_from: int | None = None

    @property
    def tokens(self) -> bool:
        return self.name == "tpm"

    def new_pacer(self, now: float, *, full: bool, burst: float | None = None) -> Pacer | None:
        """A pacer at ``PACING_SHARE`` of the limit (None when there is no limit)."""
        if self.value is None:
            return None
        return Pacer(*self._pacing(burst), now, full=full)

    def _pacing(self, burst: float | None, share: float = BURST_SHARE) -> tuple[float, float]:
        """The pacer's rate (``PACING_SHARE`` of the limit) and capacity (``share`` of
        ``burst``, if any, else a moment's worth)."""
        rate = (self.value or 0) * PACING_SHARE / WINDOW_S
        return rate, max(rate * PACING_BURST_S, share * burst if burst else 0.0)

    def recent_rate(self, log: SendLog, now: float) -> float:
        """Our accepted rate (requests or tokens per second) over two of the limit's windows
        (sends may come in a window's worth at once), or the time it takes to allow 20 requests
        when that is longer; at least 2 s, at most a minute."""
        per_s = (self.value or 0) / WINDOW_S
        span = 2.0 if self.tokens or not per_s else 20 / per_s
        span = min(WINDOW_S, max(2.0, span, 2 * self.window_s))
        return log.accepted(now, span, tokens=self.tokens) / span

    def read(self, value: int, now: float, stated: float | None, context: Adoption) -> str:
        """A 429 named this limit as ``value``: "adopted", "leftover", "noise" or "congestion"
        (module docstring)."""
        if value > (self.value or math.inf):
            return "noise"  # a limit above ours: not what holds us
        sent_at = context.sent_at if context.sent_at is not None else now
        if self.value is None or value < self.value:
            self.adopt(value, now, stated, context)
            verdict = "adopted"
        else:
            if self.read_at is not None and sent_at <= self.read_at:
                # One more of the burst it was read from was refused.
                self.reread(self.read_at, now, context)
            if self.verdict != "adopted" and sent_at < self.refused_at:
                # Sent before the last 429 naming it came back: the same moment, read the same.
                return self.verdict
            if self.verdict == "leftover" and sent_at < self.edge_until and self.how != "bucket":
                # Sent before the edge's stated wait ran out: that edge (not "again").
                return "leftover"
            verdict = self._verdict(value, now, context)
            if verdict == "leftover" and stated is not None:
                self.edge_until = now + stated
        self.refused_at, self.verdict = now, verdict
        return verdict

    def _verdict(self, value: int, now: float, context: Adoption) -> str:
        log = context.log
        if self.burst_before and now - self.since < self.window_s:
            return "leftover"  # the server still counts our burst from before
        if self.recent_rate(log, now) < BELOW_LIMIT * value / WINDOW_S:
            return "noise"
        if now - self.refused_at > self.window_s:
            return "leftover"  # once in a window, at its edge: a short pause
        if self.how != "bucket" and self._filled(context) >= EDGE_FULL * self.window_count():
            return "leftover"  # again, but our own sends filled the window: its edge again
        return "congestion"  # again and again with room left: someone else shares the quota

    def _filled(self, context: Adoption) -> float:
        """What our log held of the limit's window with the refused send in it: the sends the
        server took in the window before it, and it."""
        log, sent_at = context.log, context.sent_at
        if sent_at is None:
            return 0.0
        one = context.each_tokens if self.tokens else 1.0
        return one + log.accepted(sent_at, self.window_s, tokens=self.tokens, until=sent_at)

    def reread(self, read_at: float, now: float, context: Adoption) -> None:
        """A send of the burst the window was read from at ``read_at`` was refused after all:
        the window as the burst shows it without that send (shorter: it held fewer), never below
        what the server's stated wait required. A window the stated wait bounded, or a token
        bucket read from it, is read again whole, as at ``read_at`` with what is known now: the
        refused sends, counted as taken, made the window look longer, or the burst look larger
        than a window that long could hold."""
        log = context.log
        if self.how in ("stated wait", "bucket"):
            if self.value is not None and self.window_s >= SHORT_WINDOW_S:
                self._read_whole_again(read_at, now, context)
            return
        window = log.window_for(read_at, self.value or 0, tokens=self.tokens, judged_before=read_at)
        if window is None or window >= self.window_s:
            return
        self.window_s = max(window, self.least_s)
        self._keep_log(context, now)

    def _read_whole_again(self, read_at: float, now: float, context: Adoption) -> None:
        """``reread`` a window the stated wait bounded, or a bucket: adopted again as at
        ``read_at``, the sends refused since known. A bucket read again as a bucket is kept as
        it was (its pacer has been spending since)."""
        before = replace(self)
        value, self.value = self.value, None
        judged = replace(context, judged_before=min(context.judged_before, read_at))
        self.adopt(value or 0, read_at, self.stated, judged, again=True)
        if before.how == self.how == "bucket":
            self.__dict__.update(before.__dict__)
            self._keep_log(context, now)

    def _keep_log(self, context: Adoption, now: float) -> None:
        """The log counts this limit's window from now on, and the edge a 429's round trip
        leaves (``log_margin``)."""
        log = context.log
        window = log.tokens if self.tokens else log.requests
        log.set_length(window, self.window_s + log_margin(context.refusal_rtt), now)

    def adopt(
        self, value: int, now: float, stated: float | None, context: Adoption, again: bool = False
    ) -> None:
        """Keep to ``value`` from now on: its window, pacer and log (module docstring);
        ``again``: read again (``reread``), logged only if the window changed."""
        length_before = self.window_s
        log, tokens, previous = context.log, self.tokens, self.value
        # Only an opening burst shows a window: after a while at a steady rate every window of
        # the log is full of a lower limit. A burst of tokens shows one only when they are
        # known: every send's usage came back, or was estimated after an answer had calibrated
        # the estimates (before, a guess at the completion and the prompt's scale). The window
        # is read long (sends whose 429 may still be on the way counted as taken) and what may
        # go at once short (only those judged).
        shows = previous is None and (not tokens or log.tokens_known(context.calibrated_at))
        window = log.window_for(now, value, tokens=tokens, judged_before=now) if shows else None
        judged = (
            log.window_for(now, value, tokens=tokens, judged_before=context.judged_before)
            if shows
            else None
        )
        length, how = (window, "burst") if window is not None else (self.window_s, self.how)
        burst = value * judged / WINDOW_S if judged is not None else None
        if burst is None and previous is not None and how == "burst":
            # A lower limit in the window a burst showed before: its window is taken whole as
            # it refills, as the higher one's was (paced evenly, a drop at 30 s left the server's
            # window half empty in every 10 s after it).
            burst = value * length / WINDOW_S
        if stated is not None:
            # Once the stated wait is over the log must let sends go on (the next two fit: the
            # next alone may slip into the one place left); else a shorter window shows.
            amount = 2 * (context.each_tokens if tokens else 1.0)
            allowed = stated + min(1.0, 0.2 * stated)  # (whole seconds, rounded up)
            # A lower limit: only the sends judged owe. Those since may be refused too, their
            # 429s on the way (counted as taken, a burst of 41 into a window halved to 25 read
            # as a window of 1.2 s). The first limit's opening burst counts whole, as before: a
            # token bucket is read from it (counting only the sends judged, the bucket tests'
            # buckets were no longer read as buckets).
            judged = math.inf if previous is None else context.judged_before

            def owed(span: float) -> float:
                return log.wait_under(
                    now, value, span, tokens=tokens, amount=amount, judged_before=judged
                )

            if owed(length) > allowed:
                low, high = MIN_WINDOW_S, length
                for _ in range(20):
                    middle = (low + high) / 2
                    owes = owed(middle)
                    low, high = (middle, high) if owes <= allowed else (low, middle)
                length, how = low, "stated wait"
                whole = round(value * length / WINDOW_S)
                if not tokens and 0 < whole - value * length / WINDOW_S < 1e-3:
                    # The search ends a hair short of a whole request: a window of 1.99999 s
                    # at RPM 60 holds 1 request, not 2 (every send waited 2 s, not 1).
                    length = whole * WINDOW_S / value
            length = max(length, min(stated, MAX_WINDOW_S))
        shown_burst = None
        if how == "stated wait" and previous is None and not tokens:
            shown_burst = bucket_burst(log, now, value, length)
            how = "bucket" if shown_burst is not None else how
        self.least_s = MIN_WINDOW_S if stated is None else min(stated, MAX_WINDOW_S)
        recent = self.recent_rate(log, now) if previous is not None else None
        self.value, self.source, self.since = value, "learned", now
        self.scanned_from = None
        if not again:
            self._looked_past_from(now)
        self.window_s, self.how = length, how
        read = how in (*READ, "bucket") and window is not None
        self.read_at = now if read else None
        self.stated = stated
        self.burst_judged_at = None
        if self.read_at is not None and (
            again or burst is not None and judged is not None or length >= SHORT_WINDOW_S
        ):
            # (none of the burst judged yet, a 429 a round trip late: what may go at once in
            # a window as long as the log's edge or more is read when they all are, not left
            # at a moment's worth)
            self.burst_judged_at = now + max(0.0, now - context.judged_before)
        self._keep_log(context, now)
        if recent is None:
            recent = log.accepted(now, min(length, 2.0), tokens=tokens) / min(length, 2.0)
        self.burst_before = recent >= BELOW_LIMIT * value / WINDOW_S
        self.pacer = pacer = self.new_pacer(now, full=burst is not None, burst=burst)
        if shown_burst is not None and pacer is not None:
            # A token bucket: the pacer alone keeps to it, empty now (the server's bucket
            # just refused), saving up to ``BURST_SHARE`` of the burst it let through.
            capacity = self._pacing(shown_burst)[1]
            pacer.capacity, pacer.level = max(1.0, capacity), 0.0
        if stated is not None and pacer is not None and previous is not None:
            # A lower limit: the past is owed only as long as the server says, the next send
            # may go once its stated wait is over. (An empty pacer owes a burst's worth: at RPM
            # 6 after a drop, the next send waited 20.2 s where the server asked for 8.) Not the
            # first limit learned, after a burst of ours: Kimi states "1 seconds" at RPM 3.
            need = min(context.each_tokens if tokens else 1.0, pacer.capacity)
            pacer.level = max(pacer.level, need - pacer.rate * stated)
        if again and length == length_before:
            return
        logger.info(
            "server limit %s from a 429: %s %d (counted in %g s)",
            "read again" if again else "learned",
            LABELS[self.name],
            value,
            length,
        )

    def rejudge(self, now: float, log: SendLog) -> None:
        """Every send of the burst the window was read from is judged by now: what may go at
        once, read from the sends judged then (a 429 a round trip late: the last half-second
        of a 200 ms server's opening), is read again from all of them that were accepted. (It
        only grows: one refused since is ``reread``.)"""
        due, read_at, pacer = self.burst_judged_at, self.read_at, self.pacer
        if due is None or now < due:
            return
        self.burst_judged_at = None
        if read_at is None or pacer is None or self.value is None or self.how not in READ:
            return  # (read since as something else: a stall's window, a lower limit)
        judged = log.window_for(read_at, self.value, tokens=self.tokens, judged_before=read_at)
        if judged is None:
            return
        capacity = self._pacing(self.value * min(judged, self.window_s) / WINDOW_S)[1]
        if capacity > pacer.capacity:
            pacer.refill(now)
            pacer.level += capacity - pacer.capacity
            pacer.capacity = capacity

    def rising(self, now: float) -> bool:
        """Whether a scan may look for room past this limit now (it may have risen): a limit
        on requests named in a 429 or shown by a stall, kept ``up_every`` (``UP_AFTER_S`` at
        first) in a trailing log; not a fixed window (its refill looks like room) nor a bucket
        (its pacer holds it, not a window)."""
        return (
            self.name == "rpm"
            and self.source in ("learned", "shown")
            and self.value is not None
            and self.fixed is not True
            and self.how != "bucket"
            and now >= self.up_at
        )

    def scanned(self, now: float, *, rose: bool) -> None:
        """A scan past this limit ended, refused (or the rise it found was undone): the next
        looks ``UP_AFTER_S`` later when this one found room (``rose``; it may rise further),
        else twice as long after as the last (up to ``UP_MAX_S``); either on the clock of its
        requests when it is slow (``up_gap``)."""
        if not rose:
            self.up_every = min(UP_MAX_S, 2 * self.up_every)
        self.up_at = now + self.up_gap(UP_AFTER_S if rose else self.up_every)

    def up_gap(self, seconds: float) -> float:
        """``seconds`` on the clock of its requests (``UP_SENDS``): as many times longer as the
        limit takes fewer than ``UP_SENDS`` in ``UP_AFTER_S``."""
        per_s = (self.value or 0) / WINDOW_S
        return seconds * max(1.0, UP_SENDS / (per_s * UP_AFTER_S)) if per_s > 0 else seconds

    def rise(self, value: int, now: float, *, named: bool) -> None:
        """A limit named in a 429 rose to ``value`` (``named`` by a 429 too, or twice it: a
        scan past it found room): paced evenly at it from now on, a moment's worth at once (the
        sends the scan let past it are still in the server's window, and a window read a little
        short would refuse the ones that went as the log freed room)."""
        self.scanned_from = None if named else self.value
        self.value = value
        self.pacer = self.new_pacer(now, full=True)

    def note_rise(self) -> None:
        """A scan found room past it: remember what it was (``fall_back``)."""
        if self.value is not None:
            pacer = self.pacer
            self.risen_from = (self.value, None if pacer is None else pacer.capacity)

    def fall_back(self, now: float) -> None:
        """The rise a scan found was refused: back to what it was (``note_rise``), its pacer
        empty (the server just refused)."""
        if self.risen_from is None:
            return
        (self.value, capacity), self.risen_from = self.risen_from, None
        self.scanned_from = None
        if capacity is None:
            self.pacer = None
        else:
            self.pacer = Pacer(self._pacing(None)[0], capacity, now, full=True)
            self.pacer.level = 0.0

    def _looked_past_from(self, now: float) -> None:
        """Adopted now: the first scan past it may go ``UP_AFTER_S`` from now (``up_gap``)."""
        self.up_at, self.up_every = now + self.up_gap(UP_AFTER_S), UP_AFTER_S

    def window_count(self) -> float:
        """How many requests (or tokens) one of its windows holds."""
        return (self.value or 0) * self.window_s / WINDOW_S

    def infer(self, shown: Shown, now: float, log: SendLog, refusal_rtt: float) -> bool:
        """Keep to the window a stall of unnamed 429s ``shown`` (``shown`` module): ``count``
        per ``length`` in the log, ``BURST_SHARE`` of it at once. Not when a limit told or named
        is lower; returns whether it was adopted."""
        value = math.ceil(shown.per_minute - 1e-9)  # (a window of ``length`` holds ``count``)
        if self.value is not None and self.source != "shown" and value >= self.value:
            return False
        self.value, self.source, self.since = value, "shown", now
        self._looked_past_from(now)
        self.window_s, self.how, self.burst_before = shown.length, "stall", False
        self._trail(log_margin(refusal_rtt, SHOWN_EDGE_MIN_S), now, log, shown.count)
        logger.info(
            "server window shown by a stall of unnamed 429s: %d requests per %.3g s",
            shown.count,
            shown.length,
        )
        return True

    def fix(self, origin: float, now: float, log: SendLog) -> None:
        """The window a stall showed is fixed: it refilled whole at ``origin`` (when the stall's
        probe found room) and does so every ``window_s`` after. The log counts each fixed window
        and sends go as soon as one begins: no pacer spreads them."""
        self.fixed, self.pacer = True, None
        log.set_length(log.requests, self.window_s, now, fixed_from=origin)
        logger.info(
            "server window shown by a stall is fixed: %d requests at once every %.3g s",
            round(self.window_count()),
            self.window_s,
        )

    def trails(self, length: float, now: float, log: SendLog, refusal_rtt: float) -> None:
        """The window a stall showed is a sliding log of ``length`` (a probe found the room
        its sends that left it made, and none past it: ``shown.FixedProbe``): counted that long
        and a round trip or two longer (``log_margin``, as a window a 429 named), not as long
        as the stall read it and ``SHOWN_EDGE_MIN_S`` longer. The probe saw all of the count
        taken, so the log alone keeps to it: no pacer (as in a fixed window). Its pacer let
        ``BURST_SHARE`` of the count go at once and refilled at ``PACING_SHARE`` of the limit:
        the last sends of each round waited for it (0.19 s for the last of 50 per 10 s), and
        each round after began that much later."""
        count = self.window_count()
        self.fixed, self.window_s, self.how = False, length, "probe"
        self.value = math.ceil(count * WINDOW_S / length - 1e-9)
        self._trail(log_margin(refusal_rtt), now, log, None)

    def unfix(self, now: float, log: SendLog, refusal_rtt: float) -> None:
        """A fixed window refused a send: its edges are not where they were read. Back to a
        trailing log of it (``infer``), and no fixed reading again."""
        self.fixed = False
        self._trail(log_margin(refusal_rtt, SHOWN_EDGE_MIN_S), now, log, self.window_count())

    def _trail(self, edge: float, now: float, log: SendLog, burst: float | None) -> None:
        """Keep to the window a stall showed as a trailing log: its length and ``edge`` longer
        in the log, a full pacer with ``burst`` (``BURST_SHARE`` of it) at once (None: the log
        alone, no pacer)."""
        log.set_length(log.requests, self.window_s + edge, now)
        self.pacer = None if burst is None else self.new_pacer(now, full=True, burst=burst)

    def widen(self, count: float, now: float) -> None:
        """A window a stall showed (or a limit named in a 429, which rose) holds ``count``,
        more than it was read as (a scan found room past it; or less, a rise undone): keep to
        that, its pacer's rate and burst with it. The scan saw each of them taken, so all of
        them may go at once as the window refills (``BURST_SHARE`` of it held the last tenth
        back until the pacer refilled: in a sliding window the round after the scan ended 0.2 s
        later, and so did each round after it)."""
        self.value = math.ceil(count * WINDOW_S / self.window_s - 1e-9)
        pacer = self.pacer
        if pacer is not None:
            pacer.refill(now)
            pacer.rate, capacity = self._pacing(count, share=1.0)
            pacer.capacity = max(1.0, capacity)


class LimiterView(Protocol):
    """What ``describe`` reads of a limiter."""

    limits: dict[str, Limit]
    max_concurrency: int
    concurrency_source: str
    congestion: Congestion
    stated_waits: int  # 429s that said how long to wait

    @property
    def window_allowed(self) -> int: ...


def describe(cause: str, limiter: LimiterView, short: bool = False) -> str:
    """The limit behind ``cause`` ("concurrency", "rpm", "tpm", "rate" or "pause"), where it
    came from and, unless ``short``, how it was learned, e.g. "RPM 300 (learned from a 429
    naming it, counted in 10 s)"."""
    congestion = limiter.congestion
    if cause == "concurrency":
        learned = congestion.window
        if learned is not None and learned < limiter.max_concurrency:
            if short:
                return "adaptive concurrency"
            return f"adaptive concurrency {learned:,} (from 429s that named no limit)"
        if limiter.window_allowed < limiter.max_concurrency:
            return "concurrency window (adaptive)"
        value, source, how = limiter.max_concurrency, limiter.concurrency_source, ""
        label = "concurrency"
    elif cause in ("rpm", "tpm") and limiter.limits[cause].source == "shown":
        limit = limiter.limits[cause]
        kind = "fixed window" if limit.fixed else "window"
        if short:
            return f"{kind} (shown)"
        return (
            f"{kind} of {round(limit.window_count()):,} requests per {limit.window_s:.3g} s "
            "(shown by a stall of 429s that named no limit)"
        )
    elif cause in ("rpm", "tpm"):
        limit = limiter.limits[cause]
        value, source, label = limit.value or 0, limit.source, LABELS[cause]
        how = f", counted in {limit.window_s:g} s" if limit.how and not short else ""
        if limit.how == "bucket" and limit.pacer is not None and not short:
            how = f", paced as a token bucket of {limit.pacer.capacity:,.0f}"
    elif cause == "rate":
        if short:
            return "adaptive rate"
        rate = f"{congestion.cut_rate:,.1f}/s" if congestion.cut_rate else "?"
        return (
            f"adaptive rate (cut at {rate} after {congestion.cuts:,} rate signals among "
            f"unnamed 429s; {congestion.random_refusals:,} read as random)"
        )
    elif limiter.stated_waits:
        return "server-asked pauses"
    else:
        # Stalls of 429s that said nothing: every sender paused while a probe looked for room.
        return "stall pauses" if short else "stall pauses (probing after 429s that said nothing)"
    if source == "set":
        return f"{label} {value:,}"
    scanned = limiter.limits[cause].scanned_from if cause in ("rpm", "tpm") else None
    if scanned is not None and not short:
        # (a request past the named value was taken: twice it since)
        return f"{label} {value:,} (a 429 named {scanned:,}; room found past it{how})"
    suffix = " (learned)" if short else f" (learned from a 429 naming it{how})"
    return f"{label} {value:,}{suffix}"
