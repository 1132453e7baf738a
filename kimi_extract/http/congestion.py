"""Congestion control for 429s that name no limit (a gateway's "Rate limit reached", Kimi's
"engine overloaded") and for named limits someone else shares.

A 429 that names nothing is either a **rate signal** (the client sends faster than some unnamed
limit: such 429s correlate with the send rate and fall when it falls) or a **random refusal** (an
overloaded engine, a flaky gateway: a steady share whatever the rate). The limiter judges each
send from its log: refused, or accepted once it has gone ``judge_after()`` without a 429 (429s
come back at once; answers take longer). The two are then told apart by their pattern, as a trial:

- When the share of refusals among the recent judged sends exceeds what the learned random share
  explains (three binomial standard deviations plus ``NOISE_MARGIN``; none learned: the margin),
  the send rate is **cut** to ``BETA`` of the rate the server delivered (accepted sends per
  second over the recent span, or since the first refusal when ten or more sends went after it,
  whichever is lower, so a bucket's saved burst is not read as its rate; all of it when the
  server said how long to wait, the wait counted in the span, so a burst into an empty window
  does not read as the server's rate). The in-flight window is left as it is: only a stall's
  clamp reads a concurrency limit (``clamp``; clamped at what a cut found in flight, a 10/s
  bucket of burst 10 behind bare 429s with 8 s answers and 3 % random refusals took 368 s for
  600 rows, not 109 s).
- The cut is then checked. At ``BETA`` of the rate, random refusals keep their share, while a rate
  limit's refusals fall, to none once below the limit. When enough sends have been judged at the
  lower rate (``TRIAL_SENDS``, more when the share is small, no more than the cut rate sends in
  ``TRIAL_MAX_S``: a trial ends), a share that fell to ``FELL`` of the one before is a rate limit;
  one that stayed (``STAYED`` to ``ROSE`` of it, with at least ``NOISE_MIN_REFUSED`` refused: one
  refusal makes no share) is random: the cut is undone and the share learned as the **noise** share.
  In between, the next 429 cuts again; after ``DEEPEST`` cuts in a row a share that has still not
  fallen so far is random too, and every cut of the row is undone. Once the rate is back at
  where the row began (climbed back; or held there, a cut to all of what was delivered when
  the server stated its wait), the next cut goes from what the server delivered, not on down
  from there; the row goes on (its depth, what a "noise" verdict restores). (50 slots behind
  Retry-After, 2 % refused at random: the first trial was unclear, the rate climbed back past
  where the row began and ran 18 s with no cut; the next refusals cut it to ``BETA ** 2`` of
  that, then ``BETA ** 3``, and 3,000 rows took 151 s; now 85 s.) A trial that finds a rate
  limit halves the noise share.
- **What the server was measured to take**: a cut whose delivered rate was measured (sends
  after its first refusal) and whose trial then found a rate limit sets a ceiling
  (``_ceiling``). An unmeasured cut that would hold ``BETA`` of a rate still above it goes to
  the ceiling instead: a 1/s bucket with a burst of 10 refilled its burst during a trial, the
  next cut went from the 1.8/s that delivered, its trial at 1.26/s was refused as often as
  before, and a 21 % random share was learned (14-18 % of 600 rows refused; now 8-10 %). A
  trial held well above the ceiling or what its own cut measured (``HELD_SHARE`` of its rate
  above it), where the server still took ``HELD_SHARE`` of that or more, reads no random
  refusals ("unclear": a rate limit's refusals keep their share above it, while random ones
  take a share of the lower rate): a 1/s bucket with 100 saved and 8 s answers learned a 25 %
  share from a third cut's trial at 1.37/s where 0.91/s was measured (113-420 of 600 rows'
  requests refused; now 60-72).
  A cut where the server delivered within ``SAME_LEVEL`` of the ceiling (or more, unmeasured,
  and the cut went to it) is that limit climbed past again: its trial holds ``REFUSED_SHARE``
  of the lower of the two, not ``BETA`` (a 5/s bucket with a burst of 10 behind bare 429s:
  the second cut's trial held 3.4-3.8/s for its 40 sends, and 200 rows took 41.0-43.7 s; now
  39.3-40.4 s).
- After a cut the rate grows back along a cubic curve (CUBIC, as TCP and botocore's adaptive retry
  mode), flat near the rate it was cut from for ``hold_s()`` and probing past it after that, on
  with no end: the pacing never ends (it ended at 4x the cut rate, which a low
  rate reached while a bucket's saved burst hid the limit; the concurrency's worth then went at
  once into it). A trial holds the cut rate, so when it ends the curve goes on from no further
  than where it meets the rate it was cut from (a long trial at a low rate would otherwise end
  far up the curve, far past the limit at once). When what the server took since its first
  refusal was not measured (fewer than ten sends went after it), the curve climbs back to no
  less than ``REFUSED_SHARE`` of the rate the first refusal since the last cut came at, if that
  came within ``BETA ** -1`` of where the curve had climbed back to (``BETA ** -1`` of what was
  delivered at most), and the rate is cut to ``BETA`` of that at least: sent a little above its
  rate, a bucket that takes one at a time refuses every other send, and a 1/s one was held at
  67 % of its rate.
- **The limit confirmed**: two cuts in a row whose trials found a rate limit, their refusals
  beginning (``Trial.refused_at``) within ``SAME_LEVEL`` of each other, confirm it at the lower
  (``confirmed``; no higher than the ceiling above over ``REFUSED_SHARE``). Once the curve has
  climbed back past ``REFUSED_SHARE`` of it, to no more than ``SAME_LEVEL`` above it (the limit
  may have risen), a refusal is a cut even where the share is within ``NOISE_MARGIN``, and the
  cut goes back to ``REFUSED_SHARE`` of the confirmed limit with no trial (a trial holds
  ``BETA`` of it: a 1/s bucket that takes one at a time went at 83-86 % of its rate, now 95-97
  %). Not while random refusals are known; a trial that finds them forgets the limit.
  The window is held where it was clamped for as long, then grows by one slot
  per window of answers. A limit that refuses again at the same level is held twice as long
  each time (up to ``MAX_HOLD_S``): a stable limit is probed rarely.
- **The limit found again**: with no random refusals known, ``AGAIN_REFUSED`` refusals within
  ``AGAIN_WITHIN`` sends at the rate a stall's probe restarted at (no cut since, fewer than
  ``MIN_JUDGED`` judged since the restart, at least ``CLEAN_SENDS`` of them accepted and at most
  the first of the two refused) are a cut at once ("again"), not noise until 20 are judged: a
  rate read from the stall's span counts a burst the server took once (a token bucket's saved
  tokens), and once that is spent every other send is refused. Such a cut goes from what the
  server accepted since the oldest refusal of the last 10 s when that is lower (its rate once
  the saved room was spent), and to that rate, not ``BETA`` of it: it is measured, as a rate
  the server's stated wait shows is (5/s with a burst of 10 behind bare 429s: the trial sent
  at 3.3/s, and 200 rows ended at 43.2 s, now 41.0 s). One refusal alone may be random: it
  cuts nothing.
- **Full named slots**: a refusal that comes while the concurrency a 429 named has been held
  full of accepted requests of ours (``slots_full``: 98 % of its slots on average over the last
  2 s, less the time refused requests were out before their 429 came back) is "noise", not a
  cut: a rate limit below the concurrency's rate would leave slots empty (a refused request
  holds none). Read as a rate signal, 30 % random refusals behind 5 named slots had the rate
  cut to 2.8/s until a trial found them random. A concurrency we were told is no evidence: an
  opening burst can fill it before a bucket behind it empties. The window a stall's clamp
  found the server holding (429s that name nothing: ``window``, ``window_level``) counts as
  named here: 3 % random refusals behind 10 such slots cut the rate to 6.2/s, then 4.4/s,
  until a third cut's trial found them random (600 rows in 85 s, 61 s without them; now 61 s).
- **A full window**: a stall's clamp learns how many requests the server held (``window_level``).
  A later refusal with as many accepted in flight (a rate signal, or any refusal while no random
  ones are known) is a concurrency limit refusing the one above it: the window is clamped there
  again and held twice as long, and the rate is not cut.
- **Stalls**: ``stall_streak()`` refusals in a row (in the order sent) mean the server has no room
  at all (a full window); ``clean_streak()`` when they are the run's first refusals; two in
  a window a stall showed before, after a clean run (``clean()``): after the first, the next
  send goes alone (``wary``; the others wait until it is judged), and when it is refused too
  the window is full (a further burst the window would refuse might otherwise be on the wire
  before the 429s came back). Every
  sender pauses: the time the server stated when it said one, else ``PROBE_FIRST_S``,
  ``PROBE_GROWTH`` times longer per refused probe (up to ``PROBE_MAX_S``).
  After the pause one request goes alone as a probe; the others wait until it is refused or
  judged accepted. The probe goes even when the window the stall clamped is full of ours (one
  past it, until ``limiter.PAST_PROBES`` were refused there, or one as each usual length ends
  when the stall took ``shown.MIN_COUNT`` or more and said nothing of when it has room; the
  first as a usual length ends): held back until an answer of ours freed a slot, a window
  shorter than the answers read as a concurrency limit (a fixed 5 per 1 s with 20 s answers:
  300 rows in 457 s, now 88 s; 10 per 10 s with 90 s answers: 1,640 s, now 385 s).
  Accepted past the clamp, before any answer, one more goes past it at once, and the clamp is
  undone if that is taken too (refused, the room was a bucket's refilled token); refused there,
  the next goes when an answer frees a slot, and one accepted then reads as the concurrency
  limit.
  When a probe is accepted the rate restarts at what the server delivered over the whole
  span of the stall, and the sends before the probe are judged no more (the pause
  answered them: counting their refusals again would cut a rate that has just restarted). When the
  stall clamped the window and ended after answers of ours freed slots (a concurrency limit, as
  far as it shows), that rate is below where the refusals began (the stall's wait is in it), and
  its curve is flat for only ``RESTART_CLIMB_S``, not ``hold_s()``; at ``CLIMB_ENDS_AT`` times it
  that quick climb ends paced and goes on as after a cut (unpaced, sends would leave together).
  A stall with fewer than two of ours accepted in flight (a full rate window, or just the probe)
  does not clamp the window; and when a 429 of a request sent before the stall's clamp (the same
  burst's, read after it) leaves fewer than two, the clamp is undone: it counted as accepted the
  burst's requests whose 429s were still on the way (a bucket that takes one at a time, 429s
  10 ms late: the opening's 8 at once clamped the window to 4, 3, then 2 as each came back).
  A probe refused with fewer of ours accepted in flight than the clamp found lowers it only
  when a second probe of the same stall is refused below it too, and then to the higher of the
  two: one may be a random refusal (20 slots, 10 % refused at random, bare 429s: a probe
  refused with 4 of ours in flight clamped the window at 4, every random refusal after it
  with 4 in flight held it there, and 1,200 rows took 275 s; now 68 s).
- **A stall that shows no rate**: when the server took fewer than ``shown.MIN_COUNT`` of ours
  before it (a token bucket with a burst of one to three: the opening's first few sent at once
  are refused), what it delivered over the stall's span is one or two sends over its pause, not
  its rate (a 100/s bucket restarted at 1.9/s, and the curve took 34 s to send 100 rows). The
  restart then starts slow, as TCP does: the rate doubles each time the sends since it last
  did went at ``SLOW_USED`` of it (a rate held back by the window, not used, is not raised),
  up to ``2 ** SLOW_DOUBLINGS`` times, and the first refusal halves it and ends the doubling
  ("slowed": on as after a restart from there). Sends go one at a time from then on (the
  pacer's burst is one send): the server refused the few sent together.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from .pacing import Pacer, Share

BETA = 0.7  # multiplicative decrease (botocore's adaptive mode)
#: A trial above what the server was measured to take, and taken this share of that or more,
#: was held by a rate limit (random refusals would take a share of BETA of it).
HELD_SHARE = math.sqrt(BETA)
#: After a cut the curve climbs back to this share of the rate the first 429 since the last cut
#: came at, when that is above what the server delivered (``Congestion.cut``).
REFUSED_SHARE = 0.95
#: Seconds the cubic curve takes to climb back to the rate it was cut from (first time).
CUBIC_K_S = 8.0
MAX_HOLD_S = 60.0
#: ...and after a stall that ended when answers freed slots (module docstring).
RESTART_CLIMB_S = 2.0
#: Cuts within this share of the last cut's rate count as the same limit refusing again.
SAME_LEVEL = 0.15
MIN_RATE = 0.2  # requests per second; the adaptive rate never drops below this
#: A restart's quick climb (``RESTART_CLIMB_S``) ends at this multiple of the rate it restarted
#: at, and climbs on from there as after a cut.
CLIMB_ENDS_AT = 4.0
CUT_EPOCH_S = 1.0  # refusals within this long of a cut are the same congestion event
#: A cut is judged after this many judged sends at the lower rate (6 / share, if more, up to
#: twice as many),
#: sent from ``settle_s()`` after the cut (a bucket or window refills meanwhile)...
TRIAL_SENDS = 20
#: ...but no more than the cut rate sends in ``TRIAL_MAX_S`` (and at least ``TRIAL_MIN_SENDS``),
#: so a trial at a low rate ends within the send log's memory...
TRIAL_MAX_S, TRIAL_MIN_SENDS = 20.0, 8
#: ...against the share over this many judged sends before it: at most ``FELL`` of it after the
#: cut says "rate", between ``STAYED`` and ``ROSE`` times it says "random", else nothing.
BEFORE_SENDS = 100
FELL, STAYED, ROSE = 0.25, 0.5, 1.5
#: A first cut's trial finds random refusals sooner, after this many judged sends, when a share
#: fallen with the rate would refuse as many with less than this chance.
EARLY_SENDS, EARLY_CHANCE = 10, 0.01
#: Cuts in a row after which a share that has not fallen with the rate reads as random.
DEEPEST = 2
#: The recent share of refusals is measured over at most this many judged sends.
SHARE_SENDS = 50
#: Fewer judged sends than this say nothing yet.
MIN_JUDGED = 20
#: A run is clean after this many judged sends none of which was refused (``clean()``; the
#: limit found again counts them since a stall's restart, the first of its two refusals aside)...
CLEAN_SENDS = 10
#: ...and the limit is found again when this many of the newest ``AGAIN_WITHIN`` sends were
#: refused (one alone may be random).
AGAIN_REFUSED, AGAIN_WITHIN = 2, 5
#: Refusals in a row that mean "no room at all" (more when refusals are common anyway).
STALL_STREAK = 6
#: ...or this many when they are the first refusals of the run (fewer after a long clean run:
#: ``clean_streak``)...
CLEAN_STALL_STREAK = 4
#: ...but never fewer than this many.
MIN_CLEAN_STREAK = 2
#: ...or this many, each asking to wait at least ``LONG_WAIT_S``.
LONG_WAIT_STREAK, LONG_WAIT_S = 2, 2.0
#: How unlikely a streak of random refusals must be before it reads as a stall.
STALL_CHANCE = 1e-4
NOISE_MARGIN = 0.05
#: A trial reads refusals as random only when it saw at least this many (one or two in a short
#: trial at a low rate say nothing of a share).
NOISE_MIN_REFUSED = 3
#: Refusal shares above this are never read as random, whatever a trial says.
MAX_NOISE = 0.6
PROBE_FIRST_S, PROBE_MAX_S = 0.5, 16.0
#: A stall of 429s that say nothing, its first probe refused: the window the server filled
#: most likely has one of these lengths (per second, per 10 s, per minute...). The next probes
#: go as each would end, counted from the window's first accepted send, ``PROBE_AFTER_S`` after
#: it and no sooner than ``PROBE_MIN_S`` from the refusal: a window of 60 s is found in 6 probes
#: (growing pauses took 11), and its length read to within ``PROBE_AFTER_S`` (they read 10 s as
#: up to 11.7 s).
WINDOW_LENGTHS_S = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
PROBE_AFTER_S, PROBE_MIN_S = 0.05, 0.25
#: ...after this many probes refused at growing pauses (a bucket or a concurrency limit has room
#: again within a moment; random refusals seldom refuse two probes in a row).
GROWING_PROBES = 2
#: Of the usual lengths, those a probe also looks for as every send the server took before the
#: stall has left them (``left_ends``): each costs a refusal whenever the window is longer, so
#: only where missing a drop's room costs most (after 10 s the next usual length is 30 s; after
#: 60 s there is none).
LEFT_LENGTHS_S = (10.0, 60.0)
#: Each refused probe waits this much longer than the last (doubling found a 10 s window
#: 6 s after it freed, its first probes being refused at 1, 2, 4 and 8 s).
PROBE_GROWTH = 1.5
#: A trial finds random refusals only against at least this many judged sends before its cut.
SETTLED_SENDS = 20
PACED_BURST_S = 0.05
#: A stall after fewer than ``shown.MIN_COUNT`` accepted sends shows no rate (module
#: docstring): its restart doubles the rate each time ``SLOW_DOUBLING_SENDS`` or more sends over
#: ``SLOW_DOUBLING_S`` or more went at ``SLOW_USED`` of it or faster (a rate the sends do not
#: use is not raised: a few sent together as answers free slots do not show it used), until
#: the first refusal, ``SLOW_DOUBLINGS`` times at most (held there until the first refusal).
SLOW_DOUBLING_SENDS, SLOW_DOUBLING_S, SLOW_USED, SLOW_DOUBLINGS = 3, 0.25, 0.75, 6
#: A stall that found fewer of ours accepted in flight says nothing of a concurrency limit.
MIN_WINDOW_LEVEL = 2
#: ...nor does one whose later refusal came with less than this share of what its clamp found
#: held (room for ours at the server: a rate's window, not a concurrency limit).
HELD_BELOW = 0.5


#: The in-flight window's learned state: the window, its level, whether it was clamped since the
#: last verdict, the window before that clamp, and the answers seen at the stall's clamp.
_WindowState = tuple[int | None, int, bool, int | None, int | None]


@dataclass
class Trial:
    """A cut being checked: the share of refusals before it, and what to restore if the
    refusals prove random (as it was before the first of the cuts in a row)."""

    at: float
    before: float
    needed: int
    rate_before: float | None
    window_before: int | None
    limiter_window: int
    growing_before: bool
    #: Enough sends were judged before the cut for a steady share to read as random.
    settled: bool = True
    #: Cuts in the row before this one, and the share before the first of them.
    depth: int = 0
    first_before: float = 0.0
    cut_from: float = 0.0  # the rate the first cut of the row was cut from
    refused_at: float = 0.0  # the rate its refusals began at
    rate: float = 0.0  # the rate it holds
    measured: float = 0.0  # what the server took since its first refusal (0: not measured)

    def verdict(self, after: Share) -> str | None:
        """Returns "rate" (the share fell to a quarter or less with the rate), "noise" (it stayed
        about the same: random refusals; or, after ``DEEPEST`` cuts in a row, it still has not
        fallen so far; never a share above ``MAX_NOISE``), "unclear", or None (not enough sends
        judged yet)."""
        if after.sends >= TRIAL_SENDS and after.value > ROSE * self.before + NOISE_MARGIN:
            return "unclear"  # risen after the cut: not random, and no need to wait longer
        # Random refusals keep their share: neither fallen nor risen by much (a share that rose
        # is a limit's dynamics, a bucket still empty or a window still full).
        steady = STAYED * self.before <= after.value <= ROSE * self.before
        noise = (
            steady
            and after.value <= MAX_NOISE
            and self.settled
            and after.refused >= NOISE_MIN_REFUSED
        )
        if after.sends < self.needed:
            # Sooner when so many were refused that a share fallen with the rate would almost
            # never refuse as many (the trial runs at the lower rate: it costs throughput).
            early = after.sends >= EARLY_SENDS and self.depth == 0
            fallen = _at_least(after.refused, after.sends, FELL * self.before)
            return "noise" if early and noise and fallen < EARLY_CHANCE else None
        if after.value <= FELL * self.before:
            return "rate"
        if self.depth >= DEEPEST and FELL * self.first_before < after.value <= MAX_NOISE:
            return "noise"  # the rate is down to BETA ** DEEPEST, the refusals are not
        return "noise" if noise else "unclear"


def window_ends(first: float) -> Iterator[float]:
    """``PROBE_AFTER_S`` after each usual window length (``WINDOW_LENGTHS_S``) from ``first``,
    in order: where a probe finds a window that began at ``first`` as it ends."""
    return (first + length + PROBE_AFTER_S for length in WINDOW_LENGTHS_S)


def left_ends(last: float) -> Iterator[tuple[float, float]]:
    """``PROBE_AFTER_S`` after each of ``LEFT_LENGTHS_S`` from ``last``, the last send the
    server took before a stall, with the length: where every send it took has left a window of
    that length. A sliding window whose limit dropped has room only as the sends before the drop
    leave it (not when the first of them does): refused at the end from the first, a probe here
    finds the length (refused here too, the window is longer)."""
    return ((last + length + PROBE_AFTER_S, length) for length in LEFT_LENGTHS_S)


def _at_least(count: int, sends: int, share: float) -> float:
    """The chance that ``sends`` each refused with chance ``share`` have ``count`` or more
    refused."""
    share = min(1.0, max(0.0, share))
    return sum(
        math.comb(sends, k) * share**k * (1 - share) ** (sends - k) for k in range(count, sends + 1)
    )


class Congestion:
    """The adaptive rate and window, the stall probe and the random-refusal test."""

    def __init__(self) -> None:
        self.rate: float | None = None  # requests per second; None: unpaced
        self.pacer: Pacer | None = None
        self.w_max = 0.0  # the rate the cubic curve climbs back to
        #: The pacing rate when the first 429 since the last cut or restart came (None: none).
        self._refused_rate: float | None = None
        self.cut_rate = 0.0  # the rate of the last cut or restart (what the summary says)
        self.cut_at = -math.inf
        self.restarted_at = math.nan  # when a stall's probe last restarted the rate
        self.repeats = 0  # cuts in a row at about the same rate
        self.window: int | None = None  # in-flight limit learned from 429s; None: none
        self.window_at = -math.inf
        self.window_level = 0  # what a stall's clamp found the server holding (0: none yet)
        self._window_credit = 0.0
        self.noise = 0.0  # the learned share of random refusals
        #: The rate the refusals of the last cut a trial found a rate limit began at...
        self._limit_at = 0.0
        #: ...and the same, found by two such trials in a row at about the same rate (0: none).
        self.confirmed = 0.0
        #: What the server took after its first refusal, measured at a cut whose trial then
        #: found a rate limit (0: none): a trial held above it finds no random refusals.
        self._ceiling = 0.0
        self._chain: Trial | None = None  # the first of the cuts in a row not yet judged
        self._clamped = False  # the window was clamped since the last verdict...
        self._window_before_clamp: int | None = None  # ...and was this before
        self.trial: Trial | None = None
        self.undone: Trial | None = None  # a cut a trial found random (the caller restores)
        self.stalls = 0  # pauses in a row with no room
        self._probe_below = 0  # what a refused probe found in flight below the clamp
        self.probing = False  # a probe is out: nobody else goes
        self.probe_sent = 0.0
        #: Sends before this (a stall's, before its accepted probe) say nothing of the rate now.
        self.epoch = -math.inf
        self.refusal_rtt = 0.0  # the longest recent time from a send to its 429
        self.cuts = 0
        self.random_refusals = 0
        self.climb_s: float | None = None  # the rate's climb after a stall (None: hold_s())
        self.doubling = False  # a restart that knew no rate: doubling until a refusal
        self.single = False  # the last stall took next to none at once: paced one at a time
        self._doubling_sends: list[float] = []  # when the sends since it last doubled went
        self.answers = 0  # answers seen...
        self._answers_at_clamp: int | None = None  # ...when a stall last clamped the window
        #: What the window was before this stall's first clamp (None: it clamped none).
        self._stall_clamp: _WindowState | None = None

    # -- reading a 429 ---------------------------------------------------------------------

    def saw_refusal(self, rtt: float) -> None:
        """A 429 came back ``rtt`` seconds after its request went."""
        self.refusal_rtt = max(self.refusal_rtt * 0.9, rtt)

    def judge_after(self) -> float:
        """How long a send must go without a 429 to count as accepted."""
        return max(0.05, 3 * self.refusal_rtt)

    def hold_s(self) -> float:
        """How long a cut rate or a clamped window is held before probing above it."""
        return min(MAX_HOLD_S, CUBIC_K_S * 2**self.repeats)

    def stall_streak(self, recent: Share) -> int:
        """Refusals in a row that random refusals would rarely make, at the learned share or the
        ``recent`` one (whichever is higher)."""
        share = min(max(self.noise, recent.value if recent.sends >= MIN_JUDGED else 0.0), 0.9)
        if share <= 0:
            return STALL_STREAK
        return max(STALL_STREAK, math.ceil(math.log(STALL_CHANCE) / math.log(share)))

    def clean_streak(self, accepted: int) -> int:
        """Refusals in a row that read as a stall when they are the run's first, after
        ``accepted`` sends none refused: random refusals at the highest share that run leaves
        likely (three in ``accepted``) would rarely make them, and never more than
        ``CLEAN_STALL_STREAK`` (120 accepted: 3; 300: 2)."""
        if accepted <= 3:
            return CLEAN_STALL_STREAK
        streak = math.ceil(math.log(STALL_CHANCE) / math.log(3 / accepted) - 1e-9)
        return max(MIN_CLEAN_STREAK, min(CLEAN_STALL_STREAK, streak))

    def explained(self, share: Share) -> bool:
        """Whether ``share`` is no more than the learned random share (or says nothing yet);
        never a share above ``MAX_NOISE``."""
        if share.sends < MIN_JUDGED:
            return True
        p = self.noise
        bound = p + 3 * math.sqrt(p * (1 - p) / share.sends) + NOISE_MARGIN
        return share.value <= min(bound, MAX_NOISE)

    def refused(
        self,
        now: float,
        sent_at: float | None,
        recent: Share,
        streak: int,
        stated: float | None,
        *,
        clean: bool = False,
        accepted: int = 0,
        wary: bool = False,
        close: int = 1,
        slots_full: bool = False,
    ) -> str:
        """One refusal of a request sent at ``sent_at``, with ``recent`` the judged share,
        ``streak`` the refused sends in a row up to it (in the order they were sent) and
        ``stated`` the wait the server asked for: "stall", "noise", "cut", "again" (a cut: the
        limit found again at the rate a stall restarted at; the caller acts on it) or "slowed"
        (a doubling restart's first refusal: the rate is halved here). ``wary``:
        the refused send went alone after one refusal in a clean window shown before (a stall);
        ``close``: refusals among the newest ``AGAIN_WITHIN`` sends. Two refusals in a row that
        each ask to wait ``LONG_WAIT_S`` or more are a stall: the server says it has no room
        for that long. ``slots_full``: the concurrency a 429 named was held full of accepted
        requests (not a rate signal: "noise" where it would be a cut)."""
        if self._refused_rate is None and (sent_at is None or sent_at >= self.cut_at):
            self._refused_rate = self.rate
        if self.probing and sent_at is not None and sent_at >= self.probe_sent - 1e-9:
            self.probing = False
            self.stalls += 1
            self.trial = None
            return "stall"
        if self.doubling and self.rate is not None and (sent_at is None or sent_at >= self.epoch):
            # The first refusal of a doubling restart halves the rate (back to where it was
            # before its last doubling, if it doubled), and it goes on as after a restart.
            self.doubling = False
            self.w_max = self.cut_rate = max(MIN_RATE, self.rate / 2)
            self._refused_rate = None
            self.cut_at = self.restarted_at = now
            self.cuts += 1
            self._set_rate(now, self.cut_rate)
            return "slowed"
        long_wait = stated is not None and stated >= LONG_WAIT_S and streak >= LONG_WAIT_STREAK
        # The first refusals of the run (after ``accepted`` sends, none refused).
        first = clean and streak >= self.clean_streak(accepted)
        # The send that went alone after one refusal in a clean window shown before, refused
        # too: the window is full (again).
        if long_wait or first or wary or streak >= self.stall_streak(recent):
            self.stalls = max(self.stalls, 1)
            self.trial = None
            return "stall"
        if (
            self.restarted_past()
            and recent.refused <= 1
            and recent.sends - recent.refused >= CLEAN_SENDS
            and recent.sends < MIN_JUDGED
            and close >= AGAIN_REFUSED
        ):
            return "again"  # refused again soon at the rate restarted at: the limit found again
        if self._over_confirmed(sent_at) and not slots_full:
            return "cut"  # climbed back to a rate limit two trials found: the limit again
        if self.explained(recent):
            self.random_refusals += self.noise > 0
            return "noise"
        if self.trial is not None:
            return "noise"  # a cut is on trial: wait for its verdict
        if slots_full:
            return "noise"  # the concurrency holds the run, not a rate: nothing to cut
        return "cut"

    def _over_confirmed(self, sent_at: float | None) -> bool:
        """Whether the rate climbed past where a cut back to the ``confirmed`` limit holds it
        (``REFUSED_SHARE`` of it), to no more than ``SAME_LEVEL`` above it, with no random
        refusals known, no trial on, and the refused request sent since the last cut."""
        limit, rate = self.confirmed, self.rate
        return (
            limit > 0
            and rate is not None
            and REFUSED_SHARE * limit * (1 + 1e-3) < rate <= (1 + SAME_LEVEL) * limit
            and not self.noise
            and self.trial is None
            and (sent_at is None or sent_at >= self.cut_at)
        )

    def clean(self, recent: Share) -> bool:
        """Whether no random refusals are known and none of the last ``CLEAN_SENDS`` or more
        judged sends (``recent``) was refused."""
        return not self.noise and recent.refused == 0 and recent.sends >= CLEAN_SENDS

    def restarted_past(self) -> bool:
        """Whether the rate is still (or again) at the one a stall's accepted probe restarted it
        at, or above it, with no cut since: a rate read from the stall's span (a bucket's
        saved burst in it), not yet confirmed by the server."""
        if self.noise > 0 or self.rate is None or self.trial is not None:
            return False
        return self.cut_at == self.restarted_at and self.rate >= self.w_max

    def stall_pause(
        self,
        stated: float | None,
        since: float | None = None,
        last: float | None = None,
        *,
        full: bool = False,
    ) -> float:
        """How long every sender waits in a stall before the next probe: the ``stated`` wait;
        else ``PROBE_FIRST_S`` before the first probe (a bucket or a concurrency limit has room
        again within a moment); then, when the window the server filled began ``-since``
        seconds ago (its first accepted send), until the next of the usual window lengths from
        there (``WINDOW_LENGTHS_S``) ends, or from ``last`` (its last, ``left_ends``), a moment
        after it; else (or past them) a pause that grows with each refused probe. ``full``: the
        server holds as many of ours as it took before the stall, none answered (the window
        is clamped there): a bucket may have room within a moment, which says nothing of its
        rate (its saved burst does), so the probes go only as the usual lengths end."""
        if stated is not None:
            return stated
        if since is not None and (self.stalls > GROWING_PROBES or full):
            ends = [pause for pause in window_ends(since) if pause >= PROBE_MIN_S]
            if last is not None and last - since > PROBE_AFTER_S:
                # (a moment after the refusal at the end from the first, no sooner than
                # PROBE_MIN_S: the probe still goes where every send has left the length)
                ends += [max(PROBE_MIN_S, p) for p, _ in left_ends(last) if p > PROBE_AFTER_S]
            if ends:
                return min(ends)
        return min(PROBE_MAX_S, PROBE_FIRST_S * PROBE_GROWTH ** max(0, self.stalls - 1))

    def cut(
        self,
        now: float,
        delivered: float,
        before: Share,
        *,
        told: bool,
        limiter_window: int,
        growing_before: bool,
        measured: bool = False,
    ) -> None:
        """Cut the rate to ``BETA`` of ``delivered`` (requests/s; all of it when the server
        ``told`` when it has room); start a trial against ``before``, the judged share before
        the cut (``limiter_window`` / ``growing_before``: the limiter's window before, to
        restore). Not ``measured`` (what the server took since its first refusal, over enough
        sends, is not in ``delivered``), the curve climbs back to ``REFUSED_SHARE`` of the rate
        the first 429 since the last cut came at when that is higher, ``BETA ** -1`` of
        ``delivered`` at most, and the rate is cut to no less than ``BETA`` of that."""
        window_before = self._window_before_clamp if self._clamped else self.window
        # ``row``: the row of cuts this one goes on; ``chained``: the same, when this cut also
        # goes on down from where the row began (not once the rate is back there).
        chained = row = self._chain
        if (
            chained is not None
            and self.trial is None
            and self.rate is not None
            and self.rate >= chained.cut_from
        ):
            # Back at where the row began since its trial was judged unclear (climbed back; or
            # held there: a cut to all of what was delivered, the server's wait stated): cut
            # from what the server delivered, not on down from where the row began (however
            # long the rate ran there unrefused); the row goes on (its depth, what to restore).
            # (Climbed back past what such a trial held, over BETA, instead: 38 of 72 runs
            # behind slots with 2-10 % random refusals kept under 0.9 of their rate, not 36.)
            chained = None
        if now - self.cut_at < CUT_EPOCH_S and (chained is None or self.trial is not None):
            # The same congestion event; not once the cut's trial was judged unclear (the next
            # cut continues the row: its refusals were of sends made at the cut rate).
            return
        over = row is None and self._over_confirmed(None)
        self.trial = Trial(
            now,
            before.value,
            min(2 * TRIAL_SENDS, max(TRIAL_SENDS, math.ceil(6 / max(before.value, 1e-3)))),
            row.rate_before if row else self.rate,
            row.window_before if row else window_before,
            row.limiter_window if row else limiter_window,
            row.growing_before if row else growing_before,
            before.sends >= SETTLED_SENDS,
            row.depth + 1 if row else 0,
            row.first_before if row else before.value,
        )
        current = max(MIN_RATE, min(self.rate or math.inf, delivered))
        plateau = current
        self.trial.measured = current if measured else 0.0
        refused_at = self._refused_rate
        self._refused_rate = None
        if chained is not None:
            # A row of cuts goes down from where the first was cut from, BETA each time (the
            # rate delivered under a cut is lower by the refusals too: no spiral down on them).
            current = plateau = max(MIN_RATE, chained.cut_from * BETA ** (chained.depth + 1))
            told = False
        elif refused_at is not None and not measured and refused_at * BETA <= self.w_max:
            # Unmeasured, the curve climbs back to (just below) the rate the refusals began at,
            # not to what the server delivered while it refused: a bucket that takes one at a
            # time delivers half its rate to sends a little above it. Only when they began
            # near where the curve had climbed back to (no more than BETA ** -1 of it: further
            # up, a saved burst held them back as it sped up), and to no more than BETA ** -1
            # of what was delivered.
            plateau = max(current, min(REFUSED_SHARE * refused_at, current / BETA))
        if not measured and chained is None and 0 < self._ceiling < BETA * plateau:
            # No higher than the server was measured to take (a saved burst refilled
            # during the last trial made the unmeasured delivery look faster).
            current = plateau = max(MIN_RATE, self._ceiling)
        if over:
            # The confirmed limit again: back to just below it, with no trial (two found it;
            # a trial would hold BETA of it).
            plateau = current = REFUSED_SHARE * self.confirmed
            told, self.trial = True, None
        else:
            self.trial.refused_at = refused_at or self.rate or current
            self.trial.cut_from = current if chained is None else chained.cut_from
        self._chain = self.trial
        self._new_level(plateau)
        self.cut_at = now
        self.doubling = False
        self.cuts += 1
        self.w_max = self.cut_rate = plateau
        self.climb_s = None
        rate = max(MIN_RATE, current if told else current * BETA, plateau * BETA)
        if (
            self.trial is not None
            and chained is None
            and (1 - SAME_LEVEL) * current <= self._ceiling <= current / (1 - SAME_LEVEL)
        ):
            # The server delivered about what it was measured to take at a cut whose trial
            # found a rate limit (or more, unmeasured, and the cut went to that): the same
            # limit, climbed past again. The trial holds just below it, not BETA of it.
            rate = max(rate, REFUSED_SHARE * min(self._ceiling, current))
        self._set_rate(now, rate)
        if self.trial is None:
            return
        self.trial.rate = rate
        # A trial ends: no more sends than the cut rate makes in ``TRIAL_MAX_S`` (a low rate
        # would otherwise hold itself until sends the log no longer remembers were judged).
        self.trial.needed = min(
            self.trial.needed, max(TRIAL_MIN_SENDS, math.ceil(rate * TRIAL_MAX_S))
        )

    def settle_s(self) -> float:
        """Sends this soon after a cut are not judged in its trial."""
        return max(0.2, 2 * self.judge_after())

    def full_window(self, verdict: str, accepted_in_flight: int) -> bool:
        """Whether a refusal read as ``verdict`` came with as many requests accepted in flight
        as a stall's clamp found the server holding: a concurrency limit refusing the one above
        it, to be answered with the window, not the rate (a "cut"; or "noise" while no random
        refusals have been seen)."""
        if verdict not in ("cut", "again", "noise") or (verdict == "noise" and self.noise):
            return False
        return self.window_level >= MIN_WINDOW_LEVEL and accepted_in_flight >= self.window_level

    def stalled(self, now: float) -> None:
        """A stall read: a cut a moment before (``CUT_EPOCH_S``), from the same refusals, does
        not hold its probe. The cut's new pacer starts a request in debt: at 0.73/s the probe
        waited 1.75 s past the stall's pause."""
        if self.pacer is not None and now - self.cut_at < CUT_EPOCH_S:
            self.pacer.level = self.pacer.capacity

    def clamp(
        self,
        now: float,
        accepted_in_flight: int,
        *,
        stall: bool = True,
        sent_at: float | None = None,
        probe: bool = False,
    ) -> None:
        """Hold the in-flight window at what the server took (a stall; or a full window). With
        fewer than ``MIN_WINDOW_LEVEL`` of ours accepted in flight (none: a full rate window;
        one: the probe that just restarted the run) it says nothing of a concurrency limit, and
        the window is left as it is; when the refused request went before this stall's clamp
        (``sent_at``: a 429 of the same burst, read after it), the clamp is undone: it counted
        as accepted the burst's requests whose 429s were still on the way; so is it when the
        server held fewer than ``HELD_BELOW`` of what the clamp read (not a probe's: see
        below). A ``probe`` refused below the clamp lowers it only when the stall's next
        refused probe is below it too (to the higher of the two: one may be a random
        refusal)."""
        undo = self._stall_clamp
        few = accepted_in_flight < MIN_WINDOW_LEVEL
        room = not probe and accepted_in_flight < HELD_BELOW * self.window_level
        if (few or room) and stall and undo is not None:
            if sent_at is not None and sent_at < self.window_at:
                self._window_state = undo
                self._stall_clamp = None
                return
        if few:
            return
        if (
            stall
            and probe
            and self.window_level >= MIN_WINDOW_LEVEL
            and accepted_in_flight < self.window_level
        ):
            if not self._probe_below:
                self._probe_below = accepted_in_flight
                return
            accepted_in_flight = max(accepted_in_flight, self._probe_below)
            self._probe_below = 0
        if stall and self._stall_clamp is None:
            self._stall_clamp = self._window_state
        if stall:
            self.window_level = accepted_in_flight
            self._answers_at_clamp = self.answers
        elif accepted_in_flight >= self.window_level:
            self.repeats += 1  # refused again at the same window: probe it less often
        if not self._clamped:  # the window before this episode, for a trial to restore
            self._clamped, self._window_before_clamp = True, self.window
        window = max(1, accepted_in_flight)
        if self.window is None or window < self.window:
            self.window = window
        self.window_at = now
        self._window_credit = 0.0

    @property
    def _window_state(self) -> _WindowState:
        """What the window was learned from, as a stall's first clamp found it (to undo it)."""
        return (
            self.window,
            self.window_level,
            self._clamped,
            self._window_before_clamp,
            self._answers_at_clamp,
        )

    @_window_state.setter
    def _window_state(self, state: _WindowState) -> None:
        (
            self.window,
            self.window_level,
            self._clamped,
            self._window_before_clamp,
            self._answers_at_clamp,
        ) = state

    def restart(
        self,
        now: float,
        delivered: float,
        *,
        paced: bool = True,
        slow: bool = False,
        past_clamp: bool = False,
    ) -> bool:
        """A probe was accepted after a stall: go on at the rate the server delivered (the
        stall's refusals were answered by its pause: they are not judged again); not
        ``paced``: a window the stall showed holds the sends instead (``shown``); ``slow``: the
        server took next to none before the stall, and the rate doubles as it is used, one send
        at a time (module docstring); ``past_clamp``: the probe went past the window the stall
        clamped, full of ours the server had accepted. Returns whether none of them was answered
        since, the clamp kept: the server had room beyond them, at least for one (``unclamp``
        when it takes another)."""
        self.epoch = self.probe_sent
        self.probing = False
        self.stalls = 0
        self._stall_clamp = None
        self._probe_below = 0
        self.restarted_at = now
        current = max(MIN_RATE, delivered)
        self._new_level(current)
        self._refused_rate = None
        self.cut_at = now
        self.w_max = self.cut_rate = current
        # A stall that clamped the window and ended after answers freed slots of ours
        # restarts below where the refusals began: climb back soon.
        freed = self._answers_at_clamp is not None and self.answers > self._answers_at_clamp
        self.climb_s = RESTART_CLIMB_S if freed else None
        past_clamp = past_clamp and not freed
        self._answers_at_clamp = None
        self.doubling, self._doubling_sends = paced and slow, []
        self.single = slow
        if paced:
            self._set_rate(now, current)
        else:
            self.rate, self.pacer, self.trial, self._chain = None, None, None, None
            self.unclamp()  # the stall was a full rate window's, not a concurrency limit's
        return past_clamp and self._clamped

    def unclamp(self) -> None:
        """The window a stall clamped held no concurrency limit: as it was before."""
        if self._clamped:
            self.window, self._clamped = self._window_before_clamp, False
            self.window_level = 0

    def _new_level(self, rate: float) -> None:
        if self.w_max and abs(rate - self.w_max) <= SAME_LEVEL * self.w_max:
            self.repeats += 1
        else:
            self.repeats = 0

    # -- answers and trials ----------------------------------------------------------------

    def accepted(self, now: float) -> None:
        """One send answered: grow the rate along the cubic curve and the window."""
        self.answers += 1
        if self.window is not None and now - self.window_at >= self.hold_s():
            self._window_credit += 1 / self.window
            if self._window_credit >= 1:
                self._window_credit = 0.0
                self.window += 1
        if self.rate is None or self.trial is not None:
            return  # (a cut on trial holds its rate until judged)
        if self.doubling:
            return  # (it grows as the sends use it: ``sent``)
        k = self.climb_s or self.hold_s()
        elapsed = now - self.cut_at
        scale = self.w_max * (1 - BETA) / k**3
        rate = max(MIN_RATE, scale * (elapsed - k) ** 3 + self.w_max)
        if rate >= CLIMB_ENDS_AT * self.w_max and self.climb_s is not None:
            # A restart's quick climb ends paced, and climbs on as after a cut from there (an
            # unpaced burst would meet a bucket that takes one at a time).
            self.climb_s, self.w_max, self.cut_at = None, rate, now
            self._set_rate(now, rate)
        elif rate > self.rate:  # growth never lowers it (and never ends the pacing)
            self._set_rate(now, rate)

    def sent(self, now: float) -> None:
        """A send went (taken from the pacer). A doubling restart doubles the rate when the
        sends since it last did used it (``SLOW_DOUBLING_SENDS``, ``SLOW_DOUBLING_S``,
        ``SLOW_USED``)."""
        if self.pacer is not None:
            self.pacer.take(1.0)
        if not self.doubling or self.rate is None:
            return
        sends = self._doubling_sends
        sends.append(now)
        span = sends[-1] - sends[0]
        if len(sends) < SLOW_DOUBLING_SENDS or span < SLOW_DOUBLING_S:
            return
        used = len(sends) - 1 >= SLOW_USED * self.rate * span
        self._doubling_sends = [now]
        if used and 2 * self.rate <= self.cut_rate * 2**SLOW_DOUBLINGS * (1 + 1e-9):
            self._set_rate(now, 2 * self.rate)  # (held at the last until the first refusal)

    def judge(self, now: float, after: Share) -> str | None:
        """Judge the trial with ``after``, the judged sends since the cut settled: "noise" (the
        cuts in a row are undone; ``undone`` says what to restore), "rate" (kept), "unclear"
        (kept; a next cut continues the row), or None (not enough sends yet)."""
        trial = self.trial
        verdict = None if trial is None else trial.verdict(after)
        if trial is None or verdict is None:
            return None
        if verdict == "noise" and self._held_at_ceiling(trial, after):
            verdict = "unclear"
        self.trial = None
        self._clamped = False
        if verdict == "noise":
            self._limit_at = self.confirmed = 0.0
            self.noise = max(self.noise, after.value)
            self.rate = trial.rate_before
            self.pacer = None if self.rate is None else self._pacer(now, self.rate)
            self.window = trial.window_before
            self.cut_at = -math.inf
            self.undone, self._chain = trial, None
            self._refused_rate = None
        elif verdict == "rate":
            self.noise /= 2  # the share fell with the rate: less of it was random
            self._chain = None
            self._ceiling = trial.measured or self._ceiling
            at, last = trial.refused_at, self._limit_at
            same = abs(at - last) <= SAME_LEVEL * last
            ceiling = self._ceiling / REFUSED_SHARE if self._ceiling else math.inf
            self.confirmed, self._limit_at = (min(at, last, ceiling) if same else 0.0), at
        if verdict != "noise":
            # The trial held the cut rate: the curve goes on from no further than where it
            # meets the rate cut from (a long trial at a low rate would otherwise end far up the
            # curve, far past the limit at once).
            self.cut_at = max(self.cut_at, now - self.hold_s())
        return verdict

    def _held_at_ceiling(self, trial: Trial, after: Share) -> bool:
        """Whether ``trial`` held a rate well above what the server was measured to take (at
        its cut, or at one whose trial found a rate limit; ``HELD_SHARE`` of the trial's rate
        above it) and the server still took about as much (``HELD_SHARE`` of it or more): a
        rate limit's refusals keep their share above it (a bucket's saved burst hid them
        before the cut), while random refusals take a share of the lower rate."""
        ceilings = [c for c in (self._ceiling, trial.measured) if c > 0]
        if not ceilings or HELD_SHARE * trial.rate <= min(ceilings):
            return False
        return trial.rate * (1 - after.value) >= HELD_SHARE * min(ceilings)

    def _set_rate(self, now: float, rate: float) -> None:
        self.rate = rate
        if self.pacer is None:
            self.pacer = self._pacer(now, rate)
        else:
            self.pacer.refill(now)
            self.pacer.rate = rate
            self.pacer.capacity = max(1.0, self._burst(rate))
            self.pacer.level = min(self.pacer.level, self.pacer.capacity)

    def _pacer(self, now: float, rate: float) -> Pacer:
        return Pacer(rate, self._burst(rate), now, full=False)

    def _burst(self, rate: float) -> float:
        """What the rate's pacer lets go at once: ``PACED_BURST_S`` of it; one send after a
        stall that took next to none at once (``single``)."""
        return 1.0 if self.single else rate * PACED_BURST_S
