"""Dates written other than in ISO: read from a value, and the Japanese era forms (pure).

``value_dates(value)`` reads a value that writes a date in words or another order (``"March 5,
2024"``, ``"5 March 2024"``, ``"05.03.2024"``, ``"2024年3月5日"``, ``"令和6年3月5日"``) and
returns the calendar dates it can mean (both readings of an ambiguous ``05/03/2024``), so that
``forms.date_forms`` can look for each of them in the text, ISO included. ``era_forms`` writes
a date in the Japanese era calendar (``令和6年3月5日``, ``令和元年5月1日``).

Libraries: ``dateparser`` reads the values (English, Chinese, Japanese month and day words and
orders; strict: a day, a month and a year are required), ``japanera`` knows the Japanese eras.
``dateparser`` costs about 1 ms a value (its first call loads its language data: about 0.25 s
to import and up to 0.3 s more on first use, measured in the grounding benchmark), which is too
slow to scan texts with it (``search_dates``: about 70 ms per 5,000 characters) but fine for
values: it runs only on values that look like a date (a year of four digits, or an era name,
with a month), once per distinct value (cached).
"""

from __future__ import annotations

import re
from datetime import date
from functools import lru_cache
from typing import Any

#: A value worth handing to dateparser: a 4-digit year (or an era year) and something that can be
#: a month (a word, a 1-2 digit number between separators, or 月).
_LOOKS_LIKE_DATE = re.compile(
    r"(?:(?<!\d)(?:1[5-9]|2[01])\d\d(?!\d)|元年|\d年)"
    r"|(?<!\d)\d{1,2}[./-]\d{1,2}[./-]\d{2,4}(?!\d)",
)
_MONTHISH = re.compile(
    r"(?i:\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?(?![a-z]))|月"
    r"|(?<!\d)\d{1,2}[./-]\d{1,2}(?!\d)|\d{4}[./-]\d{1,2}"
)
_NUMERIC_DMY = re.compile(r"^\s*(\d{1,2})([./-])(\d{1,2})\2(\d{4})\s*$")
_ERA = re.compile(r"^\s*(\S{2})(元|\d{1,2})年\s*(\d{1,2})月\s*(\d{1,2})日\s*$")


def looks_like_date(value: str) -> bool:
    """A cheap filter before ``value_dates`` (most values are not dates)."""
    return (
        len(value) <= 40
        and bool(_LOOKS_LIKE_DATE.search(value))
        and bool(_MONTHISH.search(value))
        and any(c.isdigit() for c in value)
    )


@lru_cache(maxsize=2048)
def value_dates(value: str) -> tuple[date, ...]:
    """The dates a non-ISO date value can mean (none when it is not a full date)."""
    if not looks_like_date(value):
        return ()
    found: list[date] = []
    if era := _era_date(value):
        return (era,)
    numeric = _NUMERIC_DMY.match(value)
    if numeric:
        first, second, year = int(numeric.group(1)), int(numeric.group(3)), int(numeric.group(4))
        for day, month in ((first, second), (second, first)):
            try:
                found.append(date(year, month, day))
            except ValueError:
                continue
        return tuple(dict.fromkeys(found))
    import dateparser

    parsed = dateparser.parse(
        value,
        languages=["en", "zh", "ja"],
        settings={"STRICT_PARSING": True, "REQUIRE_PARTS": ["day", "month", "year"]},
    )
    if parsed is not None:
        found.append(parsed.date())
    return tuple(found)


def _era_date(value: str) -> date | None:
    match = _ERA.match(value)
    if not match:
        return None
    from japanera import EraDate

    name = match.group(1)
    year = 1 if match.group(2) == "元" else int(match.group(2))
    month, day = int(match.group(3)), int(match.group(4))
    for era in _eras():
        if era.kanji == name and era.since is not None:
            try:
                found = date(era.since.year + year - 1, month, day)
            except ValueError:
                return None
            # the era must be the one in force that day
            if EraDate.from_date(found).era.kanji == name:
                return found
    return None


@lru_cache(maxsize=1)
def _eras() -> tuple[Any, ...]:
    from japanera import ERA_DATA_GENERAL

    return tuple(era for era in ERA_DATA_GENERAL if getattr(era, "since", None) is not None)


@lru_cache(maxsize=2048)
def era_forms(year: int, month: int, day: int) -> tuple[str, ...]:
    """``date`` in the Japanese era calendar: ``令和6年3月5日``, padded, and ``元年`` for year 1
    (only from the Meiji era on; none before, or for an impossible date)."""
    if year < 1868:
        return ()
    from japanera import EraDate

    try:
        when = date(year, month, day)
        era = EraDate.from_date(when).era
    except (ValueError, TypeError, AttributeError):
        return ()
    if era is None or not getattr(era, "kanji", None) or era.since is None:
        return ()
    relative = year - era.since.year + 1
    names = [str(relative)] + (["元"] if relative == 1 else [])
    forms = []
    for name in names:
        head = f"{era.kanji}{name}年"
        forms += [f"{head}{month}月{day}日", f"{head}{month:02d}月{day:02d}日"]
    return tuple(forms)
