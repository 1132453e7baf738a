"""What every result-store backend shares: the ``Store`` interface, a stored row, the usage codec
(and, from ``config.location``, the PostgreSQL URL that never shows its password).

Two backends implement ``Store``: ``store_sqlite.SQLiteStore`` (a file, the embedded default) and
``store_postgres.PostgresStore`` (a database many processes and machines write at once). The run
(``run.conversation``, ``run.scheduler``, ``run.estimate``) talks to this interface only.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Collection, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..records import Usage

#: The most rows one group commit holds: a larger group is committed at once, not next turn.
GROUP_ROWS = 512
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
