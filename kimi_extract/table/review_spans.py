"""Reading ``kx_spans`` records for the review page, defensively: a table may come from another
tool, another version or a hand edit, so every field of a record is checked and a record the page
cannot use is skipped and counted, never fatal.

- ``spans_of(cell)``: the records of one cell, strictly (``InputError`` for a malformed cell);
  ``read_spans(cell)``: the same, leniently (the usable records and how many were skipped).
- ``clean_span(record)``: one record's fields as the page shows them (``SpanView``), with what is
  wrong with it (``problem``): offsets that are not whole numbers, boxes that are not four finite
  numbers.
- ``kind_class(kind)``: how the page colours and filters a match kind: ``verified`` (exact,
  normalized), ``quote``, ``fuzzy`` and ``near`` (doubtful), ``none`` (unsupported),
  ``inferred`` (a label, not a quotation), ``other`` (a kind this version does not know).
- ``utf16_offsets(text, offsets)``: Python indices -> JavaScript ones, in one sweep of the text.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..exceptions import InputError
from ..records import is_missing
from .columns import SPANS

#: A value longer than this is cut in the fields table (the full text stays in the source).
MAX_VALUE_CHARS = 2_000
#: Match kind -> how the page shows it (``other`` for a kind it does not know).
KIND_CLASSES = {
    "exact": "verified",
    "normalized": "verified",
    "quote": "quote",
    "fuzzy": "fuzzy",
    "near": "near",
    "none": "none",
    "inferred": "inferred",
}
#: Classes whose values are not supported by the text (a near miss points at the closest text).
UNSUPPORTED = ("none", "near")
#: Classes a reviewer should look at: the list of doubtful values holds these.
DOUBTFUL = ("none", "near", "fuzzy", "other")


def kind_class(kind: str) -> str:
    """The page's class of a match kind (``KIND_CLASSES``; ``other`` when unknown)."""
    return KIND_CLASSES.get(kind, "other")


def spans_of(cell: Any) -> list[dict[str, Any]]:
    """The span records of one ``kx_spans`` cell: a list of dicts (or ``Span`` objects), or the
    JSON text a .csv / .parquet file stores; missing -> []. ``InputError`` for anything else."""
    records, problem = _records(cell)
    if problem is not None:
        raise InputError(problem)
    bad = [r for r in records if not isinstance(r, Mapping)]
    if bad:
        raise InputError(f"{SPANS} holds a {type(bad[0]).__name__}, not a span record")
    return [dict(r) for r in records]


def read_spans(cell: Any) -> tuple[list[dict[str, Any]], int, str | None]:
    """(the usable span records of a cell, how many records were skipped, why the whole cell
    was unreadable or None): ``spans_of`` that never raises."""
    records, problem = _records(cell)
    usable = [dict(r) for r in records if isinstance(r, Mapping)]
    skipped = len(records) - len(usable) + (problem is not None)
    return usable, skipped, problem


def _records(cell: Any) -> tuple[list[Any], str | None]:
    if is_missing(cell):
        return [], None
    if isinstance(cell, str):
        if not cell.strip():
            return [], None
        try:
            cell = json.loads(cell)
        except (json.JSONDecodeError, RecursionError) as exc:
            return [], f"{SPANS} holds text that is not JSON: {exc}"
    if hasattr(cell, "tolist") and not isinstance(cell, Mapping):  # numpy (pyarrow list cells)
        try:
            cell = cell.tolist()
        except Exception:  # noqa: BLE001 - a foreign object: the cell is unreadable
            return [], f"{SPANS} holds an unreadable {type(cell).__name__}"
    if not isinstance(cell, list | tuple):
        return [], f"{SPANS} cells must be lists of span records, got {type(cell).__name__}"
    records = []
    for item in cell:
        if hasattr(item, "to_dict") and not isinstance(item, Mapping):
            try:
                item = item.to_dict()
            except Exception:  # noqa: BLE001 - a foreign object: skipped as not a record
                pass
        records.append(item)
    return records, None


def int_or_none(value: Any) -> int | None:
    """A whole number (an int, or a float with no fraction), else None (also for inf, NaN,
    True/False and text)."""
    if is_missing(value) or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    if not math.isfinite(number) or number != int(number):
        return None
    return int(number)


def float_or_none(value: Any) -> float | None:
    """A finite float, else None."""
    if is_missing(value) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def text_of(value: Any, limit: int = MAX_VALUE_CHARS) -> str:
    """Any cell value as text for the page (nested values as JSON), cut at ``limit``."""
    try:
        if isinstance(value, str):
            text = value
        elif hasattr(value, "tolist"):
            text = json.dumps(value.tolist(), ensure_ascii=False, default=str)
        elif isinstance(value, dict | list | tuple):
            text = json.dumps(value, ensure_ascii=False, default=str)
        else:
            text = str(value)
    except Exception:  # noqa: BLE001 - keys JSON cannot write, cycles, a failing __str__
        try:
            text = repr(value)
        except Exception:  # noqa: BLE001
            text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit] + f"… ({len(text):,} characters)"


