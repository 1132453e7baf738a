"""A run's spending cap: each request reserves its worst case before it is sent (``RunBudget``).

The row runner (``run.conversation``) reserves a request's worst case and settles it with the
billed usage; between the two, the budget follows the request's attempts as an internal hook of
the run's observer (``BudgetHook``, handed the transport's events by ``dispatch.Dispatcher``):
an attempt that failed in a way that may still have been billed is charged at its worst case,
and a retry that no longer fits is refused (``OverBudget``).

A ``RunBudget`` may keep its counts in a shared ``Ledger`` instead of this process: a Dask run's
partitions all draw from one budget kept on the scheduler (``kimi_extract.cluster_budget``),
set for a partition's run through ``SHARED_LEDGER`` (read once, by ``run.setup``, when the
run's budget is made).
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

from ..hooks import Response, Retry
from ..kimi import DEFAULT_CACHE_TTL, LONG_CACHE_TTL

#: Prompt tokens are estimated before sending (``kimi_extract.tokens``); the budget reserves this
#: much more, for tokenizer differences, so a billed prompt never outgrows its reservation.
PROMPT_MARGIN = 1.10


@dataclass
class Reservation:
    """One attempt's worst case, held against the budget while it is in flight.

    ``handle``: the shared ledger's reservation, when the budget is shared."""

    tokens: int
    cost: float
    handle: Any = None


class Ledger(Protocol):
    """A budget's counts kept elsewhere, shared with other processes (a Dask cluster's budget).

    ``reserve`` holds an attempt's worst case against every sharer (waiting while attempts of
    any sharer are in flight; None: the budget is spent); ``charge`` counts a held attempt of
    unknown outcome at its worst case; ``settle`` replaces a reservation by the billed usage;
    ``fits``: whether what is spent and reserved, as last known, is within the caps."""

    async def reserve(self, tokens: int, cost: float) -> Any: ...

    def charge(self, handle: Any) -> None: ...

    def settle(self, handle: Any, tokens: int, cost: float) -> None: ...

    def fits(self) -> bool: ...


#: The shared ledger a run's ``RunBudget`` uses instead of counting alone (set by kimi_extract.dask
#: around a partition's run; None: this process's own counts).
SHARED_LEDGER: ContextVar[Ledger | None] = ContextVar("kimi_extract_ledger", default=None)


