"""The PostgreSQL result store: its schema, its password, group commits, exactly-once across
processes, and failures (the contract both backends share is tested in test_store.py,
test_store_open.py and test_guarantees.py, against both)."""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
from typing import Any
from urllib.parse import quote

import psycopg
import pytest

import kimi_extract as kx
import kimi_extract.run.store_postgres as pg_store
from kimi_extract.run.store import StoreURL, open_location, resolve
from kimi_extract.simulator import Reply

from ..conftest import Review, chat_requests
from ..pg import PASSWORD, PostgresServer


def _database(url: str) -> str:
    return url.split("?")[0].rsplit("/", 1)[1]


def _tcp(server: PostgresServer, url: str) -> str:
    """The same database over TCP, with the password in the URL."""
    return server.url(_database(url), tcp=True)


def _traces(text: str) -> list[str]:
    """The pieces of the password that ``text`` shows (plain or percent-encoded)."""
    return [piece for piece in (PASSWORD, quote(PASSWORD, safe=""), "S3cret") if piece in text]


def test_the_password_is_never_shown(sim, make_extractor, postgres_server, pg_url, caplog, capsys):
    url = _tcp(postgres_server, pg_url)
    caplog.set_level(logging.DEBUG)
    ex = make_extractor(store=url, progress=True)
    shown = [repr(ex), repr(ex.config), str(ex.store_path), repr(ex.store_path)]
    out = ex.run(["a", "b"])
    assert out["kx_error"].isna().all()
    assert ex.last_run is not None and ex.last_run.store is not None
    shown += [ex.last_run.store, ex.last_run.summary(), caplog.text, *capsys.readouterr()]
    assert "kx:***@127.0.0.1" in ex.last_run.store
    wrong = url.replace(quote(PASSWORD, safe=""), quote(PASSWORD + "x", safe=""))
    with pytest.raises(kx.StoreError) as info:  # a wrong password: before any request
        make_extractor(store=wrong).run(["c"])
    assert "password authentication failed" in str(info.value)
    shown += [str(info.value), repr(info.value), caplog.text]
    assert [text for text in shown if _traces(text)] == []
    assert "S3cret" in PASSWORD and len(chat_requests(sim)) == 2


def test_a_store_url_is_checked_and_redacted():
    url = StoreURL("postgresql://kx:p%40ss-Word@db:5432/x?sslmode=require&password=Other-Pw")
    assert str(url) == "postgresql://kx:***@db:5432/x?sslmode=require&password=***"
    assert url.redact("FATAL p@ss-Word p%40ss-Word Other-Pw") == "FATAL *** *** ***"
    for bad in ("postgresql://kx:Pw-1@db:99999/x", "postgresql://kx:Pw-1@db:5432/"):
        with pytest.raises(kx.ConfigurationError, match="store") as info:
            kx.Extractor(Review, api_key="sk-x", store=bad)
        assert "Pw-1" not in str(info.value)


def test_without_the_driver_the_store_names_the_install(monkeypatch):
    monkeypatch.setattr(pg_store, "psycopg", None)
    with pytest.raises(kx.ConfigurationError, match=r"\.\[postgres\]"):
        kx.Extractor(Review, api_key="sk-x", store="postgresql://kx@db/x")


def test_the_schema_is_created_once_and_versioned(sim, make_extractor, pg_url):
    make_extractor(store=pg_url).run(["a"])
    with psycopg.connect(pg_url, autocommit=True) as db:
        meta = dict(db.execute("SELECT name, value FROM kimi_extract_meta").fetchall())
        assert meta == {"schema_version": "1", "written_by": "kimi_extract"}
        db.execute("UPDATE kimi_extract_meta SET value = '2' WHERE name = 'schema_version'")
    sent = len(chat_requests(sim))
    with pytest.raises(kx.StoreError, match="newer kimi_extract.*upgrade kimi_extract"):
        make_extractor(store=pg_url).run(["b"])
    assert len(chat_requests(sim)) == sent  # refused before the first request


@pytest.mark.parametrize(
    "foreign",
    [
        "CREATE TABLE kimi_extract_results (id INT PRIMARY KEY, body TEXT)",
        "CREATE TABLE kimi_extract_meta (k TEXT, v TEXT)",
    ],
)
def test_tables_of_another_program_are_refused(sim, make_extractor, pg_url, foreign):
    with psycopg.connect(pg_url, autocommit=True) as db:
        db.execute(foreign)
    with pytest.raises(kx.StoreError, match="another program.*another database or schema"):
        make_extractor(store=pg_url).run(["a"])
    assert chat_requests(sim) == []


