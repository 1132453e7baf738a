"""The cluster-wide limits of a Dask run: one concurrency bound and one RPM/TPM quota for all.

``kimi_extract.dask`` sets a ``ClusterGate`` as the outer gate (``http.limiter.OUTER_GATE``) of
every partition's limiter. Every HTTP attempt on every worker then passes, after its partition's
own limiter:

- **a lease of one ``distributed.Semaphore``** (``max_leases = concurrency``, on the scheduler):
  the cluster never has more than ``concurrency`` requests in flight. Leases of a worker that
  dies come back after ``distributed.scheduler.locks.lease-timeout``.
- **a send permit from the rate service on the scheduler** (``RateService``, installed by
  ``install_rate_service``), when ``rpm`` or ``tpm`` is set. The service keeps the one count of the
  whole run: a log of every permit it granted, each held for ``hold_s`` (the server's window plus
  the time a permit may take to become a request on the wire), and a pace of
  ``PACE_SHARE * window's quota / hold_s`` with a burst of ``BURST_S`` worth. A permit is only
  valid for ``grant_ttl_s`` after it was asked for (the worker measures that on its own clock and
  asks again when it is late), so every request reaches the server within ``hold_s - window_s``
  of its grant, and no window of ``window_s`` at the server holds more than ``rpm`` requests (and
  ``tpm`` tokens) of the cluster. Quota is not divided: a lone partition may use all of it.

Workers ask in batches: each worker process keeps one request to the scheduler open at a time,
for every permit its partitions are waiting for (up to ``MAX_BATCH``); the scheduler answers
requests first come, first served, granting as many as the pace allows now (it waits up to
``MAX_HOLD_S`` for the first one). TPM: a permit reserves the request's estimated tokens (prompt
estimate + expected completion); the real usage replaces the estimate at the scheduler when the
answer arrives (sent in batches, ``SETTLE_DELAY_S`` apart), so an over-estimate is given back;
an answer longer than expected can push a window over ``tpm`` by the excess, as on one machine.

A worker that dies holds nothing: its permits count until their ``hold_s`` ends, as the server
counts its requests. The state lives on the scheduler: the cluster's limits are as exact as the
scheduler's clock, at the price of one scheduler round trip per batch of permits.

The same service keeps the run's ``max_cost`` / ``max_total_tokens`` budget for the whole cluster
(``kimi_extract.cluster_budget``): reservations of worst cases, settled to the billed usage, on
leases that a dead worker's reservations outlive only as spent money.

Runs that the server counts together share one quota and one semaphore: their name at the
scheduler (``quota_name``) is a digest of the endpoint, the key and the limits, so two runs with
the same key and limits on one scheduler stay within those limits together, while the budget
stays each run's own. Runs told different limits keep separate quotas (each is held to its own).

The scheduler side (the service, its counts and ``install_rate_service``) is
``kimi_extract.cluster_rate``; this module is the worker side and the limits themselves. The
scheduler needs ``kimi_extract`` importable (the same environment as the workers).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import distributed

from . import cluster_budget
from .cluster_budget import LEASE_S, RESERVE, UPDATE, BudgetClient, _on_loop
from .cluster_rate import GRANT, SETTLE
from .exceptions import ConfigurationError

logger = logging.getLogger("kimi_extract")

#: The server's rate window (Kimi: 60 s). Tests and benchmarks shorten it with a simulator whose
#: ``window_s`` is as short; limits stay per minute (a window holds ``limit * window_s / 60``).
RATE_WINDOW_S = 60.0
#: A permit must be on its way within this long of being asked for, or it is not used.
GRANT_TTL_S = 0.5
#: The most a request may take from leaving the worker to being counted by the server.
ARRIVAL_SLACK_S = 1.0
#: The most permits one worker asks for at once.
MAX_BATCH = 64
#: Token corrections are sent to the scheduler this long after the first one (batched).
SETTLE_DELAY_S = 0.1


@dataclass(frozen=True)
class ClusterLimits:
    """What every partition of one run shares: the semaphore's size and the cluster's quota.

    ``rpm`` / ``tpm``: the whole cluster's, per minute (None: unlimited). ``window_s``: the
    server's window; ``grant_ttl_s`` / ``arrival_slack_s``: see the module docstring.
    """

    token: str
    concurrency: int
    rpm: int | None
    tpm: int | None
    window_s: float = RATE_WINDOW_S
    grant_ttl_s: float = GRANT_TTL_S
    arrival_slack_s: float = ARRIVAL_SLACK_S
    #: The whole run's budget (None: none), kept on the scheduler (``cluster_budget``).
    max_tokens: int | None = None
    max_cost: float | None = None
    #: How long a reservation stays held without a refresh from its worker.
    budget_lease_s: float = LEASE_S
    #: The name of the quota (RPM/TPM and the concurrency bound) at the scheduler: runs with the
    #: same endpoint, key and limits share it, as the server counts them together ("": the run's).
    quota: str = ""

    @property
    def quota_name(self) -> str:
        """The scheduler's name for this run's quota and concurrency semaphore."""
        return self.quota or self.token

    def __repr__(self) -> str:
        return (
            f"ClusterLimits(concurrency={self.concurrency}, rpm={self.rpm}, tpm={self.tpm}, "
            f"window_s={self.window_s:g}, max_tokens={self.max_tokens}, "
            f"max_cost={self.max_cost})"
        )

    def __dask_tokenize__(self) -> str:
        return self.token

    @property
    def limited(self) -> bool:
        """Whether the run has an RPM or TPM quota."""
        return self.rpm is not None or self.tpm is not None

    @property
    def hold_s(self) -> float:
        """How long the scheduler counts a permit after granting it."""
        return self.window_s + self.grant_ttl_s + self.arrival_slack_s

    def spec(self) -> dict[str, Any]:
        """The quota as the scheduler's rate service takes it (plain values)."""
        return {
            "rpm": self.rpm,
            "tpm": self.tpm,
            "window_s": self.window_s,
            "hold_s": self.hold_s,
        }

    @property
    def budgeted(self) -> bool:
        """Whether the run has a budget (``max_cost`` / ``max_total_tokens``)."""
        return self.max_tokens is not None or self.max_cost is not None

    def budget_spec(self) -> dict[str, Any]:
        """The budget as the scheduler's budget service takes it (plain values)."""
        return {
            "max_tokens": self.max_tokens,
            "max_cost": self.max_cost,
            "lease_s": self.budget_lease_s,
        }

    def gate(self) -> ClusterGate:
        """The gate for a partition running on this worker."""
        return ClusterGate(_semaphore(self), _rate_client(self) if self.limited else None)

    def ledger(self) -> BudgetClient | None:
        """This worker's link to the run's budget (None when the run has none)."""
        return _budget_client(self) if self.budgeted else None


