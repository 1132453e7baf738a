"""``read_corrections(path, pred)``: the corrections saved from a review page -> a gold DataFrame.

The file (``format: "kimi_extract.corrections"``, ``version: 1``) is what the page's "download
corrections" button writes, as JSON::

    {
      "format": "kimi_extract.corrections",
      "version": 1,
      "data_hash": "sha256:…",      # the page's data: field names, id column, each row's key
                                     # and values (review_types.data_hash); recomputed from pred
      "page": "review",              # the page's file name, "model": "Invoice" or null,
      "typed": "model",              # or "inferred": where the types below came from
      "prefix": "", "id_column": null,
      "fields": ["vendor", "total", "items"],
      "types": {"total": {"t": ["number"]}, "items[]": {"t": ["object"], "k": […]}, …},
      "saved": "2025-01-31T12:00:00.000Z",
      "rows": [
        {"position": 0, "index": 0, "id": null, "label": "invoice-1.pdf",
         "status": "corrected",      # confirmed | checked | corrected | unresolved
         "confirmed": false,         # "mark row correct" was pressed
         "fields": {
           "total": {"status": "corrected",      # correct | corrected | unmarked | unresolved
                     "value": 1234.5,            # the right value: the gold
                     "shown": 1243.5,            # what the page showed
                     "marks": [{"path": "total", "status": "corrected", "value": 1234.5}]},
           "items": {"status": "corrected", "value": […], "shown": […],
                     "marks": [{"path": "items[1]", "status": "not_in_source"},
                               {"path": "items", "status": "added", "value": {…}}]},
           …}}]
    }

Only the rows a reviewer acted on are listed. A row is gold when ``confirmed`` (every value right,
with its corrections), ``checked`` (some values marked correct) or ``corrected``; its values not
marked are taken as the page showed them. An ``unresolved`` row (a value marked wrong, the right
one not given) is left out, with a warning naming it. Mark statuses: ``correct``, ``wrong``,
``corrected`` (with ``value``), ``not_in_source`` (a list item to drop) and ``added`` (a list
item or value the extraction missed, with ``value``; ``path`` is the list's).
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel, ValidationError

from ..exceptions import ConfigurationError, InputError
from .review_check import FORMAT_NAME, FORMAT_VERSION
from .review_types import canonical, check_value, data_hash, field_value, jsonable

__all__ = ["CorrectionsWarning", "read_corrections"]

#: Row statuses whose rows are gold.
GOLD = ("confirmed", "checked", "corrected")
#: All row statuses a file may hold.
STATUSES = (*GOLD, "unresolved")
#: At most this many rows are named in one message.
NAMED = 20


class CorrectionsWarning(UserWarning):
    """The corrections were made on other predictions, or some rows are left out."""


def read_corrections(
    path: str | os.PathLike[str],
    pred: pd.DataFrame,
    *,
    model: type[BaseModel] | None = None,
    strict: bool = False,
) -> pd.DataFrame:
    """The gold DataFrame of the corrections file at ``path`` (from a review page of ``pred``).

    One row per row the reviewer confirmed, checked or corrected, in ``pred``'s order and with
    its index labels; one column per field (the model's field names, without the run's
    ``prefix``), nested values as dicts and lists: what ``kx.evaluate(pred, gold, model=...)``
    takes. Rows nobody touched, and rows with a value marked wrong but not given, are left out.

    ``model``: check every gold row against the output model (a row that does not validate is
    an error naming the row and field) and keep only its fields as columns. ``strict``: a file
    made from other predictions (its data hash differs from ``pred``'s) is an error rather than
    a ``CorrectionsWarning``; either way the gold holds the values the reviewer saw or typed
    (from a file made from ``pred``, the values left unmarked are read from ``pred`` itself:
    the page's copy went through JavaScript, which rounds integers past 2**53).

    Raises ``InputError`` naming the file: not JSON, another format or a newer version, rows
    that are not in ``pred`` (named), a row given twice, values that do not fit their type.
    """
    shown = str(path)
    document = _load(path, shown)
    if not isinstance(pred, pd.DataFrame):
        raise InputError(f"pred= takes the DataFrame the review page was made from, got {pred!r}")
    if model is not None and not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise ConfigurationError(f"model= takes the output model (a BaseModel subclass): {model!r}")
    fields, types, id_column, prefix = _header(document, shown)
    exact = _check_hash(document, pred, fields, types, id_column, prefix, shown, strict)
    locate = _Locator(pred, id_column)
    chosen: dict[int, dict[str, Any]] = {}
    missing: list[str] = []
    unresolved: list[str] = []
    for number, row in enumerate(document["rows"]):
        where = f"{shown}: rows[{number}]"
        if not isinstance(row, Mapping) or not isinstance(row.get("fields"), Mapping):
            raise InputError(f"{where} is not a row of corrections (a mapping with 'fields')")
        status = row.get("status")
        if status not in STATUSES:
            raise InputError(f"{where}: status {status!r} is not one of {list(STATUSES)}")
        position, problem = locate.find(row.get("index"), row.get("id"))
        if position is None:
            missing.append(problem)
            continue
        label = _label(row)
        if position in chosen:
            raise InputError(f"{where}: row {label} is given twice in the corrections")
        if status == "unresolved":
            unresolved.append(label)
            continue
        chosen[position] = _values(row, fields, types, f"{shown}: row {label}")
        if exact is not None:  # the shown values are pred's: take them as Python read them
            for name, value in zip(fields, exact[position], strict=True):
                if row["fields"][name].get("status") in ("unmarked", "correct"):
                    chosen[position][name] = value
    if missing:
        raise InputError(
            f"{shown}: {len(missing):,} corrected row(s) are not in pred: "
            + "; ".join(missing[:NAMED])
            + (" …" if len(missing) > NAMED else "")
            + " (read the corrections with the predictions the page was made from)"
        )
    if unresolved:
        warnings.warn(
            CorrectionsWarning(
                f"{shown}: {len(unresolved):,} row(s) left out of the gold: a value marked wrong "
                f"has no right value given: {', '.join(unresolved[:NAMED])}"
                + (" …" if len(unresolved) > NAMED else "")
            ),
            stacklevel=2,
        )
    names = fields
    if model is not None:
        names = _validate(model, fields, chosen, pred, shown)
    order = sorted(chosen)
    index = pred.index[order]
    return pd.DataFrame(
        {
            name: pd.Series([chosen[p][name] for p in order], index=index, dtype=object)
            for name in names
        },
        index=index,
    )


def _load(path: Any, shown: str) -> dict[str, Any]:
    if not isinstance(path, str | os.PathLike):
        raise ConfigurationError(f"path= takes the corrections file's path, got {path!r}")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"the corrections file {shown} cannot be read: {exc}") from None
    try:
        document = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise InputError(f"{shown} is not a corrections file: not JSON ({exc})") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT_NAME:
        raise InputError(
            f'{shown} is not a corrections file (no "format": "{FORMAT_NAME}"): save it '
            'with the review page\'s "download corrections" button'
        )
    version = document.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise InputError(f"{shown}: version {version!r} is not a corrections file version")
    if version > FORMAT_VERSION:
        raise InputError(
            f"{shown} was written in version {version} of the corrections format; this "
            f"kimi_extract reads version {FORMAT_VERSION}: upgrade kimi_extract to read it"
        )
    if not isinstance(document.get("rows"), list):
        raise InputError(f'{shown}: "rows" must be a list of rows')
    return document


def _header(
    document: Mapping[str, Any], shown: str
) -> tuple[list[str], dict[str, Any], str | None, str]:
    fields = document.get("fields")
    if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields) or not fields:
        raise InputError(f'{shown}: "fields" must be the list of field names')
    types = document.get("types")
    if not isinstance(types, dict) or not all(
        isinstance(t, Mapping) and isinstance(t.get("t"), list) for t in types.values()
    ):
        raise InputError(f'{shown}: "types" must map each path to a type description')
    id_column = document.get("id_column")
    prefix = document.get("prefix") or ""
    if id_column is not None and not isinstance(id_column, str) or not isinstance(prefix, str):
        raise InputError(f'{shown}: "id_column" and "prefix" must be text')
    return fields, types, id_column, prefix


def _check_hash(
    document: Mapping[str, Any],
    pred: pd.DataFrame,
    fields: list[str],
    types: Mapping[str, Any],
    id_column: str | None,
    prefix: str,
    shown: str,
    strict: bool,
) -> list[list[Any]] | None:
    """pred's field values per row when the file was made from pred (its hash matches), else
    None after a warning (``strict``: an error). The page's values went through JavaScript,
    whose numbers hold integers exactly only up to 2**53: pred's are exact."""
    columns = [prefix + name for name in fields]
    lacking = [c for c in [*columns, *([id_column] if id_column else [])] if c not in pred.columns]
    if lacking:
        why = f"pred has no column(s) {lacking}"
    else:
        ids = pred[id_column].tolist() if id_column else [None] * len(pred)
        cells = [pred[c].tolist() for c in columns]
        values = [
            [
                field_value(cell[n], types.get(name))
                for cell, name in zip(cells, fields, strict=True)
            ]
            for n in range(len(pred))
        ]
        rows = (
            (jsonable(label), jsonable(ident) if id_column else None, row)
            for label, ident, row in zip(pred.index, ids, values, strict=True)
        )
        if data_hash(fields, id_column, rows) == document.get("data_hash"):
            return values
        why = "its rows or values changed since the page was made"
    message = (
        f"{shown} was made from other predictions than pred ({why}); the gold holds the values "
        "the reviewer saw or typed"
    )
    if strict:
        raise InputError(message)
    warnings.warn(CorrectionsWarning(message), stacklevel=3)
    return None


class _Locator:
    """Finds a corrected row in ``pred`` by its index label, else by its ``id=`` value."""

    def __init__(self, pred: pd.DataFrame, id_column: str | None) -> None:
        self.by_index: dict[str, list[int]] = {}
        for position, label in enumerate(pred.index):
            self.by_index.setdefault(canonical(jsonable(label)), []).append(position)
        self.by_id: dict[str, list[int]] = {}
        self.ids: list[str | None] = [None] * len(pred)
        if id_column is not None and id_column in pred.columns:
            for position, ident in enumerate(pred[id_column].tolist()):
                key = canonical(jsonable(ident))
                self.ids[position] = key
                self.by_id.setdefault(key, []).append(position)
        self.use_id = id_column is not None and id_column in pred.columns

    def find(self, index: Any, ident: Any) -> tuple[int | None, str]:
        """(pred's position of the row, "") or (None, the row named for the error)."""
        named = f"index {canonical(index)}" + (f" (id {canonical(ident)})" if self.use_id else "")
        found = self.by_index.get(canonical(index), [])
        if self.use_id:
            key = canonical(ident)
            found = [p for p in found if self.ids[p] == key] or (
                [] if found else self.by_id.get(key, [])
            )
        if len(found) == 1:
            return found[0], ""
        if not found:
            return None, named
        raise InputError(
            f"row {named} matches {len(found)} rows of pred (its index has duplicate labels): "
            "give the rows unique index labels, or review with id= a column of unique values"
        )


def _label(row: Mapping[str, Any]) -> str:
    text = f"index {canonical(row.get('index'))}"
    return text + (f" (id {canonical(row['id'])})" if row.get("id") is not None else "")


def _values(
    row: Mapping[str, Any], fields: list[str], types: Mapping[str, Any], where: str
) -> dict[str, Any]:
    out = {}
    for name in fields:
        entry = row["fields"].get(name)
        if not isinstance(entry, Mapping) or "value" not in entry:
            raise InputError(f"{where}: field {name!r} has no value")
        if entry.get("status") == "unresolved":
            raise InputError(f"{where}: field {name!r} is unresolved, yet the row is gold")
        problem = check_value(entry["value"], name, types)
        if problem:
            raise InputError(f"{where}: {problem}")
        out[name] = entry["value"]
    return out


def _validate(
    model: type[BaseModel],
    fields: list[str],
    chosen: Mapping[int, dict[str, Any]],
    pred: pd.DataFrame,
    shown: str,
) -> list[str]:
    names = list(model.model_fields)
    lacking = [n for n in names if n not in fields]
    if lacking:
        raise InputError(
            f"{shown}: the corrections have no field(s) {lacking} of model={model.__name__} "
            f"(their fields: {fields}); make the page with review(..., model={model.__name__})"
        )
    for position, values in chosen.items():
        try:
            model.model_validate_json(json.dumps({n: values[n] for n in names}), by_name=True)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise InputError(
                f"{shown}: row {canonical(jsonable(pred.index[position]))}, field {where}: "
                f"{first['msg']} (got {json.dumps(first.get('input'), default=str)[:80]})"
            ) from None
    return names
