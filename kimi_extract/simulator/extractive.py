"""Extractive answers: string fields copy spans of the user's text, optionally perturbed.

With ``Simulator(answers="extractive")`` every plain string of a JSON answer (no ``format`` or
``pattern``; enums, numbers and dates are drawn as usual) is a span of the last user message's
text instead of words joined by spaces, so grounding (``kimi_extract.ground``) can be tested and
benchmarked offline. ``Source.draw`` picks the span with the request-seeded ``random.Random``,
so the same request gets the same spans:

- a start word (a run of letters, or a number with its separators) uniformly, then 1-3
  words: ``text[start:end]`` with the text's own punctuation and spacing between them, cut at
  a line break; a run of a script written without spaces (Chinese, Japanese, Thai) longer than
  8 characters gives 2-8 characters of it;
- with probability ``perturb`` one perturbation of ``kinds`` (default all) is applied, drawn
  among those that change the span: ``case`` (swap case), ``spacing`` (a space removed or
  doubled, or one added), ``typo`` (one character in the middle replaced; spans of 8+
  characters only), ``width`` (ASCII to full-width forms).

``Draw`` keeps the span's offsets and the perturbation, the ground truth a test compares with.

Supporting quotes (a client's ``grounding="quotes"`` schema: objects with a ``kx_quotes``
object): ``Source.fill_quotes`` writes each field's quote after the answer is drawn: the span
its value was copied from (for a value not drawn from the text, such as a number or an enum,
its first occurrence, else a random span), widened by one word on each side within its line;
a value that is null gets ``""``. With probability ``quote_faults`` a quote is bad instead:
half of them fabricated (a phrase that is not in the text), half garbled (every third letter or
digit replaced), so that a client's check marks the value unsupported.
"""

from __future__ import annotations

import bisect
import json
import random
import re
from dataclasses import dataclass
from typing import Any

#: The perturbations ``Source.draw`` may apply, in the order they are tried.
PERTURBATIONS = ("case", "spacing", "typo", "width")
#: A word: letters (a run of Chinese is one), or a number with its thousands and decimal
#: separators (``1,200.50``), so that no span cuts a number.
_WORD = re.compile(r"\d+(?:[.,]\d+)*|[^\W\d]+")
#: Words indexed per text (a 50,000-token document has fewer).
_MAX_WORDS = 200_000
_TYPO_MIN_CHARS = 8
#: The property a quoted schema asks for quotes in (``kimi_extract.schema.quotes.QUOTES``; the
#: simulator reads the schema as a model would and imports no client code).
QUOTES = "kx_quotes"
#: Quotes ``quote_faults`` makes up (no test text contains them).
_FABRICATED = (
    "as agreed in the signed annex of the contract",
    "according to the summary table on the last page",
    "per the cover letter sent with the document",
)
#: At most this many characters are added on each side when a quote is widened by a word.
_WIDEN_CHARS = 24


def _unspaced(char: str) -> bool:
    """A character of a script written without spaces between words (CJK, kana, Thai...)."""
    code = ord(char)
    return (
        0x0E00 <= code < 0x0F00
        or 0x3040 <= code < 0x3100
        or 0x3400 <= code < 0xA000
        or 0xF900 <= code < 0xFB00
        or 0xFF66 <= code < 0xFFA0
    )


@dataclass(frozen=True)
class Draw:
    """One drawn value: what the answer holds, the span it was copied from, how it was changed."""

    value: str
    start: int
    end: int
    #: One of ``PERTURBATIONS``, or None when the value is ``text[start:end]`` unchanged.
    perturbation: str | None = None


