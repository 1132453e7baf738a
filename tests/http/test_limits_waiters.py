"""Waiters behind the limiter wait as cohorts (``Limiter._wait_turn``), on the virtual clock.

A hundred rows held by a pacer used to sleep each for itself: at every send all of them woke,
checked, one went, and the rest slept again, about 46 checks for each send (a 50/s bucket with
100 workers, 2,000 rows). Waiters that would check at the same moment for the same request get
the same answer, so one sleeps and the rest park behind it. The runs must not change: the same
sends at the same moments, refused alike, as when every waiter checks for itself.
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kimi_extract.http import limiter as limiter_module
from kimi_extract.http.limiter import Limiter

from .virtual_gateway import Shape, VirtualTime, dumps, run


def counted_checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count every check of the limiter's gate (``_wait_needed``) from now on."""
    calls = [0]
    check = Limiter._wait_needed

    def counting(self: Limiter, tokens: int) -> tuple[float, str]:
        calls[0] += 1
        return check(self, tokens)

    monkeypatch.setattr(Limiter, "_wait_needed", counting)
    return calls


@pytest.mark.parametrize("told", [True, False])
def test_waiters_behind_a_pacer_check_about_once_for_each_send(monkeypatch, told):
    # 100 workers, 1,000 rows behind 50/s: told (a pacer from the start) or learned from Kimi's
    # 429 (a token bucket of 100). A row is checked as it comes, when its turn comes, and once
    # when it is next in line and must wait: 2,995 checks told, 2,784 learned (each waiter
    # checking for itself: 51,750 and 41,780).
    calls = counted_checks(monkeypatch)
    limits = {"rpm": 3000} if told else {}
    out = run(Shape("bucket", per_minute=3000, burst=100), rows=1000, style="kimi", **limits)
    assert out.ok == 1000 and not out.lost, dumps(out)
    sends = len(out.gateway.attempts)
    assert calls[0] <= 4 * sends, (calls[0], sends)


#: Shapes as keyword arguments (a ``Shape`` keeps the server's state: each run makes its own).
SHAPES = st.one_of(
    st.fixed_dictionaries(
        {
            "kind": st.sampled_from(["fixed", "sliding"]),
            "per_minute": st.sampled_from([300, 600, 3000]),
            "window_s": st.sampled_from([10.0, 60.0]),
        }
    ),
    st.fixed_dictionaries(
        {
            "kind": st.just("bucket"),
            "per_minute": st.sampled_from([60, 300, 3000]),
            "burst": st.sampled_from([5, 10, 100]),
        }
    ),
    st.fixed_dictionaries(
        {
            "kind": st.just("concurrency"),
            "concurrency": st.sampled_from([5, 20]),
            "random_share": st.sampled_from([0.0, 0.05]),
        }
    ),
    st.fixed_dictionaries(
        {
            "kind": st.just("sliding"),
            "per_minute": st.sampled_from([25_200, 60_000]),
            "unit": st.just("tokens"),
            "window_s": st.just(10.0),
        }
    ),
    st.just(
        {
            "kind": "sliding",
            "per_minute": 600,
            "window_s": 10.0,
            "change_at": 30.0,
            "change_to": 300,
        }
    ),
)


def account(out) -> tuple:
    """All a run did that the waiting could change: each attempt's moment and verdict, the
    rows, when it ended, and what the summary says bound it."""
    attempts = [(a.at, a.refused) for a in out.gateway.attempts]
    return attempts, out.ok, len(out.lost), out.end, out.limiter.bound_by()


#: How far apart the same send's moments may be: a cohort wakes at its sleeper's moment, which
#: is its own to the microsecond (``Limiter._wait_turn`` rounds it), and sends paced from those
#: moments carry the difference on (4 us by the end of 150 rows behind a 1/s bucket).
SAME_MOMENT_S = 1e-4


