"""A schema compiled for drawing answers: a graph of plans, each knowing if it has a value.

``build(schema)`` turns a JSON Schema into one ``Plan`` per schema node and the
constraints it inherits (a constraint on an ``anyOf`` parent or a ``$ref`` site applies to the
branch or target; ``$ref`` resolves in ``$defs`` / ``definitions``, ``#`` is the root). It
works on an explicit queue, so a schema thousands of levels deep compiles without recursion.

Then (``ranks``) every plan gets a ``rank``: the least nesting of a finite valid value (``INF``
when there is none). A plan with no value either has a ``problem`` of
its own (an empty range, ``minLength`` above ``maxLength``, no enum value that meets the node's
other keywords, ``uniqueItems`` asking for more distinct items than exist...) or needs a value
of a child that has none; ``explain`` follows that chain and names the first such place in
walle's form (``At path 'properties.n': no integer satisfies minimum 5, exclusiveMaximum 5``).

Drawing (``drawing``) uses the ranks to end recursion: past a nesting depth it takes, at each
step, a branch of least rank, the fewest items, no optional property; every such step lowers
the rank, so the value is finite.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from .constraints import canonical, node_constraints, tighten
from .domains import INF, Keys, Numbers, Strings

_SCALAR_KINDS = frozenset({"enum", "integer", "number", "string", "boolean", "null"})
_JSON_TYPES = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and v.is_integer())
    ),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


class Plan:
    """One schema node under its inherited constraints (see the module docstring)."""

    __slots__ = (
        "branches",
        "high",
        "hop",
        "items",
        "keyed",
        "keys",
        "kind",
        "low",
        "nullable",
        "numbers",
        "parents",
        "path",
        "problem",
        "props",
        "rank",
        "strings",
        "supply",
        "typed",
        "unique",
        "values",
    )

    def __init__(self, path: str) -> None:
        self.path = path
        self.kind = "string"
        self.problem: str | None = None
        self.values: list[Any] = []  # enum / const: the values that meet the other keywords
        self.branches: list[tuple[Plan, int]] = []  # anyOf: (plan, nesting hop)
        self.nullable = False
        self.typed = False  # an anyOf standing for a list of types: its first with a value
        self.props: list[tuple[str, Plan, int, bool]] = []  # (name, plan, hop, required)
        self.items: Plan | None = None  # array items / map values
        self.hop = 0
        self.low = 0
        self.high: int | None = None
        self.unique = False
        self.keyed = False  # an array of {"key", "value"} objects: unique by key
        self.numbers: Numbers | None = None
        self.strings: Strings | None = None
        self.keys: Keys | None = None
        self.rank: float = INF
        self.supply: float = INF  # how many distinct valid values (capped)
        self.parents: list[Plan] = []

    def children(self) -> list[Plan]:
        found = [plan for plan, _ in self.branches]
        found += [plan for _, plan, _, _ in self.props]
        if self.items is not None:
            found.append(self.items)
        return found


def build(schema: Any) -> tuple[Plan, list[Plan]]:
    """The plan of ``schema`` (its root) and every plan it reaches, not ranked yet (see
    ``ranks.compile_plan``)."""
    compiler = _Compiler(schema)
    root, _ = compiler.plan(schema, {}, "root")
    while compiler.pending:
        compiler.fill(*compiler.pending.popleft())
    return root, compiler.plans


def explain(plan: Plan) -> str | None:
    """Why ``plan`` has no valid value, in walle's form, or None when it has one."""
    seen: set[int] = set()
    while plan.rank == INF:
        if plan.problem is not None:
            return f"At path '{plan.path}': {plan.problem}"
        if id(plan) in seen:
            return f"At path '{plan.path}': every value would nest without end"
        seen.add(id(plan))
        if plan.kind == "object":
            plan = next(p for _, p, _, required in plan.props if required and p.rank == INF)
        elif plan.kind in ("array", "map") and plan.items is not None:
            plan = plan.items
        elif plan.kind == "anyof" and plan.branches:
            plan = plan.branches[0][0]
        else:
            return f"At path '{plan.path}': no value is valid"
    return None


