"""The limiter on a simulated clock: no 60 s window over RPM/TPM, concurrency never exceeded,
adaptive cut and recovery, limits learned from Kimi's 429 messages."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import random
import re
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

import kimi_extract as kx
from kimi_extract.http.limiter import (
    BETA,
    LEFTOVER_WAIT_S,
    PACING_SHARE,
    Limiter,
    limits_in_message,
)
from kimi_extract.testing import VirtualClock


def on_virtual_clock(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test on a ``VirtualClock``'s own event loop (``kimi_extract.testing``), the
    clock passed as its first argument: waits take no real time, and the clock jumps to the next
    wake-up only once every task is waiting."""

    def run(*args: Any, **kwargs: Any) -> None:
        clock = VirtualClock()
        clock.run(test(clock, *args, **kwargs))

    signature = inspect.signature(test)
    run.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=list(signature.parameters.values())[1:]
    )
    run.__name__, run.__qualname__, run.__doc__ = test.__name__, test.__qualname__, test.__doc__
    return run


async def run_workers(
    limiter: Limiter, vt: VirtualClock, *, workers: int, requests: int, seed: int
):
    rng = random.Random(seed)
    sends: list[tuple[float, int]] = []
    in_flight = 0
    peak = 0
    counter = itertools.count()

    async def worker() -> None:
        nonlocal in_flight, peak
        while next(counter) < requests:
            prompt = rng.randint(100, 3000)
            estimate = limiter.estimate(prompt)
            permit = await limiter.acquire(estimate)
            in_flight += 1
            peak = max(peak, in_flight)
            actual = max(1, estimate - rng.randint(0, 200))  # the estimate is an upper bound here
            sends.append((vt.time, actual))
            await vt.sleep(rng.uniform(0.2, 4.0))
            in_flight -= 1
            limiter.release(permit, actual)
            limiter.succeeded()

    tasks = [asyncio.create_task(worker()) for _ in range(workers)]
    await asyncio.gather(*tasks)
    return sends, peak


def max_window(sends: list[tuple[float, int]], *, tokens: bool) -> float:
    """The largest count (or token sum) of sends in any 60-second window."""
    times = sorted(sends)
    best, start, total = 0.0, 0, 0.0
    for end, (t_end, amount) in enumerate(times):
        total += amount if tokens else 1
        while times[start][0] <= t_end - 60.0:
            total -= times[start][1] if tokens else 1
            start += 1
        best = max(best, total)
        del end
    return best


@pytest.mark.parametrize("seed", [1, 2, 3])
@on_virtual_clock
async def test_rpm_tpm_and_concurrency_never_exceeded(vt, seed):
    limiter = Limiter(concurrency=40, rpm=300, tpm=400_000, clock=vt)
    sends, peak = await run_workers(limiter, vt, workers=120, requests=1000, seed=seed)
    assert len(sends) == 1000
    assert peak <= 40
    assert max_window(sends, tokens=False) <= 300
    assert max_window(sends, tokens=True) <= 400_000
    # ...and the limits are used, not just respected: the run takes little longer than the
    # binding limit needs (requests / RPM or tokens / TPM), plus one window of slack.
    needed_min = max(len(sends) / 300, sum(t for _, t in sends) / 400_000)
    assert vt.time <= needed_min * 60 * 1.1 + 60


@on_virtual_clock
async def test_sends_are_paced_not_bursted(vt):
    limiter = Limiter(concurrency=100, rpm=600, adaptive=False, clock=vt)
    sends, _ = await run_workers(limiter, vt, workers=100, requests=200, seed=0)
    first_second = [t for t, _ in sends if t < 1.0]
    assert len(first_second) <= 11  # 600/min = 10/s (+1 for the bucket's first token)


async def test_slow_start_doubles_each_round_trip_until_the_limit():
    limiter = Limiter(concurrency=200)
    assert limiter.concurrency == 8
    for expected in (16, 32, 64, 128, 200, 200):
        for _ in range(limiter.concurrency):  # one round trip: every slot answered once
            limiter.succeeded()
        assert limiter.concurrency == expected


