"""Long documents: every item found once (overlap, merging, passes, tables across pages).

The simulator answers from a located answer key (``simulator.recall``): each item's text is in
the key, so a chunk answers with what its text shows, pass by pass. Every behaviour is checked
with grounding on and off and streaming on and off (the ``mode`` fixture).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from pydantic import BaseModel

import kimi_extract as kx
from kimi_extract.exceptions import ConfigurationError
from kimi_extract.media.chunks import plan_chunks
from kimi_extract.media.documents import load_pages
from kimi_extract.run.passes import GLEAN_PROMPT
from kimi_extract.simulator import Reply, Simulator
from kimi_extract.simulator.quality import QualityModel
from kimi_extract.simulator.recall import Recall

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("make_samples", ROOT / "examples/make_samples.py")
assert _spec is not None and _spec.loader is not None
samples = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(samples)


class Line(BaseModel):
    sku: str
    description: str
    quantity: int | None
    amount: float | None


class Invoice(BaseModel):
    vendor: str | None
    total: float | None
    items: list[Line]


MODES = [(False, False), (True, False), (False, True), (True, True)]


@pytest.fixture(params=MODES, ids=["plain", "grounded", "streamed", "grounded-streamed"])
def mode(request: pytest.FixtureRequest) -> dict[str, Any]:
    grounding, stream = request.param
    return {"grounding": grounding, "stream": stream}


def simulator(key: dict[str, Any], recall: Recall | None = None, **options: Any) -> Simulator:
    quality = QualityModel(default_recall=recall or Recall())
    return Simulator(quality=quality, answer_keys=[key], **options)


def extractor(sim: Simulator, mode: dict[str, Any], **options: Any) -> kx.Extractor[Any]:
    options = {"progress": False, "store": False, **mode, **options}
    return kx.Extractor(Invoice, base_url=sim.base_url, api_key=sim.api_key, **options)


def sent(sim: Simulator) -> list[str]:
    """The document text of every chat request, in order (the first user message)."""
    out = []
    for exchange in sim.history:
        users = [m for m in exchange.body.get("messages", []) if m.get("role") == "user"]
        if users:
            out.append(users[0]["content"])
    return out


def item(number: int, sku: str, description: str, quantity: int, amount: float) -> dict[str, Any]:
    """A two-line item: its key entry (text included) for the document."""
    text = f"Item {number}: {sku} {description}\n  quantity {quantity}, amount {amount:.2f}"
    return {
        "sku": sku,
        "description": description,
        "quantity": quantity,
        "amount": amount,
        "@at": text,
    }


def two_line_document(items: list[dict[str, Any]], tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """A .md document listing ``items`` (two lines each, no blank lines between) and its key."""
    total = round(sum(i["amount"] for i in items), 2)
    text = "Vendor: Bolt Supplies Ltd\n\n" + "\n".join(i["@at"] for i in items)
    text += f"\n\nTotal due: {total:.2f}\n"
    path = tmp_path / "order.md"
    path.write_text(text, encoding="utf-8")
    key = {
        "vendor": "Bolt Supplies Ltd",
        "total": total,
        "items": items,
        "@at": {"vendor": "Vendor: Bolt Supplies Ltd", "total": f"Total due: {total:.2f}"},
    }
    return path, key


def many_items(count: int, start: int = 0) -> list[dict[str, Any]]:
    words = ["Brass hinge", "Oak panel", "Steel bracket", "Walnut shelf", "Copper pipe"]
    return [
        item(n + 1, f"SKU-{n:03d}", f"{words[n % 5]} model {n}", n % 7 + 1, 10.0 + n)
        for n in range(start, start + count)
    ]


def skus(frame: pd.DataFrame) -> list[str]:
    return [i["sku"] for i in frame.loc[frame.index[0], "items"]]


# -- overlap and merging ---------------------------------------------------------------------


def three_line_items(count: int) -> list[dict[str, Any]]:
    """Items written on three lines (a chunk can end after the second)."""
    out = []
    for entry in many_items(count):
        first, second = entry["@at"].split("\n")
        head, description = first.split(f" {entry['sku']} ")
        out.append({**entry, "@at": f"{head} {entry['sku']}\n  {description}\n{second}"})
    return out


def cut_after_second_line(path: Path, size: int, key: dict[str, Any]) -> list[dict[str, Any]]:
    """The items a chunk of ``size`` characters (no overlap) ends after their second line: the
    next chunk is told that line (the preamble) but not their first."""
    _, pages = load_pages(path)
    texts = ["\n".join(p.text for p in chunk) for chunk in plan_chunks(pages, None, size, 0)]
    out = []
    for entry in key["items"]:
        _, second, third = entry["@at"].split("\n")
        if any(t.rstrip().endswith(second) and third not in t for t in texts):
            out.append(entry)
    return out


def whole_once(frame: pd.DataFrame, key: dict[str, Any]) -> bool:
    """Every item of the key found once, every field right, in document order."""
    items = frame.loc[frame.index[0], "items"]
    fields = ("sku", "description", "quantity", "amount")
    want = [{f: i[f] for f in fields} for i in key["items"]]
    return [{f: i[f] for f in fields} for i in items] == want


def test_an_item_straddling_a_chunk_boundary_is_found_once_and_whole(mode, tmp_path):
    path, key = two_line_document(three_line_items(40), tmp_path)
    size = next(size for size in range(700, 1200, 10) if cut_after_second_line(path, size, key))
    with simulator(key) as sim:
        ex = extractor(sim, mode)
        cut = ex.run_documents(path, chunk_chars=size, chunk_overlap=0)
        # the same chunks (each cut at ``size``), each also given the 300 characters before it
        out = ex.run_documents(path, chunk_chars=size + 300, chunk_overlap=300)
        default = ex.run_documents(path, chunk_chars=size)  # 10 % of a chunk
    assert cut.loc[0, "kx_chunks"] == out.loc[0, "kx_chunks"] > 2
    assert not whole_once(cut, key)  # without overlap the boundary cuts an item
    assert whole_once(out, key) and pd.isna(out.loc[0, "kx_error"])
    assert whole_once(default, key)


def test_two_chunks_reporting_the_same_item_yield_one_row(mode, tmp_path):
    path, key = two_line_document(many_items(40), tmp_path)
    with simulator(key) as sim:
        out = extractor(sim, mode).run_documents(path, chunk_chars=1000, chunk_overlap=200)
        texts = sent(sim)
    twice = [i["sku"] for i in key["items"] if sum(i["@at"] in t for t in texts) > 1]
    assert twice, "some items should be whole in two chunks (the overlap)"
    assert skus(out) == [i["sku"] for i in key["items"]]
    assert out.loc[0, "kx_duplicates_removed"] >= len(twice)


def test_without_merging_the_overlap_repeats_items(mode, tmp_path):
    path, key = two_line_document(many_items(40), tmp_path)
    with simulator(key) as sim:
        out = extractor(sim, mode).run_documents(
            path, chunk_chars=1000, chunk_overlap=200, dedupe_on=[]
        )
    assert len(skus(out)) > len(set(skus(out)))  # the check above is not vacuous
    assert out.loc[0, "kx_duplicates_removed"] == 0


def test_a_genuinely_repeated_item_stays_two_rows(mode, tmp_path):
    items = many_items(40)
    # the same fields twice: items 3 and 25 (chunks apart), 10 and 11 (side by side), and 2
    # and 16 (neighbouring chunks, neither in the text they share)
    for a, b in ((3, 25), (10, 11), (2, 16)):
        items[b] = item(b + 1, "SKU-REP" + str(a), "Same part", 2, 7.5)
        items[a] = item(a + 1, "SKU-REP" + str(a), "Same part", 2, 7.5)
    path, key = two_line_document(items, tmp_path)
    with simulator(key) as sim:
        out = extractor(sim, mode).run_documents(path, chunk_chars=1000, chunk_overlap=200)
        texts = sent(sim)
    first, second = items[2]["@at"], items[16]["@at"]
    chunk = next(n for n, t in enumerate(texts) if first in t)
    assert second in texts[chunk + 1] and second not in texts[chunk]  # neighbours, not shared
    found = skus(out)
    assert found.count("SKU-REP3") == 2 and found.count("SKU-REP10") == 2
    assert found.count("SKU-REP2") == 2
    assert found == [i["sku"] for i in key["items"]]


def test_chunks_that_disagree_on_a_value_are_listed_in_kx_conflicts(mode, tmp_path):
    pages = [
        "Vendor: Bolt Supplies Ltd\n" + "\n".join(i["@at"] for i in many_items(5)),
        "Subtotal carried forward: 60.00\n" + "\n".join(i["@at"] for i in many_items(5, 5)),
        "Total due: 125.00",
    ]
    path = tmp_path / "order.txt"
    path.write_text("\f".join(pages), encoding="utf-8")
    key = {
        "vendor": "Bolt Supplies Ltd",
        "total": 125.0,
        "items": many_items(10),
        "@at": {"vendor": "Vendor: Bolt Supplies Ltd", "total": "Total due: 125.00"},
        "@decoys": {"total": [[60.0, "Subtotal carried forward: 60.00"]]},
    }
    with simulator(key, Recall(decoy=1.0)) as sim:
        ex = extractor(sim, mode)
        first = ex.run_documents(path, chunk_pages=1)
        last = ex.run_documents(path, chunk_pages=1, merge={"total": "last"})
    conflict = {"path": "total", "values": [60.0, 125.0], "pages": [[2], [3]]}
    assert first.loc[0, "kx_conflicts"] == [conflict]
    assert last.loc[0, "kx_conflicts"] == [conflict]
    assert first.loc[0, "total"] == 60.0  # the default rule keeps the first, and says so
    assert last.loc[0, "total"] == 125.0
    assert skus(last) == [i["sku"] for i in key["items"]]


# -- tables across chunks -----------------------------------------------------------------------


def table_document(kind: str, tmp_path: Path, rows: int = 60) -> tuple[Path, dict[str, Any], str]:
    """A long table as Markdown, HTML or a two-page PDF; its key and the header line sent."""
    entries = []
    cells = []
    for n in range(rows):
        sku, description, quantity, amount = f"SKU-{n:03d}", f"Part {n}", n % 5 + 1, 3.0 + n
        cells.append((sku, description, quantity, amount))
        entries.append({"sku": sku, "description": description, "quantity": quantity})
        entries[-1]["amount"] = amount
    if kind == "md":
        header = "| SKU | Description | Qty | Amount |\n|---|---|---|---|"
        lines = [f"| {s} | {d} | {q} | {a:.2f} |" for s, d, q, a in cells]
        path = tmp_path / "table.md"
        path.write_text("Vendor: Bolt\n\n" + header + "\n" + "\n".join(lines), encoding="utf-8")
    elif kind == "html":
        header = "SKU | Description | Qty | Amount"
        lines = [f"{s} | {d} | {q} | {a:.2f}" for s, d, q, a in cells]
        body = "".join(
            f"<tr><td>{s}</td><td>{d}</td><td>{q}</td><td>{a:.2f}</td></tr>" for s, d, q, a in cells
        )
        path = tmp_path / "table.html"
        path.write_text(
            "<p>Vendor: Bolt</p><table><tr><th>SKU</th><th>Description</th><th>Qty</th>"
            f"<th>Amount</th></tr>{body}</table>",
            encoding="utf-8",
        )
    else:
        header = "SKU Description Qty Amount"
        lines = [f"{s} {d} {q} {a:.2f}" for s, d, q, a in cells]
        half = rows // 2
        first = [(72, 740, 11, "Vendor: Bolt"), (72, 720, 11, header)]
        first += [(72, 700 - 12 * i, 10, line) for i, line in enumerate(lines[:half])]
        second = [(72, 740 - 12 * i, 10, line) for i, line in enumerate(lines[half:])]
        path = tmp_path / "table.pdf"
        samples.write_pdf(path, [first, second])
    for entry, line in zip(entries, lines, strict=True):
        entry["@at"] = line
    return path, {"vendor": "Bolt", "total": None, "items": entries}, header


@pytest.mark.parametrize("kind", ["md", "html", "pdf"])
def test_a_table_continued_in_the_next_chunk_keeps_its_header(mode, tmp_path, kind):
    if kind == "pdf":
        pytest.importorskip("pypdfium2")
    path, key, header = table_document(kind, tmp_path)
    options = {"chunk_pages": 1} if kind == "pdf" else {"chunk_chars": 900}
    with simulator(key) as sim:
        out = extractor(sim, mode).run_documents(path, **options)
        texts = sent(sim)
    assert len(texts) >= 2
    for text in texts[1:]:
        assert f"This part continues a table with the header:\n{header}\n" in text, text[:400]
        assert "ended with: " in text.split("\n\n", 1)[0]
    assert texts[0].count(header) == 1  # the first chunk has the header itself
    assert skus(out) == [i["sku"] for i in key["items"]]


# -- gleaning -------------------------------------------------------------------------------------


def glean_requests(sim: Simulator) -> list[int]:
    """The pass number of each chat request (1 + the answers in its history)."""
    return [
        1 + sum(1 for m in h.body.get("messages", []) if m.get("role") == "assistant")
        for h in sim.history
    ]


def test_gleaning_passes_find_missed_items_and_stop_when_nothing_new_comes(mode, tmp_path):
    path, key = two_line_document(many_items(40), tmp_path)
    with simulator(key, Recall(found=0.5, later=1.0)) as sim:
        out = extractor(sim, mode).run_documents(
            path, chunk_chars=1000, chunk_overlap=200, passes=4
        )
        numbers = glean_requests(sim)
        follow_ups = [h.body["messages"] for h in sim.history if len(h.body["messages"]) > 2]
    chunks = out.loc[0, "kx_chunks"]
    # pass 2 finds every item pass 1 missed, pass 3 finds nothing: no pass 4 is sent
    assert sorted(numbers) == [1] * chunks + [2] * chunks + [3] * chunks
    assert out.loc[0, "kx_passes"] == 3
    by_pass = out.loc[0, "kx_items_by_pass"]
    assert by_pass[0] > 0 and by_pass[1] > 0 and by_pass[2] == 0
    assert sum(by_pass) == 40 and skus(out) == [i["sku"] for i in key["items"]]
    for messages in follow_ups:  # the answers stay in the history, reasoning included
        assert messages[-1] == {"role": "user", "content": GLEAN_PROMPT}
        answers = [m for m in messages if m["role"] == "assistant"]
        assert answers and all(m["reasoning_content"] for m in answers)


def test_gleaning_stops_after_the_second_pass_when_the_first_found_everything(mode, tmp_path):
    path, key = two_line_document(many_items(20), tmp_path)
    with simulator(key) as sim:
        out = extractor(sim, mode).run_documents(path, chunk_chars=1000, passes=3)
        numbers = glean_requests(sim)
    chunks = out.loc[0, "kx_chunks"]
    assert sorted(numbers) == [1] * chunks + [2] * chunks
    assert out.loc[0, "kx_passes"] == 2 and out.loc[0, "kx_items_by_pass"] == [20, 0]


CHILD = """
import kimi_extract as kx
from tests.pipeline.test_documents_long import Invoice
ex = kx.Extractor(Invoice, base_url={url!r}, api_key={key!r}, progress=False, store={store!r},
                  concurrency=1, **{mode!r})