def _join(path: str, *parts: str) -> str:
    return ".".join(parts) if path == "root" else ".".join((path, *parts))


def definitions(root: Any) -> dict[str, Any]:
    """Named schemas a ``$ref`` can reach: ``definitions``, ``$defs``, and the root as ``#``."""
    if not isinstance(root, dict):
        return {}
    found: dict[str, Any] = {}
    for key in ("definitions", "$defs"):
        if isinstance(root.get(key), dict):
            found.update(root[key])
    found["#"] = root
    return found


def ref_name(ref: str) -> str:
    """The name a ``$ref`` points at: ``#`` for the root, else its last path segment."""
    return "#" if ref in ("#", "") else ref.rsplit("/", 1)[-1]


def is_key_value(items: Any, defs: dict[str, Any]) -> bool:
    if isinstance(items, dict) and isinstance(items.get("$ref"), str):
        items = defs.get(ref_name(items["$ref"]))
    return isinstance(items, dict) and set(items.get("properties") or ()) == {"key", "value"}


class _Compiler:
    def __init__(self, root: Any) -> None:
        self.defs = definitions(root)
        self.memo: dict[tuple[int, str], Plan] = {}
        self.plans: list[Plan] = []
        self.pending: deque[tuple[Plan, Any, dict[str, Any]]] = deque()
        self.keep: list[Any] = []  # nodes built here, alive while ``memo`` keys them by id

    def plan(self, node: Any, inherited: dict[str, Any], path: str) -> tuple[Plan, int]:
        """(the plan of ``node``, 1 if a ``$ref`` was followed to it else 0)."""
        hop = 0
        for _ in range(64):  # a chain of bare $refs
            if not (isinstance(node, dict) and isinstance(node.get("$ref"), str)):
                break
            inherited = tighten(inherited, node_constraints(node))
            name = ref_name(node["$ref"])
            node = self.defs.get(name)
            path = "root" if name == "#" else f"$defs.{name}"
            hop = 1
        key = (id(node), canonical(inherited))
        plan = self.memo.get(key)
        if plan is None:
            plan = self.memo[key] = Plan(path)
            self.plans.append(plan)
            self.pending.append((plan, node, inherited))
        return plan, hop

    def fill(self, plan: Plan, node: Any, inherited: dict[str, Any]) -> None:
        if not isinstance(node, dict) or isinstance(node.get("$ref"), str):
            plan.strings = Strings(inherited)
            plan.problem = plan.strings.problem()
            return
        while isinstance(node.get("allOf"), list) and node["allOf"]:
            merged = {k: v for k, v in node.items() if k != "allOf"}
            for part in node["allOf"]:
                if isinstance(part, dict):
                    merged.update(part)
            self.keep.append(merged)
            node = merged
        found = tighten(inherited, node_constraints(node))
        if "const" in node or (isinstance(node.get("enum"), list) and node["enum"]):
            self.enum(plan, node, found)
            return
        branches = node.get("anyOf") or node.get("oneOf")
        if isinstance(branches, list) and branches:
            plan.kind = "anyof"
            for branch in branches:
                if isinstance(branch, dict) and branch.get("type") == "null":
                    plan.nullable = True
                else:
                    plan.branches.append(self.plan(branch, found, _join(plan.path, "anyOf")))
            return
        kind = node.get("type")
        if isinstance(kind, list):
            kinds = list(dict.fromkeys(k for k in kind if k != "null"))
            if len(kinds) > 1 or (kinds and "null" in kind):
                self.types(plan, node, kinds, found, nullable="null" in kind)
                return
            kind = (kinds or ["null"])[0]
        if kind is None:
            kind = "object" if "properties" in node else "array" if "items" in node else "string"
        plan.kind = kind if kind in _SCALAR_KINDS | {"object", "array"} else "string"
        if plan.kind == "object":
            self.object(plan, node, found)
        elif plan.kind == "array":
            self.array(plan, node, found)
        elif plan.kind in ("integer", "number"):
            plan.numbers = Numbers(found, integer=plan.kind == "integer")
            plan.problem = plan.numbers.problem()
        elif plan.kind == "string":
            plan.strings = Strings(found)
            plan.problem = plan.strings.problem()

    def types(
        self,
        plan: Plan,
        node: dict[str, Any],
        kinds: list[Any],
        found: dict[str, Any],
        nullable: bool,
    ) -> None:
        """A list of types: an ``anyOf`` of the node under each type (drawn as its first type
        with a value; null when none has one), so counts and checks see every type."""
        plan.kind = "anyof"
        plan.typed = True
        plan.nullable = nullable
        for kind in kinds:
            single = {**node, "type": kind}
            self.keep.append(single)
            plan.branches.append(self.plan(single, found, plan.path))

    def enum(self, plan: Plan, node: dict[str, Any], found: dict[str, Any]) -> None:
        plan.kind = "enum"
        candidates = [node["const"]] if "const" in node else list(node["enum"])
        kind = node.get("type")
        kinds = [kind] if isinstance(kind, str) else kind if isinstance(kind, list) else []
        numbers = Numbers(found, integer=False)
        integers = Numbers(found, integer=True)
        strings = Strings(found)
        for value in candidates:
            if kinds and not any(_JSON_TYPES.get(k, lambda v: False)(value) for k in kinds):
                continue
            if isinstance(value, str) and not strings.contains(value):
                continue
            if isinstance(value, int | float) and not isinstance(value, bool):
                domain = integers if kinds == ["integer"] else numbers
                if not domain.contains(value):
                    continue
            plan.values.append(value)
        if not plan.values:
            plan.problem = "no enum value meets the node's other keywords"

    def object(self, plan: Plan, node: dict[str, Any], found: dict[str, Any]) -> None:
        props = node.get("properties")
        extra = node.get("additionalProperties")
        if not props and isinstance(extra, dict):
            self.mapping(plan, extra, found)
            return
        required = node.get("required")
        wanted = set(required) if isinstance(required, list) else set()
        for name, sub in (props or {}).items() if isinstance(props, dict) else ():
            child, hop = self.plan(sub, {}, _join(plan.path, "properties", name))
            plan.props.append((name, child, hop, name in wanted))

    def mapping(self, plan: Plan, values: dict[str, Any], found: dict[str, Any]) -> None:
        """``dict[K, V]``: 1-3 entries (within min/max keys) keyed as ``Keys`` says."""
        plan.kind = "map"
        plan.keys = Keys(found)
        plan.low, plan.high = _counts(found, "min keys", "max keys")
        plan.items, hop = self.plan(values, {}, _join(plan.path, "additionalProperties"))
        plan.hop = hop + 1
        choices = plan.keys.choices
        if plan.high is not None and plan.low > plan.high:
            plan.problem = f"min keys {plan.low} is greater than max keys {plan.high}"
        elif plan.low and plan.keys.count() < plan.low:
            plan.problem = f"{plan.low} keys are required, only {plan.keys.count()} exist"
        elif plan.low and plan.keys.problem():
            plan.problem = plan.keys.problem()
        elif choices is not None and not choices and plan.low:
            plan.problem = "no key is allowed"

    def array(self, plan: Plan, node: dict[str, Any], found: dict[str, Any]) -> None:
        plan.low, plan.high = _counts(found, "min items", "max items")
        items = node.get("items", {})
        plan.items, hop = self.plan(items, {}, _join(plan.path, "items"))
        plan.hop = hop + 1
        plan.keyed = is_key_value(items, self.defs)
        plan.unique = bool(found.get("unique items")) or plan.keyed
        if plan.high is not None and plan.low > plan.high:
            plan.problem = f"minItems {plan.low} is greater than maxItems {plan.high}"


def _counts(found: dict[str, Any], low_name: str, high_name: str) -> tuple[int, int | None]:
    low, high = found.get(low_name, 0), found.get(high_name)
    low = max(0, int(low)) if isinstance(low, int | float) else 0
    return low, (max(0, int(high)) if isinstance(high, int | float) else None)
