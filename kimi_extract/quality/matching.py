"""How two values of one field are compared: a matcher per kind of field.

A matcher works on whole columns at once. ``prepare`` turns every value of a field (gold and
predicted together, so equal texts get equal codes) into a comparable form once: numbers to
floats, dates to integers, texts to normalised codes. ``compare`` then scores many (gold, pred)
pairs at once with numpy. Each pair gets a score in [0, 1] and a verdict (``correct``); a value
that is absent (None, NaN, ``<NA>``, an empty text) is handled by the caller, not here.

- ``NumberMatcher(rel=1e-9, abs=0.0)``: equal within ``abs`` or ``rel`` times the larger
  magnitude (``math.isclose``'s rule); numeric strings are read as numbers. Integer fields
  default to ``NumberMatcher(rel=0)``: exactly equal (also past 2**53).
- ``DateMatcher(unit)``: ISO 8601 texts, ``date``, ``datetime``, ``time`` and pandas timestamps,
  parsed, then equal as instants (a naive datetime is read as UTC); ``unit="date"`` compares
  calendar days.
- ``ExactMatcher(allowed=None)``: equal after canonical JSON (an Enum by its value); with
  ``allowed`` (a Literal's or an Enum's values) a gold value outside it is refused.
- ``TextMatcher(normalize=True, fuzzy=None)``: equal after Unicode NFKC-style folding, case
  folding, punctuation shapes folded to ASCII and whitespace runs collapsed; with ``fuzzy=85``
  a pair is correct when RapidFuzz's ``ratio`` of the normalised texts is at least 85 (the score
  is the ratio / 100).
- ``FunctionMatcher(fn, threshold=1.0)``: your ``fn(gold, pred) -> bool | float`` per pair
  (Python per pair: the slow path).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from enum import Enum
from typing import Any, Literal

import numpy as np
import pandas as pd

from ..exceptions import ConfigurationError
from ..ground.normalize import fold


class ValueMisfit(Exception):
    """A value that does not fit its field's type (``position`` indexes the prepared values)."""

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(reason)
        self.position = position
        self.reason = reason


@dataclass
class Prepared:
    """A field's values in comparable form: ``canon`` per value, ``present`` where not absent."""

    canon: np.ndarray
    present: np.ndarray
    #: Normalised texts, for fuzzy comparison (TextMatcher only).
    texts: np.ndarray | None = None


