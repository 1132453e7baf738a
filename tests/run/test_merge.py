"""Merging one document's chunk answers (``kimi_extract.run.merge``), rule by rule."""

from __future__ import annotations

from typing import Any

from kimi_extract.records import Span
from kimi_extract.run.merge import ChunkAnswer, merge_chunks


def located(
    chunk: int, items: list[dict[str, Any]], places: list[dict[str, tuple[int, str]]]
) -> ChunkAnswer:
    """A chunk answer whose item fields were found at ``places`` (field -> (start, kind)) on
    page 1."""
    spans = {}
    for index, (item, where) in enumerate(zip(items, places, strict=True)):
        for name, value in item.items():
            path = f"items[{index}].{name}"
            if name in where:
                start, kind = where[name]
                text = str(value)
                spans[path] = Span(path, text, start, start + len(text), kind, 90.0, page=1)
            else:
                spans[path] = Span(path, str(value))
    return ChunkAnswer({"items": items}, chunk, pages=(1,), spans=spans)


ROW = {"sku": "AB-1", "description": "brass hinge", "quantity": 3}


def test_two_readings_of_one_place_are_one_item_and_their_difference_a_conflict():
    misread = {**ROW, "description": "brass hinqe"}  # a typo the aligner still places there
    first = located(0, [misread], [{"sku": (100, "exact"), "description": (106, "fuzzy")}])
    second = located(
        1,
        [ROW],
        [{"sku": (100, "exact"), "description": (106, "exact"), "quantity": (118, "exact")}],
    )
    merged = merge_chunks([first, second], page_base={1: 0})
    assert merged.value["items"] == [ROW]  # the one with more grounded fields
    assert merged.duplicates == 1
    assert merged.conflicts == [
        {
            "path": "items[0].description",
            "values": ["brass hinge", "brass hinqe"],
            "pages": [[1], [1]],
        }
    ]


def test_the_same_fields_at_two_places_are_two_items():
    first = located(0, [ROW], [{"sku": (100, "exact"), "description": (106, "exact")}])
    second = located(1, [ROW], [{"sku": (400, "exact"), "description": (406, "exact")}])
    merged = merge_chunks([first, second], page_base={1: 0})
    assert merged.value["items"] == [ROW, ROW] and merged.duplicates == 0


def test_a_number_found_at_another_place_does_not_split_an_item():
    wrong = {**ROW, "quantity": 30}  # misread, and "30" happens to be written elsewhere
    first = located(0, [wrong], [{"sku": (100, "exact"), "quantity": (900, "exact")}])
    second = located(1, [ROW], [{"sku": (100, "exact"), "quantity": (118, "exact")}])
    merged = merge_chunks([first, second], page_base={1: 0})
    assert len(merged.value["items"]) == 1 and merged.duplicates == 1
    assert merged.conflicts[0]["path"] == "items[0].quantity"


def test_without_spans_neighbours_merge_only_in_the_text_they_share():
    first = ChunkAnswer({"items": [ROW]}, 0, pages=(1,))
    apart = ChunkAnswer({"items": [ROW]}, 1, pages=(2,), shared="something else entirely")
    assert len(merge_chunks([first, apart]).value["items"]) == 2
    shared = ChunkAnswer({"items": [ROW]}, 1, pages=(2,), shared="AB-1 brass hinge x 3")
    assert len(merge_chunks([first, shared]).value["items"]) == 1
    far = ChunkAnswer({"items": [ROW]}, 2, pages=(3,), shared="AB-1 brass hinge x 3")
    assert len(merge_chunks([first, far]).value["items"]) == 2  # not neighbours


def test_scalar_rules_and_the_items_each_pass_found_first():
    answers = [
        ChunkAnswer({"total": 10.0, "items": [ROW]}, 0, pages=(1,)),
        ChunkAnswer(
            {"total": 12.5, "items": [ROW, {**ROW, "sku": "AB-2"}]},
            1,
            pages=(2,),
            item_pass={"items[1]": 2},
            shared="AB-1 brass hinge 3",
        ),
    ]
    for rule, total in (("first", 10.0), ("last", 12.5), ("all", [10.0, 12.5])):
        merged = merge_chunks(answers, rules={"total": rule})
        assert merged.value["total"] == total
        assert merged.conflicts[0] == {"path": "total", "values": [10.0, 12.5], "pages": [[1], [2]]}
    assert merged.items_by_pass == [1, 1]


def test_a_made_up_item_found_inside_another_does_not_take_its_place():
    real = {"sku": "H-00044", "description": "rope oak seal"}
    made_up = {"sku": "rail rope H", "description": "00044 rope"}  # words of the text
    first = located(0, [real], [{"sku": (100, "exact"), "description": (112, "exact")}])
    # the next chunk lists the made-up item (its description found in the real one's text)
    # and the real one again
    second = located(
        1,
        [made_up, real],
        [{"description": (104, "fuzzy")}, {"sku": (100, "exact"), "description": (112, "exact")}],
    )
    merged = merge_chunks([first, second], page_base={1: 0})
    assert merged.value["items"] == [real, made_up]
    assert merged.duplicates == 1