@on_virtual_clock
async def test_slow_start_also_grows_with_time_when_answers_are_slow(vt):
    # 1 s answers: growth by answers alone would hold the first second to the opening 8 slots.
    limiter = Limiter(concurrency=500, clock=vt)
    sent: list[float] = []

    async def one() -> None:
        permit = await limiter.acquire(10)
        sent.append(vt.time)
        await vt.sleep(1.0)
        limiter.release(permit, 10)
        limiter.succeeded()

    tasks = [asyncio.create_task(one()) for _ in range(500)]
    await asyncio.gather(*tasks)
    assert len(sent) == 500
    assert max(sent) <= 0.35  # 8 doubling every 50 ms passes 500 at 0.3 s
    assert sorted(sent)[100] > 0.0  # ...and it did not open with a burst of all 500


@on_virtual_clock
async def test_adaptive_cut_and_cubic_recovery(vt):
    limiter = Limiter(concurrency=50, rpm=6000, clock=vt)
    vt.time = 10.0
    limiter.rate = 40.0
    for _ in range(100):  # unnamed 429s that are most of what comes back: an overload
        limiter.throttled(None, "The engine is currently overloaded, please try again later")
    assert limiter.rate == pytest.approx(40.0 * BETA)  # one cut for the burst of them
    assert limiter.send_rate() == pytest.approx(28.0)
    rates = []
    for step in range(1, 40):
        vt.time = 10.0 + step * 0.5
        limiter.succeeded()
        rates.append(limiter.rate if limiter.rate is not None else 100.0)
    assert all(b >= a - 1e-9 for a, b in zip(rates, rates[1:], strict=False))  # never drops
    assert rates[-1] > 40.0  # recovered past the old maximum (then stops adapting at the RPM)


@on_virtual_clock
async def test_random_unnamed_429s_cut_nothing(vt):
    limiter = Limiter(concurrency=50, clock=vt)
    rng = random.Random(3)
    for step in range(5000):  # 30 % of answers refused, at random, for 50 s
        vt.time = step * 0.01
        if rng.random() < 0.3:
            limiter.throttled(1.0, "The engine is currently overloaded, please try again later")
        else:
            limiter.succeeded()
    assert limiter.rate is None and limiter.pause_until == 0.0


@on_virtual_clock
async def test_a_429_naming_a_limit_we_are_clearly_below_slows_nothing(vt):
    limiter = Limiter(concurrency=50, rpm=6000, clock=vt)
    for _ in range(40):  # 20 requests/s for 2 s: a third of 6000 RPM
        permit = await limiter.acquire(10)
        limiter.release(permit, 10)
        vt.time += 0.05
    limiter.throttled(1.0, "reached organization max RPM: 6000, please try again after 1 seconds")
    assert limiter.rate is None and limiter.pause_until == 0.0 and limiter.rpm == 6000


@on_virtual_clock
async def test_a_named_rpm_is_adopted_and_paced_then_its_leftover_pauses_then_it_cuts(vt):
    limiter = Limiter(concurrency=100, clock=vt)
    message = "reached organization max RPM: 3000, please try again after 4 seconds"
    for _ in range(100):  # a burst far above 50/s
        limiter.release(await limiter.acquire(10), 10)
        vt.time += 0.001
    limiter.throttled(4.0, message)
    # Our own burst explains it: adopt the limit and pace at it, nobody else waits.
    assert limiter.rpm == 3000 and limiter.pause_until == 0.0 and limiter.rate is None
    assert limiter.send_rate() == pytest.approx(3000 * PACING_SHARE / 60)
    start = vt.time
    times = []

    async def send() -> None:
        limiter.release(await limiter.acquire(10), 10)
        times.append(vt.time)

    await asyncio.gather(*[asyncio.create_task(send()) for _ in range(50)])
    assert max(times) - start >= 49 / (50 * PACING_SHARE) - 1e-6  # 50 sends paced at 49.5/s
    # Refused again while we keep the limit, within a window of adopting it: the server still
    # counts our earlier burst. Everyone waits the stated time; nothing is cut.
    limiter.throttled(4.0, message)
    assert limiter.pause_until == pytest.approx(vt.time + 4.0) and limiter.rate is None
    vt.time += 4.0
    limiter.throttled(1.0, message)  # "1 seconds": Kimi's rounding of any shorter wait
    assert limiter.pause_until == pytest.approx(vt.time + LEFTOVER_WAIT_S)
    # Refused while keeping it for more than a window: someone else uses the quota. Cut.
    vt.time += 61.0
    await asyncio.gather(*[asyncio.create_task(send()) for _ in range(100)])
    limiter.throttled(1.0, message)
    assert limiter.rate is not None and limiter.rate < 50
    assert limiter.bound_by() is not None


