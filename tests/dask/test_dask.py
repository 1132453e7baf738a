"""Dask: a real LocalCluster (2 worker processes) against a simulator on loopback.

One cluster serves the module. The simulator runs in this process, so its ``history`` shows every
request the workers sent: totals, the cluster-wide concurrency bound, and no second request for a
row committed before its worker was killed.
"""

from __future__ import annotations

import importlib
import itertools
import logging
import os
import pickle
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pytest

import kimi_extract as kx
from kimi_extract.simulator import Reply, SimRequest, Simulator

from ..conftest import Review, chat_requests, ok_exchanges, usage_sum

distributed = pytest.importorskip("distributed")
dask = pytest.importorskip("dask")
dd = pytest.importorskip("dask.dataframe")
kxd = pytest.importorskip("kimi_extract.dask")

pytestmark = pytest.mark.slow

ROWS_PER_PARTITION = 12
PARTITIONS = 4


def reviews(n: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "id": range(n),
            "review": [f"Review {i}: the battery lasts, the screen is dim." for i in range(n)],
        }
    )


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    # Short lease timeout: the leases a killed worker held come back within the test.
    settings = {
        "distributed.scheduler.locks.lease-timeout": "3s",
        "distributed.scheduler.locks.lease-validation-interval": "500ms",
    }
    with (
        dask.config.set(settings),
        distributed.LocalCluster(
            n_workers=2,
            processes=True,
            threads_per_worker=1,
            dashboard_address=None,
            silence_logs=logging.CRITICAL,
        ) as cluster,
        distributed.Client(cluster) as dask_client,
    ):
        # Workers import the library before the first timed run, so both start at once.
        dask_client.run(importlib.import_module, "kimi_extract.dask")
        dask_client.run(importlib.import_module, "tests.conftest")
        yield dask_client


def extractor_for(sim: Simulator, **options: Any) -> kx.Extractor[Any]:
    options.setdefault("concurrency", 3)
    options.setdefault("api_key", sim.api_key)
    return kx.Extractor(Review, base_url=sim.base_url, progress=False, **options)


def peak_in_flight(sim: Simulator) -> int:
    """Most requests open at once at the server, from the history's start/end times."""
    events = []
    for exchange in chat_requests(sim):
        assert exchange.t_end is not None
        events += [(exchange.t_start, 1), (exchange.t_end, -1)]
    current = peak = 0
    for _, step in sorted(events):  # at equal times the end (-1) sorts first
        current += step
        peak = max(peak, current)
    return peak


