"""Field types and values for the review page's corrections, shared by the page and
``read_corrections``.

- ``describe_model(model, names)``: a compact description of each field path's JSON type, read
  from the model's JSON schema; ``infer_types(rows, names)``: the same guessed from the values
  (every path then also takes null: nothing says a value is required).
- ``jsonable(value)``: a cell's value as JSON (nested models and numpy arrays as dicts and lists,
  dates as ISO text, enums as their values, NaN and ``pd.NA`` as null).
- ``check_value(value, path, types)``: why a value does not fit its path's type, or None; the page
  runs the same checks on what a reviewer types (``review_check``).
- ``data_hash(...)``: the hash that ties a page, its saved corrections and the predictions
  together.

Paths: a field is its name (``total``), a nested field joins names with a dot (``address.city``),
a list's items follow ``[]`` (``items[]``, ``items[].name``), as ``evaluate`` names them. Each
description holds ``t`` (the JSON types: ``string``, ``integer``, ``number``, ``boolean``,
``null``, ``object``, ``array``, or ``any``), and when known ``e`` (the allowed values: enums and
literals), ``f`` (a string format: ``date``, ``date-time``, ``time``) and ``k`` (an object's keys).
"""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from ..exceptions import ConfigurationError
from ..records import is_missing

#: The JSON types a description names.
JSON_TYPES = ("string", "integer", "number", "boolean", "null", "object", "array", "any")
#: Formats the page checks (others are taken as plain strings).
FORMATS = ("date", "date-time", "time")
#: Paths deeper than this are not described (a recursive model): their values take any type.
MAX_DEPTH = 24

Types = dict[str, dict[str, Any]]


# -- types from the model ---------------------------------------------------------------------


def describe_model(model: type[BaseModel], names: Sequence[str]) -> Types:
    """Path -> type description for the fields ``names`` of ``model`` (its JSON schema, by
    field name). ``ConfigurationError`` when the model has no JSON schema."""
    try:
        schema = model.model_json_schema(by_alias=False)
    except Exception as exc:  # noqa: BLE001 - pydantic raises several kinds here
        raise ConfigurationError(
            f"model={model.__name__}: its JSON schema cannot be made ({exc}); review it "
            "without model= (types are then inferred from the values)"
        ) from None
    defs = schema.get("$defs", {})
    properties = schema.get("properties", {})
    out: Types = {}
    for name in names:
        if name in properties:
            _describe([properties[name]], defs, name, out, ())
    return out


def _branches(node: Any, defs: Mapping[str, Any], refs: tuple[str, ...]) -> list[Any]:
    """The alternatives a schema node allows: ``$ref`` followed, ``anyOf`` / ``oneOf`` spread,
    a single-entry ``allOf`` opened. A ``$ref`` already being described (recursion) -> ``{}``."""
    if not isinstance(node, Mapping):
        return [{}]
    ref = node.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        if name in refs or name not in defs:
            return [{}]
        return [{"__ref": name, **b} for b in _branches(defs[name], defs, (*refs, name))]
    for key in ("anyOf", "oneOf"):
        if isinstance(node.get(key), list):
            return [b for option in node[key] for b in _branches(option, defs, refs)]
    all_of = node.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1:
        return _branches(all_of[0], defs, refs)
    return [node]


def _types_of(branch: Mapping[str, Any]) -> set[str]:
    declared = branch.get("type")
    if isinstance(declared, str):
        return {declared}
    if isinstance(declared, list):
        return {t for t in declared if isinstance(t, str)}
    values = branch["enum"] if isinstance(branch.get("enum"), list) else None
    if "const" in branch:
        values = [branch["const"]]
    if values is not None:
        return {_json_type(v) for v in values}
    return {"any"}


