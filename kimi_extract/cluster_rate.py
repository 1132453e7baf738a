"""The scheduler side of a Dask run's shared limits: the rate service and its counts.

``install_rate_service`` puts one ``RateService`` (and the budget service of
``kimi_extract.cluster_budget``) on the scheduler. Each run's quota there is a ``RateState``: the
log of every permit granted, held for ``hold_s``, and a pace of ``PACE_SHARE * window's quota /
hold_s`` with a burst of ``BURST_S`` worth. Workers reach it through ``kimi_extract.cluster``
(``RateClient``), which also holds the whole design in its docstring.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from typing import Any

import distributed

from .cluster_budget import RESERVE, UPDATE, BudgetService
from .exceptions import ConfigurationError
from .http.clock import SYSTEM_CLOCK, Clock

__all__ = ["RateService", "RateState", "install_rate_service"]

#: Pace at this share of what the held log allows, so the log itself rarely binds.
PACE_SHARE = 0.99
#: The pace's burst, in seconds of the pace (at least one request).
BURST_S = 0.05
#: The scheduler waits at most this long for a permit before answering "none yet, ask again".
MAX_HOLD_S = 5.0
#: A waiting grant looks again this often (token corrections arrive meanwhile).
RECHECK_S = 0.05
#: The scheduler forgets a run's counts after this long without a request.
FORGET_AFTER_S = 600.0

_EXTENSION = "kimi_extract_rate"
GRANT = "kimi_extract_rate_grant"
SETTLE = "kimi_extract_rate_settle"
_BUDGETS = "kimi_extract_budget"


def install_rate_service(client: distributed.Client) -> None:
    """Install the rate service on the client's scheduler (once; later calls keep its counts)."""
    try:
        client.run_on_scheduler(_install)
    except Exception as exc:
        raise ConfigurationError(
            "kimi_extract could not install its RPM/TPM and budget service on the Dask scheduler "
            f"({type(exc).__name__}: {exc}); install kimi_extract in the scheduler's environment "
            "too"
        ) from None


def _install(dask_scheduler: Any) -> None:
    if _EXTENSION not in dask_scheduler.extensions:
        service = RateService()
        dask_scheduler.extensions[_EXTENSION] = service
        dask_scheduler.handlers[GRANT] = service.grant
        dask_scheduler.handlers[SETTLE] = service.settle
        budgets = BudgetService()
        dask_scheduler.extensions[_BUDGETS] = budgets
        dask_scheduler.handlers[RESERVE] = budgets.reserve
        dask_scheduler.handlers[UPDATE] = budgets.update


# -- scheduler side --------------------------------------------------------------------------


class _Pace:
    """A token bucket of ``rate`` units per second holding ``capacity``; may go negative."""

    def __init__(self, rate: float, now: float) -> None:
        self.rate = rate
        self.capacity = max(1.0, rate * BURST_S)
        self.level = self.capacity
        self.time = now

    def refill(self, now: float) -> float:
        if self.level < self.capacity:  # a credit above it (an over-estimate returned) stays
            self.level = min(self.capacity, self.level + (now - self.time) * self.rate)
        self.time = now
        return self.level

    def wait(self, need: float) -> float:
        need = min(need, self.capacity)
        return max(0.0, (need - self.level) / self.rate)