ex.run_documents({path!r}, chunk_chars=1000, chunk_overlap=200, passes=3)
"""


def test_a_resume_after_a_kill_between_passes_sends_only_the_missing_passes(mode, tmp_path):
    path, key = two_line_document(many_items(30), tmp_path)
    store = tmp_path / "store.sqlite3"
    reached = threading.Event()

    def hang_at_pass_three(request: Any) -> Reply | None:
        if sum(1 for m in request.body["messages"] if m["role"] == "assistant") == 2:
            reached.set()
            return Reply(fault="hang")
        return None

    recall = Recall(found=0.6, later=0.6)
    with simulator(key, recall) as sim:
        sim.responder = hang_at_pass_three
        script = CHILD.format(
            url=sim.base_url,
            key=sim.api_key,
            store=str(store),
            mode=mode,
            path=str(path),
        )
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], env=env)
        try:
            # a pass is sent once the passes before it are committed: the kill loses none
            assert reached.wait(60), "the child never reached a third pass"
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
        before = len(sim.history)
        sim.responder = None
        out = extractor(sim, mode, store=store).run_documents(
            path, chunk_chars=1000, chunk_overlap=200, passes=3
        )
        numbers = glean_requests(sim)
        requests = [(chunk_of(h), n) for h, n in zip(sim.history, numbers, strict=True)]
    killed, resumed = requests[:before], requests[before:]
    hung = {chunk for chunk, number in killed if number == 3}
    done = {chunk for chunk, _ in killed} - hung  # chunks the child finished (no third pass)
    assert len(hung) == 1
    # the chunk killed at its third pass: passes 1 and 2 from the store, only pass 3 is sent
    assert [number for chunk, number in resumed if chunk in hung] == [3]
    assert not [chunk for chunk, _ in resumed if chunk in done]  # finished: nothing is sent
    others = [number for chunk, number in resumed if chunk not in hung | done]
    rest = out.loc[0, "kx_chunks"] - len(hung | done)
    assert rest > 0 and others.count(1) == rest and others.count(2) == rest
    assert others.count(3) <= rest
    assert pd.isna(out.loc[0, "kx_error"]) and out.loc[0, "kx_passes"] >= 2


def chunk_of(exchange: Any) -> str:
    """Which chunk a request is for: its first user message (the chunk's text)."""
    return next(m["content"] for m in exchange.body["messages"] if m["role"] == "user")


# -- options --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"chunk_chars": 1000, "chunk_overlap": 600}, "chunk_overlap"),
        ({"chunk_overlap": 10}, "chunk_overlap"),
        ({"chunk_pages": 2, "chunk_overlap": 2}, "chunk_overlap"),
        ({"passes": 0}, "passes"),
        ({"merge": {"total": "largest"}}, "merge"),
        ({"merge": {"items.sku": "last"}}, "merge"),
        ({"merge": {"nope": "last"}}, "merge"),
        ({"dedupe_on": "sku"}, "dedupe_on"),
        ({"dedupe_on": ["colour"]}, "dedupe_on"),
    ],
)
def test_bad_long_document_options_are_named_before_any_request(tmp_path, options, named):
    path, key = two_line_document(many_items(3), tmp_path)
    with simulator(key) as sim:
        with pytest.raises(ConfigurationError, match=named):
            extractor(sim, {}).run_documents(path, **options)
        assert not sim.history


