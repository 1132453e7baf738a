"""8. Dask: one RPM quota shared by the whole cluster (kimi_extract.cluster).

    python benchmarks/run.py --only 8          # writes the table into RESULTS.md
    python benchmarks/bench_dask_limits.py     # the same, printed only (--quick: smaller)

A ``distributed.LocalCluster(processes=True, n_workers=4, threads_per_worker=1)`` runs
``kimi_extract.dask.extract`` over 6 partitions (so the run ends with fewer partitions than
workers: a static per-worker share would leave quota unused there) against a simulator in its own
process that enforces RPM ``R`` in a sliding window and logs every request's arrival time. The
extractor is told ``rpm=R`` (and ``concurrency=16``); each request takes 200 ms, so RPM binds.

Per window length: rows/s over the whole ``compute()`` and requests/s between the first and the
last arrival at the server, as a share of ``R / 60``; the most requests the server saw in any
window (sliding, every arrival, refused ones too) against what a window allows; 429s; rows lost.
Cells: Kimi's 60 s window over a 3-minute run, and a 6 s window (the simulator's ``window_s``;
limits stay per minute, a window holds ``R / 10``) over 60 s. The client is told the window
(``kimi_extract.cluster.RATE_WINDOW_S``) with margins to match (permit ttl 0.2 s, arrival slack
0.3 s for 6 s; 0.5 s and 1 s for 60 s), so the ceiling is ``0.99 * window / (window + ttl +
slack)`` of ``R``: 96.6 % at 60 s, 91.4 % at 6 s. The cluster is started, and the workers
import kimi_extract, before the clock starts.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from _common import HERE, Review, Section, review_texts
from _server import API_KEY, free_port

RPM = 1200
LATENCY_S = 0.2
CONCURRENCY = 16
PARTITIONS = 6
TARGET_SHARE = 0.90


def _cells(quick: bool) -> list[dict[str, Any]]:
    if quick:  # the smoke run: 2 workers, a 2 s window, 15 s of rows
        return [{"window_s": 2.0, "run_s": 15, "ttl": 0.2, "slack": 0.3, "workers": 2}]
    return [
        {"window_s": 6.0, "run_s": 60, "ttl": 0.2, "slack": 0.3, "workers": 4},
        {"window_s": 60.0, "run_s": 180, "ttl": 0.5, "slack": 1.0, "workers": 4},
    ]


def most_in_any_window(times: list[float], window: float) -> int:
    """The largest count of ``times`` in any interval ``(t - window, t]``."""
    ordered = sorted(times)
    best = start = 0
    for end, t in enumerate(ordered):
        while ordered[start] <= t - window:
            start += 1
        best = max(best, end - start + 1)
    return best


def serve_logged(options: dict[str, Any]) -> None:
    """In a fresh process: a simulator; prints its URL, and on stdin's end every arrival."""
    from kimi_extract.simulator import Simulator

    with Simulator(**options) as sim:
        print(sim.base_url, flush=True)
        sys.stdin.read()
        arrivals = [
            [h.t_start, h.status] for h in sim.history if h.path.endswith("/chat/completions")
        ]
    print(json.dumps(arrivals), flush=True)


