"""Ranking a plan graph: which plans have a valid value, and how many distinct ones.

``compile_plan`` builds the graph (``plans.build``) and ranks it. A plan's ``rank`` is the least
nesting of a finite valid value (``INF`` when there is none), a least fixpoint over the graph,
so recursive schemas are judged exactly (a ``$ref`` cycle with no way out has no value). Then
every ``uniqueItems`` array is checked against how many distinct values its items have
(``supply``, capped; an ``anyOf`` whose branches share values counts each value once); an
array that asks for more has a problem of its own, and ranks are computed again until nothing
changes. ``every_value`` lists every value of a plan that has few,
for unique arrays to sample from. All without recursion on deep graphs.
"""

from __future__ import annotations

import itertools
import json
import math
from collections import deque
from collections.abc import Callable
from typing import Any

from .domains import INF
from .plans import Plan, build

#: Distinct values counted at most this far (``uniqueItems`` needs only small counts).
_CAP = 10**6
#: An ``anyOf`` with at most this many values (summed over branches) counts them one by one.
_UNION = 256


def compile_plan(schema: Any) -> Plan:
    """The plan of ``schema`` (its root), every plan it reaches ranked."""
    root, plans = build(schema)
    _rank(plans)
    return root


def _local_rank(plan: Plan) -> float:
    if plan.problem is not None:
        return INF
    kind = plan.kind
    if kind == "anyof":
        best = min((p.rank for p, _ in plan.branches), default=INF)
        return 1 + (0 if plan.nullable else best)
    if kind == "object":
        return 1 + max((p.rank for _, p, _, required in plan.props if required), default=0)
    if kind in ("array", "map"):
        assert plan.items is not None
        return 0 if plan.low == 0 else 1 + plan.items.rank
    return 0


def _rank(plans: list[Plan]) -> None:
    """Ranks (least fixpoint), then ``uniqueItems`` checks against distinct-value counts, until
    no array changes."""
    for plan in plans:
        for child in plan.children():
            child.parents.append(plan)
    while True:
        _fixpoint(plans)
        counts = _Counts()
        broken = False
        for plan in plans:
            if plan.kind == "array" and plan.unique and plan.low and plan.problem is None:
                assert plan.items is not None
                supply = counts.of(plan.items, keyed=plan.keyed)
                if supply < plan.low:
                    plan.problem = (
                        f"uniqueItems with minItems {plan.low}, but its items have only "
                        f"{int(supply)} distinct values"
                    )
                    broken = True
        if not broken:
            for plan in plans:
                plan.supply = counts.of(plan)
            return
        for plan in plans:
            plan.rank = INF


def _fixpoint(plans: list[Plan]) -> None:
    queue = deque(plans)
    queued = {id(plan) for plan in plans}
    while queue:
        plan = queue.popleft()
        queued.discard(id(plan))
        rank = _local_rank(plan)
        if rank < plan.rank:
            plan.rank = rank
            for parent in plan.parents:
                if id(parent) not in queued:
                    queued.add(id(parent))
                    queue.append(parent)


class _Counts:
    """How many distinct valid values a plan has (capped; ``INF`` for unbounded), without
    recursion (a plan met again on its own path counts as unbounded)."""

    def __init__(self) -> None:
        self.memo: dict[int, float] = {}

    def of(self, plan: Plan, keyed: bool = False) -> float:
        if keyed and plan.kind == "object":
            key = next((p for name, p, _, _ in plan.props if name == "key"), None)
            return self.of(key) if key is not None else INF
        stack: list[tuple[Plan, bool]] = [(plan, False)]
        active: set[int] = set()
        while stack:
            current, expanded = stack.pop()
            if id(current) in self.memo:
                continue
            children = current.children()
            if not expanded:
                if id(current) in active:  # a cycle: recursion allows ever more values
                    self.memo[id(current)] = INF if current.rank < INF else 0
                    continue
                active.add(id(current))
                stack.append((current, True))
                stack.extend((child, False) for child in children if id(child) not in self.memo)
                continue
            active.discard(id(current))
            self.memo[id(current)] = min(_CAP, self.local(current))
        return self.memo[id(plan)]

    def local(self, plan: Plan) -> float:
        if plan.rank == INF:
            return 0
        count = self.memo.get
        kind = plan.kind
        if kind == "enum":
            return len({_identity(v) for v in plan.values})
        if kind == "boolean":
            return 2
        if kind == "null":
            return 1
        if kind in ("integer", "number"):
            assert plan.numbers is not None
            return plan.numbers.count()
        if kind == "string":
            assert plan.strings is not None
            return plan.strings.count()
        if kind == "anyof":
            total = sum(count(id(p), INF) for p, _ in plan.branches) + plan.nullable
            if total <= _UNION:  # branches may share values: count the distinct ones
                supply = {id(p): count(id(p), INF) for p, _ in plan.branches}
                supply[id(plan)] = total
                found = _every_value(plan, _UNION, lambda p: supply.get(id(p), INF))
                if found is not None:
                    return len({_identity(value) for value in found})
            return total
        if kind == "object":
            total = 1.0
            for _, child, _, required in plan.props:
                total *= count(id(child), INF) + (0 if required else 1)
            return total
        if kind == "array":
            assert plan.items is not None
            each = count(id(plan.items), INF)
            if plan.high == 0 or each == 0:
                return 1
            if each >= _CAP:
                return INF
            distinct = int(each)
            if plan.unique:  # sizes up to the number of distinct items
                top = distinct if plan.high is None else min(plan.high, distinct)
            elif plan.high is None:
                return INF
            else:
                top = plan.high
            total = 0
            for size in range(plan.low, top + 1):
                total += math.comb(distinct, size) if plan.unique else distinct**size
                if total >= _CAP:
                    return INF
            return total
        if kind == "map":
            assert plan.items is not None
            return 1 if plan.high == 0 or count(id(plan.items), INF) == 0 else INF
        return INF