class Source(list[str]):
    """The user's words (as ``answers.words_of`` gives them) and the text they come from.

    A ``list`` so that every generator reading words still works; ``values`` asks ``draw`` for
    plain strings when it is given a ``Source``.
    """

    def __init__(
        self,
        text: str,
        words: list[str],
        perturb: float = 0.0,
        kinds: tuple[str, ...] = PERTURBATIONS,
        quote_faults: float = 0.0,
    ) -> None:
        super().__init__(words)
        self.text = text
        self.perturb = perturb
        self.kinds = kinds
        self.quote_faults = quote_faults
        #: Each value drawn so far -> its draw (``fill_quotes`` quotes its span).
        self.drawn: dict[str, Draw] = {}
        spans = []
        for count, match in enumerate(_WORD.finditer(text)):
            if count >= _MAX_WORDS:
                break
            spans.append(match.span())
        self.spans = spans
        self.starts = [span[0] for span in spans]

    def draw(self, rng: random.Random) -> Draw | None:
        """A span of the text (perturbed with probability ``perturb``), or None without words."""
        drawn = self._draw(rng)
        if drawn is not None:
            self.drawn[drawn.value] = drawn
        return drawn

    def _draw(self, rng: random.Random, perturbed: bool = True) -> Draw | None:
        if not self.spans:
            return None
        text = self.text
        first = rng.randrange(len(self.spans))
        start, end = self.spans[first]
        if end - start > 8 and all(_unspaced(c) for c in text[start : start + 2]):
            size = rng.randint(2, 8)
            start += rng.randrange(end - start - size + 1)
            end = start + size
        else:
            last = min(len(self.spans) - 1, first + rng.randint(0, 2))
            end = self.spans[last][1]
            cut = text.find("\n", start, end)
            if cut != -1:
                end = cut
            while end > start and text[end - 1].isspace():
                end -= 1
        value = text[start:end]
        if perturbed and self.perturb and rng.random() < self.perturb:
            kinds = list(self.kinds)
            rng.shuffle(kinds)
            for kind in kinds:
                changed = perturb(rng, value, kind)
                if changed is not None:
                    return Draw(changed, start, end, kind)
        return Draw(value, start, end)

    def fill_quotes(self, rng: random.Random, answer: Any) -> Any:
        """``answer`` with every ``kx_quotes`` object's quotes written (module docstring)."""
        if isinstance(answer, list):
            return [self.fill_quotes(rng, item) for item in answer]
        if not isinstance(answer, dict):
            return answer
        out = {key: self.fill_quotes(rng, child) for key, child in answer.items()}
        asked = out.get(QUOTES)
        if isinstance(asked, dict):
            quotes: dict[str, Any] = {}
            for name, slot in asked.items():
                value = out.get(name)
                if isinstance(slot, list):
                    items = value if isinstance(value, list) else []
                    quotes[name] = [self.quote(rng, item) for item in items]
                else:
                    quotes[name] = self.quote(rng, value)
            out[QUOTES] = quotes
        return out

    def quote(self, rng: random.Random, value: Any) -> str:
        """The quote the simulated model gives for ``value`` (module docstring)."""
        if value is None or isinstance(value, bool | dict | list):
            return ""
        wanted = value if isinstance(value, str) else json.dumps(value)
        found = self.drawn.get(wanted)
        if found is not None:
            start, end = found.start, found.end
        elif wanted and (at := self.text.find(wanted)) >= 0:
            start, end = at, at + len(wanted)
        elif (other := self._draw(rng, perturbed=False)) is not None:
            start, end = other.start, other.end
        else:
            return ""
        quote = self.text[slice(*self._widen(start, end))]
        if self.quote_faults and rng.random() < self.quote_faults:
            return rng.choice(_FABRICATED) if rng.random() < 0.5 else _garble(quote)
        return quote

    def _widen(self, start: int, end: int) -> tuple[int, int]:
        """``start:end`` with the word before and the word after, on the same line."""
        starts = self.starts
        before = bisect.bisect_left(starts, start) - 1
        if before >= 0:
            left = self.spans[before][0]
            if start - left <= _WIDEN_CHARS and "\n" not in self.text[left:start]:
                start = left
        after = bisect.bisect_left(starts, end)
        if after < len(self.spans):
            right = self.spans[after][1]
            if right - end <= _WIDEN_CHARS and "\n" not in self.text[end:right]:
                end = right
        return start, end


def _garble(quote: str) -> str:
    """Every third letter or digit of ``quote`` replaced (far below any fuzzy threshold)."""
    chars = list(quote)
    seen = 0
    for i, char in enumerate(chars):
        if char.isalnum():
            if seen % 3 == 0:
                chars[i] = ("q" if char.lower() == "x" else "x") if char.isascii() else "\u3007"
            seen += 1
    return "".join(chars)


def perturb(rng: random.Random, value: str, kind: str) -> str | None:
    """``value`` changed by one perturbation ``kind``, or None when it would not change."""
    if kind == "case":
        changed = value.swapcase()
    elif kind == "spacing":
        spaces = [i for i, c in enumerate(value) if c == " "]
        if spaces:
            at = rng.choice(spaces)
            changed = value[:at] + rng.choice(("", "  ")) + value[at + 1 :]
        elif len(value) >= 2:
            at = rng.randrange(1, len(value))
            changed = value[:at] + " " + value[at:]
        else:
            return None
    elif kind == "typo":
        if len(value) < _TYPO_MIN_CHARS:
            return None
        at = len(value) // 2
        while at < len(value) and not value[at].isalnum():
            at += 1
        if at == len(value):
            return None
        old = value[at]
        if old.isascii():
            new = "x" if old.lower() != "x" else "q"
        else:
            new = chr(ord(old) + 1)
        changed = value[:at] + new + value[at + 1 :]
    elif kind == "width":
        changed = "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in value)
    else:
        raise ValueError(f"unknown perturbation {kind!r}; expected one of {PERTURBATIONS}")
    return changed if changed != value else None
