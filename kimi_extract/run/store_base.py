"""What every result-store backend shares: the ``Store`` interface, a stored row, the usage codec,
and the PostgreSQL URL that never shows its password.

Two backends implement ``Store``: ``store_sqlite.SQLiteStore`` (a file, the embedded default) and
``store_postgres.PostgresStore`` (a database many processes and machines write at once). The run
(``run.conversation``, ``run.scheduler``, ``run.estimate``) talks to this interface only.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Awaitable, Collection, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from ..exceptions import ConfigurationError
from ..records import Usage

#: The most rows one group commit holds: a larger group is committed at once, not next turn.
GROUP_ROWS = 512
#: URL schemes of a PostgreSQL store (``store="postgresql://user@host/db"``).
POSTGRES_SCHEMES = ("postgresql", "postgres")
#: Query parameters of a libpq URL that hold a secret (shown as ``***``).
_SECRET_PARAMS = frozenset({"password", "sslpassword"})
#: The columns ``export_rows`` yields, in order.
EXPORT_COLUMNS = (
    "key",
    "model",
    "endpoint",
    "output",
    "usage",
    "attempts",
    "web_searches",
    "created",
)


@dataclass(frozen=True)
class Stored:
    """A stored row: the model's raw answer (JSON text), original usage and attempts."""

    output: str
    usage: Usage
    attempts: int
    web_searches: int


@dataclass(frozen=True)
class StoreStats:
    """What a store holds (``kimi-extract store stats``).

    ``rows``: committed rows; ``size_bytes``: the file or the table with its index on disk;
    ``groups``: ``(model, endpoint, rows)`` by row count, largest first (rows from before the
    endpoint was recorded show the endpoint ``""``); ``oldest`` / ``newest``: the commit times
    (Unix seconds) of the oldest and newest row, None when empty.
    """

    location: str
    backend: str
    rows: int
    size_bytes: int
    groups: tuple[tuple[str, str, int], ...] = field(default=())
    oldest: float | None = None
    newest: float | None = None


@runtime_checkable
class Store(Protocol):
    """A result store: validated rows keyed by ``store_key``, committed as they finish.

    Semantics shared by every backend (``run.store`` has the whole contract): ``commit`` returns
    (its awaitable completes) only once the row's transaction is committed, so a row is reported
    only after a ``kill -9`` can no longer lose it; a key is stored at most once (the backend's
    unique key enforces it, not a lock in this process): a second commit of a key keeps the first
    row, unless ``replace`` says the stored one is stale (the output model rejects it now);
    ``lookup`` / ``commit`` group the rows of one event-loop turn into one query / one statement.
    Errors are ``StoreError``, whose text never shows a password or the API key.
    """

    #: Where the store is, as messages and reports show it (a URL without its password).
    location: str
    #: The endpoint identity recorded beside each committed row (for ``stats``).
    endpoint: str
    #: Transactions committed and rows in them by this object.
    commits: int
    committed_rows: int

    def lookup(self, key: str) -> Awaitable[Stored | None]:
        """The stored row of ``key`` or None, grouped with the other lookups of this turn."""
        ...

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
    ) -> Awaitable[None]:
        """Commit one validated row, grouped with the other rows finishing this turn."""
        ...

    def get(self, key: str) -> Stored | None:
        """``lookup`` from sync code."""
        ...

    def get_many(self, keys: Collection[str]) -> dict[str, Stored]:
        """The stored rows among ``keys`` (sync)."""
        ...

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
        """``commit`` from sync code (one transaction)."""
        ...

    def __len__(self) -> int: ...

    def stats(self) -> StoreStats:
        """Rows, size on disk, rows by model and endpoint."""
        ...

    def export_rows(self) -> Iterator[tuple[Any, ...]]:
        """Every row, as ``EXPORT_COLUMNS``, oldest first."""
        ...

    def prune(self, older_than: float) -> int:
        """Delete the rows committed before Unix time ``older_than``; returns how many."""
        ...

    def close(self) -> None:
        """Commit what is queued and close (sync code; no loop running this store's I/O)."""
        ...

    async def aclose(self) -> None:
        """Commit what is queued and close, on the run's event loop."""
        ...


# -- the usage codec ---------------------------------------------------------------------------


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


