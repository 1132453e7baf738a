"""The result store: every validated row is committed as it finishes, so reruns resume.

A run looks each row up before sending it; a hit is served without a request (``kx_from_store``
is True, zero tokens are billed to the run, and the original usage is reported in
``RunReport.saved``). Errors are never stored, so a rerun retries exactly the rows that failed or
never ran.

- **Where**: ``Extractor(store=...)``: a path (an SQLite file, ``run.store_sqlite``), a
  PostgreSQL URL ``"postgresql://user@host/db"`` (``run.store_postgres``: one store for many
  processes and machines), ``True``/None for the default location, or False to disable. The
  default is ``$KIMI_EXTRACT_STORE`` when it holds a PostgreSQL URL, else the file
  ``$KIMI_EXTRACT_STORE_DIR`` or the user cache directory (``$XDG_CACHE_HOME/kimi_extract``,
  ``~/.cache/kimi_extract``; ``~/Library/Caches`` on macOS, ``%LOCALAPPDATA%`` on Windows) /
  ``results.sqlite3``. ``KIMI_EXTRACT_STORE=0`` (or off/false/no) disables the default store (an
  explicit ``store=`` still wins). The old names ``KIMI_EXTRACT_CACHE`` /
  ``KIMI_EXTRACT_CACHE_DIR`` still work for one release, with a ``DeprecationWarning`` (a new
  name that is set wins).
- **One contract, two backends**: both implement ``store_base.Store``, and the run talks to
  that interface only. A row is reported only after its commit; a key is stored once (the
  backend's unique key enforces it, across processes and machines); a resumed row is served
  with ``kx_from_store``; keys include the endpoint; the API key is never stored, and a
  PostgreSQL password is never shown (``store_base.StoreURL``).
- **Key** (``request.request_key``, then ``store_key``): SHA-256 over the canonical JSON (sorted
  keys, no whitespace) of everything that determines the answer (the part shared by all rows
  hashed once per run): model, messages (system, examples, the row), response format (the
  schema), reasoning effort, tools and mode, and the **endpoint's identity** (``endpoint_identity``:
  the normalized base URL, or the routed host pair). Never the API key or the output budget. The
  same inputs give the same key in every process, whatever ``PYTHONHASHSEED`` is; any change to
  them is a different key, so answers from one endpoint (the simulator, a proxy) are never served
  to a run against another. The endpoint is also kept beside each row, for ``stats``.
- **Local endpoints** (loopback hosts: the simulator, a local proxy) get no default store: with
  ``store=None``/True a run against them keeps nothing; an explicit ``store=`` still works,
  and every loopback server counts as one endpoint there (the simulator's port changes per run).
- **What is kept**: the model's raw answer (the JSON text it returned), validated again by the
  output model on a hit, so a resumed row is exactly what the first run produced (validators,
  secrets, aliases, serializers and excluded fields included). A stored answer the model no
  longer accepts is a miss (asked again), and the new answer replaces it.
- **Checked before the first request**: a store that cannot be used raises ``StoreError`` (a
  ``ConfigurationError``) naming the location and the fix: for a file, when the run's extractor
  is made; for a database, when the run opens it. A store that fails during a run (disk full,
  connection lost) stops it with ``RunStopped`` whose ``cause`` is a ``StoreError``.
- **Group commits** (``lookup`` / ``commit``, what a run uses): the rows that finish in the same
  turn of the event loop (at most ``GROUP_ROWS``) share one transaction, and the rows that start
  in one turn share one lookup query. A row's ``commit`` returns only once its transaction
  is committed, and the run reports a row (frame, ``run_to`` output, progress) only after that,
  holding the row's concurrency slot meanwhile: every row a run has reported survives a
  ``kill -9``, and a rerun asks again at most the ``concurrency`` rows that were in flight or
  waiting for their group.
- **Maintenance**: ``kimi-extract store stats|export|prune`` (``kimi_extract.store_cli``).
"""

from __future__ import annotations

import hashlib
import logging
import sys
from urllib.parse import urlsplit

from ..config.endpoint import is_local_endpoint
from ..config.location import (
    Location,
    StoreURL,
    resolve,
)
from .store_base import GROUP_ROWS, Store, Stored, StoreStats
from .store_sqlite import FIX, SQLiteStore, check_location

logger = logging.getLogger("kimi_extract")

#: The SQLite store under its first name.
ResultStore = SQLiteStore

__all__ = [
    "FIX",
    "GROUP_ROWS",
    "Location",
    "ResultStore",
    "SQLiteStore",
    "Store",
    "StoreStats",
    "StoreURL",
    "Stored",
    "check_store",
    "endpoint_identity",
    "is_local_endpoint",
    "open_location",
    "open_store",
    "resolve",
    "store_key",
]

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


def store_key(endpoint: str, request_key: str) -> str:
    """The store key of a request (``request_key``) sent to ``endpoint`` (``endpoint_identity``)."""
    return hashlib.sha256(f"kx-store-v3\n{endpoint}\n{request_key}".encode()).hexdigest()


def check_store(location: Location) -> None:
    """Raise ``StoreError`` (or ``ConfigurationError``) unless ``location`` can hold a store,
    without writing: a file is checked on disk; for a database, only that its driver is installed
    (it is reached when a run opens it)."""
    if isinstance(location, StoreURL):
        from .store_postgres import _require_driver

        _require_driver()
        return
    check_location(location)


def open_location(location: Location, *, endpoint: str = "") -> Store:
    """The store at ``location`` (an SQLite file or a PostgreSQL URL), opened and checked.

    ``endpoint`` (``endpoint_identity``) is recorded beside every row this object commits."""
    if isinstance(location, StoreURL):
        from .store_postgres import PostgresStore

        return PostgresStore(location, endpoint=endpoint)
    return SQLiteStore(location, endpoint=endpoint)


def open_store(location: Location | None, announce: bool, *, endpoint: str = "") -> Store | None:
    """Open the run's store (None when disabled); say where it is (stderr when ``announce``)."""
    if location is None:
        return None
    store = open_location(location, endpoint=endpoint)
    message = f"kimi_extract: result store at {store.location} (store=False to disable)"
    logger.info(message)
    if announce:
        print(message, file=sys.stderr)
    return store
