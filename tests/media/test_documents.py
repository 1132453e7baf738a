"""Documents: PDF text layers and scans, page ranges, per-page rows, chunks, sources, the CLI."""

from __future__ import annotations

import base64
import importlib.util
import io
import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from PIL import Image
from pydantic import BaseModel

from kimi_extract.cli import main as cli_main
from kimi_extract.exceptions import AuthenticationError, InputError, RunStopped, install_hint
from kimi_extract.media.documents import (
    Page,
    html_to_text,
    load_pages,
    page_selector,
    plan_chunks,
    split_text,
)
from kimi_extract.media.parts import DEFAULT_MAX_IMAGE_PIXELS
from kimi_extract.simulator import Reply

from ..conftest import chat_requests, usage_sum

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("make_samples", ROOT / "examples/make_samples.py")
assert _spec is not None and _spec.loader is not None
samples = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(samples)


class Item(BaseModel):
    name: str
    qty: int


class Table(BaseModel):
    title: str | None
    rows: list[Item]


def text_page(*lines: str) -> list[tuple[float, float, float, str]]:
    return [(72, 720 - 20 * i, 11, line) for i, line in enumerate(lines)]


SCAN = samples.scanned_table_jpeg("Scanned orders", [("Burr set", 1, 44.0)], size=(425, 550))


@pytest.fixture
def report(tmp_path: Path) -> Path:
    """Four pages: three with text layers and a scan (page 3)."""
    path = tmp_path / "report.pdf"
    samples.write_pdf(
        path,
        [
            text_page("Alpha page about espresso beans and cups."),
            text_page("Bravo page listing oat milk orders for April."),
            SCAN,
            text_page("Delta page: closing remarks on supplier prices."),
        ],
    )
    return path


def user_contents(sim) -> list[Any]:
    return [h.body["messages"][-1]["content"] for h in chat_requests(sim)]


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(p["text"] for p in content if p["type"] == "text")


def images_of(content: Any) -> list[Image.Image]:
    if isinstance(content, str):
        return []
    urls = [p["image_url"]["url"] for p in content if p["type"] == "image_url"]
    return [Image.open(io.BytesIO(base64.b64decode(u.split(",", 1)[1]))) for u in urls]


# -- PDFs ----------------------------------------------------------------------------------------


def test_pdf_text_layer_and_scanned_page_in_auto_mode(sim, make_extractor, report):
    out = make_extractor(Table).run_documents(report)
    assert len(out) == 1 and out["kx_error"].isna().all()
    assert out.loc[0, "kx_source"] == str(report) and pd.isna(out.loc[0, "kx_page"])
    (content,) = user_contents(sim)
    text = text_of(content)
    assert text.startswith("Document: report.pdf (pages 1-4 of 4)")
    for word in ("Alpha page about espresso", "Bravo page", "Delta page"):
        assert word in text
    assert "--- page 3 ---\n(this page is attached as an image)" in text
    (scan,) = images_of(content)  # only the page without a text layer is rendered
    assert scan.format == "PNG"
    assert scan.width * scan.height <= DEFAULT_MAX_IMAGE_PIXELS
    assert abs(scan.width / scan.height - 612 / 792) < 0.01
    assert out.loc[0, "kx_prompt_tokens"] == usage_sum(sim, "prompt")


def test_per_page_rows_and_pdf_modes(sim, make_extractor, report):
    ex = make_extractor(Table)
    out = ex.run_documents([report], per_page=True)
    assert out["kx_page"].tolist() == [1, 2, 3, 4]
    assert (out["kx_source"] == str(report)).all() and list(out.index) == [0, 1, 2, 3]
    contents = {text_of(c).split("\n")[0]: c for c in user_contents(sim)}
    assert isinstance(contents["Document: report.pdf (page 1 of 4)"], str)
    page3 = contents["Document: report.pdf (page 3 of 4)"]
    assert len(images_of(page3)) == 1 and "Scanned" not in text_of(page3)
    assert out["kx_prompt_tokens"].sum() == usage_sum(sim, "prompt")

    sim.reset()
    out = ex.run_documents(report, per_page=True, pdf_mode="text")
    # The scan has no text layer: its row fails as empty, without a request.
    assert out["kx_error"].notna().tolist() == [False, False, True, False]
    assert "EmptyInputError" in out.loc[2, "kx_error"] and "pdf_mode" in out.loc[2, "kx_error"]
    assert len(chat_requests(sim)) == 3
    assert all(isinstance(c, str) for c in user_contents(sim))

    sim.reset()
    ex.run_documents(report, pages="1-2", pdf_mode="images")
    (content,) = user_contents(sim)
    assert len(images_of(content)) == 2 and "Alpha" not in text_of(content)


