"""A schema as Go's ``encoding/json`` sees it: what walle decodes, measures and prints.

Moonshot's validator (MoonshotAI/walle) is Go. It decodes the schema's JSON text into Go values
(every number a ``float64``), measures the schema as the bytes of ``json.Marshal`` of those
values, and prints values in messages with ``%v``. A Python schema differs from that view in
ways that decide verdicts at the limits:

- numbers: Python writes ``1e-05``, ``1e+16``, ``-0.0`` and integers of any length; Go writes
  ``0.00001``, ``10000000000000000``, ``-0``, and an integer as the ``float64`` nearest it
  (``1e+21`` from 21 zeros). :func:`go_number` is Go's ``floatEncoder``: ``strconv.FormatFloat``
  with the shortest digits, format ``'e'`` below 1e-6 and from 1e21 (else ``'f'``), the
  exponent at least two digits except that ``e-0X`` is written ``e-X``;
- decoding: an integer beyond ``float64``'s range, ``NaN`` or an infinity is not a Go number,
  and Go's decoder stops at a nesting of :data:`MAX_NESTING` objects and arrays
  (:func:`decode_problem` reports both as walle does, without the byte offset);
- strings: Go escapes ``<``, ``>``, ``&``, U+2028 and U+2029 as ``\\uXXXX`` and writes a lone
  surrogate as U+FFFD (3 bytes).

Every function here is iterative, so no schema, however deep, raises ``RecursionError``.
Checked against walle's own build (``python/walle/lib/libwalle.so``, Go 1.23): 323 numbers and
13 strings placed at the 120,000-byte boundary, judged alike.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any

__all__ = ["MAX_NESTING", "decode_problem", "go_number", "go_value", "schema_size"]

#: Go's ``encoding/json`` scanner: at most this many objects and arrays open at once
#: (``maxNestingDepth``); walle refuses a deeper schema as unparsable.
MAX_NESTING = 10_000
_GO_E_BELOW = 1e-6
_GO_E_FROM = 1e21


def go_number(value: int | float) -> str:
    """``value`` as Go's ``json.Marshal`` writes the ``float64`` it decodes to.

    Raises ``OverflowError`` for an integer beyond ``float64`` (see :func:`decode_problem`).
    NaN and infinities, which JSON cannot write (Go's encoder refuses them), come back as Go
    prints them (``NaN``, ``+Inf``, ``-Inf``).
    """
    number = float(value)
    if not math.isfinite(number):
        return _go_float(number)
    if number == 0:
        return "-0" if math.copysign(1.0, number) < 0 else "0"
    sign = "-" if number < 0 else ""
    digits, point = _shortest_digits(number)
    magnitude = abs(number)
    if magnitude < _GO_E_BELOW or magnitude >= _GO_E_FROM:
        power = point - 1
        mantissa = digits[0] + (f".{digits[1:]}" if len(digits) > 1 else "")
        exponent = f"{abs(power):02d}"
        if power < 0 and exponent.startswith("0"):  # Go cleans e-07 up to e-7
            exponent = exponent[1:]
        return f"{sign}{mantissa}e{'-' if power < 0 else '+'}{exponent}"
    return sign + _positional(digits, point)


def _shortest_digits(number: float) -> tuple[str, int]:
    """(the shortest round-trip digits of ``|number|``, where the decimal point falls in them).

    Python's ``repr`` and Go's ``FormatFloat(.., -1, 64)`` both pick the shortest digits that
    read back to the same float64, so the digits agree; only their layout differs.
    """
    _, digit_tuple, exponent = Decimal(repr(abs(number))).normalize().as_tuple()
    assert isinstance(exponent, int)
    digits = "".join(map(str, digit_tuple))
    return digits, len(digits) + exponent


def _positional(digits: str, point: int) -> str:
    if point <= 0:
        return f"0.{'0' * -point}{digits}"
    if point >= len(digits):
        return digits + "0" * (point - len(digits))
    return f"{digits[:point]}.{digits[point:]}"


def go_value(value: Any) -> str:
    """A JSON value as Go's ``%v`` prints what ``encoding/json`` decoded (walle's messages).

    Iterative: an enum value nested thousands of lists deep prints without recursion.
    """
    out: list[str] = []
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Text):
            out.append(item.text)
        elif item is None:
            out.append("<nil>")
        elif isinstance(item, bool):
            out.append("true" if item else "false")
        elif isinstance(item, int | float):
            out.append(_go_float(item))
        elif isinstance(item, list):
            stack.append(_Text("]"))
            for index in range(len(item) - 1, -1, -1):
                stack.append(item[index])
                if index:
                    stack.append(_Text(" "))
            stack.append(_Text("["))
        elif isinstance(item, dict):
            stack.append(_Text("]"))
            pairs = sorted(item.items())
            for index in range(len(pairs) - 1, -1, -1):
                key, sub = pairs[index]
                stack.append(sub)
                stack.append(_Text(f"{key}:"))
                if index:
                    stack.append(_Text(" "))
            stack.append(_Text("map["))
        else:
            out.append(str(item))
    return "".join(out)


class _Text:
    """Literal text on :func:`go_value`'s stack (distinct from a string value)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _go_float(value: int | float) -> str:
    """Go's ``%v`` of a float64 (``%g``, shortest): exponent form below 1e-4 or from 1e6."""
    try:
        number = float(value)
    except OverflowError:
        return str(value)
    if not math.isfinite(number):
        return "+Inf" if number > 0 else ("-Inf" if number < 0 else "NaN")
    if number == 0:
        return "-0" if math.copysign(1, number) < 0 else "0"
    digits, point = _shortest_digits(number)
    power = point - 1
    prefix = "-" if number < 0 else ""
    if power < -4 or power >= 6:
        mantissa = digits[0] + (f".{digits[1:]}" if len(digits) > 1 else "")
        return f"{prefix}{mantissa}e{'-' if power < 0 else '+'}{abs(power):02d}"
    return prefix + _positional(digits, point)


