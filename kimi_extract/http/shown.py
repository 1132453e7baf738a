"""A window limit shown by a stall of 429s that name nothing.

A gateway's generic 429 ("Rate limit reached", with or without ``Retry-After``) names no limit.
But a stall shows one: the server took ``count`` of ours, then refused every send until it had
room again, ``length`` seconds after the first of them. A fixed window or a sliding log behaves so
(a window of ``length`` holding ``count``); a token bucket or a concurrency limit has room again
within a moment (``MIN_STALL_S``), and shows nothing. Nor does a stall whose accepted probe went
long after its last refusal (``SEEN_SHARE``): held back for a slot while answers are slow, the
probe does not say when the room came. (A probe that went when its pause ended, as one of the
usual window lengths ended, ``congestion.WINDOW_LENGTHS_S``, found the room where it looked.)

``Stall`` keeps one stall's evidence: when it starts, what the server took (``taken_before``);
when its probe is accepted, the window that was (``StallStart.shown``):

- ``count``: the sends the server accepted before the stall, back to the previous stall's probe
  (or the start) and no further back than the window in force (so a lower limit, a window that
  now holds less, is read as what its last window took); a send whose 429 comes back after the
  stall started (read late, as a busy loop or a long round trip reads them) is taken off again;
- ``length``: from the first of them to the moment the server had room: the earliest time a
  stated wait (``Retry-After``, whole seconds rounded up) promised it, else the accepted probe.
  A stated wait rounds up, so the window is read at most a second long: never shorter than it is.
  When a usual window length from the first of them ends within that second, the probe goes
  there (``Stall.pause``), and if it is accepted, the window is read from it. With no wait
  stated, a probe refused at a usual length's end from the first of them, and accepted once all
  of them have left that length (``congestion.left_ends``), shows a limit that dropped before
  any window was read: the window has that length and holds no more than it held of ours at the
  refusal (``Stall.end``; read from the first, 50 per 10 s dropped to 5 was read as 5 per 30 s).

The limiter then keeps to ``count`` per ``length`` (a trailing log of that length, sends at once
up to ``BURST_SHARE`` of it) instead of a rate spread evenly: in a window the server refills all
at once, a run takes it all at once too (``named.Limit.infer``). A later stall reads the window
again (``Stall.end``): a window shown before that now holds less. With no wait stated, its
probes go as our sends leave it (``Stall.leaving``: after a drop the room comes as the sends
before it leave, one by one, not at the window's next edge), and what it holds is bounded by
what it held of ours at each refusal (at most that) and at each send taken (at least that):
when no refusal came below what it held as the last send before the stall was taken, the limit
did not drop (a token limit's prompts differ in length) and the window is read as that; else as
what it held when the probe found room, the probe included. With a wait stated, its first
probes go before the room it promised, each when half of our sends that leave the window
meanwhile have left (``Stall.halving``: a wait in whole seconds, rounded up, promises room up
to a second late, and by then the sends before a drop have left the window, which then holds
one or two of ours and shows nothing), and what it holds is what it held when one found room.
When that is fewer than ``MIN_COUNT`` of ours (the round before went within a moment and has
left the window by then), it is read as what it held, one at least, bounded by what it held at
the refusals: the scan finds the rest (read as nothing, the run kept to the old window's paced
rate for a whole window, 10 -> 5 per 10 s ended at 87.7 s, not 82.8 s).

Read so after a drop, the window holds at least ``count`` and fewer than what it held at a
refusal of the stall (``Shown.upper``). The limiter then scans it up: when the window is full,
sends go past it a moment apart (a third of the time a 429 takes to be seen, at most three out
unjudged), and once one is judged accepted the window holds what it held of ours with it in
(counted over the shortest length it can have), until one is refused (that refusal, and those
of the scan's others out then, are the scan's, not a stall) or it reaches the bound.

A window first shown with a stated wait, whose probe went as a usual length ended, is a fixed
window (room for all of ``count`` as each begins) or a sliding log (room as the sends of the one
before leave): ``FixedProbe`` sends one past what a sliding log has room for and reads the
answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from .congestion import (
    LEFT_LENGTHS_S,
    PROBE_AFTER_S,
    PROBE_MIN_S,
    WINDOW_LENGTHS_S,
    window_ends,
)
from .pacing import MAX_WINDOW_S, MIN_WINDOW_S, Send, SendLog

#: A stall shorter than this (from the last accepted send to the server's room) shows no window.
MIN_STALL_S = 2.0
#: ...nor does one after fewer accepted sends than this...
MIN_COUNT = 4
#: ...nor one that names no wait and whose last refusal came before this share of it (the
#: room is then not where the probe found it).
SEEN_SHARE = 0.5
#: In a window shown before, with no wait stated, each probe goes when this share more of what
#: it held has left it since the last (the last refused probe and the accepted one bound what it
#: holds now to within it)...
LEAVE_STEP = 0.05
#: ...for this many probes, then the probes' pauses grow (a window longer than it was read).
LEAVE_PROBES = 12
#: In a window shown before, with a wait stated: so many probes each go when half of our sends
#: that leave it before the room the wait promised have left, then the probe goes at the room
#: promised (``Stall.halving``).
HALVING_PROBES = 3


@dataclass(frozen=True)
class Shown:
    """A window a stall showed: ``count`` requests per ``length`` seconds."""

    count: int
    length: float
    #: Read after a drop, from what the window held when a probe found room: the server was
    #: seen refusing with this many of ours in it (it holds fewer), and ``count`` is the least
    #: it holds (``inf``: no bound above known).
    upper: float = field(default=math.inf, compare=False)

    @property
    def per_minute(self) -> float:
        return self.count * MAX_WINDOW_S / self.length


def scannable(count: int, upper: float) -> bool:
    """Whether a window read as holding at least ``count`` and fewer than ``upper`` (a refusal
    came with that many of ours in it) leaves room for a scan: a send past ``count`` that can
    still be below ``upper``."""
    return count + 2 <= upper < math.inf


@dataclass(frozen=True)
class StallStart:
    """What the server took before a stall: ``count`` sends, the first at ``first`` and the
    last at ``last``."""

    count: int
    first: float
    last: float

    def shown(self, room: float, *, length: float | None = None) -> Shown | None:
        """The window shown when the server had room again at ``room`` (module docstring);
        ``length``: the window's length is known (a stall in a window shown before, whose room
        only a probe found: the probes' pauses grow, and the room they find is late)."""
        if self.count < MIN_COUNT or room - self.last < MIN_STALL_S:
            return None
        if length is None:
            length = min(MAX_WINDOW_S, max(MIN_WINDOW_S, room - self.first))
        return Shown(self.count, length)


