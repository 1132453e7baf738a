"""7. The limiter matrix on an independent rate-limited server, with the cookbook's peer.

    python benchmarks/run.py --only 7             # writes the table into RESULTS.md
    python benchmarks/bench_limiters.py           # the same, printed only
    python benchmarks/bench_limiters.py --cells "sliding 10 s,token bucket" --rows 200

Every cell starts two fresh ``gateway_server.py`` processes (not the simulator: their limits are
``ratelimits.Shape``) with the same limit, and runs in the same moment kimi_extract against one
and the openai SDK + tenacity (the OpenAI cookbook's rate-limit pattern, ``_gateway_client.py``)
against the other, each in its own process, each told only ``concurrency=100``. Answers take 1 s;
refusals come back at once. Requests, refusals and tokens are counted by the servers.

Shapes, for runs of 200 rows (limits per minute RPM 300 = 5/s, or as noted) and 2,000 rows (ten
times the limits): fixed window and sliding log in 10 s windows (each window holds a sixth of the
RPM) and in 60 s windows (RPM 120 / 1,200, so the limit binds within the run); a token bucket
with 2 s of burst; concurrency 5 / 50; TPM 60,000 / 600,000 in a sliding 10 s window (the tokens
a server counts are a quarter of the body's bytes plus 20); and an RPM that halves 30 s into the
run (sliding 10 s). Each in three 429 styles: Kimi's text naming the limit and the wait; a
generic "Rate limit reached" with ``Retry-After``; the same with nothing. Random refusals: 30 % of
requests refused as "engine overloaded" on a concurrency-limited server, against the same server
without them.

"limit rows/s" is what the binding limit sustains over the run: for rates, the last row sent at
the limit's pace and answered (``rows / ((rows - 1) / rate + 1 s)``; TPM: at the client's own
tokens per row as counted by the server); for concurrency, ``ceil(rows / C)`` rounds of 1 s; for
the halving limit, the old pace until the change and the new one after. A window that takes a
burst into its first window can let a run beat that (over 100 %). "refused": 429s of the limit
over all requests (random refusals not counted). Cells run ``KX_BENCH_JOBS`` at a time (default
2; each cell runs two clients and two servers at once).

``limiters_virtual.py`` runs the same cells for kimi_extract alone on a virtual clock (no peer, no
HTTP, no CPU load): what the limiter's decisions achieve, apart from this machine's load.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from _common import Section, peer_available, run_worker
from _server import free_port, running

HERE = Path(__file__).resolve().parent
LATENCY_S = 1.0
CONCURRENCY = 100
STYLES = ("kimi", "retry-after", "bare")
PEER = "openai+tenacity"
TARGET_SHARE, TARGET_DROP, TARGET_KEPT = 0.90, 0.85, 0.90
TARGET_REFUSED = {200: 0.05, 2000: 0.02}


def cells(rows: int, scale: float | None = None) -> list[dict[str, Any]]:
    """The matrix for runs of ``rows``: the base limits for 200 rows, scaled by ``scale``
    (default ``rows / 200``)."""
    k = rows / 200 if scale is None else scale
    rpm, rpm60, tpm, slots = int(300 * k), int(120 * k), int(60_000 * k), int(5 * k)
    out: list[dict[str, Any]] = []
    shapes = [
        ("fixed 10 s", {"kind": "fixed", "per_minute": rpm, "window_s": 10.0}, "rate"),
        ("sliding 10 s", {"kind": "sliding", "per_minute": rpm, "window_s": 10.0}, "rate"),
        ("fixed 60 s", {"kind": "fixed", "per_minute": rpm60, "window_s": 60.0}, "rate"),
        ("sliding 60 s", {"kind": "sliding", "per_minute": rpm60, "window_s": 60.0}, "rate"),
        ("token bucket", {"kind": "bucket", "per_minute": rpm, "burst": 2 * rpm / 60}, "rate"),
        ("concurrency", {"kind": "concurrency", "concurrency": slots}, "concurrency"),
        (
            "TPM 10 s",
            {"kind": "sliding", "per_minute": tpm, "unit": "tokens", "window_s": 10.0},
            "tpm",
        ),
        (
            "halves at 30 s",
            {
                "kind": "sliding",
                "per_minute": rpm,
                "window_s": 10.0,
                "change_at": 30.0,
                "change_to": rpm // 2,
            },
            "halving",
        ),
    ]
    for name, shape, kind in shapes:
        for style in STYLES:
            out.append({"name": name, "shape": shape, "kind": kind, "style": style, "rows": rows})
    for share in (0.0, 0.3):
        shape = {"kind": "concurrency", "concurrency": slots, "random_share": share, "seed": 1}
        label = "random 30 %" if share else "random: none"
        out.append({"name": label, "shape": shape, "kind": "random", "style": "kimi", "rows": rows})
    return out


@contextlib.contextmanager
def served(shape: dict[str, Any], style: str) -> Iterator[str]:
    """A fresh ``gateway_server.py`` process; yields its base URL."""
    port = free_port()
    spec = {"port": port, "shape": shape, "style": style, "latency_s": LATENCY_S}
    command = [sys.executable, str(HERE / "gateway_server.py"), json.dumps(spec)]
    with running(command, port, cwd=HERE) as base_url:
        yield base_url


def _stats(base_url: str) -> dict[str, Any]:
    with urllib.request.urlopen(base_url + "/stats", timeout=10) as response:
        data: dict[str, Any] = json.loads(response.read())
    return data


def _client(cell: dict[str, Any], client: str) -> dict[str, Any]:
    with served(cell["shape"], cell["style"]) as base_url:
        spec = {
            "client": client,
            "base_url": base_url,
            "rows": cell["rows"],
            "concurrency": CONCURRENCY,
        }
        run = run_worker("_gateway_client", spec, timeout=3600)
        stats = _stats(base_url)
    refused = sum(n for kind, n in stats["refused"].items() if kind != "random")
    requests = stats["requests"]
    return {
        **run,
        "rate": run["ok"] / run["wall_s"],
        "lost": cell["rows"] - run["ok"],
        "requests": requests,
        "refused": refused,
        "refused_share": refused / requests if requests else 0.0,
        "tokens_per_row": stats["tokens"] / max(1, stats["accepted"]),
    }


def limit_rate(cell: dict[str, Any], tokens_per_row: float) -> float:
    """Rows per second the binding limit sustains over the cell's run (module docstring)."""
    rows, shape = cell["rows"], cell["shape"]
    if cell["kind"] in ("concurrency", "random"):
        return rows / (math.ceil(rows / shape["concurrency"]) * LATENCY_S)
    rate = shape["per_minute"] / 60
    if cell["kind"] == "tpm":
        rate /= tokens_per_row
    if cell["kind"] == "halving":
        before = rate * shape["change_at"]
        if rows > before:
            end = shape["change_at"] + (rows - before) / (shape["change_to"] / 60) + LATENCY_S
            return rows / end
    return rows / ((rows - 1) / rate + LATENCY_S)