def absent(values: np.ndarray) -> np.ndarray:
    """True where a value is None, NaN, ``<NA>`` or ``NaT``."""
    return np.asarray(pd.isna(values), dtype=bool)


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _factorize(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes and uniques of hashable values; raises ValueMisfit at the first unhashable one."""
    try:
        codes, uniques = pd.factorize(values, use_na_sentinel=True)
    except TypeError:
        for position, value in enumerate(values):
            try:
                hash(value)
            except TypeError:
                raise ValueMisfit(
                    position, f"{_show(value)} is a {type(value).__name__}, not a single value"
                ) from None
        raise
    return np.asarray(codes, dtype=np.int64), np.asarray(uniques, dtype=object)


def _show(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class LeafMatcher:
    """Base of the matchers of single values (see the module docstring)."""

    kind = "value"

    def prepare(self, values: np.ndarray) -> Prepared:
        """``values`` (an object array, gold and predicted) in comparable form."""
        raise NotImplementedError

    def compare(
        self, prepared: Prepared, gold: np.ndarray, pred: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(score, correct) for the pairs ``prepared[gold[k]]``, ``prepared[pred[k]]``.

        Called only for pairs where both values are present.
        """
        raise NotImplementedError


@dataclass(frozen=True)
class NumberMatcher(LeafMatcher):
    """Numbers: equal within ``abs`` or ``rel`` times the larger magnitude."""

    rel: float = 1e-9
    abs: float = 0.0
    kind = "number"

    def __post_init__(self) -> None:
        if not (self.rel >= 0 and self.abs >= 0):
            raise ConfigurationError(
                f"NumberMatcher(rel={self.rel}, abs={self.abs}): both must be >= 0"
            )

    def prepare(self, values: np.ndarray) -> Prepared:
        missing = absent(values)
        if values.dtype.kind in "iufb":
            numbers = values if values.dtype.kind in "iu" else values.astype(np.float64)
        else:
            # nullable dtypes keep integers past 2**53 exact beside missing values
            read = pd.to_numeric(
                pd.Series(values, dtype=object), errors="coerce", dtype_backend="numpy_nullable"
            )
            bad = ~missing & read.isna().to_numpy()
            if bad.any():
                position = _first(bad)
                raise ValueMisfit(position, f"{_show(values[position])} is not a number")
            integral = read.dtype.kind in "iu"
            numbers = read.to_numpy(
                dtype=np.int64 if integral else np.float64, na_value=0 if integral else np.nan
            )
        return Prepared(canon=numbers, present=~missing)

    def compare(
        self, prepared: Prepared, gold: np.ndarray, pred: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        g, p = prepared.canon[gold], prepared.canon[pred]
        if g.dtype.kind in "iu" and self.rel == 0 and self.abs == 0:  # integers beyond 2**53
            correct = g == p
        else:
            g, p = g.astype(np.float64), p.astype(np.float64)
            with np.errstate(invalid="ignore", over="ignore"):
                tolerance = np.maximum(self.abs, self.rel * np.maximum(np.abs(g), np.abs(p)))
                correct = (g == p) | (np.abs(g - p) <= tolerance)
        return correct.astype(np.float64), correct


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def _instant(value: Any, unit: str) -> int | None:
    """An integer key for a date, datetime or time value (None for another type; a text that
    is not ISO 8601 raises ValueError)."""
    if isinstance(value, pd.Timestamp):
        value = value.to_pydatetime()
    elif isinstance(value, np.datetime64):
        value = pd.Timestamp(value).to_pydatetime()
    if isinstance(value, str):
        text = value.strip()
        if unit == "time":
            value = time.fromisoformat(text)
        else:
            value = datetime.fromisoformat(text)
    if unit == "time":
        if not isinstance(value, time):
            return None
        offset = value.utcoffset() or timedelta(0)
        micros = ((value.hour * 60 + value.minute) * 60 + value.second) * 10**6
        return micros + value.microsecond - offset // _MICROSECOND
    if isinstance(value, datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        if unit == "date":
            return value.date().toordinal()
        return (aware - _EPOCH) // _MICROSECOND
    if isinstance(value, date):
        if unit == "date":
            return value.toordinal()
        return (datetime(value.year, value.month, value.day, tzinfo=UTC) - _EPOCH) // _MICROSECOND
    return None


@dataclass(frozen=True)
class DateMatcher(LeafMatcher):
    """Dates, datetimes and times: parsed (ISO 8601 texts too), then equal.

    ``unit``: ``"datetime"`` (instants, to the microsecond; a naive value is read as UTC),
    ``"date"`` (calendar days; a datetime's own date) or ``"time"``.
    """

    unit: Literal["date", "datetime", "time"] = "datetime"
    kind = "date"

    def prepare(self, values: np.ndarray) -> Prepared:
        missing = absent(values)
        codes, uniques = _factorize(values)
        keys = np.empty(len(uniques), dtype=np.int64)
        for number, value in enumerate(uniques):
            try:
                key = _instant(value, self.unit)
            except (ValueError, TypeError, OverflowError):
                key = None
            if key is None:
                raise ValueMisfit(
                    _first(codes == number), f"{_show(value)} is not an ISO 8601 {self.unit}"
                )
            keys[number] = key
        canon = np.where(codes >= 0, keys[np.maximum(codes, 0)] if len(keys) else 0, 0)
        return Prepared(canon=canon, present=~missing)

    def compare(
        self, prepared: Prepared, gold: np.ndarray, pred: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        correct = prepared.canon[gold] == prepared.canon[pred]
        return correct.astype(np.float64), correct


def _canonical(value: Any) -> str:
    """Canonical JSON of a value: an Enum by its value, an integral float as an integer (a CSV
    column of integers with blanks reads back as floats), keys sorted."""
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, float | np.floating) and float(value).is_integer():
        value = int(value)
    if hasattr(value, "model_dump"):
        value = value.model_dump(mode="json")
    return json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)


@dataclass(frozen=True)
class ExactMatcher(LeafMatcher):
    """Equal after canonical JSON (Enums by value); ``allowed`` refuses gold values outside it."""

    allowed: tuple[Any, ...] | None = None
    kind = "exact"

    def prepare(self, values: np.ndarray) -> Prepared:
        missing = absent(values)
        try:
            codes, uniques = _factorize(values)
            texts = [_canonical(v) for v in uniques]
        except ValueMisfit:  # dicts and lists (dict[str, X] fields): canonical JSON per value
            if self.allowed is not None:
                raise
            texts = [_canonical(v) for v in values]
            codes = np.where(missing, -1, np.arange(len(values)))
            uniques = values
        if self.allowed is not None:
            allowed = {_canonical(v) for v in self.allowed}
            for number, text in enumerate(texts):
                if text not in allowed and (codes == number).any():
                    raise ValueMisfit(
                        _first(codes == number),
                        f"{_show(uniques[number])} is not one of the allowed values "
                        f"({', '.join(sorted(allowed))})",
                    )
        merged, _ = pd.factorize(np.asarray(texts, dtype=object))
        merged = np.asarray(merged, dtype=np.int64)
        canon = np.where(codes >= 0, merged[np.maximum(codes, 0)] if len(merged) else -1, -1)
        return Prepared(canon=canon, present=~missing)

    def compare(
        self, prepared: Prepared, gold: np.ndarray, pred: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        correct = prepared.canon[gold] == prepared.canon[pred]
        return correct.astype(np.float64), correct


def normalize_text(text: str) -> str:
    """The comparison form of a text: NFKC-style folding, case folding, punctuation shapes in
    ASCII, zero-width characters dropped, whitespace runs collapsed to one space and trimmed."""
    if text.isascii():  # folding changes only case there
        return " ".join(text.lower().split())
    return " ".join(filter(None, (fold(word) for word in text.split())))


@dataclass(frozen=True)
class TextMatcher(LeafMatcher):
    """Texts: equal after ``normalize_text`` (``normalize=False``: as written); ``fuzzy=85``
    also accepts pairs whose RapidFuzz ``ratio`` (0-100) is at least 85."""

    normalize: bool = True
    fuzzy: float | None = None
    kind = "text"

    def __post_init__(self) -> None:
        if self.fuzzy is not None and not 0 < self.fuzzy <= 100:
            raise ConfigurationError(
                f"TextMatcher(fuzzy={self.fuzzy}): the RapidFuzz ratio threshold is in (0, 100]"
            )

    def prepare(self, values: np.ndarray) -> Prepared:
        missing = absent(values)
        codes, uniques = _factorize(values)
        texts: list[str] = []
        for number, value in enumerate(uniques):
            if isinstance(value, (str, int, float, bool)):  # noqa: UP038 (a tuple is faster)
                text = str(value)
                texts.append(normalize_text(text) if self.normalize else text)
            else:
                raise ValueMisfit(_first(codes == number), f"{_show(value)} is not a text")
        merged, merged_uniques = pd.factorize(np.asarray(texts, dtype=object))
        merged = np.asarray(merged, dtype=np.int64)
        canon = np.where(codes >= 0, merged[np.maximum(codes, 0)] if len(merged) else -1, -1)
        strings = np.asarray(merged_uniques, dtype=object)
        # a text that normalises to nothing ("", spaces) is no value
        empty = np.flatnonzero(strings == "")
        present = ~missing & (canon >= 0)
        if len(empty):
            present &= ~np.isin(canon, empty)
        return Prepared(canon=canon, present=present, texts=strings)

    def compare(
        self, prepared: Prepared, gold: np.ndarray, pred: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        g, p = prepared.canon[gold], prepared.canon[pred]
        equal = g == p
        if self.fuzzy is None:
            return equal.astype(np.float64), equal
        score = equal.astype(np.float64)
        differ = np.flatnonzero(~equal)
        if len(differ):
            from rapidfuzz import fuzz, process

            assert prepared.texts is not None
            ratios = process.cpdist(
                prepared.texts[g[differ]].tolist(),
                prepared.texts[p[differ]].tolist(),
                scorer=fuzz.ratio,
                dtype=np.float64,
            )
            score[differ] = np.asarray(ratios, dtype=np.float64) / 100.0
        return score, equal | (score * 100.0 >= self.fuzzy - 1e-9)


@dataclass(frozen=True)
class FunctionMatcher(LeafMatcher):
    """Your function per pair: ``fn(gold, pred)`` returns a bool or a score in [0, 1]; a pair is
    correct when its score is at least ``threshold``. Python per pair: slow on big frames."""

    fn: Callable[[Any, Any], bool | float]
    threshold: float = 1.0
    kind = "function"

    def prepare(self, values: np.ndarray) -> Prepared:
        return Prepared(canon=values, present=~absent(values))

    def compare(
        self, prepared: Prepared, gold: np.ndarray, pred: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        values = prepared.canon
        score = np.fromiter(
            (float(self.fn(values[g], values[p])) for g, p in zip(gold, pred, strict=True)),
            dtype=np.float64,
            count=len(gold),
        )
        return score, score >= self.threshold


#: ``ListMatcher``'s default threshold for items that are objects.
OBJECT_THRESHOLD = 0.5


@dataclass(frozen=True)
class ListMatcher:
    """Lists: items paired by optimal assignment on their similarity.

    ``threshold``: the least similarity for a pair to count as the same item. None (default):
    for items that are single values, the item matcher's verdict; for items that are objects,
    0.5 (the mean score of the item's fields that either side fills).
    """

    threshold: float | None = None
    kind = "list"

    def __post_init__(self) -> None:
        if self.threshold is not None and not 0 < self.threshold <= 1:
            raise ConfigurationError(f"ListMatcher(threshold={self.threshold}): use (0, 1]")
