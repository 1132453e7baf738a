"""The opening of a run and its slow start, before any 429 says where a limit is.

Until the first answer nothing says how fast the server takes requests: ``OPENING_BURST`` go at
once, then at most ``OPENING_RATE`` per second (``Opening.wait``). A server that allows less
refuses only the few sent before its first 429 comes back (benchmarks/bench_limiters.py).

The first answer ends the pacing only one round trip after it (``rtt``, measured from the
connections opened meanwhile, ``Limiter.connected``): the 429s of the sends made just before it
are still on their way until then. Ended at once, with a server 200 ms away (the virtual matrix,
429s 0.2 s late), the slow start sent 54 in the next 60 ms into a 10 s window already full. A
refusal before the first answer that is not read as a limit (a few refusals may be random) holds
the pacing past that answer for twice the longest a 429 took lately (``hold``): 429s come back out
of order, so sends made just before it may be refused too, their 429s still on the way, and the
first answers would otherwise let a burst out into a window already full. A refusal with no
other before its run of them (a window that has just filled refuses every send after its first
refusal; random refusals scatter) holds the pacing, and the slow start's growth if it has begun,
until the paced sends after it have made the streak that reads as a limit (``STREAK_S``): with
the first answers just after such a refusal's 429, the slow start sent up to 37 more into the full
window. (Releasing the hold once a send after the refusal was judged accepted changed nothing
measured: a send is judged no sooner than that.)

After the first answer the in-flight window starts at what is in flight, grows by one per answer
and doubles every ``GROWTH_DOUBLING_S`` of *seen* time: time counts only as the event loop
delivers responses (``saw_response``), at most ``SEEN_STEP_S`` per response, so a loop too busy
to read the 429s waiting for it does not let the window grow meanwhile; and a loop that wakes its
sleepers late (it reads its 429s as late) doubles it only every ``LAG_DOUBLINGS`` times that
lag. The first 429 that signals a limit ends both (``stop``); a cut that proves to be about
random refusals resumes the growth (``resume``).
"""

from __future__ import annotations

from .congestion import CLEAN_STALL_STREAK
from .pacing import Pacer

#: The opening: this many at once, then at most ``OPENING_RATE`` per second until an answer.
OPENING_BURST = 8
OPENING_RATE = 50.0
#: A refusal in the opening not read as a limit holds its pacing (past a first answer) long
#: enough for the paced sends after it to make the streak that reads as one
#: (``congestion.CLEAN_STALL_STREAK``): the first answers would otherwise let the slow start
#: out into a window that has just refused.
STREAK_S = (CLEAN_STALL_STREAK - 1) / OPENING_RATE
#: Slots the in-flight window keeps at least when the opening ends.
SLOW_START = 8
#: After the first answer, while no 429 signals a limit, the window doubles this often (seen
#: time) and grows by one per answer.
GROWTH_DOUBLING_S = 0.05
#: Seen time: at most this much per response the loop delivers.
SEEN_STEP_S = 0.025
#: A loop that wakes its sleepers late (by ``lag``) reads a 429 that late too: the window then
#: doubles no faster than every ``LAG_DOUBLINGS * lag``, so what goes out meanwhile stays a small
#: share of it.
LAG_DOUBLINGS = 7.0


