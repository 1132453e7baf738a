"""Dask: one RPM/TPM quota for the whole cluster, kept by the rate service on the scheduler.

The service's counting runs on a virtual clock (adversarial send delays, no real waits); the
cluster tests run a LocalCluster against a simulator with a 2-second window (limits per minute,
as the simulator's ``window_s``), and check the server-side arrival log: no window ever holds
more than the quota, and a partition running alone uses the whole quota, not a slot's share.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pytest

import kimi_extract as kx
from kimi_extract.simulator import Simulator
from kimi_extract.testing import VirtualClock

from ..conftest import Review, chat_requests

distributed = pytest.importorskip("distributed")
dd = pytest.importorskip("dask.dataframe")
cluster = pytest.importorskip("kimi_extract.cluster")
cluster_rate = pytest.importorskip("kimi_extract.cluster_rate")
kxd = pytest.importorskip("kimi_extract.dask")
dask = pytest.importorskip("dask")


def most_in_any_window(times: list[float], window: float) -> int:
    """The largest count of ``times`` in any interval ``(t - window, t]`` (a sliding window)."""
    ordered = sorted(times)
    best = start = 0
    for end, t in enumerate(ordered):
        while ordered[start] <= t - window:
            start += 1
        best = max(best, end - start + 1)
    return best


def quota(**options: Any) -> Any:
    values: dict[str, Any] = {
        "token": "run",
        "concurrency": 10,
        "rpm": 600,
        "tpm": None,
        "window_s": 6.0,
        "grant_ttl_s": 0.5,
        "arrival_slack_s": 1.0,
    }
    return cluster.ClusterLimits(**{**values, **options})


# -- the service, on a virtual clock ---------------------------------------------------------


@pytest.mark.parametrize("paced", [True, False])
async def test_no_window_at_the_server_exceeds_the_quota(
    monkeypatch: pytest.MonkeyPatch, paced: bool
) -> None:
    """Each permit reaches the server up to ttl + slack after its grant, at the worst moment; the
    held log keeps every server window within the quota, with or without the pace."""
    if not paced:  # a burst as large as the quota: only the held log limits the grants
        monkeypatch.setattr(cluster_rate, "BURST_S", 1e6)
    clock = VirtualClock()
    service = cluster_rate.RateService(clock)
    limits = quota()
    late = limits.grant_ttl_s + limits.arrival_slack_s
    rng = random.Random(7)
    arrivals: list[float] = []
    while clock.time < 120:
        asked = [1] * rng.randint(1, 30)
        reply = await service.grant(name="run", spec=limits.spec(), tokens=asked)
        assert 0 <= reply["granted"] <= len(asked)
        for _ in range(reply["granted"]):
            arrivals.append(clock.time + rng.choice([0.0, late, rng.uniform(0.0, late)]))
        clock.advance(rng.choice([0.0, 0.01, 0.1]) if reply["granted"] else 0.05)
    cap = 600 * 6 // 60
    assert most_in_any_window(arrivals, limits.window_s) <= cap
    # ...and the quota is used: what the held log allows over the run, less the pace's share.
    assert len(arrivals) >= 0.95 * cap * 120 / limits.hold_s


async def test_the_pace_spreads_permits_evenly() -> None:
    clock = VirtualClock()
    service = cluster_rate.RateService(clock)
    limits = quota(rpm=3000)  # 50/s; a window holds 300
    grants: list[float] = []
    while clock.time < 30:
        reply = await service.grant(name="run", spec=limits.spec(), tokens=[1] * 50)
        grants += [clock.time] * reply["granted"]
    rate = cluster_rate.PACE_SHARE * 300 / limits.hold_s
    assert most_in_any_window(grants, 1.0) <= rate + max(1, rate * cluster_rate.BURST_S) + 1
    assert len(grants) >= rate * 30 - 2


def test_tokens_are_reserved_and_settled_to_the_real_usage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_rate, "BURST_S", 1e6)  # the held log alone
    state = cluster_rate.RateState(quota(rpm=None, tpm=60_000).spec(), 0.0)  # 6,000 per window
    assert state.fit(0.0, [1000] * 10) == (6, 0.0)
    batch = state.take(0.0, [1000] * 6)
    count, wait = state.fit(1.0, [1000])
    assert count == 0 and wait == pytest.approx(state.hold_s - 1.0)
    state.settle(batch, -2500)  # the six requests used 3,500 tokens, not 6,000
    assert state.fit(1.0, [1000] * 5) == (2, 0.0)
    state.settle(batch + 1, -100)  # an unknown (expired) batch changes nothing
    assert state.tokens == 3500
    # A request larger than the whole window goes when nothing else is counted.
    assert state.fit(state.hold_s, [50_000])[0] == 1


async def test_a_late_permit_is_never_used_and_waiting_requests_are_asked_together(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cluster, "SETTLE_DELAY_S", 0.0)
    calls: list[list[int]] = []
    settled: list[list[list[int]]] = []
    release_first = asyncio.Event()

    async def grant(name: str, spec: dict[str, Any], tokens: list[int]) -> dict[str, Any]:
        calls.append(list(tokens))
        if len(calls) == 1:
            await release_first.wait()
        granted = 1 if len(calls) == 2 else len(tokens)  # the second answer grants one of three
        held = -10.0 if len(calls) == 4 else 0.0  # the fourth arrives long after its ttl
        return {"granted": granted, "batch": len(calls), "held_s": held}

    async def settle(name: str, deltas: list[list[int]]) -> None:
        settled.append(deltas)

    rate = cluster.RateClient(quota(tpm=1_000_000), asyncio.get_running_loop(), grant, settle)
    first = asyncio.create_task(rate.ask(10))
    await asyncio.sleep(0)
    others = [asyncio.create_task(rate.ask(n)) for n in (20, 30, 40)]
    await asyncio.sleep(0)
    release_first.set()
    grants = await asyncio.gather(first, *others)
    # One request to the scheduler at a time, for every permit waiting; the rest asked again.
    assert calls == [[10], [20, 30, 40], [30, 40]]
    assert [(g.batch, g.tokens) for g in grants] == [(1, 10), (2, 20), (3, 30), (3, 40)]

    late = await rate.ask(50)
    assert rate.late == 1 and calls[3:] == [[50], [50]] and late.batch == 5
    rate.settle(late, 80)  # the real usage replaces the estimate at the scheduler
    rate.settle(grants[0], None)  # unknown: the estimate stays
    for _ in range(5):
        await asyncio.sleep(0)
    assert settled == [[[5, 30]]]


# -- a cluster against the simulator ---------------------------------------------------------

RPM = 1200
WINDOW_S = 2.0
CAP = RPM * int(WINDOW_S) // 60  # 40 requests in any 2 s


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    with (
        distributed.LocalCluster(
            n_workers=2,
            processes=False,
            threads_per_worker=1,
            dashboard_address=None,
            silence_logs=logging.CRITICAL,
        ) as local,
        distributed.Client(local) as dask_client,
    ):
        yield dask_client


@pytest.fixture
def short_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulator's window (limits stay per minute), with margins to match."""
    monkeypatch.setattr(cluster, "RATE_WINDOW_S", WINDOW_S)
    monkeypatch.setattr(cluster, "GRANT_TTL_S", 0.25)
    monkeypatch.setattr(cluster, "ARRIVAL_SLACK_S", 0.5)


