"""How many small requests/s the simulator serves on one core.

Starts ``serve`` in a separate process (one event loop = one core), then an aiohttp client at
concurrency 64 sends small non-streaming json_schema requests (distinct user text per request, so
nothing is memoized end to end) for a fixed count, and prints a table.

    python bench_simulator.py [--requests 20000] [--concurrency 64] [--effort low]
                              [--client aiohttp|raw] [--pin]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time

import aiohttp

KEY = "sk-sim-bench"
SCHEMA = {
    "type": "object",
    "properties": {
        "sentiment": {"type": "string", "enum": ["positive", "negative", "neutral"]},
        "aspects": {"type": "array", "items": {"type": "string"}},
        "rating": {"type": "integer"},
    },
    "required": ["sentiment", "aspects", "rating"],
    "additionalProperties": False,
}


def body(i: int, effort: str | None) -> dict:
    data = {
        "model": "kimi-k3.1-pro",
        "messages": [
            {"role": "system", "content": "Extract the sentiment and aspects of the review."},
            {
                "role": "user",
                "content": f"Review {i}: the battery is great but the screen scratches.",
            },
        ],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "review", "strict": True, "schema": SCHEMA},
        },
        "max_completion_tokens": 2048,
    }
    if effort:
        data["reasoning_effort"] = effort
    return data


async def load(url: str, total: int, concurrency: int, effort: str | None) -> tuple[float, dict]:
    counter = iter(range(total))
    statuses: dict[int, int] = {}
    headers = {"Authorization": f"Bearer {KEY}"}
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            for i in counter:
                async with session.post(url, json=body(i, effort), headers=headers) as response:
                    await response.read()
                    statuses[response.status] = statuses.get(response.status, 0) + 1

        # warm up (validator compile, connections)
        for i in range(50):
            async with session.post(url, json=body(-i, effort), headers=headers) as r:
                await r.read()
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.perf_counter() - started, statuses


async def load_raw(
    port: int, total: int, concurrency: int, effort: str | None
) -> tuple[float, dict]:
    """A minimal keep-alive HTTP/1.1 client on asyncio streams (less client CPU than aiohttp)."""
    requests = []
    for i in range(total):
        payload = json.dumps(body(i, effort)).encode()
        requests.append(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Authorization: Bearer " + KEY.encode() + b"\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload
        )
    counter = iter(requests)
    statuses: dict[int, int] = {}

    async def worker() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for request in counter:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            statuses[status] = statuses.get(status, 0) + 1
        writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started, statuses


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--effort", default="low", help="reasoning_effort, or '' to omit (max)")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--client", choices=["aiohttp", "raw"], default="aiohttp")
    parser.add_argument("--pin", action="store_true", help="server on CPU 0, client on CPU 1")
    args = parser.parse_args()
    pin = ["taskset", "-c", "0"] if args.pin else []
    if args.pin:
        os.sched_setaffinity(0, {1})
    server = subprocess.Popen(
        [
            *pin,
            sys.executable,
            "-c",
            f"from kimi_extract.simulator import serve; serve(port={args.port}, api_key={KEY!r})",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=os.environ.copy(),
    )
    try:
        assert server.stdout is not None
        server.stdout.readline()  # "listening on ..."
        url = f"http://127.0.0.1:{args.port}/v1/chat/completions"
        cpu_before = _cpu(server.pid)
        if args.client == "raw":
            elapsed, statuses = asyncio.run(
                load_raw(args.port, args.requests, args.concurrency, args.effort)
            )
        else:
            elapsed, statuses = asyncio.run(load(url, args.requests, args.concurrency, args.effort))
        cpu = _cpu(server.pid) - cpu_before
    finally:
        server.terminate()
        server.wait(timeout=10)
    rate = args.requests / elapsed
    print(
        f"{'client':>8} {'requests':>9} {'conc.':>6} {'effort':>7} {'seconds':>8} {'req/s':>8} "
        f"{'server CPU s':>13} {'req per CPU s':>14}"
    )
    print(
        f"{args.client:>8} {args.requests:>9} {args.concurrency:>6} {args.effort or 'max':>7} "
        f"{elapsed:>8.2f} {rate:>8.0f} {cpu:>13.2f} {args.requests / cpu:>14.0f}"
    )
    print("statuses:", statuses)


def _cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    main()