def quota_name(extractor: Any, window_s: float) -> str:
    """One name for every run that the server counts against the same limits: the endpoint,
    a digest of the key (never the key) and the limits themselves (runs told different limits
    keep their own quotas)."""
    config = extractor.config
    key = config.api_key.get() if config.api_key is not None else ""
    limits = config.limits
    account = "\0".join(
        [str(config.base_url), key, str(limits.rpm), str(limits.tpm), str(limits.concurrency)]
    )
    digest = hashlib.sha256(f"{account}\0{window_s:g}".encode()).hexdigest()
    return f"quota-{digest[:32]}"


def cluster_limits(extractor: Any, *, window_s: float | None = None) -> ClusterLimits:
    """A run's shared limits: the extractor's concurrency, rpm and tpm, for the whole cluster
    and for every run on it with the same endpoint, key and limits (``quota_name``)."""
    window = RATE_WINDOW_S if window_s is None else window_s
    return ClusterLimits(
        token=uuid.uuid4().hex,
        quota=quota_name(extractor, window),
        concurrency=extractor.config.limits.concurrency,
        rpm=extractor.config.limits.rpm,
        tpm=extractor.config.limits.tpm,
        window_s=window,
        grant_ttl_s=GRANT_TTL_S,
        arrival_slack_s=ARRIVAL_SLACK_S,
        max_tokens=extractor.config.budget.max_total_tokens,
        max_cost=extractor.config.budget.max_cost,
        budget_lease_s=cluster_budget.LEASE_S,
    )


