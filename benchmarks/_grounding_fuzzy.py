"""The fuzzy sample of the grounding benchmark: values within a slip of real phrases (section 9).

``_grounding_corpus.make_values`` draws few values that only a fuzzy match can ground (about one
in a hundred), too few to measure what share of fuzzy spans are right. ``make_fuzzy_values(doc,
rng)`` draws values that all sit within a character or two of a phrase of the document, in
records like ``make_values``'s (2-5 fields from one region of 600 characters, a shuffled schema
order), each of one class:

- **rewrite** (the same words, written with a slip; a span over the phrase is right):

  - ``typo``: one slip of the keys in a Latin word of five letters or more (English text, and
    the option names, paths and English words of the Chinese and Japanese pages): a letter
    dropped, doubled, swapped with the next or replaced by its keyboard neighbour;
  - ``variant``: a spelling variant of an English word (``-ize`` / ``-ise``, ``-yze`` /
    ``-yse``, ``-ense`` / ``-ence``, ``-or`` / ``-our``, ``-er`` / ``-re``, a plural ``s``
    added or dropped, a hyphen dropped); in Chinese a character left out, a particle first
    (``的 了 地 之``); in Japanese a particle, a small ``っ`` or a long-vowel mark ``ー`` left
    out (``サーバー`` / ``サーバ``), else another kana;
  - ``cjk-typo``: one Chinese or Japanese character replaced by another of the document (a
    wrong character, as an input method slips). The near-miss rules cannot tell it from a
    swapped word, so it is shown as "near": measured as a rewrite it is never found;

- **absent** (a slip that says something else; no span of it is right):

  - ``slip``: an English word of four letters or more replaced by another word of the same
    document one edit away (``that`` / ``than``, ``form`` / ``from``, ``lose`` / ``lost``; not a
    prefix of it: that is a plural or an abbreviation); in Japanese a voicing mark added or
    dropped (``コマンド`` / ``コマント``); in Chinese one character replaced by another of the
    document.

An absent value whose folded form occurs in the document, or does once an article, quotes or a
final point are taken off (``the whose`` when ``whose`` is there), is dropped (it is not
absent); a value equal to its phrase once folded is dropped too (nothing slipped).
"""

from __future__ import annotations

import json
import random
import re
import sys
import unicodedata
from dataclasses import asdict

from _grounding_corpus import (
    _CJK,
    _CJK_RUN,
    SAMPLE,
    Doc,
    Value,
    _core,
    _fold,
    _occurrences,
    _phrase,
)
from rapidfuzz.distance import OSA

_LATIN_WORD = re.compile(r"(?<![\w'-])[A-Za-z]{4,}(?![\w'-])")
_HYPHENATED = re.compile(r"(?<![\w-])[A-Za-z]{1,8}-[A-Za-z]{3,}(?![\w-])")
_KEYS = "qwertyuiopasdfghjklzxcvbnm"
_SUFFIXES = (
    ("ization", "isation"), ("ize", "ise"), ("izing", "ising"), ("ized", "ised"),
    ("yze", "yse"), ("ense", "ence"), ("vor", "vour"), ("lor", "lour"), ("nor", "nour"),
    ("ter", "tre"), ("ber", "bre"),
)  # fmt: skip
_ZH_PARTICLES = "的了地之"
_JA_LEFT_OUT = "のをにはがでとっー"
_NEGATIONS = set("不没沒无無非未")


def _slip(rng: random.Random, word: str) -> str:
    k = rng.randint(1, len(word) - 2)
    how = rng.randrange(4)
    if how == 0:
        return word[:k] + word[k + 1 :]
    if how == 1:
        return word[:k] + word[k] + word[k:]
    if how == 2:
        return word[:k] + word[k + 1] + word[k] + word[k + 2 :]
    at = _KEYS.find(word[k].lower())
    return word[:k] + (_KEYS[at + 1] if 0 <= at < len(_KEYS) - 1 else "e") + word[k + 1 :]


def _latin(phrase: str) -> list[re.Match[str]]:
    return [m for m in _LATIN_WORD.finditer(phrase) if m.group().isascii()]


def _typo(rng: random.Random, phrase: str) -> str | None:
    words = [m for m in _latin(phrase) if len(m.group()) >= 5]
    if not words or len(phrase) < 8:
        return None
    m = rng.choice(words)
    return phrase[: m.start()] + _slip(rng, m.group()) + phrase[m.end() :]


def _english_variant(rng: random.Random, phrase: str) -> str | None:
    options: list[tuple[int, int, str]] = []
    for m in _latin(phrase):
        word = m.group()
        for a, b in _SUFFIXES:
            for old, new in ((a, b), (b, a)):
                if word.lower().endswith(old) and len(word) - len(old) >= 3:
                    options.append((m.start(), m.end(), word[: -len(old)] + new))
        if len(word) >= 5 and word.isalpha():
            options.append((m.start(), m.end(), word[:-1] if word.endswith("s") else word + "s"))
    for m in _HYPHENATED.finditer(phrase):
        options.append((m.start(), m.end(), m.group().replace("-", "")))
    if not options:
        return None
    start, end, new = rng.choice(options)
    return phrase[:start] + new + phrase[end:]


def _cjk_variant(rng: random.Random, phrase: str, lang: str) -> str | None:
    inner = [i for i in range(1, len(phrase) - 1) if _CJK.match(phrase[i])]
    inner = [i for i in inner if phrase[i] not in _NEGATIONS]
    if len(phrase) < 5 or not inner:
        return None
    preferred = _ZH_PARTICLES if lang == "zh" else _JA_LEFT_OUT
    first = [i for i in inner if phrase[i] in preferred]
    if lang == "ja" and not first:
        first = [i for i in inner if "\u3040" <= phrase[i] <= "\u30ff" and phrase[i] != "ず"]
    i = rng.choice(first or inner)
    return phrase[:i] + phrase[i + 1 :]