def taken_before(log: SendLog, *, since: float, window: float) -> StallStart | None:
    """The sends the server accepted before a stall that starts now: from ``since`` (the
    previous stall's probe) and within ``window`` (the length of the window in force,
    ``MAX_WINDOW_S`` when none) of the last of them."""
    accepted = [s.sent_at for s in log.sends if not s.refused and s.sent_at >= since]
    if not accepted:
        return None
    last = accepted[-1]
    accepted = [t for t in accepted if t > last - window]
    return StallStart(len(accepted), accepted[0], last)


def held(log: SendLog, at: float, length: float, through: Send | None = None) -> int:
    """Sends of ours the server accepted in the ``length`` seconds before ``at`` (``at`` not
    included): what a window of that length held of ours just before a send at ``at``. With
    ``through`` (a send of the log at ``at``), those up to and including it in the order sent:
    what the window held with it in it, refused or not (a window that refused it holds fewer
    than this)."""
    count, seen = 0, through is None
    for send in log.newest():
        seen = seen or send is through
        if send.sent_at <= at - length:
            break
        taken = not send.refused or send is through
        if taken and (seen if through is not None else send.sent_at < at):
            count += 1
    return count


def leave_times(log: SendLog, length: float, after: float, before: float = math.inf) -> list[float]:
    """When the sends of ours the server took leave a window of ``length`` (``PROBE_AFTER_S``
    after its end), in order: those leaving after ``after`` and before ``before``."""
    return sorted(
        t
        for s in log.newest()
        if not s.refused and after < (t := s.sent_at + length + PROBE_AFTER_S) < before
    )


