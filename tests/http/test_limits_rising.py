"""A limit that rises mid-run, on a virtual clock (``Limit.rising``, ``Limiter``'s scan up).

A limit named in a 429 or shown by a stall was kept for the rest of the run: nothing sent past
it, so a tier that rose (Kimi's rise with top-ups) was never used. A sliding 10 s window going
from 300 to 600 a minute at 30 s, 1,000 rows of 1 s answers: 50 per 10 s to the end (193-195 s,
whatever the 429s said). Held by such a limit for ``UP_AFTER_S`` (120 s), the limiter now scans
past it, a send at a time, until the server refuses one (a 429 naming more is taken as the
limit). A rise it finds is undone by the first refusal of a send made since, within two of the
limit's windows: a fixed window's refill looks like room to a trailing log. A scan that finds
none waits twice as long before the next.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kimi_extract.http.named import UP_AFTER_S, UP_MAX_S, UP_SENDS, Limit

from .virtual_gateway import Shape, dumps, run


def _sends(out, start: float, end: float) -> int:
    return sum(1 for a in out.gateway.attempts if start <= a.at < end and not a.refused)


@pytest.mark.parametrize(
    ("kind", "style"),
    [
        ("sliding", "kimi"),
        ("fixed", "kimi"),
        ("sliding", "retry-after"),
        ("sliding", "bare"),
        ("fixed", "bare"),
    ],
)
def test_a_limit_that_rises_mid_run_is_found_and_used(kind, style):
    shape = Shape(kind, per_minute=300, window_s=10, change_at=30.0, change_to=600)
    out = run(shape, rows=1000, style=style)
    assert out.ok == 1000, dumps(out)
    # Kept at 50 per 10 s, the run took 193-195 s; the scan goes at 120-130 s.
    assert out.end <= 170, dumps(out)
    assert _sends(out, 140, 150) >= 95, dumps(out)
    assert out.gateway.refused() <= 9, dumps(out)


@pytest.mark.parametrize(
    ("change_to", "style", "says"),
    [
        (600, "kimi", "RPM 600 (a 429 named 300; room found past it, counted in 10 s)"),
        (450, "kimi", "RPM 450 (learned from a 429 naming it, counted in 10 s)"),
        (600, "bare", "window of 100 requests per 10.1 s (shown by a stall"),
    ],
)
def test_the_summary_says_what_the_limit_rose_to_and_how_it_was_found(change_to, style, says):
    # Twice the named 300 taken past it (no 429 named 600: the run never went past it); a rise
    # to 450, past which twice it was refused with Kimi's text naming 450; a window shown by a
    # stall, scanned up to what it holds.
    shape = Shape("sliding", per_minute=300, window_s=10, change_at=30.0, change_to=change_to)
    out = run(shape, rows=1200, style=style)
    assert out.ok == 1200, dumps(out)
    assert says in (out.limiter.bound_by() or ""), dumps(out)


@settings(max_examples=12, deadline=None)
@given(
    kind=st.sampled_from(["fixed", "sliding"]),
    style=st.sampled_from(["kimi", "retry-after", "bare"]),
    per_minute=st.integers(120, 600),
    factor=st.floats(1.3, 3.0),
    change_at=st.floats(15.0, 100.0),
    latency_s=st.sampled_from([0.3, 1.0, 3.0]),
)
def test_a_risen_limit_is_used_within_a_few_windows_of_the_scan(
    kind, style, per_minute, factor, change_at, latency_s
):
    # Any rise after the limit was read and before the first scan (read within the first
    # 10-12 s, scanned 120 s later; a rise during the opening's stall, 5 s in, had the probe
    # of a sliding window with ``Retry-After`` read it as fixed: not scanned, not found):
    # from 150 s on, the server takes at least 90 % of the new limit in each 10 s window (of
    # twice the old one at most: one scan goes that far, and the next is 120 s later).
    new = round(per_minute * factor)
    shape = Shape(kind, per_minute=per_minute, window_s=10, change_at=change_at, change_to=new)
    rows = round(per_minute / 60 * 150 + new / 60 * 50)
    out = run(shape, rows=rows, style=style, latency_s=latency_s)
    assert out.ok == rows, dumps(out)
    count = per_minute // 6  # the old limit, kept to throughout: a window of 10.1 s at most
    old_end = (rows - count) / (count / 10.1)
    assert out.end <= 1.02 * old_end + 12, dumps(out)
    if kind == "fixed" and style != "kimi":
        # Not found: a fixed window a probe found (``Retry-After``) is not scanned, and one
        # seen only as a trailing window (bare 429s) shows up to twice its count as room as it
        # refills: the scan reads more than a rise of less than that, and the refusal that
        # follows undoes it.
        return
    found = min(new, 2 * per_minute)
    for start in range(150, int(out.end - latency_s) - 10, 10):
        assert _sends(out, start, start + 10) >= 0.9 * found / 6, (start, dumps(out))


@pytest.mark.parametrize("style", ["kimi", "retry-after", "bare"])
@pytest.mark.parametrize(
    ("kind", "per_minute", "window_s"),
    [("fixed", 300, 10), ("sliding", 300, 10), ("fixed", 120, 60), ("sliding", 120, 60)],
)
def test_a_limit_that_does_not_rise_costs_a_scan_two_refusals_at_most(
    kind, per_minute, window_s, style
):
    # 1,600 rows at 50 per 10 s (or 2 a second in 60 s windows) take 320-800 s: scans at 120 s,
    # then 240 s and 480 s after (each found no room). Each costs the send past the limit, and
    # a rise it misread in a fixed window (its refill) the first send past that.
    rows = 1600 if window_s == 10 else 1000
    out = run(Shape(kind, per_minute=per_minute, window_s=window_s), rows=rows, style=style)
    assert out.ok == rows, dumps(out)
    late = [a.at for a in out.gateway.attempts if a.refused and a.at > 2 * window_s + 40]
    scans = sum(1 for at in (120.0, 360.0, 840.0) if at < out.end)
    assert len(late) <= 2 * scans, (late, dumps(out))
    bound = (rows - per_minute * window_s / 60) / (per_minute / 60)
    assert out.end <= 1.02 * bound + window_s + 2, dumps(out)


def test_a_scan_that_finds_no_room_waits_twice_as_long_before_the_next():
    limit = Limit("rpm", 300, source="learned")
    limit.up_at = 120.0
    assert not limit.rising(119.0) and limit.rising(120.0)
    limit.scanned(121.0, rose=False)
    assert limit.up_at == 121.0 + 2 * UP_AFTER_S
    limit.scanned(400.0, rose=False)
    assert limit.up_at == 400.0 + 4 * UP_AFTER_S
    for _ in range(10):
        limit.scanned(1000.0, rose=False)
    assert limit.up_every == UP_MAX_S
    limit.scanned(2000.0, rose=True)  # it may rise further: look again soon
    assert limit.up_at == 2000.0 + UP_AFTER_S


def test_a_slow_limit_is_scanned_past_on_the_clock_of_its_requests():
    # A scan costs a refusal or two. 5 a minute take UP_SENDS (100) in 20 minutes, not 2: its
    # scans go 10 times as far apart; 60 a minute take 120 in UP_AFTER_S, as before.
    assert UP_SENDS == 100
    slow = Limit("rpm", 5, source="shown")
    slow.up_at = 0.0
    slow.scanned(100.0, rose=False)  # (the next twice as long after: 240 s, times 10)
    assert slow.up_at == pytest.approx(100.0 + 2400.0)
    slow.scanned(3000.0, rose=True)
    assert slow.up_at == pytest.approx(3000.0 + 1200.0)
    usual = Limit("rpm", 60, source="shown")
    usual.scanned(100.0, rose=True)
    assert usual.up_at == 100.0 + UP_AFTER_S


@pytest.mark.parametrize(
    ("source", "how", "fixed", "rises"),
    [
        ("learned", "burst", None, True),
        ("shown", "stall", False, True),
        ("set", "", None, False),  # told: the user's limit is kept to
        ("shown", "stall", True, False),  # fixed: its refill looks like room
        ("learned", "bucket", None, False),  # a bucket: its pacer holds it
    ],
)
def test_only_a_limit_named_or_shown_in_a_trailing_window_is_scanned_past(
    source, how, fixed, rises
):
    limit = Limit("rpm", 300, source=source, how=how, fixed=fixed, up_at=0.0)
    assert limit.rising(1.0) is rises
    assert not Limit("tpm", 60_000, source="learned", up_at=0.0).rising(1.0)


def test_a_rise_on_trial_holds_back_only_the_sends_past_the_value_before_it():
    # A window shown by bare 429s a round trip late (0.2 s) rose from 277 to 600 a minute; the
    # scan past it found room again and again, widening it each time (454, 460, 472, ...).
    # While each rise was on trial, the sends past what the window held before it went one at
    # a time, each judged before the next: past the value before the first rise (275), not the
    # last, so most of each window went one by one (232.55 s; now 219.95 s, as many refused).
    shape = Shape("fixed", per_minute=277, window_s=10, change_at=72.97, change_to=600)
    out = run(shape, rows=1192, style="bare", latency_s=0.3, refusal_s=0.2)
    assert out.ok == 1192, dumps(out)
    assert out.end < 225.0 and out.gateway.refused() <= 78, dumps(out)
