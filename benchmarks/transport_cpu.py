"""Client CPU per row: the httpx native pool vs the httpx-aiohttp transport.

    python benchmarks/transport_cpu.py [--rows 3000]

The simulator runs in its own process (zero latency); this process runs the whole kimi_extract
path (build, send, parse, validate, account, frame) and we read its CPU time. Prints a table.
"""

from __future__ import annotations

import argparse
import time
from typing import Literal

from pydantic import BaseModel

import kimi_extract as kx

try:
    from ._server import API_KEY, simulator_process
except ImportError:  # run as a script
    from _server import API_KEY, simulator_process  # type: ignore[no-redef]


class Review(BaseModel):
    sentiment: Literal["positive", "negative", "neutral"]
    aspects: list[str]


def measure(base_url: str, backend: str, concurrency: int, rows: int) -> tuple[float, float]:
    ex = kx.Extractor(
        Review,
        base_url=base_url,
        api_key=API_KEY,
        concurrency=concurrency,
        progress=False,
        http_backend=backend,
    )
    texts = [
        f"review number {i}: the battery is fine but the screen scratches" for i in range(rows)
    ]
    ex.run(texts[: min(200, rows)])  # warm up imports and the server
    return cpu_per_row(ex, texts)


def cpu_per_row(ex: kx.Extractor, texts: list[str]) -> tuple[float, float]:
    """Run ``texts`` through ``ex``: this process's CPU ms per row, and rows/s."""
    cpu, wall = time.process_time(), time.perf_counter()
    out = ex.run(texts)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    assert out["kx_error"].isna().all(), out["kx_error"].dropna().head()
    return cpu / len(texts) * 1000, len(texts) / wall


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=3000)
    args = parser.parse_args()
    print(f"{'backend':<10} {'concurrency':>11} {'CPU ms/row':>11} {'rows/s':>8}")
    with simulator_process() as base_url:
        for concurrency in (64, 256):
            for backend in ("httpx", "httpx-aiohttp", "aiohttp"):
                ms, rate = measure(base_url, backend, concurrency, args.rows)
                print(f"{backend:<10} {concurrency:>11} {ms:>11.2f} {rate:>8.0f}", flush=True)


if __name__ == "__main__":
    main()
