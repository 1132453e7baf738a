"""Drawing one answer from a plan (``plans``): seeded, bounded, and without recursion.

The habits of the simulated model: objects fill every property (an optional one only while
the answer is shallow); arrays and dicts get 1-3 entries (within their bounds); an ``anyOf``
picks a branch that has a value (null one time in eight when null is allowed); enums pick one
of their values that meet the node's other keywords; scalars come from their domain
(``domains``); items of a ``uniqueItems`` array are distinct, as jsonschema compares them (a
repeated item is replaced by a valid variant of it, ``variants``).

Nesting: each ``$ref`` followed, array item and dict value is one level. From ``MAX_DEPTH``
levels on the answer winds down: null where allowed, else a branch of least rank, the fewest
items, no optional property, so a recursive schema still gets a finite value.

Work: each value drawn costs a step (a string one more per 16 characters), and an answer may
take ``MAX_STEPS``. A schema whose usual answer needs more (lists of lists that must hold two
or more items each, a ``minItems`` of millions) is drawn again the minimal way (every count at
its minimum, no optional property) with ``MAX_MINIMAL_STEPS``; when even that runs out,
``Exhausted`` carries the part drawn so far, and the model's answer is cut there
(``finish_reason`` "length", as when a real model reaches its output budget). Steps, not
clock time, so the same request always gets the same answer, and one answer never holds the
server for long.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Generator, Iterator
from typing import Any

from .domains import INF
from .plans import Plan
from .ranks import every_value
from .variants import accepts, examples, identity, keyed_variants, variants

MAX_DEPTH = 4
MAX_STEPS = 20_000
MAX_MINIMAL_STEPS = 40_000
#: A unique array draws from the full list of its item's values when there are this few.
_POOL = 256

_Frame = Generator["_Frame", Any, Any]


class Exhausted(Exception):
    """The answer needs more work than allowed; ``partial`` holds what was drawn so far."""

    def __init__(self, partial: Any) -> None:
        super().__init__("the answer is larger than the simulator draws")
        self.partial = partial


class _Stop(Exception):
    pass


class _Context:
    def __init__(self, rng: random.Random, words: list[str], steps: int, minimal: bool):
        self.rng = rng
        self.words = words
        self.left = steps
        self.minimal = minimal
        #: how many repeats a unique array has drawn: its next item's own entries are not cut to
        #: their minimum and may number more (only that item's; deeper levels still wind down)
        self.vary = 0
        #: [container, pending key] of every object/array being filled, from the root down
        self.open: list[list[Any]] = []

    def spend(self, cost: int) -> None:
        self.left -= cost
        if self.left < 0:
            raise _Stop

    def partial(self) -> Any:
        """The answer so far: each open container put in its parent where it was going."""
        for index in range(len(self.open) - 1, 0, -1):
            parent, key = self.open[index - 1]
            child = self.open[index][0]
            if isinstance(parent, dict):
                if key is not None:
                    parent[key] = child
            elif not parent or parent[-1] is not child:
                parent.append(child)
        return self.open[0][0] if self.open else None


def draw(plan: Plan, rng: random.Random, words: list[str]) -> Any:
    """A value valid for ``plan`` (see the module docstring); raises ``Exhausted``."""
    context = _Context(rng, words, MAX_STEPS, minimal=False)
    try:
        return _run(_draw(plan, context, 0), context)
    except Exhausted:
        pass
    context = _Context(rng, words, MAX_MINIMAL_STEPS, minimal=True)
    return _run(_draw(plan, context, 0), context)


def _run(call: _Frame, context: _Context) -> Any:
    """Drive the generator-coded walk on an explicit stack: each frame yields a child's frame
    and receives its value."""
    stack = [call]
    result: Any = None
    try:
        while True:
            try:
                nested = stack[-1].send(result)
            except StopIteration as stop:
                stack.pop()
                if not stack:
                    return stop.value
                result = stop.value
                continue
            stack.append(nested)
            result = None
    except _Stop:
        raise Exhausted(context.partial()) from None


def _draw(plan: Plan, context: _Context, depth: int) -> _Frame:
    context.spend(1)
    rng = context.rng
    finishing = context.minimal or depth >= MAX_DEPTH
    vary, context.vary = context.vary, 0
    kind = plan.kind
    if plan.rank == INF:  # no valid value (a prompt's schema, unchecked): say nothing
        return None
    if kind == "enum":
        return rng.choice(plan.values)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    if kind in ("integer", "number"):
        assert plan.numbers is not None
        return plan.numbers.draw(rng)
    if kind == "string":
        assert plan.strings is not None
        context.spend(plan.strings.low // 16)  # a huge minLength stops before it is written
        text = plan.strings.draw(rng, context.words)
        context.spend(len(text) // 16)
        return text
    if kind == "anyof":
        others = [branch for branch in plan.branches if branch[0].rank < INF]
        finishing = finishing and not vary  # a unique array wants another value here
        if plan.typed:  # a list of types: the first that has a value (null to wind down)
            others = others[:1]
            if plan.nullable and (not others or (finishing and others[0][0].rank > 0)):
                return None
        elif plan.nullable and (not others or finishing or rng.random() < 0.125):
            return None
        if not others:
            return None
        if finishing:
            least = min(branch.rank for branch, _ in others)
            others = [(branch, hop) for branch, hop in others if branch.rank == least]
        branch, hop = rng.choice(others)
        context.vary = vary  # a branch stands for its anyOf
        return (yield _draw(branch, context, depth + hop))
    if kind == "object":
        return (yield _object(plan, context, depth, finishing and not vary))
    if kind == "map":
        return (yield _map(plan, context, depth, finishing, vary))
    return (yield _array(plan, context, depth, finishing, vary))


def _object(plan: Plan, context: _Context, depth: int, finishing: bool) -> _Frame:
    out: dict[str, Any] = {}
    slot: list[Any] = [out, None]
    context.open.append(slot)
    for name, child, hop, required in plan.props:
        if not required and (child.rank == INF or finishing):
            continue
        slot[1] = name
        out[name] = yield _draw(child, context, depth + hop)
    context.open.pop()
    return out


def _counts(
    plan: Plan, context: _Context, finishing: bool, items_first: bool, vary: int = 0
) -> int:
    """How many entries: 1-3 within the bounds; the minimum when the answer winds down (at
    least one, and up to ``vary`` more, when ``vary`` asks for a value unlike the last ones)."""
    low, high = plan.low, plan.high
    assert plan.items is not None
    if plan.items.rank == INF:  # no item has a value: only the empty one (low is then 0)
        return 0
    top = high if high is not None else max(low, 3)
    smallest, largest = max(low, min(1, top)), max(low, min(3, top))
    if vary:
        wider = largest + vary if high is None else max(largest, min(high, largest + vary))
        return context.rng.randint(smallest, wider)
    if context.minimal:
        return low
    if not items_first:  # a dict: no draw when it ends empty
        return 0 if finishing and low == 0 else context.rng.randint(smallest, largest)
    count = context.rng.randint(smallest, largest)
    return 0 if finishing and low == 0 else count


def _map(plan: Plan, context: _Context, depth: int, finishing: bool, vary: int) -> _Frame:
    assert plan.keys is not None and plan.items is not None
    rng, keys = context.rng, plan.keys
    count = _counts(plan, context, finishing, items_first=False, vary=vary)
    out: dict[str, Any] = {}
    slot: list[Any] = [out, None]
    context.open.append(slot)
    if keys.choices is not None:
        for key in rng.sample(keys.choices, min(count, len(keys.choices))):
            slot[1] = key
            out[key] = yield _draw(plan.items, context, depth + plan.hop)
    else:
        for _ in range(count * 8):
            if len(out) >= count:
                break
            key = keys.draw(rng, context.words)
            if key in out and keys.plain:  # plain keys: make a repeat distinct
                key = f"{key} {len(out) + 1}"
            if key not in out:
                slot[1] = key
                out[key] = yield _draw(plan.items, context, depth + plan.hop)
    context.open.pop()
    return out


def _array(plan: Plan, context: _Context, depth: int, finishing: bool, vary: int) -> _Frame:
    assert plan.items is not None
    item = plan.items
    count = _counts(plan, context, finishing, items_first=True, vary=vary)
    pool = _pool(item, count) if plan.unique and not plan.keyed else None
    if pool is not None:
        context.spend(count)
        return context.rng.sample(pool, min(count, len(pool)))
    out: list[Any] = []
    context.open.append([out, None])
    seen: set[str] = set()
    fresh: Iterator[Any] | None = None  # the item's examples, taken in turn on repeats
    attempts = repeats = 0
    while len(out) < count and attempts < count * 8:
        attempts += 1
        before = context.left
        value = yield _draw(item, context, depth + plan.hop)
        if plan.unique:
            identity = _identity(value, plan.keyed)
            if identity in seen:
                cost = max(1, before - context.left)  # what a variant of it costs to check
                if fresh is None:
                    fresh = iter(()) if plan.keyed else examples(item, context.words)
                value = _distinct(value, len(out), item, plan.keyed, seen, context, cost, fresh)
                if value is None:
                    repeats += 1
                    context.vary = repeats
                    continue
                identity = _identity(value, plan.keyed)
            seen.add(identity)
        out.append(value)
    context.vary = 0
    context.open.pop()
    return out


def _pool(item: Plan, count: int) -> list[Any] | None:
    """Distinct values to sample a unique array from: every value of an item that has few
    (``plans.every_value``), or the first integers of a range (enough for ``count``)."""
    pool = every_value(item, _POOL)
    if pool is not None:
        return pool
    if item.kind == "integer" and item.numbers is not None:
        return item.numbers.integers(limit=max(_POOL, 2 * count))
    return None


def _identity(item: Any, keyed: bool) -> str:
    """What must differ between items of a unique array (the key of a key/value pair)."""
    if keyed and isinstance(item, dict):
        item = item.get("key")
    return identity(item)


def _distinct(
    item: Any,
    index: int,
    plan: Plan,
    keyed: bool,
    seen: set[str],
    context: _Context,
    cost: int,
    fresh: Iterator[Any],
) -> Any:
    """A valid variant of a repeated item (its key, for a key/value pair) that ``seen`` does
    not hold yet, or None: of 64 variants near it, then of the item's next ``len(seen) + 64``
    examples (``fresh``, resumed on the next repeat). Each candidate costs the steps the item
    took to draw (checking one walks as much of it)."""
    near = (keyed_variants if keyed else variants)(item, plan, context.words, index)
    candidates = itertools.chain(
        itertools.islice(near, 64), itertools.islice(fresh, len(seen) + 64)
    )
    for candidate in candidates:
        context.spend(cost)
        if _identity(candidate, keyed) not in seen and accepts(plan, candidate):
            return candidate
    return None
