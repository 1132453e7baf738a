"""The aligner (``kimi_extract.ground``): every value traced to its place in the source text.

Documents are generated with known spans (English, Chinese, Japanese, mixed scripts). Exact values
must be found at their offsets, perturbed ones (case, spacing, full-width, a typo) with the kind
the perturbation calls for, and values absent from the text must never get a span.
"""

from __future__ import annotations

import random
import re
import string
import unicodedata
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from enum import Enum

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from kimi_extract.ground import align, fold, leaves_of, normalize
from kimi_extract.ground.forms import acronym_of, surface_forms
from kimi_extract.records import Span

# -- generated documents -------------------------------------------------------------------------

_CJK = [chr(c) for c in range(0x4E00, 0x4E00 + 2000)]
_KANA = [chr(c) for c in range(0x3041, 0x3097)] + [chr(c) for c in range(0x30A1, 0x30FB)]
_THAI = [chr(c) for c in range(0x0E01, 0x0E2F)]


def _word(rng: random.Random, low: int = 3, high: int = 9) -> str:
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(low, high)))


@dataclass
class Doc:
    text: str
    #: (value, start): values placed at known offsets, each occurring once in the text
    placed: list[tuple[str, int]]
    script: str


class _Builder:
    def __init__(self) -> None:
        self.parts: list[str] = []
        self.size = 0
        self.placed: list[tuple[str, int]] = []

    def add(self, piece: str) -> None:
        self.parts.append(piece)
        self.size += len(piece)

    def place(self, value: str) -> None:
        self.placed.append((value, self.size))
        self.add(value)

    def text(self) -> str:
        return "".join(self.parts)


def _filler(rng: random.Random, script: str, vocab: list[str]) -> str:
    if script == "en":
        words = [rng.choice(vocab) for _ in range(rng.randint(3, 12))]
        return " " + " ".join(words) + rng.choice((". ", ", ", ".\n", " "))
    if script == "zh":
        return "".join(rng.choice(_CJK[:300]) for _ in range(rng.randint(4, 15))) + rng.choice(
            "，。、"
        )
    if script == "ja":
        pool = _KANA[:60] + _CJK[:150]
        return "".join(rng.choice(pool) for _ in range(rng.randint(4, 15))) + rng.choice("、。")
    # mixed: English words, CJK, Thai, full-width digits
    choice = rng.randrange(4)
    if choice == 0:
        return " " + " ".join(rng.choice(vocab) for _ in range(rng.randint(2, 6))) + " "
    if choice == 1:
        return "".join(rng.choice(_CJK[:300]) for _ in range(rng.randint(3, 10))) + "。"
    if choice == 2:
        return "".join(rng.choice(_THAI) for _ in range(rng.randint(3, 10))) + " "
    return "".join(chr(0xFF10 + rng.randrange(10)) for _ in range(rng.randint(1, 4))) + "、"


def _value(rng: random.Random, script: str) -> str:
    if script == "en" or (script == "mixed" and rng.random() < 0.4):
        return " ".join(_word(rng, 4, 9).capitalize() for _ in range(rng.randint(1, 3)))
    if script == "zh":
        return "".join(rng.choice(_CJK[:300]) for _ in range(rng.randint(4, 10)))
    if script == "ja":
        return "".join(rng.choice(_KANA[60:]) for _ in range(rng.randint(4, 10)))
    if rng.random() < 0.5:
        return "".join(rng.choice(_THAI) for _ in range(rng.randint(5, 10)))
    return "".join(rng.choice(_CJK[300:600]) for _ in range(2)) + _word(rng, 3, 6).upper()


def make_doc(seed: int, script: str, values: int = 12, fillers: int = 60) -> Doc:
    """A document of filler with ``values`` values placed at known offsets (each unique)."""
    rng = random.Random(seed)
    vocab = [_word(rng) for _ in range(300)]
    builder = _Builder()
    slots = sorted(rng.sample(range(fillers), values))
    for index in range(fillers):
        builder.add(_filler(rng, script, vocab))
        if slots and slots[0] == index:
            slots.pop(0)
            builder.add(" " if script in ("en", "mixed") else "")
            builder.place(_value(rng, script))
            builder.add(" " if script in ("en", "mixed") else "")
    text = builder.text()
    folded = fold(text)
    placed = [
        (value, start)
        for value, start in builder.placed
        if text.count(value) == 1 and folded.count(fold(value)) == 1
    ]
    return Doc(text, placed, script)


