"""``grounding=True`` end to end: every leaf of every answer gets a span in the text that was sent.

Against the simulator's extractive answers (values copied from the user text) and scripted
answers: plain, template and multimodal rows, nested models and lists, English / Chinese /
Japanese, a store rerun, ``explode=``, documents (page offsets; PDF boxes from the text layer),
the file formats, the accessor, Dask's meta and the CLI. The aligner itself:
test_grounding_align.py.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from PIL import Image
from pydantic import BaseModel

import kimi_extract as kx
from kimi_extract.cli import main as cli_main
from kimi_extract.exceptions import ConfigurationError
from kimi_extract.ground import align, leaves_of
from kimi_extract.media.documents import load_pages
from kimi_extract.simulator import Reply, Simulator
from kimi_extract.table.explode import explode
from kimi_extract.table.export import write_table

from ..media.test_documents import samples
from ..table.test_review import page_data


class Address(BaseModel):
    city: str
    street: str


class Party(BaseModel):
    name: str
    address: Address


class Line(BaseModel):
    item: str
    note: str


class Deal(BaseModel):
    seller: Party
    lines: list[Line]
    tags: list[str]


TEXTS = [
    "Vendor: Bolt Supplies Ltd, 14 Harbour Road, Portsmouth. Sold 12 brass hinges and two oak "
    "panels to Globex Corporation of Springfield on 3 March 2024.",
    "供应商：深圳华强电子有限公司，地址：深圳市福田区华强北路一号。买方：北京联想集团，"
    "货物：笔记本电脑十台，交货日期为二零二四年三月三日。",
    "販売者：株式会社山田製作所（大阪府大阪市北区梅田一丁目）。買い手：東京電機株式会社、"
    "品目：精密ねじ五百個とアルミ板二十枚。",
]


def extractive(**options: Any) -> Simulator:
    return Simulator(answers="extractive", **options)


def run(sim: Simulator, texts: list[str], model: type[BaseModel] = Deal, **options: Any):
    options.setdefault("store", False)
    ex = kx.Extractor(model, base_url=sim.base_url, api_key=sim.api_key, progress=False, **options)
    return ex.run(pd.DataFrame({"text": texts}), text="text")


def answers(out: pd.DataFrame, model: type[BaseModel]) -> list[dict[str, Any]]:
    return out[list(model.model_fields)].to_dict("records")


# -- rows ------------------------------------------------------------------------------------------


def test_every_leaf_of_every_row_is_grounded_in_the_text_sent():
    with extractive() as sim:
        out = run(sim, TEXTS, grounding=True)
    assert list(out.columns[-2:]) == ["kx_spans", "kx_grounded"]
    assert out["kx_error"].isna().all()
    later_items = 0
    for text, answer, spans, share in zip(
        TEXTS, answers(out, Deal), out["kx_spans"], out["kx_grounded"], strict=True
    ):
        leaves = leaves_of(answer)
        assert [(s["path"], s["value"]) for s in spans] == leaves  # every leaf, in order
        assert any(p.startswith("seller.address.") for p, _ in leaves)  # nested models
        later_items += any(p.startswith("lines[1].") for p, _ in leaves)  # lists of models
        for s in spans:  # extractive values are copies: all found, exactly, where they are
            assert s["kind"] == "exact" and s["score"] == 100.0, s
            assert text[s["start"] : s["end"]] == s["value"]
            assert s["page"] is None and s["boxes"] == [] and s["quote"] is None
        assert share == 1.0
    assert later_items  # the simulator draws lists of one or more items: some row has two
    assert sim.api_key not in out.to_json(force_ascii=False)


def test_perturbed_values_are_found_with_their_kind():
    with extractive(perturb=1.0, perturb_kinds=("case", "width")) as sim:
        out = run(sim, TEXTS[:1] * 3, grounding=True)
    spans = [s for cell in out["kx_spans"] for s in cell]
    assert {s["kind"] for s in spans} == {"normalized"}
    for s in spans:
        evidence = TEXTS[0][s["start"] : s["end"]]
        assert evidence != s["value"]
        assert kx.ground.fold(evidence) == kx.ground.fold(s["value"])


def test_values_absent_from_the_text_are_unsupported_and_failed_rows_have_no_spans(sim):
    class Pick(BaseModel):
        vendor: str
        city: str

    sim.responder = lambda request: Reply(content={"vendor": "Bolt Supplies", "city": "Reykjavik"})
    out = run(sim, ["Bolt Supplies, Portsmouth", "   "], Pick, grounding=True)
    ok, failed = out.iloc[0], out.iloc[1]
    assert [s["kind"] for s in ok["kx_spans"]] == ["exact", "none"]
    none = ok["kx_spans"][1]
    assert none["start"] is None and none["end"] is None and none["score"] == 0.0
    assert ok["kx_grounded"] == 0.5
    assert failed["kx_error"] and failed["kx_spans"] is None and math.isnan(failed["kx_grounded"])


def test_grounding_off_adds_no_columns_and_sends_the_same_requests():
    bodies = []
    for grounding in (False, True):
        with extractive() as sim:
            out = run(sim, TEXTS[:1], grounding=grounding)
            bodies.append(sim.history[-1].body)
        assert ("kx_spans" in out.columns) is grounding
        assert ("kx_grounded" in out.columns) is grounding
    assert bodies[0] == bodies[1]  # no extra tokens: the request is the same


def test_template_rows_are_grounded_in_the_rendered_text():
    class Who(BaseModel):
        name: str
        place: str

    frame = pd.DataFrame({"who": ["Ada Lovelace", "王小明"], "where": ["London", "上海市"]})
    template = "Person: {who}. Lives in: {where}."
    with extractive() as sim:
        ex = kx.Extractor(
            Who, base_url=sim.base_url, api_key=sim.api_key, progress=False, grounding=True
        )
        out = ex.run(frame, template=template)
        sent = [h.body["messages"][-1]["content"] for h in sim.history if h.status == 200]
    rendered = [template.format(**r) for r in frame.to_dict("records")]
    assert sorted(sent) == sorted(rendered)
    for text, spans in zip(rendered, out["kx_spans"], strict=True):
        assert spans and all(text[s["start"] : s["end"]] == s["value"] for s in spans)
        assert all(s["kind"] == "exact" for s in spans)


def test_rows_with_an_image_are_grounded_in_their_text_part(tmp_path):
    class Who(BaseModel):
        name: str

    picture = tmp_path / "p.png"
    Image.new("RGB", (8, 8), "red").save(picture)
    text = "The photo shows Marie Curie in her laboratory."
    with extractive() as sim:
        ex = kx.Extractor(
            Who, base_url=sim.base_url, api_key=sim.api_key, progress=False, grounding=True
        )
        out = ex.run(
            pd.DataFrame({"text": [text], "img": [str(picture)]}), text="text", images="img"
        )
        content = sim.history[-1].body["messages"][-1]["content"]
    assert isinstance(content, list) and content[-1] == {"type": "text", "text": text}
    (span,) = out["kx_spans"].iloc[0]
    assert span["kind"] == "exact" and text[span["start"] : span["end"]] == span["value"]


def test_a_store_rerun_recomputes_the_same_spans(tmp_path):
    store = tmp_path / "store.sqlite3"
    with extractive(perturb=0.5) as sim:
        first = run(sim, TEXTS, grounding=True, store=store)
        requests = len(sim.history)
        second = run(sim, TEXTS, grounding=True, store=store)
        assert len(sim.history) == requests  # served from the store
    assert second["kx_from_store"].all()
    assert list(second["kx_spans"]) == list(first["kx_spans"])
    assert list(second["kx_grounded"]) == list(first["kx_grounded"])


def test_spans_are_what_the_aligner_gives_for_the_answer():
    with extractive(perturb=0.4, perturb_kinds=("spacing", "typo")) as sim:
        out = run(sim, TEXTS, grounding=True)
    for text, answer, spans in zip(TEXTS, answers(out, Deal), out["kx_spans"], strict=True):
        assert spans == [s.to_dict() for s in align(text, leaves_of(answer))]


def test_a_long_row_is_aligned_in_a_worker_thread(monkeypatch):
    import asyncio

    from kimi_extract.run import grounding

    threaded: list[int] = []

    async def to_thread(func: Any, *args: Any) -> Any:
        threaded.append(len(next(a for a in args if isinstance(a, str))))  # the row's text
        return await asyncio.get_running_loop().run_in_executor(None, func, *args)

    monkeypatch.setattr(grounding.asyncio, "to_thread", to_thread)
    long_text = " ".join([TEXTS[0]] * (grounding.INLINE_CHARS // len(TEXTS[0]) + 1))
    with extractive() as sim:
        out = run(sim, [TEXTS[0], long_text], grounding=True)
    assert threaded == [len(long_text)]
    assert out["kx_grounded"].tolist() == [1.0, 1.0]
    for text, spans in zip([TEXTS[0], long_text], out["kx_spans"], strict=True):
        assert all(text[s["start"] : s["end"]] == s["value"] for s in spans)


def test_grounding_setting_is_checked():
    for bad in (1, "yes", None):
        with pytest.raises(ConfigurationError, match="grounding"):
            kx.ExtractorConfig(grounding=bad)
    assert kx.ExtractorConfig(grounding=True).grounding is True
    assert kx.ExtractorConfig().grounding is False


def test_an_input_holding_kx_spans_clashes_only_with_grounding():
    frame = pd.DataFrame({"text": TEXTS[:1], "kx_spans": ["[]"]})
    with extractive() as sim:
        ex = kx.Extractor(Deal, base_url=sim.base_url, api_key=sim.api_key, progress=False)
        assert "kx_spans" in ex.run(frame, text="text").columns
        grounded = kx.Extractor(
            Deal, base_url=sim.base_url, api_key=sim.api_key, progress=False, grounding=True
        )
        with pytest.raises(kx.InputError, match="kx_spans"):
            grounded.run(frame, text="text")


def test_the_accessor_and_dask_meta_take_grounding():
    pytest.importorskip("dask.dataframe")
    import dask.dataframe as dd

    from kimi_extract.dask import output_meta

    frame = pd.DataFrame({"text": TEXTS})
    with extractive() as sim:
        out = frame.kimi.extract(
            Deal,
            text="text",
            grounding=True,
            base_url=sim.base_url,
            api_key=sim.api_key,
            progress=False,
            store=False,
        )
        ex = kx.Extractor(Deal, base_url=sim.base_url, api_key=sim.api_key, grounding=True)
    assert out["kx_grounded"].eq(1.0).all()
    meta = output_meta(dd.from_pandas(frame, npartitions=1), ex, {"text": "text"})
    assert list(meta.columns) == list(out.columns)
    assert [str(t) for t in meta.dtypes[-2:]] == [str(t) for t in out.dtypes[-2:]]


# -- explode and files -----------------------------------------------------------------------------


def test_exploded_item_rows_carry_their_own_spans():
    with extractive() as sim:
        out = run(sim, TEXTS, grounding=True)
    items = explode(out, Deal, "lines")
    for label, group in items.groupby(level=0, sort=False):
        source = out.loc[label, "kx_spans"]
        carried = [s for cell in group["kx_spans"] for s in cell]
        assert sorted(carried, key=source.index) == source  # each span once, none lost
        for number, cell in zip(group["kx_item"], group["kx_spans"], strict=True):
            mine = [s["path"] for s in cell if s["path"].startswith("lines[")]
            assert mine and all(p.startswith(f"lines[{number}].") for p in mine)
            others = [s for s in cell if not s["path"].startswith("lines[")]
            assert bool(others) == (number == 0)  # fields outside the list: first item row
            assert group.loc[group["kx_item"] == number, "kx_grounded"].iloc[0] == 1.0


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_spans_round_trip_through_files_and_explode_after_reading(tmp_path, suffix):
    with extractive(perturb=0.5) as sim:
        out = run(sim, TEXTS, grounding=True)
    path = tmp_path / f"out{suffix}"
    write_table(out, path)
    back = {
        ".parquet": pd.read_parquet,
        ".csv": pd.read_csv,
        ".jsonl": lambda p: pd.read_json(p, lines=True),
    }[suffix](path)
    cells = [json.loads(c) if isinstance(c, str) else c for c in back["kx_spans"]]
    assert cells == list(out["kx_spans"])
    # explode reads kx_spans as the file gave it (JSON text from .csv / .parquet)
    back["lines"] = [json.loads(c) if isinstance(c, str) else c for c in back["lines"]]
    items = explode(back, Deal, "lines")
    expected = explode(out, Deal, "lines")
    assert list(items["kx_spans"]) == list(expected["kx_spans"])
    assert list(items["kx_grounded"]) == list(expected["kx_grounded"])


def test_run_to_writes_the_spans_of_streamed_rows(tmp_path):
    target = tmp_path / "out.jsonl"
    with extractive() as sim:
        ex = kx.Extractor(
            Deal, base_url=sim.base_url, api_key=sim.api_key, progress=False, grounding=True
        )
        ex.run_to(target, ({"text": t} for t in TEXTS), text="text")
    rows = pd.read_json(target, lines=True)
    for text, spans in zip(TEXTS, rows["kx_spans"], strict=True):
        assert spans and all(text[s["start"] : s["end"]] == s["value"] for s in spans)
    assert rows["kx_grounded"].tolist() == [1.0] * len(TEXTS)


def test_cli_grounding_flag_then_review(tmp_path, capsys):
    examples = Path(__file__).resolve().parents[2] / "examples"
    out = tmp_path / "out.parquet"
    args = ["run", str(examples / "reviews.csv"), "--schema"]
    args += [f"{examples / 'review_schema.py'}:Review", "--text", "review", "--grounding"]
    assert cli_main([*args, "--simulate", "--no-progress", "--out", str(out)]) == 0
    frame = pd.read_parquet(out)
    assert {"kx_spans", "kx_grounded"} <= set(frame.columns)
    spans = [json.loads(cell) for cell in frame["kx_spans"]]
    assert all(cell for cell in spans)
    page = tmp_path / "review.html"
    assert cli_main(["review", str(out), "--html", str(page), "--text", "review"]) == 0
    cards = page_data(page)["cards"]
    assert [len(card["spans"]) for card in cards] == [len(cell) for cell in spans]


# -- documents -------------------------------------------------------------------------------------


class Item(BaseModel):
    name: str
    qty: int


class Invoice(BaseModel):
    vendor: str
    total: float
    items: list[Item]
    note: str


INVOICE = {
    "vendor": "Bolt Supplies Ltd",
    "total": 1200.5,
    "items": [{"name": "Brass hinge", "qty": 12}, {"name": "Oak panel", "qty": 2}],
    "note": "paid by wire in Reykjavik",
}


@pytest.fixture
def invoice(tmp_path: Path) -> Path:
    pytest.importorskip("pypdfium2")
    path = tmp_path / "invoice.pdf"
    samples.write_pdf(
        path,
        [
            [(72, 700, 16, "INVOICE 0042"), (72, 650, 11, "Vendor: Bolt Supplies Ltd")],
            [
                (72, 700, 11, "Brass hinge  x 12"),
                (72, 680, 11, "Oak panel x 2"),
                (300, 640, 11, "Total due: 1,200.50 EUR"),
            ],
        ],
    )
    return path


def char_union(path: Path, page: int, value: str) -> list[float]:
    """The union of ``value``'s character boxes on ``page``, read straight from pypdfium2, in PDF
    points from the top-left corner (as test_review's ``pdf_span``)."""
    import pypdfium2

    pdf = pypdfium2.PdfDocument(str(path))
    try:
        pdf_page = pdf[page - 1]
        height = pdf_page.get_size()[1]
        textpage = pdf_page.get_textpage()
        raw = textpage.get_text_range()
        first = raw.index(value)
        boxes = [textpage.get_charbox(i) for i in range(first, first + len(value))]
        textpage.close()
        pdf_page.close()
    finally:
        pdf.close()
    lefts, bottoms, rights, tops = zip(*boxes, strict=True)
    return [min(lefts), height - max(tops), max(rights), height - min(bottoms)]


@pytest.mark.parametrize(
    "options",
    [{}, {"chunk_pages": 1}, {"per_page": True}],
    ids=["document", "chunked", "per-page"],
)
def test_pdf_spans_carry_page_offsets_and_boxes_over_the_evidence(sim, invoice, options):
    seen: list[str] = []

    def responder(request: Any) -> Reply:
        seen.append(request.user_text)
        return Reply(content=INVOICE)

    sim.responder = responder
    ex = kx.Extractor(
        Invoice, base_url=sim.base_url, api_key=sim.api_key, progress=False, grounding=True
    )
    out = ex.run_documents(invoice, **options)
    assert all("Document: invoice.pdf" in text for text in seen)  # a header was sent too
    texts = {p.number: p.text for p in load_pages(invoice, pdf_mode="text")[1]}
    width, height = samples.PAGE_SIZE
    for page_row, spans in zip(out["kx_page"], out["kx_spans"], strict=True):
        by_path = {s["path"]: s for s in spans}
        assert [s["path"] for s in spans] == [
            "vendor",
            "total",
            *(
                f"items[{i}].{f}"
                for i in range(2)  # chunked: the two chunks report the same items, kept once
                for f in ("name", "qty")
            ),
            "note",
        ]
        for span in spans:
            if span["kind"] == "none":
                assert span["page"] is None and span["boxes"] == []
                continue
            page = span["page"]
            assert pd.isna(page_row) or page == page_row
            assert texts[page][span["start"] : span["end"]] == span["value"]
            assert span["boxes"], span
            for left, top, right, bottom in span["boxes"]:
                assert 0 <= left < right <= width and 0 <= top < bottom <= height
        note = by_path["note"]
        assert note["kind"] == "none" and note["page"] is None
        expected = {"vendor": (1, "Bolt Supplies Ltd"), "total": (2, "1,200.50")}
        if not pd.isna(page_row):  # per page: each page's answer, found on its page only
            expected = {k: v for k, v in expected.items() if v[0] == page_row}
        for path, (page, value) in expected.items():
            span = by_path[path]
            assert (span["page"], span["value"], span["kind"]) == (page, value, "exact")
            (box,) = span["boxes"]  # one line
            assert box == pytest.approx(char_union(invoice, page, value), abs=0.01)
    # every leaf but the note is on a page (per page: each page's answer lacks the other's)
    leaves = out["kx_spans"].map(len)
    if not options.get("per_page"):
        assert list(out["kx_grounded"]) == list((leaves - 1) / leaves)


def test_document_rows_explode_review_and_text_files(sim, tmp_path, invoice):
    sim.responder = lambda request: Reply(content=INVOICE)
    notes = tmp_path / "notes.txt"
    notes.write_text("Cover\fVendor: Bolt Supplies Ltd\nBrass hinge x 12, Oak panel x 2\f", "utf-8")
    ex = kx.Extractor(
        Invoice, base_url=sim.base_url, api_key=sim.api_key, progress=False, grounding=True
    )
    out = ex.run_documents([invoice, notes], explode="items")
    assert list(out["kx_item"]) == [0, 1, 0, 1]
    for source, group in out.groupby("kx_source", sort=False):
        texts = {p.number: p.text for p in load_pages(Path(source), pdf_mode="text")[1]}
        first, second = group["kx_spans"]
        assert [s["path"] for s in first] == [
            "vendor",
            "total",
            "items[0].name",
            "items[0].qty",
            "note",
        ]
        assert [s["path"] for s in second] == ["items[1].name", "items[1].qty"]
        for span in first + second:
            if span["kind"] != "none":
                assert texts[span["page"]][span["start"] : span["end"]] == span["value"]
        vendor = first[0]
        assert vendor["page"] == 2 if source.endswith(".txt") else vendor["page"] == 1
        assert bool(vendor["boxes"]) is source.endswith(".pdf")
    table = tmp_path / "docs.parquet"
    write_table(out, table)
    page = tmp_path / "review.html"
    assert cli_main(["review", str(table), "--html", str(page)]) == 0
    cards = page_data(page)["cards"]
    drawn = [s for card in cards for s in card["spans"] if s["boxes"]]
    highlighted = [s for card in cards for s in card["spans"] if s["sec"] >= 0]
    assert drawn and len(highlighted) == sum(
        s["kind"] != "none" for cell in out["kx_spans"] for s in cell
    )


def test_document_text_column_holds_every_page_text(sim, invoice):
    """The page texts a span indexes are the ones the library read (and sent)."""
    sim.responder = lambda request: Reply(content=INVOICE)
    ex = kx.Extractor(
        Invoice, base_url=sim.base_url, api_key=sim.api_key, progress=False, grounding=True
    )
    out = ex.run_documents(invoice, text_column="text")
    texts = [p.text for p in load_pages(invoice, pdf_mode="text")[1]]
    assert out["text"].iloc[0] == "\n\n".join(texts)
    buffer = io.StringIO()
    out.to_json(buffer)
    assert sim.api_key not in buffer.getvalue()
