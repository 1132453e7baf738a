"""What the review page needs for corrections: which columns are the fields, their types, each
row's key and values, and the hash of it all (``review_types.data_hash``).

With ``model=``, the fields are the model's (``prefix`` + name columns) and their types come from
its JSON schema; without it, every column but the ``kx_`` ones, the text columns and the ``id=``
column is taken for a field and the types are inferred from the values (the page says so).
Each row's key is its index label and, with ``id=``, that column's value (``read_corrections``
finds the row in the predictions by them); its values are the fields' cells as JSON.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from ..exceptions import ConfigurationError, InputError
from .columns import RESERVED_PREFIX
from .review_types import (
    FORMAT_PATTERNS,
    Types,
    data_hash,
    describe_model,
    field_value,
    infer_types,
    jsonable,
)

#: The version of the corrections file format (``table.corrections``) this page writes.
FORMAT_VERSION = 1
#: The ``format`` field of a corrections file.
FORMAT_NAME = "kimi_extract.corrections"


@dataclass
class Checks:
    """The fields of a review page and the rows seen so far (in frame order)."""

    names: list[str]
    columns: list[str]
    model: str | None
    types: Types | None
    id_column: str | None
    prefix: str
    keys: list[tuple[Any, Any]] = field(default_factory=list)
    values: list[dict[str, Any]] = field(default_factory=list)

    def row(self, label: Any, record: dict[str, Any]) -> dict[str, Any]:
        """Record one frame row (in order); what its card row carries: its position, key and
        field values."""
        position = len(self.keys)
        ident = jsonable(record.get(self.id_column)) if self.id_column is not None else None
        key = (jsonable(label), ident)
        types = self.types or {}
        values = {
            name: field_value(record.get(column), types.get(name))
            for name, column in zip(self.names, self.columns, strict=True)
        }
        self.keys.append(key)
        self.values.append(values)
        return {"pos": position, "key": list(key), "values": values}

    def data(self, name: str) -> dict[str, Any]:
        """The page data's ``check`` part: format, hash, fields, types, keys."""
        types = self.types if self.types is not None else infer_types(self.values, self.names)
        return {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "hash": self.hash(),
            "name": name,
            "fields": self.names,
            "prefix": self.prefix,
            "model": self.model,
            "typed": "model" if self.types is not None else "inferred",
            "types": types,
            "formats": FORMAT_PATTERNS,
            "id_column": self.id_column,
        }

    def hash(self) -> str:
        """``data_hash`` of the rows seen."""
        rows = (
            (index, ident, [values[n] for n in self.names])
            for (index, ident), values in zip(self.keys, self.values, strict=True)
        )
        return data_hash(self.names, self.id_column, rows)

    def note(self) -> str:
        """What the page says about the corrections' types."""
        if self.types is not None:
            return ""
        return (
            "Corrections: the fields ("
            + ", ".join(self.names[:12])
            + (", …" if len(self.names) > 12 else "")
            + ") and their types are inferred from the values; pass model= to review() "
            "(kimi-extract review --model) to check typed values against the model."
        )


def checks_for(
    columns: Sequence[str],
    model: type[BaseModel] | None,
    prefix: str,
    text_columns: Sequence[str],
    id_column: str | None,
) -> Checks | None:
    """The page's fields (None when the frame has none); ``InputError`` when the frame lacks a
    column for a field of ``model``, ``ConfigurationError`` for a ``model`` or ``prefix`` of the
    wrong kind."""
    if not isinstance(prefix, str):
        raise ConfigurationError(f"prefix= must be a string, got {type(prefix).__name__}")
    if model is not None:
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise ConfigurationError(
                f"model= takes the output model (a pydantic BaseModel subclass), got {model!r}"
            )
        names = list(model.model_fields)
        missing = [prefix + n for n in names if prefix + n not in columns]
        if missing:
            hint = (
                " (was it made with column_prefix=...? pass the same as prefix= here)"
                if not prefix
                else ""
            )
            raise InputError(
                f"model={model.__name__}: the frame has no column(s) {missing} for its "
                f"field(s){hint}; its columns: {list(columns)}"
            )
        return Checks(
            names=names,
            columns=[prefix + n for n in names],
            model=model.__name__,
            types=describe_model(model, names),
            id_column=id_column,
            prefix=prefix,
        )
    skip = {*text_columns, id_column}
    chosen = [
        c for c in columns if not c.startswith(RESERVED_PREFIX) and c not in skip and c in columns
    ]
    chosen = [c for c in chosen if c.startswith(prefix)]
    if not chosen:
        return None
    return Checks(
        names=[c[len(prefix) :] for c in chosen],
        columns=chosen,
        model=None,
        types=None,
        id_column=id_column,
        prefix=prefix,
    )