def run_cell(cell: dict[str, Any], with_peer: bool) -> dict[str, Any]:
    """Both clients at once, each against its own fresh server."""
    clients = ["kimi_extract", *([PEER] if with_peer else [])]
    with ThreadPoolExecutor(len(clients)) as pool:
        results = dict(zip(clients, pool.map(lambda c: _client(cell, c), clients), strict=True))
    for result in results.values():
        result["limit"] = limit_rate(cell, result["tokens_per_row"])
        result["share"] = result["rate"] / result["limit"]
    key = f"{cell['rows']} {cell['name']} {cell['style']}"
    print(
        json.dumps(
            {key: {c: {k: v for k, v in r.items() if k != "errors"} for c, r in results.items()}}
        ),
        flush=True,
    )
    return results


def _fmt(r: dict[str, Any] | None, key: str, spec: str) -> str:
    return "" if r is None else format(r[key], spec)


def measure(quick: bool, only: list[str] | None = None, sizes: list[int] | None = None) -> Section:
    sizes = sizes or ([40] if quick else [200, 2000])
    matrix = [c for rows in sizes for c in cells(rows, 1.0 if quick else None)]
    if quick:  # the suite's smoke run: two cells of 40 rows at the 200-row limits (~10 s)
        matrix = [
            c
            for c in matrix
            if (c["name"], c["style"]) in {("sliding 10 s", "kimi"), ("token bucket", "bare")}
        ]
    if only:
        matrix = [c for c in matrix if c["name"] in only]
    with_peer = peer_available("openai")
    jobs = int(os.environ.get("KX_BENCH_JOBS", "2"))
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        outcomes = list(pool.map(lambda c: run_cell(c, with_peer), matrix))
    table: list[list[Any]] = []
    targets: list[tuple[str, str, bool | None]] = []
    data: dict[str, Any] = {}
    clean: dict[int, dict[str, Any]] = {}
    for cell, results in zip(matrix, outcomes, strict=True):
        ours, peer = results["kimi_extract"], results.get(PEER)
        key = f"{cell['rows']} {cell['name']} {cell['style']}"
        data[key] = {"cell": cell, **results}
        if cell["name"] == "random: none":
            clean[cell["rows"]] = results
        ratio = ours["rate"] / peer["rate"] if peer and peer["rate"] else math.inf
        table.append(
            [
                cell["rows"],
                cell["name"],
                cell["style"],
                f"{ours['limit']:.2f}",
                f"{ours['rate']:.2f}",
                f"{ours['share']:.0%}",
                f"{ours['refused_share']:.1%}",
                ours["lost"],
                _fmt(peer, "rate", ".2f"),
                _fmt(peer, "share", ".0%"),
                _fmt(peer, "refused_share", ".1%"),
                "" if peer is None else peer["lost"],
                "" if peer is None else f"{ratio:.2f}",
                ours.get("bound_by") or "",
            ]
        )
        cap = TARGET_REFUSED.get(cell["rows"], 0.05)
        if cell["kind"] == "random":
            if cell["name"] == "random 30 %" and cell["rows"] in clean:
                kept = ours["rate"] / clean[cell["rows"]]["kimi_extract"]["rate"]
                targets.append(
                    (
                        f"{cell['rows']} rows, 30 % random refusals: >= {TARGET_KEPT:.0%} of the "
                        "no-fault rate, 0 lost",
                        f"{kept:.0%}, {ours['lost']} lost",
                        kept >= TARGET_KEPT and ours["lost"] == 0,
                    )
                )
            continue
        floor = TARGET_DROP if cell["kind"] == "halving" else TARGET_SHARE
        met = (
            ours["share"] >= floor
            and ours["refused_share"] <= cap
            and ours["lost"] == 0
            and (peer is None or ratio >= 1.0)
        )
        targets.append(
            (
                f"{key}: >= {floor:.0%} of the limit, <= {cap:.0%} refused, 0 lost, >= peer",
                f"{ours['share']:.0%}, {ours['refused_share']:.1%}, {ours['lost']} lost, "
                + ("no peer" if peer is None else f"{ratio:.2f}x"),
                met,
            )
        )
    return Section(
        key="7",
        title="Limiter matrix (independent rate-limited server)",
        command="python benchmarks/run.py --only 7",
        headers=[
            "rows",
            "shape",
            "429s",
            "limit rows/s",
            "rows/s",
            "of limit",
            "refused",
            "lost",
            "peer rows/s",
            "peer of limit",
            "peer refused",
            "peer lost",
            "x peer",
            "client says bound by",
        ],
        rows=table,
        targets=targets,
        notes=[
            "Server: benchmarks/gateway_server.py (aiohttp; limits from benchmarks/ratelimits.py, "
            "not the simulator), 1 s answers, refusals at once. Both clients told only "
            f"concurrency={CONCURRENCY}; peer: {PEER} (the OpenAI cookbook's pattern, "
            "benchmarks/_gateway_client.py). Same limits, two fresh servers, run at once.",
            "Shapes, styles and 'limit rows/s' are described in benchmarks/bench_limiters.py's "
            "docstring. 'refused': the limit's 429s over all requests (random refusals not "
            "counted); 'x peer': kimi_extract rows/s over the peer's.",
        ],
        data=data,
    )


if __name__ == "__main__":
    import argparse

    import report

    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--cells", default="", help="comma-separated shape names")
    parser.add_argument("--rows", default="", help="comma-separated run sizes (200,2000)")
    args = parser.parse_args()
    section = measure(
        args.quick,
        [c.strip() for c in args.cells.split(",") if c.strip()] or None,
        [int(r) for r in args.rows.split(",") if r.strip()] or None,
    )
    print(report.console_table(section))