class _Counting:
    """Counts the statements the store's pool connections send."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.inserts = self.selects = 0
        real = psycopg.AsyncConnection.execute

        async def execute(conn: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            text = str(query)
            self.inserts += text.startswith("INSERT")
            self.selects += text.startswith("SELECT key")
            return await real(conn, query, *args, **kwargs)

        monkeypatch.setattr(psycopg.AsyncConnection, "execute", execute)


def test_a_turns_rows_share_one_statement_and_one_lookup(pg_url, monkeypatch):
    counting = _Counting(monkeypatch)
    location = resolve(pg_url)
    assert location is not None
    store = open_location(location, endpoint="https://api.example")

    async def main() -> None:
        usage = kx.Usage(prompt_tokens=3, requests=1, cost=0.5)
        commits = [
            store.commit(f"k{i}", model="m", output=f'{{"i": {i}}}', usage=usage, attempts=1)
            for i in range(300)
        ]
        await asyncio.gather(*commits)
        assert counting.inserts == 1 and store.commits == 1 and store.committed_rows == 300
        found = await asyncio.gather(*(store.lookup(f"k{i}") for i in range(0, 600, 2)))
        assert counting.selects == 1
        hits = [f for f in found if f is not None]
        assert len(hits) == 150 and hits[7].output == '{"i": 14}' and hits[7].usage.cost == 0.5
        # A commit and a lookup of the same key in one turn: the lookup finds the row.
        _, same_turn = await asyncio.gather(
            store.commit("late", model="m", output="{}", usage=usage, attempts=2),
            store.lookup("late"),
        )
        assert same_turn is not None and same_turn.attempts == 2
        stats = store.stats()
        assert stats.rows == 301 and stats.groups == (("m", "https://api.example", 301),)
        await store.aclose()

    asyncio.run(main())


def test_a_failed_group_fails_every_row_in_it_and_keeps_none(pg_url):
    location = resolve(pg_url)
    assert location is not None
    store = open_location(location)

    async def main() -> list[Any]:
        outcomes = await asyncio.gather(
            *(
                # PostgreSQL text cannot hold NUL: the one bad row fails the whole statement.
                store.commit(
                    f"k{i}",
                    model="m\x00" if i == 7 else "m",
                    output="{}",
                    usage=kx.Usage(),
                    attempts=1,
                )
                for i in range(20)
            ),
            return_exceptions=True,
        )
        await store.aclose()
        return outcomes

    outcomes = asyncio.run(main())
    assert all(isinstance(o, kx.StoreError) for o in outcomes), outcomes
    assert len(open_location(location)) == 0


def _commit_same_keys(url: str, who: int, keys: int) -> None:
    location = resolve(url)
    assert location is not None
    store = open_location(location)

    async def main() -> None:
        await asyncio.gather(
            *(
                store.commit(
                    f"k{i}", model=f"writer {who}", output="{}", usage=kx.Usage(), attempts=1
                )
                for i in range(keys)
            )
        )
        await store.aclose()

    asyncio.run(main())


def test_many_processes_commit_the_same_keys_and_each_is_stored_once(pg_url):
    """The database's unique key, not a lock in Python, keeps one row per key: four processes
    commit the same 500 keys at once, all succeed, and each key holds one writer's row."""
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=_commit_same_keys, args=(pg_url, w, 500)) for w in range(4)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(timeout=120)
    assert [w.exitcode for w in writers] == [0, 0, 0, 0]
    with psycopg.connect(pg_url, autocommit=True) as db:
        rows, keys = db.execute(
            "SELECT COUNT(*), COUNT(DISTINCT key) FROM kimi_extract_results"
        ).fetchone()
    assert rows == keys == 500


def test_a_store_lost_mid_run_stops_the_run_with_the_partial_frame(
    sim, make_extractor, pg_url, postgres_server
):
    """The database drops the store's connections mid-run: the run stops with a StoreError
    cause, the rows finished before are kept, no new row starts, and nothing shows a secret."""
    database = _database(pg_url)
    answered = 0

    def responder(request: Any) -> Reply | None:
        nonlocal answered
        answered += 1
        if answered == 6:
            postgres_server.admin(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                f"WHERE datname = '{database}' AND pid <> pg_backend_pid()"
            )
        return Reply(delay=0.05)

    sim.responder = responder
    url = _tcp(postgres_server, pg_url)
    with pytest.raises(kx.RunStopped) as info:
        make_extractor(store=url, concurrency=2).run([f"row {i}" for i in range(40)])
    assert isinstance(info.value.cause, kx.StoreError)
    partial = info.value.partial
    assert partial is not None and len(partial) == 40
    assert len(chat_requests(sim)) < 40  # no new row started once the store failed
    texts = [str(info.value), repr(info.value.cause), *map(str, partial["kx_error"].dropna())]
    assert [t for t in texts if _traces(t)] == []


def test_the_cli_takes_a_store_url(sim, pg_url, tmp_path, monkeypatch, capsys):
    """``kimi-extract run --store postgresql://...``: the second run serves every row from it."""
    from kimi_extract.cli import main

    data = tmp_path / "in.csv"
    data.write_text("review\nthe lid leaks\nboils fast\n")
    schema = tmp_path / "schema.py"
    schema.write_text(
        "from typing import Literal\nfrom pydantic import BaseModel\n"
        "class Review(BaseModel):\n    sentiment: Literal['positive', 'negative', 'neutral']\n"
    )
    monkeypatch.setenv("KIMI_BASE_URL", sim.base_url)
    monkeypatch.setenv("KIMI_API_KEY", sim.api_key)
    args = ["run", str(data), "--schema", f"{schema}:Review", "--text", "review"]
    args += ["--store", pg_url, "--no-progress"]
    assert main([*args, "--out", str(tmp_path / "a.csv")]) == 0
    assert main([*args, "--out", str(tmp_path / "b.csv")]) == 0
    assert len(chat_requests(sim)) == 2
    with psycopg.connect(pg_url, autocommit=True) as db:
        assert db.execute("SELECT COUNT(*) FROM kimi_extract_results").fetchone()[0] == 2
