"""``base_url="simulator"``: the bundled Kimi simulator, one per process, started on first use.

``kx.Extractor(Review, base_url="simulator")`` sends every request to a ``kx.Simulator`` on
127.0.0.1 that this module starts the first time an extractor asks for it (in each process: a
Dask worker starts its own) and stops when the interpreter exits. It is a demo and test switch,
never a fallback: it is chosen only by that argument in code (``KIMI_BASE_URL=simulator`` is
refused, so a leftover variable never sends a real run to it), no API key is read or sent, the
run keeps no default result store (a local endpoint), and the first start says on stderr where
requests go. The answers are made up (schema-valid, deterministic); leave ``base_url`` out to call
the Kimi API.

The package imports this module, which installs ``start`` as
``config.endpoint.simulator_starter``: the library below the package's shells never imports the
simulator itself (tests/package/test_layers.py).
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
from typing import TYPE_CHECKING

from .config import endpoint

if TYPE_CHECKING:
    from .simulator import Simulator

logger = logging.getLogger("kimi_extract")

_lock = threading.Lock()
#: The running simulator and the process that started it (a forked child starts its own).
_shared: tuple[Simulator, int] | None = None


def shared() -> Simulator:
    """The process's bundled simulator, started (and announced on stderr) on first use."""
    global _shared
    with _lock:
        if _shared is not None and _shared[1] == os.getpid():
            return _shared[0]
        from .simulator import Simulator

        # No history: a long demo run must not grow the simulator's memory.
        simulator = Simulator(history_limit=0).start()
        atexit.register(simulator.stop)
        _shared = (simulator, os.getpid())
    message = (
        f"kimi_extract: base_url='simulator': requests go to the bundled Kimi simulator at "
        f"{simulator.base_url} (made-up answers, no API key, no default result store); leave "
        "base_url out to call the Kimi API"
    )
    logger.info(message)
    print(message, file=sys.stderr)
    return simulator


def start() -> tuple[str, str]:
    """``(base_url, api_key)`` of the process's bundled simulator, starting it if needed."""
    simulator = shared()
    return simulator.base_url, simulator.api_key


endpoint.simulator_starter = start