def test_page_ranges(sim, make_extractor, report):
    ex = make_extractor(Table)
    for spec, expected in (
        ("2-3", [2, 3]),
        ("1,4", [1, 4]),
        ("3-", [3, 4]),
        ([4, 1], [1, 4]),
        (range(1, 3), [1, 2]),
        (2, [2]),
        ("3-9", [3, 4]),  # past the end is ignored
    ):
        out = ex.run_documents(report, per_page=True, pages=spec)
        assert out["kx_page"].tolist() == expected, spec
    sim.reset()
    out = ex.run_documents(report, pages="2-3")
    assert text_of(user_contents(sim)[0]).startswith("Document: report.pdf (pages 2-3 of 4)")
    out = ex.run_documents(report, pages="7-")
    assert "none of the selected pages" in out.loc[0, "kx_error"]
    requests = len(chat_requests(sim))
    for bad in ("0-2", "3-1", "a", "-", True):
        with pytest.raises(InputError):
            ex.run_documents(report, pages=bad)
    assert len(chat_requests(sim)) == requests
    assert page_selector("-2")(5) == [1, 2]


def test_rendered_pages_follow_max_image_pixels(sim, make_extractor, tmp_path):
    path = tmp_path / "scan.pdf"
    samples.write_pdf(path, [SCAN])
    make_extractor(Table).run_documents(path, max_image_pixels=200_000)
    (page,) = images_of(user_contents(sim)[0])
    assert 190_000 < page.width * page.height <= 200_000
    count, pages = load_pages(path, pixels=None)
    assert count == 1 and Image.open(io.BytesIO(pages[0].image or b"")).width == 1700  # 200 dpi


# -- other documents and sources -----------------------------------------------------------------


def test_txt_md_html_and_a_dataframe_of_sources(sim, make_extractor, tmp_path):
    (tmp_path / "a.txt").write_text("first page\fsecond page", encoding="utf-8")
    (tmp_path / "b.md").write_text("# Notes\n\n| x | y |\n", encoding="utf-8")
    (tmp_path / "c.html").write_text(
        "<html><head><style>p{}</style><script>var x=1</script></head><body><h1>Menu</h1>"
        "<table><tr><td>Tea &amp; cake</td><td>4</td></tr></table></body></html>",
        encoding="utf-8",
    )
    (tmp_path / "skip.csv").write_text("ignored", encoding="utf-8")
    ex = make_extractor(Table)
    out = ex.run_documents(tmp_path, per_page=True)
    assert [Path(s).name for s in out["kx_source"]] == ["a.txt", "a.txt", "b.md", "c.html"]
    assert out["kx_page"].tolist() == [1, 2, 1, 1]
    texts = sorted(text_of(c) for c in user_contents(sim))
    assert "Document: c.html\n\nMenu\nTea & cake | 4" in texts
    assert "Document: a.txt (page 2 of 2)\n\nsecond page" in texts

    sources = pd.DataFrame(
        {"path": [str(tmp_path / "b.md"), str(tmp_path / "gone.pdf")], "batch": [7, 8]},
        index=["x", "y"],
    )
    out = ex.run_documents(sources, text_column="doc_text")
    assert list(out.index) == ["x", "y"] and out["batch"].tolist() == [7, 8]
    assert out.loc["x", "doc_text"].startswith("# Notes")
    assert out.loc["x", "kx_error"] is None and "not found" in out.loc["y", "kx_error"]
    with pytest.raises(InputError, match="path column"):
        ex.run_documents(sources, path_column="file")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no documents"):
        ex.run_documents(tmp_path / "empty")
    # A path that does not exist is that row's error, like any unreadable document.
    out = ex.run_documents(tmp_path / "nothing_here.txt")
    assert "not found" in out.loc[0, "kx_error"]


