"""Comparing list items and scalars for a merge (``run.merge``): normal forms, agreement, keys.

- ``normal``: a scalar's comparison form (text folded: case, width, spacing; numbers by value;
  dates in ISO);
- ``item_fields``: an item's scalar fields by path; ``key_fields``: the fields ``dedupe_on``
  names for one list;
- ``agree``: whether two items' fields agree (with spans: where each grounded its fields);
- ``new_items``: what a later pass added to the earlier passes' items;
- ``in_shared``: whether an item's values are in the text two chunks share.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import date, datetime, time
from decimal import Decimal, InvalidOperation
from enum import Enum
from typing import Any

from ..ground import align, fold, leaves_of
from ..records import is_missing


def normal(value: Any) -> Any:
    """A scalar's comparison form: text folded, numbers by value, dates in ISO; None if absent."""
    if is_missing(value):
        return None
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float | Decimal):
        number = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
        return number.normalize() if number.is_finite() else None
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    text = fold(str(value))
    if not text:
        return None
    try:
        number = Decimal(text.replace(",", ""))
    except (InvalidOperation, ValueError):
        return text
    return number.normalize() if number.is_finite() else text


def jsonable(value: Any) -> Any:
    """A scalar as JSON data (for ``kx_conflicts``)."""
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def item_fields(item: Any) -> dict[str, Any]:
    """An item's scalar fields by their path inside it (``""`` for a plain value); lists inside
    it are left out."""
    if not isinstance(item, Mapping):
        return {"": item}
    out: dict[str, Any] = {}
    for path, _ in leaves_of(_without_lists(item), booleans=True):
        out[path] = _get(item, path)
    return out


def _without_lists(item: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: (_without_lists(v) if isinstance(v, Mapping) else v)
        for k, v in item.items()
        if not isinstance(v, list | tuple)
    }


def _get(node: Any, path: str) -> Any:
    for part in path.split(".") if path else ():
        node = node.get(part) if isinstance(node, Mapping) else None
    return node


def key_fields(list_path: str, dedupe_on: Sequence[str] | None) -> tuple[str, ...] | None:
    """The key fields of the items of the list at ``list_path`` (indexes dropped): the entries
    of ``dedupe_on`` naming it (``"items.sku"``) or bare (``"sku"``); None: every field."""
    if dedupe_on is None:
        return None
    keys = [d[len(list_path) + 1 :] for d in dedupe_on if d.startswith(list_path + ".")]
    keys += [d for d in dedupe_on if "." not in d]
    return tuple(dict.fromkeys(keys))


#: Where an item's grounded fields are: field -> (start, end) in the document.
Places = Mapping[str, tuple[int, int]]


def has_letters(value: Any) -> bool:
    return isinstance(value, str) and any(c.isalpha() for c in value)


def agree(
    a: Mapping[str, Any],
    b: Mapping[str, Any],
    keys: tuple[str, ...] | None,
    grounded: tuple[Places, Places] | None = None,
) -> tuple[bool, list[str]]:
    """Whether two items' fields agree (module docstring), and the fields that agree.

    ``grounded`` (with spans): where each item grounded its fields. A field both grounded at
    the same place agrees whatever the values (one of them misread that text); a field only one
    grounded, or a number both grounded at different places (numbers recur), is not compared;
    a text both grounded at different places disagrees."""
    names = keys if keys is not None else tuple(dict.fromkeys([*a, *b]))
    equal: list[str] = []
    for name in names:
        left, right = normal(a.get(name)), normal(b.get(name))
        if left is None or right is None:
            if keys is not None:
                return False, []
            continue
        if grounded is not None and name in grounded[0] and name in grounded[1]:
            if same_place(grounded[0][name], grounded[1][name]):
                equal.append(name)
                continue
            if left != right and not has_letters(a.get(name)):
                continue
        if left == right:
            equal.append(name)
            continue
        if (
            keys is None
            and grounded is not None
            and not (name in grounded[0] and name in grounded[1])
        ):
            continue
        return False, []
    return bool(equal), equal


def new_items(
    earlier: Sequence[Mapping[str, Any]], latest: Mapping[str, Any], dedupe_on: Sequence[str] | None
) -> int:
    """How many list items of ``latest`` (a later pass's answer) agree with no item of the
    ``earlier`` answers (each earlier item matched once): what the pass added."""
    added = 0
    for path, items in list_items(latest).items():
        keys = key_fields(path, dedupe_on)
        pool = [item_fields(i) for answer in earlier for i in list_items(answer).get(path, [])]
        for item in items:
            fields = item_fields(item)
            match = next(
                (n for n, other in enumerate(pool) if keys != () and agree(other, fields, keys)[0]),
                None,
            )
            if match is None:
                added += 1
            else:
                pool.pop(match)
    return added


def list_items(value: Any, path: str = "") -> dict[str, list[Any]]:
    """The outermost lists of ``value`` by their path (indexes dropped: there are none above)."""
    if isinstance(value, Mapping):
        out: dict[str, list[Any]] = {}
        for key, child in value.items():
            out.update(list_items(child, f"{path}.{key}" if path else str(key)))
        return out
    if isinstance(value, list | tuple):
        return {path: list(value)}
    return {}


def same_place(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Two spans of one field cover the same text: they overlap by at least half the shorter
    (a made-up value found inside another's evidence does not)."""
    shared = min(a[1], b[1]) - max(a[0], b[0])
    return shared > 0 and 2 * shared >= min(a[1] - a[0], b[1] - b[0])


def in_shared(shared: str, fields: Mapping[str, Any]) -> bool:
    """Whether every value of ``fields`` is in ``shared`` (the aligner: exact, normalized or
    fuzzy), so the item can sit in the text two chunks share."""
    if not shared.strip():
        return False
    leaves = [(name or "value", text) for name, text in leaves_of(dict(fields), booleans=False)]
    if not leaves:
        return False
    return all(span.grounded for span in align(shared, leaves))


def copies_in(shared: str, fields: Mapping[str, Any]) -> int:
    """How many copies of an item ``shared`` holds: the fewest occurrences of one of its values
    written as given (text folded), at least 1 (``in_shared`` found it, maybe written otherwise)."""
    folded = fold(shared)
    counts = [folded.count(fold(str(v))) for v in fields.values() if fold(str(v))]
    return max(1, min(counts, default=1))
