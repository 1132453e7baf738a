"""A throwaway PostgreSQL server for the tests: ``initdb`` in a temp dir, ``pg_ctl start`` on a Unix
socket and a free loopback port, stopped when the session ends (``postgres_server``).

Each test that needs a database gets a fresh one (``new_database``). Where the server cannot
start (no ``initdb`` on PATH, no psycopg), the tests that need it skip with one line saying why;
with ``KX_REQUIRE_POSTGRES=1`` (CI) they fail instead. As root, the server runs as the
``postgres`` user (``initdb`` refuses root), through ``runuser``.

Local connections (the socket) are trusted; TCP connections need the password, so a test can
put a password into a URL and check that it is never shown.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import shutil
import socket
import sqlite3
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

REQUIRE_ENV = "KX_REQUIRE_POSTGRES"
USER = "kx"
#: The superuser's password (TCP connections need it): odd characters on purpose.
PASSWORD = "pg-S3cret/p@ss:word"
_databases = itertools.count()


class PostgresServer:
    """A running throwaway server: its socket directory, TCP port and superuser."""

    def __init__(self, root: Path, port: int, pg_ctl: list[str]) -> None:
        self.root = root
        self.data = root / "data"
        self.socket_dir = root
        self.port = port
        #: The command that runs pg_ctl (through runuser when the tests run as root).
        self.pg_ctl = pg_ctl

    def url(self, database: str, *, tcp: bool = False) -> str:
        """A URL of ``database``: over the socket (no password), or TCP with the password."""
        if tcp:
            secret = quote(PASSWORD, safe="")
            return f"postgresql://{USER}:{secret}@127.0.0.1:{self.port}/{database}"
        return f"postgresql://{USER}@/{database}?host={self.socket_dir}&port={self.port}"

    def admin(self, sql: str) -> None:
        """Run ``sql`` on the ``postgres`` database (autocommit)."""
        import psycopg

        with psycopg.connect(self.url("postgres"), autocommit=True) as db:
            db.execute(sql)

    def new_database(self) -> str:
        """A fresh empty database; returns its socket URL."""
        name = f"kx_test_{os.getpid()}_{next(_databases)}"
        self.admin(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        subprocess.run(
            [*self.pg_ctl, "-D", str(self.data), "-m", "immediate", "-w", "stop"],
            capture_output=True,
            check=False,
        )
        shutil.rmtree(self.root, ignore_errors=True)


def _server_programs() -> Path | None:
    """The directory of initdb and pg_ctl: on PATH, else Debian's newest
    /usr/lib/postgresql/N/bin (the package does not put them on PATH)."""
    found = shutil.which("initdb")
    if found is not None and shutil.which("pg_ctl") is not None:
        return Path(found).resolve().parent
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    return versions[-1].parent if versions else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_server() -> PostgresServer:
    """Start a server, or raise ``RuntimeError`` saying why it cannot."""
    try:
        return _start()
    except OSError as exc:  # a program missing or refused: say why, as for the other failures
        raise RuntimeError(f"{type(exc).__name__}: {exc}") from None


def _start() -> PostgresServer:
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        raise RuntimeError("psycopg is not installed (pip install -e '.[postgres]')") from None
    bin_dir = _server_programs()
    if bin_dir is None:
        raise RuntimeError(
            "initdb / pg_ctl are not on PATH nor in /usr/lib/postgresql/*/bin (install the "
            "postgresql package)"
        )
    root = Path(tempfile.mkdtemp(prefix="kx-pg-"))
    try:
        return _init_and_start(root, bin_dir)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise


def _init_and_start(root: Path, bin_dir: Path) -> PostgresServer:
    run_as: list[str] = []
    if os.geteuid() == 0:  # initdb refuses root: run the server as the postgres user
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            raise RuntimeError("running as root and there is no postgres user") from None
        os.chown(root, owner.pw_uid, owner.pw_gid)
        run_as = [shutil.which("runuser") or "/usr/sbin/runuser", "-u", "postgres", "--"]
    password_file = root / "pw"
    password_file.write_text(PASSWORD)
    if run_as:
        os.chown(password_file, owner.pw_uid, owner.pw_gid)
    init = subprocess.run(
        [
            *run_as,
            str(bin_dir / "initdb"),
            "-D",
            str(root / "data"),
            "-U",
            USER,
            f"--pwfile={password_file}",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "-E",
            "UTF8",
            "--no-sync",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if init.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"initdb failed: {init.stderr.strip()[-300:]}")
    for _ in range(5):
        port = _free_port()
        options = (
            f"-k {root} -h 127.0.0.1 -p {port} -c fsync=off -c synchronous_commit=off "
            "-c full_page_writes=off -c max_connections=300 -c shared_buffers=32MB"
        )
        started = subprocess.run(
            [
                *run_as,
                str(bin_dir / "pg_ctl"),
                "-D",
                str(root / "data"),
                "-o",
                options,
                "-l",
                str(root / "log"),
                "-w",
                "-t",
                "60",
                "start",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if started.returncode == 0:
            return PostgresServer(root, port, [*run_as, str(bin_dir / "pg_ctl")])
    log = (root / "log").read_text(errors="replace")[-300:] if (root / "log").exists() else ""
    shutil.rmtree(root, ignore_errors=True)
    raise RuntimeError(f"pg_ctl start failed: {started.stderr.strip()[-200:]} {log}")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """The session's PostgreSQL server (skips, or fails with KX_REQUIRE_POSTGRES=1, without one)."""
    try:
        server = start_server()
    except RuntimeError as why:
        message = f"PostgreSQL tests skipped: {why}"
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 and the PostgreSQL server cannot start: {why}")
        pytest.skip(message)
    try:
        yield server
    finally:
        with contextlib.suppress(Exception):
            server.stop()


