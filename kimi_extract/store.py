"""The on-disk result store: every validated row is committed as it finishes, so reruns resume.

A run looks each row up before sending it; a hit is served without a request (``kx_from_cache``
is True, zero tokens are billed to the run, and the original usage is reported in
``RunReport.saved``). Errors are never stored, so a rerun retries exactly the rows that failed or
never ran.

- **Where**: ``Extractor(cache=...)``: a path, ``True``/None for the default location, or False
  to disable. The default is ``$KIMI_EXTRACT_CACHE_DIR`` or the user cache directory
  (``$XDG_CACHE_HOME/kimi_extract``, ``~/.cache/kimi_extract``; ``~/Library/Caches`` on
  macOS, ``%LOCALAPPDATA%`` on Windows) / ``results.sqlite3``. ``KIMI_EXTRACT_CACHE=0`` (or
  off/false/no) disables the default store (an explicit path still wins).
- **Key** (``request.request_key``): SHA-256 over the canonical JSON (sorted keys, no whitespace)
  of everything that determines the answer (the part shared by all rows hashed once per run):
  model, messages (system, examples, the row), response format (the schema), reasoning effort,
  tools and mode. Never the API key, the base
  URL or the output budget. The same inputs give the same key in every process, whatever
  ``PYTHONHASHSEED`` is; any change to them is a different key.
- **Durability**: SQLite in WAL mode with ``synchronous=NORMAL``: a committed row survives the
  process being killed at any moment (only a power loss can drop the last commits), and the file
  stays consistent (``PRAGMA integrity_check``). One commit per finished row.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .usage import Usage

logger = logging.getLogger("kimi_extract")

DISABLE_ENV = "KIMI_EXTRACT_CACHE"
DIR_ENV = "KIMI_EXTRACT_CACHE_DIR"
FILENAME = "results.sqlite3"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    output TEXT NOT NULL,
    usage TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    web_searches INTEGER NOT NULL DEFAULT 0,
    created REAL NOT NULL
)
"""


def default_path() -> Path:
    """The default store file (see the module docstring)."""
    override = os.environ.get(DIR_ENV)
    if override:
        return Path(override).expanduser() / FILENAME
    if sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    elif os.name == "nt":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "kimi_extract" / FILENAME


def resolve(cache: str | os.PathLike[str] | bool | None) -> Path | None:
    """The store path for an ``Extractor(cache=...)`` value, or None when disabled."""
    if cache is False:
        return None
    if cache is None or cache is True:
        if os.environ.get(DISABLE_ENV, "").strip().lower() in ("0", "off", "false", "no"):
            return None
        return default_path()
    return Path(cache).expanduser()


@dataclass(frozen=True)
class Stored:
    """A stored row: its output (the model's JSON), original usage and attempts."""

    output: str
    usage: Usage
    attempts: int
    web_searches: int


class ResultStore:
    """A SQLite file of validated results keyed by ``request_key``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = _connect(self.path)

    def __repr__(self) -> str:
        return f"ResultStore({str(self.path)!r})"

    def get(self, key: str) -> Stored | None:
        """The stored result for ``key``, or None."""
        row = self._db.execute(
            "SELECT output, usage, attempts, web_searches FROM results WHERE key = ?", (key,)
        ).fetchone()
        if row is None:
            return None
        usage = json.loads(row[1])
        if usage.get("cost") is None:
            usage["cost"] = float("nan")
        return Stored(row[0], Usage(**usage), int(row[2]), int(row[3]))

    def put(
        self,
        key: str,
        *,
        model: str,
        output: str,
        usage: Usage,
        attempts: int,
        web_searches: int = 0,
    ) -> None:
        """Commit one validated result (replacing any older one with the same key)."""
        usage_json = json.dumps(
            {
                "prompt_tokens": usage.prompt_tokens,
                "cached_tokens": usage.cached_tokens,
                "cache_write_tokens": usage.cache_write_tokens,
                "completion_tokens": usage.completion_tokens,
                "reasoning_tokens": usage.reasoning_tokens,
                "requests": usage.requests,
                "cost": usage.cost if usage.cost == usage.cost else None,
            }
        )
        self._db.execute(
            "INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?, ?, ?)",
            (key, model, output, usage_json, attempts, web_searches, time.time()),
        )

    def __len__(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM results").fetchone()[0])

    def integrity(self) -> str:
        """``PRAGMA integrity_check``'s answer ("ok" when the file is sound)."""
        return str(self._db.execute("PRAGMA integrity_check").fetchone()[0])

    def close(self) -> None:
        """Close the connection."""
        self._db.close()


#: How long opening a store waits for other processes/threads that hold its lock (seconds).
BUSY_TIMEOUT_S = 30.0


def _connect(path: Path) -> sqlite3.Connection:
    """Open ``path`` in WAL mode, safe when many threads and processes open it at once.

    ``sqlite3.connect(timeout=...)`` installs the busy handler before the first statement, so
    every later statement waits for a lock instead of failing. Switching a *new* file to WAL
    needs an exclusive lock, and SQLite may answer ``SQLITE_BUSY`` for it without consulting the
    busy handler (another connection is creating the file or changing its mode at the same
    moment), so that one step is retried until ``BUSY_TIMEOUT_S``. The journal mode is a property
    of the file: once any opener has set it, the others find it set and skip the change.
    """
    db = sqlite3.connect(
        path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
    )
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    delay = 0.005
    while True:
        try:
            mode = str(db.execute("PRAGMA journal_mode").fetchone()[0]).lower()
            if mode != "wal":
                db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute(_SCHEMA)
            return db
        except sqlite3.OperationalError as exc:
            text = str(exc).lower()
            if ("locked" not in text and "busy" not in text) or time.monotonic() > deadline:
                db.close()
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.1)


def open_store(path: Path | None, announce: bool) -> ResultStore | None:
    """Open the run's store (None when disabled); say where it is (stderr when ``announce``)."""
    if path is None:
        return None
    store = ResultStore(path)
    message = f"kimi_extract: result store at {store.path} (cache=False to disable)"
    logger.info(message)
    if announce:
        print(message, file=sys.stderr)
    return store