def reviews(n: int) -> pd.DataFrame:
    return pd.DataFrame({"review": [f"Review {i}: the battery lasts." for i in range(n)]})


def limited(sim: Simulator) -> kx.Extractor[Review]:
    """An extractor told the cluster's limits, pointed at ``sim``."""
    return kx.Extractor(
        Review, base_url=sim.base_url, api_key=sim.api_key, progress=False, concurrency=6, rpm=RPM
    )


def run(client: Any, sim: Simulator, frame: pd.DataFrame, partitions: int, store: Any) -> Any:
    extractor = limited(sim)
    ddf = dd.from_pandas(frame, npartitions=partitions)
    return kxd.extract(ddf, extractor, text="review", store=store, client=client).compute()


@pytest.mark.slow
def test_the_cluster_never_exceeds_the_quota_and_a_lone_partition_uses_all_of_it(
    client: Any, short_window: None, tmp_path: Any
) -> None:
    with Simulator(rpm=RPM, window_s=WINDOW_S, ttft_s=0.02) as sim:
        # Two partitions at once on the two workers.
        out = run(client, sim, reviews(60), 2, tmp_path / "a.sqlite3")
        assert out["kx_error"].isna().all()
        both = [h.t_start for h in chat_requests(sim)]
        assert len(both) == 60
        assert most_in_any_window(both, WINDOW_S) <= CAP
        sim.reset()

        # One partition while the cluster has two task slots: a static per-slot share would hold
        # it to CAP / 2 = 20 in any window; the shared quota lets it go to about CAP.
        out = run(
            client,
            sim,
            reviews(60).assign(review=lambda f: f.review + " Alone."),
            1,
            tmp_path / "b.sqlite3",
        )
        assert out["kx_error"].isna().all()
        alone = [h.t_start for h in chat_requests(sim)]
        assert len(alone) == 60
        assert 0.6 * CAP < most_in_any_window(alone, WINDOW_S) <= CAP
        assert all(h.status == 200 for h in sim.history)  # the server refused nothing