def _describe(
    nodes: Sequence[Any], defs: Mapping[str, Any], path: str, out: Types, refs: tuple[str, ...]
) -> None:
    branches = [b for node in nodes for b in _branches(node, defs, refs)]
    types: set[str] = set()
    allowed: list[Any] | None = []
    formats: set[str | None] = set()
    properties: dict[str, list[Any]] = {}
    items: list[Any] = []
    seen = set(refs)
    for branch in branches:
        kinds = _types_of(branch)
        types |= kinds
        if "__ref" in branch:
            seen.add(branch["__ref"])
        values = branch.get("enum") if isinstance(branch.get("enum"), list) else None
        if "const" in branch:
            values = [branch["const"]]
        if kinds - {"null"}:
            if values is None or allowed is None:
                allowed = None
            else:
                allowed.extend(v for v in values if v not in allowed)
        if "string" in kinds:
            fmt = branch.get("format")
            formats.add(fmt if fmt in FORMATS else None)
        for name, sub in (branch.get("properties") or {}).items():
            properties.setdefault(str(name), []).append(sub)
        if isinstance(branch.get("items"), Mapping):
            items.append(branch["items"])
        if isinstance(branch.get("prefixItems"), list):
            items.extend(branch["prefixItems"])
    if "any" in types:
        types = {"any", "null"} if "null" in types else {"any"}
    entry: dict[str, Any] = {"t": sorted(types)}
    if allowed:
        entry["e"] = allowed
    if len(formats) == 1 and None not in formats:
        entry["f"] = formats.pop()
    if properties:
        entry["k"] = list(properties)
    out[path] = entry
    if path.count(".") + path.count("[") >= MAX_DEPTH:
        return
    chain = tuple(seen)
    for name, subs in properties.items():
        _describe(subs, defs, f"{path}.{name}", out, chain)
    if items:
        _describe(items, defs, f"{path}[]", out, chain)


# -- types from the values --------------------------------------------------------------------


def infer_types(rows: Iterable[Mapping[str, Any]], names: Sequence[str]) -> Types:
    """Path -> type description guessed from JSON values (``jsonable``), one mapping per row.
    Every path also takes null; a path only ever null takes any type."""
    seen: dict[str, set[str]] = {}
    keys: dict[str, dict[str, None]] = {}
    for row in rows:
        for name in names:
            _observe(row.get(name), name, seen, keys, 0)
    out: Types = {}
    for path, kinds in seen.items():
        kinds = (kinds - {"null"}) or {"any"}
        entry: dict[str, Any] = {"t": sorted(kinds | {"null"})}
        if path in keys:
            entry["k"] = list(keys[path])
        out[path] = entry
    return out


def _observe(
    value: Any, path: str, seen: dict[str, set[str]], keys: dict[str, dict[str, None]], depth: int
) -> None:
    seen.setdefault(path, set()).add(_json_type(value))
    if depth >= MAX_DEPTH:
        return
    if isinstance(value, dict):
        found = keys.setdefault(path, {})
        for key, sub in value.items():
            found[key] = None
            _observe(sub, f"{path}.{key}", seen, keys, depth + 1)
    elif isinstance(value, list):
        for sub in value:
            _observe(sub, f"{path}[]", seen, keys, depth + 1)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return "any"


# -- values -----------------------------------------------------------------------------------


def jsonable(value: Any, depth: int = 0) -> Any:
    """A cell's value as JSON data: None for a missing cell (NaN, ``pd.NA``, ``NaT``), dicts and
    lists for nested models, numpy arrays and tuples, ISO text for dates and times, an enum's
    value, a float for a finite ``Decimal``; ``"inf"`` / ``"-inf"`` for infinities, text for
    anything else."""
    if value is None or is_missing(value):
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, str):
        return value
    if depth > 2 * MAX_DEPTH:
        return str(value)
    if isinstance(value, enum.Enum):
        return jsonable(value.value, depth + 1)
    if isinstance(value, decimal.Decimal):
        return float(value) if value.is_finite() else str(value)
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, BaseModel):
        return jsonable(value.model_dump(), depth + 1)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v, depth + 1) for k, v in value.items()}
    if hasattr(value, "tolist") and not isinstance(value, bytes | bytearray):
        try:
            return jsonable(value.tolist(), depth + 1)  # numpy scalars and arrays
        except Exception:  # noqa: BLE001 - a foreign object: as text
            return str(value)
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v, depth + 1) for v in value]
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def field_value(cell: Any, entry: Mapping[str, Any] | None) -> Any:
    """A field's cell as JSON data; JSON text where the type takes an object or a list and no
    string (a table read back from CSV) is parsed."""
    value = jsonable(cell)
    if isinstance(value, str) and entry is not None:
        kinds = set(entry["t"])
        if "string" not in kinds and "any" not in kinds and kinds & {"object", "array"}:
            try:
                return jsonable(json.loads(value))
            except (ValueError, RecursionError):
                return value
    return value


