"""The on-disk result store: every validated row is committed as it finishes, so reruns resume.

A run looks each row up before sending it; a hit is served without a request (``kx_from_store``
is True, zero tokens are billed to the run, and the original usage is reported in
``RunReport.saved``). Errors are never stored, so a rerun retries exactly the rows that failed or
never ran.

- **Where**: ``Extractor(store=...)``: a path, ``True``/None for the default location, or False
  to disable. The default is ``$KIMI_EXTRACT_STORE_DIR`` or the user cache directory
  (``$XDG_CACHE_HOME/kimi_extract``, ``~/.cache/kimi_extract``; ``~/Library/Caches`` on
  macOS, ``%LOCALAPPDATA%`` on Windows) / ``results.sqlite3``. ``KIMI_EXTRACT_STORE=0`` (or
  off/false/no) disables the default store (an explicit path still wins). The old names
  ``KIMI_EXTRACT_CACHE`` / ``KIMI_EXTRACT_CACHE_DIR`` still work for one release, with a
  ``DeprecationWarning`` (a new name that is set wins).
- **Key** (``request.request_key``, then ``store_key``): SHA-256 over the canonical JSON (sorted
  keys, no whitespace) of everything that determines the answer (the part shared by all rows
  hashed once per run): model, messages (system, examples, the row), response format (the
  schema), reasoning effort, tools and mode, and the **endpoint's identity** (``endpoint_identity``:
  the normalized base URL, or the routed host pair). Never the API key or the output budget. The
  same inputs give the same key in every process, whatever ``PYTHONHASHSEED`` is; any change to
  them is a different key, so answers from one endpoint (the simulator, a proxy) are never served
  to a run against another.
- **Local endpoints** (loopback hosts: the simulator, a local proxy) get no default store: with
  ``store=None``/True a run against them keeps nothing; an explicit ``store=path`` still works,
  and every loopback server counts as one endpoint there (the simulator's port changes per run).
- **What is kept**: the model's raw answer (the JSON text it returned), validated again by the
  output model on a hit, so a resumed row is exactly what the first run produced (validators,
  secrets, aliases, serializers and excluded fields included). A stored answer the model no
  longer accepts is a miss (asked again).
- **Checked before the first request**: a file that is not an SQLite database, an SQLite file of
  another program, a directory, or a location that cannot be written raises ``StoreError`` (a
  ``ConfigurationError``) naming the path and the fix. A store that fails during a run (disk
  full) stops it with ``RunStopped`` whose ``cause`` is a ``StoreError``.
- **Durability**: SQLite in WAL mode with ``synchronous=NORMAL``: a committed row survives the
  process being killed at any moment (only a power loss can drop the last commits), and the file
  stays consistent (``PRAGMA integrity_check``).
- **Group commits** (``lookup`` / ``commit``, what a run uses): the rows that finish in the same
  turn of the event loop (at most ``GROUP_ROWS``) share one transaction, and the rows that start
  in one turn share one ``SELECT ... IN``. A row's ``commit`` returns only once its transaction
  is committed, and the run reports a row (frame, ``run_to`` output, progress) only after that,
  holding the row's concurrency slot meanwhile: every row a run has reported survives a
  ``kill -9``, and a rerun asks again at most the ``concurrency`` rows that were in flight or
  waiting for their group.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import ipaddress
import json
import logging
import math
import os
import socket
import sqlite3
import sys
import time
import warnings
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..exceptions import StoreError
from ..kimi import SIMULATOR_BASE_URL
from ..records import Usage

logger = logging.getLogger("kimi_extract")

DISABLE_ENV = "KIMI_EXTRACT_STORE"
DIR_ENV = "KIMI_EXTRACT_STORE_DIR"
#: Deprecated environment variables -> their new names (read for one release, with a warning).
OLD_ENV = {"KIMI_EXTRACT_CACHE": DISABLE_ENV, "KIMI_EXTRACT_CACHE_DIR": DIR_ENV}
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


def _env(name: str) -> str | None:
    """Environment variable ``name``, else its deprecated old name (with a DeprecationWarning)."""
    value = os.environ.get(name)
    if value is not None:
        return value
    for old, new in OLD_ENV.items():
        if new == name and old in os.environ:
            warnings.warn(
                f"the environment variable {old} is deprecated: use {new}",
                DeprecationWarning,
                stacklevel=3,
            )
            return os.environ[old]
    return None


def default_path() -> Path:
    """The default store file (see the module docstring)."""
    override = _env(DIR_ENV)
    if override:
        return Path(override).expanduser() / FILENAME
    if sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    elif os.name == "nt":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "kimi_extract" / FILENAME


def resolve(store: str | os.PathLike[str] | bool | None) -> Path | None:
    """The store path for an ``Extractor(store=...)`` value, or None when disabled."""
    if store is False:
        return None
    if store is None or store is True:
        if (_env(DISABLE_ENV) or "").strip().lower() in ("0", "off", "false", "no"):
            return None
        return default_path()
    return Path(store).expanduser()


#: Columns of the ``results`` table; a file whose ``results`` table differs is not ours.
COLUMNS = ("key", "model", "output", "usage", "attempts", "web_searches", "created")
#: What to do about a store that cannot be used (appended to every ``StoreError``).
FIX = (
    "move or delete that file to start a new store, pass store='another/path.sqlite3', "
    "or store=False to run without a store"
)
_DEFAULT_PORTS = {"http": 80, "https": 443}


def endpoint_identity(base_url: str | None, *, text_url: str = "", media_url: str = "") -> str:
    """The endpoint a store key belongs to: the normalized base URL, or the routed host pair.

    Scheme and host lower-cased, default ports, user info, query and a trailing ``/`` or ``/v1``
    dropped: ``https://Direct.evolink.ai:443/v1/`` -> ``https://direct.evolink.ai``. Every
    loopback server is one endpoint, ``loopback`` (the simulator takes a new port each run, and
    ``kimi-extract run --simulate --store PATH`` resumes); loopback runs never use the default
    store, so their answers only meet a real endpoint's in no file at all.
    """
    if base_url:
        return _normalize_url(base_url)
    return "routed:" + _normalize_url(text_url) + "," + _normalize_url(media_url)


def _normalize_url(url: str) -> str:
    try:
        parts = urlsplit(url.strip())
        scheme = (parts.scheme or "https").lower()
        host = (parts.hostname or "").lower()
        port = parts.port
    except ValueError:
        return url.strip()
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    if is_local_endpoint(url):
        return f"loopback{path}"
    if ":" in host:
        host = f"[{host}]"
    netloc = host if port is None or port == _DEFAULT_PORTS.get(scheme) else f"{host}:{port}"
    return f"{scheme}://{netloc}{path}"


def is_local_endpoint(url: str | None) -> bool:
    """True for a server on this machine: the one rule for "no default store" and for the
    ``loopback`` store endpoint.

    Local: the bundled simulator (``base_url="simulator"``), ``localhost`` and ``*.localhost``,
    loopback addresses (127.0.0.0/8, ``::1``, ``::ffff:127.0.0.1``), the unspecified addresses
    (``0.0.0.0``, ``::``: a connection to them reaches this machine), this machine's host name
    (``socket.gethostname()``, also its first label) and any address assigned to this machine.
    No DNS lookup is made.
    """
    if not url:
        return False
    if url.strip() == SIMULATOR_BASE_URL:
        return True
    try:
        host = (urlsplit(url.strip()).hostname or "").lower()
    except ValueError:
        return False
    return bool(host) and _is_local_host(host.rstrip("."))


@functools.lru_cache(maxsize=64)
def _is_local_host(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    own = socket.gethostname().lower()
    if host in (own, own.split(".")[0]):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback or address.is_unspecified:
        return True
    # An address this machine holds can be bound to; any other cannot (EADDRNOTAVAIL).
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((str(address), 0))
    except OSError:
        return False
    return True


def store_key(endpoint: str, request_key: str) -> str:
    """The store key of a request (``request_key``) sent to ``endpoint`` (``endpoint_identity``)."""
    return hashlib.sha256(f"kx-store-v3\n{endpoint}\n{request_key}".encode()).hexdigest()


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
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:
        problem = "not an SQLite database" if "not a database" in str(exc) else "corrupt"
        raise StoreError(
            f"result store {path} is {problem} ({exc}; another program's file, or damaged); {FIX}"
        ) from None
    foreign = set(tables) - {"results"}
    if foreign or ("results" in tables and tuple(tables["results"]) != COLUMNS):
        raise StoreError(
            f"result store {path} is an SQLite database of another program (tables "
            f"{sorted(tables)}), not a kimi_extract store; {FIX}"
        )


@dataclass(frozen=True)
class Stored:
    """A stored row: the model's raw answer (JSON text), original usage and attempts."""

    output: str
    usage: Usage
    attempts: int
    web_searches: int


