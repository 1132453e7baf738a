"""Strings for a JSON Schema ``pattern``, and the lengths a pattern allows.

Python's own regex parser (``re._parser``, what ``re`` and jsonschema's ``pattern`` use) reads
the pattern. ``Pattern.write`` writes literals, classes, ``.``, ``\\d\\w\\s``, groups,
alternation and repeats; anchors and lookarounds are left to the final ``re.search`` check,
which retries a few draws. It aims at a length range: repeats run from their minimum up to a
slack that can reach ``minLength``, and a match shorter than ``minLength`` is padded where the
pattern is not anchored. ``Pattern.widths`` gives the least and most characters a match can
have, so a ``minLength``/``maxLength`` no match can meet is known before drawing.

Backreferences, conditionals and negated classes with no candidate character are not written
(``write`` returns None); lookarounds are only checked, so a pattern that needs them may miss.

``Pattern.language`` lists the strings the regex matches in full, up to a length, in a fixed
order, and says whether that is all of them (no class as wide as ``.`` or ``\\d``, no flags, no
unbounded repeat cut short): a unique array of pattern strings knows how many distinct ones
exist, and finds them.
"""

from __future__ import annotations

import importlib
import random
import re
import string
from typing import Any

_sre_parse: Any = importlib.import_module("re._parser")  # the parser ``re`` itself uses
_TRIES = 16
_CATEGORY_CHARS = {
    "CATEGORY_DIGIT": string.digits,
    "CATEGORY_NOT_DIGIT": string.ascii_letters,
    "CATEGORY_SPACE": " ",
    "CATEGORY_NOT_SPACE": string.ascii_letters + string.digits,
    "CATEGORY_WORD": string.ascii_letters + string.digits + "_",
    "CATEGORY_NOT_WORD": "-. ",
}
_ANY_CHARS = string.ascii_letters + string.digits
_BEGIN = frozenset({"AT_BEGINNING", "AT_BEGINNING_STRING"})
_END = frozenset({"AT_END", "AT_END_STRING"})
#: ``Pattern.language`` lists at most this many strings.
LANGUAGE_CAP = 512
#: Stand-ins, in a listing, for a character of a class as wide as ``.``, ``\w``, ``[^a]``
#: (``fits`` keeps those the class takes).
_WIDE_CHARS = string.ascii_letters + string.digits + "_- ."
#: ... and for categories: \d takes other scripts' digits too.
_WIDE_CATEGORY = {
    "CATEGORY_DIGIT": string.digits + "٠١٢٣٤٥٦٧٨٩०१२३४५६७८९",
    "CATEGORY_SPACE": " \t\n\r\f\v",
}
#: ``getwidth`` caps an unbounded width at 2**64.
_UNBOUNDED = 1 << 63
#: A written match never exceeds this many characters (a hostile ``a{1000000}``).
MAX_WRITTEN = 100_000


class _Unsupported(Exception):
    """A regex construct the writer does not write (backreferences, ...)."""


