"""Score every field of every row: column-wise, one pass per field path.

``prepare`` reads the values of a node for all rows at once (gold and predicted side by side in
one pool, so texts are coded together), flattening lists into pools of items. ``compare`` then
scores (gold, pred) pairs of a pool with numpy and, when given a ``Recorder``, adds each path's
counts per row.

Counts of a path, per row (what ``Evaluation.fields`` sums):

- ``tp``: a predicted value that matches the gold value;
- ``fp``: a predicted value that does not (a wrong value, or a value where gold has None);
- ``fn``: a gold value that was not predicted correctly (missing, or wrong: a wrong value is
  both a false positive and a false negative);
- ``correct`` / ``units``: units entirely right (None vs None is right) out of units scored.
  The unit of a field outside lists, and of a list, is the row; the unit of a field inside
  list items is a pair of matched items.

For a list: ``tp`` = items paired with a gold item (similarity at or above the threshold),
``fp`` = predicted items left over, ``fn`` = gold items left over; the list is correct when
every item is paired and every paired item is entirely right. Fields inside list items are
counted over the paired items only (the list's own counts say which items were found).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel

from .assign import assign_many
from .fields import Group, Items, Leaf, Node
from .matching import OBJECT_THRESHOLD, Prepared, ValueMisfit

#: Per-row counts kept for every path, in this order.
COUNTS = ("tp", "fp", "fn", "correct", "units")


class Misfit(Exception):
    """A value that does not fit its field: which side (``pred``), the row's position, the path
    (with the item's number inside a list) and why."""

    def __init__(self, pred: bool, row: int, path: str, reason: str) -> None:
        super().__init__(reason)
        self.pred, self.row, self.path, self.reason = pred, row, path, reason


@dataclass
class Origin:
    """Where each value of a pool comes from (to name it in an error)."""

    row: np.ndarray
    pred: np.ndarray
    item: np.ndarray

    def misfit(self, position: int, path: str, reason: str) -> Misfit:
        """The error for value ``position`` of ``path``."""
        item = int(self.item[position])
        if item >= 0 and "[]" in path:
            head, _, tail = path.rpartition("[]")
            path = f"{head}[{item}]{tail}"
        return Misfit(bool(self.pred[position]), int(self.row[position]), path, reason)


@dataclass
class LeafPool:
    """A single-value field's values, prepared by its matcher."""

    prepared: Prepared


@dataclass
class GroupPool:
    """A nested model's fields, one pool each (in the node's order)."""

    children: list[Pool]


@dataclass
class ItemsPool:
    """A list field: where each unit's items start in ``item`` and how many it has."""

    start: np.ndarray
    size: np.ndarray
    item: Pool


Pool = LeafPool | GroupPool | ItemsPool


def objects(values: Iterable[Any], count: int) -> np.ndarray:
    """An object array holding each value as is (lists stay lists)."""
    return np.fromiter(values, dtype=object, count=count)


def _missing(value: Any) -> bool:
    return (
        value is None
        or (isinstance(value, float) and value != value)
        or value is pd.NA
        or value is pd.NaT
    )


def _decode(value: Any, want: type, origin: Origin, position: int, path: str) -> Any:
    """A JSON text (as CSV files hold nested values), a model or an array, as ``want``."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise origin.misfit(position, path, f"{value[:60]!r} is not JSON") from None
        if value is None:
            return None
    if want is dict and isinstance(value, BaseModel):
        return value.model_dump()
    if want is list and isinstance(value, (tuple, set, frozenset, np.ndarray)):  # noqa: UP038
        return list(value)
    if isinstance(value, want):
        return value
    kind = "an object (a dict)" if want is dict else "a list"
    raise origin.misfit(position, path, f"{str(value)[:60]!r} is not {kind}")


def prepare(node: Node, values: np.ndarray, origin: Origin) -> Pool:
    """The pool of ``node`` for ``values`` (one per unit)."""
    if isinstance(node, Leaf):
        try:
            return LeafPool(node.matcher.prepare(values))
        except ValueMisfit as misfit:
            raise origin.misfit(misfit.position, node.path, misfit.reason) from None
    if isinstance(node, Group):
        dicts: list[dict[str, Any] | None] = [
            v
            if type(v) is dict
            else None
            if _missing(v)
            else _decode(v, dict, origin, position, node.path)
            for position, v in enumerate(values)
        ]
        names = set(node.names)
        keys = set(itertools.chain.from_iterable(d for d in dicts if d))
        if not keys <= names:
            extra = sorted(map(str, keys - names))[0]
            position = next(i for i, d in enumerate(dicts) if d and extra in d)
            where = f"{node.path}." if node.path else ""
            raise origin.misfit(
                position, node.path, f"has a key {extra!r} that the model lacks ({where}{extra})"
            )
        filled = [d or {} for d in dicts]
        return GroupPool(
            [
                prepare(child, objects([d.get(name) for d in filled], len(filled)), origin)
                for name, child in zip(node.names, node.children, strict=True)
            ]
        )
    lists: list[list[Any]] = [
        v
        if type(v) is list
        else []
        if _missing(v)
        else _decode(v, list, origin, position, node.path) or []
        for position, v in enumerate(values)
    ]
    size = np.fromiter(map(len, lists), dtype=np.intp, count=len(lists))
    start = np.cumsum(size) - size
    total = int(size.sum())
    items = objects(itertools.chain.from_iterable(lists), total)
    inner = Origin(
        row=np.repeat(origin.row, size),
        pred=np.repeat(origin.pred, size),
        item=np.arange(total) - np.repeat(start, size),
    )
    return ItemsPool(start, size, prepare(node.item, items, inner))


class Recorder:
    """Per-row counts (``COUNTS``) of every path, filled by ``compare``."""

    def __init__(self, rows: int, failed: np.ndarray) -> None:
        self.rows = rows
        self.failed = failed
        self.counts: dict[str, np.ndarray] = {}

    def add(
        self,
        path: str,
        rows: np.ndarray,
        tp: np.ndarray,
        fp: np.ndarray,
        fn: np.ndarray,
        correct: np.ndarray,
    ) -> None:
        """Add the counts of units ``rows`` (row positions, one per unit) to ``path``."""
        if "[]" not in path:  # the unit is the row: a row without a prediction is never right
            correct = correct & ~self.failed[rows]
        table = self.counts.setdefault(path, np.zeros((self.rows, len(COUNTS))))
        for column, values in enumerate((tp, fp, fn, correct)):
            table[:, column] += np.bincount(rows, weights=values, minlength=self.rows)
        table[:, 4] += np.bincount(rows, minlength=self.rows)


@dataclass
class PairOutcome:
    """Per pair: similarity in [0, 1], entirely right, and whether either side has a value."""

    score: np.ndarray
    exact: np.ndarray
    involved: np.ndarray


def compare(
    node: Node,
    pool: Pool,
    gold: np.ndarray,
    pred: np.ndarray,
    rows: np.ndarray,
    recorder: Recorder | None,
) -> PairOutcome:
    """Score the pairs (``gold[k]``, ``pred[k]``) of ``pool``; ``rows[k]`` is their row."""
    if isinstance(node, Leaf):
        assert isinstance(pool, LeafPool)
        return _compare_leaf(node, pool.prepared, gold, pred, rows, recorder)
    if isinstance(node, Group):
        assert isinstance(pool, GroupPool)
        total = np.zeros(len(gold))
        weight = np.zeros(len(gold))
        exact = np.ones(len(gold), dtype=bool)
        for child, child_pool in zip(node.children, pool.children, strict=True):
            outcome = compare(child, child_pool, gold, pred, rows, recorder)
            total += np.where(outcome.involved, outcome.score, 0.0)
            weight += outcome.involved
            exact &= outcome.exact
        with np.errstate(invalid="ignore", divide="ignore"):
            score = np.where(weight > 0, total / np.maximum(weight, 1), 1.0)
        return PairOutcome(score, exact, weight > 0)
    assert isinstance(pool, ItemsPool)
    return _compare_items(node, pool, gold, pred, rows, recorder)


def _compare_leaf(
    node: Leaf,
    prepared: Prepared,
    gold: np.ndarray,
    pred: np.ndarray,
    rows: np.ndarray,
    recorder: Recorder | None,
) -> PairOutcome:
    has_gold = prepared.present[gold]
    has_pred = prepared.present[pred]
    both = has_gold & has_pred
    neither = ~has_gold & ~has_pred
    score = neither.astype(np.float64)
    correct = neither.copy()
    if both.any():
        pair_score, pair_correct = node.matcher.compare(prepared, gold[both], pred[both])
        score[both] = pair_score
        correct[both] = pair_correct
    if recorder is not None:
        tp = both & correct
        recorder.add(node.path, rows, tp, has_pred & ~tp, has_gold & ~tp, correct)
    return PairOutcome(score, correct, has_gold | has_pred)


def _compare_items(
    node: Items,
    pool: ItemsPool,
    gold: np.ndarray,
    pred: np.ndarray,
    rows: np.ndarray,
    recorder: Recorder | None,
) -> PairOutcome:
    gold_start, gold_size = pool.start[gold], pool.size[gold]
    pred_start, pred_size = pool.start[pred], pool.size[pred]
    lists = len(gold)
    # every (gold item, predicted item) candidate pair of every list pair, row-major per list
    cells = gold_size * pred_size
    offsets = np.cumsum(cells) - cells
    unit = np.repeat(np.arange(lists), cells)
    local = np.arange(int(cells.sum())) - offsets[unit]
    width = np.maximum(pred_size[unit], 1)
    gold_item = gold_start[unit] + local // width
    pred_item = pred_start[unit] + local % width
    candidates = compare(node.item, pool.item, gold_item, pred_item, rows[unit], None)
    if node.matcher.threshold is not None:
        same = candidates.score >= node.matcher.threshold - 1e-12
    elif isinstance(node.item, Leaf):
        same = candidates.exact
    else:
        same = candidates.score >= OBJECT_THRESHOLD
    # pair as many items as possible first, then the most similar: a pair's weight is
    # (more than any list's item count) + its similarity, or 0 when the items differ
    bonus = float(max(int(gold_size.max(initial=0)), int(pred_size.max(initial=0))) + 1)
    weights = np.where(same, bonus + candidates.score, 0.0)
    pair_list, pair_cell = assign_many(weights, offsets, gold_size, pred_size)
    tp = np.bincount(pair_list, minlength=lists)
    similarity = np.bincount(pair_list, weights=candidates.score[pair_cell], minlength=lists)
    wrong_items = np.bincount(pair_list, weights=~candidates.exact[pair_cell], minlength=lists)
    exact = (tp == gold_size) & (tp == pred_size) & (wrong_items == 0)
    if recorder is not None:
        if not isinstance(node.item, Leaf):  # the fields inside the paired items
            compare(
                node.item,
                pool.item,
                gold_item[pair_cell],
                pred_item[pair_cell],
                rows[pair_list],
                recorder,
            )
        recorder.add(node.path, rows, tp, pred_size - tp, gold_size - tp, exact)
    sizes = gold_size + pred_size
    with np.errstate(invalid="ignore", divide="ignore"):
        score = np.where(sizes > 0, 2.0 * similarity / np.maximum(sizes, 1), 1.0)
    return PairOutcome(score, exact, sizes > 0)
