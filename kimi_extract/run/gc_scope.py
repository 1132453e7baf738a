"""Fewer young garbage collections while a run is going: scoped to the run, restored after it.

A run at high concurrency keeps every in-flight row's objects (request, response, futures, the
parsed answer) alive across many event-loop turns, and rows wait one more turn for their group
commit (``run.store``). With CPython's default young-generation threshold (700 net container
allocations) that means a young collection every few rows, each promoting the in-flight objects
of ~hundreds of rows to the older generations, which then tips full collections of the whole
heap (pandas, pydantic: ~40 ms each) into every few thousand rows. Measured on section 1 of
``benchmarks/RESULTS.md``: ~10 % of a run's CPU with the result store on.

``spaced_young_collections`` raises generation 0's threshold to ``RUN_GEN0_THRESHOLD`` for the
duration of a run and puts back the application's thresholds when the run ends, however it ends
(an error, ``KeyboardInterrupt``, a cancelled task). Nothing is disabled: cycles are still
collected, only in larger batches; the objects that wait are the few thousand a batch allows.
It changes nothing when the garbage collector is disabled, when generation 0 is already at
least that high, or when it is 0 (the application turned automatic collection off that way).
Runs that overlap (threads, nested loops) share the change: the first to start makes it, the
last to end undoes it. If the application sets other thresholds meanwhile, its setting is left
as it is.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

#: Generation 0's threshold during a run (CPython's default is 700).
RUN_GEN0_THRESHOLD = 10_000

_lock = threading.Lock()
_depth = 0
#: (thresholds before the first run, thresholds set by it) while a change is in force.
_change: tuple[tuple[int, ...], tuple[int, ...]] | None = None


def _enter(threshold: int) -> None:
    global _depth, _change
    with _lock:
        _depth += 1
        if _depth > 1:
            return
        before = gc.get_threshold()
        if not gc.isenabled() or before[0] == 0 or before[0] >= threshold:
            return
        during = (threshold, *before[1:])
        gc.set_threshold(*during)
        _change = (before, during)


def _exit() -> None:
    global _depth, _change
    with _lock:
        _depth -= 1
        if _depth > 0 or _change is None:
            return
        before, during = _change
        _change = None
        if gc.get_threshold() == during:  # not changed by the application meanwhile
            gc.set_threshold(*before)


@contextlib.contextmanager
def spaced_young_collections(threshold: int = RUN_GEN0_THRESHOLD) -> Iterator[None]:
    """Within the block, generation 0 is collected after ``threshold`` net allocations; the
    thresholds before it are restored when the last overlapping block ends (see the module)."""
    _enter(threshold)
    try:
        yield
    finally:
        _exit()