class ResultStore:
    """A SQLite file of validated results keyed by ``request_key``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
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
        #: Transactions committed and rows in them (rows / commits = the mean group size).
        self.commits = 0
        self.committed_rows = 0

    def __repr__(self) -> str:
        return f"ResultStore({str(self.path)!r})"

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
                    stored = _decode(output, usage, attempts, web_searches)
                    if stored is not None:
                        found[key] = stored
        except sqlite3.Error as exc:
            raise self._failed("read", exc) from None
        return found

    def _failed(self, action: str, exc: sqlite3.Error) -> StoreError:
        return StoreError(f"result store {self.path} failed to {action} a row ({exc}); {FIX}")

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
        """Commit one validated result (replacing any older one with the same key).

        ``output`` is the model's raw answer text. Raises ``StoreError`` when the file fails
        (disk full, read-only, corrupt)."""
        values = [key, model, output, encode_usage(usage), attempts, web_searches, time.time()]
        self._write(values, 1)

    def _write(self, values: list[object], rows: int) -> None:
        """Commit ``rows`` rows in one transaction: all of them or, when the file fails
        (``StoreError``), none. ``values`` holds their columns one row after another."""
        try:
            if rows <= _CHUNK:
                # One statement is one transaction (autocommit): a single call to SQLite, whose
                # cost per call dominates small groups.
                self._db.execute(_insert(rows), values)
            else:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    start = 0
                    for size in _chunk_sizes(rows):
                        end = start + size * _WIDTH
                        self._db.execute(_insert(size), values[start:end])
                        start = end
                    self._db.execute("COMMIT")
                except BaseException:
                    with contextlib.suppress(sqlite3.Error):  # SQLite may have rolled back
                        self._db.execute("ROLLBACK")
                    raise
        except sqlite3.Error as exc:
            raise self._failed("write", exc) from None
        self.committed_rows += rows
        self.commits += 1

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
    ) -> asyncio.Future[None]:
        """``put``, grouped: rows finishing in the same event-loop turn (at most ``GROUP_ROWS``)
        share one transaction. The returned future is done once this row's transaction is
        committed (or holds its ``StoreError``): a caller that awaits it before reporting the
        row never reports a row that a ``kill -9`` could lose."""
        loop = asyncio.get_running_loop()
        if not self._queued_waiters:
            loop.call_soon(self.flush)
        waiter: asyncio.Future[None] = loop.create_future()
        self._queued_values += (
            key,
            model,
            output,
            encode_usage(usage),
            attempts,
            web_searches,
            time.time(),
        )
        self._queued_waiters.append(waiter)
        if len(self._queued_waiters) >= GROUP_ROWS:
            self.flush()
        return waiter

    def flush(self) -> None:
        """Commit the rows queued by ``commit`` now (one transaction); wakes their callers."""
        waiters, values = self._queued_waiters, self._queued_values
        if not waiters:
            return
        self._queued_waiters, self._queued_values = [], []
        try:
            self._write(values, len(waiters))
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

    def close(self) -> None:
        """Commit the rows still queued by ``commit``, then close the connection."""
        try:
            self.flush()
        finally:
            self._db.close()


#: The most rows one group commit holds: a larger group is committed at once, not next turn.
GROUP_ROWS = 512
#: Rows per SQL statement: a group of at most this many is one statement; a larger one is cut
#: into power-of-two chunks (7 parameters a row stays under SQLite's oldest limit of 999).
_CHUNK = 128
#: Prepared statements a connection keeps: one INSERT and one SELECT per group size.
_CACHED_STATEMENTS = 2 * _CHUNK + 32
#: Columns a row writes (the INSERT's parameters per row).
_WIDTH = len(COLUMNS)
_COLUMNS_READ = "key, output, usage, attempts, web_searches"
_SELECT_IN: dict[int, str] = {}
_INSERT: dict[int, str] = {}


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


def _insert(rows: int) -> str:
    sql = _INSERT.get(rows)
    if sql is None:
        sql = _INSERT[rows] = "INSERT OR REPLACE INTO results VALUES " + ",".join(
            ["(" + ",".join("?" * _WIDTH) + ")"] * rows
        )
    return sql


def encode_usage(usage: Usage) -> str:
    """``usage`` as the store's JSON text (an unknown cost, NaN, is null)."""
    cost = usage.cost
    cost_text = (
        repr(float(cost)) if math.isfinite(cost) else json.dumps(cost if cost == cost else None)
    )
    return (
        f'{{"prompt_tokens":{int(usage.prompt_tokens)},"cached_tokens":{int(usage.cached_tokens)},'
        f'"cache_write_tokens":{int(usage.cache_write_tokens)},'
        f'"completion_tokens":{int(usage.completion_tokens)},'
        f'"reasoning_tokens":{int(usage.reasoning_tokens)},"requests":{int(usage.requests)},'
        f'"cost":{cost_text}}}'
    )


def _decode(output: Any, usage_json: Any, attempts: Any, web_searches: Any) -> Stored | None:
    """A stored row, or None when the entry cannot be read (a miss: the row is asked again)."""
    try:
        usage = json.loads(str(usage_json))
        if usage.get("cost") is None:
            usage["cost"] = float("nan")
        return Stored(str(output), Usage(**usage), int(attempts), int(web_searches))
    except (TypeError, ValueError, AttributeError):
        return None


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
    message = f"kimi_extract: result store at {store.path} (store=False to disable)"
    logger.info(message)
    if announce:
        print(message, file=sys.stderr)
    return store