def _made_the_stall(log: SendLog, last: float) -> list[Send]:
    """The refusals that made a stall starting now, the last send taken before it at ``last``:
    those sent since, and the refused run (in the order sent) that ends with the newest refusal.
    A send whose 429 is still on the way is counted as taken, and a burst's sends go a moment
    apart on a real clock: the run's refusals were sent before the last of them."""
    refused: list[Send] = []
    in_run = True
    for send in log.newest():
        if send.refused and (send.sent_at >= last or in_run):
            refused.append(send)
        elif refused and not send.refused:
            in_run = False  # (sends after the newest refusal are on their way)
        if not in_run and send.sent_at < last:
            break
    return refused


def _after(room: float, stated: float) -> float:
    """The room came after this, as a stated wait of ``stated`` seconds ending at ``room``
    says: a second before it when the wait is a whole number (rounded up), else at it."""
    return room - 1.0 if stated >= 1.0 and stated == int(stated) else room


def probed_length(at: float, start: float, lengths: tuple[float, ...]) -> float | None:
    """The one of ``lengths`` at whose end from ``start`` (``PROBE_AFTER_S`` after it) a probe
    went ``at`` (no later than ``PROBE_MIN_S`` after it); None: at no such end. The length is
    the one given, not worked back from the times (``start + 10.05 - start - 0.05`` is not 10
    for most starts a real clock gives)."""
    for length in lengths:
        end = start + length + PROBE_AFTER_S
        if end - 1e-6 <= at < end + PROBE_MIN_S:
            return length
    return None


def shortest_length(length: float) -> float:
    """The shortest a window a stall read as ``length`` can be (unless a probe found its
    length: ``Limit.trails``). Its probe went ``PROBE_AFTER_S`` after a usual length ended
    (``WINDOW_LENGTHS_S``), or later still when the loop was busy or it waited for a slot (up
    to ``PROBE_MIN_S``, as ``probed_length`` allows): the window is that usual length. Counted
    over the length read, a scan after a drop on the real clock counted sends the server's 10 s
    window no longer held (the probe went 6 ms late, 10.056 s from the first) and read one more
    than it holds. Else the length was read to within ``PROBE_AFTER_S``."""
    usual = [w for w in WINDOW_LENGTHS_S if w <= length <= w + PROBE_AFTER_S + PROBE_MIN_S]
    return usual[-1] if usual else length - PROBE_AFTER_S


def _left_length(taken: StallStart, probe: float) -> float | None:
    """The usual window length at whose end from the last send the server took before a stall
    (``congestion.left_ends``) the stall's ``probe`` went; None: it went at no such end."""
    if taken.last - taken.first <= PROBE_AFTER_S:
        return None
    return probed_length(probe, taken.last, LEFT_LENGTHS_S)


def _taken_before(log: SendLog, send: Send | None) -> Send | None:
    """The newest send the server took before ``send`` in the order sent (a burst's sends can
    share a moment; ``send`` None: the newest it took; None: none)."""
    found = send is None
    for other in log.newest():
        if other is send:
            found = True
        elif not other.refused and (found or send is not None and other.sent_at < send.sent_at):
            return other
    return None


#: A stall of no more refusals than this says nothing of "no drop" (``Stall.end``).
NO_DROP_REFUSALS = 2


