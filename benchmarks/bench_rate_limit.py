"""3. A rate-limited server: RPM 3000, concurrency 50, 200 ms per request, 429s without Retry-After.

Every client gets a fresh simulator process (fresh rate windows) and the same settings: 1,000
rows, concurrency 100, its library's default retries. The 429 and request counts come from the
server's ``GET /stats``, so they count every request each client really sent.
"""

from __future__ import annotations

import contextlib
from functools import partial
from typing import Any

from _common import Section, peer_available, run_worker
from _server import one_server, served, stats, stats_delta
from peers import PEERS

RPM, MAX_CONCURRENCY, LATENCY_S = 3000, 50, 0.2
SERVER: dict[str, Any] = {
    "rpm": RPM,
    "max_concurrency": MAX_CONCURRENCY,
    "ttft_s": LATENCY_S,
    "retry_after_header": False,
}
TARGET_429_SHARE = 0.02
TARGET_RATE_SHARE = 0.95


def limit_rate(rows: int, rpm: int, max_concurrency: int, latency: float) -> float:
    """The fastest rows/s the server's limits allow for a run of ``rows`` one-request rows.

    Up to ``rpm`` requests fit in one 60 s window, so for ``rows <= rpm`` only the concurrency
    limit binds (``max_concurrency / latency``); longer runs are held to ``rpm / 60`` on average.
    """
    by_concurrency = max_concurrency / latency
    return by_concurrency if rows <= rpm else min(by_concurrency, rpm / 60)


def _add_row(
    table: list[list[Any]],
    figures: dict[str, dict[str, float]],
    client: str,
    run: dict[str, Any],
    by_status: dict[str, int],
    rows: int,
    best: float,
    rpm_rate: float,
) -> None:
    requests = sum(by_status.values())
    throttled = by_status.get("429", 0)
    ok = run["ok"]
    rate = ok / run["wall_s"]
    figures[client] = {
        "lost": rows - ok,
        "requests": requests,
        "429": throttled,
        "share_429": throttled / requests if requests else 0.0,
        "per_success": requests / ok if ok else float("inf"),
        "rate": rate,
        "of_limit": rate / best,
    }
    f = figures[client]
    table.append(
        [
            client,
            ok,
            int(f["lost"]),
            requests,
            throttled,
            f"{f['share_429']:.1%}",
            f"{f['per_success']:.2f}",
            f"{run['wall_s']:.1f}",
            f"{rate:.0f}",
            f"{f['of_limit']:.0%}",
            f"{rate / rpm_rate:.0%}",
        ]
    )


def measure(quick: bool) -> Section:
    rows, concurrency = (120, 100) if quick else (1000, 100)
    best = limit_rate(rows, RPM, MAX_CONCURRENCY, LATENCY_S)
    rpm_rate = RPM / 60
    clients = ["kimi_extract", *(p for p in PEERS if peer_available(p))]
    table: list[list[Any]] = []
    figures: dict[str, dict[str, float]] = {}
    with contextlib.ExitStack() as stack:
        # A fresh server (fresh rate windows) per client; --quick shares one to save time.
        fresh = stack.enter_context(one_server(**SERVER)) if quick else partial(served, **SERVER)
        for client in clients:
            with fresh() as base_url:
                before = stats(base_url)
                spec = {"client": client, "base_url": base_url, "rows": rows}
                spec["concurrency"] = concurrency
                run = run_worker("_client", spec)["runs"][0]
                by_status = stats_delta(before, stats(base_url))
            _add_row(table, figures, client, run, by_status, rows, best, rpm_rate)
    ours = figures["kimi_extract"]
    return Section(
        key="3",
        title="Rate-limited server",
        command="python benchmarks/run.py --only 3",
        headers=[
            "client",
            "rows ok",
            "rows lost",
            "requests",
            "429s",
            "429 share",
            "requests/success",
            "wall s",
            "rows/s",
            "of limit rate",
            "of RPM/60",
        ],
        rows=table,
        targets=[
            ("0 rows lost", str(int(ours["lost"])), ours["lost"] == 0),
            (
                f"429s <= {TARGET_429_SHARE:.0%} of requests",
                f"{ours['share_429']:.1%}",
                ours["share_429"] <= TARGET_429_SHARE,
            ),
            (
                f">= {TARGET_RATE_SHARE:.0%} of the limit's rate ({best:.0f} rows/s)",
                f"{ours['of_limit']:.0%} ({ours['rate']:.0f} rows/s)",
                ours["of_limit"] >= TARGET_RATE_SHARE,
            ),
        ],
        notes=[
            f"Simulator: rpm={SERVER['rpm']}, max_concurrency={SERVER['max_concurrency']}, "
            f"ttft_s={SERVER['ttft_s']}, no Retry-After header (Kimi's 429 message names the "
            f"limit and a wait). Clients: {rows:,} rows, concurrency {concurrency}, default "
            "retries (kimi_extract 8 with adaptive rate; openai SDK 2; instructor: SDK's 2 "
            "plus its own).",
            f"'of limit rate': rows/s over the fastest the limits allow for this run, "
            f"{best:.0f} rows/s ({rows:,} requests fit in one 60 s RPM window, so the "
            f"concurrency limit binds: {SERVER['max_concurrency']} / {SERVER['ttft_s']} s). "
            f"'of RPM/60' compares with the sustained RPM rate, {rpm_rate:.0f} rows/s.",
        ],
        data={"figures": figures},
    )