@on_virtual_clock
async def test_told_tpm_is_paced_not_front_loaded(vt):
    limiter = Limiter(concurrency=100, tpm=60_000, adaptive=False, clock=vt)
    sends, _ = await run_workers(limiter, vt, workers=100, requests=100, seed=4)
    early = sum(tokens for t, tokens in sends if t < 5.0)
    assert early <= 5 * 1000 + 3500  # 1,000 tokens/s, plus one request's worth of burst
    assert limiter.bound_by() is not None and limiter.bound_by().startswith("TPM 60,000")


@on_virtual_clock
async def test_server_wait_pauses_every_sender(vt):
    limiter = Limiter(concurrency=10, adaptive=False, clock=vt)
    limiter.throttled(2.5, "please try again after 2.5 seconds")
    times: list[float] = []

    async def send() -> None:
        permit = await limiter.acquire(10)
        times.append(vt.time)
        limiter.release(permit, 10)

    tasks = [asyncio.create_task(send()) for _ in range(5)]
    await asyncio.gather(*tasks)
    assert min(times) >= 2.5


def test_limits_learned_from_kimi_messages():
    assert limits_in_message(
        "Your account org-x request reached organization max concurrency: 50, please try again "
        "after 1 seconds"
    ) == {"concurrency": 50}
    assert limits_in_message("... reached organization max RPM: 3000, please ...") == {"rpm": 3000}
    assert limits_in_message("... max TPM: 2000000 ...") == {"tpm": 2_000_000}
    limiter = Limiter(concurrency=100)
    limiter.throttled(1.0, "request reached organization max concurrency: 50, try again after 1 s")
    assert limiter.max_concurrency == 50
    limiter.throttled(1.0, "reached organization max RPM: 3000, please try again after 1 seconds")
    assert limiter.rpm == 3000
    assert limiter.pause_until == 0.0  # adopting a limit pauses no one


@on_virtual_clock
async def test_a_429_explained_by_our_own_concurrency_only_adopts_the_limit(vt):
    limiter = Limiter(concurrency=100, adaptive=True, clock=vt)
    limiter.window_allowed = 100
    permits = [await limiter.acquire(10) for _ in range(60)]
    message = "reached organization max concurrency: 50, please try again after 1 seconds"
    limiter.throttled(1.0, message)
    # 60 in flight > 50: our excess explains it. Adopt 50; no pause, no rate cut.
    assert limiter.concurrency == 50 and limiter.pause_until == 0.0 and limiter.rate is None
    for permit in permits[:20]:
        limiter.release(permit, 10)
    # 40 in flight <= 50: someone else uses the org's slots too, so slow down and pause.
    limiter.throttled(1.0, message)
    assert limiter.pause_until == vt.time + 1.0 and limiter.rate is not None
    for permit in permits[20:]:
        limiter.release(permit, 10)


def test_the_run_summary_names_the_limit_learned_from_kimis_429s():
    from kimi_extract.cli import summary_table
    from kimi_extract.simulator import Simulator

    from ..conftest import Review

    with Simulator(max_concurrency=3, ttft_s=0.05) as sim:
        ex = kx.Extractor(
            Review, base_url=sim.base_url, api_key=sim.api_key, concurrency=10, progress=False
        )
        out = ex.run([f"review {i}: fine" for i in range(40)])
    assert out["kx_error"].isna().all()
    report = ex.last_run
    assert report is not None and report.bound_by is not None
    assert report.bound_by.startswith("concurrency 3 (learned from a 429): ")
    assert "; bound by concurrency 3 (learned from a 429): " in report.summary()
    assert re.search(r"^bound by +concurrency 3 \(learned", summary_table(report), re.M)


@on_virtual_clock
async def test_the_progress_bar_says_which_limit_binds(vt):
    from kimi_extract.run.scheduler import Progress

    limiter = Limiter(concurrency=100, rpm=600, adaptive=False, clock=vt)
    await run_workers(limiter, vt, workers=100, requests=50, seed=0)
    postfix = Progress(None, enabled=False, limiter=limiter).postfix()
    assert "bound=RPM 600" in postfix
    assert limiter.bound_by() is not None and limiter.bound_by().startswith("RPM 600: ")
