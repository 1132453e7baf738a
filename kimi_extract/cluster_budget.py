"""One ``max_cost`` / ``max_total_tokens`` budget for a whole Dask run, kept on the scheduler.

The scheduler's rate service (``kimi_extract.cluster``) also keeps each run's budget
(``BudgetService``); every partition's ``RunBudget`` uses it as its shared ledger
(``run.budget.Ledger``, through ``BudgetClient``), so the partitions draw from one budget instead
of an even share each: a partition of long documents may spend what short ones leave.

- **Reserve, then settle**: as in one process, every attempt reserves its worst case before it is
  sent (the scheduler grants it only when ``spent + reserved by every worker + worst case`` stays
  within the caps) and settles to the billed usage when it ends; an attempt of unknown outcome is
  charged at its worst case. When a reservation does not fit, it waits while any worker holds
  one (up to ``MAX_HOLD_S`` per scheduler request, then it asks again); when none is held and it
  still does not fit, the budget is spent: the row's ``kx_error`` is "budget", its partition
  starts no new row, and the run stops with ``BudgetExceeded`` (every finished row committed).
- **Leases**: a worker refreshes the reservations it holds every ``lease_s / 3``. A reservation
  not refreshed for ``lease_s`` (its worker died, or its event loop stalled that long) is
  released and counted as spent at its worst case: its request may have been billed, so the
  budget is never overspent, at the price of what a dead worker's requests did not use.
- **Cost**: one scheduler round trip per attempt to reserve; settles and charges go in batches
  (``SETTLE_DELAY_S`` apart), with the lease refreshes.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from .exceptions import ConfigurationError
from .http.clock import SYSTEM_CLOCK, Clock

logger = logging.getLogger("kimi_extract")

#: Seconds a reservation stays held without a refresh from its worker.
LEASE_S = 30.0
#: The scheduler waits at most this long for a reservation to fit before "ask again".
MAX_HOLD_S = 5.0
#: A waiting reservation looks again this often (settles arrive meanwhile).
RECHECK_S = 0.02
#: Settles and charges are sent this long after the first one (batched).
SETTLE_DELAY_S = 0.05
#: The scheduler forgets a run's budget after this long without a request.
FORGET_AFTER_S = 3600.0

RESERVE = "kimi_extract_budget_reserve"
UPDATE = "kimi_extract_budget_update"


class BudgetState:
    """One run's budget at the scheduler: what is spent, and the reservations held (each
    ``[tokens, cost, expires_at]``)."""

    def __init__(self, spec: dict[str, Any], now: float) -> None:
        self.max_tokens: int | None = spec.get("max_tokens")
        self.max_cost: float | None = spec.get("max_cost")
        self.lease_s = float(spec.get("lease_s", LEASE_S))
        self.spent_tokens = 0
        self.spent_cost = 0.0
        self.held: dict[str, list[Any]] = {}
        #: Reservations released because their lease ran out (counted at their worst case).
        self.expired = 0
        self.last_used = now

    def expire(self, now: float) -> None:
        for handle, (tokens, cost, expires) in list(self.held.items()):
            if expires <= now:
                del self.held[handle]
                self.spent_tokens += tokens
                self.spent_cost += cost
                self.expired += 1

    def fits(self, tokens: int, cost: float) -> bool:
        held_tokens = sum(h[0] for h in self.held.values())
        held_cost = sum(h[1] for h in self.held.values())
        if self.max_tokens is not None and self.spent_tokens + held_tokens + tokens > (
            self.max_tokens
        ):
            return False
        return not (
            self.max_cost is not None and self.spent_cost + held_cost + cost > self.max_cost + 1e-12
        )

    def snapshot(self) -> dict[str, Any]:
        """What is spent and held, for the workers' ``fits``."""
        return {
            "spent_tokens": self.spent_tokens,
            "spent_cost": self.spent_cost,
            "held_tokens": sum(h[0] for h in self.held.values()),
            "held_cost": sum(h[1] for h in self.held.values()),
        }


