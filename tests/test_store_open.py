"""Opening a result store is safe when many threads and processes open one path at once.

Two Dask workers of one machine (or two notebooks) start on the same new default store; the
first statements on a new SQLite file (switching it to WAL) need an exclusive lock, and a
connection that meets another one there must wait, not fail with "database is locked".
"""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
from pathlib import Path

from kimi_extract.records import Usage
from kimi_extract.run.store import ResultStore

TRIALS = 50
THREADS = 8
PROCESSES = 4


def _path(root: Path, trial: int) -> Path:
    # Even trials open a new file; odd trials open the previous (now existing) one again.
    return root / f"store-{trial - trial % 2}" / "results.sqlite3"


def _open_and_write(root: Path, trial: int, who: str) -> None:
    store = ResultStore(_path(root, trial))
    try:
        store.put(f"{trial}-{who}", model="m", output="{}", usage=Usage(), attempts=1)
    finally:
        store.close()


def _opener(root: Path, who: str, barrier: threading.Barrier, errors: list[str]) -> None:
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


def _process_main(root: str, index: int, barrier: threading.Barrier, errors: list[str]) -> None:
    local: list[str] = []
    _opener(Path(root), f"p{index}", barrier, local)
    errors.extend(local)


def test_many_threads_and_processes_open_one_store_at_once(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    manager = context.Manager()
    try:
        barrier = manager.Barrier(THREADS + PROCESSES)
        errors = manager.list()
        processes = [
            context.Process(target=_process_main, args=(str(tmp_path), i, barrier, errors))
            for i in range(PROCESSES)
        ]
        for process in processes:
            process.start()
        thread_errors: list[str] = []
        threads = [
            threading.Thread(target=_opener, args=(tmp_path, f"t{i}", barrier, thread_errors))
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
    # Every opener's row is in its file: nothing was lost to a failed open.
    for trial in range(0, TRIALS, 2):
        with sqlite3.connect(_path(tmp_path, trial)) as db:
            (count,) = db.execute("SELECT COUNT(*) FROM results").fetchone()
            (mode,) = db.execute("PRAGMA journal_mode").fetchone()
        assert count == 2 * (THREADS + PROCESSES)
        assert mode == "wal"