def test_unreadable_documents_are_row_errors(sim, make_extractor, tmp_path, report):
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.4 this is not a pdf")
    (tmp_path / "data.bin").write_bytes(b"\x00")
    out = make_extractor(Table).run_documents(
        [report, tmp_path / "broken.pdf", tmp_path / "data.bin", tmp_path / "gone.txt"]
    )
    assert out["kx_error"].isna().tolist() == [True, False, False, False]
    assert "not a readable PDF" in out.loc[1, "kx_error"]
    assert "unsupported document type" in out.loc[2, "kx_error"]
    assert "not found" in out.loc[3, "kx_error"]
    assert len(chat_requests(sim)) == 1
    assert out.loc[1:, ["kx_prompt_tokens", "kx_attempts"]].to_numpy().sum() == 0


def test_missing_pypdfium2_fails_only_the_pdf_rows(
    sim, make_extractor, tmp_path, report, monkeypatch
):
    # Without the [pdf] extra, a folder of mixed documents still runs: the text files are
    # extracted, each PDF is its own row's error naming the install line.
    (tmp_path / "a.txt").write_text("Burr set, 2", encoding="utf-8")
    (tmp_path / "b.md").write_text("# Orders\n\nkettle 1", encoding="utf-8")
    (tmp_path / "c.html").write_text("<p>mug 3</p>", encoding="utf-8")
    monkeypatch.setitem(sys.modules, "pypdfium2", None)
    out = make_extractor(Table).run_documents(tmp_path)
    errors = dict(zip(out["kx_source"].map(lambda p: Path(p).name), out["kx_error"], strict=True))
    assert errors["a.txt"] is None and errors["b.md"] is None and errors["c.html"] is None
    assert install_hint("pdf") in errors["report.pdf"]
    assert len(chat_requests(sim)) == 3


def test_output_field_clashing_with_a_source_column_is_refused(make_extractor, tmp_path):
    (tmp_path / "a.txt").write_text("x", encoding="utf-8")
    sources = pd.DataFrame({"path": [str(tmp_path / "a.txt")], "title": ["t"]})
    with pytest.raises(InputError, match="prefix"):
        make_extractor(Table).run_documents(sources)


# -- chunks --------------------------------------------------------------------------------------


def test_chunks_run_separately_and_merge_in_order(sim, make_extractor, report):
    def responder(request: Any) -> Any:
        page = request.user_text.split("(page ", 1)[1].split(" ", 1)[0]
        if page == "2":
            return "not json"  # fails every reask: that chunk's error
        title = None if page == "1" else f"title {page}"
        return {"title": title, "rows": [{"name": f"p{page}-{i}", "qty": i} for i in range(2)]}

    sim.responder = responder
    out = make_extractor(Table, validation_retries=0).run_documents(report, chunk_pages=1)
    assert len(out) == 1 and out.loc[0, "kx_chunks"] == 4
    assert len(chat_requests(sim)) == 4
    assert [r["name"] for r in out.loc[0, "rows"]] == [
        "p1-0",
        "p1-1",
        "p3-0",
        "p3-1",
        "p4-0",
        "p4-1",
    ]
    assert out.loc[0, "title"] == "title 3"  # the first non-null scalar
    assert out.loc[0, "kx_error"].startswith("chunk 2 of 4: ")
    assert out.loc[0, "kx_prompt_tokens"] == usage_sum(sim, "prompt")
    assert out.loc[0, "kx_completion_tokens"] == usage_sum(sim, "completion")


def test_chunk_chars_splits_long_text(sim, make_extractor, tmp_path):
    paragraphs = [f"Paragraph {i} " + "word " * 40 for i in range(6)]
    (tmp_path / "long.md").write_text("\n\n".join(paragraphs), encoding="utf-8")
    out = make_extractor(Table).run_documents(tmp_path / "long.md", chunk_chars=500)
    sent = sorted(text_of(c) for c in user_contents(sim))
    assert out.loc[0, "kx_chunks"] == len(sent) == 3
    assert all(", part " in t for t in sent)
    assert all(len(t.split("\n\n", 1)[1]) <= 500 for t in sent)


