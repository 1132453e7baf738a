"""Inferred fields: labels the model chooses (enums, literals, booleans, fields marked
``kx_ground=False``, or named by ``grounding_fields=``) get kind "inferred", count nowhere in
``kx_grounded`` and are never unsupported; free text is grounded as before. The README's
``Review`` example reports no unsupported label.
"""

from __future__ import annotations

import enum
from typing import Literal

import pandas as pd
import pytest
from pydantic import BaseModel, Field

import kimi_extract as kx
from kimi_extract.exceptions import ConfigurationError
from kimi_extract.records import Span
from kimi_extract.run.grounding import ground_row, inferred_paths
from kimi_extract.simulator import Reply, Simulator


class Review(BaseModel):  # the README's
    sentiment: Literal["positive", "negative", "neutral"]
    aspects: list[str]


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Line(BaseModel):
    item: str
    kind: Literal["good", "service"]


class Order(BaseModel):
    buyer: str
    colour: Colour
    paid: bool
    rating: int = Field(json_schema_extra={"kx_ground": False})
    code: Literal["A1", "B2"] = Field(json_schema_extra={"kx_ground": True})
    lines: list[Line]
    note: str | None = None


TEXT = "Order from Globex: 3 crates (goods) and one installation, code A1, paid in full."


def _order() -> Order:
    return Order(
        buyer="Globex",
        colour=Colour.RED,
        paid=True,
        rating=4,
        code="A1",
        lines=[Line(item="crates", kind="good"), Line(item="installation", kind="service")],
    )


def test_labels_are_inferred_and_free_text_is_grounded():
    spans = {s.path: s for s in ground_row(TEXT, _order())}
    assert {p for p, s in spans.items() if s.kind == "inferred"} == {
        "colour",
        "paid",
        "rating",
        "lines[0].kind",
        "lines[1].kind",
    }
    assert spans["paid"].value == "true"  # booleans are listed (inferred)
    assert spans["code"].kind == "exact"  # a literal marked kx_ground=True is grounded
    assert spans["buyer"].kind == spans["lines[1].item"].kind == "exact"
    assert all(s.start is None and s.score == 0 for s in spans.values() if s.inferred)


def test_grounding_fields_include_and_exclude_by_path():
    paths = inferred_paths(_order(), {"colour": True, "buyer": False, "lines": False})
    assert "colour" not in paths and "buyer" in paths
    assert {"lines.item", "lines.kind"} <= paths  # a path covers what is below it
    # the longest named path wins
    assert "lines.item" not in inferred_paths(_order(), {"lines": False, "lines.item": True})


def test_inferred_spans_are_outside_kx_grounded_and_never_unsupported():
    answer = {"sentiment": "negative", "aspects": ["battery", "made-up aspect"]}
    with Simulator(responder=lambda request: Reply(content=answer)) as sim:
        ex = kx.Extractor(
            Review,
            base_url=sim.base_url,
            api_key=sim.api_key,
            grounding=True,
            progress=False,
            store=False,
        )
        out = ex.run(["The battery died in a day."])
    spans = out["kx_spans"].iloc[0]
    assert [s["kind"] for s in spans] == ["inferred", "exact", "none"]
    assert out["kx_grounded"].iloc[0] == 0.5  # of the two aspects; the label not counted


def test_the_readme_review_example_reports_no_unsupported_label():
    with Simulator() as sim:
        ex = kx.Extractor(
            Review,
            grounding=True,
            base_url=sim.base_url,
            api_key=sim.api_key,
            progress=False,
            store=False,
        )
        out = ex.run(pd.read_csv("examples/reviews.csv"), text="review")
    labels = [s for cell in out["kx_spans"] for s in cell if s["path"] == "sentiment"]
    # the review page counts a row as unsupported when one of its spans has kind "none"
    assert len(labels) == len(out) and {s["kind"] for s in labels} == {"inferred"}


@pytest.mark.parametrize(
    "fields",
    [{"nope": False}, {"sentiment": "yes"}, ["sentiment"], {"": True}],
)
def test_bad_grounding_fields_are_refused_before_any_request(fields):
    with pytest.raises(ConfigurationError, match="grounding_fields"):
        kx.Extractor(Review, grounding=True, grounding_fields=fields, api_key="k" * 20)


def test_an_old_table_without_the_new_fields_still_reads():
    old = {"path": "a", "value": "x", "start": 0, "end": 1, "kind": "exact", "score": 100.0}
    span = Span.from_dict(old)
    assert span.diff is None and span.grounded and not span.inferred
    assert Span.from_dict(span.to_dict()) == span
