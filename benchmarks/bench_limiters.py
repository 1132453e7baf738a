"""7. The limiter matrix: every limiter shape, with no limits told and with the limits told.

    python benchmarks/run.py --only 7          # writes the table into RESULTS.md
    python benchmarks/bench_limiters.py        # the same, printed only (--quick: smaller)

Each cell runs kimi_extract in its own process against a fresh simulator process
(``_server.served``) and counts every request the client really sent from the server's
``GET /stats``. "Untold" runs set only ``concurrency=100`` and must find the server's limits from
its 429s (Kimi's messages, no Retry-After header); "told" runs also pass the server's limits as
``rpm=`` / ``tpm=`` / ``concurrency=``.

Shapes (all 1 s = 1 s; RPM-bound shapes: RPM 3000 = 50 requests/s, concurrency 50, 200 ms per
request, so RPM binds at 50 rows/s):

- fixed window: at most 300 requests per 6 s window (see below), the count starting again at
  each boundary (windows start at the first request);
- sliding window: at most 300 requests in any 6 s;
- token bucket: 50/s refilled, 0.1 s worth (5 requests) of burst;
- concurrency only: 50 in flight, 1 s per request (50 rows/s);
- TPM-bound: the long (~3,200-token) instructions, TPM 7.8 M in a sliding 6 s window (about 40
  rows/s), concurrency 50, 200 ms;
- heavy-tailed latency: lognormal (median 1 s, p99 10 s, mean 1.63 s), concurrency 50 (about 31
  rows/s);
- latency-bound: no limits, 1 s per request, concurrency 500, 10,000 rows (as section 2 and
  #16), with ``adaptive=True`` (the default) and ``adaptive=False``;
- random 429s: concurrency 50, 1 s per request, RPM 6000 (twice what the run needs), and 30 % of
  requests refused with "max RPM: 6000, please try again after 1 seconds" whatever the load;
  compared with the same server without them. 2,000 rows: a refused row must wait the second it
  is told and may be refused again, so the last rows of any run straggle for ~3 s (50 rows in the
  last round, each refused k times in a row with probability 0.3^k), a fixed cost that a longer
  run dilutes.

The windows are 6 s, not Kimi's 60 s, so a run of ~20 s sees several windows: the simulator's
``window_s=6`` keeps the limits per minute (the 429 message says "max RPM: 3000") and lets each
6 s window hold a tenth of them. That is harder on a client that bursts (a 1 s burst is a sixth of
a window rather than a sixtieth) and the same for one that paces smoothly; the client is not told
the window. "limit rows/s" is the rate the binding limit sustains (RPM / 60; TPM / 60 / tokens per
row, as billed), over a run whose last request is sent at that pace and then answered (with the
long instructions, after one cache-warming round trip first: ``cache_warm``); for the
concurrency-bound shapes it is the best schedule of this run's rows (``ceil(rows /
concurrency)`` rounds for a fixed latency; greedy list scheduling of the server's seeded latency
draws for the lognormal one), so a finite run's tail is not counted against the client. A run
that bursts into an empty first window can exceed 100 %.
"""

from __future__ import annotations

import heapq
import json
import math
import sys
from typing import Any

from _common import Section, run_worker
from _server import served, stats

RPM, CONCURRENCY, LATENCY_S, WINDOW_S = 3000, 50, 0.2, 6.0
TPM = 7_800_000
CLIENT_CONCURRENCY = 100
TARGET_UNTOLD, TARGET_TOLD, TARGET_429 = 0.95, 0.98, 0.02
TARGET_LATENCY, TARGET_RANDOM_429 = 0.95, 0.90

RPM_SERVER = {"rpm": RPM, "max_concurrency": CONCURRENCY, "ttft_s": LATENCY_S}


