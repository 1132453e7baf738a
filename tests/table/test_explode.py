"""explode: one row per list item, source columns kept, accounting never double-counted."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from pydantic import BaseModel

from kimi_extract.exceptions import InputError
from kimi_extract.run.documents import merge_values
from kimi_extract.table.columns import ADDITIVE_COLUMNS
from kimi_extract.table.explode import explode

from ..conftest import chat_requests, usage_sum


class Address(BaseModel):
    city: str


class Line(BaseModel):
    product: str
    qty: int
    ship_to: Address | None = None


class Invoice(BaseModel):
    supplier: str | None
    lines: list[Line]


class Tags(BaseModel):
    tags: list[str]


ITEMS = {
    "a.txt": [("beans", 2), ("cups", 10), ("filters", 3)],
    "b.txt": [("milk", 6)],
    "c.txt": [],  # the model found no lines
}


def invoice_responder(request: Any) -> Any:
    name = request.user_text.split("Document: ", 1)[1].split()[0]
    lines = [
        {"product": p, "qty": q, "ship_to": {"city": "Lyon"} if q > 5 else None}
        for p, q in ITEMS[name]
    ]
    return {"supplier": f"supplier of {name}", "lines": lines}


@pytest.fixture
def sources(tmp_path: Path) -> pd.DataFrame:
    for name in ITEMS:
        (tmp_path / name).write_text(f"invoice {name}", encoding="utf-8")
    paths = [str(tmp_path / n) for n in ("a.txt", "b.txt", "c.txt", "gone.txt")]
    return pd.DataFrame({"path": paths, "batch": [1, 2, 3, 4]}, index=["A", "B", "C", "D"])


def test_explode_documents_one_row_per_item_with_exact_accounting(sim, make_extractor, sources):
    sim.responder = invoice_responder
    ex = make_extractor(Invoice)
    out = ex.run_documents(sources, explode="lines")

    # 3 + 1 items, plus one row for the empty list and one for the unreadable document.
    assert len(out) == 6
    assert list(out.index) == ["A", "A", "A", "B", "C", "D"]
    assert out["batch"].tolist() == [1, 1, 1, 2, 3, 4]
    assert [Path(s).name for s in out["kx_source"]] == [
        "a.txt",
        "a.txt",
        "a.txt",
        "b.txt",
        "c.txt",
        "gone.txt",
    ]
    assert out["kx_item"].tolist()[:4] == [0, 1, 2, 0]
    assert out["kx_item"].isna().tolist() == [False] * 4 + [True, True]
    assert out["product"].tolist()[:4] == ["beans", "cups", "filters", "milk"]
    assert out["qty"].dtype == "Int64" and out["qty"].tolist()[:4] == [2, 10, 3, 6]
    assert out["ship_to"].tolist()[:4] == [None, {"city": "Lyon"}, None, {"city": "Lyon"}]
    assert "lines" not in out.columns
    assert out["supplier"].tolist()[:3] == ["supplier of a.txt"] * 3
    # The empty list keeps its source: fields empty, the scalar output still there.
    assert pd.isna(out.iloc[4]["product"]) and out.iloc[4]["supplier"] == "supplier of c.txt"
    assert out.iloc[4]["kx_error"] is None
    assert "not found" in out.iloc[5]["kx_error"]

    # Usage sits on each source's first item row; the others hold 0; sums stay exact.
    prompt = out["kx_prompt_tokens"].tolist()
    assert prompt[0] > 0 and prompt[1] == prompt[2] == 0 and prompt[3] > 0 and prompt[4] > 0
    assert prompt[5] == 0  # never sent
    assert out["kx_prompt_tokens"].sum() == usage_sum(sim, "prompt")
    assert out["kx_completion_tokens"].sum() == usage_sum(sim, "completion")
    assert out["kx_reasoning_tokens"].sum() == usage_sum(sim, "reasoning")
    assert out["kx_attempts"].sum() == len(chat_requests(sim)) == 3
    assert ex.last_run is not None
    assert math.isclose(out["kx_cost"].sum(), ex.last_run.usage.cost, rel_tol=1e-9)
    for column in ADDITIVE_COLUMNS:
        if column in out.columns:
            assert (out.loc["A", column].iloc[1:] == 0).all(), column


def test_explode_per_page_keeps_the_page_column(sim, make_extractor, tmp_path):
    (tmp_path / "a.txt").write_text("one\ftwo", encoding="utf-8")

    def responder(request: Any) -> Any:
        page = request.user_text.split("(page ", 1)[1][0]
        return {"supplier": None, "lines": [{"product": f"p{page}", "qty": int(page)}] * 2}

    sim.responder = responder
    out = make_extractor(Invoice).run_documents(tmp_path / "a.txt", per_page=True, explode="lines")
    assert out["kx_page"].tolist() == [1, 1, 2, 2]
    assert out["product"].tolist() == ["p1", "p1", "p2", "p2"]
    assert out["kx_prompt_tokens"].sum() == usage_sum(sim, "prompt")
    assert (out["kx_prompt_tokens"] > 0).tolist() == [True, False, True, False]


def test_explode_a_run_output_and_plain_lists(sim, make_extractor):
    sim.responder = lambda request: {"tags": request.user_text.split()}
    frame = make_extractor(Tags).run(pd.DataFrame({"text": ["red green", "", "blue"]}), text="text")
    out = explode(frame, Tags, "tags")
    assert out["tags"].tolist() == ["red", "green", None, "blue"]
    assert out["text"].tolist() == ["red green", "red green", "", "blue"]
    assert out["kx_item"].tolist()[:2] == [0, 1] and pd.isna(out["kx_item"].iloc[2])
    assert "EmptyInputError" in out["kx_error"].iloc[2]  # the failed row is kept
    assert out["kx_prompt_tokens"].sum() == frame["kx_prompt_tokens"].sum()
    # Without a model the item columns come from the items themselves.
    dicts = pd.DataFrame({"rows": [[{"x": 1}, {"x": 2, "y": 3}], []], "kx_cost": [1.0, 0.5]})
    loose = explode(dicts, None, "rows")
    assert loose["x"].tolist() == [1, 2, None] and loose["y"].tolist() == [None, 3, None]
    assert loose["kx_cost"].tolist() == [1.0, 0.0, 0.5]


def test_bad_explode_requests_fail_before_any_request(sim, make_extractor, tmp_path):
    (tmp_path / "a.txt").write_text("x", encoding="utf-8")
    ex = make_extractor(Invoice)
    with pytest.raises(InputError, match="not a list"):
        ex.run_documents(tmp_path, explode="supplier")
    with pytest.raises(InputError, match="has no field"):
        ex.run_documents(tmp_path, explode="rows")
    sources = pd.DataFrame({"path": [str(tmp_path / "a.txt")], "product": ["clash"]})
    with pytest.raises(InputError, match="item_prefix"):
        ex.run_documents(sources, explode="lines")
    assert chat_requests(sim) == []
    out = ex.run_documents(sources, explode="lines", item_prefix="line_")
    assert {"line_product", "line_qty", "product"} <= set(out.columns)


def test_merge_values_rules_for_chunks():
    assert merge_values([[1, 2], None, [3]]) == [1, 2, 3]
    assert merge_values([None, "first", "second"]) == "first"
    assert merge_values([None, float("nan")]) is None
    merged = merge_values([{"a": None, "b": [1]}, {"a": "x", "b": [2], "c": 0}])
    assert merged == {"a": "x", "b": [1, 2], "c": 0}
