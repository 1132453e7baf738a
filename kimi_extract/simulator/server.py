"""``Simulator``: the local Kimi API on a real HTTP port, in a background thread; and ``serve``."""

from __future__ import annotations

import asyncio
import gc
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

from aiohttp import web

from ..exceptions import ConfigurationError
from ..kimi import CACHE_MIN_TOKENS
from .app import Service
from .config import Config, Responder
from .extractive import PERTURBATIONS
from .limits import FaultRates
from .protocol import DEFAULT_API_KEY, SimExchange
from .quality import QualityModel, quality_model

_STREAM_USAGE = ("choices", "separate")


class Simulator:
    """A local Kimi chat-completions API that behaves like the seed reference and KIMI-NOTES.

    ``with Simulator() as sim:`` (or ``start()`` / ``stop()``) serves on ``host``:``port`` (0 = a
    free port) from a background thread with its own event loop. Clients POST to
    ``{sim.base_url}/v1/chat/completions`` with ``Authorization: Bearer {sim.api_key}``; the
    openai SDK takes ``base_url=sim.openai_base_url``.

    Options (all limits and faults off by default):

    - ``responder``: ``callable(SimRequest) -> None | str | dict | Reply`` scripting answers
      (None: the generated answer; str/dict: that content; ``Reply``: any part, an error, headers,
      a delay or a fault). Settable later as ``sim.responder``. An exception -> 500.
    - ``clock``: seconds, for cache TTLs and rate windows (default ``time.monotonic``).
    - ``seed``: seeds overload and fault draws.
    - ``max_concurrency``, ``rpm``, ``tpm``, ``retry_after_header``, ``overload_rate``,
      ``quota_usd`` with ``pricing`` (USD per 1M: input, cached_input, cache_write, output;
      default: the model table's prices): see ``limits``.
    - ``fault_500``, ``fault_reset``, ``fault_stream_cut``, ``fault_slow_first_byte`` (waits
      ``slow_first_byte_s``), ``fault_invalid_json``, ``fault_truncate``: per-request rates 0..1.
    - ``ttft_s`` before the first byte, ``tokens_per_s`` output pacing.
    - ``stream_usage``: "choices" or "separate" (see ``streaming``).
    - ``cache_block_tokens``, ``cache_min_tokens``, ``cache_refresh_on_read``: see ``cache``.
    - ``history_limit``: keep only the last N exchanges in ``history`` (default: all; ``serve``
      keeps none). Counters and ``SimExchange.index`` still count every request.
    - ``rate_shape``: how ``rpm`` and ``tpm`` are enforced: "sliding" (default: any 60 s),
      "fixed" (60 s windows from the first request) or "bucket" (a token bucket: ``limit / 60`` per
      second, at most ``burst_s`` seconds' worth at once, default 0.1). ``window_s`` shortens
      the sliding and fixed windows (limits stay per minute; a window holds
      ``limit * window_s / 60``). ``spurious_429_rate``: that share of requests refused with
      Kimi's rate-limit message whatever the load. See ``limits``.
    - ``latency``: "fixed" (``ttft_s``) or "lognormal" (``ttft_s`` plus a seeded lognormal delay
      with median ``latency_median_s``, default 1, and 99th percentile ``latency_p99_s``,
      default 10).
    - ``schema_level``: how ``response_format`` schemas and tool ``parameters`` are checked
      (``kimi_extract.schema.dialect``, MoonshotAI/walle's levels): "strict" (default; what
      Moonshot's server enforces) or "ultra" (walle's most thorough check).
    - ``answers``: "generated" (default: strings are words of the user text) or "extractive"
      (every plain string of a JSON answer is a span of the last user message, deterministic
      per request, so grounding can be tested offline); ``perturb`` (0..1): the share of those
      strings changed by one of ``perturb_kinds`` ("case", "spacing", "typo", "width"; default
      all); ``quote_faults`` (0..1): the share of the supporting quotes a quoted schema asks
      for (``grounding="quotes"``) that are fabricated or garbled. See ``extractive``.
    - ``quality``: how a ``json_schema`` answer to a row whose text carries an answer key
      (``quality.with_answer_key``) goes wrong: "illustrative" (default: made-up error rates per
      model and effort, ``QualityModel.illustrative()``), "exact" (no mistakes), a
      ``QualityModel``, or None (answer keys ignored). Rows without a key are unaffected.
    """

    def __init__(
        self,
        api_key: str = DEFAULT_API_KEY,
        responder: Responder | None = None,
        port: int = 0,
        host: str = "127.0.0.1",
        clock: Callable[[], float] | None = None,
        seed: int = 0,
        *,
        max_concurrency: int | None = None,
        rpm: int | None = None,
        tpm: int | None = None,
        retry_after_header: bool = False,
        overload_rate: float = 0.0,
        quota_usd: float | None = None,
        pricing: dict[str, float] | None = None,
        fault_500: float = 0.0,
        fault_reset: float = 0.0,
        fault_stream_cut: float = 0.0,
        fault_slow_first_byte: float = 0.0,
        slow_first_byte_s: float = 2.0,
        fault_invalid_json: float = 0.0,
        fault_truncate: float = 0.0,
        ttft_s: float = 0.0,
        tokens_per_s: float | None = None,
        stream_usage: str = "choices",
        cache_block_tokens: int = 64,
        cache_min_tokens: int = CACHE_MIN_TOKENS,
        cache_refresh_on_read: bool = False,
        history_limit: int | None = None,
        schema_level: str = "strict",
        rate_shape: str = "sliding",
        window_s: float = 60.0,
        burst_s: float = 0.1,
        spurious_429_rate: float = 0.0,
        latency: str = "fixed",
        latency_median_s: float = 1.0,
        latency_p99_s: float = 10.0,
        answers: str = "generated",
        perturb: float = 0.0,
        perturb_kinds: Sequence[str] = PERTURBATIONS,
        quote_faults: float = 0.0,
        quality: QualityModel | str | None = "illustrative",
    ) -> None:
        if answers not in ("generated", "extractive"):
            raise ConfigurationError(
                f"answers must be 'generated' or 'extractive', got {answers!r}"
            )
        unknown = sorted(set(perturb_kinds) - set(PERTURBATIONS))
        if unknown or not perturb_kinds:
            raise ConfigurationError(
                f"perturb_kinds must be a non-empty subset of {PERTURBATIONS}, got "
                f"{list(perturb_kinds)!r}"
            )
        if schema_level not in ("strict", "ultra"):
            raise ConfigurationError(
                f"schema_level must be 'strict' or 'ultra', got {schema_level!r}"
            )
        if stream_usage not in _STREAM_USAGE:
            raise ConfigurationError(
                f"stream_usage must be one of {_STREAM_USAGE}, got {stream_usage!r}"
            )
        rates = {
            "fault_500": fault_500,
            "fault_reset": fault_reset,
            "fault_stream_cut": fault_stream_cut,
            "fault_slow_first_byte": fault_slow_first_byte,
            "fault_invalid_json": fault_invalid_json,
            "fault_truncate": fault_truncate,
            "overload_rate": overload_rate,
            "spurious_429_rate": spurious_429_rate,
            "perturb": perturb,
            "quote_faults": quote_faults,
        }
        for name, rate in rates.items():
            if not 0.0 <= rate <= 1.0:
                raise ConfigurationError(f"{name} must be between 0 and 1, got {rate}")
        quality_rates = quality_model(quality)
        self.api_key = api_key
        self.host = host
        self.port = port
        config = Config(
            api_key=api_key,
            clock=clock or time.monotonic,
            seed=seed,
            max_concurrency=max_concurrency,
            rpm=rpm,
            tpm=tpm,
            retry_after_header=retry_after_header,
            overload_rate=overload_rate,
            quota_usd=quota_usd,
            pricing=pricing,
            faults=FaultRates(
                fault_500,
                fault_reset,
                fault_stream_cut,
                fault_slow_first_byte,
                fault_invalid_json,
                fault_truncate,
            ),
            slow_first_byte_s=slow_first_byte_s,
            ttft_s=ttft_s,
            tokens_per_s=tokens_per_s,
            stream_usage=stream_usage,
            cache_block_tokens=cache_block_tokens,
            cache_min_tokens=cache_min_tokens,
            cache_refresh_on_read=cache_refresh_on_read,
            history_limit=history_limit,
            schema_level="ultra" if schema_level == "ultra" else "strict",
            rate_shape=rate_shape,
            window_s=window_s,
            burst_s=burst_s,
            spurious_429_rate=spurious_429_rate,
            latency=latency,
            latency_median_s=latency_median_s,
            latency_p99_s=latency_p99_s,
            answers="extractive" if answers == "extractive" else "generated",
            perturb=perturb,
            perturb_kinds=tuple(perturb_kinds),
            quote_faults=quote_faults,
            quality=quality_rates,
        )
        self._service = Service(config, responder)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    # -- public surface ----------------------------------------------------------------------

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


def serve(port: int = 8000, host: str = "127.0.0.1", **options: Any) -> None:
    """Serve the simulator until Ctrl-C (blocking); prints the base URL and the key.

    ``options`` are ``Simulator``'s keyword arguments. ``history_limit`` defaults to 0 here: no
    one can read a served simulator's history (``GET /stats`` has the counters), and keeping
    exchanges would make a long-running server grow and its garbage collections slow. The process
    is the server's own, so it also freezes the startup objects out of the collector's reach.
    """
    options.setdefault("history_limit", 0)
    sim = Simulator(port=port, host=host, **options)
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
