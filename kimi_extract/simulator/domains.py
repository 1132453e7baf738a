"""The values a scalar schema node allows: numbers, strings and dict keys.

Each domain is read from a node's constraints (``found``: the keywords and the compiler's
``Constraints:`` words, merged by ``plans``; the tightest bound wins) and can say whether it is
empty (``problem``, the reason in the schema's words), whether a value belongs to it
(``contains``, as jsonschema judges it), how many distinct values it has (``count``, for
``uniqueItems``), list distinct values in a fixed order (``Numbers.examples``,
``Strings.listed``: what a unique array takes when its draws repeat), and draw one from a
seeded ``random.Random`` (``draw``).

Draws keep the simulator's habits: integers 0..99 unless bounded (then within 99 of the lower
bound), numbers with 2 decimals, strings of 1-3 words of the user text (spans of it when the
words are an ``extractive.Source``), formats written in full (date, date-time, time, email,
uri, uuid), patterns written from the regex (``patterns``).
"""

from __future__ import annotations

import itertools
import math
import random
import uuid
from collections.abc import Iterator
from fractions import Fraction
from typing import Any, TypeGuard

from .extractive import Source
from .patterns import Pattern

INF = math.inf
#: Bound names (the compiler's words) and the JSON Schema keyword each stands for.
LOWER = {"minimum": "minimum", "exclusive minimum": "exclusiveMinimum"}
UPPER = {"maximum": "maximum", "exclusive maximum": "exclusiveMaximum"}


def _number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _integral(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, float) and value.is_integer()


def is_multiple(value: int | float, step: int | float) -> bool:
    """jsonschema's ``multipleOf``: a float step divides in floating point (exactly when the
    quotient overflows); an integer step takes the remainder, of a float value too (so
    ``-5e-324`` is no multiple of 2, though it is of 2.0)."""
    try:
        if isinstance(step, float):
            quotient = value / step
            if not math.isfinite(quotient):
                return (Fraction(value) / Fraction(step)).denominator == 1
            return int(quotient) == quotient
        return value % step == 0
    except (OverflowError, ZeroDivisionError, ValueError):
        return False