def _shapes(quick: bool) -> list[dict[str, Any]]:
    rows = 100 if quick else 1000
    window = {"window_s": WINDOW_S}
    # --quick (the test suite's smoke run): a lognormal latency ten times shorter.
    tail = {"latency_median_s": 0.1, "latency_p99_s": 1.0} if quick else {}
    return [
        {
            "name": "fixed window",
            "server": {**RPM_SERVER, **window, "rate_shape": "fixed"},
            "told": {"rpm": RPM, "concurrency": CONCURRENCY},
            "binding": f"RPM {RPM}",
            "rows": rows,
        },
        {
            "name": "sliding window",
            "server": {**RPM_SERVER, **window, "rate_shape": "sliding"},
            "told": {"rpm": RPM, "concurrency": CONCURRENCY},
            "binding": f"RPM {RPM}",
            "rows": rows,
        },
        {
            "name": "token bucket",
            "server": {**RPM_SERVER, "rate_shape": "bucket", "burst_s": 0.1},
            "told": {"rpm": RPM, "concurrency": CONCURRENCY},
            "binding": f"RPM {RPM}",
            "rows": rows,
        },
        {
            "name": "concurrency only",
            "server": {"max_concurrency": CONCURRENCY, "ttft_s": 1.0},
            "told": {"concurrency": CONCURRENCY},
            "binding": f"concurrency {CONCURRENCY}",
            "rows": rows,
        },
        {
            "name": "TPM-bound",
            "server": {"tpm": TPM, "max_concurrency": CONCURRENCY, "ttft_s": LATENCY_S, **window},
            "told": {"tpm": TPM, "concurrency": CONCURRENCY},
            "binding": f"TPM {TPM:,}",
            "rows": rows,
            "instructions": "long",
        },
        {
            "name": "heavy-tailed latency",
            "server": {"max_concurrency": CONCURRENCY, "latency": "lognormal", **tail},
            "told": {"concurrency": CONCURRENCY},
            "binding": f"concurrency {CONCURRENCY}",
            "rows": rows,
        },
    ]


def best_makespan(durations: list[float], slots: int) -> float:
    """Greedy list scheduling of ``durations`` (in order) on ``slots``: when the last ends."""
    ends = [0.0] * slots
    heapq.heapify(ends)
    for duration in durations:
        heapq.heappush(ends, heapq.heappop(ends) + duration)
    return max(ends)


def _limit_rate(shape: dict[str, Any], rows: int, tokens_per_row: float) -> float:
    server = shape["server"]
    # With the long (cacheable) instructions the client first sends one request and fans out
    # after its answer, so the shared prefix is written to Kimi's cache once (``cache_warm``, on
    # by default): the fastest run that does so starts one round trip later.
    warm_s = server["ttft_s"] if shape.get("instructions") == "long" else 0.0
    rate = None
    if "rpm" in server and server["rpm"] / 60 < server["max_concurrency"] / server["ttft_s"]:
        rate = server["rpm"] / 60
    if "tpm" in server:
        rate = server["tpm"] / 60 / tokens_per_row
    if rate is not None:  # the last request sent at the limit's pace, then answered
        return rows / (warm_s + (rows - 1) / rate + server["ttft_s"])
    slots = server["max_concurrency"]
    if server.get("latency") == "lognormal":
        from kimi_extract.simulator.limits import Latency

        latency = Latency(
            0.0,
            shape="lognormal",
            median_s=server.get("latency_median_s", 1.0),
            p99_s=server.get("latency_p99_s", 10.0),
            seed=0,
        )
        return rows / best_makespan([latency.draw() for _ in range(rows)], slots)
    return rows / (math.ceil(rows / slots) * server["ttft_s"])


def _run(
    server: dict[str, Any], rows: int, options: dict[str, Any], instructions: str = "short"
) -> dict[str, Any]:
    with served(**server) as base_url:
        spec = {
            "client": "kimi_extract",
            "base_url": base_url,
            "rows": rows,
            "concurrency": options.pop("concurrency", CLIENT_CONCURRENCY),
            "options": options,
            "instructions": instructions,
        }
        run = run_worker("_client", spec)["runs"][0]
        counters = stats(base_url)
    by_status = counters["by_status"]
    requests = sum(by_status.values())
    refused = by_status.get("429", 0)
    tokens = counters["tokens"]["prompt"] + counters["tokens"]["completion"]
    return {
        "ok": run["ok"],
        "lost": rows - run["ok"],
        "wall_s": run["wall_s"],
        "rate": run["ok"] / run["wall_s"],
        "requests": requests,
        "429": refused,
        "share_429": refused / requests if requests else 0.0,
        "tokens_per_row": tokens / max(1, run["ok"]),
        "bound_by": run.get("bound_by"),
    }


def _row(label: str, told: str, binding: str, limit: float, r: dict[str, Any]) -> list[Any]:
    return [
        label,
        told,
        binding,
        f"{limit:.1f}",
        f"{r['rate']:.1f}",
        f"{r['rate'] / limit:.0%}",
        r["requests"],
        r["429"],
        f"{r['share_429']:.1%}",
        r["lost"],
        f"{r['wall_s']:.1f}",
        r["bound_by"] or "",
    ]


