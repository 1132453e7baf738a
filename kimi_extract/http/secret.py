"""The API key (``Secret``) and the redaction of every text a server sends.

A server may echo the key back: whole, in part, elided ("sk-abc...xyz"), or encoded. ``redact``
removes what could identify the key, before and after decoding:

- as sent: any run of ``REDACT_MIN_RUN`` (8) or more of the key's consecutive characters, and
  any elided form (a head of the key, ``...`` / ``***`` / ``…``, a tail of it);
- decoded: the same runs in an echo that writes each character its own way, as is (either
  case), as a JSON ``\\uXXXX`` escape or percent-encoded (``%73%6B``; hex digits and the ``u``
  in either case, so a whole echo upper-cased after encoding too), with any gaps between
  characters: whitespace, zero-width characters, ``\\n`` / ``\\r`` / ``\\t`` escapes and lone
  backslashes ("s k - a b c", a key in a JSON string that a parser would decode later, or
  escaped twice). An echo may start anywhere, also inside what a left-to-right decoding reads
  as one escape: in ``%0000000\\u0030`` the key ``00000000`` starts after the ``%``
  (``_tails``);
- base64 (standard and URL-safe alphabets, at each of the three byte alignments, so also inside
  a longer encoded text such as ``base64("Bearer <key>")``): any run of ``BASE64_MIN_RUN`` (15)
  characters of such an encoding, about 11 characters of the key.

A key shorter than ``MIN_SECRET_LENGTH`` characters (local servers' ``"k"`` or ``"EMPTY"``) is
redacted only where it stands as a whole token (not inside a word or a longer run of key
characters): a piece that short identifies nothing, and redacting it inside every word would
break every answer.

The forms are computed once per key; texts that hold none of the key's pieces in any form pass
with a few searches in C (``suspect``), so the check costs little on every answer.
"""

from __future__ import annotations

import base64
import bisect
import re
from typing import Any

#: Shortest run of the key's characters that counts as (part of) the key in server text.
REDACT_MIN_RUN = 8
#: Keys shorter than this are redacted only as whole tokens (see the module docstring).
MIN_SECRET_LENGTH = 8
#: Shortest run of a base64 form of the key that is redacted (it encodes 11 or more characters
#: of the key, whatever its alignment).
BASE64_MIN_RUN = 15
REDACTED = "[redacted]"
#: Longest server text (message, type, request id) kept in an error.
MAX_SERVER_TEXT = 1000
#: The marker of a key with its middle elided ("sk-abc...xyz", "sk-proj-****abcd").
_ELISION = re.compile(r"(?:\u2026|[.*\u2022]{2,})+")
_KEY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_ELISION_MARKS = ("..", "**", ".*", "*.", "\u2026", "\u2022")
#: What may stand between the characters of a spaced-out echo: whitespace, soft hyphens and
#: zero-width characters, the JSON escapes of a newline, return or tab, and any other backslash
#: (an escaped one: a key escaped twice) but one starting a ``\\uXXXX`` escape.
_GAP = r"\\[nrtNRT]|[\s\u00ad\u200b-\u200f\u2060\ufeff]|\\(?![uU][0-9a-fA-F]{4})"
#: The invisible characters among the gaps (whitespace is dropped by ``str.split``).
_INVISIBLE = re.compile(r"[\u00ad\u200b-\u200f\u2060\ufeff]+")
#: A JSON ``\uXXXX`` escape, a percent-encoded byte, or a JSON newline / return / tab escape.
_ESCAPE = re.compile(r"\\[uU]([0-9a-fA-F]{4})|%([0-9a-fA-F]{2})|\\[nrtNRT]")
#: The pieces the decoded view is built from: an escape, or a run of gaps.
_VIEW_TOKEN = re.compile(rf"\\[uU]([0-9a-fA-F]{{4}})|%([0-9a-fA-F]{{2}})|((?:{_GAP})+)")
#: An escape whose characters after the first may also be read as they stand, where an echo
#: starts inside it (``%0`` + ``0000000...``, ``\\u00`` + ``30...``, ``\\`` + ``n...``).
_TAIL_SOURCE = re.compile(r"\\(?:[uU][0-9a-fA-F]{4}|[nrtNRT])|%[0-9a-fA-F]{2}")
_HEX = frozenset("0123456789abcdef")
_UNICODE_ESCAPE = re.compile(r"\\[uU][0-9a-fA-F]{4}")
_PERCENT_ESCAPE = re.compile(r"%[0-9a-fA-F]{2}")
#: Base64 characters (both alphabets) to "a", other ASCII to a space: a run of base64 becomes a
#: run of "a" (one C pass; ASCII-to-ASCII tables take ``str.translate``'s fast path).
_BASE64_MASK = str.maketrans(
    {chr(c): "a" if chr(c).isalnum() or chr(c) in "+/-_" else " " for c in range(128)}
)
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
#: ASCII text to its squeezed form in one C pass: upper case lowered, whitespace dropped.
_SQUEEZE_ASCII = str.maketrans(
    {
        **{chr(c): None for c in range(128) if chr(c).isspace()},
        **{chr(c): chr(c + 32) for c in range(ord("A"), ord("Z") + 1)},
    }
)


