"""10. The result store's backends: client CPU per row, SQLite file vs PostgreSQL (local socket),
and throughput of 4 Dask workers on one PostgreSQL store.

    python benchmarks/bench_store_backends.py            # prints the tables (--quick: smaller)

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

from _common import review_texts, run_worker  # noqa: E402
from _server import API_KEY, served  # noqa: E402

CONCURRENCIES = (64, 256)
REPEATS = 3
ROWS = 2000
DASK_ROWS = 4000
TARGET_RATIO = 1.5
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


def main() -> None:
    quick = "--quick" in sys.argv
    from tests.pg import start_server

    rows, repeats, dask_rows = (300, 1, 400) if quick else (ROWS, REPEATS, DASK_ROWS)
    load = os.getloadavg()
    server = start_server()
    try:
        database = server.new_database()
        with served() as base_url:
            cpu = cpu_per_row(base_url, server, database, rows, repeats)
            throughput = dask_throughput(base_url, server, database, dask_rows)
    finally:
        server.stop()
    after = os.getloadavg()[0]
    print(f"load before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; after: {after:.2f}")
    print(f"rows {rows}, median of {repeats} runs, client CPU ms per row (store on, all misses)")
    print("| concurrency | SQLite | PostgreSQL | store off | PostgreSQL / SQLite |")
    print("|---|---|---|---|---|")
    for concurrency in CONCURRENCIES:
        sqlite, pg, off = (cpu[b, concurrency] for b in ("sqlite", "postgresql", "off"))
        ratio = pg / sqlite
        mark = "ok" if ratio <= TARGET_RATIO else "over"
        print(f"| {concurrency} | {sqlite:.3f} | {pg:.3f} | {off:.3f} | {ratio:.2f}x ({mark}) |")
    print(f"\n4 Dask workers, {dask_rows} rows in 8 partitions, concurrency 64, zero latency:")
    for backend, rate in throughput.items():
        print(f"- {backend}: {rate:.0f} rows/s")
    print(json.dumps({"cpu": {f"{b}@{c}": v for (b, c), v in cpu.items()}, "dask": throughput}))


if __name__ == "__main__":
    main()
