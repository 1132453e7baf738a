"""``evaluate(pred, gold, model)``: score predictions against gold, field by field."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel

from ..exceptions import ConfigurationError, EvaluationError
from ..table.columns import COST, ERROR, RESERVED_PREFIX
from . import fields as tree
from .report import Evaluation
from .score import COUNTS, GroupPool, Misfit, Origin, Recorder, compare, prepare

#: What ``kx_error`` says for a gold row that has no predicted row at all.
NO_PREDICTION = "no prediction for this row"


def evaluate(
    pred: pd.DataFrame | Sequence[Any],
    gold: pd.DataFrame | Sequence[Any],
    model: type[BaseModel],
    *,
    on: str | Sequence[str] | None = None,
    matchers: Mapping[str, Any] | None = None,
    prefix: str = "",
    n_boot: int = 1000,
    seed: int | None = 0,
    confidence: float = 0.95,
) -> Evaluation:
    """Score ``pred`` (an extraction's output) against ``gold`` (the right answers).

    - ``pred`` / ``gold``: DataFrames with one column per top-level field of ``model`` (nested
      values as dicts and lists, or as JSON text as ``run_to`` writes them to CSV), or lists of
      ``model`` instances or dicts. ``gold`` may leave out fields (they are not scored) and may
      hold ``kx_`` columns; any other column the model lacks is an error. ``pred`` may hold
      other columns (the input's, the accounting ones); ``prefix`` is the ``prefix=`` of the run
      that made it.
    - Rows are matched by index, or by the ``on=`` key column(s). A gold row with no predicted
      row, or whose prediction has a ``kx_error``, is a miss for every field. Predicted rows
      without a gold row are left out.
    - Each field is compared by its type (``kimi_extract.quality.fields``); ``matchers={"path":
      matcher}`` overrides one (a matcher of ``kimi_extract.quality``, or ``fn(gold, pred) ->
      bool | float``). Lists pair their items by optimal assignment.
    - Counts (``kimi_extract.quality.score``): a right value is a true positive; a wrong value
      is a false positive and a false negative; a value where gold has None is a false positive;
      None where gold has a value is a false negative; None vs None is right and counts in the
      exact-match rate only. ``support`` is the number of gold values.
    - Intervals: ``confidence`` (0.95) percentile bootstrap over rows, ``n_boot`` resamples (0:
      none), reproducible with ``seed`` (None: a fresh one each call).

    Raises ``EvaluationError`` (naming the row and the field) for data that does not fit the
    model: unknown columns or keys, duplicate keys, values of the wrong type.
    """
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise ConfigurationError(f"model={model!r}: pass the output model (a BaseModel subclass)")
    if not 0 < confidence < 1:
        raise ConfigurationError(f"confidence={confidence}: use a share in (0, 1), e.g. 0.95")
    if n_boot < 0:
        raise ConfigurationError(f"n_boot={n_boot}: use 0 (no intervals) or more resamples")
    keys = [on] if isinstance(on, str) else list(on or [])
    gold_frame = _frame(gold, "gold", model)
    pred_frame = _frame(pred, "predictions", model)
    gold_keys = _keys(gold_frame, keys, "gold")
    pred_keys = _keys(pred_frame, keys, "predictions")
    names = _gold_fields(gold_frame, model, keys)
    missing_columns = [prefix + n for n in names if prefix + n not in pred_frame.columns]
    if missing_columns:
        raise EvaluationError(
            f"the predictions have no column(s) {missing_columns} for the model's field(s); "
            + (
                f"prefix={prefix!r} is added to each field name"
                if prefix
                else "was it made with prefix=...? pass the same prefix= here"
            )
        )
    rows = len(gold_keys)
    position = pred_keys.get_indexer(gold_keys)
    found = position >= 0
    unmatched = len(pred_keys) - int(found.sum())
    take = np.where(found, position, 0)
    errors: list[str | None] = [None if ok else NO_PREDICTION for ok in found]
    failed = ~found
    if ERROR in pred_frame.columns:
        reasons = pred_frame[ERROR].to_numpy(dtype=object)[take]
        stated = found & ~np.asarray(pd.isna(reasons), dtype=bool)
        stated[stated] = reasons[stated] != ""
        for row in np.flatnonzero(stated):
            errors[row] = str(reasons[row])
        failed |= stated
    cost = None
    if COST in pred_frame.columns:
        per_row = pd.to_numeric(pred_frame[COST], errors="coerce").to_numpy(dtype=np.float64)
        cost = np.where(found, per_row[take], np.nan)

    root = tree.build(model, names, matchers)
    origin = Origin(
        row=np.concatenate([np.arange(rows), np.arange(rows)]),
        pred=np.concatenate([np.zeros(rows, dtype=bool), np.ones(rows, dtype=bool)]),
        item=np.full(2 * rows, -1),
    )
    pools = []
    for name, node in zip(root.names, root.children, strict=True):
        gold_values = gold_frame[name].to_numpy(dtype=object)
        pred_values = pred_frame[prefix + name].to_numpy(dtype=object)[take]
        pred_values[failed] = None
        values = np.concatenate([gold_values, pred_values])  # one pool: texts coded together
        try:
            pools.append(prepare(node, values, origin))
        except Misfit as misfit:
            raise _error(misfit, gold_keys) from None
    recorder = Recorder(rows, failed)
    outcome = compare(
        root,
        GroupPool(pools),
        np.arange(rows),
        np.arange(rows, 2 * rows),
        np.arange(rows),
        recorder,
    )
    nodes = list(tree.walk(root))
    paths = [node.path for node in nodes]
    counts = (
        np.stack([recorder.counts.get(p, np.zeros((rows, len(COUNTS)))) for p in paths], axis=1)
        if paths
        else np.zeros((rows, 0, len(COUNTS)))
    )
    return Evaluation(
        model=model.__name__,
        paths=paths,
        kinds=[node.matcher.kind for node in nodes],
        counts=counts,
        row_exact=outcome.exact & ~failed,
        failed=failed,
        errors=errors,
        index=gold_keys,
        cost=cost,
        skipped=[n for n in model.model_fields if n not in names and n not in keys],
        unmatched=unmatched,
        n_boot=n_boot,
        seed=seed,
        confidence=confidence,
    )


def _error(misfit: Misfit, keys: pd.Index) -> EvaluationError:
    side = "predicted" if misfit.pred else "gold"
    return EvaluationError(f"{side} row {keys[misfit.row]!r}, field {misfit.path}: {misfit.reason}")


def _frame(data: Any, role: str, model: type[BaseModel]) -> pd.DataFrame:
    """``data`` as a DataFrame with one column per field."""
    if isinstance(data, pd.DataFrame):
        return data
    if isinstance(data, (str, bytes, Mapping)) or not isinstance(data, Sequence):  # noqa: UP038
        raise EvaluationError(
            f"{role}: pass a DataFrame or a list of {model.__name__} instances or dicts, not "
            f"{type(data).__name__}"
        )
    records: list[dict[str, Any]] = []
    for number, item in enumerate(data):
        if isinstance(item, BaseModel):
            records.append(item.model_dump())
        elif isinstance(item, Mapping):
            records.append(dict(item))
        elif item is None and role != "gold":  # a failed prediction
            records.append({ERROR: NO_PREDICTION})
        else:
            raise EvaluationError(
                f"{role} row {number}: {type(item).__name__} is not a {model.__name__} or a dict"
            )
    columns = list(model.model_fields)
    extra = sorted({k for r in records for k in r} - set(columns), key=str)
    return pd.DataFrame.from_records(records, columns=columns + extra)


def _gold_fields(gold: pd.DataFrame, model: type[BaseModel], keys: list[str]) -> list[str]:
    """The model's fields that gold has a column for (model order); refuses foreign columns."""
    known = set(model.model_fields)
    foreign = [
        column
        for column in gold.columns
        if column not in known
        and column not in keys
        and not str(column).startswith(RESERVED_PREFIX)
    ]
    if foreign:
        raise EvaluationError(
            f"gold has column(s) {foreign} that the model {model.__name__} lacks (its fields: "
            f"{list(model.model_fields)}); drop them, or pass on=[...] if they are keys"
        )
    names = [name for name in model.model_fields if name in gold.columns and name not in keys]
    if not names:
        raise EvaluationError(
            f"gold has none of the model {model.__name__}'s fields as a column "
            f"({list(model.model_fields)}); nothing to score"
        )
    return names


def _keys(frame: pd.DataFrame, keys: list[str], role: str) -> pd.Index:
    """The row keys of ``frame``: its index, or the ``on=`` columns; unique and complete."""
    if keys:
        missing = [k for k in keys if k not in frame.columns]
        if missing:
            raise EvaluationError(f"on={keys}: {role} has no column(s) {missing}")
        index = (
            pd.Index(frame[keys[0]], name=keys[0])
            if len(keys) == 1
            else pd.MultiIndex.from_frame(frame[keys])
        )
        blank = frame[keys].isna().any(axis=1).to_numpy()
        if blank.any():
            raise EvaluationError(
                f"{role} row {frame.index[int(np.flatnonzero(blank)[0])]!r} has no value in the "
                f"key column(s) {keys}"
            )
    else:
        index = frame.index
    duplicated = index.duplicated(keep=False)
    if duplicated.any():
        first = index[int(np.flatnonzero(duplicated)[0])]
        where = "key" if keys else "index label"
        times = index[duplicated].tolist().count(first)
        raise EvaluationError(
            f"{role} has the {where} {first!r} on {times} rows: rows are "
            f"matched by {'on=' + str(keys) if keys else 'index'}, so each must be unique"
        )
    return index
