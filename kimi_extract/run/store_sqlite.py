"""The SQLite result store: one file, the embedded default (``run.store`` has the contract).

- **Checked before the first request**: a file that is not an SQLite database, an SQLite file of
  another program, a directory, or a location that cannot be written raises ``StoreError`` (a
  ``ConfigurationError``) naming the path and the fix. A file written by a newer kimi_extract
  (``PRAGMA user_version`` above ``SCHEMA_VERSION``) too. A store that fails during a run (disk
  full) stops it with ``RunStopped`` whose ``cause`` is a ``StoreError``.
- **Schema**: one ``results`` table, its version in ``PRAGMA user_version``. A file of the first
  version (no ``endpoint`` column) gets the column (empty for its rows) when first opened.
- **Durability**: WAL mode with ``synchronous=NORMAL``: a committed row survives the process
  being killed at any moment (only a power loss can drop the last commits), and the file stays
  consistent (``PRAGMA integrity_check``).
- **Exactly once**: the key is the table's primary key; ``INSERT OR IGNORE`` keeps the first row
  committed under a key, whichever process committed it (``OR REPLACE`` for a stale one).
- **Group commits**: the rows that finish in the same event-loop turn (at most ``GROUP_ROWS``)
  share one transaction, written synchronously at the end of the turn (SQLite's cost per call
  dominates small groups); the rows that start in one turn share one ``SELECT ... IN``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

from ..exceptions import StoreError
from ..records import Usage
from . import store_base
from .store_base import Stored, StoreStats, decode_stored, encode_usage

#: The version of the table layout this code writes (``PRAGMA user_version``).
SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    output TEXT NOT NULL,
    usage TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    web_searches INTEGER NOT NULL DEFAULT 0,
    created REAL NOT NULL,
    endpoint TEXT NOT NULL DEFAULT ''
)
"""
#: Columns of the ``results`` table; a file whose ``results`` table differs is not ours.
COLUMNS = ("key", "model", "output", "usage", "attempts", "web_searches", "created", "endpoint")
#: The columns of the first version (no endpoint), brought up to date when opened.
COLUMNS_V0 = COLUMNS[:-1]
#: What to do about a store that cannot be used (appended to every ``StoreError``).
FIX = (
    "move or delete that file to start a new store, pass store='another/path.sqlite3', "
    "or store=False to run without a store"
)
#: How long opening a store waits for other processes/threads that hold its lock (seconds).
BUSY_TIMEOUT_S = 30.0


def check_location(path: Path) -> None:
    """Raise ``StoreError`` unless ``path`` can hold a store; reads but never writes.

    An existing file must be a kimi_extract store (or empty) and writable; a missing one needs a
    writable directory (or a creatable one under a writable ancestor).
    """
    if path.is_dir():
        raise StoreError(f"result store {path} is a directory, not a file; {FIX}")
    if path.exists():
        _check_existing(path)
        return
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise StoreError(
            f"result store {path} cannot be created: {ancestor} is not a directory; {FIX}"
        )
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise StoreError(
            f"result store {path} cannot be created: the directory {ancestor} is not writable; "
            f"{FIX}"
        )


def _check_existing(path: Path) -> None:
    if not os.access(path, os.R_OK | os.W_OK) or not os.access(path.parent, os.W_OK | os.X_OK):
        raise StoreError(
            f"result store {path} is not writable (the file and its directory must be); {FIX}"
        )
    # Read through SQLite only: opening and closing the file any other way would drop the locks
    # SQLite connections of this process hold on it (POSIX advisory locks are per process).
    try:
        db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S)
        try:
            tables = {
                name: [c[0] for c in db.execute("SELECT name FROM pragma_table_info(?)", (name,))]
                for (name,) in db.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' "
                    "AND name NOT LIKE 'sqlite_%'"
                )
            }
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:
        problem = "not an SQLite database" if "not a database" in str(exc) else "corrupt"
        raise StoreError(
            f"result store {path} is {problem} ({exc}; another program's file, or damaged); {FIX}"
        ) from None
    foreign = set(tables) - {"results"}
    if foreign or ("results" in tables and tuple(tables["results"]) not in (COLUMNS, COLUMNS_V0)):
        raise StoreError(
            f"result store {path} is an SQLite database of another program (tables "
            f"{sorted(tables)}), not a kimi_extract store; {FIX}"
        )
    _check_version(path, version)


