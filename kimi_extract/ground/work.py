"""What aligning costs, counted, and a way to stop it from another thread (pure).

Every stage of the aligner reports its work to a ``Work`` and checks it between steps:

- ``scan(n)``: ``n`` characters read by a search of the text (a ``str.find`` over the text, a
  regular expression pass, building the folded text or its bigram index);
- ``cells(n)``: ``n`` cells of a string comparison (RapidFuzz: the two lengths multiplied);
- ``check()``: raises ``Interrupted`` once ``stop()`` was called (from any thread), so a
  grounding running in a worker thread ends within one step of a Ctrl-C. A step is bounded
  (``align``'s per-leaf bounds), so that is a few milliseconds.

The bounds the aligner keeps (``align``'s module docstring states them) are checked by tests
that count these units, never by wall time.
"""

from __future__ import annotations

import threading


class Interrupted(Exception):
    """Raised by ``Work.check`` after ``Work.stop``: the grounding was given up."""


class Work:
    """Counters of the aligner's work, and its stop flag (module docstring)."""

    __slots__ = ("scanned", "compared", "leaves", "_stop")

    def __init__(self, stop: threading.Event | None = None) -> None:
        #: Characters read by text searches.
        self.scanned = 0
        #: Cells of fuzzy comparisons (length x length).
        self.compared = 0
        #: Leaves aligned.
        self.leaves = 0
        self._stop = stop or threading.Event()

    def scan(self, chars: int) -> None:
        """Count ``chars`` characters read, and check."""
        self.scanned += chars
        if self._stop.is_set():
            raise Interrupted("grounding interrupted")

    def cells(self, count: int) -> None:
        """Count ``count`` comparison cells, and check."""
        self.compared += count
        if self._stop.is_set():
            raise Interrupted("grounding interrupted")

    def check(self) -> None:
        """Raise ``Interrupted`` when ``stop`` was called."""
        if self._stop.is_set():
            raise Interrupted("grounding interrupted")

    def stop(self) -> None:
        """Ask the aligner to give up at its next step (thread-safe)."""
        self._stop.set()

    @property
    def stopped(self) -> bool:
        """Whether ``stop`` was called."""
        return self._stop.is_set()
