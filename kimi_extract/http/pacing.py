"""The limiter's bookkeeping: a token-bucket ``Pacer`` and the ``SendLog`` of recent sends.

``Pacer``: ``rate`` units per second with at most ``capacity`` saved up. It never holds more than
its capacity: a reservation handed back (a refused request, an over-estimate of tokens) refills it
up to the capacity and no further, so a run of refusals cannot bank a burst.

``SendLog``: every send of the last ``MAX_WINDOW_S`` and two trailing windows over it, one counting
requests and one summing tokens, each of its own length (Kimi counts in 60 s; a gateway may count
in less, which the limiter learns). A refused send stops counting in both at once (the server did
not count it either); a send's tokens are corrected to its real usage when its answer arrives.
The log also answers what the limiter asks of the past: how many sends the server accepted over a
span, and which window a refusal implies (``window_for``).
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

#: The longest window any limit is counted in (Kimi's), and how long sends are remembered.
MAX_WINDOW_S = 60.0
#: No window is learned shorter than this: Kimi states waits in whole seconds, and a shorter
#: "window" is a token bucket's burst, which the pacer handles.
MIN_WINDOW_S = 1.0
REQUESTS, TOKENS = 1, 2
#: ``SendLog.held_ahead`` looks no further back than this for a send whose 429 came after the
#: one it is asked about went.
AHEAD_LATE_S = 10.0


class Pacer:
    """A token bucket: ``rate`` units per second, at most ``capacity`` saved up. The level may go
    negative (a request larger than the bucket goes when the bucket is full; the next ones wait),
    and never rises above the capacity."""

    def __init__(self, rate: float, capacity: float, now: float, *, full: bool) -> None:
        self.rate = rate
        self.capacity = max(1.0, capacity)
        # Not full: a limit just learned from a burst that emptied the server's own bucket; the
        # first sends wait a burst's worth, so the server's bucket is not left at the edge.
        self.level = self.capacity if full else -self.capacity
        self.time = self.since = now

    def refill(self, now: float) -> None:
        if now > self.time:
            self.level = min(self.capacity, self.level + (now - self.time) * self.rate)
        self.time = max(self.time, now)

    def wait(self, now: float, amount: float) -> float:
        """Seconds until ``amount`` may be taken (0: now)."""
        self.refill(now)
        need = min(amount, self.capacity)
        return 0.0 if self.level >= need - 1e-9 else (need - self.level) / self.rate

    def take(self, amount: float) -> None:
        self.level -= amount

    def give_back(self, amount: float) -> None:
        """Return ``amount`` taken earlier (unused): up to the capacity, never above it."""
        self.level = min(self.capacity, self.level + amount)


@dataclass
class Share:
    """Judged sends and how many of them were refused."""

    sends: int = 0
    refused: int = 0

    @property
    def value(self) -> float:
        return self.refused / self.sends if self.sends else 0.0


class Send:
    """One admitted request: when it went, the tokens charged, and whether it was refused."""

    __slots__ = (
        "sent_at",
        "tokens",
        "known",
        "refused",
        "refusal",
        "seen",
        "named",
        "held",
        "room",
        "ahead",
    )

    def __init__(self, sent_at: float, tokens: float) -> None:
        self.sent_at = sent_at
        self.tokens = tokens
        #: Our other requests in flight as it went, not known refused then (the server held at
        #: most these when it came: a 429 read a round trip later is judged by them, not by
        #: those in flight when it is read).
        self.ahead = 0
        self.known = False  # its tokens are its answer's usage, not an estimate
        self.refused = False
        #: Refused: how many 429s the log had read when its came (its place among them)...
        self.refusal = 0
        #: ...and how many it had read when it went.
        self.seen = 0
        self.room = math.inf  # refused: when its stated wait said the server has room
        self.named = False  # refused by a limit its 429 named
        self.held = 0  # bit set of the windows still counting it


class _Window:
    """A trailing window over the log: ``total`` requests (or tokens) sent in the last
    ``length`` seconds and not refused; or, ``fixed_from`` set, in the fixed window of
    ``length`` (one of those from ``fixed_from`` on) that ``now`` is in."""

    def __init__(self, bit: int, length: float) -> None:
        self.bit = bit
        self.length = length
        self.queue: deque[Send] = deque()
        self.total = 0.0
        self.fixed_from: float | None = None

    def start(self, now: float) -> float:
        """Where the window counted at ``now`` begins (its sends are those from then on)."""
        origin = self.fixed_from
        if origin is None:
            return now - self.length
        return origin + max(0, math.floor((now - origin) / self.length + 1e-9)) * self.length

    def amount(self, send: Send) -> float:
        if send.refused:
            return 0.0
        return 1.0 if self.bit == REQUESTS else send.tokens

    def add(self, send: Send) -> None:
        self.queue.append(send)
        send.held |= self.bit
        self.total += self.amount(send)

    def drop(self, send: Send) -> None:
        """``send`` stops counting (its amount is about to change or it was refused)."""
        if send.held & self.bit:
            self.total -= self.amount(send)

    def expire(self, now: float) -> None:
        queue = self.queue
        start = self.start(now)
        fixed = self.fixed_from is not None
        while queue and (queue[0].sent_at < start if fixed else queue[0].sent_at <= start):
            send = queue.popleft()
            if send.held & self.bit:
                self.total -= self.amount(send)
                send.held &= ~self.bit

    def wait(self, now: float, amount: float, capacity: float) -> float:
        """Seconds until ``amount`` more fits under ``capacity`` as sends age out (0: now)."""
        if self.total + amount <= capacity + 1e-9:
            return 0.0
        if self.fixed_from is not None:
            return self.start(now) + self.length - now  # (the next fixed window)
        excess = self.total + amount - capacity
        for send in self.queue:
            excess -= self.amount(send)
            if excess <= 1e-9:
                return send.sent_at + self.length - now
        return (self.queue[-1].sent_at + self.length - now) if self.queue else 0.0


#: ``SendLog.taken_pace`` reads a pace from this many taken sends or more.
PACE_SENDS = 4


def pace_of(count: int, first: float, last: float, least: int) -> float | None:
    """The pace of ``count`` sends from ``first`` to ``last`` (``count - 1`` gaps over the
    span), or None with fewer than ``least`` of them or no span."""
    if count < least or last <= first:
        return None
    return (count - 1) / (last - first)


class SendLog:
    """The sends of the last ``MAX_WINDOW_S`` and the trailing request and token windows."""

    def __init__(self) -> None:
        self.sends: deque[Send] = deque()
        self.refusals = 0  # 429s read (``refuse``)
        self.requests = _Window(REQUESTS, MAX_WINDOW_S)
        self.tokens = _Window(TOKENS, MAX_WINDOW_S)

    def add(self, now: float, tokens: float) -> Send:
        send = Send(now, tokens)
        send.seen = self.refusals
        self.sends.append(send)
        self.requests.add(send)
        self.tokens.add(send)
        return send

    def expire(self, now: float) -> None:
        self.requests.expire(now)
        self.tokens.expire(now)
        sends = self.sends
        while sends and sends[0].sent_at <= now - MAX_WINDOW_S - 1.0:  # (a window's edge too)
            sends.popleft()

    def refuse(self, send: Send) -> None:
        """The server refused ``send``: it counts in no window (its tokens were never used)."""
        if send.refused:
            return
        self.requests.drop(send)
        self.tokens.drop(send)
        self.refusals += 1
        send.refused, send.refusal = True, self.refusals

    def held_ahead(self, send: Send) -> int:
        """What the server held of ours when ``send`` came, as far as is known now: those in
        flight as it went, not known refused then (``Send.ahead``), less those whose 429 came
        since (a 429 a round trip late: the sends made before it in that round trip were
        counted as held; a 429 ``AHEAD_LATE_S`` later than ``send`` is not looked for). "Since"
        is in the order the 429s were read, not by the clock: one read at the moment it went,
        after it went, was counted in ``ahead``."""
        passed, since = False, 0
        for other in reversed(self.sends):
            if other is send:
                passed = True
            elif passed:
                if other.sent_at < send.sent_at - AHEAD_LATE_S:
                    break
                since += other.refused and other.refusal > send.seen
        return max(0, send.ahead - since) if passed else send.ahead

    def correct(self, send: Send, tokens: float) -> None:
        """``send`` really cost ``tokens`` (its answer's usage)."""
        if send.refused:
            return
        self.tokens.drop(send)
        send.tokens, send.known = tokens, True
        if send.held & TOKENS:
            self.tokens.total += tokens

    def set_length(
        self, window: _Window, length: float, now: float, *, fixed_from: float | None = None
    ) -> None:
        """Count ``window`` over ``length`` seconds from now on (rebuilt from the log): a
        trailing window, or with ``fixed_from`` the fixed windows of ``length`` from then on."""
        length = min(MAX_WINDOW_S + 1.0, max(MIN_WINDOW_S, length))
        if length == window.length and fixed_from == window.fixed_from:
            return
        for send in window.queue:
            send.held &= ~window.bit
        window.length, window.fixed_from = length, fixed_from
        window.queue = deque()
        window.total = 0.0
        start = window.start(now)
        for send in self.sends:
            if send.sent_at > start or fixed_from is not None and send.sent_at == start:
                window.add(send)

    def newest(self) -> Iterator[Send]:
        """Sends still remembered, newest first."""
        return reversed(self.sends)

    def accepted(
        self, now: float, span: float, *, tokens: bool = False, until: float = math.inf
    ) -> float:
        """Requests (or tokens) sent in the last ``span`` seconds and not refused (only those
        sent before ``until``)."""
        total = 0.0
        for send in reversed(self.sends):
            if send.sent_at <= now - span:
                break
            if not send.refused and send.sent_at < until:
                total += send.tokens if tokens else 1.0
        return total

    def span_of(self, now: float, sends: int, least: float, *, since: float) -> float:
        """Seconds back to the ``sends``-th newest send made from ``since`` on (at least
        ``least``; back to the oldest of them when there are fewer)."""
        oldest = now - least
        for count, send in enumerate(reversed(self.sends), start=1):
            if send.sent_at < since:
                break
            oldest = min(oldest, send.sent_at)
            if count >= sends:
                break
        return now - oldest

    def refused_among(self, count: int) -> int:
        """Refusals (not by a named limit) among the newest ``count`` sends."""
        return sum(
            send.refused and not send.named
            for send in itertools.islice(reversed(self.sends), count)
        )

    def refusing_since(self, now: float, span: float, *, after: int) -> tuple[float, int] | None:
        """When the oldest refusal of the last ``span`` seconds (not by a named limit) was sent,
        and how many sends the server took after it in the order sent (a burst's sends share a
        moment), if at least ``after`` sends went after it; else None. What the server accepted
        since then is its rate while it had no saved room (a bucket's burst spent)."""
        oldest, count, later, taken, taken_later = None, 0, 0, 0, 0
        for send in reversed(self.sends):
            if send.sent_at <= now - span:
                break
            count += 1
            if send.refused and not send.named:
                oldest, later, taken_later = send.sent_at, count - 1, taken
            taken += not send.refused
        return (oldest, taken_later) if oldest is not None and later >= after else None

    def taken_pace(self, since: float) -> float | None:
        """The pace of the sends the server took after ``since`` (n - 1 over the span from the
        first of them to the last; at least ``PACE_SENDS``), else None. Counted over the span
        from ``since`` to now instead, a handful of sends reads up to one send's worth low: a
        50/s bucket took 6 in 0.13 s, read as 45/s."""
        times = [s.sent_at for s in self.sends if s.sent_at > since and not s.refused]
        return pace_of(len(times), times[0], times[-1], PACE_SENDS) if times else None

    def judged(
        self, young: float, since: float | None = None, count: int = 50, *, epoch: float = -1e18
    ) -> Share:
        """The recent judged sends (the last ``count``, or all since ``since``; none before
        ``epoch``), refused or accepted: only sends made by ``young`` (a later one's 429 may still
        be on the way; counting the refusals of a moment before its acceptances would overstate
        the share), and not refusals by a named limit (that limit's business, not a sign of
        another)."""
        share = Share()
        for send in reversed(self.sends):
            if send.sent_at < epoch or (since is not None and send.sent_at < since):
                break
            if send.sent_at > young or send.named:
                continue
            share.sends += 1
            share.refused += send.refused
            if since is None and share.sends >= count:
                break
        return share

    def taken_after_refusals(self, before: float) -> tuple[int, float, float]:
        """The sends made before ``before`` after the newest refused one (by a limit no 429
        named), all accepted: how many, and when the first and the last of them went. The server
        took every one of them, at the rate they went (a burst's overflow refused, and the paced
        sends after it all taken: a bucket of burst one)."""
        count, first, last = 0, math.inf, -math.inf
        for send in reversed(self.sends):
            if send.sent_at >= before:
                continue
            if send.refused and not send.named:
                break
            count += 1
            first, last = send.sent_at, max(last, send.sent_at)
        return count, first, last

    def before_refused(self) -> int:
        """The sends in the log made before the first refused one (all of them, none refused)."""
        return next((i for i, send in enumerate(self.sends) if send.refused), len(self.sends))

    def refused_run(self, send: Send) -> tuple[int, int]:
        """Refused sends in a row, in the order sent, through ``send``: those before it and
        those after it whose 429s came back first (429s may come back out of order; refusals
        by a named limit are passed over: they are that limit's, not a sign of another); and
        the other refused sends made after the run's first (named, or after the run)."""
        sends = list(self.sends)
        at = next((i for i in range(len(sends) - 1, -1, -1) if sends[i] is send), None)
        if at is None:
            return 0, 0
        first = last = at
        for step, bound in ((-1, -1), (1, len(sends))):
            for i in range(at + step, bound, step):
                if sends[i].named:
                    continue
                if not sends[i].refused:
                    break
                first, last = min(first, i), max(last, i)
        run = sum(not other.named for other in sends[first : last + 1])
        return run, sum(other.refused for other in sends[first + 1 :]) - (run - 1)

    def tokens_known(self, calibrated_at: float | None) -> bool:
        """Whether every accepted send's tokens are its usage, or an estimate made after an
        answer had calibrated them (``calibrated_at``); never before any answer."""
        if calibrated_at is None:
            return False
        return all(s.known or s.refused or s.sent_at >= calibrated_at for s in self.sends)

    def window_for(
        self, now: float, per_minute: float, *, tokens: bool, judged_before: float
    ) -> float | None:
        """The longest window (seconds, at least ``MIN_WINDOW_S``) in which the accepted sends
        already fill ``per_minute`` scaled to that window, i.e. the longest window in which a
        server would have refused the next send; None when none does (the refusal is not
        explained by our own sends: a burst limit, another client, or a random refusal). Only
        sends made by ``judged_before`` count (a later one may yet be refused)."""
        accepted = [
            s for s in reversed(self.sends) if not s.refused and s.sent_at <= judged_before
        ]  # newest first
        if not accepted:
            return None
        best: float | None = None
        count = 0.0
        most = sum(s.tokens if tokens else 1.0 for s in accepted)
        for index, send in enumerate(accepted):
            count += send.tokens if tokens else 1.0
            age = now - send.sent_at
            if age > MAX_WINDOW_S * most / per_minute:
                break  # no longer window can be full: it would hold at most ``most``
            reach = MAX_WINDOW_S * count / per_minute  # the window this count fills
            if age > reach:
                continue
            # A window from ``age`` up to the next older send holds exactly ``count``.
            older = now - accepted[index + 1].sent_at if index + 1 < len(accepted) else reach
            length = min(reach, older, MAX_WINDOW_S)
            if length >= MIN_WINDOW_S and (best is None or length > best):
                best = length
        return best

    def wait_under(
        self,
        now: float,
        per_minute: float,
        length: float,
        *,
        tokens: bool,
        amount: float,
        judged_before: float = math.inf,
    ) -> float:
        """Seconds until ``amount`` fits in a trailing ``length`` s window holding at most
        ``per_minute`` scaled to it (what a log of that length would make the next send wait),
        of the sends made by ``judged_before``."""
        capacity = per_minute * length / MAX_WINDOW_S
        total = 0.0
        window = []
        for send in reversed(self.sends):
            if send.sent_at <= now - length:
                break
            if not send.refused and send.sent_at <= judged_before:
                window.append(send)
                total += send.tokens if tokens else 1.0
        if total + amount <= capacity + 1e-9:
            return 0.0
        excess = total + amount - capacity
        for send in reversed(window):  # oldest first
            excess -= send.tokens if tokens else 1.0
            if excess <= 1e-9:
                return send.sent_at + length - now
        return 0.0
