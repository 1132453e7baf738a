"""The PostgreSQL result store: one database that many processes and machines write at once.

``Extractor(store="postgresql://user@host/db")`` (needs the ``postgres`` extra: psycopg 3 and its
pool). The contract is the SQLite store's (``run.store``); what differs is how it is kept:

- **Exactly once across machines**: the key is the table's primary key, and every commit is
  ``INSERT ... ON CONFLICT (key) DO NOTHING``: the database keeps the first row committed under a
  key, whichever process or machine committed it, with no lock in Python. (A stale row, one the
  output model now rejects, is replaced with ``ON CONFLICT DO UPDATE``.)
- **Group commits**: the rows finishing in one event-loop turn go to the database as one
  statement, ``INSERT ... SELECT * FROM unnest(...)`` (one array per column: one prepared
  statement for any number of rows), in one transaction; the rows starting in one turn share one
  ``SELECT ... WHERE key = ANY(...)``. At most ``MAX_WRITES`` statements of each kind are in
  flight; rows finishing meanwhile join the next group, so groups grow with the load. A row's
  ``commit`` returns once its transaction is committed; a lookup waits for the commits already
  on their way, so a row finishing now is found.
- **Connections**: a small async pool (``psycopg_pool.AsyncConnectionPool``, at most
  ``POOL_SIZE``) per run, opened on the run's event loop, and one sync connection for the
  checks, ``estimate`` and maintenance.
- **Schema**: created on first use (under an advisory lock, so processes starting together
  create it once) in the connection's schema (``search_path``): the tables
  ``kimi_extract_results`` and ``kimi_extract_meta`` (which holds ``schema_version``). Tables of
  those names that are not ours, or a version newer than ``SCHEMA_VERSION``, raise ``StoreError``
  naming the fix, before the first request.
- **Secrets**: the URL's password never appears in a repr, a log line, an error or a
  ``kx_error``: ``store_base.StoreURL`` shows it as ``***`` and driver errors are redacted.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Collection, Iterator
from typing import Any

from ..config.location import StoreURL, scrub_urls
from ..exceptions import ConfigurationError, StoreError, install_hint
from ..records import Usage
from . import store_base
from .store_base import Stored, StoreStats, decode_stored, encode_usage

try:
    import psycopg
    import psycopg_pool
except ImportError:  # pragma: no cover - the extra is installed wherever the tests run
    psycopg = None  # type: ignore[assignment]
    psycopg_pool = None  # type: ignore[assignment]

#: The version of the table layout this code writes (``kimi_extract_meta.schema_version``).
SCHEMA_VERSION = 1
TABLE = "kimi_extract_results"
META = "kimi_extract_meta"
#: The most connections one run's pool opens.
POOL_SIZE = 4
#: Statements of each kind (writes, lookups) in flight at once; later rows join the next group.
MAX_WRITES = 2
#: Seconds to wait for a connection (opening the store, or a pool connection in a run).
CONNECT_TIMEOUT_S = 30.0
#: Any fixed number: the advisory lock that serializes schema creation across processes.
_SCHEMA_LOCK = 0x6B785F7374
COLUMNS = ("key", "model", "endpoint", "output", "usage", "attempts", "web_searches", "created")
_TYPES = ("text", "text", "text", "text", "text", "int4", "int4", "float8")
FIX = (
    "check that the database is reachable and that its user may create and write tables, pass "
    "store='postgresql://user@host/another_db' or a file path, or store=False to run without a "
    "store"
)
_CREATE = f"""
CREATE TABLE IF NOT EXISTS {META} (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS {TABLE} (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    endpoint TEXT NOT NULL DEFAULT '',
    output TEXT NOT NULL,
    usage TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    web_searches INTEGER NOT NULL DEFAULT 0,
    created DOUBLE PRECISION NOT NULL
);
INSERT INTO {META} VALUES ('schema_version', '{SCHEMA_VERSION}'), ('written_by', 'kimi_extract')
ON CONFLICT (name) DO NOTHING;
"""
_UNNEST = ", ".join(f"%s::{kind}[]" for kind in _TYPES)
_INSERT = f"INSERT INTO {TABLE} SELECT * FROM unnest({_UNNEST}) ON CONFLICT (key) DO NOTHING"
_REPLACE = (
    f"INSERT INTO {TABLE} SELECT * FROM unnest({_UNNEST}) ON CONFLICT (key) DO UPDATE SET "
    + ", ".join(f"{c} = EXCLUDED.{c}" for c in COLUMNS[1:])
)
_SELECT = (
    f"SELECT key, output, usage, attempts, web_searches FROM {TABLE} WHERE key = ANY(%s::text[])"
)


def _require_driver() -> None:
    if psycopg is None or psycopg_pool is None:
        raise ConfigurationError(
            f"store='postgresql://...' needs psycopg 3 and its pool: {install_hint('postgres')}"
        )


class PostgresStore:
    """A PostgreSQL table of validated results keyed by ``store_key`` (a ``store_base.Store``).

    Opening connects once (sync) and creates or checks the schema: ``StoreError`` when the
    database cannot be reached or holds tables of that name that are not ours. ``lookup`` /
    ``commit`` run on the caller's event loop through a pool opened on first use there;
    ``aclose`` closes it.
    """

    backend = "postgresql"

    def __init__(self, url: StoreURL | str, *, endpoint: str = "") -> None:
        _require_driver()
        self.url = url if isinstance(url, StoreURL) else StoreURL(url)
        self.location = str(self.url)
        self.endpoint = endpoint
        self._sync = self._connect_sync()
        try:
            self._check_schema()
        except BaseException:
            self._sync.close()
            raise
        self._pool: Any = None
        self._pool_ready: asyncio.Task[Any] | None = None
        self._columns: list[list[Any]] = [[] for _ in COLUMNS]
        self._replacing: list[list[Any]] = [[] for _ in COLUMNS]
        self._write_waiters: list[asyncio.Future[None]] = []
        self._lookup_keys: list[str] = []
        self._lookup_waiters: list[asyncio.Future[Stored | None]] = []
        self._writes: set[asyncio.Task[None]] = set()
        self._reads: set[asyncio.Task[None]] = set()
        self._flush_due = self._lookups_due = False
        self.commits = 0
        self.committed_rows = 0

    def __repr__(self) -> str:
        return f"PostgresStore({self.location!r})"

    # -- errors and connections ---------------------------------------------------------------

    def _error(self, action: str, exc: BaseException) -> StoreError:
        text = scrub_urls(self.url.redact(" ".join(str(exc).split())))
        return StoreError(f"result store {self.location} failed to {action} ({text}); {FIX}")

    def _connect_sync(self) -> Any:
        try:
            return psycopg.connect(
                self.url.reveal(), autocommit=True, connect_timeout=int(CONNECT_TIMEOUT_S)
            )
        except psycopg.Error as exc:
            raise self._error("connect", exc) from None

    def _check_schema(self) -> None:
        """Create the tables on first use; refuse foreign tables and newer versions."""
        db = self._sync
        try:
            # The common case without the lock. Its answer may mix two moments (another process
            # creating the tables meanwhile): anything but "ready" is decided under the lock.
            with contextlib.suppress(StoreError):
                if self._version(db) == SCHEMA_VERSION:
                    return
            # A session lock, then a new transaction: a transaction's start takes in the
            # catalog changes other sessions committed (a lock taken inside one would not, and
            # the tables another process just made could look missing).
            db.execute("SELECT pg_advisory_lock(%s)", (_SCHEMA_LOCK,))
            try:
                with db.transaction():
                    version = self._version(db)
                    if version is None:
                        db.execute(_CREATE)
                        version = self._version(db)
            finally:
                db.execute("SELECT pg_advisory_unlock(%s)", (_SCHEMA_LOCK,))
        except StoreError:
            raise
        except psycopg.Error as exc:
            raise self._error("create its tables", exc) from None
        if version != SCHEMA_VERSION:  # pragma: no cover - a version between: none exists yet
            raise StoreError(f"result store {self.location} has schema version {version}; {FIX}")

    def _version(self, db: Any) -> int | None:
        """The stored schema version; None when neither table exists. ``StoreError`` for
        tables that are not ours or a newer version."""
        meta, results = db.execute(
            "SELECT to_regclass(%s) IS NOT NULL, to_regclass(%s) IS NOT NULL", (META, TABLE)
        ).fetchone()
        if not meta and not results:
            return None
        version: int | None = None
        columns: list[str] = []
        if meta:
            try:
                row = db.execute(
                    f"SELECT value FROM {META} WHERE name = 'schema_version'"
                ).fetchone()
                version = int(row[0]) if row else None
            except (psycopg.Error, ValueError, TypeError):
                version = None
        if results:
            columns = [
                name
                for (name,) in db.execute(
                    "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) "
                    "AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
                    (TABLE,),
                )
            ]
        if version is None or (results and tuple(columns) != COLUMNS):
            raise StoreError(
                f"result store {self.location} holds tables {META} / {TABLE} of another program "
                f"(not a kimi_extract store); use another database or schema "
                f"(postgresql://.../db?options=-csearch_path%3Dkx), or store=False"
            )
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"result store {self.location} was written by a newer kimi_extract (store schema "
                f"version {version}; this one reads up to {SCHEMA_VERSION}): upgrade "
                "kimi_extract, or use another database"
            )
        return version if results else None

    async def _pool_on_loop(self) -> Any:
        """The run's pool, opened on the running loop on first use."""
        if self._pool_ready is None:
            self._pool_ready = asyncio.get_running_loop().create_task(self._open_pool())
        return await asyncio.shield(self._pool_ready)

    async def _open_pool(self) -> Any:
        pool = psycopg_pool.AsyncConnectionPool(
            self.url.reveal(),
            min_size=1,
            max_size=POOL_SIZE,
            open=False,
            timeout=CONNECT_TIMEOUT_S,
            kwargs={"autocommit": True},
            name="kimi_extract-store",
        )
        try:
            await pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)
        except Exception as exc:
            await pool.close()
            raise self._error("connect", exc) from None
        self._pool = pool
        return pool

    # -- sync access ---------------------------------------------------------------------------

    def get(self, key: str) -> Stored | None:
        """The stored result for ``key``, or None; ``StoreError`` when the database fails."""
        return self.get_many((key,)).get(key)

    def get_many(self, keys: Collection[str]) -> dict[str, Stored]:
        """The stored results among ``keys`` (one query); unreadable entries are misses."""
        try:
            rows = self._sync.execute(_SELECT, (list(keys),)).fetchall()
        except psycopg.Error as exc:
            raise self._error("read rows", exc) from None
        return _decoded(rows)

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
        """Commit one row (a key already stored keeps its row unless ``replace``)."""
        row = (key, model, self.endpoint, output, encode_usage(usage), attempts, web_searches)
        columns = [[value] for value in (*row, time.time())]
        try:
            self._sync.execute(_REPLACE if replace else _INSERT, columns)
        except psycopg.Error as exc:
            raise self._error("write rows", exc) from None
        self.commits += 1
        self.committed_rows += 1

    def __len__(self) -> int:
        return int(self._sync.execute(f"SELECT COUNT(*) FROM {TABLE}").fetchone()[0])

    # -- grouped access for a run on an event loop --------------------------------------------

    def lookup(self, key: str) -> asyncio.Future[Stored | None]:
        """``get``, grouped: the rows looking themselves up in one turn share one query."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[Stored | None] = loop.create_future()
        self._lookup_keys.append(key)
        self._lookup_waiters.append(waiter)
        if not self._lookups_due:
            self._lookups_due = True
            loop.call_soon(self._start_lookups)
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
        """``put``, grouped: the rows finishing in one turn share one statement and one
        transaction; the returned future is done once it is committed (or holds the
        ``StoreError``)."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        row = (key, model, self.endpoint, output, encode_usage(usage), attempts, web_searches)
        for column, value in zip(
            self._replacing if replace else self._columns, (*row, time.time()), strict=True
        ):
            column.append(value)
        self._write_waiters.append(waiter)
        if len(self._write_waiters) >= store_base.GROUP_ROWS:
            self.flush()
        elif not self._flush_due:
            self._flush_due = True
            loop.call_soon(self.flush)
        return waiter

    def flush(self) -> None:
        """Send the rows queued by ``commit`` now, unless ``MAX_WRITES`` groups are in flight
        (they then go when one of those is committed)."""
        self._flush_due = False
        if not self._write_waiters or len(self._writes) >= MAX_WRITES:
            return
        group = (self._columns, self._replacing, self._write_waiters)
        self._columns = [[] for _ in COLUMNS]
        self._replacing = [[] for _ in COLUMNS]
        self._write_waiters = []
        task = asyncio.get_running_loop().create_task(self._write(*group))
        self._writes.add(task)
        task.add_done_callback(self._write_done)

    def _write_done(self, task: asyncio.Task[None]) -> None:
        self._writes.discard(task)
        if self._write_waiters:
            self.flush()

    async def _write(
        self,
        columns: list[list[Any]],
        replacing: list[list[Any]],
        waiters: list[asyncio.Future[None]],
    ) -> None:
        try:
            pool = await self._pool_on_loop()
            async with pool.connection() as db:
                if not replacing[0]:
                    await db.execute(_INSERT, columns)
                else:
                    async with db.transaction():
                        if columns[0]:
                            await db.execute(_INSERT, columns)
                        await db.execute(_REPLACE, _last_of_each_key(replacing))
        except (psycopg.Error, psycopg_pool.PoolTimeout, StoreError) as exc:
            error = exc if isinstance(exc, StoreError) else self._error("write rows", exc)
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_exception(error)
            return
        self.commits += 1
        self.committed_rows += len(waiters)
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _start_lookups(self) -> None:
        self._lookups_due = False
        if not self._lookup_keys or len(self._reads) >= MAX_WRITES:
            return
        keys, waiters = self._lookup_keys, self._lookup_waiters
        self._lookup_keys, self._lookup_waiters = [], []
        self.flush()  # rows finished this turn are found by rows starting this turn
        task = asyncio.get_running_loop().create_task(self._read(keys, waiters, list(self._writes)))
        self._reads.add(task)
        task.add_done_callback(self._read_done)

    def _read_done(self, task: asyncio.Task[None]) -> None:
        self._reads.discard(task)
        if self._lookup_keys:
            self._start_lookups()

    async def _read(
        self,
        keys: list[str],
        waiters: list[asyncio.Future[Stored | None]],
        writes: list[asyncio.Task[None]],
    ) -> None:
        try:
            if writes:  # commits already on their way: their rows are found
                await asyncio.wait(writes)
            pool = await self._pool_on_loop()
            async with pool.connection() as db:
                cursor = await db.execute(_SELECT, (list(dict.fromkeys(keys)),))
                found = _decoded(await cursor.fetchall())
        except (psycopg.Error, psycopg_pool.PoolTimeout, StoreError) as exc:
            error = exc if isinstance(exc, StoreError) else self._error("read rows", exc)
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_exception(error)
            return
        for key, waiter in zip(keys, waiters, strict=True):
            if not waiter.done():
                waiter.set_result(found.get(key))

    # -- maintenance ---------------------------------------------------------------------------

    def stats(self) -> StoreStats:
        """Rows, the table's size with its index, rows by model and endpoint, oldest/newest."""
        try:
            groups = tuple(
                (str(model), str(endpoint), int(rows))
                for model, endpoint, rows in self._sync.execute(
                    f"SELECT model, endpoint, COUNT(*) FROM {TABLE} GROUP BY model, endpoint "
                    "ORDER BY COUNT(*) DESC, model, endpoint"
                )
            )
            oldest, newest, size = self._sync.execute(
                f"SELECT MIN(created), MAX(created), pg_total_relation_size(to_regclass(%s)) "
                f"FROM {TABLE}",
                (TABLE,),
            ).fetchone()
        except psycopg.Error as exc:
            raise self._error("read rows", exc) from None
        return StoreStats(
            location=self.location,
            backend=self.backend,
            rows=sum(g[2] for g in groups),
            size_bytes=int(size or 0),
            groups=groups,
            oldest=oldest,
            newest=newest,
        )

    def export_rows(self) -> Iterator[tuple[Any, ...]]:
        """Every row as ``store_base.EXPORT_COLUMNS``, oldest first (a server-side cursor)."""
        columns = ", ".join(store_base.EXPORT_COLUMNS)
        try:
            with (
                self._sync.transaction(),
                self._sync.cursor(name="kimi_extract_export") as cursor,
            ):
                cursor.itersize = 2_000
                cursor.execute(f"SELECT {columns} FROM {TABLE} ORDER BY created, key")
                yield from cursor
        except psycopg.Error as exc:
            raise self._error("read rows", exc) from None

    def prune(self, older_than: float) -> int:
        """Delete the rows committed before Unix time ``older_than``; returns how many."""
        try:
            cursor = self._sync.execute(f"DELETE FROM {TABLE} WHERE created < %s", (older_than,))
        except psycopg.Error as exc:
            raise self._error("delete rows", exc) from None
        return int(cursor.rowcount)

    # -- closing -------------------------------------------------------------------------------

    def close(self) -> None:
        """From sync code: commit the rows still queued (on the sync connection), then close.

        A run on an event loop closes with ``aclose``, which also closes the pool."""
        try:
            if self._write_waiters:
                columns, replacing = self._columns, self._replacing
                waiters, self._write_waiters = self._write_waiters, []
                self._columns = [[] for _ in COLUMNS]
                self._replacing = [[] for _ in COLUMNS]
                try:
                    with self._sync.transaction():
                        if columns[0]:
                            self._sync.execute(_INSERT, columns)
                        if replacing[0]:
                            self._sync.execute(_REPLACE, _last_of_each_key(replacing))
                except psycopg.Error as exc:
                    error = self._error("write rows", exc)
                    for waiter in waiters:
                        if not waiter.done():
                            waiter.set_exception(error)
                    raise error from None
                self.commits += 1
                self.committed_rows += len(waiters)
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_result(None)
        finally:
            self._sync.close()

    async def aclose(self) -> None:
        """Commit the rows still queued, wait for the groups in flight, close the pool."""
        try:
            while self._write_waiters or self._writes or self._reads:
                self.flush()
                pending = self._writes | self._reads
                if pending:
                    await asyncio.wait(pending)
        finally:
            if self._pool_ready is not None:
                if not self._pool_ready.done():
                    self._pool_ready.cancel()
                if self._pool is not None:
                    await self._pool.close()
            self._sync.close()


def _decoded(rows: list[tuple[Any, ...]]) -> dict[str, Stored]:
    found: dict[str, Stored] = {}
    for key, output, usage, attempts, web_searches in rows:
        stored = decode_stored(output, usage, attempts, web_searches)
        if stored is not None:
            found[key] = stored
    return found


def _last_of_each_key(columns: list[list[Any]]) -> list[list[Any]]:
    """Replacing rows, one per key (the last): ``ON CONFLICT DO UPDATE`` may touch a row once."""
    last = {key: index for index, key in enumerate(columns[0])}
    keep = sorted(last.values())
    return [[column[i] for i in keep] for column in columns]