@pytest.fixture
def pg_url(postgres_server: PostgresServer) -> str:
    """A fresh empty database of the session's server, as a socket URL."""
    return postgres_server.new_database()


class Backend:
    """One store backend under test: where its store is, and how another connection sees it."""

    def __init__(self, kind: str, location: str | Path) -> None:
        self.kind = kind
        #: What ``store=`` takes: an SQLite path or a PostgreSQL URL.
        self.location = location

    def __repr__(self) -> str:
        return f"Backend({self.kind})"

    def open(self, endpoint: str = "") -> Any:
        """The store object (``run.store.open_location``)."""
        from kimi_extract.run.store import open_location, resolve

        location = resolve(self.location)
        assert location is not None
        return open_location(location, endpoint=endpoint)

    def exists(self) -> bool:
        """Whether the store has been created (its file, or its table)."""
        if self.kind == "sqlite":
            return Path(self.location).exists()
        return self.committed() >= 0

    def committed(self) -> int:
        """Rows another connection sees committed: what a kill -9 of the writer would leave
        (-1 before the table exists; 0 for a missing SQLite file)."""
        if self.kind == "sqlite":
            try:
                with sqlite3.connect(f"file:{self.location}?mode=ro", uri=True) as db:
                    return int(db.execute("SELECT COUNT(*) FROM results").fetchone()[0])
            except sqlite3.Error:
                return 0
        import psycopg

        with psycopg.connect(str(self.location), autocommit=True) as db:
            if db.execute("SELECT to_regclass('kimi_extract_results')").fetchone()[0] is None:
                return -1
            return int(db.execute("SELECT COUNT(*) FROM kimi_extract_results").fetchone()[0])

    def consistent(self) -> bool:
        """SQLite's integrity check; PostgreSQL keeps its own consistency (True)."""
        if self.kind != "sqlite":
            return True
        with sqlite3.connect(self.location) as db:
            return bool(db.execute("PRAGMA integrity_check").fetchone()[0] == "ok")


BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """Each store backend in turn: an SQLite file in ``tmp_path``, a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return Backend("sqlite", tmp_path / "s.sqlite3")
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return Backend("postgresql", server.new_database())


_schemas = itertools.count()


@pytest.fixture(scope="session")
def new_store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``new_store(kind)``: a fresh empty store of that backend, for tests that need several
    (hypothesis examples): a new SQLite file, or a new schema of one PostgreSQL database (its URL
    sets ``search_path``)."""
    database: list[str] = []

    def make(kind: str) -> Backend:
        if kind == "sqlite":
            return Backend("sqlite", tmp_path_factory.mktemp("store") / "s.sqlite3")
        server: PostgresServer = request.getfixturevalue("postgres_server")
        if not database:
            database.append(server.new_database())
        schema = f"kx_schema_{next(_schemas)}"
        import psycopg

        with psycopg.connect(database[0], autocommit=True) as db:
            db.execute(f"CREATE SCHEMA {schema}")
        return Backend("postgresql", f"{database[0]}&options=-csearch_path%3D{schema}")

    return make