class BudgetService:
    """The scheduler's budget keeper (installed with the rate service); ``clock`` injectable."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self.clock = clock
        self.states: dict[str, BudgetState] = {}
        self._ids = itertools.count(1)

    def state(self, name: str, spec: dict[str, Any]) -> BudgetState:
        now = self.clock.now()
        state = self.states.get(name)
        if state is None:
            for old in [k for k, v in self.states.items() if now - v.last_used > FORGET_AFTER_S]:
                del self.states[old]
            state = self.states[name] = BudgetState(spec, now)
        state.last_used = now
        return state

    async def reserve(
        self,
        name: str = "",
        spec: dict[str, Any] | None = None,
        tokens: int = 0,
        cost: float = 0.0,
    ) -> dict[str, Any]:
        """Hold ``tokens`` / ``cost`` for one attempt: ``{"handle": id}`` when granted,
        ``{"spent": True}`` when it cannot fit with nothing held, ``{"again": True}`` after
        ``MAX_HOLD_S`` of waiting; each with the ``snapshot``."""
        assert spec is not None
        state = self.state(name, spec)
        start = self.clock.now()
        while True:
            now = self.clock.now()
            state.expire(now)
            if state.fits(tokens, cost):
                handle = f"b{next(self._ids)}"
                state.held[handle] = [tokens, cost, now + state.lease_s]
                return {"handle": handle, **state.snapshot()}
            if not state.held:
                return {"spent": True, **state.snapshot()}
            if now - start >= MAX_HOLD_S:
                return {"again": True, **state.snapshot()}
            await self.clock.sleep(RECHECK_S)

    def update(
        self,
        name: str = "",
        settles: list[list[Any]] | None = None,
        charges: list[list[Any]] | None = None,
        refresh: list[str] | None = None,
    ) -> dict[str, Any]:
        """Apply ``settles`` (``[handle, tokens, cost]``: release, count the billed usage),
        ``charges`` (``[handle]``: count the worst case, keep holding) and lease ``refresh``es.
        A handle already expired is ignored: its worst case is counted."""
        state = self.states.get(name)
        if state is None:
            return {}
        now = self.clock.now()
        state.expire(now)
        for handle, *_ in charges or []:
            held = state.held.get(handle)
            if held is not None:
                state.spent_tokens += held[0]
                state.spent_cost += held[1]
        for handle, tokens, cost in settles or []:
            if state.held.pop(handle, None) is not None:
                state.spent_tokens += int(tokens)
                state.spent_cost += float(cost)
        for handle in refresh or []:
            held = state.held.get(handle)
            if held is not None:
                held[2] = now + state.lease_s
        return state.snapshot()


Caller = Callable[..., Awaitable[Any]]
R = TypeVar("R")


async def _on_loop(loop: asyncio.AbstractEventLoop, coroutine: Coroutine[Any, Any, R]) -> R:
    """Await ``coroutine`` on ``loop`` from another loop (directly when it is this one)."""
    if asyncio.get_running_loop() is loop:
        return await coroutine
    future = asyncio.run_coroutine_threadsafe(coroutine, loop)
    try:
        return await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        future.cancel()
        raise


class BudgetClient:
    """A worker's link to the run's budget (a ``run.budget.Ledger``), on the worker's loop.

    ``reserve`` may be awaited from any loop (a partition's own); ``charge`` / ``settle`` from any
    thread. ``fits`` answers from the last snapshot the scheduler sent, plus the charges not yet
    sent: the counts only grow between two snapshots, so it errs toward "no".
    """

    def __init__(
        self,
        name: str,
        spec: dict[str, Any],
        loop: asyncio.AbstractEventLoop,
        reserve: Caller,
        update: Caller,
    ) -> None:
        self.name = name
        self.spec = spec
        self.loop = loop
        self._reserve = reserve
        self._update = update
        self.lease_s = float(spec.get("lease_s", LEASE_S))
        self._held: dict[str, tuple[int, float]] = {}
        self._settles: list[list[Any]] = []
        self._charges: list[list[Any]] = []
        self._flush: asyncio.Handle | None = None
        self._refresher: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._known: dict[str, Any] = {}
        self._unsent_tokens = 0
        self._unsent_cost = 0.0

    async def reserve(self, tokens: int, cost: float) -> str | None:
        """A granted reservation's handle, or None when the run's budget is spent."""
        return await _on_loop(self.loop, self._ask(tokens, cost))

    async def _ask(self, tokens: int, cost: float) -> str | None:
        while True:
            reply = await self._reserve(name=self.name, spec=self.spec, tokens=tokens, cost=cost)
            if not isinstance(reply, dict):
                raise ConfigurationError(
                    "the Dask scheduler has no kimi_extract budget service: compute with the "
                    "client extract() was called with"
                )
            self._known = reply
            if "handle" in reply:
                self._held[reply["handle"]] = (tokens, cost)
                if self._refresher is None or self._refresher.done():
                    self._refresher = self.loop.create_task(self._refresh())
                return str(reply["handle"])
            if reply.get("spent"):
                return None

    def charge(self, handle: Any) -> None:
        """Count a held attempt of unknown outcome at its worst case (any thread)."""
        self.loop.call_soon_threadsafe(self._queue, None, [handle])

    def settle(self, handle: Any, tokens: int, cost: float) -> None:
        """Release a reservation; count the billed ``tokens`` / ``cost`` (any thread)."""
        self.loop.call_soon_threadsafe(self._queue, [handle, tokens, cost], None)

    def fits(self) -> bool:
        known = self._known
        if not known:
            return True
        tokens = known["spent_tokens"] + known["held_tokens"] + self._unsent_tokens
        cost = known["spent_cost"] + known["held_cost"] + self._unsent_cost
        max_tokens, max_cost = self.spec.get("max_tokens"), self.spec.get("max_cost")
        if max_tokens is not None and tokens > max_tokens:
            return False
        return not (max_cost is not None and cost > max_cost + 1e-12)

    def _queue(self, settle: list[Any] | None, charge: list[Any] | None) -> None:
        if settle is not None:
            self._held.pop(settle[0], None)
            self._settles.append(settle)
        if charge is not None:
            held = self._held.get(charge[0])
            if held is not None:
                self._unsent_tokens += held[0]
                self._unsent_cost += held[1]
            self._charges.append(charge)
        if self._flush is None:
            self._flush = self.loop.call_later(SETTLE_DELAY_S, self._send)

    def _send(self, refresh: bool = False) -> None:
        self._flush = None
        settles, self._settles = self._settles, []
        charges, self._charges = self._charges, []
        if not (settles or charges or refresh):
            return
        self._unsent_tokens, self._unsent_cost = 0, 0.0
        task = self.loop.create_task(
            self._update_quietly(settles, charges, list(self._held) if refresh else [])
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _update_quietly(
        self, settles: list[list[Any]], charges: list[list[Any]], refresh: list[str]
    ) -> None:
        try:
            reply = await self._update(
                name=self.name, settles=settles, charges=charges, refresh=refresh
            )
            if isinstance(reply, dict) and reply:
                self._known = reply
        except Exception:  # a lost settle leaves the worst case held, then counted: safe
            logger.debug("could not send budget settles to the scheduler", exc_info=True)

    async def _refresh(self) -> None:
        """Refresh the leases of held reservations while any is held."""
        while self._held:
            await asyncio.sleep(self.lease_s / 3)
            self._send(refresh=True)