class Opening:
    """The opening's pacing and the slow start's in-flight window (module docstring)."""

    def __init__(self, concurrency: int, *, adaptive: bool, now: float) -> None:
        self.pacing = adaptive  # until the first answer
        self.pacer = Pacer(OPENING_RATE, OPENING_BURST, now, full=True)
        self.growing = adaptive
        self.window = concurrency
        self._base = float(SLOW_START)
        self._seen = 0.0  # seen time since the growth started
        self._last_event = now
        self.lag = 0.0  # how late the loop woke a sleeper lately (decaying maximum)
        self.held_until = -1e18  # the opening stays paced until then (refusals being judged)
        self.streak_until = -1e18  # ...and the slow start's growth too (a refusal's streak)
        self.answered_once = False
        self.first_answer = float("inf")  # when the first answer came
        #: How long a 429 takes to come back, as far as the connections' round trips tell
        #: before one has (0: nothing measured; a server on this machine).
        self.rtt = 0.0

    def current(self, most: int) -> int:
        """The in-flight window now (at most ``most``, the concurrency in force)."""
        if self.pacing:
            return most
        if self.growing:
            doubling = max(GROWTH_DOUBLING_S, LAG_DOUBLINGS * self.lag)
            grown = self._base * 2 ** min(40.0, self._seen / doubling)
            if grown >= most:
                self.growing = False
                self.window = most
            elif grown > self.window:
                self.window = int(grown)
        return self.window

    def wait(self, now: float) -> float:
        """Seconds before the next send may go while the opening is paced (0: now)."""
        return self.pacer.wait(now, 1.0) if self.pacing else 0.0

    def took(self) -> None:
        if self.pacing:
            self.pacer.take(1.0)

    def woke(self, late: float, sleepers: int = 1) -> None:
        """``sleepers`` woke ``late`` seconds after their time (the loop was busy): the lag
        decays by a tenth for each."""
        self.lag = max(self.lag * 0.9**sleepers, late)

    def saw_response(self, now: float) -> None:
        """The loop delivered a response: time up to now was seen (at most ``SEEN_STEP_S``;
        none while a refusal holds the growth)."""
        if self.growing and not self.pacing and not self.held(now):
            self._seen += min(max(0.0, now - self._last_event), SEEN_STEP_S)
        self._last_event = now

    def held(self, now: float) -> bool:
        """Whether the pacing (or the slow start's growth) is held at ``now``."""
        return now < self.held_until or now < self.streak_until

    def hold(self, now: float, sent_at: float | None, refusal_rtt: float, *, streak: bool) -> None:
        """A refusal not read as a limit, of a send made at ``sent_at``, ``refusal_rtt`` the
        longest a 429 took lately.

        - Before any answer, the 429s of sends made before it may come back for twice that
          (429s come back out of order): till then the first answer does not end the pacing.
        - ``streak``: no refusal came before its run of them (a window that has just filled
          refuses every send after its first refusal; random refusals scatter). The paced
          sends after it make the streak that reads as a limit within ``STREAK_S`` more: till
          then no answer ends the pacing, and the slow start, if it has begun, does not grow.
          Only sends made before the first answer's own hold ended, and one streak more, hold
          it so (random refusals would hold it for good)."""
        if self.pacing and not self.answered_once:
            self.held_until = max(self.held_until, now + 2 * refusal_rtt)
        if not (streak and (self.pacing or self.growing)):
            return
        if sent_at is None or sent_at < self.first_answer + 2 * self.rtt + STREAK_S:
            self.streak_until = max(self.streak_until, now + 2 * refusal_rtt + STREAK_S)

    def answered(self, in_flight: int, most: int, now: float) -> None:
        """An answer: the opening ends at what is in flight (unless held; the first answer
        holds it one round trip, ``rtt``); the slow start grows by one."""
        if self.pacing:
            if not self.answered_once:
                self.held_until = max(self.held_until, now + self.rtt)
                self.first_answer = now
            self.answered_once = True
            if self.held(now):
                return
            self.pacing = False
            self.window = max(SLOW_START, in_flight + 1)
            self._base, self._seen = float(self.window), 0.0
        if self.growing and self.window < most and not self.held(now):
            self.window += 1

    def stop(self, most: int) -> None:
        """A 429 signalled a limit: no more opening or growth (the limit holds sends now)."""
        self.pacing = self.growing = False
        self.window = most

    def resume(self, window: int, growing: bool, most: int) -> None:
        """A cut proved to be about random refusals: the window, and its growth, as before."""
        self.window = max(1, min(most, window))
        if growing and self.window < most:
            self.growing = True
            self._base, self._seen = float(self.window), 0.0
