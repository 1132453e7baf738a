"""Time for every wait the HTTP layer makes: retry backoff, the limiter's pacing and pauses, and
the router's cool-down all read ``now()`` and wait with ``sleep()`` of one ``Clock``.

The default is the real clock (``time.monotonic`` and ``asyncio.sleep``). A ``Transport``,
``Limiter`` or ``Router`` takes ``clock=``; one created without it uses the default in force
when it is made (the router: when it reads the time), which ``use_clock`` replaces for a block,
so a test can run a whole extraction on a virtual clock where waits take no real time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol


class Clock(Protocol):
    """Seconds on a monotonic clock, and a way to wait some of them."""

    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock: ``time.monotonic`` and ``asyncio.sleep``."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def __repr__(self) -> str:
        return "SystemClock()"


SYSTEM_CLOCK = SystemClock()
_default: Clock = SYSTEM_CLOCK


def default_clock() -> Clock:
    """The clock used where none is passed (``SYSTEM_CLOCK`` unless ``use_clock`` is active)."""
    return _default


@contextmanager
def use_clock(clock: Clock) -> Iterator[Clock]:
    """Within the block, transports, limiters and routers made without ``clock=`` use ``clock``."""
    global _default
    previous, _default = _default, clock
    try:
        yield clock
    finally:
        _default = previous
