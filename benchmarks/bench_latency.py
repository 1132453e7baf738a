"""2. Latency-bound throughput: 10,000 rows, 1 s per request, concurrency 500.

The simulator waits ``ttft_s`` before every answer; with no other limit the best any client can do
is ``concurrency / latency`` rows per second. kimi_extract runs with its defaults (adaptive slow
start included); the peers run fewer rows because they are CPU-bound long before 500 rows/s.
"""

from __future__ import annotations

from typing import Any

from _common import Section, peer_available, run_worker
from _server import served, server_cpu_s, stats
from peers import PEERS

TARGET_SHARE = 0.90


def measure(quick: bool) -> Section:
    if quick:
        rows, peer_rows, concurrency, latency = 150, 50, 50, 0.1
    else:
        rows, peer_rows, concurrency, latency = 10_000, 3_000, 500, 1.0
    ideal = concurrency / latency
    # --quick leaves the peers to sections 1 and 3 (the same worker code) to stay fast.
    peers = [] if quick else [p for p in PEERS if peer_available(p)]
    clients: list[tuple[str, str, int, dict[str, Any]]] = [
        ("kimi_extract", "kimi_extract", rows, {}),
        ("kimi_extract (adaptive=False)", "kimi_extract", rows, {"adaptive": False}),
        *((p, p, peer_rows, {}) for p in peers),
    ]
    table = []
    shares: dict[str, float] = {}
    for label, client, count, options in clients:
        # A fresh server per client, so its in-flight peak is this client's.
        with served(ttft_s=latency) as base_url:
            spec = {
                "client": client,
                "base_url": base_url,
                "rows": count,
                "concurrency": concurrency,
                "options": options,
            }
            server_cpu = server_cpu_s(base_url)
            run = run_worker("_client", spec)["runs"][0]
            server_cpu = server_cpu_s(base_url) - server_cpu
            peak = stats(base_url)["in_flight_peak"]
        rate = run["ok"] / run["wall_s"]
        # A finite run cannot beat ceil(rows / concurrency) rounds of one latency each.
        rounds = -(-count // concurrency)
        best = count / (rounds * latency)
        shares[label] = rate / best
        table.append(
            [
                label,
                f"{count:,}",
                concurrency,
                f"{run['wall_s']:.1f}",
                f"{rounds * latency:.1f}",
                f"{rate:.0f}",
                f"{best:.0f}",
                f"{rate / best:.0%}",
                peak,
                run["rows"] - run["ok"],
                f"{run['cpu_s'] / count * 1000:.2f}",
                f"{server_cpu / run['wall_s']:.0%}",
            ]
        )
    share = shares["kimi_extract"]
    return Section(
        key="2",
        title="Latency-bound throughput",
        command="python benchmarks/run.py --only 2",
        headers=[
            "client",
            "rows",
            "concurrency",
            "wall s",
            "ideal s",
            "rows/s",
            "ideal rows/s",
            "of ideal",
            "server peak in flight",
            "lost",
            "CPU ms/row",
            "server busy",
        ],
        rows=table,
        targets=[
            (
                f">= {TARGET_SHARE:.0%} of ideal throughput ({concurrency} / {latency:g} s = "
                f"{ideal:.0f} rows/s)",
                f"{share:.0%}",
                share >= TARGET_SHARE,
            )
        ],
        notes=[
            f"Simulator ttft_s={latency:g} (every request takes {latency:g} s), no limits. "
            f"'ideal s' = ceil(rows / concurrency) x {latency:g} s.",
            f"Peers run {peer_rows:,} rows (they are CPU-bound here; more rows only take longer).",
            "kimi_extract runs with its defaults (adaptive sending starts slowly and grows to the "
            "concurrency) and with `adaptive=False` (the concurrency from the first request), "
            "which separates the cost of the ramp from the cost of client CPU. 'server peak in "
            "flight' is the most requests the simulator held at once (its /stats); 'server "
            "busy' is the simulator process's CPU seconds over the client's wall seconds (it is "
            "one process: near 100% means the simulator, not the client, set the pace).",
        ],
        data={"shares": shares},
    )
