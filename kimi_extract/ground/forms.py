"""The forms a number or a date takes in text, so ``1200.5`` finds ``1,200.50``.

``surface_forms(value)`` lists the strings to look for, the value's own text first. A value is
read as a number when it is written like ``-1200.5`` / ``1200`` (how ``leaves_of`` writes numbers),
and as a date when it is an ISO date or date-time (``2024-03-05``, ``2024-03-05T14:30:00Z``).

Numbers (sign, thousands and decimal separators; the fraction padded to two places when it is
shorter): ``1200.5`` -> ``1200.5``, ``1200.50``, ``1,200.5``, ``1,200.50``, ``1.200,5``,
``1.200,50``, ``1'200.50``; an integer also as ``1200.00`` / ``1,200.00``. Spaces as thousands
separators (``1 200,50``) and full-width digits need no form of their own: the normalised match
drops spaces and applies NFKC. A negative value is also looked for as ``(1,200.50)``.

Dates (``2024-03-05``): ISO with ``-``, ``/`` or ``.``; day-first and month-first with ``/``,
``.`` or ``-`` (both readings of ``05/03/2024``, padded or not); English month names, full or
abbreviated, with or without an ordinal (``5 March 2024``, ``March 5, 2024``, ``5th Mar 2024``,
``05-Mar-2024``); CJK ``2024年3月5日`` (padded or not; full-width digits via NFKC) and Korean
``2024년 3월 5일``, and the Japanese era calendar (``令和6年3月5日``, ``令和元年``; ``dates``). Case
and spacing are left to the normalised match. A date-time is looked for as written, with a space
for ``T``, to the minute, then as its date alone (the span then covers the date).

``rewrite_forms(value)`` adds what a value written otherwise stands for (the normalised kind):
a date written in words or another order (``"March 5, 2024"`` -> every form of 2024-03-05,
ISO included; ``dates.value_dates``), a number in words or with a scale (``"three"``,
``"1.2 million"``, ``"120万"`` -> its digit forms; ``numbers.value_number``), and a person's name
in the other order (``"Stallman, Richard"`` <-> ``"Richard Stallman"``), and the value without
what its boundary added (a leading article, quotes or brackets, a final point: ``"the GNU
GPL."`` -> ``GNU GPL``).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from .dates import era_forms, value_dates
from .numbers import canonical, value_number

_NUMBER = re.compile(r"^([-+]?)(\d+)(?:\.(\d+))?$")
_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.\d+)?)?(.*))?$")
_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


def is_numeric(value: str) -> bool:
    """Whether ``value`` is read as a number or a date (digits decide its match boundaries)."""
    return bool(_NUMBER.match(value) or _DATE.match(value))


def surface_forms(value: str) -> list[str]:
    """The strings ``value`` may appear as in text, its own text first, without duplicates."""
    forms = [value]
    if match := _NUMBER.match(value):
        forms += _number_forms(match.group(1), match.group(2), match.group(3) or "")
    elif match := _DATE.match(value):
        forms += _datetime_forms(match)
    return list(dict.fromkeys(f for f in forms if f))


def _grouped(integer: str, separator: str) -> str:
    head = len(integer) % 3 or 3
    groups = [integer[:head]] + [integer[i : i + 3] for i in range(head, len(integer), 3)]
    return separator.join(groups)


def _number_forms(sign: str, integer: str, fraction: str) -> list[str]:
    try:
        Decimal(integer + "." + (fraction or "0"))
    except InvalidOperation:  # pragma: no cover - the regex admits only digits
        return []
    integer = integer.lstrip("0") or "0"
    fraction = fraction.rstrip("0")
    fractions = [fraction] if fraction else ["", "00"]
    if fraction and len(fraction) < 2:
        fractions.append(fraction.ljust(2, "0"))
    bodies: list[str] = []
    for part in fractions:
        for thousands, point in (("", "."), (",", "."), (".", ","), ("'", "."), ("", ",")):
            whole = _grouped(integer, thousands) if thousands else integer
            bodies.append(whole + (point + part if part else ""))
    if sign == "-":
        return [f"-{b}" for b in bodies] + [f"({b})" for b in bodies]
    return bodies


def _ordinal(day: int) -> str:
    if 10 <= day % 100 <= 20:
        return f"{day}th"
    return str(day) + {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")


def date_forms(year: int, month: int, day: int) -> list[str]:
    """The written forms of one calendar date (see the module docstring)."""
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return []
    y, m, d = f"{year:04d}", month, day
    forms = [f"{y}-{m:02d}-{d:02d}", f"{y}/{m:02d}/{d:02d}", f"{y}.{m:02d}.{d:02d}"]
    forms += [f"{y}/{m}/{d}", f"{y}-{m}-{d}", f"{y}.{m}.{d}"]
    forms += [f"{y}年{m}月{d}日", f"{y}年{m:02d}月{d:02d}日", f"{y}년 {m}월 {d}일"]
    full = _MONTHS[month - 1]
    names = [full, full[:3]] + (["Sept"] if month == 9 else [])
    for name in names:
        for day_text in (str(d), f"{d:02d}", _ordinal(d)):
            forms += [f"{day_text} {name} {y}", f"{name} {day_text}, {y}", f"{name} {day_text} {y}"]
        if len(name) < len(full):
            forms += [f"{d} {name}. {y}", f"{name}. {d}, {y}"]
        forms += [f"{d:02d}-{name}-{y}", f"{d}-{name}-{y}"]
    for first, second in ((d, m), (m, d)):
        for separator in ("/", ".", "-"):
            forms += [f"{first:02d}{separator}{second:02d}{separator}{y}"]
            forms += [f"{first}{separator}{second}{separator}{y}"]
    return forms + list(era_forms(year, month, day))


def _datetime_forms(match: re.Match[str]) -> list[str]:
    year, month, day = (int(match.group(i)) for i in (1, 2, 3))
    forms: list[str] = []
    if match.group(4) is not None:
        hour, minute, second = match.group(4), match.group(5), match.group(6)
        date = f"{match.group(1)}-{match.group(2)}-{match.group(3)}"
        if second is not None:
            forms.append(f"{date} {hour}:{minute}:{second}")
        forms.append(f"{date} {hour}:{minute}")
    return forms + date_forms(year, month, day)


#: What a value's boundary may add around the text's words: an article, quotes, brackets, a
#: final point or comma.
_EDGES = re.compile(
    r"^(?:(?:the|a|an)\s+|[\"'“‘「『（(\[]+)+|(?:[\"'”’」』）)\].,;:。、，]+)$", re.IGNORECASE
)
_NAME_WORD = r"[A-Z][a-z'.-]*"
_LAST_FIRST = re.compile(rf"^({_NAME_WORD}(?: {_NAME_WORD})?),\s*({_NAME_WORD}(?: {_NAME_WORD})?)$")
_FIRST_LAST = re.compile(rf"^({_NAME_WORD}(?: {_NAME_WORD})?) ({_NAME_WORD})$")


def rewrite_forms(value: str) -> tuple[list[str], Decimal | None]:
    """(other written forms of ``value``, the number it stands for when written in words or with
    a scale): see the module docstring. Empty for most values."""
    forms: list[str] = []
    number = value_number(value)
    if number is not None:
        digits = canonical(number)
        match = _NUMBER.match(digits)
        if match:
            forms += [digits, *_number_forms(match.group(1), match.group(2), match.group(3) or "")]
    elif not _DATE.match(value):
        for when in value_dates(value):
            forms += date_forms(when.year, when.month, when.day)
    if match := _LAST_FIRST.match(value):
        forms.append(f"{match.group(2)} {match.group(1)}")
    elif match := _FIRST_LAST.match(value):
        forms.append(f"{match.group(2)}, {match.group(1)}")
    core = _EDGES.sub("", value)
    if core != value and len(core.strip()) >= 2:
        forms.append(core)
    return [f for f in dict.fromkeys(forms) if f and f != value], number


# -- abbreviations ---------------------------------------------------------------------------------

_ACRONYM = re.compile(r"^[A-Z]{2,6}$")
#: The patterns of abbreviations (``abbreviation_pattern``) read at most this many characters
#: of a word (and a run of spaces whole, never backtracking into it: what follows it is no
#: space), so that a pass over the text is linear in it: a stretch of text is read by at most
#: the attempts starting in the ``WORD_CHARS`` characters before it, not, as in ``"A-" *
#: 50_000``, from each of its letters to its end.
WORD_CHARS = 40
_GAP = r"\s++"
_SMALL_WORDS = rf"(?:(?:of|and|the|for|de|du|des|der|für|&){_GAP})?"
#: The lower-case words an acronym leaves out (``Free Software Foundation`` -> ``FSF``,
#: ``Bank of America`` -> ``BA``); any other word (a negation) means no acronym.
_JOINERS = frozenset({"of", "and", "the", "for", "de", "du", "des", "der", "für", "&"})


def abbreviation_pattern(value: str) -> re.Pattern[str] | None:
    """A pattern for a value with an abbreviated word (``Found.``), an acronym (``FSF``), or
    whose capitalised words may be written as their acronym in the text; None otherwise."""
    words = value.split()
    if len(value) > 120 or not words:
        return None
    if len(words) == 1 and _ACRONYM.match(words[0]):
        letters = words[0]
        parts = [rf"{c}[\w-]{{0,{WORD_CHARS}}}" for c in letters]
        return re.compile(r"\b" + (_GAP + _SMALL_WORDS).join(parts) + r"\b")
    if any(w.endswith(".") and len(w) >= 3 and w[:-1].isalpha() for w in words):
        parts = [
            rf"{re.escape(w[:-1])}\w{{0,{WORD_CHARS}}}\.?"
            if w.endswith(".") and w[:-1].isalpha()
            else re.escape(w)
            for w in words
        ]
        return re.compile(_GAP.join(parts))
    return None


def acronym_of(value: str) -> str | None:
    """The acronym of a value of capitalised words (``Free Software Foundation`` -> ``FSF``;
    ``_JOINERS`` aside), or None."""
    words = value.split()
    if len(words) < 2 or len(value) > 120:
        return None
    capitals = [w for w in words if w[:1].isupper() and w.isalpha()]
    others = [w for w in words if not (w[:1].isupper() and w.isalpha())]
    if len(capitals) >= 2 and all(w.lower() in _JOINERS for w in others):
        return "".join(w[0] for w in capitals)
    return None
