"""The cluster's one budget, at the scheduler (``kimi_extract.cluster_budget``), on a virtual clock:
reservations against every worker's, settles to the billed usage, leases of dead workers counted
as spent, and a ``RunBudget`` that draws from a shared ledger."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import kimi_extract.cluster_budget as cb
from kimi_extract.records import Usage
from kimi_extract.run.budget import Reservation, RunBudget
from kimi_extract.testing import VirtualClock

pytest.importorskip("distributed")


SPEC = {"max_tokens": 1000, "max_cost": None, "lease_s": 10.0}


async def test_reservations_count_every_worker_and_settle_to_the_billed_usage() -> None:
    service = cb.BudgetService(VirtualClock())
    first = await service.reserve("run", SPEC, tokens=600, cost=0.0)
    assert "handle" in first and first["held_tokens"] == 600
    # 600 held + 600 > 1000: waits while a reservation is held, then asks again.
    waiting = asyncio.ensure_future(service.reserve("run", SPEC, tokens=600, cost=0.0))
    await asyncio.sleep(0)
    assert not waiting.done()
    service.update("run", settles=[[first["handle"], 150, 0.0]])  # billed 150 of 600
    second = await waiting
    assert "handle" in second and second["spent_tokens"] == 150
    service.update("run", settles=[[second["handle"], 700, 0.0]])
    # 850 spent, nothing held: 600 can never fit; the budget is spent.
    assert (await service.reserve("run", SPEC, tokens=600, cost=0.0)) == {
        "spent": True,
        "spent_tokens": 850,
        "spent_cost": 0.0,
        "held_tokens": 0,
        "held_cost": 0,
    }
    assert "handle" in await service.reserve("run", SPEC, tokens=150, cost=0.0)


async def test_a_dead_workers_reservations_are_counted_at_their_worst_case() -> None:
    """Not refreshed for a lease: released, and counted as spent (it may have been billed)."""
    clock = VirtualClock()
    service = cb.BudgetService(clock)
    alive = await service.reserve("run", SPEC, tokens=300, cost=0.0)
    dead = await service.reserve("run", SPEC, tokens=400, cost=0.0)
    clock.advance(6)
    service.update("run", refresh=[alive["handle"]])
    clock.advance(6)  # the dead worker's lease ran out; the live one's was refreshed
    state = service.update("run")
    assert state == {"spent_tokens": 400, "spent_cost": 0.0, "held_tokens": 300, "held_cost": 0}
    # A settle or charge arriving after the expiry changes nothing: the worst case stays.
    service.update("run", settles=[[dead["handle"], 10, 0.0]], charges=[[dead["handle"]]])
    assert service.states["run"].spent_tokens == 400 and service.states["run"].expired == 1
    # A waiting reservation is granted once a lease runs out.
    waiting = asyncio.ensure_future(service.reserve("run", SPEC, tokens=600, cost=0.0))
    await asyncio.sleep(0)
    assert not waiting.done()
    clock.advance(20)
    assert (await waiting)["spent"] is True  # 400 + 300 worst case + 600 > 1000, none held


async def test_a_charge_counts_the_worst_case_and_keeps_holding() -> None:
    service = cb.BudgetService(VirtualClock())
    spec = {"max_tokens": None, "max_cost": 1.0, "lease_s": 10.0}
    held = await service.reserve("run", spec, tokens=10, cost=0.4)
    state = service.update("run", charges=[[held["handle"]]])
    assert state["spent_cost"] == pytest.approx(0.4) and state["held_cost"] == pytest.approx(0.4)
    assert "again" in await service.reserve("run", spec, tokens=10, cost=0.3)


class _Ledger:
    """A ledger that records what the budget asks of it."""

    def __init__(self, grant: bool = True) -> None:
        self.grant = grant
        self.calls: list[tuple[Any, ...]] = []

    async def reserve(self, tokens: int, cost: float) -> Any:
        self.calls.append(("reserve", tokens, cost))
        return "h1" if self.grant else None

    def charge(self, handle: Any) -> None:
        self.calls.append(("charge", handle))

    def settle(self, handle: Any, tokens: int, cost: float) -> None:
        self.calls.append(("settle", handle, tokens, cost))

    def fits(self) -> bool:
        return self.grant


async def test_a_budget_with_a_shared_ledger_reserves_and_settles_there() -> None:
    ledger = _Ledger()
    budget = RunBudget(max_cost=None, max_total_tokens=10_000, ledger=ledger)
    reservation = await budget.reserve(Reservation(tokens=500, cost=0.0))
    assert reservation is not None and reservation.handle == "h1"
    budget.charge(reservation)
    budget.settle(reservation, Usage(prompt_tokens=120, completion_tokens=30))
    assert ledger.calls == [("reserve", 500, 0.0), ("charge", "h1"), ("settle", "h1", 150, 0.0)]
    spent = RunBudget(max_cost=None, max_total_tokens=10_000, ledger=_Ledger(grant=False))
    assert await spent.reserve(Reservation(tokens=5, cost=0.0)) is None
    assert not spent.still_fits()