def schema_size(schema: Any) -> int:
    """The schema's size as walle measures it: bytes of Go's compact ``json.Marshal`` output.

    Numbers count as :func:`go_number` writes them (an integer beyond ``float64`` or a NaN as
    its Python text: such a schema is refused before its size matters). Iterative.
    """
    total = 0
    stack: list[Any] = [schema]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            total += 2 + max(len(value) - 1, 0) + len(value)  # braces, commas, colons
            for key, item in value.items():
                total += _string_size(str(key))
                stack.append(item)
        elif isinstance(value, list | tuple):
            total += 2 + max(len(value) - 1, 0)
            stack.extend(value)
        elif isinstance(value, str):
            total += _string_size(value)
        elif value is None or isinstance(value, bool):
            total += 4 if value is None or value is True else 5
        elif isinstance(value, int | float):
            try:
                total += len(go_number(value))
            except OverflowError:
                total += len(str(value))
        else:
            total += len(json.dumps(str(value)))
    return total


def _string_size(text: str) -> int:
    if any("\ud800" <= char <= "\udfff" for char in text):
        # a surrogate pair is one character in Go; a lone surrogate becomes U+FFFD (3 bytes)
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    encoded = json.dumps(text, ensure_ascii=False)
    extra = 5 * sum(text.count(c) for c in "<>&") + 3 * (
        text.count("\u2028") + text.count("\u2029")
    )
    return len(encoded.encode("utf-8")) + extra


def decode_problem(schema: Any) -> str | None:
    """Why Go's decoder would refuse the schema's JSON text (walle's message), or None.

    A nesting of more than :data:`MAX_NESTING` objects and arrays, or a number Go cannot hold:
    an integer beyond ``float64``'s range. (NaN and infinities, which JSON cannot write, are
    the dialect's own message.) Iterative; stops at the first problem, in document order.
    """
    stack: list[tuple[Any, int]] = [(schema, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > MAX_NESTING:
                bracket = "{" if isinstance(value, dict) else "["
                return (
                    "JSON schema parsing error: JSON syntax error: invalid character "
                    f"'{bracket}' exceeded max depth"
                )
            items = list(value.values()) if isinstance(value, dict) else value
            stack.extend((item, depth + 1) for item in reversed(items))
        elif isinstance(value, int) and not isinstance(value, bool):
            try:
                float(value)
            except OverflowError:
                return (
                    "JSON schema parsing error: JSON type error: expected float64 but got "
                    f"number {value}"
                )
    return None