def test_passes_need_a_list_field(tmp_path):
    class Header(BaseModel):
        vendor: str | None

    path, key = two_line_document(many_items(3), tmp_path)
    with simulator(key) as sim:
        ex = kx.Extractor(Header, base_url=sim.base_url, api_key=sim.api_key, progress=False)
        with pytest.raises(ConfigurationError, match="passes=2"):
            ex.run_documents(path, passes=2)
        assert not sim.history


# -- cost: the estimate and the run summary -------------------------------------------------------


def test_estimate_documents_prices_every_pass_and_the_summary_shows_each(tmp_path, caplog):
    path, key = two_line_document(many_items(40), tmp_path)
    options = {"chunk_chars": 1000, "chunk_overlap": 200}
    with simulator(key, Recall(found=0.3, later=0.3)) as sim:
        ex = extractor(sim, {})
        one = ex.estimate_documents(path, **options)
        three = ex.estimate_documents(path, passes=3, explode="items", **options)
        assert not sim.history  # estimates send nothing
        with caplog.at_level("INFO", logger="kimi_extract"):
            out = ex.run_documents(path, passes=3, **options)
    chunks = out.loc[0, "kx_chunks"]
    assert one.requests == chunks and three.requests == 3 * chunks
    # later passes resend the conversation: more prompt, most of it read from the cache
    assert three.prompt_tokens > 3 * one.prompt_tokens
    assert three.cached_tokens - one.cached_tokens > 2 * one.prompt_tokens // 2
    assert three.cost > 2 * one.cost
    # this run needed every pass of every chunk: the estimate counted its requests exactly
    assert ex.last_run.usage.requests == three.requests
    passes = ex.last_run.passes
    assert [p.number for p in passes] == [1, 2, 3]
    assert [p.items for p in passes] == out.loc[0, "kx_items_by_pass"]
    assert sum(p.usage.requests for p in passes) == ex.last_run.usage.requests
    assert sum(p.usage.cost for p in passes) == pytest.approx(ex.last_run.usage.cost)
    line = ex.last_run.summary()
    assert f"pass 2: +{passes[1].items:,} items (+" in line and "pass 3: +" in line
    assert any("pass 1: " in record.getMessage() for record in caplog.records)