def rate_states(client: Any) -> dict[str, tuple[int, int]]:
    """Every run's (granted, tokens spent) at the scheduler's rate service."""

    def read(dask_scheduler: Any) -> dict[str, tuple[int, int]]:
        service = dask_scheduler.extensions.get("kimi_extract_rate")
        states = service.states if service is not None else {}
        return {name: (s.granted, s.spent) for name, s in states.items()}

    result: dict[str, tuple[int, int]] = client.run_on_scheduler(read)
    return result


@pytest.mark.slow
def test_tokens_are_settled_to_the_billed_usage_across_the_cluster(
    client: Any, short_window: None, tmp_path: Any
) -> None:
    """TPM only: no window at the server holds more tokens than the quota, and the scheduler's
    count ends at exactly what the server billed (each estimate replaced by the real usage)."""
    tpm = 120_000  # 4,000 tokens in any 2 s: a dozen requests of this size
    with Simulator(tpm=tpm, window_s=WINDOW_S, ttft_s=0.02) as sim:
        extractor = kx.Extractor(
            Review, base_url=sim.base_url, api_key=sim.api_key, progress=False, tpm=tpm
        )
        ddf = dd.from_pandas(reviews(30).assign(review=lambda f: f.review + " Tokens."), 2)
        before = rate_states(client)
        lazy = kxd.extract(
            ddf, extractor, text="review", store=tmp_path / "t.sqlite3", client=client
        )
        out = lazy.compute()
        assert out["kx_error"].isna().all()
        exchanges = chat_requests(sim)
        assert all(h.status == 200 for h in exchanges)
        billed = [
            (h.t_start, h.usage["prompt_tokens"] + h.usage["completion_tokens"]) for h in exchanges
        ]
    most = 0
    for t, _ in billed:
        most = max(most, sum(n for s, n in billed if t - WINDOW_S < s <= t))
    assert most <= tpm * WINDOW_S / 60
    deadline = time.monotonic() + 10
    while True:  # corrections reach the scheduler a moment after the answers
        (run,) = set(rate_states(client)) - set(before)
        granted, spent = rate_states(client)[run]
        if spent == sum(n for _, n in billed) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert granted == len(billed) and spent == sum(n for _, n in billed)


def test_runs_with_the_same_key_and_limits_share_one_quota_and_never_show_the_key() -> None:
    def make(key: str, **limits: Any) -> kx.Extractor[Review]:
        return kx.Extractor(
            Review, base_url="http://127.0.0.1:9/v1", api_key=key, progress=False, **limits
        )

    key = "sk-" + "q" * 40
    one = cluster.cluster_limits(make(key, rpm=RPM))
    two = cluster.cluster_limits(make(key, rpm=RPM))
    assert one.token != two.token  # each run keeps its own budget
    assert one.quota_name == two.quota_name
    assert cluster.cluster_limits(make("sk-" + "r" * 40, rpm=RPM)).quota_name != one.quota_name
    assert cluster.cluster_limits(make(key, rpm=RPM // 2)).quota_name != one.quota_name
    assert key not in one.quota_name and key not in repr(one)


@pytest.mark.slow
def test_two_runs_at_once_on_one_scheduler_stay_within_the_limit_together(
    client: Any, short_window: None, tmp_path: Any
) -> None:
    with Simulator(rpm=RPM, window_s=WINDOW_S, ttft_s=0.02) as sim:
        lazies = []
        for name in ("a", "b"):
            extractor = limited(sim)  # a new extractor per run, told the same limits
            frame = reviews(50).assign(review=lambda f, n=name: f.review + f" Run {n}.")
            ddf = dd.from_pandas(frame, npartitions=1)
            store = tmp_path / f"{name}.sqlite3"
            lazies.append(kxd.extract(ddf, extractor, text="review", store=store, client=client))
        outs = dask.compute(*lazies)
        assert all(out["kx_error"].isna().all() for out in outs)
        sent = [h.t_start for h in chat_requests(sim)]
        assert len(sent) == 100
        # Each run alone may use the whole quota; together they share it, as the server counts.
        assert most_in_any_window(sent, WINDOW_S) <= CAP
        assert all(h.status == 200 for h in sim.history)
