"""The review page in a real browser (tests/cdp.py), for what leads the eye to doubtful values:
the colours and the value-vs-text diff per match kind, filters and counts per value, the list of
doubtful values and the per-field view (both jump to the evidence), sorting, evidence scrolled
into view in a long document, exploded frames as one card per document, zoomable page images,
and 10,000 spans in one row."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pytest

import kimi_extract as kx

from ..cdp import Browser, CDPError, browser_session
from .test_review import exploded_frame, frame, kinds_frame, make_invoice_pdf, pdf_span, span
from .test_review_browser import HIGHLIGHTS, LEAVES, MIXED, show


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    yield from browser_session()


@pytest.fixture
def page(browser: Browser) -> Iterator[Browser]:
    """The browser with its problem list emptied; the test fails if the page logged any."""
    browser.clear_events()
    yield browser


ROW = "[...document.querySelectorAll('[data-card=\"%d\"] tr.span')]"


def text_of_row(page: Any, card: int, k: int, selector: str) -> list[str]:
    return page.evaluate(
        f'[...document.querySelectorAll(\'[data-card="{card}"] tr[data-span="{k}"] {selector}\')]'
        ".map(n => n.textContent)"
    )


def test_doubtful_kinds_have_their_own_colours_and_show_the_diff(page, tmp_path):
    df, text = kinds_frame()
    show(page, kx.review(df, tmp_path / "r.html", text_column="text"))
    mark = 'document.querySelector(\'[data-card="0"] mark[data-spans="%d"]\')'
    classes = {k: page.evaluate((mark % k) + ".className") for k in (0, 1, 2, 3, 4, 7)}
    assert classes == {
        0: "kx-hl c-verified",
        1: "kx-hl c-verified",
        2: "kx-hl c-fuzzy",
        3: "kx-hl c-near",
        4: "kx-hl c-near",
        7: "kx-hl c-other",
    }
    colour = {k: page.evaluate(f"getComputedStyle({mark % k}).backgroundColor") for k in classes}
    assert colour[0] == colour[1]
    assert len({colour[0], colour[2], colour[3], colour[7]}) == 4  # verified, fuzzy, near, other
    # No evidence: no highlight for the inferred label and the unsupported value.
    assert page.evaluate((mark % 5) + " === null && " + (mark % 6) + " === null")
    # The fuzzy value without a given diff: a character diff against its evidence.
    assert text_of_row(page, 0, 2, ".diff del") == ["2"]
    assert text_of_row(page, 0, 2, ".diff ins") == ["1"]
    assert text_of_row(page, 0, 2, ".diff")[0] == "value vs text: Section 2.21"
    # Given diffs, as text or pieces.
    assert text_of_row(page, 0, 3, ".diff .d-note") == ["negation: not"]
    assert text_of_row(page, 0, 4, ".diff del") == ["license"]
    assert text_of_row(page, 0, 4, ".diff ins") == ["licence"]
    assert text_of_row(page, 0, 4, ".diff .d-note") == ["spelling"]
    assert text_of_row(page, 0, 0, ".diff") == []  # verified: nothing to compare
    kinds = page.evaluate(
        "[...document.querySelectorAll('tr.span td.kind')].map(n => n.textContent)"
    )
    assert kinds == [
        "exact",
        "normalized",
        "fuzzy 100",
        "near miss 91",
        "near miss 100",
        "inferred",
        "unsupported",
        "telepathic",
    ]
    assert page.problems() == []


def labelled_rows(n: int) -> pd.DataFrame:
    """The README's review rows: a sentiment label (inferred) and quoted aspects; some rows hold
    an unsupported aspect, a fuzzy one or a near miss."""
    texts, cells = [], []
    for i in range(n):
        text = f"Review {i}: the battery lasts two days and the screen is bright."
        spans = [
            {"path": "sentiment", "value": "positive", "kind": "inferred", "score": 0.0},
            span(text, "battery", "aspects[0]"),
        ]
        if i % 4 == 0:
            spans.append({"path": "aspects[1]", "value": "price", "kind": "none", "score": 0.0})
        if i % 10 == 0:
            spans.append({**span(text, "screen", "aspects[2]"), "value": "scren", "kind": "fuzzy"})
        if i % 25 == 0:
            spans.append({**span(text, "two days", "lasts"), "value": "three days", "kind": "near"})
        texts.append(text)
        cells.append(spans)
    df = pd.DataFrame({"text": texts, "kx_spans": cells, "kx_error": [None] * n})
    df.loc[df.index % 50 == 7, "kx_error"] = "ValidationFailedError: boom"
    return df


def shown(page: Any) -> str:
    return page.evaluate("document.getElementById('kx-shown').textContent")


def toggle(page: Any, box: str) -> None:
    page.evaluate(
        f"(() => {{ const b = document.getElementById('{box}'); b.checked = !b.checked;"
        " b.dispatchEvent(new Event('change')); })()"
    )


def test_filters_and_counts_work_per_value(page, tmp_path):
    n = 200
    df = labelled_rows(n)
    show(page, kx.review(df, tmp_path / "r.html", text_column="text"))
    none, fuzzy, near = len(range(0, n, 4)), len(range(0, n, 10)), len(range(0, n, 25))
    labels = {
        k: page.evaluate(f"document.getElementById('n-{k}').textContent")
        for k in ("unsupported", "near", "fuzzy", "inferred", "errors")
    }
    assert labels == {
        "unsupported": f"({none + near})",
        "near": f"({near})",
        "fuzzy": f"({fuzzy})",
        "inferred": f"({n})",
        "errors": "(4)",
    }
    # Every row holds a label: "unsupported" does not count them, and keeps only rows with
    # unsupported values (not 200 of 200).
    rows_with = len({*range(0, n, 4), *range(0, n, 25)})
    toggle(page, "f-unsupported")
    assert shown(page) == f"{none + near} values · {rows_with} of {n} shown"
    visible = ROW % 0 + ".filter(r => r.offsetParent !== null).map(r => r.className)"
    assert page.evaluate(visible) == ["span c-none", "span c-near"]
    toggle(page, "f-fuzzy")  # either class
    rows_with = len({*range(0, n, 4), *range(0, n, 10), *range(0, n, 25)})
    assert shown(page) == f"{none + near + fuzzy} values · {rows_with} of {n} shown"
    assert page.evaluate(visible) == ["span c-none", "span c-fuzzy", "span c-near"]
    toggle(page, "f-unsupported")
    toggle(page, "f-fuzzy")
    toggle(page, "f-inferred")
    assert shown(page) == f"{n} values · {n} of {n} shown"
    assert page.evaluate(visible) == ["span c-inferred"]
    toggle(page, "f-errors")  # rows with errors, and their inferred values
    assert shown(page) == f"4 values · 4 of {n} shown"
    toggle(page, "f-errors")
    toggle(page, "f-inferred")
    assert shown(page) == f"{n} of {n} shown"
    # Card 0 was emptied while filtered out; it renders again as it comes back into view.
    page.wait_for(ROW % 0 + ".filter(r => r.offsetParent !== null).length === 5")
    assert page.problems() == []


IN_VIEW = """(selector => {
  const n = document.querySelector(selector);
  if (!n) return false;
  const r = n.getBoundingClientRect();
  for (let b = n.parentElement; b && b !== document.body; b = b.parentElement) {
    const s = getComputedStyle(b);
    if (!/(auto|scroll)/.test(s.overflowY)) continue;
    const q = b.getBoundingClientRect();
    if (r.top < q.top || r.bottom > q.bottom) return false;
  }
  const top = document.querySelector('header.top').getBoundingClientRect().bottom;
  const panel = document.getElementById('kx-panel');
  const right = panel.hidden ? innerWidth : panel.getBoundingClientRect().left;
  return r.height > 0 && r.top >= top && r.bottom <= innerHeight && r.right <= right;
})"""


def in_view(page: Any, selector: str) -> bool:
    """True when the first match is inside every scrolled box holding it, inside the window and
    below the sticky header (and not under the side panel)."""
    return bool(page.evaluate(f"{IN_VIEW}({json.dumps(selector)})"))


def settled_in_view(page: Any, selector: str) -> bool:
    """``in_view`` once the cards around a jump have rendered (they render after the jump's
    frame and may move it; the page looks again then): polled, not timed."""
    try:
        page.wait_for(f"{IN_VIEW}({json.dumps(selector)})", timeout=10)
    except CDPError:
        return False
    return True


def test_the_doubtful_list_jumps_to_each_value(page, tmp_path):
    n = 200
    df = labelled_rows(n)
    show(page, kx.review(df, tmp_path / "r.html", text_column="text"))
    doubtful = len(range(0, n, 4)) + len(range(0, n, 10)) + len(range(0, n, 25))
    assert page.evaluate("document.getElementById('f-doubtful').textContent") == (
        f"doubtful values ({doubtful})"
    )
    page.click("#f-doubtful")
    assert page.evaluate("document.getElementById('kx-panel').hidden") is False
    picks = "[...document.querySelectorAll('#kx-panel tr.pick')]"
    assert page.evaluate(picks + ".length") == doubtful
    entries = page.evaluate(picks + ".map(r => [r.dataset.card, r.cells[2].textContent])")
    assert entries[:3] == [["0", "price"], ["0", "scren"], ["0", "three days"]]
    # A near miss far down the run: its card comes into view with the evidence selected.
    page.click('#kx-panel tr.pick[data-card="150"][data-span="3"]')
    page.wait_for("document.querySelector('.card.current[data-card=\"150\"]') !== null")
    page.wait_for(
        "document.querySelector('[data-card=\"150\"] mark.selected')?.textContent === 'two days'"
    )
    assert settled_in_view(page, '[data-card="150"] mark.selected')
    selected = "document.querySelector('[data-card=\"150\"] tr.selected td.value .v').textContent"
    assert page.evaluate(selected) == "three days"
    # An unsupported value has no evidence: its field row is shown instead.
    page.click('#kx-panel tr.pick[data-card="8"][data-span="2"]')
    page.wait_for("document.querySelector('[data-card=\"8\"] tr.selected') !== null")
    assert settled_in_view(page, '[data-card="8"] tr.selected')
    page.click("#kx-panel-close")
    assert page.evaluate("document.getElementById('kx-panel').hidden") is True
    assert page.problems() == []


def test_cards_sort_by_grounded_share_cost_or_error(page, tmp_path):
    df = frame(MIXED[:3] * 2, LEAVES[:3] * 2)
    df["kx_grounded"] = [0.5, None, 1.0, 0.25, 0.75, 0.0]
    df["kx_cost"] = [0.003, 0.001, None, 0.004, 0.002, 0.0005]
    df.loc[[2, 4], "kx_error"] = "boom"
    show(page, kx.review(df, tmp_path / "r.html", text_column="text"))
    order = "[...document.querySelectorAll('.slot')].map(s => Number(s.dataset.i))"

    def sort(key: str) -> list[int]:
        page.evaluate(
            f"(() => {{ const s = document.getElementById('f-sort'); s.value = '{key}';"
            " s.dispatchEvent(new Event('change')); })()"
        )
        result: list[int] = page.evaluate(order)
        return result

    assert sort("grounded") == [5, 3, 0, 4, 2, 1]  # missing shares last
    assert sort("cost") == [3, 0, 4, 1, 5, 2]  # missing costs last
    assert sort("error") == [2, 4, 0, 1, 3, 5]
    page.key("j")  # the keys follow the order on screen
    current = "document.querySelector('.card.current').getAttribute('data-card')"
    assert page.evaluate(current) == "2"
    page.key("j")
    assert page.evaluate(current) == "4"
    assert sort("order") == [0, 1, 2, 3, 4, 5]
    assert page.problems() == []


def test_the_field_view_shows_one_field_across_rows(page, tmp_path):
    df = frame(MIXED, LEAVES)
    show(page, kx.review(df, tmp_path / "r.html", text_column="text"))
    options = page.evaluate(
        "[...document.getElementById('f-field').options].map(o => o.value).filter(Boolean)"
    )
    assert options == ["city", "contact", "date", "email", "number", "total", "vendor"]
    page.evaluate(
        "(() => { const s = document.getElementById('f-field'); s.value = 'total';"
        " s.dispatchEvent(new Event('change')); })()"
    )
    title = page.evaluate("document.getElementById('kx-panel-title').textContent")
    assert title == "Field total: 3 values"
    rows = page.evaluate(
        "[...document.querySelectorAll('#kx-panel tr.pick')].map(r => [r.dataset.card,"
        " r.cells[1].textContent, r.cells[3].querySelector('mark').textContent])"
    )
    assert rows == [
        ["0", "1,234.50", "1,234.50"],
        ["1", "12,800.00", "12,800.00"],
        ["2", "５４，０００円", "５４，０００円"],
    ]
    page.click('#kx-panel tr.pick[data-card="2"]')
    page.wait_for("document.querySelector('.card.current[data-card=\"2\"]') !== null")
    assert page.evaluate("document.querySelector('mark.selected').textContent") == "５４，０００円"
    assert settled_in_view(page, "mark.selected")
    assert page.problems() == []


def long_document(size: int = 200_000) -> tuple[str, list[dict[str, Any]]]:
    """A 200,000-character text with 80 values spread over it."""
    rng = random.Random(7)
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    text = " ".join(rng.choice(words) for _ in range(size // 4))[:size]
    spans = []
    for n in range(80):
        start = (n * (size - 100)) // 79
        start = text.index(" ", start) + 1
        end = text.index(" ", start)
        spans.append(
            {
                "path": f"f{n}",
                "value": text[start:end],
                "start": start,
                "end": end,
                "kind": "exact",
                "score": 100.0,
            }
        )
    return text, spans


def test_evidence_is_scrolled_into_view_in_a_long_document(page, tmp_path):
    text, spans = long_document()
    assert len(text) == 200_000
    df = pd.DataFrame({"text": [text, "next row"], "kx_spans": [spans, []]})
    show(page, kx.review(df, tmp_path / "r.html", text_column="text"))
    # The last value: deep in the text pane, which starts scrolled to the top.
    page.click('[data-card="0"] tr[data-span="79"]')
    assert in_view(page, "mark.selected")
    assert (
        page.evaluate("document.querySelector('mark.selected').textContent") == spans[79]["value"]
    )
    # From the bottom of the long fields table, the first value: above the window and the
    # pane's scrolled part, under where the sticky header sits.
    page.evaluate("document.querySelector('tr[data-span=\"79\"]').scrollIntoView({block: 'end'})")
    page.click('[data-card="0"] tr[data-span="0"]')
    assert in_view(page, "mark.selected")
    assert page.evaluate("document.querySelector('mark.selected').textContent") == spans[0]["value"]
    page.click('[data-card="0"] tr[data-span="40"]')
    assert in_view(page, "mark.selected")
    assert page.problems() == []


def test_an_exploded_frame_shows_one_card_per_document(page, tmp_path):
    df = exploded_frame(tmp_path)
    show(page, kx.review(df, tmp_path / "r.html", documents_root=tmp_path))
    page.wait_for("document.querySelectorAll('.card.rendered').length === 2")
    per_card = page.evaluate(
        "[...document.querySelectorAll('.card')].map(c => [c.querySelectorAll('.text').length,"
        " [...c.querySelectorAll('tr.item')].map(r => r.textContent)])"
    )
    assert per_card == [[1, ["item 0", "item 1", "item 2"]], [1, ["item 0", "item 1"]]]
    found = page.evaluate(HIGHLIGHTS)
    assert found == {
        "0": {"1": "hinge", "2": "panel", "3": "screw"},
        "1": {"1": "nut", "2": "bolt"},
    }
    assert page.problems() == []


def test_pdf_page_images_zoom(page, tmp_path):
    invoice_pdf = make_invoice_pdf(tmp_path)
    vendor = pdf_span(invoice_pdf, 2, "Bolt Supplies Ltd", "vendor")
    df = pd.DataFrame({"kx_source": [str(invoice_pdf)], "kx_page": [2], "kx_spans": [[vendor]]})
    show(page, kx.review(df, tmp_path / "r.html", documents_root=tmp_path))
    page.wait_for("document.querySelector('.pagewrap img').complete")
    geometry = (
        "(() => { const i = document.querySelector('.pagewrap img').getBoundingClientRect();"
        " const b = document.querySelector('.pagewrap .box').getBoundingClientRect();"
        " return [i.width, (b.left - i.left) / i.width, (b.top - i.top) / i.height,"
        " document.querySelector('.zoom .level').textContent]; })()"
    )
    width, left, top, level = page.evaluate(geometry)
    assert level == "100%"
    for factor, label in ((1.5, "150%"), (2, "200%"), (3, "300%")):
        page.click(".zoom-in")
        zoomed, zleft, ztop, zlevel = page.evaluate(geometry)
        assert zlevel == label and abs(zoomed - factor * width) < 2, (zoomed, width)
        assert abs(zleft - left) < 0.01 and abs(ztop - top) < 0.01  # the box stays on its words
    assert page.evaluate(
        "(v => v.scrollWidth > v.clientWidth)(document.querySelector('.pageview'))"
    )
    page.click('[data-card="0"] tr[data-span="0"]')  # the evidence box scrolled into view
    assert page.evaluate("document.querySelector('.box.selected') !== null")
    page.click(".zoom-out")
    assert page.evaluate(geometry)[3] == "200%"
    assert page.problems() == []


COUNT_CALLBACKS = """(() => {
  window.__kxCallbacks = 0;
  for (const name of ["filter", "some", "every", "forEach", "map", "find", "findIndex", "reduce"]) {
    const original = Array.prototype[name];
    Object.defineProperty(Array.prototype, name, {configurable: true, writable: true,
      value: function (callback, ...rest) {
        const counted = function (...args) {
          window.__kxCallbacks++;
          return callback.apply(this, args);
        };
        return original.call(this, counted, ...rest);
      }});
  }
})();"""


def test_ten_thousand_spans_in_one_row(page, tmp_path):
    pieces, spans, at = ["😀 order "], [], len("😀 order ")
    for n in range(10_000):
        value = f"v{n}"
        spans.append(
            {
                "path": f"items[{n}]",
                "value": value,
                "start": at + 1,
                "end": at + 1 + len(value),
                "kind": "exact" if n % 3 else "fuzzy",
            }
        )
        pieces.append(" " + value)
        at += 1 + len(value)
    text = "".join(pieces)
    out = kx.review(
        pd.DataFrame({"text": [text], "kx_spans": [spans]}), tmp_path / "r.html", text_column="text"
    )
    # Work is counted, not timed: every callback the page's array methods run (the quadratic
    # page ran one per span per cut point, 200 million here).
    counting = page.call("Page.addScriptToEvaluateOnNewDocument", {"source": COUNT_CALLBACKS})
    try:
        took = show(page, out)
    finally:
        page.call("Page.removeScriptToEvaluateOnNewDocument", counting)
    assert took < 60, took  # a sanity bound only
    work = page.evaluate("window.__kxCallbacks")
    assert 10_000 <= work <= 30 * 10_000, work
    assert page.evaluate("document.querySelectorAll('mark[data-spans]').length") == 10_000
    assert page.evaluate("document.querySelectorAll('tr.span').length") == 10_000
    found = page.evaluate(HIGHLIGHTS)["0"]
    assert found == {str(n): s["value"] for n, s in enumerate(spans)}
    page.click('tr[data-span="9999"]')
    assert page.evaluate("document.querySelector('mark.selected').textContent") == "v9999"
    assert page.problems() == []


def test_paths_are_fields_in_the_field_view(page, tmp_path):
    df = exploded_frame(tmp_path)
    show(page, kx.review(df, tmp_path / "r.html", documents_root=tmp_path))
    options = page.evaluate("[...document.getElementById('f-field').options].map(o => o.value)")
    assert "items[].name" in options and "qty" in options
    page.evaluate(
        "(() => { const s = document.getElementById('f-field'); s.value = 'items[].name';"
        " s.dispatchEvent(new Event('change')); })()"
    )
    values = page.evaluate(
        "[...document.querySelectorAll('#kx-panel tr.pick')].map(r => r.cells[1].textContent)"
    )
    assert values == ["hinge", "panel", "screw", "nut", "bolt"]
    assert page.problems() == []
