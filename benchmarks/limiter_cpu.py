"""Client CPU while the limiter holds the rows back: waiters as cohorts vs each for itself.

    python benchmarks/limiter_cpu.py [--rows 600] [--rpm 3000]

The simulator runs in its own process (zero latency, no limit of its own); the client is told
``rpm`` and runs ``rows`` rows at concurrency 100 and 256, so nearly every row waits for the
pacer. Each run's CPU time in this process is read; ``cohorts`` is the limiter as shipped
(``kimi_extract.http.limiter.COHORTS``: one waiter sleeps for each moment, the rest park
behind it), ``each for itself`` the same limiter with every waiter sleeping and checking on its
own, as it did before. Prints a table.
"""

from __future__ import annotations

import argparse
from typing import Literal

from pydantic import BaseModel

import kimi_extract as kx
from kimi_extract.http import limiter

try:
    from ._server import API_KEY, simulator_process
    from .transport_cpu import cpu_per_row
except ImportError:  # run as a script
    from _server import API_KEY, simulator_process  # type: ignore[no-redef]
    from transport_cpu import cpu_per_row  # type: ignore[no-redef]


class Review(BaseModel):
    sentiment: Literal["positive", "negative", "neutral"]


def measure(base_url: str, concurrency: int, rows: int, rpm: int) -> tuple[float, float]:
    """CPU ms per row and rows/s of one run held by a told ``rpm``."""
    ex = kx.Extractor(
        Review,
        base_url=base_url,
        api_key=API_KEY,
        concurrency=concurrency,
        rpm=rpm,
        progress=False,
    )
    return cpu_per_row(ex, [f"review number {i}: the battery is fine" for i in range(rows)])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=600)
    parser.add_argument("--rpm", type=int, default=3000)
    args = parser.parse_args()
    print(f"{args.rows} rows, told rpm={args.rpm}, simulator at zero latency")
    print(f"{'waiters':<16} {'concurrency':>11} {'CPU ms/row':>11} {'rows/s':>8}")
    with simulator_process() as base_url:
        kx.Extractor(Review, base_url=base_url, api_key=API_KEY, progress=False).run(["warm"] * 20)
        for concurrency in (100, 256):
            for cohorts in (True, False):
                limiter.COHORTS = cohorts
                try:
                    ms, rate = measure(base_url, concurrency, args.rows, args.rpm)
                finally:
                    limiter.COHORTS = True
                name = "cohorts" if cohorts else "each for itself"
                print(f"{name:<16} {concurrency:>11} {ms:>11.2f} {rate:>8.1f}", flush=True)


if __name__ == "__main__":
    main()
