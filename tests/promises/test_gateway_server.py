"""The limiter matrix's gateway (``benchmarks/gateway_server.py``) as an HTTP server: its stats,
and the arrival log a run's timeline is read from (``GET /stats?arrivals=1``)."""

from __future__ import annotations

import importlib.util
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
_spec = importlib.util.spec_from_file_location("kx_bench_server", BENCH / "_server.py")
assert _spec is not None and _spec.loader is not None
_server = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_server)


def _get(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as response:
        data: dict[str, Any] = json.loads(response.read())
    return data


def _post(url: str) -> int:
    body = json.dumps({"model": "kimi-k3.1-pro", "messages": []}).encode()
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_the_gateway_logs_each_arrival_with_its_status_when_asked() -> None:
    port = _server.free_port()
    # Two requests per 10 s window (12 per minute), answered at once.
    shape = {"kind": "fixed", "per_minute": 12, "window_s": 10.0}
    spec = {"port": port, "shape": shape, "style": "retry-after", "latency_s": 0.0}
    command = [sys.executable, str(BENCH / "gateway_server.py"), json.dumps(spec)]
    with _server.running(command, port, cwd=BENCH) as base_url:
        statuses = [_post(base_url + "/v1/chat/completions") for _ in range(3)]
        plain = _get(base_url + "/stats")
        logged = _get(base_url + "/stats?arrivals=1")
    assert statuses == [200, 200, 429]
    assert "arrivals" not in plain
    assert plain["requests"] == 3 and plain["refused"] == {"rpm": 1}
    arrivals = logged["arrivals"]
    assert [status for _, status in arrivals] == [200, 200, 429]
    times = [at for at, _ in arrivals]
    # Seconds after the first request, in the order they came.
    assert times[0] == 0.0 and times == sorted(times)
    assert times[-1] == logged["last"] - logged["first"]