def decode_stored(output: Any, usage_json: Any, attempts: Any, web_searches: Any) -> Stored | None:
    """A stored row, or None when the entry cannot be read (a miss: the row is asked again)."""
    try:
        usage = json.loads(str(usage_json))
        if usage.get("cost") is None:
            usage["cost"] = float("nan")
        return Stored(str(output), Usage(**usage), int(attempts), int(web_searches))
    except (TypeError, ValueError, AttributeError):
        return None


# -- the PostgreSQL URL ------------------------------------------------------------------------


def is_store_url(value: object) -> bool:
    """Whether ``value`` names a PostgreSQL store (``postgresql://...`` or ``postgres://...``)."""
    if isinstance(value, StoreURL):
        return True
    if not isinstance(value, str):
        return False
    scheme, sep, _ = value.strip().partition("://")
    return bool(sep) and scheme.lower() in POSTGRES_SCHEMES


class StoreURL:
    """A PostgreSQL store's URL: ``str()`` and ``repr()`` show it with its password as ``***``.

    ``reveal()`` gives the URL itself, for the connection only. Checked when made: a scheme of
    ``POSTGRES_SCHEMES`` and a database name (or a ``dbname=`` parameter); otherwise a
    ``ConfigurationError`` naming ``setting``, never echoing the password. ``redact(text)``
    removes the password (plain or percent-encoded) from any text, such as a driver's error.
    """

    __slots__ = ("_url", "_shown", "_secrets")
    _secrets: tuple[str, ...]

    def __init__(self, url: str, setting: str = "store") -> None:
        if isinstance(url, StoreURL):
            url = url.reveal()
        url = url.strip()
        self._url = url
        secrets: list[str] = []
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018  (a port out of range or not a number raises ValueError)
            if parts.password:
                secrets.append(parts.password)
            query = parse_qsl(parts.query, keep_blank_values=True)
        except ValueError:
            self._secrets = (url,)
            self._shown = "postgresql://***"
            raise ConfigurationError(
                f"{setting} is not a valid PostgreSQL URL (a bad port or IPv6 brackets); write "
                "it as postgresql://user@host:5432/dbname"
            ) from None
        secrets += [value for name, value in query if name.lower() in _SECRET_PARAMS and value]
        forms = (
            form
            for secret in secrets
            for form in (secret, unquote(secret), quote(unquote(secret), safe=""))
        )
        # The longest first: a form that contains another is replaced whole.
        self._secrets = tuple(sorted(dict.fromkeys(f for f in forms if f), key=len, reverse=True))
        netloc = parts.netloc
        if parts.password is not None:
            user, _, host = netloc.rpartition("@")
            netloc = user.partition(":")[0] + ":***@" + host
        shown_query = urlencode(
            [(n, "***" if n.lower() in _SECRET_PARAMS else v) for n, v in query], safe="/:,*"
        )
        self._shown = urlunsplit((parts.scheme.lower(), netloc, parts.path, shown_query, ""))
        database = unquote(parts.path.lstrip("/")) or dict(query).get("dbname", "")
        if parts.scheme.lower() not in POSTGRES_SCHEMES or not database:
            raise ConfigurationError(
                f"{setting} must be a PostgreSQL URL with a database name, such as "
                f"postgresql://user@host:5432/dbname; got {self._shown!r}"
            )

    def reveal(self) -> str:
        """The URL with its password: for the database connection only."""
        return self._url

    def redact(self, text: str) -> str:
        """``text`` with the password (plain or percent-encoded) replaced by ``***``."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def __str__(self) -> str:
        return self._shown

    def __repr__(self) -> str:
        return f"StoreURL({self._shown!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StoreURL) and other._url == self._url

    def __hash__(self) -> int:
        return hash(("StoreURL", self._url))

    def __reduce__(self) -> tuple[Any, ...]:
        # Shipped whole (a Dask worker connects with it), as the API key's ``Secret`` is.
        return (StoreURL, (self._url,))


_PASSWORD_IN_URL = re.compile(r"(?i)(postgres(?:ql)?://[^:/@\s]*:)[^@\s]*@")


def scrub_urls(text: str) -> str:
    """``text`` with the password of any PostgreSQL URL in it replaced by ``***``."""
    return _PASSWORD_IN_URL.sub(r"\1***@", text)
