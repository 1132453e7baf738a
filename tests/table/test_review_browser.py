"""The review page in a real browser: headless Chromium driven over the DevTools protocol
(tests/cdp.py). Without a browser these tests skip locally and fail in CI (``KX_REQUIRE_BROWSER``
or ``CI`` set; ``.ci/run`` installs Debian's ``chromium``).

The screenshot test saves ``review.png`` under its tmp dir; set ``KX_REVIEW_PNG=path`` to copy it
there (``KX_REVIEW_PNG=notebooks/review.png pytest -q tests/table/test_review_browser.py -k
screenshot`` refreshes the picture notebook 02 and docs/grounding.md embed).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from pydantic import BaseModel

import kimi_extract as kx

from ..cdp import Browser, browser_session
from .test_review import HOSTILE, frame, make_invoice_pdf, pdf_span, span


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    yield from browser_session()


@pytest.fixture
def page(browser: Browser) -> Iterator[Browser]:
    """The browser with its problem list emptied; the test fails if the page logged any."""
    browser.clear_events()
    yield browser


def show(browser: Browser, path: Path) -> float:
    """Open a review page and wait until its first cards are rendered; seconds it took."""
    took = browser.open(path)
    browser.wait_for("document.querySelectorAll('.card.rendered').length > 0")
    return took


MIXED = [
    "Invoice 2024-03-01 from ACME Corp, total 1,234.50 EUR.",
    "发票号码：ＦＰ－２０２４０３０１，供应商：上海明德贸易有限公司，金额：￥12,800.00 元。",
    "請求書：株式会社サクラ電機 御中　合計金額 ５４，０００円（税込）",
    "Mixed 混合 text: 东京 Tokyo 😀 office, contact 山田太郎 (yamada@example.jp)",
]
LEAVES = [
    [("vendor", "ACME Corp"), ("date", "2024-03-01"), ("total", "1,234.50")],
    [
        ("vendor", "上海明德贸易有限公司"),
        ("number", "ＦＰ－２０２４０３０１"),
        ("total", "12,800.00"),
    ],
    [("vendor", "株式会社サクラ電機"), ("total", "５４，０００円")],
    [("city", "Tokyo"), ("contact", "山田太郎"), ("email", "yamada@example.jp")],
]

HIGHLIGHTS = """(() => {
  const out = {};
  document.querySelectorAll('.card.rendered').forEach(card => {
    const got = {};
    card.querySelectorAll('mark[data-spans]').forEach(mark => {
      mark.getAttribute('data-spans').split(' ').forEach(k => {
        got[k] = (got[k] || '') + mark.textContent;
      });
    });
    out[card.getAttribute('data-card')] = got;
  });
  return out;
})()"""


def test_highlights_sit_on_the_right_characters(page, tmp_path):
    df = frame(MIXED, LEAVES)
    # An overlapping span (the whole vendor line of row 0) splits marks: each span still reads
    # back exactly its characters.
    overlap = span(MIXED[0], "from ACME Corp", "vendor_phrase")
    df["kx_spans"] = pd.Series([[*df.at[0, "kx_spans"], overlap], *df["kx_spans"][1:]])
    out = kx.review(df, tmp_path / "r.html", text_column="text")
    show(page, out)
    found = page.evaluate(HIGHLIGHTS)
    for row, (text, spans) in enumerate(zip(MIXED, df["kx_spans"], strict=True)):
        expected = {str(k): text[s["start"] : s["end"]] for k, s in enumerate(spans)}
        assert found[str(row)] == expected, row
    # Hovering a highlight names its field.
    title = page.evaluate('document.querySelector(\'[data-card="1"] mark[data-spans="0"]\').title')
    assert title.startswith("vendor: 上海明德贸易有限公司 (exact")
    assert page.problems() == []


def test_clicking_a_highlight_selects_its_field(page, tmp_path):
    out = kx.review(frame(MIXED, LEAVES), tmp_path / "r.html", text_column="text")
    show(page, out)
    selected = "[...document.querySelectorAll('tr.selected')].map(r => r.textContent)"
    assert page.evaluate(selected) == []
    page.click('[data-card="1"] mark[data-spans="1"]')
    assert page.evaluate(selected) == ["numberＦＰ－２０２４０３０１exact"]
    mark = "document.querySelector('mark.selected').textContent"
    assert page.evaluate(mark) == "ＦＰ－２０２４０３０１"
    # Clicking a field row selects its highlight; the earlier selection goes.
    page.click('[data-card="1"] tr[data-span="2"]')
    assert page.evaluate(selected) == ["total12,800.00exact"]
    assert page.evaluate(mark) == "12,800.00"
    assert page.problems() == []


def test_a_script_in_the_data_stays_text(page, tmp_path):
    text = f"ACME {HOSTILE} <img src=x onerror=\"console.error('pwned');window.__pwned=2\">"
    df = frame([text], [[("vendor", "ACME"), ("payload", HOSTILE)]])
    df.index = pd.Index([HOSTILE])
    df["kx_error"] = [HOSTILE]
    df["note"] = [HOSTILE]
    out = kx.review(df, tmp_path / "r.html", text_column="text", title=HOSTILE)
    show(page, out)
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.evaluate("document.scripts.length") == 2
    assert page.evaluate("document.images.length") == 0
    assert page.evaluate("document.querySelectorAll('b').length") == 0
    assert page.evaluate("document.querySelector('.text').textContent") == text
    assert page.evaluate("document.querySelector('.card .error').textContent") == HOSTILE
    assert page.evaluate("document.title") == HOSTILE
    cells = page.evaluate("[...document.querySelectorAll('td.value')].map(td => td.textContent)")
    assert cells.count(HOSTILE) == 2  # the payload field's value and the note column
    # The payload is highlighted as the evidence of its field, still as text.
    assert page.evaluate("document.querySelector('mark[data-spans=\"1\"]').textContent") == HOSTILE
    assert page.problems() == []


def test_ten_thousand_rows_render_lazily(page, tmp_path):
    n = 10_000
    texts = [f"Order {i}: ACME Corp ships {i % 97} cups to Hall {i % 13}." for i in range(n)]
    df = frame(texts, [[("vendor", "ACME Corp"), ("hall", f"Hall {i % 13}")] for i in range(n)])
    errors = df.index % 10 == 0
    df.loc[errors, "kx_error"] = "ValidationFailedError: reasked twice"
    out = kx.review(df, tmp_path / "big.html", text_column="text")
    took = show(page, out)
    assert took < 15, took  # "did not hang": about 0.5 s here
    rendered = "document.querySelectorAll('.card.rendered').length"
    assert page.evaluate("document.querySelectorAll('.slot').length") == n
    assert 0 < page.evaluate(rendered) <= 40
    page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight / 2)")
    page.wait_for("document.querySelector('.card.rendered[data-card=\"5000\"]') !== null")
    assert page.evaluate(rendered) <= 40  # the cards scrolled past were emptied
    assert page.evaluate("document.querySelector('[data-card=\"0\"]')") is None
    # The errors filter keeps 1,000 cards, the search box narrows further.
    page.click("#f-errors")
    assert page.evaluate("document.getElementById('kx-shown').textContent") == (
        "1,000 of 10,000 shown"
    )
    page.evaluate(
        "const q = document.getElementById('f-query'); q.value = 'hall 7';"
        "q.dispatchEvent(new Event('input'))"
    )
    expected = sum(1 for i in range(0, n, 10) if i % 13 == 7)
    page.wait_for(
        f"document.getElementById('kx-shown').textContent === '{expected:,} of 10,000 shown'"
    )
    assert page.problems() == []


def test_keyboard_moves_between_visible_cards(page, tmp_path):
    df = frame(MIXED, LEAVES)
    df.loc[[1, 3], "kx_error"] = "boom"
    out = kx.review(df, tmp_path / "r.html", text_column="text")
    show(page, out)
    current = "document.querySelector('.card.current').getAttribute('data-card')"
    page.key("j")
    assert page.evaluate(current) == "0"
    page.key("j")
    page.key("ArrowDown")
    assert page.evaluate(current) == "2"
    page.key("k")
    assert page.evaluate(current) == "1"
    page.click("#f-errors")  # only cards 1 and 3 remain
    page.evaluate("document.activeElement.blur()")
    page.key("j")
    assert page.evaluate(current) == "3"
    page.key("k")
    assert page.evaluate(current) == "1"
    assert page.problems() == []


INK = """(() => {
  // Dark pixels of the page image under each evidence box, and in a blank strip below it.
  const img = document.querySelector('.pagewrap img');
  const canvas = document.createElement('canvas');
  canvas.width = img.naturalWidth; canvas.height = img.naturalHeight;
  const ctx = canvas.getContext('2d', {willReadFrequently: true});
  ctx.drawImage(img, 0, 0);
  const frame = img.getBoundingClientRect();
  const sx = img.naturalWidth / frame.width, sy = img.naturalHeight / frame.height;
  function dark(x, y, w, h) {
    const d = ctx.getImageData(Math.round(x), Math.round(y), Math.max(1, Math.round(w)),
      Math.max(1, Math.round(h))).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4) if (d[i] + d[i + 1] + d[i + 2] < 300) n++;
    return n;
  }
  return [...document.querySelectorAll('.pagewrap .box')].map(b => {
    const r = b.getBoundingClientRect();
    const x = (r.left - frame.left) * sx, y = (r.top - frame.top) * sy;
    return [dark(x, y, r.width * sx, r.height * sy), dark(x, y + 3 * r.height * sy, r.width * sx,
      r.height * sy)];
  });
})()"""


def test_pdf_page_image_with_boxes_over_the_evidence(page, tmp_path):
    invoice_pdf = make_invoice_pdf(tmp_path)
    spans = [pdf_span(invoice_pdf, 2, "Bolt Supplies Ltd", "vendor")]
    spans.append({"path": "number", "value": "0042", "kind": "none", "score": 0.0, "page": 2})
    df = pd.DataFrame(
        {"kx_source": [str(invoice_pdf)], "kx_page": pd.array([2], dtype="Int64")}
    ).assign(vendor=["Bolt Supplies Ltd"], kx_spans=[spans], kx_error=[None])
    out = kx.review(df, tmp_path / "r.html", documents_root=tmp_path)
    show(page, out)
    page.wait_for("document.querySelector('.pagewrap img').complete")
    assert page.evaluate("document.images[0].src.startsWith('data:image/png;base64,')")
    assert page.evaluate("document.querySelector('.ptitle').textContent") == "page 2"
    assert page.evaluate("document.querySelector('mark').textContent") == "Bolt Supplies Ltd"
    ink = page.evaluate(INK)
    assert len(ink) == 1  # the word boxes merge into one per line
    inside, below = ink[0]
    assert inside > 50 and below == 0, ink  # the box covers the printed words, not blank paper
    page.click(".pagewrap .box")
    assert page.evaluate("document.querySelector('tr.selected td').textContent") == "vendor"
    assert page.evaluate("document.querySelector('tr.c-none td').textContent") == "number"
    assert page.problems() == []


def test_pdf_boxes_the_library_produces_sit_over_the_ink(page, sim, tmp_path):
    """As above, with the spans ``run_documents(grounding=True)`` gives (offsets into page 2's
    text, boxes from the text layer)."""
    from pydantic import BaseModel

    from kimi_extract.simulator import Reply

    class Header(BaseModel):
        vendor: str
        number: str

    invoice_pdf = make_invoice_pdf(tmp_path)
    sim.responder = lambda request: Reply(content={"vendor": "Bolt Supplies Ltd", "number": "77"})
    ex = kx.Extractor(
        Header, base_url=sim.base_url, api_key=sim.api_key, progress=False, grounding=True
    )
    out = ex.run_documents(invoice_pdf, pages="2")
    assert [s["kind"] for s in out["kx_spans"].iloc[0]] == ["exact", "none"]
    show(page, kx.review(out, tmp_path / "r.html", documents_root=tmp_path))
    page.wait_for("document.querySelector('.pagewrap img').complete")
    assert page.evaluate("document.querySelector('mark').textContent") == "Bolt Supplies Ltd"
    ink = page.evaluate(INK)
    assert len(ink) == 1
    inside, below = ink[0]
    assert inside > 50 and below == 0, ink
    page.click(".pagewrap .box")
    assert page.evaluate("document.querySelector('tr.selected td').textContent") == "vendor"
    assert page.evaluate("document.querySelector('tr.c-none td').textContent") == "number"
    assert page.problems() == []


class ShotInvoice(BaseModel):
    """The fields of the screenshot's invoices (each row has some of them)."""

    vendor: str
    number: str | None = None
    date: str | None = None
    due: str | None = None
    total: str | None = None
    payee: str | None = None
    contact: str | None = None
    type: str | None = None


