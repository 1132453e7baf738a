"""Literal searches through the folded text's bigram index (``SourceText.candidates``).

Once plain searches of a text have read it ``INDEX_AFTER`` times, each further search of a value
checks only where the value's rarest bigram occurs. That must change no outcome, only the cost:

- the occurrences come in the same order with and without the index (the definition of that
  order is tested in test_grounding_align.py), over many texts, needles and anchors;
- ``align`` gives the same spans with the index used from the first search as with no index at
  all, over generated documents and values (verbatim, changed, absent, numbers);
- many values on a long text read it a bounded number of times in all, not once per value
  (counted by ``ground.Work``, not timed).
"""

from __future__ import annotations

import random
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kimi_extract.ground import Work, align, fold
from kimi_extract.ground import source as source_module
from kimi_extract.ground.align import BACKWARD
from kimi_extract.ground.search import occurrences
from kimi_extract.ground.source import SourceText

# a small alphabet makes repeated and overlapping occurrences common; CJK, a combining mark and
# a full-width letter exercise the folded offsets
_ALPHABET = "ab \n-.1" + "中文" + "\u0301" + "Ａ"


def _indexed(text: str) -> SourceText:
    source = SourceText(text, Work())
    source.searched = source_module.INDEX_AFTER * max(1, len(source.normalized.text))
    return source


@settings(max_examples=400, deadline=None)
@given(
    text=st.text(alphabet="ab", max_size=40) | st.text(alphabet=_ALPHABET, max_size=80),
    needle=st.text(alphabet="ab", min_size=2, max_size=3)
    | st.text(alphabet=_ALPHABET, min_size=2, max_size=4),
)
def test_indexed_occurrences_come_in_the_same_order(text, needle):
    source = _indexed(text)
    folded, needle = source.normalized.text, fold(needle)
    candidates = source.candidates(needle)
    if len(needle) < 2 or len(needle) > len(folded):
        assert candidates is None
        return
    assert candidates is not None
    for anchor in [None, *range(len(folded) + 2)]:
        for backward in (1, 2, BACKWARD):
            plain = list(occurrences(folded, needle, anchor, backward))
            indexed = list(occurrences(folded, needle, anchor, backward, None, candidates))
            assert indexed == plain, (anchor, backward)
    assert source.contains(needle) == bool(plain)


def _document(rng: random.Random) -> tuple[str, list[tuple[str, str]]]:
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 8))) for _ in range(60)]
    words += ["中文", "文件", "描述", "2024", "1,200.50", "three", "Free Software Foundation"]
    text = " ".join(rng.choice(words) for _ in range(rng.randint(50, 400)))
    leaves = []
    for i in range(rng.randint(1, 25)):
        start = rng.randrange(max(1, len(text) - 30))
        phrase = text[start : start + rng.randint(1, 30)].strip() or "x"
        roll = rng.random()
        if roll < 0.2 and len(phrase) > 6:
            at = rng.randrange(len(phrase))
            phrase = phrase[:at] + "q" + phrase[at + 1 :]  # a typo
        elif roll < 0.3:
            phrase = rng.choice(["1200.5", "3", "2024-03-05", "FSF", "Free Soft. Found.", "zzqx"])
        elif roll < 0.4:
            phrase = phrase.upper()
        leaves.append((f"items[{i // 3}].f{i % 3}", phrase))
    return text, leaves


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 10**9))
def test_the_index_changes_no_span(seed):
    text, leaves = _document(random.Random(seed))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(source_module, "INDEX_AFTER", 10**9)
        plain = align(text, leaves)
        patch.setattr(source_module, "INDEX_AFTER", 0)
        indexed = align(text, leaves)
    assert indexed == plain


def test_many_values_read_a_long_text_a_bounded_number_of_times():
    rng = random.Random(5)
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 9))) for _ in range(3000)]
    text = " ".join(rng.choice(words) for _ in range(50_000))
    leaves = []
    for i in range(1_000):
        if i % 2:
            start = rng.randrange(len(text) - 40)
            leaves.append((f"v[{i}]", " ".join(text[start : start + 40].split()[1:-1])))
        else:  # absent, and too short for the fuzzy stage: only literal searches
            leaves.append((f"v[{i}]", "".join(rng.choices("xyz", k=5))))
    work = Work()
    align(text, leaves, work=work)
    # without the index: one to two readings of the text per value (about 1,500 of it)
    assert work.scanned <= 40 * len(text), work.scanned / len(text)