SCRIPTS = ("en", "zh", "ja", "mixed")

# -- exact values ----------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), script=st.sampled_from(SCRIPTS))
def test_exact_values_are_found_at_their_offsets(seed, script):
    doc = make_doc(seed, script)
    leaves = [(f"v[{i}]", value) for i, (value, _) in enumerate(doc.placed)]
    spans = align(doc.text, leaves)
    for span, (value, start) in zip(spans, doc.placed, strict=True):
        assert (span.kind, span.start, span.end) == ("exact", start, start + len(value)), span
        assert doc.text[span.start : span.end] == value
        assert span.score == 100.0


def test_a_repeated_value_takes_the_next_free_occurrence():
    text = "Qty 1 of Widget; qty 1 of Gadget; qty 1 of Widget."
    spans = align(text, [("a", "Widget"), ("b", "Widget"), ("c", "Widget")])
    first, second = text.find("Widget"), text.rfind("Widget")
    assert [s.start for s in spans[:2]] == [first, second]
    assert spans[2].start in (first, second)  # every occurrence is taken: reused, still grounded


# -- perturbed values ------------------------------------------------------------------------------


def _full_width(value: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in value)


def _perturb(rng: random.Random, value: str, kind: str) -> str | None:
    if kind == "case":
        changed = value.swapcase() if rng.random() < 0.5 else value.upper()
        return changed if changed != value else None
    if kind == "spacing":
        if " " in value:
            return value.replace(" ", rng.choice(("", "  ", "\n")), 1)
        return value[:2] + " " + value[2:]
    if kind == "width":
        changed = _full_width(value)
        return changed if changed != value else None
    # typo: one character in the middle replaced (only values long enough to be fuzzy-matched)
    if len(unicodedata.normalize("NFC", fold(value))) < 10:
        return None
    middle = len(value) // 2
    while value[middle].isspace():
        middle += 1
    replacement = "q" if value[middle].casefold() != "q" else "z"
    return value[:middle] + replacement + value[middle + 1 :]


_EXPECTED_KIND = {"case": "normalized", "spacing": "normalized", "width": "normalized"}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    script=st.sampled_from(SCRIPTS),
    kind=st.sampled_from(("case", "spacing", "width", "typo")),
)
def test_perturbed_values_are_found_with_the_right_kind(seed, script, kind):
    doc = make_doc(seed, script, values=8)
    rng = random.Random(seed)
    cases = []
    for value, start in doc.placed:
        changed = _perturb(rng, value, kind)
        if changed is not None and changed != value and changed not in doc.text:
            cases.append((changed, value, start))
    spans = align(doc.text, [(f"v[{i}]", c[0]) for i, c in enumerate(cases)])
    for span, (changed, value, start) in zip(spans, cases, strict=True):
        if kind == "typo":
            # a replaced Chinese or Japanese character is another word: near, never grounded
            middle = len(value) // 2
            while value[middle].isspace():
                middle += 1
            cjk = "\u3040" <= value[middle] <= "\u30ff" or "\u4e00" <= value[middle] <= "\u9fff"
            if cjk:
                assert span.kind == "near" and span.diff, (changed, value, span)
                continue
            assert span.kind == "fuzzy", (changed, value, span)
            assert 0 < span.score <= 100
            overlap = min(span.end, start + len(value)) - max(span.start, start)
            assert overlap >= 0.8 * len(value), (span, value, doc.text[span.start : span.end])
        else:
            assert span.kind == _EXPECTED_KIND[kind], (changed, value, span)
            assert (span.start, span.end) == (start, start + len(value)), (changed, span)


def test_full_width_digits_and_punctuation_and_cjk_spacing():
    text = "合同编号：ＡＢ－１２３４５，金额１，２００．５０元。签约方：北 京 字 节 跳 动。"
    spans = align(
        text,
        [("no", "AB-12345"), ("amount", "1200.5"), ("party", "北京字节跳动"), ("colon", "编号:")],
    )
    got = {s.path: (s.kind, text[s.start : s.end]) for s in spans if s.start is not None}
    assert got == {
        "no": ("normalized", "ＡＢ－１２３４５"),
        "amount": ("normalized", "１，２００．５０"),
        "party": ("normalized", "北 京 字 节 跳 动"),
        "colon": ("normalized", "编号："),
    }