def same_run(a: tuple, b: tuple) -> bool:
    """Two ``account``s alike: the same verdicts, rows, losses and summary, and each moment
    within ``SAME_MOMENT_S``."""
    (moments_a, *rest_a), (moments_b, *rest_b) = a, b
    if [r for _, r in moments_a] != [r for _, r in moments_b] or rest_a[:2] != rest_b[:2]:
        return False
    if abs(rest_a[2] - rest_b[2]) > SAME_MOMENT_S or rest_a[3] != rest_b[3]:
        return False
    pairs = zip(moments_a, moments_b, strict=True)
    return all(abs(x - y) <= SAME_MOMENT_S for (x, _), (y, _) in pairs)


@settings(max_examples=25, deadline=None)
@given(
    shape=SHAPES,
    style=st.sampled_from(["kimi", "retry-after", "bare"]),
    latency=st.sampled_from([0.3, 1.0, 8.0]),
    refusal=st.sampled_from([0.0, 0.01]),
    told=st.sampled_from([None, 600]),
    seed=st.integers(0, 3),
)
def test_cohorts_send_exactly_as_waiters_checking_each_for_itself(
    shape, style, latency, refusal, told, seed
):
    limits = {"rpm": told} if told else {}

    def once(cohorts: bool) -> tuple:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(limiter_module, "COHORTS", cohorts)
            out = run(
                Shape(**shape),
                rows=150,
                style=style,
                latency_s=latency,
                refusal_s=refusal,
                seed=seed,
                **limits,
            )
        return account(out)

    cohorts, each = once(True), once(False)
    assert same_run(cohorts, each), (cohorts, each)


async def settle(vt: VirtualTime) -> None:
    """Run every task until none is due and no sleeper is left (a stranded waiter stays)."""
    while True:
        await vt.run_due()
        if not vt._heap:
            return
        vt.time = vt._heap[0][0]


async def sends_behind_a_told_rpm(limiter: Limiter, vt: VirtualTime, sent: list[float]) -> None:
    permit = await limiter.acquire(1)
    sent.append(vt.now())
    limiter.release(permit, 1)


async def waiting(
    waiters: int,
) -> tuple[VirtualTime, Limiter, list[float], list[asyncio.Task[None]]]:
    """A limiter told rpm 60 (about one send a second) that has just sent one, and ``waiters``
    tasks waiting to send, one asleep for them all; ``sent``: when each went."""
    vt = VirtualTime()
    limiter = Limiter(concurrency=10, rpm=60, clock=vt)
    sent: list[float] = []
    await sends_behind_a_told_rpm(limiter, vt, sent)
    tasks = [
        asyncio.create_task(sends_behind_a_told_rpm(limiter, vt, sent)) for _ in range(waiters)
    ]
    await vt.run_due()
    return vt, limiter, sent, tasks


async def test_a_cancelled_sleeper_leaves_its_cohort_to_go_in_turn():
    # The one asleep for five waiters is cancelled: the other four still go, in turn.
    vt, limiter, sent, tasks = await waiting(5)
    assert [len(c) for c in limiter._cohorts.values()] == [4]
    tasks[0].cancel()
    await settle(vt)
    assert tasks[0].cancelled() and all(t.done() for t in tasks), tasks
    gaps = [b - a for a, b in zip(sent, sent[1:], strict=False)]
    assert len(sent) == 5 and min(gaps) >= 1.0, sent


async def test_a_waiter_cancelled_as_its_turn_comes_hands_the_turn_on(monkeypatch):
    vt, limiter, sent, tasks = await waiting(4)
    # When the sleeper goes, it hands its turn to the next, cancelled before it runs.
    hand_on = Limiter._hand_on
    cancelled: list[asyncio.Task] = []

    def cancel_the_next(cohort) -> None:
        waiting = list(cohort)
        hand_on(cohort)
        handed = [p for p in waiting if p.handed is not None]
        if handed and not cancelled:
            (task,) = [t for t in tasks if t._fut_waiter is handed[0].future]
            task.cancel()
            cancelled.append(task)

    monkeypatch.setattr(Limiter, "_hand_on", staticmethod(cancel_the_next))
    await settle(vt)
    assert len(cancelled) == 1 and cancelled[0].cancelled(), cancelled
    assert all(t.done() for t in tasks) and len(sent) == 4, (tasks, sent)