class Stall:
    """One stall's evidence of a window, from its start to its accepted probe: what the server
    took before it (``start``) and the earliest room a stated wait promised (``room_by``)."""

    def __init__(self) -> None:
        self.taken: StallStart | None = None
        self.room_by = math.inf
        #: The room came after this: a stated wait in whole seconds is rounded up.
        self.room_after = -math.inf
        self.no_room = -math.inf  # the last send of the stall refused
        #: In a window shown before: the least it held of ours with a send the server refused
        #: in it, and when the first send of the stall was refused.
        self.full_at = math.inf
        self.first_refused: Send | None = None
        self.refusals = 0  # of the stall, those that made it included
        #: A probe at a usual length's end from the first send the server took was refused with
        #: that length holding so many of ours: (length, count).
        self.ended: tuple[float, int] | None = None

    def refused(
        self,
        send: Send,
        now: float,
        stated: float | None,
        *,
        holding: int | None = None,
        log: SendLog | None = None,
    ) -> None:
        """A 429 that names nothing refused ``send``, saying (or not) how long to wait;
        ``holding``: what the window shown before held of ours when it went (None: none was
        shown; with ``log``, a probe at a usual length's end from the first send the server
        took records what that length held of ours: ``ended``)."""
        taken = self.taken
        if taken is not None:
            if holding is None and log is not None and stated is None:
                length = probed_length(send.sent_at, taken.first, WINDOW_LENGTHS_S)
                if length is not None:
                    self.ended = (length, held(log, send.sent_at, length))
            self.refusals += 1
            self.no_room = max(self.no_room, send.sent_at)
            if holding is not None:
                self.full_at = min(self.full_at, holding)
            if taken.first <= send.sent_at <= taken.last:
                # Counted as taken when the stall started, its 429 still on the way.
                self.taken = replace(taken, count=taken.count - 1)
        if stated is None:
            return
        send.room = now + stated
        if self.taken is not None:
            # (a send refused at or after the room promised disproves the promise)
            promised = self.room_by if send.sent_at < self.room_by else math.inf
            self.room_by = min(promised, send.room)
            self.room_after = max(self.room_after, _after(send.room, stated))

    def start(self, log: SendLog, *, since: float, window: float, known: bool = False) -> None:
        """A stall starts now (``taken_before``); the refusals that made it count for its
        room; ``known``: ``window`` is the length of a window shown before (what it held when
        the server last took a send, and when it refused one, bound what it holds now)."""
        self.taken = taken_before(log, since=since, window=window)
        self.ended = None
        last = -math.inf if self.taken is None else self.taken.last
        refused = _made_the_stall(log, last)
        self.refusals = len(refused)
        # (the server took that many in the window: a refusal came with one more in it)
        self.full_at = math.inf if self.taken is None else self.taken.count + 1
        self.first_refused = None
        if known and self.taken is not None:
            self.full_at = min(
                [self.full_at] + [held(log, s.sent_at, window, through=s) for s in refused]
            )
            self.first_refused = refused[-1] if refused else None  # (the oldest, in log order)
        self.room_by = min((s.room for s in refused), default=math.inf)
        # (a send's room is a whole number of seconds after its 429 only as far as we know)
        rooms = [s.room for s in refused if s.room < math.inf]
        self.room_after = max(rooms, default=-math.inf) - 1.0
        self.no_room = max((s.sent_at for s in refused), default=-math.inf)

    def leaving(self, log: SendLog, now: float, length: float) -> float | None:
        """In a window of ``length`` shown before, with no wait stated: the pause until the next
        ``LEAVE_STEP`` of what it held of ours has left it (``PROBE_AFTER_S`` after the last of
        them, at least ``PROBE_MIN_S`` from now). After a drop the sends before leave one by one
        and the room comes as they do: the probes look as it could have come, not at the
        window's next edge (None: the window holds nothing of ours that leaves)."""
        leaves = leave_times(log, length, now)
        if not leaves:
            return None
        step = 1 if self.taken is None else max(1, round(LEAVE_STEP * self.taken.count))
        at = min(len(leaves) - 1, step - 1)
        at = max(at, next((i for i, t in enumerate(leaves) if t >= now + PROBE_MIN_S), at))
        return max(PROBE_MIN_S, leaves[at] - now)

    def halving(self, log: SendLog, now: float, length: float) -> float | None:
        """In a window of ``length`` shown before, with a wait stated: the pause until half of
        our sends that leave it between now and the room the wait promised have left (None:
        fewer than two leave in between). A stated wait is whole seconds, rounded up: after a
        drop the window has room as the sends before it leave, up to a second before the room
        promised, and what it holds then is no measure of what it holds (most of them have
        left); the probe that finds the room sooner holds more of ours."""
        if self.room_by == math.inf:
            return None
        leaves = leave_times(log, length, max(now + PROBE_MIN_S, self.room_after), self.room_by)
        if len(leaves) < 2:
            return None
        return leaves[(len(leaves) - 1) // 2] - now

    def pause(self, stated: float | None, now: float) -> float | None:
        """The stated wait, or less when an earlier refusal of the stall promised room sooner,
        or when one of the usual window lengths (``window_ends``) from the first send the
        server took ends after the room could have come (the stated waits are whole seconds,
        rounded up): the probe then goes ``PROBE_AFTER_S`` after that end, and if the server
        has room, the window is read to within that, not up to a second long."""
        if stated is None or self.room_by == math.inf:
            return stated
        room = self.room_by
        if self.taken is not None:
            for end in window_ends(self.taken.first):
                if self.room_after < end < room and end > now:
                    room = end
                    break
        return min(stated, max(0.0, room - now))

    def end(
        self, log: SendLog, now: float, probe: float, before: Shown | None, *, on_time: bool = False
    ) -> Shown | None:
        """The stall's probe went at ``probe`` and was accepted: the window it showed (None:
        none), ``before`` the window shown by an earlier stall; ``on_time``: the probe went
        when its pause ended (as a usual window length ended), not held back for a slot, so the
        room is where it looked. In a window shown before, the stall means it holds less now or
        held more than we counted: its length stays (after a drop the sends before leave one by
        one, so the room is no edge), and what it holds is, with a stated wait, what it held
        when it had room again (the probe included; one at least, when a bound above is known:
        the scan finds the rest); else, when no refusal of the stall came with the window
        holding less than when the server took the last send before it (no drop: a token limit's
        prompts differ in length), what it held then; else what it held of ours at the probe
        (the probe included: the server had room for it; the probes went as our sends left it,
        ``leaving``), counted over the shortest length it can have."""
        taken, stated, room = self.taken, self.room_by < math.inf, min(self.room_by, probe)
        no_room, full_at, first_refused = self.no_room, self.full_at, self.first_refused
        refusals, self.refusals = self.refusals, 0
        ended, self.ended = self.ended, None
        self.taken, self.room_by, self.no_room = None, math.inf, -math.inf
        self.room_after, self.full_at, self.first_refused = -math.inf, math.inf, None
        if taken is None:
            return None
        if before is None:
            # A probe's room is known only as well as the last refusal before it says (unless
            # it went on time, where the usual window lengths end): one that waited for a slot
            # of ours (long answers, a clamped window) says nothing.
            seen = stated or on_time
            if not seen and no_room - taken.last < SEEN_SHARE * (room - taken.last):
                return None
            left = _left_length(taken, probe) if on_time and not stated else None
            if left is not None and ended is not None and ended[0] == left:
                # Refused as a window of that length began to empty, taken once all had left
                # it: the window has that length and its limit dropped, to no more than it held
                # of ours at the refusal.
                count = min(taken.count, ended[1])
                return Shown(count, left) if count >= MIN_COUNT else None
            return taken.shown(room)
        if stated:
            count = round(log.accepted(now, now - (room - before.length)))
        else:
            # Counted over the shortest length the window could have: a lower bound of what the
            # server held at the probe.
            length = shortest_length(before.length)
            count = held(log, probe, length) + 1
            # What it held when the server took the last send before the stall (the 429s on
            # their way then have all come back now)...
            last = _taken_before(log, first_refused)
            took_at = 0 if last is None else held(log, last.sent_at, length, through=last)
            if full_at >= took_at and refusals > NO_DROP_REFUSALS:
                # ...below what it held at every refusal since: no drop, the window filled
                # where it holds (a token limit's prompts differ in length). A refusal or two
                # a moment apart say nothing of that (a stall in a clean window shown before
                # starts at two: the first, and the send that went alone after it).
                count, full_at = max(count, took_at), math.inf
        count = min(taken.count, count)
        if count < MIN_COUNT:
            if not (stated and scannable(count, full_at)):
                return None
            count = max(1, count)
        return Shown(count, before.length, upper=full_at)


#: A fixed probe proves a window fixed only when the server took more of ours than a trailing
#: window this much shorter than the shortest the window can be holds (the server may see a
#: burst of ours later than we sent it).
FIXED_MARGIN_S = 0.05
#: ...in at most this many rounds (the second makes up the margin).
FIXED_ROUNDS = 2
#: A round's sends count what a trailing window holds this long after they go (they arrive a
#: moment later; the one more goes past a send of ours leaving it meanwhile, not at it).
FIXED_AHEAD_S = 0.002


class FixedProbe:
    """Whether a window a stall showed refills whole (fixed) or trails (a sliding log).

    A stall whose 429s stated a wait, its probe accepted at ``origin``, showed a window of
    ``count`` that is at least ``least`` long. A trailing window of that length now has room
    for the sends of ours that left it; a fixed one, begun at ``origin``, for all of ``count``.
    So as many go at once as a trailing window of ``least`` has room for, and one more
    (``round``): once all are judged accepted, and the server then held more of ours than a
    trailing window ``FIXED_MARGIN_S`` shorter holds, the window is fixed (``judge`` -> True).
    When it held more only over ``least`` itself, a second round makes up the margin. A refusal
    of any (``refused``) says it trails (False): that costs one refusal, or the margin's sends.
    """

    def __init__(self, origin: float, least: float) -> None:
        self.origin = origin
        self.least = least
        self.left = 0  # sends still to go at once
        self.rounds = 0
        self.out: list[Send] = []  # its sends not yet judged
        self.verdict: bool | None = None
        self.at = origin  # when the last round went

    def round(self, log: SendLog, now: float, count: int, length: float) -> None:
        """As many sends as a trailing window of ``length`` has room for as they arrive
        (``FIXED_AHEAD_S`` from now: a send of ours leaving it then counts as left), and one
        more."""
        at = now + FIXED_AHEAD_S
        self.left = max(1, count - held(log, at, length) + 1)
        self.rounds, self.at = self.rounds + 1, at

    def took(self, send: Send) -> None:
        self.out.append(send)
        self.left = max(0, self.left - 1)

    def refused(self, send: Send) -> bool:
        """``send`` was refused: whether it was the probe's (it then trails)."""
        if send not in self.out:
            return False
        self.out.remove(send)
        self.left, self.verdict = 0, False
        return True

    def judge(self, log: SendLog, now: float, count: int) -> None:
        """The oldest of its sends out was judged accepted: once all of them are, decide
        (``verdict``) or go another round. (What a trailing window held is counted as the round
        went, its sends all in: they go a moment apart, and a window's edge is no finer.)"""
        last = self.out.pop(0)
        if self.out or self.left or self.verdict is not None:
            return
        at, least = self.at, self.least
        if held(log, at, least - FIXED_MARGIN_S, through=last) > count:
            self.verdict = True
        elif self.rounds < FIXED_ROUNDS and held(log, at, least, through=last) > count:
            self.round(log, now, count, least - FIXED_MARGIN_S)
        else:
            self.verdict = False