@dataclass
class Grant:
    """A permit: its batch at the scheduler, the tokens it reserved, and its deadline (the
    monotonic time after which it must not be used)."""

    batch: int
    tokens: int
    deadline: float


Caller = Callable[..., Awaitable[Any]]


class RateClient:
    """One worker process's link to the run's quota, on the worker's event loop.

    Partitions (each on its own loop and thread) call ``acquire`` through ``ask``; waiting
    permits are asked for together, one scheduler request at a time.
    """

    def __init__(
        self,
        limits: ClusterLimits,
        loop: asyncio.AbstractEventLoop,
        grant: Caller,
        settle: Caller,
    ) -> None:
        self.limits = limits
        self.loop = loop
        self._grant = grant
        self._settle = settle
        self._waiters: deque[tuple[int, asyncio.Future[Grant]]] = deque()
        self._pump: asyncio.Task[None] | None = None
        self._deltas: dict[int, int] = {}
        self._flush: asyncio.Handle | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        #: Permits that arrived too late to use (counted, never sent).
        self.late = 0

    async def ask(self, tokens: int) -> Grant:
        """A valid permit for a request of ``tokens``, from any loop (asks again when late)."""
        while True:
            grant = await _on_loop(self.loop, self.acquire(tokens))
            if time.monotonic() <= grant.deadline:
                return grant
            self.late += 1

    async def acquire(self, tokens: int) -> Grant:
        """On the worker's loop: wait for a permit (not checked against its deadline)."""
        future: asyncio.Future[Grant] = self.loop.create_future()
        self._waiters.append((tokens, future))
        if self._pump is None or self._pump.done():
            self._pump = self.loop.create_task(self._run())
        return await future

    def settle(self, grant: Grant, actual_tokens: int | None) -> None:
        """Report a request's real tokens (None: unknown, the estimate stays); any thread."""
        if actual_tokens is None or actual_tokens == grant.tokens or self.limits.tpm is None:
            return
        self.loop.call_soon_threadsafe(self._add_delta, grant.batch, actual_tokens - grant.tokens)

    async def _run(self) -> None:
        while self._waiters:
            batch: list[tuple[int, asyncio.Future[Grant]]] = []
            while self._waiters and len(batch) < MAX_BATCH:
                waiter = self._waiters.popleft()
                if not waiter[1].done():
                    batch.append(waiter)
            if not batch:
                return
            asked = time.monotonic()
            try:
                reply = await self._grant(
                    name=self.limits.quota_name,
                    spec=self.limits.spec(),
                    tokens=[tokens for tokens, _ in batch],
                )
                if not isinstance(reply, dict):
                    raise ConfigurationError(
                        "the Dask scheduler has no kimi_extract rate service: compute with the "
                        "client extract() was called with"
                    )
            except Exception as exc:
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            count = int(reply["granted"])
            deadline = asked + float(reply["held_s"]) + self.limits.grant_ttl_s
            for tokens, future in batch[:count]:
                if not future.done():  # a cancelled waiter's permit is lost, never reused
                    future.set_result(Grant(int(reply["batch"]), tokens, deadline))
            self._waiters.extendleft(reversed(batch[count:]))

    def _add_delta(self, batch: int, delta: int) -> None:
        self._deltas[batch] = self._deltas.get(batch, 0) + delta
        if self._flush is None:
            self._flush = self.loop.call_later(SETTLE_DELAY_S, self._send_deltas)

    def _send_deltas(self) -> None:
        self._flush = None
        deltas, self._deltas = [[b, d] for b, d in self._deltas.items()], {}
        task = self.loop.create_task(self._settle_quietly(deltas))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _settle_quietly(self, deltas: list[list[int]]) -> None:
        try:
            await self._settle(name=self.limits.quota_name, deltas=deltas)
        except Exception:  # a lost correction leaves the estimate counted: safe
            logger.debug("could not send token corrections to the scheduler", exc_info=True)


