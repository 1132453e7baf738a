"""``kimi-extract store stats|export|prune``, on both backends."""

from __future__ import annotations

import argparse
import csv
import json
import time
import types
from pathlib import Path

import pytest

import kimi_extract as kx
import kimi_extract.run.store_postgres as pg_store
import kimi_extract.run.store_sqlite as sqlite_store
from kimi_extract import cli
from kimi_extract.run.store_base import Store
from kimi_extract.store_cli import cutoff

from ..conftest import Review
from ..pg import Backend

DAY = 86400.0
NOW = 1_750_000_000.0


def _fill(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows of two models and two endpoints: 3 committed 40 days ago, 2 today."""
    for days, model, endpoint, count in (
        (40, "kimi-k3", "https://direct.evolink.ai", 3),
        (0, "kimi-k3.1-pro", "loopback", 2),
    ):
        clock = types.SimpleNamespace(
            time=lambda days=days: NOW - days * DAY, monotonic=time.monotonic, sleep=time.sleep
        )
        monkeypatch.setattr(sqlite_store, "time", clock)
        monkeypatch.setattr(pg_store, "time", clock)
        store = backend.open(endpoint=endpoint)
        assert isinstance(store, Store)  # both backends implement the one interface
        for i in range(count):
            usage = kx.Usage(prompt_tokens=10 + i, requests=1, cost=0.25)
            store.put(f"{model}-{i}", model=model, output=f'{{"i": {i}}}', usage=usage, attempts=1)
        store.close()
    monkeypatch.undo()


def test_stats_show_rows_size_and_rows_by_model_and_endpoint(backend, monkeypatch, capsys):
    _fill(backend, monkeypatch)
    assert cli.main(["store", "stats", "--store", str(backend.location)]) == 0
    text = capsys.readouterr().out
    assert "rows: 5" in text and f"({backend.kind})" in text
    assert "kimi-k3        https://direct.evolink.ai  3" in text
    assert "kimi-k3.1-pro  loopback  2" in text
    assert cli.main(["store", "stats", "--store", str(backend.location), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["rows"] == 5 and stats["size_bytes"] > 0
    assert stats["groups"][0] == {
        "model": "kimi-k3",
        "endpoint": "https://direct.evolink.ai",
        "rows": 3,
    }
    assert stats["oldest"] == NOW - 40 * DAY and stats["newest"] == NOW


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_export_writes_every_row_oldest_first(backend, monkeypatch, tmp_path: Path, suffix):
    _fill(backend, monkeypatch)
    out = tmp_path / f"rows{suffix}"
    assert cli.main(["store", "export", "--store", str(backend.location), "--out", str(out)]) == 0
    if suffix == ".jsonl":
        rows = [json.loads(line) for line in out.read_text().splitlines()]
    else:
        rows = list(csv.DictReader(out.open()))
    assert [r["model"] for r in rows] == ["kimi-k3"] * 3 + ["kimi-k3.1-pro"] * 2
    assert json.loads(rows[1]["usage"])["prompt_tokens"] == 11
    assert json.loads(rows[4]["output"]) == {"i": 1} and rows[4]["endpoint"] == "loopback"


def test_prune_deletes_only_rows_older_than_the_cutoff(backend, monkeypatch, capsys):
    _fill(backend, monkeypatch)
    where = ["--store", str(backend.location)]
    assert cli.main(["store", "prune", *where, "--older-than", "20000d", "--dry-run"]) == 0
    assert "0 rows" in capsys.readouterr().out
    # 30 days before NOW: the three 40-day-old rows go, today's two stay.
    date = "2025-05-16"  # NOW is 2025-06-15
    assert cli.main(["store", "prune", *where, "--older-than", date, "--dry-run"]) == 0
    assert "3 rows" in capsys.readouterr().out and backend.committed() == 5
    assert cli.main(["store", "prune", *where, "--older-than", date]) == 0
    assert "deleted 3 rows" in capsys.readouterr().out
    assert backend.committed() == 2


def test_ages_and_dates():
    assert cutoff("30d", now=NOW) == NOW - 30 * DAY
    assert cutoff("12h", now=NOW) == NOW - 12 * 3600 and cutoff("2w", now=NOW) == NOW - 14 * DAY
    assert cutoff("2025-06-15") == 1_749_945_600.0
    with pytest.raises(argparse.ArgumentTypeError, match="neither an age"):
        cutoff("soon")


def test_a_missing_store_is_an_error_not_a_new_file(tmp_path: Path, capsys):
    missing = tmp_path / "nope.sqlite3"
    assert cli.main(["store", "stats", "--store", str(missing)]) == 2
    assert "no result store at" in capsys.readouterr().err and not missing.exists()


def test_an_old_sqlite_store_gains_the_endpoint_column(tmp_path: Path, capsys):
    """A store written before the endpoint was kept opens, and its rows show no endpoint."""
    import sqlite3

    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE results (key TEXT PRIMARY KEY, model TEXT NOT NULL, output TEXT NOT "
            "NULL, usage TEXT NOT NULL, attempts INTEGER NOT NULL, web_searches INTEGER NOT NULL "
            "DEFAULT 0, created REAL NOT NULL)"
        )
        db.execute("INSERT INTO results VALUES ('k', 'kimi-k3', '{}', '{}', 1, 0, 1.0)")
    assert cli.main(["store", "stats", "--store", str(path)]) == 0
    assert "kimi-k3  (not recorded)  1" in capsys.readouterr().out
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 1
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 7")
    with pytest.raises(kx.StoreError, match="newer kimi_extract"):
        kx.Extractor(Review, api_key="sk-x", store=path)