def test_screenshot_for_the_notebook(page, tmp_path):
    """The picture the README and notebook 02 show: highlights of every kind, a PDF page, and
    the corrections a reviewer has made (a near miss corrected, a row marked correct, a fuzzy
    value retyped, an unsupported value set to none)."""
    invoice_pdf = make_invoice_pdf(tmp_path)
    df = frame(MIXED[:3], LEAVES[:3])
    # Doubtful values: a near miss (a digit changed), a fuzzy match, an unsupported value, and
    # a label (inferred, not a quotation).
    near = {**span(MIXED[0], "2024-03-01", "due"), "value": "2024-03-07", "kind": "near"}
    near["score"] = 90.0
    label = {"path": "type", "value": "invoice", "kind": "inferred", "score": 0.0}
    df.at[0, "kx_spans"] = [*df.at[0, "kx_spans"], near, label]
    fuzzy = {**span(MIXED[2], "株式会社サクラ電機", "payee"), "value": "株式会社サクラ電気"}
    fuzzy.update(kind="fuzzy", score=89.0)
    df.at[2, "kx_spans"] = [*df.at[2, "kx_spans"], fuzzy, span(MIXED[2], "田中", "contact")]
    df["kx_grounded"] = [0.75, 1.0, 0.75]
    pdf = pd.DataFrame(
        {
            "text": [None],
            "kx_source": [str(invoice_pdf)],
            "kx_page": [2],
            "vendor": ["Bolt Supplies Ltd"],
            "kx_spans": [[pdf_span(invoice_pdf, 2, "Bolt Supplies Ltd", "vendor")]],
            "kx_grounded": [1.0],
            "kx_prompt_tokens": [310],
            "kx_completion_tokens": [22],
            "kx_cost": [0.0009],
            "kx_error": [None],
        }
    )
    both = pd.concat([df, pdf], ignore_index=True)
    # One column per field, as a run writes them: the values the spans locate.
    for name in ShotInvoice.model_fields:
        both[name] = pd.Series(
            [
                next((s["value"] for s in spans if s["path"] == name), None)
                for spans in both["kx_spans"]
            ],
            dtype=object,
        )
    out = kx.review(
        both,
        tmp_path / "review.html",
        text_column="text",
        title="invoices",
        documents_root=tmp_path,
        model=ShotInvoice,
    )
    page.call(
        "Emulation.setDeviceMetricsOverride",
        {"width": 1280, "height": 1960, "deviceScaleFactor": 1, "mobile": False},
    )
    page.clear_storage(out.resolve().as_uri())  # no corrections from an earlier run of this page
    show(page, out)
    page.wait_for("document.querySelectorAll('.cx-check').length === 4")
    # A click is handled asynchronously: wait for each step's result before the next.
    for pos, path, text in ((0, "due", "2024-03-01"), (2, "payee", "株式会社サクラ電機")):
        row = f'.cx-check[data-pos="{pos}"] tr[data-path="{path}"]'
        page.click(f"{row} button.cx-bad")
        page.wait_for(f"document.querySelector('{row} .cx-input') === document.activeElement")
        page.call("Input.insertText", {"text": text})
        page.key("Enter")
        page.wait_for(f"!!document.querySelector('{row} ins.cx-now')")
    contact = '.cx-check[data-pos="2"] tr[data-path="contact"]'
    page.click(f"{contact} button.cx-bad")
    page.wait_for(f"!!document.querySelector('{contact} button.cx-none')")
    page.click(f"{contact} button.cx-none")
    page.wait_for(f"!!document.querySelector('{contact} ins.cx-now')")
    page.click('.cx-check[data-pos="1"] button.cx-confirm')
    page.wait_for(
        "document.getElementById('kx-reviewed').textContent"
        ".startsWith('3 of 4 rows reviewed (2 corrected)')"
    )
    page.click('[data-card="1"] mark[data-spans="0"]')
    page.evaluate("window.scrollTo(0, 0)")
    shot = page.screenshot(tmp_path / "review.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page.call("Emulation.clearDeviceMetricsOverride")
    target = os.environ.get("KX_REVIEW_PNG")
    if target:
        shutil.copyfile(shot, target)
    page.clear_storage(out.resolve().as_uri())
    assert page.problems() == []


def test_an_offline_extraction_grounded_by_the_aligner(page, tmp_path):
    """The chain end to end: the simulator answers extractively (values copied from the text,
    some perturbed), ``grounding=True`` grounds every leaf (the aligner's spans), the output
    goes through a .parquet file and ``kimi-extract review``, and every highlight in the page
    sits on ``text[start:end]``."""
    from pydantic import BaseModel

    from kimi_extract.cli import main as cli_main
    from kimi_extract.ground import align, leaves_of
    from kimi_extract.simulator import Simulator
    from kimi_extract.table.export import write_table

    class Invoice(BaseModel):
        vendor: str
        buyer: str
        items: list[str]

    texts = [*MIXED, *(f"{t} Buyer: Globex Ltd. 买方：深圳华强电子。" for t in MIXED)]
    perturb = ("case", "width", "spacing")
    with Simulator(answers="extractive", perturb=0.4, perturb_kinds=perturb) as sim:
        ex = kx.Extractor(
            Invoice,
            base_url=sim.base_url,
            api_key=sim.api_key,
            progress=False,
            store=False,
            grounding=True,
        )
        out = ex.run(pd.DataFrame({"text": texts}), text="text")
    answers = out[["vendor", "buyer", "items"]].to_dict("records")
    assert list(out["kx_spans"]) == [
        [s.to_dict() for s in align(text, leaves_of(answer))]
        for text, answer in zip(texts, answers, strict=True)
    ]
    kinds = {s["kind"] for spans in out["kx_spans"] for s in spans}
    assert "exact" in kinds and kinds - {"exact", "none"}, kinds  # perturbed values too
    table = tmp_path / "out.parquet"
    write_table(out, table)
    html = tmp_path / "review.html"
    assert cli_main(["review", str(table), "--html", str(html), "--text", "text"]) == 0
    show(page, html)
    page.evaluate("window.scrollTo(0, 0)")
    found = {}
    for i in range(len(texts)):  # bring every card into view once
        page.evaluate(f"document.querySelector('.slot[data-i=\"{i}\"]').scrollIntoView()")
        page.wait_for(f"document.querySelector('.card.rendered[data-card=\"{i}\"]') !== null")
        found.update(page.evaluate(HIGHLIGHTS))
    for row, (text, spans) in enumerate(zip(texts, out["kx_spans"], strict=True)):
        expected = {str(k): text[s["start"] : s["end"]] for k, s in enumerate(spans) if s["end"]}
        assert found[str(row)] == expected, row
    assert page.problems() == []