class RunBudget:
    """A run's hard spending cap in USD and/or tokens, checked before every attempt is sent.

    Each attempt reserves its worst case before it is sent: its prompt (estimated, plus
    ``PROMPT_MARGIN``) and its whole ``max_completion_tokens``, priced at the dearest input rate
    (regular, cached or cache write) and the output rate. It is sent only when
    ``spent + reserved by attempts in flight + its worst case`` stays within every cap; otherwise
    it waits for attempts in flight to settle, and when nothing is in flight and it still does not
    fit, the budget is exhausted (``reserve`` returns None). When the answer arrives the reservation
    is replaced by the billed usage, which can only be lower; an attempt whose billing is unknown
    (timeout, cut stream, unusable answer) is counted as its worst case (``charge``). So the billed
    total never exceeds ``max_total_tokens`` / ``max_cost`` (as long as the server bills no more
    than the request allows).
    """

    def __init__(
        self,
        *,
        max_cost: float | None,
        max_total_tokens: int | None,
        pricing: Any = None,
        separate_cache_writes: bool = True,
        cache_ttl: str = DEFAULT_CACHE_TTL,
        ledger: Ledger | None = None,
    ) -> None:
        #: Where the counts are kept when shared (None: in this object).
        self.ledger = ledger
        self.max_cost = max_cost
        self.max_total_tokens = max_total_tokens
        self.pricing = pricing
        self.separate_cache_writes = separate_cache_writes
        self.cache_ttl = cache_ttl
        self.spent_cost = 0.0
        self.spent_tokens = 0
        self.reserved_cost = 0.0
        self.reserved_tokens = 0
        self.in_flight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    def worst_case(self, prompt_tokens: int, completion_tokens: int) -> Reservation:
        """The most an attempt with this prompt estimate and completion cap can bill."""
        prompt = math.ceil(prompt_tokens * PROMPT_MARGIN)
        cost = 0.0
        pricing = self.pricing
        if pricing is not None:
            input_rate = max(pricing.input, pricing.cached_input)
            if self.separate_cache_writes:
                write = pricing.cache_write
                if self.cache_ttl == LONG_CACHE_TTL and pricing.cache_write_1h is not None:
                    write = pricing.cache_write_1h
                input_rate = max(input_rate, write)
            cost = (prompt * input_rate + completion_tokens * pricing.output) / 1_000_000
        return Reservation(tokens=prompt + completion_tokens, cost=cost)

    def fits_alone(self, worst: Reservation) -> bool:
        """Whether ``worst`` fits in an untouched budget (False: no run could ever send it)."""
        return self._fits(worst, 0, 0.0)

    def describe(self) -> str:
        """The caps, for messages: ``max_total_tokens=20,000, max_cost=$0.05``."""
        parts = []
        if self.max_total_tokens is not None:
            parts.append(f"max_total_tokens={self.max_total_tokens:,}")
        if self.max_cost is not None:
            parts.append(f"max_cost=${self.max_cost:g}")
        return ", ".join(parts)

    def _fits(self, worst: Reservation, tokens: int, cost: float) -> bool:
        if self.max_total_tokens is not None and tokens + worst.tokens > self.max_total_tokens:
            return False
        return not (self.max_cost is not None and cost + worst.cost > self.max_cost + 1e-12)

    async def reserve(self, worst: Reservation) -> Reservation | None:
        """Hold ``worst`` for one attempt, waiting for attempts in flight to settle if needed.

        Returns None when it does not fit even with nothing in flight (the budget is spent).
        With a shared ledger, "in flight" means any sharer's attempts.
        """
        if self.ledger is not None:
            handle = await self.ledger.reserve(worst.tokens, worst.cost)
            if handle is None:
                return None
            self.reserved_tokens += worst.tokens
            self.reserved_cost += worst.cost
            self.in_flight += 1
            return Reservation(worst.tokens, worst.cost, handle)
        while True:
            committed_tokens = self.spent_tokens + self.reserved_tokens
            committed_cost = self.spent_cost + self.reserved_cost
            if self._fits(worst, committed_tokens, committed_cost):
                self.reserved_tokens += worst.tokens
                self.reserved_cost += worst.cost
                self.in_flight += 1
                return worst
            if self.in_flight == 0:
                return None
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if not waiter.done():
                    waiter.cancel()

    def charge(self, reservation: Reservation) -> None:
        """Count an attempt whose billing is unknown (timeout, cut stream, unusable answer) as its
        worst case; the reservation stays held for the next attempt of the same request."""
        self.spent_tokens += reservation.tokens
        self.spent_cost += reservation.cost
        if self.ledger is not None:
            self.ledger.charge(reservation.handle)

    def still_fits(self) -> bool:
        """Whether what is spent and reserved is still within every cap."""
        if self.ledger is not None and not self.ledger.fits():
            return False
        tokens = self.spent_tokens + self.reserved_tokens
        if self.max_total_tokens is not None and tokens > self.max_total_tokens:
            return False
        return not (
            self.max_cost is not None
            and self.spent_cost + self.reserved_cost > self.max_cost + 1e-12
        )

    def settle(self, reservation: Reservation, usage: Any) -> None:
        """Replace a reservation by the attempt's billed usage (a ``Usage``; None: unknown)."""
        self.reserved_tokens -= reservation.tokens
        self.reserved_cost -= reservation.cost
        self.in_flight -= 1
        billed_tokens, billed_cost = 0, 0.0
        if usage is not None:
            billed_tokens = max(0, usage.prompt_tokens) + max(0, usage.completion_tokens)
            if usage.cost == usage.cost:  # not NaN
                billed_cost = max(0.0, usage.cost)
            self.spent_tokens += billed_tokens
            self.spent_cost += billed_cost
        if self.ledger is not None:
            self.ledger.settle(reservation.handle, billed_tokens, billed_cost)
        waiters, self._waiters = self._waiters, deque()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


class OverBudget(Exception):
    """The next attempt of a row does not fit the budget; the message is its ``kx_error``."""


class BudgetHook:
    """A run's budget as an internal hook on the transport's events (see the module docstring).

    ``hold(row, reservation)`` / ``release(row)``: the row runner's request in flight and its
    reservation. ``on_response``: a failed attempt whose billing is unknown (timeout, reset, cut
    stream, unusable 200) is charged at the reservation's worst case (``RunBudget.charge``).
    ``on_retry``: after such a charge, a retry that no longer fits is refused: ``OverBudget``
    propagates out of the transport, and the row ends with a budget ``kx_error``.
    """

    def __init__(self, budget: RunBudget) -> None:
        self.budget = budget
        #: Row position -> [its reservation, charged since the last retry].
        self._held: dict[int, list[Any]] = {}

    def hold(self, row: int, reservation: Reservation) -> None:
        """The request of ``row`` now in flight holds ``reservation``."""
        self._held[row] = [reservation, False]

    def release(self, row: int) -> None:
        """The request of ``row`` ended (the runner settles its reservation)."""
        self._held.pop(row, None)

    def on_response(self, event: Response) -> None:
        """Charge a failed attempt that may have been billed at its worst case."""
        held = self._held.get(event.row)
        if held is not None and not event.ok and event.billing_unknown:
            self.budget.charge(held[0])
            held[1] = True

    def on_retry(self, event: Retry) -> None:
        """Refuse a retry once a charged attempt has left the budget over a cap."""
        held = self._held.get(event.row)
        if held is None or not held[1]:
            return
        held[1] = False
        if not self.budget.still_fits():
            raise OverBudget("budget")
