"""What a stall of 429s that name nothing reads as the server's concurrency when the 429s come
back a round trip late, on a virtual clock (``Limiter.throttled``, ``SendLog.held_ahead``).

A stall clamps the in-flight window at what the server held of ours when it refused. Counted as
what was in flight when the 429 came back, a round trip late, it took as held the sends of that
round trip whose 429s were still on their way: a gateway's 10/s bucket of burst one, 8 s answers,
was read as 6 slots and 600 rows took 425 s. It is counted as what was in flight when the refused
request went, less those whose 429s came since.
"""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kimi_extract.http import congestion
from kimi_extract.http.pacing import SendLog

from .virtual_gateway import Shape, dumps, longest_gap, run


def test_held_ahead_leaves_out_the_sends_whose_429s_came_since():
    log = SendLog()
    burst = [log.add(0.0, 1.0) for _ in range(4)]
    for i, send in enumerate(burst):
        send.ahead = i
    last = log.add(0.1, 1.0)
    last.ahead = 4  # all four in flight as it went, none known refused then
    for send in burst[1:3]:
        log.refuse(send)  # their 429s came a round trip later
    assert log.held_ahead(last) == 2
    # A 429 read before a send went was not counted in its ``ahead``: it is not taken off.
    early = log.add(0.3, 1.0)
    early.ahead = 2
    assert log.held_ahead(early) == 2
    # Nor is one of a send made after it (it held no slot when that one came).
    later = log.add(0.4, 1.0)
    log.refuse(later)
    assert log.held_ahead(early) == 2
    # A 429 read at the very moment a send went, but after it, was counted: it is taken off.
    same = log.add(0.4, 1.0)
    same.ahead = 3  # last, and burst[0] and burst[3], none known refused
    log.refuse(burst[3])
    assert log.held_ahead(same) == 2


def _late(shape: Shape, rows: int, latency: float, style: str = "bare"):
    """``rows`` through ``shape``, each 429 back 200 ms late, every row answered."""
    out = run(shape, rows=rows, style=style, latency_s=latency, refusal_s=0.2)
    assert out.ok == rows, dumps(out)
    return out


def _clamps(monkeypatch) -> list[tuple[int, int | None]]:
    """Each stall clamp's count, and the window after it."""
    seen: list[tuple[int, int | None]] = []
    clamp = congestion.Congestion.clamp

    def spy(self, now, accepted_in_flight, **kwargs):
        clamp(self, now, accepted_in_flight, **kwargs)
        if kwargs.get("stall", True):
            seen.append((accepted_in_flight, self.window))

    monkeypatch.setattr(congestion.Congestion, "clamp", spy)
    return seen


@settings(max_examples=25, deadline=None)
# (a 429 read at the very moment a send went, after it: counted as read before, 38 read)
@example(slots=36, latency=0.3, late=0.01, style="bare")
@given(
    slots=st.integers(2, 40),
    latency=st.sampled_from([0.3, 1.0, 8.0]),
    late=st.sampled_from([0.0, 0.01, 0.05, 0.1, 0.2, 0.3]),
    style=st.sampled_from(["bare", "retry-after"]),
)
def test_a_stall_reads_a_concurrency_limit_as_its_slots(slots, latency, late, style):
    # Property: behind any concurrency limit, however late its 429s, the first stall clamps
    # the window at the server's slots, and no stall clamps it below them. Counted as what was
    # in flight when each 429 came back, 42 of 60 such draws clamped above the slots (26 slots,
    # 429s 50 ms late: 43) or below them (15 slots, 8 s answers, 429s 300 ms late: 24 down to 15
    # and on, as answers freed slots while the 429s were on their way).
    with pytest.MonkeyPatch.context() as patch:
        seen = _clamps(patch)
        out = run(
            Shape("concurrency", concurrency=slots),
            rows=100,
            style=style,
            latency_s=latency,
            refusal_s=late,
        )
    assert out.ok == 100, dumps(out)
    # (no stall at all is no misreading: refusals cut the rate instead)
    clamped = [(count, window) for count, window in seen if window is not None]
    assert not clamped or clamped[0] == (slots, slots), (seen, dumps(out))
    assert all(window >= slots for _, window in clamped), (seen, dumps(out))


def test_a_bucket_of_burst_one_behind_late_429s_is_not_read_as_slots(monkeypatch):
    # 10/s, burst 1, bare 429s 200 ms late, 8 s answers. The opening's 8 at once: one taken, 7
    # refused, and the paced sends of the next 200 ms (one in five taken) were counted as held
    # when the 429s came: the window was clamped at 6, 0.75/s with 8 s answers, and grew by one
    # slot per window of answers (100 rows in 90.7 s; the run could end by 17.9 s).
    seen = _clamps(monkeypatch)
    out = _late(Shape("bucket", per_minute=600, burst=1), 100, 8.0)
    assert all(window is None for _, window in seen), (seen, dumps(out))
    assert out.end <= 25.0, dumps(out)  # 22.35 s


def test_the_paced_sends_a_bucket_took_after_its_refusals_restart_the_rate():
    # 100/s, burst 1, bare 429s 200 ms late, 0.3 s answers: the opening's 8 at once overflow
    # it, and every paced send after them (50/s) is taken. The stall's probe restarted the rate
    # at what the server delivered over the stall, its pause in it (11/s), and the curve stayed
    # near that for 20 s: 600 rows in 29.7 s. They show the server takes at least 50/s.
    out = _late(Shape("bucket", per_minute=6000, burst=1), 600, 0.3)
    assert out.end <= 15.0, dumps(out)  # 13.29 s
    assert out.gateway.refused() <= 12, dumps(out)  # 8


def test_a_later_refusal_with_room_held_undoes_the_clamp(monkeypatch):
    # 10 per fixed 1 s window, bare 429s 200 ms late, 0.3 s answers. The stall clamped the
    # window at the 10 the server held; its later 429s, of sends that went as answers freed
    # slots, came with 2 held: no concurrency limit refused those. Clamped at 2, 600 rows took
    # 85.0 s; the clamp undone, 67.9 s.
    seen = _clamps(monkeypatch)
    out = _late(Shape("fixed", per_minute=600, window_s=1.0), 600, 0.3)
    assert seen and seen[0] == (10, 10), seen
    assert out.end <= 72.0, dumps(out)


def test_waiters_parked_for_a_slot_wake_when_the_clamp_is_let_go():
    # 10 per fixed 1 s window with Retry-After, 200 ms late, 8 s answers: a stall clamps the
    # window at 10, and 75 rows park for a slot. A probe past it is taken, and one more, so the
    # clamp is let go while a waiter checks: nothing woke the 75 parked, and nothing went from
    # 4.35 s until the first answers at 8 s (100 rows in 26.45 s).
    out = _late(Shape("fixed", per_minute=600, window_s=1.0), 100, 8.0, style="retry-after")
    sent = sorted(a.at for a in out.gateway.attempts)
    assert longest_gap([t for t in sent if 2.0 <= t <= 8.0], since=2.0) < 1.0, dumps(out)
    assert out.end <= 24.0, dumps(out)  # 23.45 s