class Pattern:
    """One compiled ``pattern`` keyword: its widths, its anchors, and a writer."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.compiled = re.compile(text)
        self.parsed = list(_sre_parse.parse(text))
        least, most = _sre_parse.parse(text).getwidth()
        self.least = int(least)
        items = self.parsed
        self.begins = bool(items) and str(items[0][0]) == "AT" and str(items[0][1]) in _BEGIN
        self.ends = bool(items) and str(items[-1][0]) == "AT" and str(items[-1][1]) in _END
        # unanchored, a match sits inside any longer text: no most
        self.most: int | None = int(most) if self.begins and self.ends else None
        if self.most is not None and self.most >= _UNBOUNDED:
            self.most = None
        #: ``$`` (not ``\Z``) also matches before a final newline: ``^ab$`` takes "ab\n"
        self.newline = self.ends and str(items[-1][1]) == "AT_END"
        self.flagged = bool(self.compiled.flags & ~re.UNICODE)  # (?i), (?m)...
        self._languages: dict[tuple[int | None, bool], tuple[tuple[str, ...], bool]] = {}

    @classmethod
    def read(cls, text: str) -> Pattern | None:
        """The pattern, or None when Python cannot parse it (jsonschema could not check it)."""
        try:
            return cls(text)
        except (re.error, RecursionError, OverflowError, ValueError, TypeError):
            return None

    def problem(self, low: int, high: int | None) -> str | None:
        """Why no string of ``low``..``high`` characters matches, if the widths show it."""
        if high is not None and self.least > high:
            return f"pattern {self.text!r} needs {self.least} characters or more, maxLength {high}"
        if self.most is not None and self.most < low:
            return f"pattern {self.text!r} allows {self.most} characters or fewer, minLength {low}"
        return None

    def fits(self, text: str) -> bool:
        return self.compiled.search(text) is not None

    def write(self, rng: random.Random, low: int, high: int | None) -> str | None:
        """A string that ``re.search`` finds the pattern in, of ``low``..``high`` characters if
        the draws get there; else the last match, else None.

        Free draws first (repeats up to a few past their minimum); then draws aimed at a length
        between the bounds: every repeat at its minimum, the first repeats grown until the
        match is long enough.
        """
        slack = max(3, min(low, MAX_WRITTEN))
        bounded = low > 0 or high is not None
        matched: str | None = None
        for attempt in range(_TRIES):
            out: list[str] = []
            try:
                if attempt < _TRIES // 4 or not bounded:
                    _write(self.parsed, rng, out, 0, slack, [0])
                else:
                    shortest: list[str] = []
                    _write(self.parsed, rng, shortest, 0, 0, [0])
                    top = low + 3 if high is None else max(low, min(high, low + 3))
                    wanted = rng.randint(low, top) - len("".join(shortest))
                    _write(self.parsed, rng, out, 0, 0, [wanted])
            except (_Unsupported, RecursionError):
                return matched
            text = self.pad("".join(out), low)
            if self.fits(text):
                if len(text) >= low and (high is None or len(text) <= high):
                    return text
                matched = text
        return matched

    def language(self, high: int | None, whole: bool = False) -> tuple[tuple[str, ...], bool]:
        """(strings the regex matches in full, of ``high`` characters at most (a few past the
        shortest when None), at most ``LANGUAGE_CAP``, in a fixed order; whether that is every
        one). Anchors and lookarounds are not applied: ``fits`` tells which strings match.
        ``whole``: stop as soon as the listing cannot be complete (``((), False)``)."""
        known = self._languages.get((high, whole))
        if known is None:
            bound = high if high is not None else min(self.least, MAX_WRITTEN) + 8
            lister = _Lister(bound, whole)
            try:
                found = tuple(lister.items(self.parsed, 0))
                exact = lister.exact and not self.flagged and (high is not None or not lister.cut)
            except (_Unsupported, _Partial, RecursionError):
                found, exact = (), False
            known = self._languages[(high, whole)] = (found, exact)
            if exact:
                self._languages[(high, not whole)] = known
        return known

    def pad(self, text: str, low: int) -> str:
        """``text`` lengthened to ``low`` characters where the pattern is not anchored."""
        missing = low - len(text)
        if missing <= 0:
            return text
        if not self.ends:
            return text + "a" * missing
        if not self.begins:
            return "a" * missing + text
        return text


def _write(
    items: list[Any], rng: random.Random, out: list[str], depth: int, slack: int, want: list[int]
) -> None:
    """Write one match of parsed ``items`` into ``out``: each repeat ``least`` times plus up to
    ``slack`` more at random, plus more while ``want[0]`` (characters still wanted) is above 0."""
    if depth > 50 or len(out) > MAX_WRITTEN:
        raise _Unsupported("too deep or too long")
    for op, argument in items:
        name = str(op)
        if name == "LITERAL":
            out.append(chr(argument))
        elif name == "NOT_LITERAL":
            out.append(next(c for c in _ANY_CHARS if ord(c) != argument))
        elif name == "ANY":
            out.append(rng.choice(_ANY_CHARS))
        elif name == "IN":
            out.append(_class_char(argument, rng))
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            least, most, inner = argument
            top = least + slack if most == _sre_parse.MAXREPEAT else min(most, least + slack)
            count = rng.randint(least, max(least, top))
            for _ in range(count):
                _write(list(inner), rng, out, depth + 1, slack, want)
            limit = MAX_WRITTEN if most == _sre_parse.MAXREPEAT else most
            while want[0] > 0 and count < limit and len(out) <= MAX_WRITTEN:
                before = len(out)  # every piece is one character
                _write(list(inner), rng, out, depth + 1, slack, want)
                grown = len(out) - before
                if grown <= 0:
                    break
                want[0] -= grown
                count += 1
        elif name == "SUBPATTERN":
            _write(list(argument[-1]), rng, out, depth + 1, slack, want)
        elif name == "ATOMIC_GROUP":
            _write(list(argument), rng, out, depth + 1, slack, want)
        elif name == "BRANCH":
            _write(list(rng.choice(argument[1])), rng, out, depth + 1, slack, want)
        elif name == "CATEGORY":
            out.append(rng.choice(_CATEGORY_CHARS.get(str(argument), "a")))
        elif name not in ("AT", "ASSERT", "ASSERT_NOT"):
            raise _Unsupported(name)


def _class_char(members: list[Any], rng: random.Random) -> str:
    """A character of a ``[...]`` class (for a negated class, the first candidate outside it)."""
    negated = bool(members) and str(members[0][0]) == "NEGATE"
    if negated:
        for candidate in _ANY_CHARS + "-_ .":
            if not _in_class(candidate, members[1:]):
                return candidate
        raise _Unsupported("negated class")
    op, argument = rng.choice(members)
    name = str(op)
    if name == "LITERAL":
        return chr(argument)
    if name == "RANGE":
        return chr(rng.randint(argument[0], argument[1]))
    if name == "CATEGORY":
        return rng.choice(_CATEGORY_CHARS.get(str(argument), "a"))
    raise _Unsupported(name)


def _in_class(char: str, members: list[Any]) -> bool:
    for op, argument in members:
        name = str(op)
        if name == "LITERAL" and ord(char) == argument:
            return True
        if name == "RANGE" and argument[0] <= ord(char) <= argument[1]:
            return True
        if name == "CATEGORY" and char in _CATEGORY_CHARS.get(str(argument), ""):
            return True
    return False


class _Partial(Exception):
    """A listing asked to be whole cannot be."""


class _Lister:
    """The strings of parsed regex items up to ``bound`` characters (``Pattern.language``)."""

    def __init__(self, bound: int, whole: bool) -> None:
        self.bound = bound
        self.whole = whole
        self.exact = True  # every string listed so far
        self.cut = False  # a string was left out for being longer than ``bound``

    def partial(self) -> None:
        self.exact = False
        if self.whole:
            raise _Partial

    def join(self, heads: dict[str, None], tails: dict[str, None], bound: int) -> dict[str, None]:
        out: dict[str, None] = {}
        for head in heads:
            for tail in tails:
                if len(head) + len(tail) > bound:
                    self.cut = True
                    continue
                if len(out) >= LANGUAGE_CAP:
                    self.partial()
                    return out
                out[head + tail] = None
        return out

    def wide(self, category: str = "") -> dict[str, None]:
        self.partial()
        return dict.fromkeys(_WIDE_CATEGORY.get(category, _WIDE_CHARS))

    def items(self, items: list[Any], depth: int, bound: int | None = None) -> dict[str, None]:
        """The strings of a sequence: each item gets the length the others leave it."""
        if depth > 50:
            raise _Unsupported("too deep")
        bound = self.bound if bound is None else bound
        leasts = [_least(op, argument) for op, argument in items]
        total = sum(leasts)
        found: dict[str, None] = {"": None}
        for (op, argument), least in zip(items, leasts, strict=True):
            room = bound - (total - least)
            found = self.join(found, self.item(str(op), argument, depth, room), bound)
            if not found:
                break
        return found

    def item(self, name: str, argument: Any, depth: int, bound: int) -> dict[str, None]:
        if bound < 0:
            self.cut = True
            return {}
        if name == "LITERAL":
            return {chr(argument): None}
        if name in ("NOT_LITERAL", "ANY", "CATEGORY"):
            return self.wide(str(argument) if name == "CATEGORY" else "")
        if name == "IN":
            return self.members(argument)
        if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            least, most, inner = argument
            return self.repeat(least, most, self.items(list(inner), depth + 1, bound), bound)
        if name == "SUBPATTERN":
            if argument[1] or argument[2]:  # (?i:...) and other local flags
                self.partial()
            return self.items(list(argument[-1]), depth + 1, bound)
        if name == "ATOMIC_GROUP":
            return self.items(list(argument), depth + 1, bound)
        if name == "BRANCH":
            out: dict[str, None] = {}
            for branch in argument[1]:
                out.update(self.items(list(branch), depth + 1, bound))
                if len(out) > LANGUAGE_CAP:
                    self.partial()
                    return dict.fromkeys(list(out)[:LANGUAGE_CAP])
            return out
        if name in ("AT", "ASSERT", "ASSERT_NOT"):  # they only narrow: ``fits`` applies them
            return {"": None}
        raise _Unsupported(name)

    def members(self, members: list[Any]) -> dict[str, None]:
        if members and str(members[0][0]) == "NEGATE":
            return self.wide()
        out: dict[str, None] = {}
        for op, argument in members:
            name = str(op)
            if name == "LITERAL":
                out[chr(argument)] = None
            elif name == "RANGE":
                low, high = argument
                if high - low >= LANGUAGE_CAP:
                    self.partial()
                    high = low + LANGUAGE_CAP - 1
                out.update(dict.fromkeys(map(chr, range(low, high + 1))))
            else:  # a category: \d, \w...
                out.update(self.wide(str(argument)))
        return out

    def repeat(self, least: int, most: int, inner: dict[str, None], bound: int) -> dict[str, None]:
        level: dict[str, None] = {"": None}
        for _ in range(least):
            level = self.join(level, inner, bound)
            if not level:
                return level
        found = dict(level)
        count = least
        while most == _sre_parse.MAXREPEAT or count < most:
            level = self.join(level, inner, bound)
            fresh = [text for text in level if text not in found]
            if not fresh:
                break
            found.update(dict.fromkeys(fresh))
            count += 1
            if len(found) > LANGUAGE_CAP:
                self.partial()
                return dict.fromkeys(list(found)[:LANGUAGE_CAP])
        return found


def _least(op: Any, argument: Any) -> int:
    """The fewest characters one parsed regex item matches."""
    name = str(op)
    if name in ("LITERAL", "NOT_LITERAL", "ANY", "IN", "CATEGORY"):
        return 1
    if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
        return int(argument[0]) * sum(_least(*item) for item in argument[2])
    if name == "SUBPATTERN":
        return sum(_least(*item) for item in argument[-1])
    if name == "ATOMIC_GROUP":
        return sum(_least(*item) for item in argument)
    if name == "BRANCH":
        return min((sum(_least(*item) for item in branch) for branch in argument[1]), default=0)
    return 0
