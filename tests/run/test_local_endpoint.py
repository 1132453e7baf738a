"""One rule for servers on this machine, and a Ctrl-C message that says what really happened.

``run.store.is_local_endpoint`` decides both "no default result store" and the ``loopback`` store
endpoint; every form of "this machine" (``localhost``, ``0.0.0.0``, the host name, its own
addresses, the bundled simulator) gets the same answer. After Ctrl-C the ``RunInterrupted``
message names the store and the rows it holds from this run, or says there is none.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import kimi_extract as kx
from kimi_extract.run.store import is_local_endpoint
from kimi_extract.simulator import Reply, Simulator

from ..conftest import Review

HOSTNAME = socket.gethostname()
LOCAL_HOSTS = [
    "localhost",
    "LOCALHOST",
    "api.localhost",
    "127.0.0.1",
    "127.9.9.9",
    "0.0.0.0",
    "[::1]",
    "[::]",
    "[::ffff:127.0.0.1]",
    HOSTNAME,
    HOSTNAME.upper(),
]
REMOTE_HOSTS = ["api.example.com", "8.8.8.8", "[2001:db8::1]", "direct.evolink.ai", "192.0.2.200"]


@pytest.fixture
def default_store_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The default store switched on (the suite turns it off), in a scratch directory."""
    monkeypatch.delenv("KIMI_EXTRACT_STORE", raising=False)
    monkeypatch.setenv("KIMI_EXTRACT_STORE_DIR", str(tmp_path / "default"))
    return tmp_path / "default"


@pytest.mark.parametrize("host", LOCAL_HOSTS)
def test_every_form_of_this_machine_gets_no_default_store(host: str, default_store_dir) -> None:
    # localhost got none while 0.0.0.0 and the machine's own host name got the default store.
    url = f"http://{host}:8000"
    assert is_local_endpoint(url)
    assert kx.ExtractorConfig(base_url=url).store_path is None
    assert kx.ExtractorConfig(base_url=url, store=default_store_dir / "kept.db").store_path


@pytest.mark.parametrize("host", REMOTE_HOSTS)
def test_other_hosts_keep_the_default_store(host: str, default_store_dir) -> None:
    url = f"https://{host}"
    assert not is_local_endpoint(url)
    assert kx.ExtractorConfig(base_url=url).store_path == default_store_dir / "results.sqlite3"


def test_the_machines_own_addresses_are_local() -> None:
    addresses = {
        info[4][0]
        for info in socket.getaddrinfo(HOSTNAME, None, proto=socket.IPPROTO_TCP)
        if "%" not in info[4][0]
    }
    for address in addresses:
        host = f"[{address}]" if ":" in address else address
        assert is_local_endpoint(f"http://{host}:1"), address


@given(
    octets=st.tuples(st.integers(0, 255), st.integers(0, 255), st.integers(1, 254)),
    port=st.integers(1, 65535),
)
def test_all_of_127_slash_8_and_any_port_is_local(octets: tuple[int, int, int], port: int) -> None:
    assert is_local_endpoint("http://127.{}.{}.{}:{}".format(*octets, port))


def test_the_simulator_switch_is_local_and_keeps_no_default_store(default_store_dir) -> None:
    assert is_local_endpoint("simulator")
    assert kx.ExtractorConfig(base_url="simulator").store_path is None


# -- The Ctrl-C message ------------------------------------------------------------------------


def _interrupt_at(request_number: int) -> Any:
    """A responder that answers until request ``request_number``, then presses Ctrl-C (SIGINT to
    this process, as a terminal does) and holds that request so the run cannot finish first."""
    main = threading.main_thread().ident
    assert main is not None
    seen: list[int] = []

    def respond(request: Any) -> Reply | None:
        seen.append(1)
        if len(seen) < request_number:
            return None
        if len(seen) == request_number:
            signal.pthread_kill(main, signal.SIGINT)
        return Reply(delay=30)

    return respond


def _stored_rows(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return int(db.execute("SELECT count(*) FROM results").fetchone()[0])


ROWS = [f"review {i}: fine" for i in range(8)]


def test_ctrl_c_names_the_store_and_the_rows_it_holds(tmp_path: Path) -> None:
    store = tmp_path / "results.sqlite3"
    with Simulator(responder=_interrupt_at(4)) as sim:
        ex = kx.Extractor(
            Review,
            base_url=sim.base_url,
            api_key=sim.api_key,
            store=store,
            concurrency=1,
            cache_warm=False,
            progress=False,
        )
        with pytest.raises(kx.RunInterrupted) as info:
            ex.run(ROWS)
        sent_first = len(sim.history)
    message = str(info.value)
    found = re.search(
        r"(\d+) row\(s\) finished by this run are committed to the result store", message
    )
    assert found is not None, message
    assert str(store) in message
    committed = int(found.group(1))
    assert committed == _stored_rows(store) and 1 <= committed < sent_first
    # What it promises: a rerun serves those rows from the store and sends only the rest.
    with Simulator() as sim:
        rerun = kx.Extractor(
            Review, base_url=sim.base_url, api_key=sim.api_key, store=store, progress=False
        )
        out = rerun.run(ROWS)
        assert len(sim.history) == len(ROWS) - committed
    assert int(out["kx_from_store"].sum()) == committed


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_ctrl_c_against_a_local_server_says_there_is_no_store(host: str, default_store_dir) -> None:
    # The message said rows were committed to the result store when there was none, and the
    # rerun then sent every row again.
    with Simulator(responder=_interrupt_at(2)) as sim:
        ex = kx.Extractor(
            Review,
            base_url=f"http://{host}:{sim.port}",
            api_key=sim.api_key,
            concurrency=1,
            cache_warm=False,
            progress=False,
        )
        assert ex.store_path is None
        with pytest.raises(kx.RunInterrupted) as info:
            ex.run(ROWS)
    message = str(info.value)
    assert "no result store: rerunning sends every row again" in message
    assert "committed" not in message
    assert not os.path.exists(default_store_dir / "results.sqlite3")