def _identity(value: Any) -> str:
    """What must differ between items of a unique array (jsonschema: 1 and 1.0 are equal)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return json_key(value)


def json_key(value: Any) -> str:
    """Canonical JSON of a value (sorted keys), the identity of a unique array's item."""
    try:
        return json.dumps(value, sort_keys=True)
    except (TypeError, ValueError, RecursionError):
        return repr(value)


def every_value(plan: Plan, limit: int = 256) -> list[Any] | None:
    """Every valid value of a plan with few of them (``supply`` and ``rank`` small), distinct
    as jsonschema compares them, in a fixed order, or None. ``uniqueItems`` samples from it
    when random draws would keep colliding."""
    return _every_value(plan, limit, lambda p: p.supply)


def _every_value(plan: Plan, limit: int, supply: Callable[[Plan], float]) -> list[Any] | None:
    found = _listing(plan, limit, supply)
    if found is None:
        return None
    distinct: dict[str, Any] = {}
    for value in found:
        distinct.setdefault(_identity(value), value)
    return list(distinct.values())


def _listing(plan: Plan, limit: int, supply: Callable[[Plan], float]) -> list[Any] | None:
    if supply(plan) > limit or plan.rank > 16:
        return None
    kind = plan.kind
    if kind == "enum":
        return list(plan.values)
    if kind == "boolean":
        return [False, True]
    if kind == "null":
        return [None]
    if kind == "integer" and plan.numbers is not None:
        return list(plan.numbers.integers(limit))
    if kind == "number" and plan.numbers is not None:
        return list(itertools.islice(plan.numbers.examples(), limit))
    if kind == "string" and plan.strings is not None:
        if plan.strings.pattern is None:
            return [""]
        listed, exact = plan.strings.listed()
        return list(listed) if exact else None
    if kind == "anyof":
        found: list[Any] = [None] if plan.nullable else []
        for branch, _ in plan.branches:
            more = _every_value(branch, limit, supply) if branch.rank < INF else []
            if more is None:
                return None
            found += more
        return found
    if kind == "object":
        choices: list[list[tuple[str, Any]]] = []
        for name, child, _, required in plan.props:
            options = _every_value(child, limit, supply) if child.rank < INF else []
            if options is None:
                return None
            pairs = [(name, option) for option in options]
            choices.append(pairs if required else [*pairs, ("", _ABSENT)])
        return [
            {name: value for name, value in combo if value is not _ABSENT}
            for combo in itertools.product(*choices)
        ]
    if kind == "array" and plan.items is not None:
        items = _every_value(plan.items, limit, supply) if plan.items.rank < INF else []
        if items is None:
            return None
        top = (
            len(items)
            if plan.high is None
            else min(plan.high, len(items) if plan.unique else plan.high)
        )
        arrays: list[Any] = []
        for size in range(plan.low, top + 1):
            combos = (
                itertools.combinations(items, size)
                if plan.unique
                else itertools.product(items, repeat=size)
            )
            arrays += [list(combo) for combo in combos]
        return arrays
    if kind == "map":
        return [{}]
    return None


_ABSENT = object()
