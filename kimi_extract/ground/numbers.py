"""Numbers written in words or with a scale, in English, Chinese and Japanese (pure).

``value_number(value)`` reads a value that is a number written otherwise than in digits:
``"three"``, ``"twenty-one"``, ``"三"``, ``"一百二十万"``, ``"1.2 million"``, ``"120万"``,
``"3.5k"``. ``mentions(text)`` lists where a text writes a number that way, with its value, so a
value ``1200000`` (or ``"1.2 million"``) finds ``120万`` and ``"3"`` finds ``three``. Reading is
done by maintained libraries: ``text2num`` (English words and scale words, e.g. ``million``) and
``cn2an`` (Chinese and Japanese numerals, ``万`` / ``亿`` / ``億``); this module only finds the
candidate runs (regular expressions) and multiplies a digit number by its scale.

A single Chinese or Japanese numeral character (``一``, ``三``) is read as a number only when a
counter follows it (``三个``, ``三つ``, ``一年``): alone it is mostly part of a word (``统一``).

What ``mentions`` costs: three passes of regular expressions over the text, each linear in it
(every match attempt starts at a word's or a digit run's first character and no quantifier
backtracks more than the run it is in), and the runs it finds handed to the readers. A run
longer than ``MAX_RUN`` characters is not read: no number is written that long, and the readers
are not linear in what they are given (``cn2an`` on 40,000 numerals takes seconds). ``count``
is told the characters of each pass and of each run read (``work.Work.scan``).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from functools import lru_cache

_EN_NUMBER_WORDS = (
    "zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|"
    "fifteen|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|"
    "eighty|ninety|hundred|thousand|million|billion|trillion"
)
_EN_SCALES = "thousand|million|billion|trillion"
_CJK_NUMERALS = "〇零一二两兩三四五六七八九十百千万萬亿億壹贰貳叁參肆伍陆陸柒捌玖拾佰仟"
_CJK_SCALES = "万萬亿億"
#: Characters that follow a single numeral character when it counts something.
_COUNTERS = frozenset(
    "个個人年月日天次种種条條项項名位本件台章节節倍点點つ回枚冊匹番歳岁元円号號级級层層行列页頁分秒時时週周"
)
#: Runs (of number words, of numerals, of digits and separators) longer than this are not read.
MAX_RUN = 80
# Each pattern starts with a character class (the first letters of the words; a digit), which
# the regular expression engine scans for quickly; the class and the lookbehind after it say
# no more than a word boundary (the number's start) would.
_WORD_RUN = re.compile(
    rf"(?=[zotfsenhbm])\b(?:{_EN_NUMBER_WORDS})(?:(?:[\s-]+|\s+and\s+)(?:{_EN_NUMBER_WORDS}))*\b",
    re.IGNORECASE,
)
_DIGIT_SCALE = re.compile(
    rf"(\d(?<![0-9A-Za-z.,]\d)\d*(?:[.,]\d+)*)\s?"
    rf"(?:({_EN_SCALES})\b|([{_CJK_SCALES}])|(k|m|bn)\b)",
    re.IGNORECASE,
)
_CJK_RUN = re.compile(rf"[{_CJK_NUMERALS}]+")
_DIGITS = re.compile(r"^\d+(?:[.,]\d+)*$")


@lru_cache(maxsize=4096)
def _english(words: str) -> Decimal | None:
    from text_to_num import text2num

    try:
        return Decimal(text2num(re.sub(r"\s+", " ", words.lower().replace("-", " ")), "en"))
    except (ValueError, InvalidOperation):
        return None


@lru_cache(maxsize=4096)
def _chinese(numerals: str) -> Decimal | None:
    import cn2an

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return Decimal(str(cn2an.cn2an(numerals.replace("萬", "万"), "normal")))
        except (ValueError, TypeError, KeyError, IndexError, InvalidOperation):
            return None


def _digits(text: str) -> Decimal | None:
    """``1,200.5`` / ``1200,5`` -> Decimal (a comma before exactly three digits groups)."""
    if not _DIGITS.match(text):
        return None
    if re.search(r",\d{3}(?!\d)", text) or text.count(",") > 1:
        text = text.replace(",", "")
    else:
        text = text.replace(",", ".")
    try:
        return Decimal(text)
    except InvalidOperation:
        return None


def _scaled(number: str, english: str | None, cjk: str | None, short: str | None) -> Decimal | None:
    base = _digits(number)
    if base is None:
        return None
    if english:
        scale = _english(english)
    elif cjk:
        scale = _chinese("一" + cjk)
    else:
        scale = {"k": Decimal(1000), "m": Decimal(10**6), "bn": Decimal(10**9)}.get(
            (short or "").lower()
        )
    return None if scale is None else base * scale


def value_number(value: str) -> Decimal | None:
    """The number a value written in words or with a scale stands for, else None (module
    docstring); plain digit numbers are ``forms``' business and give None here."""
    text = value.strip()
    if not text or len(text) > MAX_RUN:
        return None
    match = _DIGIT_SCALE.fullmatch(text)
    if match:
        return _scaled(*match.groups())
    if _WORD_RUN.fullmatch(text):
        return _english(text)
    if _CJK_RUN.fullmatch(text):
        return _chinese(text)
    return None


def canonical(number: Decimal) -> str:
    """A number as ``leaves_of`` writes one: digits, a point, no exponent, no trailing zeros."""
    text = format(number.normalize(), "f")
    return text


def mentions(
    text: str, count: Callable[[int], None] | None = None
) -> list[tuple[int, int, Decimal]]:
    """Where ``text`` writes a number in words or with a scale: ``(start, end, value)``.
    ``count``: told the characters read (module docstring)."""
    count = count if count is not None else (lambda chars: None)
    found: list[tuple[int, int, Decimal]] = []
    count(len(text))
    for match in _DIGIT_SCALE.finditer(text):
        if match.end() - match.start() > MAX_RUN:
            continue
        count(match.end() - match.start())
        number = _scaled(*match.groups())
        if number:  # (not "0 million")
            found.append((match.start(), match.end(), number))
    taken = {i for start, end, _ in found for i in range(start, end)}
    count(len(text))
    for match in _WORD_RUN.finditer(text):
        if match.start() in taken or match.end() - match.start() > MAX_RUN:
            continue
        count(match.end() - match.start())
        number = _english(match.group())
        if number is not None:
            found.append((match.start(), match.end(), number))
    count(len(text))
    for match in _CJK_RUN.finditer(text):
        run = match.group()
        after = text[match.end()] if match.end() < len(text) else ""
        if len(run) == 1 and after not in _COUNTERS or len(run) > MAX_RUN:
            continue
        count(len(run))
        number = _chinese(run)
        if number is not None:
            found.append((match.start(), match.end(), number))
    found.sort()
    return found