class RateState:
    """One run's quota at the scheduler: the held log of grants and the pace.

    Each log entry is ``[granted_at, requests, tokens, batch]``, held for ``hold_s``.
    """

    def __init__(self, spec: dict[str, Any], now: float) -> None:
        window = float(spec["window_s"])
        self.hold_s = float(spec["hold_s"])
        rpm, tpm = spec.get("rpm"), spec.get("tpm")
        self.request_cap = None if rpm is None else max(1, math.floor(rpm * window / 60))
        self.token_cap = None if tpm is None else max(1, math.floor(tpm * window / 60))
        self.request_pace = (
            None
            if self.request_cap is None
            else _Pace(PACE_SHARE * self.request_cap / self.hold_s, now)
        )
        self.token_pace = (
            None
            if self.token_cap is None
            else _Pace(PACE_SHARE * self.token_cap / self.hold_s, now)
        )
        self.log: deque[list[Any]] = deque()
        self.requests = 0
        self.tokens = 0
        self._entries: dict[int, list[Any]] = {}
        self._batches = 0
        self.granted = 0
        #: Tokens counted over the whole run: estimates, corrected by the real usage reported.
        self.spent = 0
        self.last_used = now
        self.lock = asyncio.Lock()

    def expire(self, now: float) -> None:
        while self.log and self.log[0][0] + self.hold_s <= now:
            entry = self.log.popleft()
            self.requests -= entry[1]
            self.tokens -= entry[2]
            self._entries.pop(entry[3], None)

    def fit(self, now: float, tokens: list[int]) -> tuple[int, float]:
        """How many of ``tokens`` (one amount per request, in order) may go now; else the wait."""
        self.expire(now)
        allowed = len(tokens)
        waits: list[float] = []
        if self.request_cap is not None:
            room = self.request_cap - self.requests
            if room < 1:
                waits.append(self._log_wait(now, 1 - room, index=1))
            allowed = min(allowed, max(0, room))
        if self.request_pace is not None:
            level = self.request_pace.refill(now)
            whole = math.floor(level + 1e-9)
            if whole < 1:
                waits.append(self.request_pace.wait(1.0))
            allowed = min(allowed, max(0, whole))
        if self.token_cap is not None or self.token_pace is not None:
            fits = self._tokens_fit(now, tokens, waits)
            allowed = min(allowed, fits)
        if allowed > 0:
            return allowed, 0.0
        return 0, max([w for w in waits if w > 0] or [1e-3])

    def _tokens_fit(self, now: float, tokens: list[int], waits: list[float]) -> int:
        level = self.token_pace.refill(now) if self.token_pace is not None else math.inf
        total = 0
        fits = 0
        for amount in tokens:
            in_log = self.token_cap is None or self.tokens + total + amount <= self.token_cap
            # A request larger than the window (or the pace's burst) goes when nothing else is
            # counted (the bucket is full), as the server lets it.
            alone = fits == 0 and (self.token_cap is None or self.tokens == 0)
            paced = total + amount <= level + 1e-9 or (
                fits == 0
                and self.token_pace is not None
                and level >= min(amount, self.token_pace.capacity) - 1e-9
            )
            if not ((in_log or alone) and paced):
                break
            total += amount
            fits += 1
        if fits == 0 and tokens:
            first = tokens[0]
            if self.token_cap is not None and self.tokens + first > self.token_cap:
                waits.append(self._log_wait(now, self.tokens + first - self.token_cap, index=2))
            if self.token_pace is not None:
                waits.append(self.token_pace.wait(first))
        return fits

    def _log_wait(self, now: float, excess: float, *, index: int) -> float:
        """Seconds until entries worth ``excess`` (requests or tokens) have left the log."""
        for entry in self.log:
            excess -= entry[index]
            if excess <= 0:
                return entry[0] + self.hold_s - now
        return (self.log[-1][0] + self.hold_s - now) if self.log else 1e-3

    def take(self, now: float, tokens: list[int]) -> int:
        """Count ``tokens`` (one amount per request) granted now; returns the batch id."""
        self._batches += 1
        total = sum(tokens)
        entry = [now, len(tokens), total, self._batches]
        self.log.append(entry)
        self._entries[self._batches] = entry
        self.requests += len(tokens)
        self.tokens += total
        self.granted += len(tokens)
        self.spent += total
        if self.request_pace is not None:
            self.request_pace.level -= len(tokens)
        if self.token_pace is not None:
            self.token_pace.level -= total
        return self._batches

    def settle(self, batch: int, delta: int) -> None:
        """Correct a batch's tokens by ``delta`` (real usage minus the estimate)."""
        entry = self._entries.get(batch)
        if entry is not None:
            delta = max(delta, -entry[2])
            entry[2] += delta
            self.tokens += delta
        self.spent += delta
        if self.token_pace is not None:
            self.token_pace.level -= delta


class RateService:
    """The scheduler's grant service (one per scheduler; see the module docstring).

    ``clock`` is injectable for tests (default: the real one).
    """

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self.clock = clock
        self.states: dict[str, RateState] = {}

    def state(self, name: str, spec: dict[str, Any]) -> RateState:
        """The run's state, created on its first request (stale runs are forgotten)."""
        now = self.clock.now()
        state = self.states.get(name)
        if state is None:
            for old in [k for k, v in self.states.items() if now - v.last_used > FORGET_AFTER_S]:
                del self.states[old]
            state = self.states[name] = RateState(spec, now)
        state.last_used = now
        return state

    async def grant(
        self, name: str = "", spec: dict[str, Any] | None = None, tokens: list[int] | None = None
    ) -> dict[str, Any]:
        """Grant permits for a prefix of ``tokens`` (one amount per request), first come first
        served; waits up to ``MAX_HOLD_S`` for the first. Returns ``granted`` (how many),
        ``batch`` (for ``settle``) and ``held_s`` (how long the request waited here)."""
        assert spec is not None and tokens
        state = self.state(name, spec)
        start = self.clock.now()
        async with state.lock:
            while True:
                now = self.clock.now()
                count, wait = state.fit(now, tokens)
                if count:
                    batch = state.take(now, tokens[:count])
                    return {"granted": count, "batch": batch, "held_s": now - start}
                if now - start + wait > MAX_HOLD_S:
                    return {"granted": 0, "batch": 0, "held_s": now - start}
                # Look again soon: a correction returning tokens may shorten the wait.
                await self.clock.sleep(min(wait, RECHECK_S))

    def settle(self, name: str = "", deltas: list[list[int]] | None = None) -> None:
        """Apply token corrections ``[[batch, real - estimated], ...]`` of one run."""
        state = self.states.get(name)
        if state is None:
            return
        for batch, delta in deltas or []:
            state.settle(batch, delta)
