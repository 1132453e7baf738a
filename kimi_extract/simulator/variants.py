"""Another valid value when a ``uniqueItems`` array draws one it already holds.

Random draws repeat where a node has few likely values: a pattern such as ``^ab`` is always
written "ab", a narrow number range rounds to one value, an object's fields come out the same.
``variants`` lists, in a fixed order, values near a repeated one: for a scalar the node's own
examples (``examples``: enum values, integers from the lower bound, numbers spread over the
range, a pattern's strings with tags added (``string_examples``), the branches of an
``anyOf`` in turn); for an object or a list, the same value with one field or item changed.
``accepts`` checks each candidate against the item's plan before it is taken, so a variant is
never invalid (it judges strictly: an object key it cannot place makes it say no).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from typing import Any

from .domains import INF, Strings
from .plans import Plan
from .ranks import json_key

#: How many candidates one node offers before the next field or item is changed.
_PER_NODE = 24
#: How deep into a repeated value variants change fields and items.
_DEPTH = 6


def identity(item: Any) -> str:
    """What must differ between items of a unique array (jsonschema: 1 and 1.0 are equal)."""
    if isinstance(item, float) and item.is_integer():
        item = int(item)
    return json_key(item)


def examples(plan: Plan, words: list[str], depth: int = 0) -> Iterator[Any]:
    """Valid scalar values of ``plan`` in a fixed order (an ``anyOf``'s branches in turn;
    nothing for objects, lists and dicts)."""
    if plan.rank == INF or depth > _DEPTH:
        return
    kind = plan.kind
    if kind == "enum":
        yield from plan.values
    elif kind == "boolean":
        yield from (False, True)
    elif kind == "null":
        yield None
    elif kind in ("integer", "number") and plan.numbers is not None:
        yield from plan.numbers.examples()
    elif kind == "string" and plan.strings is not None:
        yield from string_examples(plan.strings, words)
    elif kind == "anyof":
        if plan.nullable:
            yield None
        streams = [examples(branch, words, depth + 1) for branch, _ in plan.branches]
        for value in itertools.chain.from_iterable(itertools.zip_longest(*streams)):
            if value is not None:
                yield value


def string_examples(strings: Strings, words: list[str], tries: int = 1 << 16) -> Iterator[str]:
    """Distinct valid strings of ``strings`` in a fixed order, out of at most ``tries``
    candidates: the pattern's listing, then words and matches with tags added where nothing
    anchors them (``a``, ``b``... ``z``, ``0``... ``9``, ``aa``...), lengthened to
    ``minLength``."""
    seen: set[str] = set()
    listed, exact = strings.listed()
    for text in listed:
        seen.add(text)
        yield text
    if exact:
        return
    pattern = strings.pattern
    if pattern is None:
        bases = list(dict.fromkeys(["", *(str(word) for word in words[:8])]))
        sides = (True, False)
    else:
        bases = list(listed[:8]) or [
            written
            for written in (
                pattern.write(random.Random(n), strings.low, strings.high) for n in range(4)
            )
            if written is not None
        ]
        sides = (not pattern.ends, not pattern.begins)
    if not any(sides):
        return
    left = tries
    for tag in _tags():
        for base in bases:
            for after, text in (
                (True, f"{base}{tag}"),
                (True, f"{base} {tag}"),
                (False, f"{tag}{base}"),
            ):
                if not sides[0 if after else 1]:
                    continue
                missing = strings.low - len(text)
                if missing > 0:
                    text = text + "-" * missing if after else "-" * missing + text
                left -= 1
                if left < 0:
                    return
                if text not in seen and strings.contains(text):
                    seen.add(text)
                    yield text


#: Single characters a tag may be when ``a``... ``9`` are used up (Latin, Greek, Cyrillic, CJK).
_MORE_CHARS = "".join(
    chr(code)
    for low, high in ((0xC0, 0x17F), (0x3B1, 0x3C9), (0x430, 0x44F), (0x4E00, 0x9FFF))
    for code in range(low, high + 1)
    if chr(code).isalpha()
)


def _tags() -> Iterator[str]:
    """``a``... ``9``, then single letters of other scripts, then ``aa``, ``ab``...: short
    distinct strings, shortest first."""
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    yield from alphabet
    yield from _MORE_CHARS
    for size in itertools.count(2):
        for letters in itertools.product(alphabet, repeat=size):
            yield "".join(letters)


def variants(value: Any, plan: Plan, words: list[str], index: int, depth: int = 0) -> Iterator[Any]:
    """Candidates near ``value`` for a unique array's item ``index`` (not all valid: see
    ``accepts``): the repeated phrase numbered, then the value with one field or item changed
    (to one of that node's ``examples``, at depth 1 and below)."""
    if depth > _DEPTH:
        return
    if isinstance(value, str):
        yield f"{value} {index + 1}"  # the habit: a repeated phrase gets a number
    if depth:  # (the array's own item takes its examples from one stream: ``examples``)
        yield from itertools.islice(examples(plan, words), _PER_NODE)
    for shape in _shapes(plan):
        if isinstance(value, dict) and shape.kind == "object":
            for name, child, _, _ in shape.props:
                if name in value:
                    for sub in itertools.islice(
                        variants(value[name], child, words, index, depth + 1), _PER_NODE
                    ):
                        yield {**value, name: sub}
        elif isinstance(value, dict) and shape.kind == "map" and shape.items is not None:
            for key in value:
                for sub in itertools.islice(
                    variants(value[key], shape.items, words, index, depth + 1), _PER_NODE
                ):
                    yield {**value, key: sub}
            if shape.keys is not None and shape.keys.plain:
                for key in value:
                    renamed = {k: v for k, v in value.items() if k != key}
                    yield {**renamed, f"{key} {index + 1}": value[key]}
        elif isinstance(value, list) and shape.kind == "array" and shape.items is not None:
            for position, item in enumerate(value):
                for sub in itertools.islice(
                    variants(item, shape.items, words, index, depth + 1), _PER_NODE
                ):
                    yield [*value[:position], sub, *value[position + 1 :]]


def keyed_variants(value: Any, plan: Plan, words: list[str], index: int) -> Iterator[Any]:
    """Candidates for a key/value pair whose key repeats: the same pair with another key."""
    if not isinstance(value, dict) or plan.kind != "object":
        return
    key_plan = next((p for name, p, _, _ in plan.props if name == "key"), None)
    if key_plan is not None and "key" in value:
        for key in variants(value["key"], key_plan, words, index, depth=1):
            yield {**value, "key": key}


def _shapes(plan: Plan, depth: int = 0) -> Iterator[Plan]:
    """The plan, or the branches of an ``anyOf`` (and theirs), that a value may belong to."""
    if plan.kind != "anyof":
        yield plan
    elif depth <= _DEPTH:
        for branch, _ in plan.branches:
            if branch.rank < INF:
                yield from _shapes(branch, depth + 1)


def accepts(plan: Plan, value: Any, depth: int = 0) -> bool:
    """Whether ``value`` is valid for ``plan`` (strict: False when unsure)."""
    if plan.rank == INF or depth > 64:
        return False
    kind = plan.kind
    if kind == "enum":
        return any(identity(value) == identity(option) for option in plan.values)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "null":
        return value is None
    if kind in ("integer", "number"):
        return plan.numbers is not None and plan.numbers.contains(value)
    if kind == "string":
        return plan.strings is not None and plan.strings.contains(value)
    if kind == "anyof":
        if value is None and plan.nullable:
            return True
        return any(accepts(branch, value, depth + 1) for branch, _ in plan.branches)
    if kind == "object":
        if not isinstance(value, dict):
            return False
        names = {name for name, _, _, _ in plan.props}
        if any(key not in names for key in value):
            return False
        return all(
            accepts(child, value[name], depth + 1) if name in value else not required
            for name, child, _, required in plan.props
        )
    if kind == "map":
        return _accepts_map(plan, value, depth)
    if kind == "array":
        return _accepts_array(plan, value, depth)
    return False


def _accepts_map(plan: Plan, value: Any, depth: int) -> bool:
    if not isinstance(value, dict) or plan.items is None or plan.keys is None:
        return False
    if len(value) < plan.low or (plan.high is not None and len(value) > plan.high):
        return False
    keys = plan.keys
    for key in value:
        if keys.choices is not None and key not in keys.choices:
            return False
        if keys.kind is not None:
            return False  # typed keys: not judged here
        if keys.strings is not None and not keys.strings.contains(key):
            return False
    return all(accepts(plan.items, item, depth + 1) for item in value.values())


def _accepts_array(plan: Plan, value: Any, depth: int) -> bool:
    if not isinstance(value, list) or plan.items is None:
        return False
    if len(value) < plan.low or (plan.high is not None and len(value) > plan.high):
        return False
    if plan.unique:
        keys = [
            identity(item.get("key") if plan.keyed and isinstance(item, dict) else item)
            for item in value
        ]
        if len(set(keys)) < len(keys):
            return False
    return all(accepts(plan.items, item, depth + 1) for item in value)
