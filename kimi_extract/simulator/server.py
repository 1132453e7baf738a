"""``Simulator``: the local Kimi API on a real HTTP port, in a background thread; and ``serve``."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import inspect
import socket
import sys
import threading
import time
from types import TracebackType
from typing import Any

from aiohttp import web

from ..exceptions import ConfigurationError
from .app import Service
from .config import Responder, SimulatorConfig, check_option_names, signature_parameters
from .protocol import SimExchange


class Simulator:
    """A local Kimi chat-completions API that behaves like
    ``docs/reference/kimi-chat-completions-reference.md`` and ``docs/reference/KIMI-NOTES.md``.

    ``with Simulator() as sim:`` (or ``start()`` / ``stop()``) serves on ``host``:``port`` (0 = a
    free port) from a background thread with its own event loop. Clients POST to
    ``{sim.base_url}/v1/chat/completions`` with ``Authorization: Bearer {sim.api_key}``; the
    openai SDK takes ``base_url=sim.openai_base_url``.

    The settings (all limits and faults off by default) are a ``SimulatorConfig`` (``config``):
    ``Simulator(config=SimulatorConfig(...))``, or its keywords directly (``Simulator(rpm=120,
    answers="extractive")``); keywords given beside ``config`` change those settings of it
    (``Simulator(config=config, rpm=60)``). docs/simulator-settings.md lists them all. A wrong value
    is a ``ConfigurationError`` naming the setting, before anything starts.

    Besides the settings:

    - ``responder``: ``callable(SimRequest) -> None | str | dict | Reply`` scripting answers
      (None: the generated answer; str/dict: that content; ``Reply``: any part, an error, headers,
      a delay or a fault). Settable later as ``sim.responder``. An exception -> 500.
    - ``port``, ``host``: where to listen (``port`` 0: a free one, set on ``start``).
    """

    def __init__(
        self,
        config: SimulatorConfig | None = None,
        *,
        responder: Responder | None = None,
        port: int = 0,
        host: str = "127.0.0.1",
        **overrides: Any,
    ) -> None:
        self._config = _configure(config, overrides)
        self.api_key = self._config.api_key
        self.host = host
        self.port = port
        self._service = Service(self._config, responder)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    # -- public surface ----------------------------------------------------------------------

    @property
    def config(self) -> SimulatorConfig:
        """The settings this simulator runs with (frozen)."""
        return self._config

    @property
    def responder(self) -> Responder | None:
        """The responder callable (settable while running)."""
        return self._service.responder

    @responder.setter
    def responder(self, value: Responder | None) -> None:
        self._service.responder = value

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT``; clients POST ``{base_url}/v1/chat/completions``."""
        return f"http://{self.host}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """``http://HOST:PORT/v1``, for the openai SDK."""
        return self.base_url + "/v1"

    @property
    def history(self) -> list[SimExchange]:
        """A snapshot list of every HTTP request received (the last ``history_limit``), in
        arrival order."""
        with self._service.lock:
            return list(self._service.history)

    def stats(self) -> dict[str, Any]:
        """Counters: requests, by status / error type / fault, billed tokens by bucket, cache
        hits and writes, in-flight now and at peak, billed spend."""
        return self._service.stats()

    def reset(self) -> None:
        """Clear history, counters, the cache, rate windows and spend."""
        self._service.reset()

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> Simulator:
        """Start serving in a background thread; returns self once the port is open."""
        if self._thread is not None:
            raise RuntimeError("the simulator is already running")
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._startup(sock))
            except BaseException as exc:  # reported to the starting thread
                failure.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()

        self._loop = loop
        self._thread = threading.Thread(target=run, name=f"kimi-simulator-{self.port}", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            self._thread = None
            loop.close()
            raise failure[0]
        return self

    async def _startup(self, sock: socket.socket) -> None:
        runner = web.AppRunner(self._service.make_app(), access_log=None, shutdown_timeout=0.1)
        await runner.setup()
        await web.SockSite(runner, sock, backlog=1024).start()
        self._runner = runner

    def stop(self) -> None:
        """Stop serving and join the thread (requests still open are cancelled)."""
        loop, thread, runner = self._loop, self._thread, self._runner
        if loop is None or thread is None:
            return
        if runner is not None:
            asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
        # A handler the cleanup left waiting (a hung or slow answer whose client went away) is
        # cancelled and awaited here, so no task outlives the loop ("Task was destroyed but it
        # is pending" when it is collected later).
        asyncio.run_coroutine_threadsafe(_cancel_other_tasks(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
        self._loop = self._thread = self._runner = None

    def __enter__(self) -> Simulator:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def serve(
    port: int = 8000,
    host: str = "127.0.0.1",
    config: SimulatorConfig | None = None,
    **options: Any,
) -> None:
    """Serve the simulator until Ctrl-C (blocking); prints the base URL and the key.

    ``config`` and ``options`` are ``Simulator``'s. ``history_limit`` defaults to 0 here (unless
    given, or set in ``config``): no one can read a served simulator's history (``GET /stats``
    has the counters), and keeping exchanges would make a long-running server grow and its
    garbage collections slow. The process is the server's own, so it also freezes the startup
    objects out of the collector's reach.
    """
    if config is None or config.history_limit is None:
        options.setdefault("history_limit", 0)
    sim = Simulator(config, port=port, host=host, **options)
    try:
        sim.start()
        gc.collect()
        gc.freeze()
        print(
            f"Kimi API simulator listening on {sim.base_url}\n"
            f"  chat completions: POST {sim.base_url}/v1/chat/completions "
            f"(openai SDK base_url: {sim.openai_base_url})\n"
            f"  API key: {sim.api_key}\n"
            f"  counters: GET {sim.base_url}/stats\n"
            "Press Ctrl-C to stop.",
            flush=True,
        )
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        print("stopping the simulator", file=sys.stderr, flush=True)
    finally:
        sim.stop()


async def _cancel_other_tasks() -> None:
    """Cancel every task of the running loop but this one and wait for them to end."""
    current = asyncio.current_task()
    others = [task for task in asyncio.all_tasks() if task is not current]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)


def _configure(config: SimulatorConfig | None, overrides: dict[str, Any]) -> SimulatorConfig:
    """The simulator's settings: ``config`` (default: the defaults) with ``overrides`` applied."""
    check_option_names(overrides, "Simulator")
    if config is None:
        return SimulatorConfig(**overrides)
    if not isinstance(config, SimulatorConfig):
        raise ConfigurationError(
            f"config must be a SimulatorConfig, got {type(config).__name__} (the settings are "
            "keywords: Simulator(api_key=..., rpm=...))"
        )
    return dataclasses.replace(config, **overrides) if overrides else config


def _signature() -> inspect.Signature:
    """``Simulator(...)`` as ``help()`` shows it: ``config``, the four arguments of its own, then
    every setting by its flat name."""
    own = list(inspect.signature(Simulator.__init__).parameters.values())[:-1]  # not **overrides
    return inspect.Signature([*own, *signature_parameters()])


setattr(Simulator.__init__, "__signature__", _signature())  # noqa: B010