def _cjk_replaced(rng: random.Random, phrase: str, text: str) -> str | None:
    inner = [i for i in range(len(phrase)) if _CJK.match(phrase[i]) and phrase[i] not in _NEGATIONS]
    pool = sorted({ch for run in _CJK_RUN.findall(text[:20_000]) for ch in run} - _NEGATIONS)
    if len(phrase) < 4 or not inner or not pool:
        return None
    i = rng.choice(inner)
    other = rng.choice(pool)
    return None if other == phrase[i] else phrase[:i] + other + phrase[i + 1 :]


def _voicing(rng: random.Random, phrase: str) -> str | None:
    options = []
    for i, char in enumerate(phrase):
        parts = unicodedata.normalize("NFD", char)
        if len(parts) > 1 and "\u3040" <= parts[0] <= "\u30ff":
            options.append((i, parts[0]))
        voiced = unicodedata.normalize("NFC", char + "\u3099")
        if len(voiced) == 1:
            options.append((i, voiced))
    if len(phrase) < 4 or not options:
        return None
    i, new = rng.choice(options)
    return phrase[:i] + new + phrase[i + 1 :]


def _english_slip(rng: random.Random, phrase: str, vocabulary: list[str]) -> str | None:
    words = [m for m in _latin(phrase) if m.group().islower()]
    rng.shuffle(words)
    for m in words[:3]:
        word = m.group()
        near = [
            v
            for v in vocabulary
            if abs(len(v) - len(word)) <= 1
            and v != word
            and not (v.startswith(word) or word.startswith(v))
            and OSA.distance(v, word, score_cutoff=1) <= 1
        ]
        if near:
            return phrase[: m.start()] + rng.choice(near) + phrase[m.end() :]
    return None


def _value(
    rng: random.Random, doc: Doc, region: tuple[int, int], vocabulary: list[str]
) -> Value | None:
    picked = _phrase(rng, doc.text, region)
    if picked is None:
        return None
    phrase, start, end = picked
    cjk = bool(_CJK.search(phrase))
    lang = "ja" if re.search(r"[\u3040-\u30ff]", doc.text[:5_000]) else "zh"
    roll = rng.random()
    value: str | None
    if roll < 0.3:
        cls, sub = "rewrite", "typo"
        value = _typo(rng, phrase)
    elif roll < 0.6:
        cls, sub = "rewrite", "variant"
        value = _cjk_variant(rng, phrase, lang) if cjk else _english_variant(rng, phrase)
    elif roll < 0.7:
        cls, sub = "rewrite", "cjk-typo"
        value = _cjk_replaced(rng, phrase, doc.text) if cjk else None
    else:
        cls, sub = "absent", "slip"
        if cjk:
            value = _voicing(rng, phrase) if lang == "ja" else _cjk_replaced(rng, phrase, doc.text)
        else:
            value = _english_slip(rng, phrase, vocabulary)
    if value is None or _fold(value) == _fold(phrase):
        return None
    if cls == "absent":
        return Value("", value, cls, sub)
    return Value("", value, cls, sub, [start, end])


def make_fuzzy_values(doc: Doc, rng: random.Random, records: int = 12) -> list[Value]:
    """Values within a slip of the document's phrases, in records (module docstring)."""
    text = doc.text
    folded = _fold(text)
    vocabulary = sorted({w for w in re.findall(r"\b[a-z]{4,}\b", text)})
    out: list[Value] = []
    slots = max(1, len(text) // 600)
    starts = sorted(600 * s for s in rng.sample(range(slots), min(records, slots)))
    for r, low in enumerate(starts):
        region = (low, min(len(text), low + 600))
        fields: list[Value] = []
        tries = 0
        wanted = rng.randint(2, 5)
        while len(fields) < wanted and tries < 40:
            tries += 1
            value = _value(rng, doc, region, vocabulary)
            if value is None or (
                value.cls == "absent"
                and (_fold(value.value) in folded or _fold(_core(value.value)) in folded)
            ):
                continue
            if value.truth is not None:
                source = text[value.truth[0] : value.truth[1]]
                value.truths = _occurrences(text, source) or [value.truth]
            fields.append(value)
        rng.shuffle(fields)
        for f, value in enumerate(fields):
            value.path = f"records[{r}].f{f}"
            out.append(value)
    return out


def write_sample(seed: int = 22, records: int = 12) -> None:
    """Add the fuzzy sample of the committed test corpus (``fuzzy_values``: values drawn by
    ``make_fuzzy_values`` from its documents, which stay as they are)."""
    data = json.loads(SAMPLE.read_text("utf-8"))
    rng = random.Random(seed)
    docs = [Doc(**d) for d in data["documents"]]
    data["fuzzy_values"] = {
        doc.id: [asdict(v) for v in make_fuzzy_values(doc, rng, records=records)] for doc in docs
    }
    data["about"] = data["about"].split(" Fuzzy sample:")[0] + (
        f" Fuzzy sample: fuzzy_values, drawn by benchmarks/_grounding_fuzzy.py (seed {seed}); "
        "regenerate: python benchmarks/_grounding_fuzzy.py --write-sample"
    )
    SAMPLE.write_text(json.dumps(data, ensure_ascii=False, indent=0) + "\n", "utf-8")


if __name__ == "__main__":
    if "--write-sample" in sys.argv:
        write_sample()
        sample = json.loads(SAMPLE.read_text("utf-8"))
        print(sum(len(v) for v in sample["fuzzy_values"].values()), "fuzzy values")