def test_japanese_half_width_katakana_and_thai():
    text = "株式会社ｻﾝﾌﾟﾙの契約。ผู้ซื้อคือบริษัทตัวอย่าง จำกัด"
    spans = align(text, [("ja", "サンプル"), ("th", "บริษัทตัวอย่าง")])
    assert [(s.kind, text[s.start : s.end]) for s in spans] == [
        ("normalized", "ｻﾝﾌﾟﾙ"),
        ("exact", "บริษัทตัวอย่าง"),
    ]


# -- numbers and dates ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text", "expected"),
    [
        ("1200.5", "Total: USD 1,200.50 due", ("exact", "1,200.50")),
        ("1200.5", "Summe 1.200,50 EUR", ("exact", "1.200,50")),
        ("1200.5", "合计１，２００．５０元", ("normalized", "１，２００．５０")),
        ("1200", "paid 1 200 in cash", ("normalized", "1 200")),
        ("-42.1", "loss of (42.10) this year", ("exact", "(42.10)")),
        ("2024-03-05", "signed on 5 March 2024 in", ("exact", "5 March 2024")),
        ("2024-03-05", "signed on March 5th, 2024.", ("exact", "March 5th, 2024")),
        ("2024-03-05", "于2024年3月5日签署", ("exact", "2024年3月5日")),
        ("2024-03-05", "于２０２４年３月５日签署", ("normalized", "２０２４年３月５日")),
        ("2024-03-05", "DATED 05-MAR-2024", ("normalized", "05-MAR-2024")),
        ("2024-03-05T14:30:00", "at 2024-03-05 14:30 UTC", ("exact", "2024-03-05 14:30")),
    ],
)
def test_numbers_and_dates_are_found_in_their_written_forms(value, text, expected):
    (span,) = align(text, [("x", value)])
    assert (span.kind, text[span.start : span.end]) == expected
    assert span.value == expected[1] or span.kind == "normalized"


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("200.5", "Total: 1,200.50"),
        ("1200", "Total: 1,200.50"),
        ("1200.55", "Total: 1,200.50"),
        ("1200.5", "Total: 21,200.50"),
        ("5", "page 15 of 25, 5.5 kg"),
        ("2024-03-06", "signed on 5 March 2024"),
        ("2024-03-05", "signed on 15 March 2024"),
        ("art", "the start of it"),
        ("Acme", "Acmeology Inc"),
    ],
)
def test_a_number_date_or_word_inside_a_longer_one_is_not_grounded(value, text):
    (span,) = align(text, [("x", value)])
    assert span == Span("x", value), span


def test_surface_forms_list_the_value_first():
    assert surface_forms("1200.5")[0] == "1200.5"
    assert "1,200.50" in surface_forms("1200.5")
    assert "2024年3月5日" in surface_forms("2024-03-05")
    assert surface_forms("Acme") == ["Acme"]


# -- absent values --------------------------------------------------------------------------------


def _absent_values(rng: random.Random, doc: Doc, script: str, count: int) -> list[str]:
    found: list[str] = []
    folded = fold(doc.text)
    while len(found) < count:
        if script in ("en", "mixed") and rng.random() < 0.5:
            value = " ".join(_word(rng, 5, 9).capitalize() for _ in range(rng.randint(1, 3)))
        elif rng.random() < 0.2:
            value = f"{rng.randint(1000, 999999) / 100:.2f}"
        else:
            value = _value(rng, script)
        # a value of capitalised words is found as its acronym ("Free Software Foundation"
        # finds "FSF"): one whose acronym the text has ("JYD") is not absent
        acronym = acronym_of(value)
        if acronym is not None and re.search(
            rf"(?<![A-Za-z0-9]){acronym}(?![A-Za-z0-9])", doc.text
        ):
            continue
        if fold(value) not in folded:
            found.append(value)
    return found


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), script=st.sampled_from(SCRIPTS))
@example(seed=65416663, script="mixed")  # "Jznceuyi Yzet Danyfiy" and the text's "JYD"
def test_values_absent_from_the_text_never_get_a_span(seed, script):
    doc = make_doc(seed, script, values=6, fillers=120)
    values = _absent_values(random.Random(seed ^ 0x5EED), doc, script, 20)
    spans = align(doc.text, [(f"a[{i}]", v) for i, v in enumerate(values)])
    # a "near" span (a close text that differs, with its diff) is no grounding: random kana
    # strings are at times a character away from the text's
    grounded = [
        (s.value, doc.text[s.start : s.end], s.score)
        for s in spans
        if s.kind not in ("none", "near") or (s.kind == "near" and not s.diff)
    ]
    assert not grounded


