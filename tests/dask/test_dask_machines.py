"""More than one machine: 4 Dask worker processes, each with its own working directory and no
shared path, one PostgreSQL store and one budget for all.

- A worker killed (SIGKILL) mid-partition: Dask reruns the partition elsewhere; only its unfinished
  rows are sent again (at most ``concurrency``), every row is in the output once, and a second
  ``compute()`` sends nothing.
- One budget: partitions of very different cost draw from one ``max_cost``, so the run uses at
  least 90 % of it before it stops, and never more than all of it; a worker killed while it holds
  reservations does not make the run overspend (its reservations count at their worst case once
  their lease runs out) nor wait for it forever.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pytest

import kimi_extract as kx
from kimi_extract.simulator import Reply, SimRequest, Simulator

from ..conftest import Review, chat_requests, ok_exchanges

distributed = pytest.importorskip("distributed")
dask = pytest.importorskip("dask")
dd = pytest.importorskip("dask.dataframe")
kxd = pytest.importorskip("kimi_extract.dask")
cluster_budget = pytest.importorskip("kimi_extract.cluster_budget")

pytestmark = pytest.mark.slow

WORKERS = 4
#: One USD per million tokens, whatever the bucket: a run's cost is its tokens / 1e6.
FLAT = kx.Pricing(input=1.0, cached_input=1.0, cache_write=1.0, output=1.0)


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """4 worker processes, each with its own directory: separate machines, but for the host."""
    settings = {
        "distributed.scheduler.locks.lease-timeout": "3s",
        "distributed.scheduler.locks.lease-validation-interval": "500ms",
    }
    workers = {
        f"machine-{i}": {
            "cls": distributed.Nanny,
            "options": {
                "nthreads": 1,
                "local_directory": str(tmp_path_factory.mktemp(f"machine-{i}")),
            },
        }
        for i in range(WORKERS)
    }
    scheduler = {"cls": distributed.Scheduler, "options": {"dashboard_address": None}}
    with (
        dask.config.set(settings),
        distributed.SpecCluster(
            workers=workers, scheduler=scheduler, silence_logs=logging.CRITICAL
        ) as cluster,
        distributed.Client(cluster) as dask_client,
    ):
        dask_client.wait_for_workers(WORKERS)
        dask_client.run(importlib.import_module, "kimi_extract.dask")
        dask_client.run(importlib.import_module, "tests.conftest")
        yield dask_client


def user_text(exchange: Any) -> str:
    return str((exchange.body or {})["messages"][-1]["content"])


def frame_of(texts: list[str]) -> pd.DataFrame:
    return pd.DataFrame({"id": range(len(texts)), "review": texts})


def worker_running(client: Any, partition: int) -> str:
    """The address of the worker executing ``partition`` now, as the workers tell.

    Not the scheduler's ``processing()``: it also lists a task sent to a worker still busy with
    another one, and work stealing may yet move that task to an idle worker (all four partitions
    sent to one worker, partition 0 then run by another: the victim held no reservation). A
    task that has started on a worker stays there.
    """

    def executing(dask_worker: Any) -> bool:
        return any(
            isinstance(ts.key, tuple)
            and ts.key[-1] == partition
            and "run_partition" in str(ts.key[0])
            for ts in dask_worker.state.executing
        )

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for address, running in client.run(executing).items():
            if running:
                return str(address)
        time.sleep(0.05)
    raise AssertionError(f"no worker is running partition {partition}")


def kill(client: Any, address: str) -> None:
    pid = client.run(os.getpid, workers=[address])[address]
    os.kill(pid, signal.SIGKILL)


def wait_until(check: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_a_machine_lost_mid_partition_loses_nothing(client: Any, pg_url: str) -> None:
    rows, partitions, concurrency = 12, WORKERS, 3
    texts = [f"Review {i}: the hinge is loose, the screen is bright." for i in range(rows * 4)]
    first = texts[:rows]  # partition 0: its worker is killed after 5 rows, with more in flight
    held = threading.Event()
    held.set()
    answered = Counter[str]()

    def responder(request: SimRequest) -> Reply | None:
        if request.user_text in first:
            answered[request.user_text] += 1
            if held.is_set() and sum(answered.values()) > 5:
                return Reply(delay=60.0)  # in flight when the worker dies
        return Reply(delay=0.02)

    ddf = dd.from_pandas(frame_of(texts), npartitions=partitions)
    with Simulator(responder=responder) as sim:
        ex = kx.Extractor(
            Review,
            base_url=sim.base_url,
            api_key=sim.api_key,
            progress=False,
            concurrency=concurrency,
        )
        lazy = kxd.extract(ddf, ex, text="review", store=pg_url)
        persisted = client.persist(lazy)
        victim = worker_running(client, 0)
        wait_until(
            lambda: (
                len([h for h in ok_exchanges(sim) if user_text(h) in first]) >= 5
                and sum(1 for h in chat_requests(sim) if user_text(h) in first and h.status is None)
                >= 1
            ),
            "partition 0 never had rows finished and rows in flight",
        )
        time.sleep(0.3)  # the answered rows are committed within milliseconds of their answer
        kill(client, victim)
        held.clear()
        out = persisted.compute()

        assert len(out) == len(texts) and out["kx_error"].isna().all()
        assert sorted(out["review"]) == sorted(texts)  # every row exactly once
        asked = Counter(user_text(h) for h in chat_requests(sim))
        twice = [text for text, n in asked.items() if n > 1]
        assert set(twice) <= set(first) and 1 <= len(twice) <= concurrency, twice
        assert set(asked) == set(texts)
        rerun = out.iloc[:rows]
        assert rerun["kx_from_store"].sum() >= 5  # the rows finished before the kill
        sent = len(chat_requests(sim))
        again = kxd.extract(ddf, ex, text="review", store=pg_url).compute()
        assert len(chat_requests(sim)) == sent  # a second compute sends nothing
        assert again["kx_from_store"].all()


def spend(sim: Simulator) -> float:
    """What the server billed, in USD at ``FLAT`` prices."""
    tokens = sum(
        (h.usage or {}).get("prompt_tokens", 0) + (h.usage or {}).get("completion_tokens", 0)
        for h in ok_exchanges(sim)
    )
    return tokens / 1e6


LONG = " ".join(["the battery lasts two days but the screen is dim in sunlight"] * 120)


def uneven(long_rows: int = 40, short_rows: int = 8) -> pd.DataFrame:
    """Partition 0: long documents (most of the cost); partitions 1-3: short reviews."""
    texts = [f"doc {i}: {LONG}" for i in range(long_rows)]
    texts += [f"short {i}: good" for i in range(3 * short_rows)]
    return frame_of(texts)


def budget_states(client: Any) -> dict[str, Any]:
    def read(dask_scheduler: Any) -> dict[str, Any]:
        service = dask_scheduler.extensions.get("kimi_extract_budget")
        if service is None:
            return {}
        return {
            name: {**state.snapshot(), "expired": state.expired}
            for name, state in service.states.items()
        }

    return dict(client.run_on_scheduler(read))


def finish(client: Any, persisted: Any) -> None:
    """Compute ``persisted`` (raising what a partition raised), then wait for every partition's
    task to end: a budget stop fails them one by one. A sanity bound of 120 s: a run waiting
    forever for reservations nobody holds fails instead of hanging."""
    try:
        client.compute(persisted).result(timeout=120)
    finally:
        distributed.wait(persisted, timeout=120)


def run_uneven(client: Any, sim: Simulator, max_cost: float, store: str) -> Any:
    ddf = dd.from_pandas(uneven(), npartitions=1).repartition(divisions=[0, 40, 48, 56, 63])
    ex = kx.Extractor(
        Review,
        base_url=sim.base_url,
        api_key=sim.api_key,
        progress=False,
        concurrency=4,
        max_completion_tokens=256,
        pricing=FLAT,
        max_cost=max_cost,
    )
    return client.persist(kxd.extract(ddf, ex, text="review", store=store))


def test_one_budget_for_partitions_of_very_different_cost(client: Any, pg_url: str) -> None:
    """$0.05 buys about 26 long documents: partition 0 alone needs more. The even split left
    it $0.0125 and the short partitions most of theirs unused; one budget spends >= 90 %."""
    budget = 0.05
    with Simulator(ttft_s=0.02) as sim:
        persisted = run_uneven(client, sim, budget, pg_url)
        with pytest.raises(kx.BudgetExceeded):
            finish(client, persisted)
        spent = spend(sim)
    assert spent <= budget
    assert spent >= 0.9 * budget, spent / budget


def test_a_worker_killed_holding_reservations_never_overspends(
    client: Any, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The killed worker's reservations are held until their lease ends (2 s here), then count
    as spent at their worst case: the others go on, and the run stays within the budget."""
    monkeypatch.setattr(cluster_budget, "LEASE_S", 2.0)
    budget = 0.05
    stuck = threading.Event()
    stuck.set()

    def responder(request: SimRequest) -> Reply | None:
        if stuck.is_set() and request.user_text.startswith("doc 1"):
            return Reply(delay=60.0)  # partition 0 holds these when its worker dies
        return None

    with Simulator(ttft_s=0.02, responder=responder) as sim:
        persisted = run_uneven(client, sim, budget, pg_url)
        victim = worker_running(client, 0)
        wait_until(
            lambda: any(user_text(h).startswith("doc 1") for h in chat_requests(sim)),
            "partition 0 never sent a held request",
        )
        # A request is sent once the scheduler has granted its reservation: the victim holds it.
        kill(client, victim)
        stuck.clear()
        with pytest.raises(kx.BudgetExceeded):  # not a wait for the dead worker's leases
            finish(client, persisted)
        spent = spend(sim)
        states = budget_states(client)
    state = next(s for s in states.values() if s["expired"] >= 1)
    assert state["spent_cost"] <= budget + 1e-12 and state["held_cost"] == 0
    assert spent <= budget
