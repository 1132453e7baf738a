"""What a run did: the ``RunReport``, the ``Tally`` of delivered rows, ``fill_missing``."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from ..exceptions import BudgetExceeded
from ..records import RowResult, Usage
from .conversation import BUDGET_ERROR


@dataclass(frozen=True)
class PassStats:
    """One pass of a ``run_documents(passes=N)`` run: the merged list items it found first (that
    no earlier pass found) and what it cost, over every document."""

    number: int
    items: int
    usage: Usage

    def describe(self, first_items: int, priced: bool) -> str:
        """``"pass 2: +35 items (+7.3 %), 41,200 tokens, $0.0040"``."""
        cost = f", ${self.usage.cost:.4f}" if priced else ""
        tokens = f"{self.usage.total_tokens:,} tokens"
        if self.number == 1:
            return f"pass 1: {self.items:,} items, {tokens}{cost}"
        gain = f" ({self.items / first_items:+.1%})" if first_items else ""
        return f"pass {self.number}: +{self.items:,} items{gain}, {tokens}{cost}"


@dataclass(frozen=True)
class RunReport:
    """What one run did: rows ok/failed, usage by bucket, cost and wall time."""

    rows: int
    ok: int
    failed: int
    usage: Usage
    wall_s: float
    model: str
    priced: bool
    retries: int = 0
    throttles: int = 0
    #: Rows served from the result store, and the usage they cost when first extracted.
    from_store: int = 0
    saved: Usage = field(default_factory=Usage)
    store: str | None = None
    #: The limit that held sends back most, where it came from, the send rate and the requests
    #: refused, e.g. "RPM 3,000 (learned from a 429 naming it, counted in 10 s): 49.5
    #: requests/s; 2 of 1,000 requests refused (0.2%)"; None when no limit held the run back.
    bound_by: str | None = None
    #: ``run_documents(passes=N)``: what each pass found and cost (empty otherwise).
    passes: tuple[PassStats, ...] = ()

    def summary(self) -> str:
        """The one-line summary logged at the end of a run."""
        cost = (
            f"cost ${self.usage.cost:.4f}"
            if self.priced
            else f"cost unknown (no price for {self.model}; pass pricing=kx.Pricing(...))"
        )
        u = self.usage
        return (
            f"kimi_extract: {self.rows:,} rows ({self.ok:,} ok, {self.failed:,} failed) in "
            f"{self.wall_s:.2f} s; {u.requests:,} requests; prompt {u.prompt_tokens:,} tokens "
            f"(cached {u.cached_tokens:,} = {u.cache_hit_share:.0%}, cache write "
            f"{u.cache_write_tokens:,}), completion {u.completion_tokens:,} (reasoning "
            f"{u.reasoning_tokens:,}); {cost}"
            + (f"; {self.from_store:,} rows from the result store" if self.from_store else "")
            + (f"; bound by {self.bound_by}" if self.bound_by else "")
            + (f"; {self.pass_summary()}" if self.passes else "")
        )

    def pass_summary(self) -> str:
        """What each pass found (its recall gain over the first pass) and cost, in one line."""
        first = self.passes[0].items if self.passes else 0
        return "; ".join(p.describe(first, self.priced) for p in self.passes)


class Tally:
    """Running totals of delivered rows."""

    def __init__(self) -> None:
        self.rows = 0
        self.ok = 0
        self.from_store = 0
        self.usage = Usage()
        self.saved = Usage()

    def add(self, batch: list[RowResult]) -> None:
        self.rows += len(batch)
        for result in batch:
            self.ok += result.ok
            self.usage = self.usage + result.usage
            if result.saved is not None:
                self.from_store += 1
                self.saved = self.saved + result.saved


def fill_missing(
    results: list[RowResult], index: pd.Index, stop_cause: BaseException | str | None
) -> list[RowResult]:
    """Rows never run (the run stopped) get a result saying so, keeping one row per input."""
    if len(results) == len(index):
        return results
    by_position = {r.position: r for r in results}
    reason = not_run_reason(stop_cause)
    return [
        by_position.get(pos) or RowResult(label=label, position=pos, error=reason)
        for pos, label in enumerate(index)
    ]


def not_run_reason(stop_cause: BaseException | str | None) -> str:
    """The ``kx_error`` of a row the run never got to: the budget, the stop's error type, or a
    given text (``"not run: interrupted"``)."""
    if isinstance(stop_cause, str):
        return stop_cause
    if isinstance(stop_cause, BudgetExceeded):
        return BUDGET_ERROR
    if stop_cause is not None:
        return f"not run: the run stopped ({type(stop_cause).__name__})"
    return "not run"