def measure(quick: bool) -> Section:
    table: list[list[Any]] = []
    targets: list[tuple[str, str, bool | None]] = []
    data: dict[str, Any] = {}
    for shape in _shapes(quick):
        rows = shape["rows"]
        instructions = shape.get("instructions", "short")
        # --quick tells the limits for one shape only, to keep the smoke run short.
        for told in (False, True) if not quick or shape["name"] == "token bucket" else (False,):
            options = dict(shape["told"]) if told else {}
            result = _run(shape["server"], rows, options, instructions)
            limit = _limit_rate(shape, rows, result["tokens_per_row"])
            share = result["rate"] / limit
            label = "told" if told else "untold"
            table.append(_row(shape["name"], label, shape["binding"], limit, result))
            data[f"{shape['name']} {label}"] = {**result, "limit": limit, "share": share}
            if told:
                met = share >= TARGET_TOLD and result["429"] == 0 and result["lost"] == 0
                goal = f">= {TARGET_TOLD:.0%}, 0 refused, 0 lost"
            else:
                met = (
                    share >= TARGET_UNTOLD
                    and result["share_429"] <= TARGET_429
                    and result["lost"] == 0
                )
                goal = f">= {TARGET_UNTOLD:.0%}, <= {TARGET_429:.0%} refused, 0 lost"
            targets.append(
                (
                    f"{shape['name']}, {label}: {goal}",
                    f"{share:.0%}, {result['share_429']:.1%} refused, {result['lost']} lost",
                    met,
                )
            )
            print(
                json.dumps({shape["name"]: label, **data[f"{shape['name']} {label}"]}), flush=True
            )
    # Latency-bound: the slow start's cost.
    latency_rows, slots = (400, 200) if quick else (10_000, 500)
    rows = latency_rows
    ideal = rows / math.ceil(rows / slots)
    for adaptive in (True, False):
        result = _run({"ttft_s": 1.0}, rows, {"concurrency": slots, "adaptive": adaptive})
        label = f"adaptive={adaptive}"
        table.append(_row("latency-bound", label, f"concurrency {slots}", ideal, result))
        data[f"latency-bound {label}"] = {**result, "limit": ideal}
        if adaptive:
            share = result["rate"] / ideal
            targets.append(
                (
                    f"latency-bound, adaptive=True: >= {TARGET_LATENCY:.0%} of ideal",
                    f"{share:.0%}",
                    share >= TARGET_LATENCY,
                )
            )
    # Random 429s that are not a rate signal. Twice the rows: a refused row waits 1 s and may be
    # refused again, so a run ends with a ~3 s tail of retries whatever the client does.
    rows = 100 if quick else 2000
    base = {"max_concurrency": CONCURRENCY, "ttft_s": 1.0, "rpm": 2 * RPM, "window_s": WINDOW_S}
    limit = rows / (math.ceil(rows / CONCURRENCY) * 1.0)
    clean = _run(base, rows, {})
    table.append(_row("random 429s: none", "untold", f"concurrency {CONCURRENCY}", limit, clean))
    noisy = _run({**base, "spurious_429_rate": 0.3}, rows, {})
    table.append(_row("random 429s: 30 %", "untold", f"concurrency {CONCURRENCY}", limit, noisy))
    kept = noisy["rate"] / clean["rate"]
    data["random 429s"] = {"clean": clean, "noisy": noisy, "kept": kept}
    targets.append(
        (
            f"30 % random 429s: >= {TARGET_RANDOM_429:.0%} of the no-fault rate, 0 lost",
            f"{kept:.0%} ({noisy['rate']:.1f} / {clean['rate']:.1f} rows/s), {noisy['lost']} lost",
            kept >= TARGET_RANDOM_429 and noisy["lost"] == 0,
        )
    )
    return Section(
        key="7",
        title="Limiter matrix",
        command="python benchmarks/run.py --only 7",
        headers=[
            "shape",
            "limits",
            "binding limit",
            "limit rows/s",
            "rows/s",
            "of limit",
            "requests",
            "429s",
            "429 share",
            "lost",
            "wall s",
            "client says bound by",
        ],
        rows=table,
        targets=targets,
        notes=[
            "Untold: only `concurrency=100`; told: the server's limits as `rpm=` / `tpm=` / "
            "`concurrency=`. Kimi-style 429 messages without Retry-After. Each cell: a fresh "
            "simulator process and a fresh client process; requests and 429s from the server's "
            "/stats.",
            f"Rows per cell: {_shapes(quick)[0]['rows']:,} (latency-bound: {latency_rows:,}). "
            "The shapes, the 6 s windows (limits stay per minute) and 'limit rows/s' are "
            "described in benchmarks/bench_limiters.py's docstring.",
            "'client says bound by': the limit RunReport.bound_by names (what the client learned "
            "or was told, and the rate it sent at).",
        ],
        data=data,
    )


if __name__ == "__main__":
    import report

    section = measure("--quick" in sys.argv)
    print(report.console_table(section))
