"""Start the simulator in its own process, so its CPU is not counted against the client."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from kimi_extract.simulator import DEFAULT_API_KEY

API_KEY = DEFAULT_API_KEY
#: base URL -> pid of each running simulator process started here.
_PIDS: dict[str, int] = {}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_port(proc: subprocess.Popen[bytes], port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with code {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError("server did not start")


@contextlib.contextmanager
def running(command: list[str], port: int, cwd: Path | None = None) -> Iterator[str]:
    """A server process started by ``command``, listening on ``port`` on loopback: yields its
    base URL once it accepts connections (its stderr tail in the error when it does not), and
    stops it on the way out."""
    errors = tempfile.TemporaryFile()
    proc = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=errors)
    try:
        try:
            _wait_for_port(proc, port)
        except RuntimeError as exc:
            errors.seek(0)
            raise RuntimeError(f"{exc}: {errors.read().decode()[-2000:]}") from None
        base_url = f"http://127.0.0.1:{port}"
        _PIDS[base_url] = proc.pid
        yield base_url
    finally:
        _PIDS.pop(f"http://127.0.0.1:{port}", None)
        errors.close()
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@contextlib.contextmanager
def simulator_process(*args: str) -> Iterator[str]:
    """Run ``kimi-extract simulate`` on a free port; yields its base URL."""
    port = free_port()
    command = [sys.executable, "-m", "kimi_extract", "simulate", "--port", str(port), *args]
    with running(command, port) as base_url:
        yield base_url


@contextlib.contextmanager
def served(**options: Any) -> Iterator[str]:
    """Run ``kimi_extract.simulator.serve(port=..., **options)`` in a fresh process.

    ``options`` are ``Simulator`` keyword arguments (``rpm``, ``max_concurrency``, ``ttft_s``,
    ``retry_after_header``, ...) and must be literals. Yields the base URL; ``stats(base_url)``
    reads the server's counters.
    """
    port = free_port()
    code = (
        "from kimi_extract.simulator import serve; "
        f"serve(port={port}, api_key={API_KEY!r}, **{options!r})"
    )
    with running([sys.executable, "-c", code], port) as base_url:
        yield base_url


def server_cpu_s(base_url: str) -> float:
    """CPU seconds the simulator process at ``base_url`` has used so far (NaN if unknown).

    psutil when installed (the bench extra), else /proc (Linux). A difference over a client's run
    says how busy the one-process simulator was: whether the server rather than the client bounded
    the rate.
    """
    pid = _PIDS.get(base_url)
    if pid is None:
        return float("nan")
    try:
        import psutil
    except ImportError:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return float("nan")
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def stats(base_url: str) -> dict[str, Any]:
    """``GET /stats`` of a served simulator: requests, by status / error type, tokens, cache."""
    with urllib.request.urlopen(base_url + "/stats", timeout=10) as response:
        data: dict[str, Any] = json.loads(response.read())
    return data


@contextlib.contextmanager
def one_server(**options: Any) -> Iterator[Callable[[], contextlib.AbstractContextManager[str]]]:
    """For --quick runs: one served simulator that every ``fresh()`` call yields again.

    Saves a process start per client where a fresh server's empty state (rate windows, cache) is
    not needed; callers diff ``stats`` before and after each client instead.
    """
    with served(**options) as base_url:

        @contextlib.contextmanager
        def again() -> Iterator[str]:
            yield base_url

        yield again


def stats_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, int]:
    """Requests by status between two ``stats`` snapshots of one server."""
    old = before.get("by_status", {})
    delta = {k: v - old.get(k, 0) for k, v in after.get("by_status", {}).items()}
    return {k: v for k, v in delta.items() if v}
