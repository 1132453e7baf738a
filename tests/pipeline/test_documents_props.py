"""Guarantees of long-document chunking and merging, as properties over many inputs."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kimi_extract.media.chunks import (
    Page,
    chunk_contexts,
    plan_chunks,
    reach_back,
    split_offsets,
)
from kimi_extract.records import Span
from kimi_extract.run.merge import ChunkAnswer, merge_chunks

WORDS = st.sampled_from(["alpha", "beta", "gamma", "delta", "x", "SKU-001", "12.50", "7"])


@st.composite
def page_texts(draw: Any) -> list[str]:
    """One to four pages of words, separated by spaces, line breaks and blank lines."""
    pages = []
    for _ in range(draw(st.integers(1, 4))):
        parts = draw(st.lists(st.tuples(WORDS, st.sampled_from([" ", "\n", "\n\n", ". "]))))
        pages.append("".join(word + sep for word, sep in parts).strip())
    return pages


@settings(max_examples=300, deadline=None)
@given(texts=page_texts(), chunk_chars=st.integers(20, 300), share=st.floats(0, 0.5))
def test_overlap_never_loses_an_item_wholly_inside_some_chunk(texts, chunk_chars, share):
    overlap = int(chunk_chars * share)
    pages = [Page(n, text) for n, text in enumerate(texts, start=1)]
    chunks = plan_chunks(pages, None, chunk_chars, overlap)
    pieces = [(p.number, p.offset, p.offset + len(p.text)) for chunk in chunks for p in chunk]
    lengths = {1, max(1, overlap // 2), overlap} if overlap else set()
    for page in pages:
        text = page.text
        # every stretch of at most `overlap` characters of a page is whole in one chunk: an
        # item that short is never only cut in two
        for length in lengths:
            for start in range(0, len(text) - length + 1):
                assert any(
                    number == page.number and a <= start and start + length <= b
                    for number, a, b in pieces
                ), (page.number, start, length)
    for chunk in chunks:  # each chunk's pieces are what their page holds there
        for piece in chunk:
            whole = pages[piece.number - 1].text
            assert whole[piece.offset : piece.offset + len(piece.text)] == piece.text
        size = sum(len(p.text) for p in chunk)
        assert size <= chunk_chars + overlap // 4 + 32 + 2 * len(chunk)
    assert len(chunk_contexts(pages, chunks)) == len(chunks)


@settings(max_examples=200, deadline=None)
@given(text=page_texts(), limit=st.integers(5, 200))
def test_split_offsets_cut_within_the_limit_and_keep_every_word(text, limit):
    joined = "\n\n".join(text)
    offsets = split_offsets(joined, limit)
    assert all(0 < b - a <= limit for a, b in offsets)
    assert all(b1 <= a2 for (_, b1), (a2, _) in zip(offsets, offsets[1:], strict=False))
    kept = " ".join(joined[a:b] for a, b in offsets)
    assert kept.split() == joined.split() or limit < max(map(len, joined.split()), default=0)


ITEMS = [{"sku": f"S{n}", "qty": n % 3} for n in range(8)]


@st.composite
def chunk_answers(draw: Any) -> list[ChunkAnswer]:
    """Answers of consecutive chunks listing items of a small pool (so repeats happen), each
    sharing some of its items' text with the chunk before it."""
    answers = []
    for chunk in range(draw(st.integers(1, 5))):
        items = draw(st.lists(st.sampled_from(ITEMS), max_size=6))
        shared = draw(st.lists(st.sampled_from(ITEMS), max_size=3))
        text = "\n".join(f"{i['sku']} qty {i['qty']}" for i in shared)
        total = draw(st.one_of(st.none(), st.integers(0, 3)))
        value = {"total": total, "items": [dict(i) for i in items]}
        answers.append(ChunkAnswer(value, chunk, pages=(chunk + 1,), shared=text))
    return answers