def check_value(value: Any, path: str, types: Mapping[str, Mapping[str, Any]]) -> str | None:
    """Why JSON ``value`` does not fit the type of ``path`` (and of the paths under it), or None.
    A path with no description takes any value."""
    entry = types.get(path)
    if entry is None:
        return None
    kinds = set(entry["t"])
    if value is None:
        if "null" in kinds or "any" in kinds:
            return None
        return f"{path} takes {' or '.join(sorted(kinds))}, not none"
    kind = _json_type(value)
    fits = (
        "any" in kinds
        or kind in kinds
        or (kind == "integer" and "number" in kinds)
        or (kind == "number" and "integer" in kinds and float(value).is_integer())
    )
    if not fits:
        wanted = " or ".join(sorted(kinds - {"null"}))
        return f"{path} takes {wanted}, not {kind} {_short(value)}"
    allowed = entry.get("e")
    if allowed and value not in allowed:
        return f"{path} takes one of {_short(allowed)}, not {_short(value)}"
    fmt = entry.get("f")
    if fmt and isinstance(value, str) and not _formatted(value, fmt):
        return f"{path} takes a {fmt} (ISO 8601, e.g. {_EXAMPLES[fmt]}), not {_short(value)}"
    if isinstance(value, dict):
        for key, sub in value.items():
            if "k" in entry and key not in entry["k"] and f"{path}.{key}" not in types:
                return f"{path} has no key {key!r} (its keys: {', '.join(entry['k'])})"
            problem = check_value(sub, f"{path}.{key}", types)
            if problem:
                return problem
    if isinstance(value, list):
        for number, sub in enumerate(value):
            problem = check_value(sub, f"{path}[]", types)
            if problem:
                return problem.replace(f"{path}[]", f"{path}[{number}]", 1)
    return None


_EXAMPLES = {"date": "2024-03-01", "date-time": "2024-03-01T12:30:00", "time": "12:30:00"}
#: What each format accepts (the page checks typed values with the same patterns), then the
#: calendar: the date part must exist, hours < 24, minutes and seconds < 60.
FORMAT_PATTERNS = {
    "date": r"^(\d{4})-(\d{2})-(\d{2})$",
    "date-time": r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,9})?)?"
    r"(?:[Zz]|[+-]\d{2}:?\d{2})?$",
    "time": r"^()()()(\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,9})?)?(?:[Zz]|[+-]\d{2}:?\d{2})?$",
}


def _formatted(text: str, fmt: str) -> bool:
    found = re.fullmatch(FORMAT_PATTERNS[fmt], text, re.ASCII)
    if found is None:
        return False
    groups = [*found.groups(), None, None, None][:6]
    year, month, day, hour, minute, second = (int(g) if g else None for g in groups)
    if year is not None and month is not None and day is not None:
        try:
            dt.date(year, month, day)
        except ValueError:
            return False
    return (hour or 0) < 24 and (minute or 0) < 60 and (second or 0) < 60


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:80] + "…"


# -- keys and the data hash -------------------------------------------------------------------


def canonical(value: Any) -> str:
    """One text per JSON value (sorted keys, ASCII): how keys and values are compared."""
    return json.dumps(value, sort_keys=True, ensure_ascii=True, separators=(",", ":"))


def data_hash(
    fields: Sequence[str], id_column: str | None, rows: Iterable[tuple[Any, Any, Sequence[Any]]]
) -> str:
    """``sha256:<hex>`` over the field names, the ``id=`` column's name and each row's (index
    key, id value, field values), all as JSON: equal for a page and the frame it was made from."""
    digest = hashlib.sha256(canonical([list(fields), id_column]).encode("ascii"))
    for index, ident, values in rows:
        digest.update(b"\n" + canonical([index, ident, list(values)]).encode("ascii"))
    return "sha256:" + digest.hexdigest()