def _chunked_folder(folder: Path, documents: int) -> list[str]:
    """``documents`` .md files of two ~500-character chunks each; their paths, sorted."""
    paths = []
    for i in range(documents):
        path = folder / f"doc{i}.md"
        path.write_text("\n\n".join(f"doc{i} part {j} " + "word " * 80 for j in range(2)))
        paths.append(str(path))
    return paths


def test_a_stopped_run_raises_with_one_row_per_document(sim, make_extractor, tmp_path):
    paths = _chunked_folder(tmp_path, 3)
    sim.responder = lambda request: Reply(status=401)
    with pytest.raises(RunStopped) as caught:
        make_extractor(Table, concurrency=1).run_documents(tmp_path, chunk_chars=500)
    assert isinstance(caught.value.cause, AuthenticationError)
    part = caught.value.partial
    # The documents' rows (not the chunks'): every one says why it has no value.
    assert part is not None and list(part["kx_source"]) == paths
    assert list(part["kx_chunks"]) == [2, 2, 2]
    assert part["kx_error"].notna().all() and part["rows"].isna().all()
    assert not any(c.startswith("kx_doc") for c in part.columns)


def test_documents_rerun_comes_from_the_store(sim, make_extractor, tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    _chunked_folder(folder, 2)
    store = tmp_path / "store.sqlite3"
    first = make_extractor(Table, store=store).run_documents(folder, chunk_chars=500)
    sent = len(chat_requests(sim))
    again = make_extractor(Table, store=store).run_documents(folder, chunk_chars=500)
    assert sent == 4 and len(chat_requests(sim)) == sent  # 2 documents x 2 chunks, once
    assert list(again["kx_from_store"]) == [True, True]
    assert not first["kx_from_store"].any()
    assert again["rows"].tolist() == first["rows"].tolist()
    assert again["kx_prompt_tokens"].sum() == 0


def test_split_text_and_plan_chunks():
    text = "aa bb. cc dd\nee ff\n\ngg hh ii"
    for limit in (5, 8, 12, 40):
        pieces = split_text(text, limit)
        assert all(len(p) <= limit for p in pieces)
        assert " ".join(" ".join(pieces).split()) == " ".join(text.split())
    assert split_text("x" * 10, 4) == ["xxxx", "xxxx", "xx"]
    pages = [Page(1, "a" * 30), Page(2, "b" * 30), Page(3, "", image=b"png"), Page(4, "c" * 90)]
    assert [[p.number for p in c] for c in plan_chunks(pages, chunk_pages=2)] == [[1, 2], [3, 4]]
    chunks = plan_chunks(pages, chunk_chars=64)
    assert [[p.number for p in c] for c in chunks] == [[1, 2, 3], [4], [4]]
    assert [len(p.text) for c in chunks for p in c] == [30, 30, 0, 64, 26]
    assert html_to_text("<p>a<br>b</p><ul><li>c</li><li>d &lt; e</li></ul>") == "a\nb\nc\nd < e"


# -- command line --------------------------------------------------------------------------------


def test_cli_run_docs(tmp_path, report, capsys):
    out_path = tmp_path / "tables.jsonl"
    schema = tmp_path / "schema.py"
    schema.write_text(
        "from pydantic import BaseModel\n"
        "class Item(BaseModel):\n    name: str\n    qty: int\n"
        "class Table(BaseModel):\n    title: str | None\n    rows: list[Item]\n",
        encoding="utf-8",
    )
    code = cli_main(
        [
            "run-docs",
            str(report),
            "--schema",
            f"{schema}:Table",
            "--per-page",
            "--pages",
            "1-3",
            "--explode",
            "rows",
            "--out",
            str(out_path),
            "--simulate",
            "--no-progress",
        ]
    )
    assert code == 0
    rows = [json.loads(line) for line in out_path.read_text(encoding="utf-8").splitlines()]
    assert {r["kx_page"] for r in rows} == {1, 2, 3}
    assert all({"kx_source", "kx_item", "name", "qty"} <= set(r) for r in rows)
    assert "wrote" in capsys.readouterr().err