@settings(max_examples=300, deadline=None)
@given(answers=chunk_answers(), dedupe_on=st.sampled_from([None, ("sku",), ()]))
def test_merging_is_idempotent_and_keeps_first_occurrence_order(answers, dedupe_on):
    merged = merge_chunks(answers, dedupe_on=dedupe_on)
    items = merged.value.get("items") or []
    everything = [i for a in answers for i in a.value["items"]]
    assert len(items) + merged.duplicates == len(everything)
    # a subsequence of the items in document order, starting with every item of the first answer
    position = 0
    for found in items:
        while position < len(everything) and everything[position] != found:
            position += 1
        assert position < len(everything), "an item out of first-occurrence order"
        position += 1
    first = answers[0].value["items"]
    assert items[: len(first)] == first
    # merging the merged answer again changes nothing
    again = merge_chunks([ChunkAnswer(merged.value, 0, pages=(1,))], dedupe_on=dedupe_on)
    assert again.value == merged.value and again.duplicates == 0 and again.conflicts == []
    if dedupe_on == ():
        assert merged.duplicates == 0


@st.composite
def listed_documents(draw: Any) -> tuple[list[dict[str, Any]], int, int]:
    """A document of one-line items drawn from a small pool (so identical items recur, side by
    side or apart), a chunk size and an overlap longer than a line."""
    items = draw(st.lists(st.sampled_from(ITEMS), min_size=1, max_size=40))
    chunk_chars = draw(st.integers(40, 160))
    overlap = draw(st.integers(12, chunk_chars // 2))
    return [dict(i) for i in items], chunk_chars, overlap


def _line(item: dict[str, Any]) -> str:
    return f"{item['sku']} qty {item['qty']}"


def _spans(whole: list[tuple[dict[str, Any], int]]) -> dict[str, Span]:
    """Each listed item's values grounded where its line is (page offsets): the sku at the
    line's start, the quantity at its end."""
    spans = {}
    for n, (item, start) in enumerate(whole):
        sku, qty = item["sku"], str(item["qty"])
        at = start + len(_line(item)) - len(qty)
        for name, value, where in (("sku", sku, start), ("qty", qty, at)):
            path = f"items[{n}].{name}"
            spans[path] = Span(path, value, where, where + len(value), "exact", 100.0, page=1)
    return spans


@settings(max_examples=300, deadline=None)
@given(
    document=listed_documents(),
    dedupe_on=st.sampled_from([None, ("sku", "qty")]),
    grounded=st.booleans(),
)
def test_a_perfect_reader_of_overlapping_chunks_gets_every_item_once(document, dedupe_on, grounded):
    """Each chunk lists the items whose line it holds whole (the overlap makes some whole in
    two chunks; with grounding, each value's span is where its line is): the merge gives the
    document's list back, identical items that are different lines kept, in order."""
    items, chunk_chars, overlap = document
    text = "\n".join(_line(i) for i in items)
    starts = [sum(len(_line(i)) + 1 for i in items[:n]) for n in range(len(items))]
    page = Page(1, text)
    chunks = plan_chunks([page], None, chunk_chars, overlap)
    contexts = chunk_contexts([page], chunks)
    answers = []
    for number, (chunk, context) in enumerate(zip(chunks, contexts, strict=True)):
        (piece,) = chunk
        a, b = piece.offset, piece.offset + len(piece.text)
        whole = [
            (i, s) for i, s in zip(items, starts, strict=True) if a <= s and s + len(_line(i)) <= b
        ]
        answers.append(
            ChunkAnswer(
                {"total": None, "items": [dict(i) for i, _ in whole]},
                number,
                pages=(1,),
                spans=_spans(whole) if grounded else None,
                shared=context.shared,
                reach=reach_back(chunks, number),
            )
        )
    keys = list(dedupe_on) if dedupe_on else None
    merged = merge_chunks(answers, dedupe_on=keys, page_base={1: 0})
    assert merged.value["items"] == items