def _check_version(path: Path, version: int) -> None:
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"result store {path} was written by a newer kimi_extract (store schema version "
            f"{version}; this one reads up to {SCHEMA_VERSION}): upgrade kimi_extract, or "
            f"{FIX}"
        )


class SQLiteStore:
    """A SQLite file of validated results keyed by ``store_key`` (a ``store_base.Store``)."""

    backend = "sqlite"

    def __init__(self, path: str | os.PathLike[str], *, endpoint: str = "") -> None:
        self.path = Path(path)
        self.location = str(self.path)
        self.endpoint = endpoint
        check_location(self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = _connect(self.path)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"result store {self.path} cannot be opened ({exc}); {FIX}") from None
        #: Rows looking themselves up this event-loop turn (``lookup``), and their waiters.
        self._lookup_keys: list[str] = []
        self._lookup_waiters: list[asyncio.Future[Stored | None]] = []
        #: Rows waiting for the next group commit (``commit``): their column values one after
        #: another (``_WIDTH`` a row, the parameters of the INSERT as they are), and waiters.
        self._queued_values: list[object] = []
        self._queued_waiters: list[asyncio.Future[None]] = []
        #: Queued rows that replace a stale stored row (rare: kept apart).
        self._replacing: list[object] = []
        #: Transactions committed and rows in them (rows / commits = the mean group size).
        self.commits = 0
        self.committed_rows = 0

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    def get(self, key: str) -> Stored | None:
        """The stored result for ``key``, or None; ``StoreError`` when the file fails."""
        return self.get_many((key,)).get(key)

    def get_many(self, keys: Collection[str]) -> dict[str, Stored]:
        """The stored results among ``keys`` (a few ``SELECT ... IN`` queries for any number).

        Unreadable entries are left out (a miss: the row is asked again). ``StoreError`` when the
        file fails."""
        found: dict[str, Stored] = {}
        try:
            wanted = list(keys)
            start = 0
            for size in [len(wanted)] if len(wanted) <= _CHUNK else _chunk_sizes(len(wanted)):
                chunk, start = wanted[start : start + size], start + size
                sql = _SELECT_IN.get(size) or _SELECT_IN.setdefault(size, _select_in(size))
                for key, output, usage, attempts, web_searches in self._db.execute(sql, chunk):
                    stored = decode_stored(output, usage, attempts, web_searches)
                    if stored is not None:
                        found[key] = stored
        except sqlite3.Error as exc:
            raise self._failed("read", exc) from None
        return found

    def _failed(self, action: str, exc: sqlite3.Error) -> StoreError:
        return StoreError(f"result store {self.path} failed to {action} a row ({exc}); {FIX}")

    def _values(
        self, key: str, model: str, output: str, usage: Usage, attempts: int, web_searches: int
    ) -> list[object]:
        return [
            key,
            model,
            output,
            encode_usage(usage),
            attempts,
            web_searches,
            time.time(),
            self.endpoint,
        ]

    def put(
        self,
        key: str,
        *,
        model: str,
        output: str,
        usage: Usage,
        attempts: int,
        web_searches: int = 0,
        replace: bool = False,
    ) -> None:
        """Commit one validated result (a key already stored keeps its row unless ``replace``).

        ``output`` is the model's raw answer text. Raises ``StoreError`` when the file fails
        (disk full, read-only, corrupt)."""
        values = self._values(key, model, output, usage, attempts, web_searches)
        self._write([] if replace else values, values if replace else [])

    def _write(self, values: list[object], replacing: list[object]) -> None:
        """Commit the rows of ``values`` (kept when their key is stored) and ``replacing``
        (replacing a stored row) in one transaction: all of them or, when the file fails
        (``StoreError``), none. Each holds its rows' columns one row after another."""
        rows = len(values) // _WIDTH
        if not replacing and rows <= _CHUNK:
            # One statement is one transaction (autocommit): a single call to SQLite, whose
            # cost per call dominates small groups.
            try:
                self._db.execute(_insert(rows), values)
            except sqlite3.Error as exc:
                raise self._failed("write", exc) from None
        else:
            self._transaction(values, replacing)
        self.committed_rows += rows + len(replacing) // _WIDTH
        self.commits += 1

    def _transaction(self, values: list[object], replacing: list[object]) -> None:
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for rows_values, verb in ((values, "OR IGNORE"), (replacing, "OR REPLACE")):
                    start = 0
                    for size in _chunk_sizes(len(rows_values) // _WIDTH):
                        end = start + size * _WIDTH
                        self._db.execute(_insert(size, verb), rows_values[start:end])
                        start = end
                self._db.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):  # SQLite may have rolled back
                    self._db.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise self._failed("write", exc) from None

    # -- Grouped access for a run on an event loop --------------------------------------------

    def lookup(self, key: str) -> asyncio.Future[Stored | None]:
        """``get``, grouped: every row looking itself up in one event-loop turn shares one query.

        Await the returned future. Rows queued for a commit are committed first, so a row
        finishing just now is found. (Plain lists and no coroutine per row: each object a row
        allocates brings the garbage collector's next pass nearer.)"""
        loop = asyncio.get_running_loop()
        if not self._lookup_keys:
            loop.call_soon(self._flush_lookups)
        waiter: asyncio.Future[Stored | None] = loop.create_future()
        self._lookup_keys.append(key)
        self._lookup_waiters.append(waiter)
        return waiter

    def commit(
        self,
        key: str,
        *,
        model: str,
        output: str,
        usage: Usage,
        attempts: int,
        web_searches: int = 0,
        replace: bool = False,
    ) -> asyncio.Future[None]:
        """``put``, grouped: rows finishing in the same event-loop turn (at most ``GROUP_ROWS``)
        share one transaction. The returned future is done once this row's transaction is
        committed (or holds its ``StoreError``): a caller that awaits it before reporting the
        row never reports a row that a ``kill -9`` could lose."""
        loop = asyncio.get_running_loop()
        if not self._queued_waiters:
            loop.call_soon(self.flush)
        waiter: asyncio.Future[None] = loop.create_future()
        values = (key, model, output, encode_usage(usage), attempts, web_searches, time.time())
        if replace:
            self._replacing += (*values, self.endpoint)
        else:
            self._queued_values += values
            self._queued_values.append(self.endpoint)
        self._queued_waiters.append(waiter)
        if len(self._queued_waiters) >= store_base.GROUP_ROWS:
            self.flush()
        return waiter

    def flush(self) -> None:
        """Commit the rows queued by ``commit`` now (one transaction); wakes their callers."""
        waiters, values, replacing = self._queued_waiters, self._queued_values, self._replacing
        if not waiters:
            return
        self._queued_waiters, self._queued_values, self._replacing = [], [], []
        try:
            self._write(values, replacing)
        except StoreError as exc:
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_exception(exc)
            return
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _flush_lookups(self) -> None:
        keys, waiters = self._lookup_keys, self._lookup_waiters
        self._lookup_keys, self._lookup_waiters = [], []
        try:
            self.flush()  # rows finished this turn are found by rows starting this turn
            found = self.get_many(dict.fromkeys(keys))
        except StoreError as exc:
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_exception(exc)
            return
        for key, waiter in zip(keys, waiters, strict=True):
            if not waiter.done():
                waiter.set_result(found.get(key))

    def __len__(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM results").fetchone()[0])

    # -- Maintenance ------------------------------------------------------------------------------

    def stats(self) -> StoreStats:
        """Rows, the file's size, rows by model and endpoint, the oldest and newest commit."""
        try:
            groups = tuple(
                (str(model), str(endpoint), int(rows))
                for model, endpoint, rows in self._db.execute(
                    "SELECT model, endpoint, COUNT(*) FROM results GROUP BY model, endpoint "
                    "ORDER BY COUNT(*) DESC, model, endpoint"
                )
            )
            oldest, newest = self._db.execute(
                "SELECT MIN(created), MAX(created) FROM results"
            ).fetchone()
            pages = self._db.execute("PRAGMA page_count").fetchone()[0]
            page_size = self._db.execute("PRAGMA page_size").fetchone()[0]
        except sqlite3.Error as exc:
            raise self._failed("read", exc) from None
        return StoreStats(
            location=self.location,
            backend=self.backend,
            rows=sum(g[2] for g in groups),
            size_bytes=int(pages) * int(page_size),
            groups=groups,
            oldest=oldest,
            newest=newest,
        )

    def export_rows(self) -> Iterator[tuple[Any, ...]]:
        """Every row as ``store_base.EXPORT_COLUMNS``, oldest first."""
        columns = ", ".join(store_base.EXPORT_COLUMNS)
        try:
            yield from self._db.execute(f"SELECT {columns} FROM results ORDER BY created, key")
        except sqlite3.Error as exc:
            raise self._failed("read", exc) from None

    def prune(self, older_than: float) -> int:
        """Delete the rows committed before Unix time ``older_than``; returns how many."""
        try:
            cursor = self._db.execute("DELETE FROM results WHERE created < ?", (older_than,))
        except sqlite3.Error as exc:
            raise self._failed("write", exc) from None
        return int(cursor.rowcount)

    def close(self) -> None:
        """Commit the rows still queued by ``commit``, then close the connection."""
        try:
            self.flush()
        finally:
            self._db.close()

    async def aclose(self) -> None:
        """``close`` (SQLite's writes are synchronous: nothing to wait for)."""
        self.close()


#: Rows per SQL statement: a group of at most this many is one statement; a larger one is cut
#: into power-of-two chunks (8 parameters a row: 1,024 parameters need SQLite 3.32, else the
#: limit is 999 and 64 rows a statement stay under it).
_CHUNK = 128 if sqlite3.sqlite_version_info >= (3, 32) else 64
#: Prepared statements a connection keeps: one INSERT and one SELECT per group size.
_CACHED_STATEMENTS = 2 * _CHUNK + 32
#: Columns a row writes (the INSERT's parameters per row).
_WIDTH = len(COLUMNS)
_COLUMNS_READ = "key, output, usage, attempts, web_searches"
_SELECT_IN: dict[int, str] = {}
_INSERT: dict[tuple[int, str], str] = {}


def _chunk_sizes(rows: int) -> list[int]:
    """``rows`` cut into power-of-two runs of at most ``_CHUNK`` (100 -> 64, 32, 4)."""
    sizes = []
    while rows > 0:
        size = min(_CHUNK, 1 << (rows.bit_length() - 1))
        sizes.append(size)
        rows -= size
    return sizes


def _select_in(n: int) -> str:
    return f"SELECT {_COLUMNS_READ} FROM results WHERE key IN ({','.join('?' * n)})"


def _insert(rows: int, verb: str = "OR IGNORE") -> str:
    sql = _INSERT.get((rows, verb))
    if sql is None:
        sql = _INSERT[rows, verb] = f"INSERT {verb} INTO results VALUES " + ",".join(
            ["(" + ",".join("?" * _WIDTH) + ")"] * rows
        )
    return sql


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
        path,
        timeout=BUSY_TIMEOUT_S,
        isolation_level=None,
        check_same_thread=False,
        cached_statements=_CACHED_STATEMENTS,
    )
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    delay = 0.005
    while True:
        try:
            mode = str(db.execute("PRAGMA journal_mode").fetchone()[0]).lower()
            if mode != "wal":
                db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            _upgrade(db, path)
            return db
        except sqlite3.OperationalError as exc:
            text = str(exc).lower()
            if ("locked" not in text and "busy" not in text) or time.monotonic() > deadline:
                db.close()
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.1)


def _upgrade(db: sqlite3.Connection, path: Path) -> None:
    """Create the table, or bring a first-version one up to date (once, under the write lock)."""
    if int(db.execute("PRAGMA user_version").fetchone()[0]) == SCHEMA_VERSION:
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        version = int(db.execute("PRAGMA user_version").fetchone()[0])
        _check_version(path, version)
        if version < SCHEMA_VERSION:
            db.execute(_SCHEMA)
            columns = [c[0] for c in db.execute("SELECT name FROM pragma_table_info('results')")]
            if "endpoint" not in columns:
                db.execute("ALTER TABLE results ADD COLUMN endpoint TEXT NOT NULL DEFAULT ''")
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")
        raise
