"""Opening a result store is safe when many threads and processes open one store at once.

Two Dask workers of one machine (or two notebooks) start on the same new default store; the
first statements on a new SQLite file (switching it to WAL) need an exclusive lock, and a
connection that meets another one there must wait, not fail with "database is locked". A new
PostgreSQL database (here: a new schema) is created by whichever opener comes first, once: the
others wait for its advisory lock, and find the tables made.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
from pathlib import Path

import psycopg
import pytest

from kimi_extract.records import Usage
from kimi_extract.run.store import open_location, resolve

from ..pg import BACKENDS

TRIALS = 50
THREADS = 8
PROCESSES = 4


def _path(root: Path | str, trial: int) -> Path | str:
    """Even trials open a new store; odd trials open the previous (now existing) one again.
    ``root``: a directory (SQLite files in it) or a PostgreSQL URL (one schema a store)."""
    if isinstance(root, str):
        return f"{root}&options=-csearch_path%3Dtrial_{trial - trial % 2}"
    return root / f"store-{trial - trial % 2}" / "results.sqlite3"


def _open_and_write(root: Path | str, trial: int, who: str) -> None:
    location = resolve(_path(root, trial))
    assert location is not None
    store = open_location(location)
    try:
        store.put(f"{trial}-{who}", model="m", output="{}", usage=Usage(), attempts=1)
    finally:
        store.close()


def _opener(root: Path | str, who: str, barrier: threading.Barrier, errors: list[str]) -> None:
    for trial in range(TRIALS):
        try:
            barrier.wait(timeout=60)
        except threading.BrokenBarrierError:
            errors.append(f"{who}: barrier broken at trial {trial}")
            return
        try:
            _open_and_write(root, trial, who)
        except Exception as exc:  # recorded, so the test names every failure
            errors.append(f"{who} trial {trial}: {type(exc).__name__}: {exc}")


def _process_main(
    root: Path | str, index: int, barrier: threading.Barrier, errors: list[str]
) -> None:
    local: list[str] = []
    _opener(root, f"p{index}", barrier, local)
    errors.extend(local)


@pytest.mark.parametrize("kind", BACKENDS)
def test_many_threads_and_processes_open_one_store_at_once(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    root: Path | str = tmp_path
    if kind == "postgresql":
        root = request.getfixturevalue("pg_url")
        with psycopg.connect(root, autocommit=True) as db:
            for trial in range(0, TRIALS, 2):
                db.execute(f"CREATE SCHEMA trial_{trial}")
    context = multiprocessing.get_context("fork")
    manager = context.Manager()
    try:
        barrier = manager.Barrier(THREADS + PROCESSES)
        errors = manager.list()
        processes = [
            context.Process(target=_process_main, args=(root, i, barrier, errors))
            for i in range(PROCESSES)
        ]
        for process in processes:
            process.start()
        thread_errors: list[str] = []
        threads = [
            threading.Thread(target=_opener, args=(root, f"t{i}", barrier, thread_errors))
            for i in range(THREADS)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
        for process in processes:
            process.join(timeout=300)
        all_errors = thread_errors + list(errors)
        exit_codes = [process.exitcode for process in processes]
    finally:
        manager.shutdown()
    assert all_errors == [], all_errors[:5]
    assert exit_codes == [0] * PROCESSES
    # Every opener's row is in its store: nothing was lost to a failed open.
    for trial in range(0, TRIALS, 2):
        if isinstance(root, str):
            with psycopg.connect(str(_path(root, trial)), autocommit=True) as pg:
                (count,) = pg.execute("SELECT COUNT(*) FROM kimi_extract_results").fetchone()
            assert count == 2 * (THREADS + PROCESSES)
            continue
        with sqlite3.connect(_path(root, trial)) as db:
            (count,) = db.execute("SELECT COUNT(*) FROM results").fetchone()
            (mode,) = db.execute("PRAGMA journal_mode").fetchone()
        assert count == 2 * (THREADS + PROCESSES)
        assert mode == "wal"
