"""Fixed windows told from sliding logs, on a virtual clock (``shown.FixedProbe``).

A gateway's fixed window (a counter that starts with a request and resets a window later) refills
whole: all of its count may go the moment it begins. A sliding log refills as the sends of a
window before leave it. A stall with ``Retry-After`` shows both alike, so as the window first
refills, the limiter sends as many as a sliding log has room for and one more: the server takes
them all only if the window is fixed. Fixed, each window after is taken whole as it begins
(doubling from one send, so a limit that dropped refuses one round's excess, not the window's
worth); sliding, the probe cost one refusal.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kimi_extract.http.pacing import SendLog
from kimi_extract.http.shown import FIXED_MARGIN_S, FixedProbe

from .virtual_gateway import Outcome, Shape, dumps, run

#: The window read again after the drop (from the least it holds: 22-25 of 25).
WINDOW_22_25 = re.compile(r"window of 2[2-5] requests per 10")


def matrix_run(kind: str) -> tuple[Outcome, str]:
    """The matrix's 200 rows behind 50 per 10 s (``kind``), Retry-After, 429s back in 10 ms: the
    run (every row answered) and its summary."""
    shape = Shape(kind, per_minute=300, window_s=10)
    out = run(shape, rows=200, style="retry-after", refusal_s=0.01)
    assert out.ok == 200, dumps(out)
    return out, out.limiter.bound_by() or ""


def test_a_fixed_window_is_taken_whole_as_each_begins():
    # 50 per 10 s from the first request, Retry-After, 429s back in 10 ms. Kept to as a sliding
    # log, each window went at the opening's pace (0.84 s for 50) and 0.15 s later each round:
    # 200 rows in 32.4 s. Fixed, the third window's 50 go within 0.4 s of 20 s, the fourth's
    # within 0.5 s of 30 s.
    out, summary = matrix_run("fixed")
    assert summary.startswith("fixed window of 50 requests per 10"), summary
    assert out.gateway.sent(since=20.0, until=20.4) == 50, dumps(out)
    assert out.gateway.sent(since=30.0, until=30.5) == 50, dumps(out)
    assert out.end <= 31.6, dumps(out)
    assert out.gateway.refused() == 2, dumps(out)  # (the opening's, as before)


def test_a_sliding_log_costs_the_probe_one_refusal_and_shows_its_length():
    # The same limit as a sliding log: the probe's last send is refused (the opening's two
    # refusals, and this one), and the sends before it were taken: the window is 10 s long, not
    # 10.05 s as the stall read it, and counted a round trip or two longer (0.05 s), not 0.1 s
    # (each round 0.15 s later than the one before: 200 rows in 32.4 s); and with no pacer, the
    # last of each round no later than the log has room for it (with one, 32.17 s).
    out, summary = matrix_run("sliding")
    assert summary.startswith("window of 50 requests per 10 s ("), summary
    assert out.gateway.refused() == 3, dumps(out)
    assert out.end <= 32.0, dumps(out)


def test_the_probes_refused_row_goes_again_as_the_window_has_room():
    # 50 per 5 s sliding, answers in 0.3 s, 100 rows: two windows. The probe's refused row,
    # told to wait a second (Retry-After in whole seconds), waited it and was the last to
    # finish (6.4 s); the limiter keeps to the window, so the row goes again as it admits it.
    out = run(
        Shape("sliding", per_minute=600, window_s=5), rows=100, style="retry-after", latency_s=0.3
    )
    assert out.ok == 100 and out.gateway.refused() == 3, dumps(out)
    assert out.end <= 5.9, dumps(out)


def test_a_fixed_window_whose_limit_drops_refuses_a_round_not_the_window():
    # 50 per 10 s, halved to 25 at 30 s. Sent whole at once, the fourth window's 49 after its
    # first were 25 refused; doubling from one send (1, 2, 4, 8, 16), only the round that goes
    # past the 25 is refused in part (at most 8 here), and the window is kept to as a sliding
    # log from then on.
    shape = Shape("fixed", per_minute=300, window_s=10, change_at=30, change_to=150)
    out = run(shape, rows=200, style="retry-after", refusal_s=0.01)
    assert out.ok == 200 and not out.lost, dumps(out)
    assert out.gateway.refused(since=30.0, until=31.0) <= 8, dumps(out)
    assert out.gateway.refused() <= 10, dumps(out)
    summary = out.limiter.bound_by() or ""
    assert WINDOW_22_25.match(summary) and not out.limiter.limits["rpm"].fixed, summary


@settings(max_examples=60, deadline=None)
@given(
    window=st.sampled_from([5.0, 10.0, 30.0, 60.0]),
    count=st.integers(20, 120),
    latency=st.sampled_from([0.3, 1.0, 3.0]),
    refusal=st.sampled_from([0.0, 0.01, 0.05]),
)
def test_a_sliding_log_is_never_read_as_fixed(window, count, latency, refusal):
    # Read as fixed, a sliding log would be sent a window's worth at once as each fixed window
    # began, and refuse most of it. Whatever its length (a usual one), count, answer time and
    # 429 round trip: never read as fixed, and no row lost. (What the probe costs a sliding log
    # is asserted on the matrix's shapes above and in test_limits_shown.py: one refusal.)
    per_minute = round(count * 60 / window)
    shape = Shape("sliding", per_minute=per_minute, window_s=window)
    kw: dict[str, Any] = {"style": "retry-after", "latency_s": latency, "refusal_s": refusal}
    out = run(shape, rows=3 * count, **kw)
    assert out.ok == 3 * count and not out.lost, dumps(out)
    assert not out.limiter.limits["rpm"].fixed, dumps(out)
    assert not (out.limiter.bound_by() or "").startswith("fixed"), dumps(out)


@settings(max_examples=40, deadline=None)
@given(
    window=st.sampled_from([5.0, 10.0, 30.0, 60.0]),
    count=st.integers(20, 90),
    latency=st.sampled_from([0.3, 1.0]),
    refusal=st.sampled_from([0.0, 0.01]),
)
def test_a_sliding_log_the_probe_found_is_sent_as_it_has_room(window, count, latency, refusal):
    # The probe saw the whole count taken, and one past it refused: from the third window on,
    # each send goes as the one ``count`` before it leaves the log (its length and the margin,
    # 0.05 s, later), the last of each round too. With 90 % of the count at once from the pacer,
    # the last tenth of each round waited for it to refill (0.19 s for the last of 50 per 10 s),
    # and each round after it began that much later. (Rows from the fourth window on: enough for
    # every slot; answers within a window, so no worker waits on one.)
    per_minute = round(count * 60 / window)
    shape = Shape("sliding", per_minute=per_minute, window_s=window)
    out = run(shape, rows=4 * count, latency_s=latency, style="retry-after", refusal_s=refusal)
    assert out.ok == 4 * count and not out.lost, dumps(out)
    assert out.limiter.limits["rpm"].fixed is False, dumps(out)
    taken = sorted(out.gateway.accepted_times())
    late = [
        (round(taken[i - count], 3), round(taken[i], 3))
        for i in range(2 * count, len(taken))
        if taken[i] > taken[i - count] + window + 0.05 + 1e-3
    ]
    assert not late, (late, dumps(out))


@settings(max_examples=40, deadline=None)
@given(
    window=st.sampled_from([5.0, 10.0, 30.0, 60.0]),
    count=st.integers(20, 120),
    refusal=st.sampled_from([0.0, 0.01]),
)
def test_a_fixed_window_is_read_as_fixed(window, count, refusal):
    # The same, fixed from the first request: read as fixed, and each window after the probe's
    # goes within 1.5 s of its start (doubling from one send, each round once the last is
    # judged). (With 429s slower to come back than the opening took to send a window's worth,
    # the probe's sends are judged after the first window's have left any trailing window it
    # can be: the window is not known to be fixed, and is kept to as a sliding log.)
    per_minute = round(count * 60 / window)
    shape = Shape("fixed", per_minute=per_minute, window_s=window)
    out = run(shape, rows=3 * count, style="retry-after", refusal_s=refusal)
    assert out.ok == 3 * count and not out.lost, dumps(out)
    assert out.limiter.limits["rpm"].fixed, dumps(out)
    assert out.gateway.sent(since=2 * window, until=2 * window + 1.5) >= count - 1, dumps(out)


def test_the_log_counts_a_fixed_window_from_where_it_begins():
    log = SendLog()
    for t in (0.0, 4.0, 9.9):
        log.add(t, 1.0)
    log.set_length(log.requests, 10.0, 10.0, fixed_from=10.0)
    assert log.requests.total == 0  # (a fixed window begun at 10 s holds none of them)
    for _ in range(3):
        log.add(10.5, 1.0)
    log.expire(12.0)
    assert log.requests.total == 3
    assert log.requests.wait(12.0, 1.0, 3.0) == pytest.approx(8.0)  # (at 20 s it refills whole)
    log.expire(20.0)
    assert log.requests.total == 0 and log.requests.wait(20.0, 1.0, 3.0) == 0.0
    log.set_length(log.requests, 10.1, 20.0)  # (back to a trailing window)
    assert log.requests.fixed_from is None and log.requests.total == 3


def test_the_probe_sends_one_past_a_sliding_logs_room_and_reads_what_came_back():
    # 10 sends at 0.0 .. 0.9 s; a window of 10 at least 10 s long; at 10.35 s a sliding log has
    # room for the four sent up to 0.3 s: the probe sends five.
    def probe_at_10_35() -> tuple[SendLog, FixedProbe]:
        log = SendLog()
        for i in range(10):
            log.add(i / 10, 1.0)
        probe = FixedProbe(origin=10.05, least=10.0)
        probe.round(log, 10.35, 10, probe.least)
        assert probe.left == 5
        for _ in range(5):
            probe.took(log.add(10.35, 1.0))
        return log, probe

    # All taken: the server held 11 of ours over 10 s, but only 10 over 9.95 s (10 less the
    # margin): a second round makes up the margin, as many as a window of 9.95 s has room for
    # at 10.5 s (those up to 0.55 s have left it: one) and one more.
    log, probe = probe_at_10_35()
    while probe.out:
        probe.judge(log, 10.5, 10)
    assert probe.verdict is None and probe.left == 2
    for _ in range(2):
        probe.took(log.add(10.5, 1.0))
    while probe.out:
        probe.judge(log, 10.6, 10)
    assert probe.verdict is True  # (11 of ours over 9.95 s: fixed)
    # One refused -> sliding; the others, judged after, change nothing.
    log, probe = probe_at_10_35()
    log.refuse(probe.out[-1])
    assert probe.refused(probe.out[-1]) and probe.verdict is False
    while probe.out:
        probe.judge(log, 10.5, 10)
    assert probe.verdict is False and probe.left == 0
    assert FIXED_MARGIN_S == 0.05