# -- command line ---------------------------------------------------------------------------------


def test_cli_run_docs_takes_the_long_document_options(tmp_path, capsys):
    from kimi_extract.cli import main as cli_main

    path, _ = two_line_document(many_items(30), tmp_path)
    schema = tmp_path / "schema.py"
    schema.write_text(
        "from pydantic import BaseModel\n"
        "class Line(BaseModel):\n    sku: str\n    quantity: int | None\n"
        "class Order(BaseModel):\n    total: float | None\n    items: list[Line]\n",
        encoding="utf-8",
    )
    out = tmp_path / "out.jsonl"
    common = ["run-docs", str(path), "--schema", f"{schema}:Order", "--chunk-chars", "600"]
    common += ["--out", str(out), "--simulate", "--no-progress"]
    long = ["--chunk-overlap", "100", "--passes", "2", "--merge", "total=last", "--dedupe-on", ""]
    assert cli_main([*common, *long]) == 0
    row = pd.read_json(out, lines=True).iloc[0]
    assert row["kx_passes"] == 2 and len(row["kx_items_by_pass"]) == 2
    assert row["kx_duplicates_removed"] == 0  # --dedupe-on "": lists concatenated
    capsys.readouterr()
    assert cli_main([*common, "--merge", "total=largest"]) != 0
    assert "merge" in capsys.readouterr().err