class ClusterGate:
    """The outer gate of a partition's limiter: a cluster lease, then a cluster rate permit."""

    def __init__(self, semaphore: distributed.Semaphore, rate: RateClient | None) -> None:
        self.semaphore = semaphore
        self.rate = rate

    async def acquire(self, tokens: int) -> Grant | bool:
        """A lease, then a permit; the handle for ``release`` (never None: the limiter only
        releases handles that are not None)."""
        await _take_lease(self.semaphore)
        if self.rate is None:
            return True
        try:
            return await self.rate.ask(tokens)
        except BaseException:
            _give_lease(self.semaphore)
            raise

    def release(self, handle: Grant | bool, actual_tokens: int | None) -> None:
        if self.rate is not None and isinstance(handle, Grant):
            self.rate.settle(handle, actual_tokens)
        _give_lease(self.semaphore)


_semaphores: dict[str, distributed.Semaphore] = {}
_rate_clients: dict[tuple[str, str], RateClient] = {}
_registry_lock = threading.Lock()


def _semaphore(limits: ClusterLimits) -> distributed.Semaphore:
    """This worker process's handle on the run's semaphore (it refreshes the leases it holds)."""
    name = f"kimi_extract-{limits.quota_name}"
    with _registry_lock:
        semaphore = _semaphores.get(name)
        if semaphore is None:
            semaphore = _semaphores[name] = distributed.Semaphore(limits.concurrency, name=name)
        return semaphore


def _rate_client(limits: ClusterLimits) -> RateClient:
    """This worker's link to the run's quota (one per worker and run)."""
    worker = distributed.get_worker()
    key = (worker.address, limits.token)
    with _registry_lock:
        client = _rate_clients.get(key)
        if client is None:
            scheduler = worker.scheduler
            client = RateClient(
                limits,
                worker.loop.asyncio_loop,  # type: ignore[attr-defined]  # tornado's AsyncIOLoop
                grant=getattr(scheduler, GRANT),
                settle=getattr(scheduler, SETTLE),
            )
            if len(_rate_clients) >= 16:  # keep the latest runs' links only
                _rate_clients.pop(next(iter(_rate_clients)))
            _rate_clients[key] = client
        return client


_budget_clients: dict[tuple[str, str], BudgetClient] = {}


def _budget_client(limits: ClusterLimits) -> BudgetClient:
    """This worker's link to the run's budget (one per worker and run)."""
    worker = distributed.get_worker()
    key = (worker.address, limits.token)
    with _registry_lock:
        client = _budget_clients.get(key)
        if client is None:
            scheduler = worker.scheduler
            client = BudgetClient(
                limits.token,
                limits.budget_spec(),
                worker.loop.asyncio_loop,  # type: ignore[attr-defined]  # tornado's AsyncIOLoop
                reserve=getattr(scheduler, RESERVE),
                update=getattr(scheduler, UPDATE),
            )
            if len(_budget_clients) >= 16:  # keep the latest runs' links only
                _budget_clients.pop(next(iter(_budget_clients)))
            _budget_clients[key] = client
        return client


async def _take_lease(semaphore: distributed.Semaphore) -> None:
    """Take a lease on the worker's event loop, from the partition's own loop."""

    async def acquire() -> bool:
        return bool(await semaphore.acquire())

    future = asyncio.run_coroutine_threadsafe(acquire(), semaphore.loop.asyncio_loop)
    try:
        await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        # A lease granted after the cancel reached us is given back as soon as it arrives.
        future.add_done_callback(lambda done: _give_back(semaphore, done))
        raise


def _give_back(semaphore: distributed.Semaphore, done: concurrent.futures.Future[bool]) -> None:
    if not done.cancelled() and done.exception() is None and done.result():
        _give_lease(semaphore)


def _give_lease(semaphore: distributed.Semaphore) -> None:
    """Give a lease back without waiting for the scheduler's answer."""

    async def release() -> None:
        await semaphore.release()

    asyncio.run_coroutine_threadsafe(release(), semaphore.loop.asyncio_loop)