def test_absent_values_stay_absent_in_a_long_document():
    """The indexed fuzzy stage (texts past 20,000 folded characters) does not ground them either."""
    doc = make_doc(7, "en", values=20, fillers=4000)
    assert len(doc.text) > 100_000
    values = _absent_values(random.Random(1), doc, "en", 200)
    spans = align(doc.text, [(f"a[{i}]", v) for i, v in enumerate(values)])
    assert [s for s in spans if s.kind != "none"] == []
    typos = [(f"t[{i}]", v[:-3] + "q" + v[-2:]) for i, (v, _) in enumerate(doc.placed)]
    typos = [t for t in typos if len(fold(t[1])) >= 10]
    found = align(doc.text, typos)
    assert typos and all(s.kind == "fuzzy" for s in found), found


# -- normalisation and leaves ---------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_normalized_offsets_map_back_to_the_characters_that_folded(text):
    normalized = normalize(text)
    assert normalized.text == fold(text)
    assert len(normalized.origin) == len(normalized.text)
    for i in range(len(normalized.text)):
        start, end = normalized.to_original(i, i + 1)
        assert normalized.text[i] in fold(text[start:end])


def test_fold_drops_spacing_and_folds_width_and_case():
    assert fold("ＡＣＭＥ　Ｃｏｒｐ．") == fold("acme corp.") == "acmecorp."
    assert fold("“Straße” – 北京\u200b") == '"strasse"-北京'
    assert fold("が") != fold("か")


class Kind(Enum):
    A = "alpha"


class Address(BaseModel):
    city: str
    zip: int | None = None


class Item(BaseModel):
    name: str
    price: float
    when: date | None = None


class Answer(BaseModel):
    vendor: str
    ok: bool
    kind: Kind
    total: Decimal
    items: list[Item]
    address: Address
    extra: dict[str, str]


def test_leaves_of_walks_models_lists_and_dicts_in_field_order():
    answer = Answer(
        vendor="Acme",
        ok=True,
        kind=Kind.A,
        total=Decimal("1200.50"),
        items=[Item(name="bolt", price=1e20), Item(name="nut", price=0.5, when=date(2024, 3, 5))],
        address=Address(city="Paris"),
        extra={"po number": "X1", "ref": "Y2"},
    )
    assert leaves_of(answer) == [
        ("vendor", "Acme"),
        ("kind", "alpha"),
        ("total", "1200.50"),
        ("items[0].name", "bolt"),
        ("items[0].price", "100000000000000000000"),
        ("items[1].name", "nut"),
        ("items[1].price", "0.5"),
        ("items[1].when", "2024-03-05"),
        ("address.city", "Paris"),
        ('extra["po number"]', "X1"),
        ("extra.ref", "Y2"),
    ]
    assert leaves_of({"a": [1, None, {"b": "c"}]}) == [("a[0]", "1"), ("a[2].b", "c")]


def test_span_round_trips_through_a_dict():
    span = Span("items[0].name", "bolt", 3, 7, "fuzzy", 91.5, page=2, boxes=((1, 2, 3, 4),))
    assert Span.from_dict(span.to_dict()) == span
    assert span.to_dict()["boxes"] == [[1.0, 2.0, 3.0, 4.0]]
    assert not Span("x", "y").grounded and span.grounded


@settings(max_examples=300, deadline=None)
@given(
    haystack=st.text(alphabet="ab", max_size=40),
    needle=st.text(alphabet="ab", min_size=1, max_size=3),
    data=st.data(),
)
def test_occurrences_come_forward_first_by_weighted_distance(haystack, needle, data):
    """The bounded backward search yields exactly the order its definition gives."""
    from kimi_extract.ground.align import BACKWARD as _BACKWARD
    from kimi_extract.ground.search import occurrences

    anchor = data.draw(st.integers(0, len(haystack)))
    starts = [i for i in range(len(haystack)) if haystack.startswith(needle, i)]
    forward = [i for i in starts if i >= anchor]
    backward = [i for i in reversed(starts) if i < anchor]
    expected = []
    while forward or backward:
        if not backward or (forward and forward[0] - anchor <= _BACKWARD * (anchor - backward[0])):
            expected.append(forward.pop(0))
        else:
            expected.append(backward.pop(0))
    assert list(occurrences(haystack, needle, anchor, _BACKWARD)) == expected
    assert list(occurrences(haystack, needle, None, _BACKWARD)) == starts


