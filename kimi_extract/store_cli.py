"""``kimi-extract store stats|export|prune``: inspect and trim a long-lived result store.

Works on both backends (an SQLite file or a PostgreSQL URL), through the ``Store`` interface:

- ``stats``: rows, size on disk, the oldest and newest commit, rows by model and endpoint
  (``--json`` for a machine-readable form).
- ``export --out FILE``: every row, oldest first, as ``.jsonl`` or ``.csv`` (the store's own
  columns: key, model, endpoint, the raw answer, usage as JSON, attempts, web searches, commit
  time), written as it is read, so a large store needs no memory.
- ``prune --older-than AGE``: delete the rows committed before now minus ``AGE`` (``30d``,
  ``12h``, ``90m``, ``2w``, ``45s``) or before a date (``2025-01-31``); ``--dry-run`` counts them.

``--store`` takes what ``Extractor(store=...)`` takes; without it, the default store
(``KIMI_EXTRACT_STORE`` / ``KIMI_EXTRACT_STORE_DIR``). Exit status 0, or 2 with the error on
stderr (an error never shows a password).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from .exceptions import KimiExtractError
from .run.store import open_location, resolve
from .run.store_base import EXPORT_COLUMNS, Store, StoreStats

EXIT_OK, EXIT_ERROR = 0, 2
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def add_store_parser(sub: Any) -> None:
    """Register ``store`` and its subcommands on the CLI's subparsers."""
    store = sub.add_parser(
        "store",
        help="inspect and trim a result store (stats, export, prune)",
        description="Inspect and trim a result store: an SQLite file or a PostgreSQL URL.",
    )
    actions = store.add_subparsers(dest="store_command", required=True)
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument(
        "--store",
        help="the store: a file path or postgresql://user@host/db (default: the default store)",
    )
    stats = actions.add_parser("stats", parents=[where], help="rows, size, rows by model")
    stats.add_argument("--json", action="store_true", help="print the stats as JSON")
    stats.set_defaults(func=cmd_store_stats)
    export = actions.add_parser("export", parents=[where], help="write every row to a file")
    export.add_argument("--out", required=True, help="the file to write: .jsonl or .csv")
    export.set_defaults(func=cmd_store_export)
    prune = actions.add_parser("prune", parents=[where], help="delete old rows")
    prune.add_argument(
        "--older-than",
        required=True,
        type=cutoff,
        help="an age (30d, 12h, 90m, 2w, 45s) or a date (2025-01-31): rows committed before "
        "it are deleted",
    )
    prune.add_argument("--dry-run", action="store_true", help="count the rows; delete none")
    prune.set_defaults(func=cmd_store_prune)


def cutoff(text: str, now: float | None = None) -> float:
    """The Unix time ``--older-than`` means: now minus an age, or the start of a UTC date."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text.lower())
    if match:
        age = float(match.group(1)) * _UNITS[match.group(2)]
        return (time.time() if now is None else now) - age
    try:
        day = dt.date.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither an age (30d, 12h, 90m, 2w, 45s) nor a date (2025-01-31)"
        ) from None
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp()


def _open(args: argparse.Namespace) -> Store:
    location = resolve(args.store if args.store else None)
    if location is None:
        raise KimiExtractError(
            "no result store: the default store is off (KIMI_EXTRACT_STORE); pass --store"
        )
    if isinstance(location, Path) and not location.exists():
        raise KimiExtractError(f"no result store at {location}")
    return open_location(location)


def _run(args: argparse.Namespace, action: Any) -> int:
    try:
        store = _open(args)
        try:
            action(store)
        finally:
            store.close()
    except (KimiExtractError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK


def _when(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    try:
        return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        return f"{seconds:.0f} (Unix time)"


def _size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    return f"{size} B"  # pragma: no cover


def render_stats(stats: StoreStats) -> str:
    """The ``stats`` report as text."""
    lines = [
        f"result store: {stats.location} ({stats.backend})",
        f"rows: {stats.rows:,}",
        f"size: {_size(stats.size_bytes)}",
        f"oldest: {_when(stats.oldest)}",
        f"newest: {_when(stats.newest)}",
    ]
    if stats.groups:
        lines.append("rows by model and endpoint:")
        width = max(len(model) for model, _, _ in stats.groups)
        for model, endpoint, rows in stats.groups:
            lines.append(f"  {model:<{width}}  {endpoint or '(not recorded)'}  {rows:,}")
    return "\n".join(lines)


def cmd_store_stats(args: argparse.Namespace) -> int:
    """``kimi-extract store stats``."""

    def show(store: Store) -> None:
        stats = store.stats()
        if args.json:
            payload = {
                "location": stats.location,
                "backend": stats.backend,
                "rows": stats.rows,
                "size_bytes": stats.size_bytes,
                "oldest": stats.oldest,
                "newest": stats.newest,
                "groups": [
                    {"model": model, "endpoint": endpoint, "rows": rows}
                    for model, endpoint, rows in stats.groups
                ],
            }
            print(json.dumps(payload, indent=2))
        else:
            print(render_stats(stats))

    return _run(args, show)


def cmd_store_export(args: argparse.Namespace) -> int:
    """``kimi-extract store export --out FILE``."""
    out = Path(args.out)
    if out.suffix.lower() not in (".jsonl", ".csv"):
        print(f"error: --out must end in .jsonl or .csv, got {out.name}", file=sys.stderr)
        return EXIT_ERROR

    def export(store: Store) -> None:
        count = 0
        with out.open("w", encoding="utf-8", newline="") as handle:
            writer = csv.writer(handle) if out.suffix.lower() == ".csv" else None
            if writer is not None:
                writer.writerow(EXPORT_COLUMNS)
            for row in store.export_rows():
                if writer is not None:
                    writer.writerow(row)
                else:
                    handle.write(json.dumps(dict(zip(EXPORT_COLUMNS, row, strict=True))) + "\n")
                count += 1
        print(f"wrote {count:,} rows of {store.location} to {out}", file=sys.stderr)

    return _run(args, export)


def cmd_store_prune(args: argparse.Namespace) -> int:
    """``kimi-extract store prune --older-than AGE``."""

    def prune(store: Store) -> None:
        when = _when(args.older_than)
        if args.dry_run:
            old = sum(1 for row in store.export_rows() if row[-1] < args.older_than)
            print(f"{old:,} rows of {store.location} were committed before {when} (dry run)")
            return
        deleted = store.prune(args.older_than)
        print(f"deleted {deleted:,} rows of {store.location} committed before {when}")

    return _run(args, prune)