def read_boxes(raw: Any) -> tuple[list[tuple[float, float, float, float]], bool]:
    """(the boxes of a span that are four finite numbers, whether any was malformed)."""
    if is_missing(raw) or raw is None:
        return [], False
    if hasattr(raw, "tolist") and not isinstance(raw, Mapping):
        try:
            raw = raw.tolist()
        except Exception:  # noqa: BLE001
            return [], True
    if not isinstance(raw, list | tuple):
        return [], True
    boxes, bad = [], False
    for box in raw:
        if hasattr(box, "tolist") and not isinstance(box, Mapping):
            try:
                box = box.tolist()
            except Exception:  # noqa: BLE001
                box = None
        numbers = [float_or_none(v) for v in box] if isinstance(box, list | tuple) else []
        if len(numbers) != 4 or any(n is None for n in numbers):
            bad = True
            continue
        left, top, right, bottom = (float(n) for n in numbers if n is not None)
        boxes.append((left, top, right, bottom))
    return boxes, bad


@dataclass
class SpanView:
    """One span record's fields as the page shows them; ``problem`` says what was unusable."""

    path: str
    value: str
    kind: str
    score: float
    start: int | None
    end: int | None
    page: int | None
    quote: str | None
    diff: list[dict[str, str]] | None
    boxes: list[tuple[float, float, float, float]] = field(default_factory=list)
    problem: str | None = None

    @property
    def css(self) -> str:
        return kind_class(self.kind)

    @property
    def located(self) -> bool:
        """True when the record points at text (offsets, a kind that has evidence)."""
        return self.css not in ("none", "inferred") and self.start is not None


def clean_span(record: Mapping[str, Any]) -> SpanView:
    """The page's view of one span record, never raising; what is malformed is in ``problem``."""
    problems = []
    kind = record.get("kind")
    kind = "none" if is_missing(kind) or kind == "" else text_of(kind, 40)
    start, end = int_or_none(record.get("start")), int_or_none(record.get("end"))
    raw_start, raw_end = record.get("start"), record.get("end")
    given = not (is_missing(raw_start) and is_missing(raw_end))
    if given and kind_class(kind) not in ("none", "inferred"):
        if start is None or end is None or start < 0 or end < start:
            problems.append(f"offsets {text_of(raw_start, 30)}..{text_of(raw_end, 30)} unusable")
            start = end = None
    boxes, bad_boxes = read_boxes(record.get("boxes"))
    if bad_boxes:
        problems.append("malformed boxes skipped")
    quote = record.get("quote")
    return SpanView(
        path=text_of(record.get("path", ""), 300),
        value=text_of(record.get("value", ""), 1 << 40),  # cut only when shown
        kind=kind,
        score=float_or_none(record.get("score")) or 0.0,
        start=start,
        end=end,
        page=int_or_none(record.get("page")),
        quote=None if is_missing(quote) else text_of(quote),
        diff=diff_pieces(record.get("diff")),
        boxes=boxes,
        problem="; ".join(problems) or None,
    )


def diff_pieces(raw: Any) -> list[dict[str, str]] | None:
    """A ``diff`` field as display pieces: ``{"note": text}`` for a piece given as text,
    ``{"v": in the value, "x": in the text}`` for a pair; None when absent (the page then
    computes a character diff of value and evidence)."""
    if is_missing(raw) or raw is None:
        return None
    if hasattr(raw, "tolist") and not isinstance(raw, Mapping | str):
        raw = raw.tolist()
    items = raw if isinstance(raw, list | tuple) else [raw]
    pieces: list[dict[str, str]] = []
    for item in items[:200]:
        if isinstance(item, str):
            pieces.append({"note": text_of(item, 300)})
        elif isinstance(item, list | tuple) and len(item) == 2:
            pieces.append({"v": text_of(item[0], 300), "x": text_of(item[1], 300)})
        elif isinstance(item, Mapping):
            pair = _pair(item)
            pieces.append(pair if pair else {"note": text_of(dict(item), 300)})
        else:
            pieces.append({"note": text_of(item, 300)})
    return pieces


_PAIRS = (("value", "text"), ("expected", "found"), ("a", "b"), ("old", "new"), ("from", "to"))


def _pair(item: Mapping[str, Any]) -> dict[str, str] | None:
    for left, right in _PAIRS:
        if left in item or right in item:
            return {
                "v": "" if is_missing(item.get(left)) else text_of(item.get(left), 300),
                "x": "" if is_missing(item.get(right)) else text_of(item.get(right), 300),
            }
    return None


def utf16_offsets(text: str, offsets: Sequence[int]) -> list[int]:
    """Python string indices -> JavaScript (UTF-16) indices into the same text, in one sweep
    (characters beyond U+FFFF count twice in JavaScript). Offsets are clamped to the text."""
    if not offsets:
        return []
    order = sorted(range(len(offsets)), key=offsets.__getitem__)
    out = [0] * len(offsets)
    position = wide = 0
    for index in order:
        offset = min(max(offsets[index], 0), len(text))
        if offset > position:
            wide += len(_ASTRAL.findall(text, position, offset))
            position = offset
        out[index] = offset + wide
    return out


_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


def field_key(path: str) -> str:
    """A span path with its list indices dropped (``items[2].name`` -> ``items[].name``): the
    per-field view groups values by this."""
    return _INDEX.sub("[]", path)


_INDEX = re.compile(r"\[\d+\]")