def test_values_in_text_order_take_successive_occurrences():
    text = "Item: bolt, qty 2. Item: nut, qty 2. Item: washer, qty 2. Item: nut, qty 5."
    leaves = [("a[0].name", "bolt"), ("a[0].qty", "2"), ("a[1].name", "nut"), ("a[1].qty", "2")]
    leaves += [("a[2].name", "washer"), ("a[2].qty", "2"), ("a[3].name", "nut")]
    leaves += [("a[3].qty", "5")]
    spans = align(text, leaves)
    starts = [s.start for s in spans]
    assert starts == sorted(starts)  # each value after the one before it
    assert [text[s.start : s.end] for s in spans] == [v for _, v in leaves]
    assert len({s.start for s in spans}) == len(spans)


def test_two_edits_in_a_short_value_are_not_a_typo():
    """Scored by Levenshtein similarity (81.8 here); RapidFuzz's Indel ratio gives 90.9."""
    (span,) = align("We stood against many odds that year.", [("x", "against, May")])
    # not grounded: at most shown as a near miss, with what differs
    assert span.kind in ("none", "near") and not span.grounded, span
    assert span.kind == "none" or span.diff


def test_a_fuzzy_match_covers_whole_words():
    text = "Invoice: Acme Corporation, Lyon"
    # a typo: fuzzy; a last word cut short: a boundary rewrite (normalized); both whole words
    for value, kind in (("Xcme Corporation", "fuzzy"), ("Acme Corporatio", "normalized")):
        (span,) = align(text, [("x", value)])
        assert (span.kind, text[span.start : span.end]) == (kind, "Acme Corporation")
        assert 0 < span.score <= 100 and span.diff is None


def test_short_values_are_never_fuzzy_even_with_a_low_threshold():
    (short,) = align("Signed by Acne.", [("x", "Acme")], min_score=70)
    (long,) = align("Signed by Acme Corporatoin.", [("x", "Acme Corporation")], min_score=70)
    assert (short.kind, long.kind) == ("none", "fuzzy")


def test_the_next_item_of_a_list_is_searched_after_the_previous_one_ends():
    text = "New York office; York branch"
    spans = align(text, [("a[0]", "New York"), ("a[1]", "York")])
    assert [s.start for s in spans] == [0, text.rfind("York")]


def test_a_field_inside_another_fields_span_is_found_there():
    # one object: the city inside the address is the nearest occurrence, not the later one
    text = "Ship to: 5 Main St, Springfield. Springfield office closed."
    spans = align(text, [("address", "5 Main St, Springfield"), ("city", "Springfield")])
    assert spans[1].start == text.find("Springfield")


def test_an_occurrence_held_by_an_earlier_leaf_is_passed_over_for_a_free_one():
    text = "A: Widget. B: Widget."
    spans = align(text, [("x", "Widget"), ("y", "A:"), ("z", "Widget")])
    assert [s.start for s in spans] == [3, 0, 14]


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    records=st.integers(4, 12),
    order=st.permutations(["maintainer", "package", "version", "urgency"]),
)
def test_repeated_fields_in_schema_order_take_their_own_records_occurrence(data, records, order):
    # Debian-changelog-like records: the package is unique, the other fields repeat across
    # records; the answer lists the records in text order and each record's fields in the
    # schema's order, not the text's
    names = ["Matthias Klumpp", "Simon McVittie", "Jeremy Bicha"]
    rows = []
    parts = []
    for r in range(records):
        row = {
            "maintainer": data.draw(st.sampled_from(names)),
            "package": f"libpkg{r}x",
            "version": data.draw(st.sampled_from(["1.2-1", "1.2-2", "2.0-1"])),
            "urgency": data.draw(st.sampled_from(["medium", "low"])),
        }
        rows.append(row)
        parts.append(
            f" -- {row['maintainer']} maintains {row['package']} ({row['version']}) "
            f"unstable; urgency={row['urgency']}\n"
        )
    text = "".join(parts)
    starts = [sum(len(p) for p in parts[:r]) for r in range(records + 1)]
    leaves = [(f"entries[{r}].{name}", rows[r][name]) for r in range(records) for name in order]
    spans = align(text, leaves)
    for (path, _), span in zip(leaves, spans, strict=True):
        r = int(path.split("[")[1].split("]")[0])
        assert span.start is not None and starts[r] <= span.start < starts[r + 1], (path, span)