def partitions_overlapped(sim: Simulator, frame: pd.DataFrame) -> bool:
    """True when two partitions had requests open at the same time."""
    partition_of = {text: i // ROWS_PER_PARTITION for i, text in enumerate(frame["review"])}
    spans: dict[int, list[float]] = {}
    for exchange in chat_requests(sim):
        assert exchange.t_end is not None
        span = spans.setdefault(partition_of[user_text(exchange)], [exchange.t_start, 0.0])
        span[0] = min(span[0], exchange.t_start)
        span[1] = max(span[1], exchange.t_end)
    ordered = sorted(spans.values())
    return any(later[0] < earlier[1] for earlier, later in itertools.pairwise(ordered))


def user_text(exchange: Any) -> str:
    return str((exchange.body or {})["messages"][-1]["content"])


def requests_per_text(sim: Simulator) -> Counter[str]:
    # A request that has only just arrived has no parsed body yet; the next look counts it.
    return Counter(user_text(h) for h in chat_requests(sim) if h.body is not None)


def committed_rows(path: Any) -> int:
    """Rows committed to the SQLite store at ``path`` so far (0 before it exists)."""
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            return int(db.execute("SELECT COUNT(*) FROM results").fetchone()[0])
    except sqlite3.Error:
        return 0


def test_cluster_run_totals_limits_and_resume(client: Any, tmp_path: Any) -> None:
    store = tmp_path / "results.sqlite3"
    frame = reviews(ROWS_PER_PARTITION * PARTITIONS)
    ddf = dd.from_pandas(frame, npartitions=PARTITIONS)
    with Simulator(ttft_s=0.2) as sim:
        extractor = extractor_for(sim, concurrency=3, rpm=6000, tpm=10_000_000)
        lazy = kxd.extract(ddf, extractor, text="review", store=store)
        assert sim.history == []  # building the graph and its meta sent nothing
        out = lazy.compute()

        assert len(out) == len(frame) and out["kx_error"].isna().all()
        assert list(out["id"]) == list(frame["id"])
        assert out.dtypes.equals(lazy._meta.dtypes)
        # Every row was requested once, and the accounting columns add up to what was billed.
        assert sorted(requests_per_text(sim).values()) == [1] * len(frame)
        assert len(ok_exchanges(sim)) == out["kx_attempts"].sum()
        assert out["kx_prompt_tokens"].sum() == usage_sum(sim, "prompt")
        assert out["kx_completion_tokens"].sum() == usage_sum(sim, "completion")
        assert out["kx_reasoning_tokens"].sum() == usage_sum(sim, "reasoning")
        # The two workers ran partitions at the same time, each allowing 3 requests in flight;
        # the cluster-wide semaphore kept the server at 3 (without it, it sees 6).
        assert partitions_overlapped(sim, frame)
        assert 2 <= peak_in_flight(sim) <= 3

        # A second run of the same graph is served from the store: no request at all.
        sent = len(sim.history)
        again = kxd.extract(ddf, extractor, text="review", store=store).compute()
        assert len(sim.history) == sent
        assert again["kx_from_store"].all() and again["kx_prompt_tokens"].sum() == 0


def test_options_are_checked_before_anything_runs(client: Any, tmp_path: Any) -> None:
    ddf = dd.from_pandas(reviews(4), npartitions=2)
    extractor = kx.Extractor(Review, api_key="sk-test", progress=False)
    with pytest.raises(kx.ConfigurationError, match="result store"):
        kxd.extract(ddf, extractor, text="review")
    with pytest.raises(kx.InputError, match="nope"):
        kxd.extract(ddf, extractor, text="nope", store=tmp_path / "s.sqlite3")
    # ddf.kimi takes a model and Extractor options, like df.kimi.
    lazy = ddf.kimi.extract(
        Review, text="review", store=tmp_path / "s.sqlite3", column_prefix="out_"
    )
    assert "out_sentiment" in lazy.columns and "kx_cost" in lazy.columns


def test_extractor_ships_without_showing_the_key() -> None:
    extractor = kx.Extractor(Review, api_key="sk-very-secret-key", progress=False)
    shipped = kxd.ShippedExtractor(extractor.output, extractor.config, token="t")
    assert "sk-very-secret" not in repr(shipped) and "sk-very-secret" not in repr(extractor)
    loaded = pickle.loads(pickle.dumps(shipped)).load()
    assert loaded is not extractor and repr(loaded.config) == repr(extractor.config)
    assert loaded.output is Review and loaded.config.secret.get() == "sk-very-secret-key"
    assert "sk-very-secret" not in repr(loaded.config) + repr(loaded.config.secret)


def test_a_partition_gets_a_replaced_config_not_a_mutated_copy(tmp_path: Any) -> None:
    """Each partition's settings are derived (and validated) with ``dataclasses.replace``; the
    budget stays whole (the scheduler keeps it for all partitions)."""
    extractor = kx.Extractor(Review, max_total_tokens=400_000, max_cost=40.0, rpm=60, progress=True)
    config = kxd.partition_config(extractor.config, tmp_path / "s.sqlite3", partitions=4)
    assert (config.max_total_tokens, config.max_cost, config.progress) == (400_000, 40.0, False)
    assert config.store_path == (tmp_path / "s.sqlite3").absolute() and config.rpm == 60
    # The caller's extractor is untouched.
    assert extractor.config.progress is True
    url = "postgresql://kx:pw-Secret@db.example/kx"
    shipped = kxd.partition_config(extractor.config, url, partitions=4)
    assert str(shipped.store_path) == "postgresql://kx:***@db.example/kx"
    assert "pw-Secret" not in repr(shipped)


def test_core_does_not_import_dask() -> None:
    code = (
        "import sys, kimi_extract, pandas as pd\n"
        "pd.DataFrame({'a': ['x']}).kimi\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed'))\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


class EventsToFile:
    """A hook that writes each event's name to a file of its own process: the copy a worker
    gets runs there, the caller's object sees nothing."""

    def __init__(self, directory: Any) -> None:
        self.directory = str(directory)
        self.seen: list[str] = []

    def _write(self, name: str) -> None:
        self.seen.append(name)
        with open(os.path.join(self.directory, f"{os.getpid()}.log"), "a") as log:
            log.write(name + "\n")

    def on_run_start(self, event: Any) -> None:
        self._write("run_start")

    def on_row_end(self, event: Any) -> None:
        self._write("row_end:" + ("ok" if event.error is None else "error"))


def test_each_worker_runs_its_own_copy_of_the_hooks(client: Any, tmp_path: Any) -> None:
    """docs/hooks.md: "On Dask, each worker gets its own copy of the hooks"."""
    frame = reviews(ROWS_PER_PARTITION * PARTITIONS)
    ddf = dd.from_pandas(frame, npartitions=PARTITIONS)
    logs = tmp_path / "events"
    logs.mkdir()
    hook = EventsToFile(logs)
    with Simulator() as sim:
        extractor = extractor_for(sim, hooks=[hook])
        out = kxd.extract(ddf, extractor, text="review", store=tmp_path / "s.sqlite3").compute()
    assert out["kx_error"].isna().all()
    assert hook.seen == []  # the caller's object ran nowhere
    per_process = {p.stem: p.read_text().split() for p in logs.iterdir()}
    assert str(os.getpid()) not in per_process  # the copies ran in the worker processes
    events = Counter(e for names in per_process.values() for e in names)
    assert events == {"run_start": PARTITIONS, "row_end:ok": len(frame)}


def test_a_run_level_error_reaches_the_caller_without_the_key(client: Any, tmp_path: Any) -> None:
    ddf = dd.from_pandas(reviews(4), npartitions=2)
    with Simulator() as sim:
        extractor = extractor_for(sim, api_key="sk-wrong-key-0123")
        lazy = kxd.extract(ddf, extractor, text="review", store=tmp_path / "s.sqlite3")
        with pytest.raises(kx.RunStopped) as stopped:
            lazy.compute()
    assert isinstance(stopped.value.cause, kx.AuthenticationError)
    assert "sk-wrong-key" not in str(stopped.value) + repr(stopped.value.cause)


def test_killed_worker_partition_resumes_without_rebilling(client: Any, tmp_path: Any) -> None:
    frame = reviews(ROWS_PER_PARTITION * PARTITIONS)
    ddf = dd.from_pandas(frame, npartitions=PARTITIONS)
    first_partition = list(frame["review"][:ROWS_PER_PARTITION])
    hanging_text = first_partition[-1]
    hang = threading.Event()
    hang.set()

    def responder(request: SimRequest) -> Reply | None:
        if request.user_text == hanging_text and hang.is_set():
            return Reply(delay=30.0)  # the worker is killed while it waits for this one
        return None

    with Simulator(ttft_s=0.05, responder=responder) as sim:
        extractor = extractor_for(sim, concurrency=3)
        lazy = kxd.extract(ddf, extractor, text="review", store=tmp_path / "results.sqlite3")
        persisted = client.persist(lazy)

        def partition_zero_stuck() -> bool:
            answered = {user_text(h) for h in ok_exchanges(sim)}
            asked = requests_per_text(sim)
            return asked[hanging_text] == 1 and set(first_partition[:-1]) <= answered

        deadline = time.monotonic() + 60
        while not partition_zero_stuck():
            assert time.monotonic() < deadline, "partition 0 never reached its hanging row"
            time.sleep(0.05)
        # Every answered row is committed before the kill (the order of events, not a pause):
        # the other partitions finish, partition 0 waits on its hanging row.
        while committed_rows(tmp_path / "results.sqlite3") < len(ok_exchanges(sim)):
            assert time.monotonic() < deadline, "answered rows were never committed"
            time.sleep(0.05)
        worker = next(
            address
            for address, keys in client.processing().items()
            if any(isinstance(key, tuple) and key[-1] == 0 for key in keys)
        )
        pid = client.run(os.getpid, workers=[worker])[worker]
        hang.clear()
        os.kill(pid, signal.SIGKILL)

        out = persisted.compute()

        assert len(out) == len(frame) and out["kx_error"].isna().all()
        asked = requests_per_text(sim)
        # The hanging row was asked again; no other row, committed before the kill, was.
        assert asked[hanging_text] == 2
        assert {text: n for text, n in asked.items() if text != hanging_text} == {
            text: 1 for text in frame["review"] if text != hanging_text
        }
        rerun = out.iloc[:ROWS_PER_PARTITION]
        assert rerun["kx_from_store"].iloc[:-1].all() and not rerun["kx_from_store"].iloc[-1]
        # Nothing is billed twice: the frame's tokens are what the simulator billed, minus the
        # rows served from the store (billed once, in the run the worker died in).
        cached_texts = set(out.loc[out["kx_from_store"], "review"])
        billed_before = sum(
            (h.usage or {}).get("prompt_tokens", 0)
            for h in ok_exchanges(sim)
            if user_text(h) in cached_texts
        )
        assert out["kx_prompt_tokens"].sum() + billed_before == usage_sum(sim, "prompt")