def _decode_escape(match: re.Match[str]) -> str:
    code = match.group(1) or match.group(2)
    return chr(int(code, 16)) if code else ""


def _base64_forms(secret: str) -> list[str]:
    """The base64 text that encodes ``secret`` wherever it lies in a longer encoded text: for
    each byte alignment, the characters determined by the secret's bytes alone."""
    data = secret.encode("utf-8", "surrogatepass")
    forms: list[str] = []
    for pad in range(3):
        encoded = base64.b64encode(b"\0" * pad + data).decode()
        first = -(-8 * pad // 6)  # the first character holding no pad bits
        core = encoded[first : (8 * pad + 8 * len(data)) // 6]
        for form in (core, core.replace("+", "-").replace("/", "_")):
            if form not in forms:
                forms.append(form)
    return forms


def _loose_pieces(value: str, ends: tuple[str, str]) -> tuple[tuple[str, ...], ...]:
    """The pieces a run of the key leaves in the squeezed text (``_loose_text``), lower-cased:
    those every run leaves, those a run starting inside ``%XX`` leaves when no other does, those
    one starting inside ``\\uXXXX`` leaves when no other does, and (looked for undecoded)
    those one starting at the ``u`` of ``\\uXXXX`` leaves.

    A run of 8 holds a block (4 characters at an offset divisible by 4) after its first
    character, so one starting inside a ``\\n`` escape (``Secret._tails``) leaves one too; one
    starting inside ``%XX`` shows up to 2 characters only undecoded and leaves 4 at an even
    offset; inside ``\\uXXXX``, up to 4 (any 4 consecutive ones are left), or 5 from its ``u``.
    """
    lowered = value.lower()

    def quads(step: int) -> set[str]:
        return {lowered[i : i + 4] for i in range(0, len(value) - 3, step)}

    def squeezable(pieces: set[str]) -> tuple[str, ...]:
        if not _KEY_CHARS.issuperset(value):  # a key whose own characters squeezing changes
            pieces |= {"".join(p.split()) for p in pieces} - {""}
        return tuple(sorted(pieces, key=len, reverse=True))

    base = quads(4) | {end.lower() for end in ends if end}
    u_pieces = {
        lowered[i : i + 5]
        for i in range(len(value) - 4)
        if lowered[i] == "u" and _HEX.issuperset(lowered[i + 1 : i + 5])
    }
    return (
        squeezable(base),
        squeezable(quads(2) - base),
        squeezable(quads(1) - quads(2) - base),
        tuple(u_pieces),
    )


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    spans.sort()
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


#: An escape starting at a given offset: JSON (``\\uXXXX`` or a backslash and one character)
#: or percent-encoding.
_ESCAPE_AT = re.compile(r"\\(?:[uU][0-9a-fA-F]{4}|[\s\S])|%[0-9a-fA-F]{2}")


def _widen(text: str, start: int, end: int) -> tuple[int, int]:
    """The span grown so that it cuts no escape: one it starts or ends inside is taken whole,
    and so are the backslashes just before it (a replacement must leave a JSON string valid,
    so it never follows a lone backslash)."""
    for at in range(max(0, start - 5), start):
        if text[at] in "\\%":
            match = _ESCAPE_AT.match(text, at)
            if match and match.end() > start:
                start = at
                break
    while start > 0 and text[start - 1] == "\\":
        start -= 1
    for at in range(max(start, end - 5), end):
        if text[at] in "\\%":
            match = _ESCAPE_AT.match(text, at)
            if match and match.end() > end:
                end = match.end()
                break
    return start, end


def _replace(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` with each (merged) span replaced by ``REDACTED``."""
    if not spans:
        return text
    if "\\" in text or "%" in text:
        spans = [_widen(text, start, end) for start, end in spans]
    pieces, last = [], 0
    for start, end in _merge(spans):
        pieces += [text[last:start], REDACTED]
        last = end
    pieces.append(text[last:])
    return "".join(pieces)


def _find_all(text: str, needles: Any, size: int | None = None) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    for needle in needles:
        length = size or len(needle)
        start = text.find(needle)
        while start != -1:
            spans.append((start, start + length))
            start = text.find(needle, start + 1)
    return spans


class Secret:
    """Holds the API key; its repr and str never show it.

    ``redact`` removes it from text that came from a server (see the module docstring); every
    such text passes through it where it enters the library, so the key cannot reach an error, a
    log, a frame or a file even when a server echoes it.
    """

    __slots__ = (
        "_value",
        "_short",
        "_runs",
        "_loose_runs",
        "_blocks",
        "_ends",
        "_encoded",
        "_encoded_blocks",
        "_base64_run",
        "_pieces",
        "_percent_pieces",
        "_escape_pieces",
        "_u_pieces",
    )

    def __init__(self, value: str) -> None:
        self._value = value
        size = REDACT_MIN_RUN
        self._runs = frozenset(value[i : i + size] for i in range(len(value) - size + 1))
        lowered = value.lower()
        self._loose_runs = frozenset(lowered[i : i + size] for i in range(len(value) - size + 1))
        # Every run of 8 key characters contains one of the key's 4-character blocks at offsets
        # 0, 4, 8, ...: text with none of them holds no run, and 12 searches replace 40.
        self._blocks = tuple(value[i : i + 4] for i in range(0, len(value) - 3, 4))
        # An elided form keeps 3 or more characters at one end of the key.
        self._ends = (value[:3], value[-3:])
        self._encoded: frozenset[str] = frozenset()
        self._encoded_blocks: tuple[str, ...] = ()
        self._base64_run = ""
        self._short: re.Pattern[str] | None = None
        self._pieces: tuple[str, ...] = ()
        self._percent_pieces: tuple[str, ...] = ()
        self._escape_pieces: tuple[str, ...] = ()
        self._u_pieces: tuple[str, ...] = ()
        if len(value) < MIN_SECRET_LENGTH:
            # Only the whole key, as a token (not inside a word or a longer run of key chars).
            self._short = re.compile(rf"(?<![\w-]){re.escape(value)}(?![\w-])", re.ASCII)
            return
        # The base64 forms of the key at its three alignments hold those of "Bearer <key>" too.
        forms = _base64_forms(value)
        self._encoded = frozenset(
            f[i : i + min(BASE64_MIN_RUN, len(f))]
            for f in forms
            for i in range(len(f) - min(BASE64_MIN_RUN, len(f)) + 1)
        )
        # Every such run holds one of these blocks (offsets 0, 8, 16 ... of a form), and a run
        # of that many base64 characters (``_base64_run``), which nearly no answer holds.
        self._encoded_blocks = tuple({f[i : i + 8] for f in forms for i in range(0, len(f) - 7, 8)})
        self._base64_run = "a" * min(BASE64_MIN_RUN, *map(len, forms))
        # Every other form leaves one of these pieces, lower-cased, in the squeezed text
        # (``_loose_text``): text without any holds no trace of the key. A few substring
        # searches in C tell (the answer of nearly every request).
        pieces = _loose_pieces(value, self._ends)
        self._pieces, self._percent_pieces, self._escape_pieces, self._u_pieces = pieces

    def suspect(self, text: str) -> bool:
        """Whether ``text`` may hold the key or a piece of it in any form (False: ``redact``
        would return it unchanged). Several texts can be checked at once, joined by any
        separator: the joined text holds every piece each text holds (a piece across a seam is
        only a false alarm)."""
        if not self._value or not text:
            return False
        if self._short is not None:
            return self._value in text
        if self._loose_suspect(text, _loose_text(text)):
            return True
        if self._base64_run in text.translate(_BASE64_MASK):
            for block in self._encoded_blocks:
                if block in text:
                    return True
        if not _KEY_CHARS.issuperset(self._value):
            lowered = text.lower()
            return any(piece in lowered for piece in self._pieces)
        return False

    def get(self) -> str:
        """The key itself, for the Authorization header only."""
        return self._value

    def redact(self, text: str) -> str:
        """``text`` without the key in any form the module docstring lists: each becomes
        ``[redacted]``."""
        if not self.suspect(text):
            return text
        if self._short is not None:
            return self._short.sub(REDACTED, text)
        if any(block in text for block in self._blocks):
            text = _replace(text, _find_all(text, self._runs))
        if any(end in text for end in self._ends) and any(m in text for m in _ELISION_MARKS):
            text = self._redact_elided(text)
        if any(block in text for block in self._encoded_blocks):
            text = _replace(text, _find_all(text, self._encoded))
        if self._loose_suspect(text, _loose_text(text)):
            text = self._redact_loose(text)
        return text

    def _loose_suspect(self, text: str, squeezed: str) -> bool:
        """Whether ``text`` (squeezed: ``_loose_text``) may hold a run in its decoded view."""
        if any(piece in squeezed for piece in self._pieces):
            return True
        escaped = "\\" in text and _UNICODE_ESCAPE.search(text) is not None
        if not escaped and ("%" not in text or _PERCENT_ESCAPE.search(text) is None):
            return False
        if any(piece in squeezed for piece in self._percent_pieces):
            return True
        if not escaped:
            return False
        if any(piece in squeezed for piece in self._escape_pieces):
            return True
        if self._u_pieces:
            lowered = text.lower()
            return any(piece in lowered for piece in self._u_pieces)
        return False

    def _redact_elided(self, text: str) -> str:
        """Replace each "head marker tail" whose head starts the key and whose tail ends it."""
        key = self._value
        spans: list[tuple[int, int]] = []
        for match in _ELISION.finditer(text):
            start, end = match.start(), match.end()
            while start > 0 and text[start - 1] in _KEY_CHARS:
                start -= 1
            while end < len(text) and text[end] in _KEY_CHARS:
                end += 1
            head, tail = text[start : match.start()], text[match.end() : end]
            if (
                len(head) + len(tail) >= 4
                and (len(head) >= 3 or len(tail) >= 3)
                and len(head) < len(key)
                and key.startswith(head)
                and key.endswith(tail)
            ):
                spans.append((start, end))
        return _replace(text, spans)

    def _redact_loose(self, text: str) -> str:
        """Replace each run of the key found in the decoded view of ``text`` (escapes decoded,
        gaps dropped, lower case), mapped back to the characters of ``text`` it came from."""
        view, starts, origins = _view(text)
        spans = []
        for start, end in _find_all(view, self._loose_runs, REDACT_MIN_RUN):
            spans.append((_origin(start, starts, origins)[0], _origin(end - 1, starts, origins)[1]))
        if "\\" in text or "%" in text:
            spans += self._tails(text, view, starts, origins)
        return _replace(text, spans)

    def _tails(
        self, text: str, view: str, starts: list[int], segments: list[_Segment]
    ) -> list[tuple[int, int]]:
        """The runs that start inside an escape: its last characters read as they stand, then the
        decoded view after it (``%0`` + ``0000000\\u0030``: the echo starts at the ``0`` that
        a left-to-right decoding took into ``%00``). An escape's characters after its first
        (hex digits, ``u``, ``n``/``r``/``t``) never start another escape, so the decoding from
        such a start meets the view again right after the escape."""
        runs, size = self._loose_runs, REDACT_MIN_RUN
        text_starts = [segment[1] for segment in segments]
        spans: list[tuple[int, int]] = []
        for match in _TAIL_SOURCE.finditer(text):
            end = match.end()
            raw = match.group().translate(_ASCII_LOWER)
            at = bisect.bisect_left(text_starts, end)
            after = segments[at][0] if at < len(segments) else len(view)
            for length in range(1, len(raw)):
                run = raw[-length:] + view[after : after + size - length]
                if run in runs:
                    last = _origin(after + size - length - 1, starts, segments)[1]
                    spans.append((end - length, last))
        return spans

    def redact_value(self, value: Any) -> Any:
        """A JSON value with every string (and key) in it redacted; other values unchanged."""
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, dict):
            return {self.redact(str(k)): self.redact_value(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.redact_value(v) for v in value]
        return value

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__


def _loose_text(text: str) -> str:
    """``text`` decoded and squeezed for the cheap check: escapes decoded, gaps dropped, lower
    case. C-speed passes (an escape is decoded only where one is)."""
    if "\\" in text or "%" in text:
        text = _ESCAPE.sub(_decode_escape, text).replace("\\", "")
    if len(text) > 2048 and text.isascii():  # one pass; splitting costs less on short text
        return text.translate(_SQUEEZE_ASCII)
    if not text.isascii():
        text = _INVISIBLE.sub("", text)
    return "".join(text.lower().split())


#: One segment of the decoded view: where it starts in the view, where in the text, its length
#: in the text, and whether it is the text's characters one for one (else one decoded escape).
_Segment = tuple[int, int, int, bool]


def _view(text: str) -> tuple[str, list[int], list[_Segment]]:
    """The decoded view of ``text`` (escapes decoded, gaps dropped, ASCII lower case), the view
    offset where each segment starts, and the segments."""
    pieces: list[str] = []
    starts: list[int] = []
    segments: list[_Segment] = []
    position = size = 0
    for match in _VIEW_TOKEN.finditer(text):
        begin = match.start()
        if begin > position:
            starts.append(size)
            segments.append((size, position, begin - position, True))
            pieces.append(text[position:begin].translate(_ASCII_LOWER))
            size += begin - position
        position = match.end()
        code = match.group(1) or match.group(2)
        if code is None:
            continue  # a gap: nothing in the view
        char = chr(int(code, 16))
        if char.isspace() or _INVISIBLE.fullmatch(char):
            continue
        starts.append(size)
        segments.append((size, begin, position - begin, False))
        pieces.append(char.translate(_ASCII_LOWER))
        size += 1
    if position < len(text):
        starts.append(size)
        segments.append((size, position, len(text) - position, True))
        pieces.append(text[position:].translate(_ASCII_LOWER))
    return "".join(pieces), starts, segments


def _origin(index: int, starts: list[int], segments: list[_Segment]) -> tuple[int, int]:
    """The span of ``text`` that view character ``index`` came from."""
    view_start, text_start, length, verbatim = segments[bisect.bisect_right(starts, index) - 1]
    if verbatim:
        at = text_start + index - view_start
        return at, at + 1
    return text_start, text_start + length


def server_text(value: Any, secret: Secret | None, limit: int = MAX_SERVER_TEXT) -> str:
    """Text from a server made safe to keep: a string, at most ``limit`` characters, redacted."""
    text = value if isinstance(value, str) else str(value)
    if secret is not None:
        # Redacted before the cut, so no encoded form is cut short of being recognized; only a
        # margin past the cut is read (a form starting before the cut ends within it).
        text = secret.redact(text[: limit + 4 * len(secret.get()) + 64])
    if len(text) > limit:
        text = text[:limit] + "..."
    return text
