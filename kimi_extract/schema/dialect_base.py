"""Kimi's schema dialect, the parts its passes share: problems, paths, keyword sets.

See ``dialect`` (the checker), ``dialect_keywords`` (walle's keyword validators) and
``dialect_refs`` (walle's reference pass). ``_run`` drives recursion written as generators on an
explicit stack, so the rules that walle writes recursively never raise ``RecursionError``.
"""

from __future__ import annotations

import re
from collections.abc import Generator
from typing import Any, TypeVar

JSON_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})

_COMMON = frozenset({"description", "title"})  # allowed beside $ref / anyOf
_ROOT_ONLY = frozenset({"$defs", "$id"})

Path = tuple[str, ...]
#: walle's messages print an anyOf branch's path part ``anyOf{i}`` as ``anyOf``.
_BRANCH_INDEX = re.compile(r"anyOf\{[^}]+\}")


class _Unparsable(Exception):
    """walle cannot decode the schema's JSON text (a message not tied to a path)."""


class _Problem(Exception):
    def __init__(self, path: Path, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message

    def text(self) -> str:
        if not self.path:
            return f"At path 'root': {self.message}"
        where = _BRANCH_INDEX.sub("anyOf", ".".join(self.path))
        return f"At path '{where}': {self.message}"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


_T = TypeVar("_T")
#: A recursive function written as a generator: it yields the generator of each nested call
#: and receives that call's result (``_run`` drives it).
_Recursion = Generator["_Recursion[Any]", Any, _T]


def _run(call: _Recursion[_T]) -> _T:
    """Run a generator-coded recursion on an explicit stack (no Python recursion).

    An exception raised by any level propagates out, as it would through real recursion.
    """
    stack: list[_Recursion[Any]] = [call]
    result: Any = None
    while True:
        try:
            nested = stack[-1].send(result)
        except StopIteration as stop:
            stack.pop()
            if not stack:
                return stop.value
            result = stop.value
            continue
        stack.append(nested)
        result = None


class _Pass:
    """What every part of a validation run reads (set by ``dialect._Walle``)."""

    root: Any
    ultra: bool
    refs: dict[str, None]

    def fail(self, path: Path, message: str) -> _Problem:
        return _Problem(path, message)

    def conflicts(self, outer: set[str], inner: dict[str, Any]) -> list[str]:
        """Keywords on both levels; description/title count only at ultra."""
        return sorted(k for k in inner if k in outer and (self.ultra or k not in _COMMON))
