"""Whether a close match says the same thing as the value: the near-miss rules (pure).

``difference(value, found)`` compares a value with the text a fuzzy match found and returns what
changes the meaning, or None when nothing does. Both are folded first (``normalize.fold``), so
case, width, spacing and punctuation shapes never count. Three rules, in order:

1. **numbers**: the numbers written with digits (``2.1``, ``79100``, ``1,200``: thousands
   separators dropped) must be the same, in the same order: a digit changed, added or dropped is
   a different number;
2. **negations**: each negation marker must occur as often in both: English ``not``, ``no``,
   ``never``, ``without``, ``cannot``, ``nor``, ``none``, ``neither`` and a ``n't`` ending
   (whole words); Chinese ``不 没 无 非 未``; Japanese ``ない ず ません 非 不 無`` (inside words:
   these scripts have no spaces);
3. **content words**: the two are split into tokens (words of spaced scripts; one token per
   Chinese or Japanese character; punctuation dropped) and aligned (RapidFuzz Levenshtein
   opcodes over the token lists); every replaced token must be a typo of its counterpart: a word
   of 4+ letters with one edit (two from 9 letters; two neighbours swapped count as one) that
   is not itself a word (``than`` for ``that``, ``wish`` for ``with``, ``lappend`` for
   ``append`` are other words: known English words, ``pyspellchecker``'s list, or words of the
   document; ``recieve`` for ``receive`` is a typo), or an abbreviation of it: a prefix
   (``corp`` for ``corporation``; one English word beginning another is no abbreviation of it
   when it is at most two letters short or the document writes it, ``the`` for ``their``,
   ``for`` for ``form``, unless written with a point or the rest is an ending, ``used`` for
   ``use``), or, written with a point, the same first letter and the
   rest a subsequence (``dept.`` for ``department``; ``Bern`` is not ``Berlin``; when both
   words have a point and the shorter is a word, the points end sentences: ``causes.`` is not
   ``cases.``). A replaced Chinese or Japanese character, or a whole word replaced by another,
   is a swapped content word. A token of the value that the text does not have (a Chinese or
   Japanese character, a number, a word of two letters or more: ``in``, ``can``, ``all``,
   ``two``) changes the meaning too; words of the text the value leaves out, and an article it
   adds (``a``, ``an``, ``the``), do not count.
   The value's word is another word when the document writes it elsewhere, or when it is an
   English word and so is the text's (or the document writes that more than once): a value
   that corrects the text's typo, ``Corporation`` for ``Corporatoin``, is grounded.
   Which words are words is asked of ``words`` (``Words``: ``SourceText``); without it
   (``difference`` called alone) every one-edit slip is read as a typo.

Folding here keeps word breaks (each whitespace-separated piece is folded on its own), so words
stay words, and composes the folded text again, so that a kana with a voicing mark is one
character: ``コマント`` for ``コマンド`` is a replaced character (a swapped word), not a mark left
out.

The rules were chosen by measurement on the grounding benchmark's near-miss generators (real
Debian and Python package text; negations added or removed, digit edits, swapped words and
halves of two real phrases joined, in English, Chinese and Japanese; and its fuzzy sample: slips
into another word, voicing marks, beside typos and spelling variants that must still ground):
see ``benchmarks/bench_grounding.py`` and docs/grounding.md for the rates.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from functools import lru_cache
from typing import Any, Protocol

from rapidfuzz.distance import OSA, Levenshtein

from .normalize import fold

#: Numbers written with digits, in folded text (thousands separators are dropped before the
#: comparison, so ``1,200`` and ``1200`` are one number).
_NUMBER = re.compile(r"\d+(?:[.,']\d+)*")
_ENGLISH_NEGATIONS = frozenset(
    {"not", "no", "never", "without", "cannot", "nor", "none", "neither", "nothing", "nobody"}
)
_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")
#: Negation markers of scripts without spaces, counted as substrings.
_CJK_NEGATIONS = ("不", "没", "沒", "无", "無", "非", "未", "ない", "ず", "ません")
#: The markers as they are compared: folded, then composed (``soft_fold``).
_CJK_NEGATIONS_FOLDED = tuple((m, unicodedata.normalize("NFC", fold(m))) for m in _CJK_NEGATIONS)
#: One token per character of these scripts (CJK ideographs, kana, Hangul syllables).
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")
_TOKEN = re.compile(
    r"\d+(?:[.,']\d+)*|[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]"
    r"|[^\W\d_\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+"
)


def numbers(folded: str) -> list[str]:
    """The digit-written numbers of a folded text, separators dropped (``1,200`` -> ``1200``;
    a ``1 200`` split by a space is one number too)."""
    joined = re.sub(r"(?<=\d) (?=\d{3}(?!\d))", "", folded)
    return [re.sub(r"[,']", "", m.group()) for m in _NUMBER.finditer(joined)]


def negations(folded: str) -> Counter[str]:
    """How often each negation marker occurs in a folded text."""
    found: Counter[str] = Counter()
    for match in _WORD.finditer(folded):
        word = match.group()
        if word in _ENGLISH_NEGATIONS:
            found[word] += 1
        elif word.endswith("n't"):
            found["n't"] += 1
    for marker, folded_marker in _CJK_NEGATIONS_FOLDED:
        count = folded.count(folded_marker)
        if count:
            found[marker] += count
    # ません holds ず-less ない-less negation; ない inside ません is impossible, fine as counted
    return found


def _typo(
    a: str,
    b: str,
    dotted: frozenset[str] = frozenset(),
    words: Words | None = None,
) -> bool:
    """Whether the value's word ``a`` stands for the text's word ``b``: an abbreviation of it
    or the other way round (a prefix, ``corp``; or, written with a point (``dotted``), the same
    first letter and the rest a subsequence, ``dept.``), or one edit (two from 9 letters) that
    does not make one word another (``than`` for ``that``; see the comment below; ``words``:
    which words are words)."""
    if _CJK.match(a) or _CJK.match(b):
        return False
    a, b = a.rstrip("."), b.rstrip(".")
    if not a or not b:
        return False
    shorter, longer = sorted((a, b), key=len)
    if len(shorter) >= 3 and len(shorter) < len(longer) and longer.startswith(shorter):
        return not _prefix_word(shorter, longer, dotted, words)
    # when both words have a point, it may end two sentences (``cases.``, ``causes.``): the
    # shorter one is an abbreviation only if it is no word
    sentence = (
        longer in dotted
        and words is not None
        and (words.english(shorter) or words.written(shorter) >= 1)
    )
    if shorter in dotted and not sentence and len(shorter) >= 2 and shorter[0] == longer[0]:
        rest = iter(longer[1:])
        if all(char in rest for char in shorter[1:]):
            return True
    if min(len(a), len(b)) < 4 or any(c.isdigit() for c in a + b):
        return False
    allowed = 2 if max(len(a), len(b)) >= 9 else 1
    if OSA.distance(a, b, score_cutoff=allowed) > allowed:
        return False
    if words is None:
        return True
    # a slip into another word is that word ("than" for "that"): one the document writes
    # elsewhere, or an English word in place of a word (English, or one the document writes
    # more than this once); an English word for a word the text has once and no dictionary
    # does is the text's typo corrected ("Corporation" for "Corporatoin")
    english = words.english(a)
    if english and words.english(b):
        return False
    return not (words.written(a) >= 1 or (english and words.written(b) >= 2))


#: Endings that make a prefix the same word inflected (``copy`` / ``copying``, ``use`` /
#: ``used``), not an abbreviation nor another word.
_INFLECTIONS = frozenset({"s", "es", "d", "ed", "ing", "'s"})


def _prefix_word(shorter: str, longer: str, dotted: frozenset[str], words: Words | None) -> bool:
    """Whether ``shorter``, a prefix of ``longer``, is a word of its own rather than an
    abbreviation of it: both English words, not written with a point, not an inflection
    (``copy`` / ``copies`` is no prefix; ``use`` / ``used`` is the same word), and either at
    most two letters short (``the`` / ``their``, ``for`` / ``form``, ``with`` / ``within``) or
    a word the document writes (``some`` / ``something``). ``info`` for ``information`` stays
    an abbreviation unless the document writes ``info``; ``inf.`` always is one."""
    if words is None or shorter in dotted or longer[len(shorter) :] in _INFLECTIONS:
        return False
    if not (words.english(shorter) and words.english(longer)):
        return False
    return len(longer) - len(shorter) <= 2 or words.written(shorter) >= 1


class Words(Protocol):
    """Which folded words are words: English ones, and how often the document writes one."""

    def english(self, word: str) -> bool:
        """Whether ``word`` is an English word (``english_word``)."""

    def written(self, word: str) -> int:
        """How often the document writes ``word`` (words of four letters or more)."""


@lru_cache(maxsize=1)
def _english() -> Any:
    from spellchecker import SpellChecker

    return SpellChecker(language="en", distance=1).word_frequency


def english_word(word: str) -> bool:
    """Whether ``word`` (folded) is an English word: ``pyspellchecker``'s list of 160,000 words
    (from subtitle word counts, common misspellings left out), read on first use (0.2 s)."""
    return word in _english()


def tokens(folded: str) -> list[str]:
    """Words of spaced scripts, numbers, and single Chinese / Japanese characters."""
    return _TOKEN.findall(folded)


def soft_fold(text: str) -> str:
    """``fold`` applied to each whitespace-separated piece, the pieces joined by one space, and
    composed again (NFC): a kana and its voicing mark are one character (``ド`` is not ``ト``
    followed by a mark the value may leave out)."""
    return unicodedata.normalize(
        "NFC", " ".join(piece for piece in (fold(p) for p in text.split()) if piece)
    )


def difference(value: str, found: str, words: Words | None = None) -> str | None:
    """What changes the meaning between ``value`` and the text ``found`` (module docstring),
    as a short phrase (``"number: 2.2 vs 2.1"``), or None when nothing does. ``words``: which
    folded words are words (``Words``; ``SourceText`` is one), so that a slip into another word
    is told from a typo."""
    a, b = soft_fold(value), soft_fold(found)
    if a == b:
        return None
    ours, theirs = numbers(a), numbers(b)
    if ours != theirs:
        return "number: " + (" ".join(ours) or "none") + " vs " + (" ".join(theirs) or "none")
    mine, yours = negations(a), negations(b)
    if mine != yours:
        added = sorted((mine - yours).elements())
        dropped = sorted((yours - mine).elements())
        parts = []
        if added:
            parts.append(f"{' '.join(added)!r} in the value, not in the text")
        if dropped:
            parts.append(f"{' '.join(dropped)!r} in the text, not in the value")
        return "negation: " + "; ".join(parts)
    left, right = tokens(a), tokens(b)
    dotted = frozenset(m.group(1) for m in re.finditer(r"(\w+)\.", a + " " + b))
    for op in Levenshtein.opcodes(left, right):
        i1, i2, j1, j2 = op.src_start, op.src_end, op.dest_start, op.dest_end
        if op.tag == "delete":
            extra = [x for x in left[i1:i2] if _content(x)]
            if extra:
                return f"word: {extra[0]!r} not in the text"
        if op.tag != "replace":
            continue
        for x, y in zip(left[i1:i2], right[j1:j2], strict=False):
            if x != y and not _typo(x, y, dotted, words):
                return f"word: {x!r} vs {y!r}"
    return None


#: Words a value may add to the text without saying something else.
_ARTICLES = frozenset({"a", "an", "the"})


def _content(token: str) -> bool:
    """A token of the value that says something when the text does not have it: a Chinese or
    Japanese character, a number, or a word of two letters or more but an article (``can``,
    ``all``, ``two``, ``in`` change what a phrase says; a lone letter is mostly the ``s`` of
    ``'s``)."""
    return (
        bool(_CJK.match(token))
        or token[:1].isdigit()
        or (len(token) >= 2 and token not in _ARTICLES)
    )