@contextlib.contextmanager
def logged_server(**options: Any) -> Iterator[tuple[str, list[list[Any]]]]:
    """Yields the base URL and a list that holds ``[arrival, status]`` pairs once the block ends."""
    options = {"port": free_port(), "api_key": API_KEY, **options}
    proc = subprocess.Popen(
        [sys.executable, __file__, "serve", json.dumps(options)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    arrivals: list[list[Any]] = []
    try:
        yield proc.stdout.readline().strip(), arrivals
    finally:
        proc.stdin.close()
        arrivals.extend(json.loads(proc.stdout.readline() or "[]"))
        proc.wait(30)


def _run(cell: dict[str, Any]) -> dict[str, Any]:
    import dask.dataframe as dd
    import distributed
    import pandas as pd

    import kimi_extract as kx
    import kimi_extract.dask as kxd
    from kimi_extract import cluster

    window = cell["window_s"]
    rows = int(RPM / 60 * cell["run_s"])
    cluster.RATE_WINDOW_S = window
    cluster.GRANT_TTL_S = cell["ttl"]
    cluster.ARRIVAL_SLACK_S = cell["slack"]
    server = {"rpm": RPM, "window_s": window, "ttft_s": LATENCY_S, "rate_shape": "sliding"}
    # The workers unpickle the benchmark's Review model from _common: put this folder on their path.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(HERE), os.environ.get("PYTHONPATH")])
    )
    with (
        distributed.LocalCluster(
            n_workers=cell["workers"],
            processes=True,
            threads_per_worker=1,
            dashboard_address=None,
            silence_logs=logging.CRITICAL,
        ) as local,
        distributed.Client(local) as client,
        tempfile.TemporaryDirectory(prefix="kx-bench-dask-") as store,
        logged_server(**server) as (base_url, arrivals),
    ):
        client.run(importlib.import_module, "kimi_extract.dask")
        extractor = kx.Extractor(
            Review,
            base_url=base_url,
            api_key=API_KEY,
            progress=False,
            concurrency=CONCURRENCY,
            rpm=RPM,
        )
        frame = pd.DataFrame({"review": review_texts(rows)})
        ddf = dd.from_pandas(frame, npartitions=PARTITIONS)
        lazy = kxd.extract(ddf, extractor, text="review", store=f"{store}/s.sqlite3")
        started = time.perf_counter()
        out = lazy.compute()
        wall = time.perf_counter() - started
    ok = int(out["kx_error"].isna().sum())
    times = [t for t, _ in arrivals]
    span = max(times) - min(times) if len(times) > 1 else float("nan")
    cap = max(1, int(RPM * window // 60))
    return {
        "window_s": window,
        "workers": cell["workers"],
        "rows": rows,
        "ok": ok,
        "lost": rows - ok,
        "wall_s": wall,
        "requests": len(times),
        "refused": sum(1 for _, status in arrivals if status == 429),
        "row_share": ok / wall / (RPM / 60),
        "send_share": (len(times) - 1) / span / (RPM / 60),
        "most_in_window": most_in_any_window(times, window),
        "most_in_60s": most_in_any_window(times, 60.0),
        "cap": cap,
        "ceiling": 0.99 * window / (window + cell["ttl"] + cell["slack"]),
    }


def measure(quick: bool) -> Section:
    table: list[list[Any]] = []
    targets: list[tuple[str, str, bool | None]] = []
    data: dict[str, Any] = {}
    for cell in _cells(quick):
        r = _run(cell)
        label = f"{r['window_s']:g} s"
        data[label] = r
        print(json.dumps(r), flush=True)
        table.append(
            [
                label,
                RPM,
                r["workers"],
                r["rows"],
                f"{r['wall_s']:.1f}",
                f"{r['row_share']:.1%}",
                f"{r['send_share']:.1%}",
                f"{r['ceiling']:.1%}",
                f"{r['most_in_window']} / {r['cap']}",
                r["refused"],
                r["lost"],
            ]
        )
        targets.append(
            (
                f"Dask {label} window: never above RPM in any window",
                f"max {r['most_in_window']} of {r['cap']}, {r['refused']} refused",
                r["most_in_window"] <= r["cap"] and r["refused"] == 0,
            )
        )
        if r["window_s"] >= 60:
            targets.append(
                (
                    f"Dask {label} window, 4 worker processes: >= {TARGET_SHARE:.0%} of RPM over "
                    "the run, 0 lost",
                    f"{r['row_share']:.1%} (rows over the whole compute), {r['lost']} lost",
                    r["row_share"] >= TARGET_SHARE and r["lost"] == 0,
                )
            )
    return Section(
        key="8",
        title="Dask: one RPM quota for the whole cluster",
        command="python benchmarks/run.py --only 8",
        headers=[
            "window",
            "RPM",
            "workers",
            "rows",
            "wall s",
            "rows/s of RPM",
            "sends/s of RPM",
            "ceiling",
            "most in any window / allowed",
            "429s",
            "lost",
        ],
        rows=table,
        targets=targets,
        notes=[
            "LocalCluster(processes=True, threads_per_worker=1), 6 partitions, extractor told "
            f"rpm={RPM} and concurrency={CONCURRENCY}; the simulator (own process) enforces RPM "
            f"{RPM} in a sliding window of the stated length, {LATENCY_S * 1000:.0f} ms per "
            "request, and logs every arrival.",
            "'rows/s of RPM': rows over the whole compute() (task start-up and the last answers "
            "included); 'sends/s of RPM': requests between the first and the last arrival at the "
            "server; 'ceiling': the pace kimi_extract.cluster keeps, 0.99 * window / (window + "
            "permit ttl + arrival slack); 'most in any window': the server's arrival log, every "
            "request (refused ones too), sliding.",
            "Cells and margins: benchmarks/bench_dask_limits.py's docstring.",
        ],
        data=data,
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve_logged(json.loads(sys.argv[2]))
    else:
        import report

        section = measure("--quick" in sys.argv)
        print(report.console_table(section))
