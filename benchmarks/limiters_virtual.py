"""The limiter matrix (``bench_limiters.py``) for kimi_extract alone, on a virtual clock.

    python benchmarks/limiters_virtual.py                  # 200 and 2,000 rows
    python benchmarks/limiters_virtual.py --rows 200 --cells "sliding 10 s"
    python benchmarks/limiters_virtual.py --refusal-s 0.05  # each 429 read 50 ms late
    python benchmarks/limiters_virtual.py --rtt-s 0.2       # a server 200 ms away

The same cells, limits, 429 styles and "limit rows/s" as section 7, but each run is the real
``Transport`` and ``Limiter`` against the same ``ratelimits.Shape`` inside one process, on the
virtual clock of ``tests/http/virtual_gateway.py``: a run of minutes takes a fraction of a second of
CPU, and the figures do not depend on this machine's load. Answers take 1 s, refusals come back
at once (``--refusal-s``: after that long, as a busy event loop reads them on the real clock;
``--rtt-s``: a server that far away, each 429 back a round trip later and each connection the
pool opens reporting it), prompts are padded to about the tokens per row the real run's server
counts.

What it leaves out, so it is no substitute for section 7: the peer (the openai SDK and tenacity
sleep on the real clock), HTTP, the Extractor around the transport, and the client's CPU (a busy
event loop reads its 429s late). It shows what the limiter's decisions alone achieve; a cell that
misses here misses by design, one that misses only in section 7 misses by load or overhead.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import bench_limiters  # noqa: E402

from tests.http import virtual_gateway  # noqa: E402

#: Characters added to each prompt: ~195 tokens per row as the server counts them (a quarter of
#: the body's bytes plus the answer's 20), as in section 7's runs.
PAD = 620


class _Counting(virtual_gateway.VirtualGateway):
    """The virtual gateway, counting the tokens of accepted requests."""

    tokens = 0

    async def post(self, url: str, payload: bytes) -> Any:
        reply = await super().post(url, payload)
        if reply.status == 200:
            ratelimits = virtual_gateway.ratelimits
            self.tokens += ratelimits.body_tokens(payload) + ratelimits.COMPLETION_TOKENS
        return reply


def run_cell(cell: dict[str, Any], refusal_s: float = 0.0, rtt_s: float = 0.0) -> dict[str, Any]:
    """One cell, kimi_extract only: the same measures as section 7's (each 429 coming back
    after ``refusal_s``, and a round trip ``rtt_s`` more; each new connection reports it)."""
    virtual_gateway.VirtualGateway = _Counting  # type: ignore[misc]
    shape = virtual_gateway.Shape(**cell["shape"])
    out = virtual_gateway.run(
        shape,
        rows=cell["rows"],
        workers=bench_limiters.CONCURRENCY,
        style=cell["style"],
        pad=PAD,
        refusal_s=refusal_s + rtt_s,
        connect_s=rtt_s,
    )
    gateway = out.gateway
    accepted = len(gateway.accepted_times())
    tokens_per_row = gateway.tokens / max(1, accepted)  # type: ignore[attr-defined]
    limit = bench_limiters.limit_rate(cell, tokens_per_row)
    requests = len(gateway.attempts)
    refused = sum(1 for a in gateway.attempts if a.refused and a.refused != "random")
    rate = out.ok / out.end if out.end else 0.0
    return {
        "limit": limit,
        "rate": rate,
        "share": rate / limit,
        "requests": requests,
        "refused_share": refused / requests if requests else 0.0,
        "lost": cell["rows"] - out.ok,
        "tokens_per_row": tokens_per_row,
        "bound_by": out.limiter.bound_by() or "",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cells", default="", help="comma-separated shape names")
    parser.add_argument("--rows", default="200,2000", help="comma-separated run sizes")
    parser.add_argument(
        "--refusal-s", type=float, default=0.0, help="seconds each 429 takes to come back"
    )
    parser.add_argument(
        "--rtt-s", type=float, default=0.0, help="the server's round trip (429s and connections)"
    )
    parser.add_argument("--json", action="store_true", help="one JSON line per cell")
    args = parser.parse_args()
    only = {c.strip() for c in args.cells.split(",") if c.strip()}
    print(
        "| rows | shape | 429s | limit rows/s | rows/s | of limit | refused | lost | target |\n"
        "|---|---|---|---|---|---|---|---|---|"
    )
    for rows in (int(r) for r in args.rows.split(",") if r.strip()):
        clean: float | None = None
        for cell in bench_limiters.cells(rows):
            if only and cell["name"] not in only:
                continue
            r = run_cell(cell, args.refusal_s, args.rtt_s)
            cap = bench_limiters.TARGET_REFUSED.get(rows, 0.05)
            if cell["kind"] == "random":
                if cell["name"] == "random: none":
                    clean = r["rate"]
                    met = ""
                else:
                    kept = r["rate"] / clean if clean else float("nan")
                    ok = kept >= bench_limiters.TARGET_KEPT and r["lost"] == 0
                    met = f"{kept:.0%} of no-fault: {'met' if ok else 'missed'}"
            else:
                floor = (
                    bench_limiters.TARGET_DROP
                    if cell["kind"] == "halving"
                    else bench_limiters.TARGET_SHARE
                )
                ok = r["share"] >= floor and r["refused_share"] <= cap and r["lost"] == 0
                met = "met" if ok else "missed"
            if args.json:
                print(json.dumps({"cell": f"{rows} {cell['name']} {cell['style']}", **r}))
            print(
                f"| {rows} | {cell['name']} | {cell['style']} | {r['limit']:.2f} | "
                f"{r['rate']:.2f} | {r['share']:.0%} | {r['refused_share']:.1%} | {r['lost']} | "
                f"{met} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
