"""Start the simulator in its own process, so its CPU is not counted against the client."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

from kimi_extract.simulator import DEFAULT_API_KEY


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def simulator_process(*args: str) -> Iterator[str]:
    """Run ``kimi-extract simulate`` on a free port; yields its base URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kimi_extract", "simulate", "--port", str(port), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            time.sleep(0.05)
        else:
            raise RuntimeError("simulator did not start")
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


API_KEY = DEFAULT_API_KEY