class Numbers:
    """The numbers (``integer=True``: integers) within a node's bounds and ``multipleOf``."""

    def __init__(self, found: dict[str, Any], integer: bool) -> None:
        self.integer = integer
        self.found = found
        self.lo, self.lo_open = _tightest(found, LOWER, lower=True)
        self.hi, self.hi_open = _tightest(found, UPPER, lower=False)
        step = found.get("multiple of")
        self.step: int | float | None = step if _number(step) and step > 0 else None
        self.ilo: int | None = None
        self.ihi: int | None = None
        if integer:
            if self.lo is not None:
                self.ilo = math.floor(self.lo) + 1 if self.lo_open else math.ceil(self.lo)
            if self.hi is not None:
                self.ihi = math.ceil(self.hi) - 1 if self.hi_open else math.floor(self.hi)

    def bounds_text(self) -> str:
        names = [*LOWER, *UPPER, "multiple of"]
        shown = [f"{_KEYWORD.get(n, n)} {self.found[n]}" for n in names if n in self.found]
        return ", ".join(shown) or "no bounds"

    def problem(self) -> str | None:
        what = "integer" if self.integer else "number"
        if self.first() is None:
            return f"no {what} satisfies {self.bounds_text()}"
        return None

    def contains(self, value: Any) -> bool:
        if not _number(value) or (self.integer and not _integral(value)):
            return False
        if isinstance(value, float) and not math.isfinite(value):
            return False
        if self.lo is not None and (value < self.lo or (self.lo_open and value == self.lo)):
            return False
        if self.hi is not None and (value > self.hi or (self.hi_open and value == self.hi)):
            return False
        return self.step is None or is_multiple(value, self.step)

    def first(self) -> int | float | None:
        """The least value (or one near the lower bound), None when there is none."""
        if self.integer:
            candidates = self.integers(limit=1)
            return candidates[0] if candidates else None
        for value in self._number_candidates():
            if self.contains(value):
                return value
        return None

    def count(self) -> float:
        """How many distinct values (``INF`` for unbounded or huge ranges)."""
        if self.first() is None:
            return 0
        if not self.integer:
            if self.lo is not None and self.lo == self.hi:
                return 1
            if self.step is not None and _integral(self.step):  # whole multiples: integers
                return Numbers(self.found, integer=True).count()
            return INF
        if self.ilo is None or self.ihi is None:
            return INF
        step = self.step
        if step is None:
            return self.ihi - self.ilo + 1
        if _integral(step):
            size = int(step)
            return self.ihi // size - (-(-self.ilo // size)) + 1
        return INF  # a fractional step: many, for every use here

    def integers(self, limit: int) -> list[int]:
        """Up to ``limit`` allowed integers, from the lower bound up (or from 0 up, or, with
        only an upper bound, as many below it)."""
        low = self.ilo
        if low is None:
            size = int(self.step) if self.step is not None and _integral(self.step) else 1
            low = 0 if self.ihi is None else self.ihi - (limit - 1) * size
        high = self.ihi if self.ihi is not None else low + 10**9
        if low > high:
            return []
        step = self.step
        if step is None or (_integral(step) and step == 1):
            return list(range(low, min(high, low + limit - 1) + 1))
        found: list[int] = []
        if _integral(step):
            size = int(step)
            start = -(-low // size) * size
            for value in range(start, high + 1, size):
                found.append(value)
                if len(found) >= limit:
                    break
            return found
        for value in range(low, min(high, low + 10_000) + 1):  # a fractional step: try each
            if is_multiple(value, step):
                found.append(value)
                if len(found) >= limit:
                    break
        return found

    def examples(self, tries: int = 8192) -> Iterator[int | float]:
        """Distinct allowed values in a fixed order, out of at most ``tries`` candidates:
        integers from the lower bound up, steps of ``multipleOf``, or numbers halving the
        range (the middle, the quarters, the eighths...)."""
        first = self.first()
        if first is None:
            return
        if self.integer:
            yield from self.integers(tries)
            return
        candidates: Iterator[float]
        lo, hi, step = self.lo, self.hi, self.step
        downward = lo is None and hi is not None  # only an upper bound: from it down
        try:
            if step is not None:
                start = math.floor(hi / step) if downward else math.ceil((lo or first) / step)
                candidates = (k * step for k in itertools.count(start, -1 if downward else 1))
            elif lo is not None and hi is not None:
                width = hi - lo
                candidates = (
                    lo + width * odd / 2**level
                    for level in range(1, 64)
                    for odd in range(1, 2**level, 2)
                )
            elif downward:
                candidates = (hi - k for k in itertools.count(0))
            else:
                candidates = (first + k for k in itertools.count(1))
        except (OverflowError, ValueError, TypeError):
            candidates = iter(())
        seen: set[float] = set()
        for value in itertools.chain([first], itertools.islice(candidates, tries)):
            if value not in seen and self.contains(value):
                seen.add(value)
                yield value

    def _number_candidates(self) -> list[float]:
        lo = self.lo
        if lo is None:
            lo = 0.0 if self.hi is None or self.hi >= 0 else self.hi - 99
        hi = self.hi if self.hi is not None else max(lo, 100.0)
        out = [float(lo), float(hi), (lo + hi) / 2]
        if self.lo_open:
            out.insert(0, math.nextafter(float(lo), INF))
        if self.hi_open:
            out.append(math.nextafter(float(hi), -INF))
        if self.step is not None:
            try:
                k = math.ceil(lo / self.step)
                out = [k * self.step, (k + 1) * self.step, *out]
            except (OverflowError, ValueError):
                pass
        return out

    def draw(self, rng: random.Random) -> int | float | None:
        if self.integer:
            return self._draw_integer(rng)
        return self._draw_number(rng)

    def _draw_integer(self, rng: random.Random) -> int | None:
        low, high = self.ilo, self.ihi
        if low is not None and high is not None:
            if high - low > 1e9:  # a huge span: draw near the lower bound
                high = low + 99
        elif low is not None:
            high = low + 99
        elif high is not None:
            low = max(0, high - 99) if high >= 0 else high - 99
        else:
            low, high = 0, 99
        if low > high:
            return None
        if self.step is None:
            return rng.randint(low, high)
        choices = self.integers(limit=100)
        return rng.choice(choices) if choices else None

    def _draw_number(self, rng: random.Random) -> float | None:
        low = self.lo if self.lo is not None else None
        high = self.hi if self.hi is not None else None
        if low is not None and self.lo_open:
            low = low + 0.01
        if high is not None and self.hi_open:
            high = high - 0.01
        if low is not None and high is not None:
            span = (low, max(low, high))
        elif low is not None:
            span = (low, max(min(100.0, low + 99), low + 1))
        elif high is not None:
            span = (min(max(0.0, high - 99), high - 1), high)
        else:
            span = (0.0, 100.0)
        value = min(max(round(rng.uniform(*span), 2), span[0]), span[1])
        if self.step is not None:
            value = round(value / self.step) * self.step
        if self.contains(value):
            return value
        for candidate in self._number_candidates():
            if self.contains(candidate):
                return candidate
        return None


_KEYWORD = {**LOWER, **UPPER, "multiple of": "multipleOf"}


def _tightest(found: dict[str, Any], names: dict[str, str], lower: bool) -> tuple[Any, bool]:
    """(the tightest bound among ``names`` in ``found``, whether it is exclusive)."""
    best: Any = None
    exclusive = False
    for name in names:
        value = found.get(name)
        if not _number(value) or (isinstance(value, float) and not math.isfinite(value)):
            continue
        is_open = name.startswith("exclusive")
        if best is None or (value > best if lower else value < best):
            best, exclusive = value, is_open
        elif value == best and is_open:
            exclusive = True
    return best, exclusive


class Strings:
    """The strings within a node's length bounds and ``pattern``, written as ``format`` says."""

    def __init__(self, found: dict[str, Any]) -> None:
        low = found.get("min length", 0)
        high = found.get("max length")
        self.low = max(0, int(low)) if _number(low) else 0
        self.high = max(0, int(high)) if _number(high) else None
        self.fmt = found.get("format")
        self.past = bool(found.get("past"))
        self.future = bool(found.get("future"))
        self.naive = bool(found.get("naive"))
        text = found.get("pattern")
        self.pattern = Pattern.read(text) if isinstance(text, str) else None
        self._listed: tuple[tuple[str, ...], bool] | None = None

    def problem(self) -> str | None:
        if self.high is not None and self.low > self.high:
            return f"minLength {self.low} is greater than maxLength {self.high}"
        if self.pattern is not None:
            return self.pattern.problem(self.low, self.high)
        return None

    def contains(self, value: Any) -> bool:
        if not isinstance(value, str) or len(value) < self.low:
            return False
        if self.high is not None and len(value) > self.high:
            return False
        return self.pattern is None or self.pattern.fits(value)

    def count(self) -> float:
        """How many distinct strings (``INF`` when more than a listing holds)."""
        if self.pattern is None:
            if self.high == 0:
                return 1 if self.contains("") else 0
            return INF
        pattern = self.pattern
        if self.high is None and pattern.most is None:  # matches of any length: endless
            return INF
        if not (pattern.begins and pattern.ends) and (self.high or 0) > pattern.least:
            return INF  # room around a match for any character
        if not pattern.language(self.high, whole=True)[1]:
            return INF
        return len(self.listed()[0])

    def listed(self) -> tuple[tuple[str, ...], bool]:
        """(valid strings of the pattern's own listing, in a fixed order; whether they are all
        the valid strings). A pattern not anchored at both ends matches inside longer text, so
        it has them all only when ``maxLength`` leaves no room around its shortest match."""
        if self._listed is None:
            pattern = self.pattern
            if pattern is None:
                self._listed = ((), False)
                return self._listed
            strings, exact = pattern.language(self.high)
            candidates = list(strings)
            if pattern.newline:  # ``$`` matches before a final newline too
                candidates += [text + "\n" for text in strings]
            anchored = pattern.begins and pattern.ends
            if not anchored and (self.high is None or self.high > pattern.least):
                exact = False
            valid = tuple(dict.fromkeys(text for text in candidates if self.contains(text)))
            self._listed = (valid, exact)
        return self._listed

    def draw(self, rng: random.Random, words: list[str]) -> str:
        if self.pattern is not None:
            written = self.pattern.write(rng, self.low, self.high)
            if written is not None:
                return written
        text = self._text(rng, words)
        if len(text) < self.low:
            pieces = [text] if text else []
            size = len(text)
            while size < self.low:
                word = rng.choice(words)
                pieces.append(word)
                size += len(word) + 1
            text = " ".join(pieces)
        if self.high is not None and len(text) > self.high:
            text = text[: self.high]
        return text

    def _text(self, rng: random.Random, words: list[str]) -> str:
        fmt = self.fmt
        if fmt in ("date", "date-time"):
            century = "19" if self.past else "20"
            years = (90, 99) if self.past or self.future else (10, 29)
            year, month, date = rng.randint(*years), rng.randint(1, 12), rng.randint(1, 28)
            day = f"{century}{year}-{month:02d}-{date:02d}"
            if fmt == "date":
                return day
            zone = "" if self.naive else "Z"
            clock = f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
            return f"{day}T{clock}{zone}"
        if fmt == "time":
            return f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
        if fmt == "email":
            return f"{_slug(rng.choice(words))}@example.com"
        if fmt in ("uri", "url"):
            return f"https://example.com/{_slug(rng.choice(words))}"
        if fmt == "uuid":
            return str(uuid.UUID(int=rng.getrandbits(128), version=4))
        if isinstance(words, Source) and (drawn := words.draw(rng)) is not None:
            return drawn.value
        start = rng.randrange(len(words))
        return " ".join(words[start : start + rng.randint(1, 3)])


def _slug(word: str) -> str:
    slug = "".join(c for c in word.lower() if c.isascii() and c.isalnum())
    return slug or "user"


class Keys:
    """The keys of a ``dict[K, V]`` (an object with only ``additionalProperties``), from the
    compiler's words: ``keys: one of ...``, ``keys: integer values written as text``,
    ``keys: format ...``, ``keys match pattern: ...``, ``min/max key length``; else words."""

    def __init__(self, found: dict[str, Any]) -> None:
        self.choices: tuple[str, ...] | None = found.get("keys one of")
        self.kind = found.get("keys type")
        rules = {
            name: found[key]
            for name, key in (
                ("format", "keys format"),
                ("pattern", "keys pattern"),
                ("min length", "keys min length"),
                ("max length", "keys max length"),
            )
            if key in found
        }
        self.strings = Strings(rules) if rules else None

    @property
    def plain(self) -> bool:
        """Keys are words of the user text (a repeat can be made distinct)."""
        return self.choices is None and self.kind is None and self.strings is None

    def count(self) -> float:
        if self.choices is not None:
            return len(set(self.choices))
        if self.kind == "boolean":
            return 2
        if self.strings is not None:
            return self.strings.count()
        return INF

    def problem(self) -> str | None:
        return self.strings.problem() if self.strings is not None else None

    def draw(self, rng: random.Random, words: list[str]) -> str:
        if self.kind == "integer":
            return str(rng.randint(0, 99))
        if self.kind == "number":
            return f"{rng.uniform(0, 100):.2f}"
        if self.kind == "boolean":
            return rng.choice(("true", "false"))
        if self.strings is not None:
            return self.strings.draw(rng, words)
        return rng.choice(words)
