"""Write the example notebooks from the cell sources below, execute them, save them with outputs.

    python notebooks/build.py                 # write and execute all four (about 40 s)
    python notebooks/build.py 01 --no-execute # write one, without outputs

Edit the notebooks here, not in Jupyter, so they stay reproducible;
``tests/promises/test_notebooks.py`` executes the committed files and checks their cells still
match this script. Execution uses ``execute()`` below: a kernel running this interpreter
(``sys.executable``), whatever kernels Jupyter has registered, with the notebooks folder as working
directory. Needs ``pip install -e ".[dev]"`` (nbformat, nbclient, ipykernel, matplotlib, Pillow,
pypdfium2).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import nbformat

HERE = Path(__file__).resolve().parent
#: A kernel name no user setup defines, so execution never picks up another interpreter's kernel.
KERNEL_NAME = "kimi-extract-notebooks"
CELL_TIMEOUT_S = 120
#: What the saved notebooks ask for: Jupyter's default Python kernel.
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def md(*parts: str) -> Any:
    """A markdown cell of ``parts`` (each dedented on its own), separated by blank lines."""
    return nbformat.v4.new_markdown_cell("\n\n".join(_dedent(part) for part in parts))


def code(text: str) -> Any:
    return nbformat.v4.new_code_cell(_dedent(text))


def _dedent(text: str) -> str:
    return textwrap.dedent(text).strip()


def real_api_note(extra: str = "") -> str:
    """The note at the top of every notebook; ``extra`` continues its quote block."""
    note = _dedent(
        """
        > **Running against the real API.** This notebook runs offline against `kx.Simulator()`,
        > a local server that speaks the Kimi chat-completions API. Its answers are schema-valid
        > placeholders (deterministic words, not real readings of the input), while tokens, the
        > prefix cache and costs are accounted as the real API does. To use Kimi instead, set
        > `export KIMI_API_KEY=sk-...` (or `EVOLINK_API_KEY`) before starting Jupyter, optionally
        > `KIMI_BASE_URL` (default `https://direct.evolink.ai`), and set `SIMULATE = False` in the
        > first code cell. Nothing else changes; the real run costs money, so look at
        > `ex.estimate(...)` first.
        """
    )
    return note + "\n>\n" + _dedent(extra) if extra else note


SETUP = """
import kimi_extract as kx

SIMULATE = True  # False: the real Kimi API (reads KIMI_API_KEY / KIMI_BASE_URL)
if SIMULATE:
    sim = kx.Simulator().start()  # a local HTTP server on 127.0.0.1, stopped at the end
    # store=False: simulated answers stay out of the on-disk result store.
    connection = {"base_url": sim.base_url, "api_key": sim.api_key, "store": False}
else:
    connection = {}  # the key and URL come from the environment; results are stored for resume
"""

SAMPLES = """
import runpy
from pathlib import Path

EXAMPLES = Path("..", "examples")
{folder} = EXAMPLES / "{name}"  # point this at your own folder
if not {folder}.is_dir():  # a fresh clone: generate the samples (examples/make_samples.py)
    runpy.run_path(str(EXAMPLES / "make_samples.py"))["make_{name}"]({folder})
"""

TEARDOWN = """
if SIMULATE:
    sim.stop()
"""


def enrichment() -> list[Any]:
    return [
        md(
            """
            # Enriching a DataFrame: product reviews

            A table of product reviews goes in; the same table comes out with one column per field
            of a Pydantic model (sentiment, aspects, recommendation, stars) and per-row `kx_`
            accounting columns: tokens by bucket, cost, attempts, latency and errors. Then the run
            summary, and a plot of where the tokens went and how much of the prompt the prefix
            cache served.
            """,
            real_api_note(),
        ),
        code(SETUP),
        code(
            """
            from pathlib import Path

            import pandas as pd

            pd.set_option("display.max_colwidth", 60)
            reviews = pd.read_csv(Path("..", "examples", "reviews.csv"))
            reviews.head()
            """
        ),
        md(
            """
            ## The output model and the extractor

            The instructions and the few-shot example come first in every request and are
            byte-identical across rows, so after the first request Kimi's prefix cache serves them
            (prefixes longer than 256 tokens are cacheable). `reasoning_effort="low"` is the
            default.
            """
        ),
        code(
            '''
            from typing import Literal

            from pydantic import BaseModel, Field


            class Review(BaseModel):
                """One product review, classified."""

                sentiment: Literal["positive", "negative", "neutral"] = Field(
                    description="Overall sentiment of the review"
                )
                aspects: list[str] = Field(
                    description="Product aspects the reviewer mentions, e.g. battery, screen, price"
                )
                would_recommend: bool = Field(
                    description="Whether the reviewer recommends the product or would buy it again"
                )
                stars: int | None = Field(
                    default=None, ge=1, le=5, description="Star rating implied by the text, if any"
                )


            INSTRUCTIONS = """\\
            You read customer reviews of consumer products for a retailer's quality team.
            For each review decide the overall sentiment: positive when the reviewer is satisfied
            on balance, negative when a defect, a failure or poor service dominates, neutral when
            praise and complaints weigh about the same or the review is purely factual.
            List every product aspect the reviewer comments on as a short lowercase noun phrase
            (battery, sound, build quality, price, delivery, customer support, noise, size ...),
            without repeating an aspect and without aspects the reviewer does not mention.
            would_recommend is true only when the reviewer recommends the product or clearly
            would buy it again; a mixed review with no recommendation is false.
            stars is the rating the text states or clearly implies (1 to 5); leave it null when
            the review gives no rating and none can be inferred with confidence.
            Judge only from the review text: ignore the product name and do not guess facts about
            the product that the reviewer does not state."""

            EXAMPLES = [
                (
                    "Great blender, crushes ice in seconds. A bit loud. Five stars from me.",
                    Review(
                        sentiment="positive",
                        aspects=["performance", "noise"],
                        would_recommend=True,
                        stars=5,
                    ),
                )
            ]

            ex = kx.Extractor(
                Review,
                instructions=INSTRUCTIONS,
                examples=EXAMPLES,
                concurrency=4,
                progress=False,
                **connection,
            )
            ex
            '''
        ),
        md(
            """
            ## Estimate first

            `estimate` predicts requests, tokens and cost without calling the API (see
            `kimi_extract.run.estimate` for its assumptions).
            """
        ),
        code(
            """
            estimate = ex.estimate(reviews, text="review")
            print(estimate.summary())
            """
        ),
        md("## Run"),
        code(
            """
            out = ex.run(reviews, text="review")
            out[["product", "review", "sentiment", "aspects", "would_recommend", "stars"]].head(8)
            """
        ),
        md(
            """
            ## The accounting columns

            Every row carries what it cost, summed over all attempts for that row (reasks
            included). `kx_prompt_tokens` includes the cached and cache-write tokens;
            `kx_completion_tokens` includes the reasoning tokens. `kx_error` is None on success;
            `kx_from_store` is True for rows served from the result store (no request, no tokens).
            """
        ),
        code(
            """
            accounting = [c for c in out.columns if c.startswith("kx_")]
            out[accounting].head(8)
            """
        ),
        md(
            """
            The columns add up to the run's totals. The estimated prompt tokens match exactly here
            because the simulator counts tokens with the approximation the estimate uses (against
            Kimi they are close, not exact); the completion side is a deliberately high guess (400
            reasoning tokens per row at `reasoning_effort="low"`), so runs usually cost less than
            estimated.
            """
        ),
        code(
            """
            tokens = [
                "kx_prompt_tokens",
                "kx_cached_tokens",
                "kx_cache_write_tokens",
                "kx_completion_tokens",
                "kx_reasoning_tokens",
            ]
            usage = ex.last_run.usage
            pd.DataFrame(
                {
                    "sum of the kx_ columns": out[tokens].sum(),
                    "ex.last_run.usage": [
                        usage.prompt_tokens,
                        usage.cached_tokens,
                        usage.cache_write_tokens,
                        usage.completion_tokens,
                        usage.reasoning_tokens,
                    ],
                    "estimate": pd.array(
                        [
                            estimate.prompt_tokens,
                            estimate.cached_tokens,
                            estimate.cache_write_tokens,
                            estimate.completion_tokens,
                            None,
                        ],
                        dtype="Int64",
                    ),
                }
            )
            """
        ),
        md(
            """
            ## The run summary

            The same line is logged at INFO on the `kimi_extract` logger at the end of every run.
            """
        ),
        code(
            """
            report = ex.last_run
            print(report.summary())
            print(f"failed rows: {report.failed}, retries: {report.retries}")
            print(f"cost: ${report.usage.cost:.4f}")
            """
        ),
        md(
            """
            ## Where the tokens went

            `kx.plot_usage(out)` (needs `pip install -e '.[plot]'`) draws the tokens by
            bucket (the buckets do not overlap, so they add up to the total) and the cache-hit
            share over the run: cached / prompt tokens, cumulative over the rows in order. The
            first request writes the shared prefix to the cache; the rows after it read it.
            """
        ),
        code('kx.plot_usage(out, title=f"{len(out)} reviews, {ex.model}")'),
        md(
            """
            ## Using the result

            The enriched frame is an ordinary DataFrame: group, filter, join. Here, sentiment per
            product and the most mentioned aspects (with the simulator these are placeholder words).
            """
        ),
        code(
            """
            ok = out[out["kx_error"].isna()]
            ok.groupby("product")["sentiment"].value_counts().unstack(fill_value=0)
            """
        ),
        code(
            """
            ok.explode("aspects")["aspects"].value_counts().head(10)
            """
        ),
        code(TEARDOWN),
    ]


def documents() -> list[Any]:
    return [
        md(
            """
            # Tables from documents: PDFs to a tidy DataFrame

            Each PDF page becomes one request (`per_page=True`). Pages with a text layer send their
            text; a scanned page (no text layer) is rendered to a PNG and sent as an image
            (`pdf_mode="auto"`, the default). The model returns each page's table as a list of
            rows, and `explode="rows"` turns every item of that list into a table row, with
            `kx_source`, `kx_page` and `kx_item` saying where it came from. Needs
            `pip install -e '.[pdf]'` (pypdfium2).
            """,
            real_api_note(),
        ),
        code(SETUP),
        code(SAMPLES.format(folder="DOCS", name="docs")),
        code(
            """
            import pypdfium2 as pdfium

            pdfs = sorted(DOCS.glob("*.pdf"))
            for path in pdfs:
                print(f"{path.name}: {len(pdfium.PdfDocument(path))} page(s)")
            """
        ),
        md("## The output model: one page's table"),
        code(
            '''
            from pydantic import BaseModel, Field


            class LineItem(BaseModel):
                """One row of an order table."""

                item: str = Field(description="Item name as printed")
                quantity: int = Field(description="Quantity ordered")
                unit_price: float | None = Field(description="Unit price in USD, if printed")


            class PageTable(BaseModel):
                """The order table on one page (empty when the page has none)."""

                title: str | None = Field(description="The table's title or heading, if any")
                rows: list[LineItem] = Field(description="Every table row, in order; [] if none")


            ex = kx.Extractor(
                PageTable,
                instructions="Copy the order table on this page. Quantities are integers.",
                progress=False,
                **connection,
            )
            '''
        ),
        md(
            """
            ## Run: one request per page, one row per table row

            `text_column="page_text"` keeps the text each page sent (empty for the scanned page,
            which went as an image).
            """
        ),
        code(
            """
            table = ex.run_documents(pdfs, per_page=True, explode="rows", text_column="page_text")
            table["document"] = table["kx_source"].map(lambda source: Path(source).name)
            n_pages = len(table[["kx_source", "kx_page"]].drop_duplicates())
            print(f"{len(pdfs)} PDFs -> {n_pages} pages -> {len(table)} rows")
            table[["document", "kx_page", "kx_item", "title", "item", "quantity", "unit_price"]]
            """
        ),
        md("What each page sent:"),
        code(
            """
            pages = table.drop_duplicates(["kx_source", "kx_page"])
            pages[["document", "kx_page"]].assign(
                sent=pages["page_text"].map(lambda text: "text" if text.strip() else "image"),
                page_text=pages["page_text"].str.slice(0, 60),
            )
            """
        ),
        md(
            """
            ## A tidy table

            One row per line item, one column per variable, with the provenance kept. Pages with
            no table keep a row with empty item columns (so no page disappears); drop them here.
            """
        ),
        code(
            """
            columns = ["document", "page", "table", "item", "quantity", "unit_price", "line_total"]
            tidy = (
                table.dropna(subset=["item"])
                .assign(line_total=lambda t: (t["quantity"] * t["unit_price"]).round(2))
                .rename(columns={"kx_page": "page", "title": "table"})
                .loc[:, columns]
                .reset_index(drop=True)
            )
            tidy
            """
        ),
        code(
            """
            tidy.groupby("document").agg(
                items=("item", "count"), quantity=("quantity", "sum"), total=("line_total", "sum")
            )
            """
        ),
        md(
            """
            ## Accounting survives the explode

            A page's tokens and cost sit on its first item row (the other item rows hold 0), so
            the column sums still equal what the server reported for the run.
            """
        ),
        code(
            """
            usage = ex.last_run.usage
            assert table["kx_prompt_tokens"].sum() == usage.prompt_tokens
            assert table["kx_completion_tokens"].sum() == usage.completion_tokens
            print(ex.last_run.summary())
            """
        ),
        md(
            """
            ## Grounded rows: every value traced to its place on the page

            With `grounding=True` each string, number and date the model wrote is looked up in the
            text the page sent (exact, then normalised, then fuzzy; no extra tokens): `kx_spans`
            lists every value with its `page`, `start`/`end` offsets into that page's text, the
            match `kind` and, on PDF text layers, `boxes` over the evidence; `kx_grounded` is the
            share found. The default simulator writes placeholder words, so this part uses its
            extractive mode: strings are copied from the page (20 % slightly altered: case,
            spacing, a typo, full-width forms), numbers are drawn at random, so they are rightly
            flagged `none` (unsupported). The scanned page sent no text, so nothing on it can be
            grounded.
            """
        ),
        code(
            """
            if SIMULATE:
                extractive = kx.Simulator(answers="extractive", perturb=0.2).start()
                grounded_connection = {
                    "base_url": extractive.base_url,
                    "api_key": extractive.api_key,
                    "store": False,
                }
            else:
                grounded_connection = connection

            grounded_ex = kx.Extractor(
                PageTable,
                instructions="Copy the order table on this page. Quantities are integers.",
                grounding=True,
                progress=False,
                **grounded_connection,
            )
            grounded = grounded_ex.run_documents(pdfs, per_page=True, text_column="page_text")
            grounded["document"] = grounded["kx_source"].map(lambda source: Path(source).name)
            grounded[["document", "kx_page", "title", "kx_grounded"]]
            """
        ),
        md("A few spans, and the evidence each points at (`page_text[start:end]`):"),
        code(
            """
            import pandas as pd


            def evidence(text, span):
                return text[span["start"] : span["end"]] if span["start"] is not None else None


            spans = pd.DataFrame(
                [
                    {"document": row.document, "evidence": evidence(row.page_text, span), **span}
                    for row in grounded.itertuples()
                    for span in row.kx_spans or []
                ]
            )
            spans["page"] = spans["page"].astype("Int64")  # None: not found, so on no page
            spans[["document", "page", "path", "value", "kind", "score", "evidence"]].head(8)
            """
        ),
        md(
            """
            ## The review page

            `kx.review(frame, "review.html", text_column=...)` writes one self-contained HTML
            file: a card per page with the source (for PDFs the page image, boxes over the
            evidence), each located value highlighted in the colour of its match (verified,
            fuzzy, near miss), unsupported values flagged, filters and counts per value, and a
            list of the doubtful ones. The documents named in `kx_source` are read again only
            from under `documents_root=` (default: the current directory; here the samples
            folder). From the shell: `kimi-extract review OUT.parquet --html review.html`
            (there the table's folder is the default root).
            """
        ),
        code(
            """
            import tempfile

            review_path = Path(tempfile.mkdtemp()) / "review.html"
            kx.review(grounded, review_path, text_column="page_text", documents_root=DOCS)
            print(f"{review_path.name}: {review_path.stat().st_size:,} bytes, no external assets")
            """
        ),
        md(
            """
            What it looks like (a screenshot taken by the test suite in headless Chromium).
            Each card also has a check block, where a reviewer marks values right or wrong and
            types the right ones (checked against the field types of `model=`; without it, types
            inferred from the values); here the three doubtful values are corrected and row 1 is
            marked correct. Notebook 04 reads such corrections back as gold.

            ![The review page: the source with highlighted values and the fields table](review.png)
            """
        ),
        md(
            """
            ## Supporting quotes: `grounding="quotes"`

            `grounding="quotes"` also asks the model for a short quote per field (the schema gains
            a `kx_quotes` object per object; the output columns stay the same). Each quote is
            checked against the page the same way, and a value whose quote is not there is
            unsupported (kind `none`); a value found only through its quote (a number written in
            words, an inferred category) gets kind `quote`: the evidence is the quote's, for a
            person to judge (here the simulator's random numbers, quoted from elsewhere on the
            page). It costs tokens: the answer carries the quotes (section 9 of
            `benchmarks/RESULTS.md` measures it).
            """
        ),
        code(
            """
            quoted_ex = kx.Extractor(
                PageTable,
                instructions="Copy the order table on this page. Quantities are integers.",
                grounding="quotes",
                progress=False,
                **grounded_connection,
            )
            quoted = quoted_ex.run_documents(pdfs, per_page=True, text_column="page_text")
            for name, run in (("grounding=True", grounded_ex), ('grounding="quotes"', quoted_ex)):
                usage = run.last_run.usage
                print(
                    f"{name:>20}: prompt {usage.prompt_tokens:,} tokens, "
                    f"completion {usage.completion_tokens - usage.reasoning_tokens:,} "
                    "(without reasoning)"
                )
            first = quoted["kx_spans"].map(len).gt(0).idxmax()
            pd.DataFrame(quoted.loc[first, "kx_spans"])[["path", "value", "kind", "quote"]].head(4)
            """
        ),
        code(
            """
            if SIMULATE:
                extractive.stop()
            """
        ),
        *long_documents(),
        code(TEARDOWN),
    ]


LONG_INVOICE = """
import random

make_samples = runpy.run_path(str(EXAMPLES / "make_samples.py"))


def long_invoice(path, pages=40, per_page=6, seed=7):
    \"\"\"A long PDF invoice and its answer key: the table header on page 1 only, a running
    "Brought forward" subtotal at the top of every later page, the total on the last page.\"\"\"
    rng = random.Random(seed)
    words = "brass hinge oak panel steel bracket walnut shelf copper pipe zinc bolt".split()
    items, texts, running = [], [], 0.0
    for page in range(pages):
        lines = ["Invoice INV-7", "Vendor: Northwind Supply", "SKU Description Quantity Amount"]
        lines = lines if page == 0 else [f"Brought forward: {running:.2f}"]
        for n in range(page * per_page, (page + 1) * per_page):
            quantity, amount = rng.randint(1, 40), round(rng.uniform(5, 900), 2)
            row = f"N-{n:04d} {' '.join(rng.sample(words, 2))} {quantity} {amount:.2f}"
            item = {"sku": f"N-{n:04d}", "quantity": quantity, "amount": amount, "@at": row}
            items.append(item)
            lines.append(row)
            running += amount
        texts.append(lines)
    total = f"Total due: {running:.2f} EUR"
    texts[-1].append(total)
    pdf = [[(50, 760 - 14 * i, 9, line) for i, line in enumerate(lines)] for lines in texts]
    make_samples["write_pdf"](path, pdf)
    decoys = [[float(t.split(": ")[1]), t] for lines in texts for t in lines if "forward" in t]
    key = {  # the right answer, and where each value is written (the simulator cannot read)
        "vendor": "Northwind Supply",
        "total": round(running, 2),
        "items": items,
        "@at": {"vendor": "Vendor: Northwind Supply", "total": total},
        "@decoys": {"total": decoys},  # look-alikes a careless reader takes for the total
    }
    return key


invoice_pdf = Path(tempfile.mkdtemp()) / "long_invoice.pdf"
key = long_invoice(invoice_pdf)
print(f"{invoice_pdf.name}: 40 pages, {len(key['items'])} line items")
"""


def long_documents() -> list[Any]:
    """Notebook 02's last part: a long PDF, passes 1 vs 2, duplicates removed, conflicts."""
    return [
        md(
            """
            ## Long documents: every item found once

            A long document goes in chunks (`chunk_chars=`, `chunk_pages=`). Consecutive chunks
            overlap (`chunk_overlap=`, default 10 % of a chunk), so an item cut by one chunk's end
            is whole in the next; the items both chunks report are merged by their spans
            (`kx_duplicates_removed` counts them); chunks that read different values for one
            field are listed in `kx_conflicts`; `passes=2` asks each chunk, in the same
            conversation, for the items it missed.

            The simulator cannot read, so here it answers from an answer key that says where each
            item is written, with the mistakes of its illustrative quality model: a first answer
            finds 90 % of the items it sees and stops after 40 items, a follow-up finds 75 % of
            the rest, and one time in three it takes a "Brought forward" subtotal for the total.
            Made-up rates, not Kimi's: the point is what the options do.
            """
        ),
        code(LONG_INVOICE),
        code(
            """
            class Line(BaseModel):
                sku: str
                quantity: int | None
                amount: float | None


            class Invoice(BaseModel):
                vendor: str | None
                total: float | None
                items: list[Line]


            def run_long(label, **options):
                if SIMULATE:  # a fresh simulator per run, answering from the key
                    keyed = kx.Simulator(answer_keys=[key]).start()
                    long_connection = {"base_url": keyed.base_url, "api_key": keyed.api_key}
                    long_connection["store"] = False
                else:
                    long_connection = connection
                long_ex = kx.Extractor(Invoice, grounding=True, progress=False, **long_connection)
                frame = long_ex.run_documents(invoice_pdf, chunk_chars=2500, **options)
                if SIMULATE:
                    keyed.stop()
                found = {item["sku"] for item in frame.loc[0, "items"]}
                right = {item["sku"] for item in key["items"]}
                usage = long_ex.last_run.usage
                return frame, long_ex, {
                    "run": label,
                    "items": len(frame.loc[0, "items"]),
                    "found": f"{len(found & right) / len(right):.0%}",
                    "duplicates removed": frame.loc[0, "kx_duplicates_removed"],
                    "conflicts": len(frame.loc[0, "kx_conflicts"]),
                    "total": frame.loc[0, "total"],
                    "requests": usage.requests,
                    "tokens": usage.total_tokens,
                }


            naive, _, naive_row = run_long("no overlap", chunk_overlap=0, dedupe_on=[])
            one, _, one_row = run_long("overlap + span merge")
            two, two_ex, two_row = run_long("... and passes=2", passes=2, merge={"total": "last"})
            print(f"the answer key: {len(key['items'])} items, total {key['total']}")
            pd.DataFrame([naive_row, one_row, two_row]).set_index("run")
            """
        ),
        md(
            """
            What each pass found and cost (`ex.last_run.pass_summary()`), and the values the chunks
            disagreed on: the "Brought forward" subtotals some chunks took for the total, with
            the pages they were read on. `merge={"total": "last"}` kept the last chunk's, the one
            that holds the real total; the others are listed, not dropped.
            """
        ),
        code(
            """
            print(two_ex.last_run.pass_summary())
            print("items by pass:", two.loc[0, "kx_items_by_pass"])
            pd.DataFrame(two.loc[0, "kx_conflicts"])
            """
        ),
    ]


def captioning() -> list[Any]:
    return [
        md(
            """
            # Captioning a folder of images

            Every image in a folder becomes a row: a caption, tags, the dominant color and whether
            it shows text. Images go as `image_url` parts: png, jpeg, webp and gif as they are;
            other formats (the .bmp here) are converted, phone photos rotated by their EXIF
            orientation are turned upright, and large images are downscaled first (Pillow:
            `pip install -e '.[images]'`).
            """,
            real_api_note(
                """
                > Without a `base_url`, requests carrying images go to the multimodal endpoint
                > `https://api.evolink.ai` (text-only requests to `https://direct.evolink.ai`);
                > setting `KIMI_BASE_URL` sends every request to that one host.
                """
            ),
        ),
        code(SETUP),
        code(SAMPLES.format(folder="IMAGES", name="images")),
        code(
            """
            import pandas as pd

            SUFFIXES = {".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp", ".tif", ".tiff"}
            paths = sorted(p for p in IMAGES.iterdir() if p.suffix.lower() in SUFFIXES)
            images = pd.DataFrame({"file": [p.name for p in paths], "image": paths})
            images
            """
        ),
        code(
            '''
            from pydantic import BaseModel, Field


            class Caption(BaseModel):
                """What an image shows."""

                caption: str = Field(description="One sentence describing the image")
                tags: list[str] = Field(description="3 to 8 search tags, lowercase single words")
                dominant_color: str = Field(description="The color covering most of the image")
                has_text: bool = Field(description="Whether the image contains readable text")


            ex = kx.Extractor(
                Caption,
                instructions="Describe the image for a searchable photo catalogue.",
                progress=False,
                **connection,
            )
            '''
        ),
        md(
            """
            ## Run

            `images=` names the column of images: paths here; bytes, PIL images, `data:` URLs and
            http(s) URLs work too, as do lists of them (several images in one request).
            """
        ),
        code(
            """
            out = ex.run(images, images="image")
            out[["file", "caption", "tags", "dominant_color", "has_text", "kx_error"]]
            """
        ),
        md(
            """
            ## Thumbnails with their captions

            Drawn upright (EXIF orientation applied), as the model saw them.
            """
        ),
        code(
            """
            import textwrap

            import matplotlib.pyplot as plt
            from PIL import Image, ImageOps

            fig = plt.figure(figsize=(3.2 * len(out), 3.8), layout="constrained")
            axes = fig.subplots(1, len(out), squeeze=False)[0]
            for ax, row in zip(axes, out.itertuples(), strict=True):
                with Image.open(row.image) as picture:
                    thumbnail = ImageOps.exif_transpose(picture).convert("RGB")
                thumbnail.thumbnail((256, 256))
                ax.imshow(thumbnail)
                ax.set_xticks([])
                ax.set_yticks([])
                for spine in ax.spines.values():
                    spine.set_color("lightgray")
                caption = row.caption if row.kx_error is None else f"error: {row.kx_error}"
                tags = ", ".join(row.tags or [])
                ax.set_title(f"{row.file}\\n" + textwrap.fill(caption, 28), fontsize=9)
                ax.set_xlabel(textwrap.fill(tags, 34), fontsize=8, color="dimgray")
            plt.show()
            """
        ),
        md("## A tag index: which images carry each tag"),
        code(
            """
            (
                out.explode("tags")
                .dropna(subset=["tags"])
                .groupby("tags")["file"]
                .agg(lambda files: ", ".join(sorted(set(files))))
                .rename("images")
                .to_frame()
            )
            """
        ),
        code(
            """
            print(ex.last_run.summary())
            """
        ),
        code(TEARDOWN),
    ]


def choosing() -> list[Any]:
    return [
        md(
            """
            # Choosing a model and effort: accuracy against cost

            Kimi offers three models and three reasoning efforts at very different prices. Which
            is good enough for *this* extraction, and what does each right answer cost? Here 300
            invoices with known right answers (gold) go through 7 candidates: `kimi-k3.1-pro` and
            `kimi-k3.1-pro-highspeed` at `low`, `high` and `max` effort, and `kimi-k3` (which takes
            only `max`). `kx.compare` runs every candidate on the same rows, scores each against
            the gold with bootstrap intervals, prices it, and marks the Pareto front: the
            candidates that no other beats on both accuracy and cost. A paired test on the same
            rows says whether a difference is real; the worst rows and a review page show what
            went wrong.
            """,
            real_api_note(
                """
                > **About the simulated accuracy.** The simulator cannot read. Each row here
                > carries its right answer in a last line, `kx-answer-key: {...}`, and the
                > simulator answers from it with mistakes (wrong numbers, shifted dates, typos,
                > other enum values, dropped or invented items, values left out) at *illustrative*
                > rates per model and effort (`kimi_extract.simulator.quality`): made up to show
                > the method, not a measurement of Kimi. Against the real API the key is left out
                > (`SIMULATE = False` does it) and the scores are Kimi's own.
                """
            ),
        ),
        code(SETUP),
        md(
            """
            ## 300 invoices and their right answers

            Synthetic invoices, each written as a short text; `gold` holds what a careful person
            would extract from each. In a real project the gold comes from people (the review
            page, below, is one way to make it).
            """
        ),
        code(
            '''
            import random
            from datetime import date, timedelta
            from typing import Literal

            import pandas as pd
            from pydantic import BaseModel, Field

            from kimi_extract.simulator.quality import with_answer_key


            class Item(BaseModel):
                description: str = Field(description="The item as printed")
                quantity: int = Field(ge=1, description="Units ordered")
                unit_price: float = Field(description="Price per unit, in the invoice's currency")


            class Invoice(BaseModel):
                """One invoice, as printed."""

                vendor: str = Field(description="The company that issued the invoice")
                currency: Literal["EUR", "USD", "GBP", "CHF"]
                issued: date = Field(description="Date of issue")
                due: date | None = Field(description="Payment due date; null when none is stated")
                paid: bool = Field(description="Whether the invoice says it has been paid")
                total: float = Field(description="The total amount due")
                items: list[Item] = Field(description="Every line item, in order")


            VENDORS = ["Acme GmbH", "Nordlicht AG", "Zeta Supplies Ltd", "Okawa Trading KK",
                       "Brix & Sons", "Lumen SA", "Halden Office AS", "Marlow Print Co"]
            GOODS = ["desk lamp", "office chair", "paper ream A4", "ink cartridge", "stapler",
                     "monitor arm", "whiteboard", "cable set", "notebook pack", "desk organizer"]


            def make_invoice(number: int, rng: random.Random) -> tuple[str, Invoice]:
                items = [
                    Item(description=rng.choice(GOODS), quantity=rng.randint(1, 20),
                         unit_price=round(rng.uniform(1.5, 400), 2))
                    for _ in range(rng.randint(1, 5))
                ]
                issued = date(2024, 1, 1) + timedelta(days=rng.randrange(365))
                paid = rng.random() < 0.3
                invoice = Invoice(
                    vendor=rng.choice(VENDORS),
                    currency=rng.choice(["EUR", "USD", "GBP", "CHF"]),
                    issued=issued,
                    due=None if paid else issued + timedelta(days=rng.choice([14, 30, 60])),
                    paid=paid,
                    total=round(sum(i.quantity * i.unit_price for i in items), 2),
                    items=items,
                )
                lines = "\\n".join(
                    f"  {i.quantity:>3} x {i.description:<16} {i.unit_price:>9.2f}" for i in items
                )
                status = "PAID - thank you." if paid else f"Payment due {invoice.due:%d %B %Y}."
                text = (
                    f"{invoice.vendor}\\nInvoice INV-{number:05d}, issued {issued:%d %B %Y}\\n"
                    f"{lines}\\nTotal {invoice.total:,.2f} {invoice.currency}. {status}"
                )
                return text, invoice


            rng = random.Random(2024)
            made = [make_invoice(n, rng) for n in range(300)]
            gold = [invoice for _, invoice in made]
            data = pd.DataFrame({"document": [text for text, _ in made]})
            # the simulator answers from an answer key; Kimi reads the document itself
            keyed = [with_answer_key(text, answer) for text, answer in made]
            data["text"] = keyed if SIMULATE else data["document"]
            print(data["text"][0])
            '''
        ),
        md(
            """
            ## The candidates, priced before anything is sent

            A candidate is a dict of settings (or an `Extractor`, or a `kx.ExtractorConfig`);
            settings given to `compare` itself apply to all of them. `estimate_only=True` returns
            each candidate's `estimate()` and sends nothing: completion grows with effort
            (reasoning tokens), and each model has its own price.
            """
        ),
        code(
            '''
            INSTRUCTIONS = """\\
            You read supplier invoices for an accounts-payable team. Copy the vendor's name as
            printed at the top. The currency is the one the total is stated in. Dates are the
            invoice's own (issue and payment due); due is null when the invoice states no due
            date, and an invoice marked paid has none. total is the amount due as printed,
            without currency symbols or thousands separators. List every line item in the order
            printed, with its quantity and unit price. Never invent items, and never fill a
            value the invoice does not state."""

            MODELS = [("pro", "kimi-k3.1-pro"), ("highspeed", "kimi-k3.1-pro-highspeed")]
            candidates = {
                f"{short}-{effort}": {"model": model, "reasoning_effort": effort}
                for short, model in MODELS
                for effort in ["low", "high", "max"]
            }
            candidates["k3-max"] = {"model": "kimi-k3", "reasoning_effort": "max"}

            settings = dict(
                model=Invoice,
                text="text",
                instructions=INSTRUCTIONS,
                concurrency=16,
                progress=False,
                **connection,
            )
            estimate = kx.compare(candidates, data, gold, estimate_only=True, **settings)
            estimate[["model", "effort", "requests", "completion_tokens", "cost"]]
            '''
        ),
        md(
            """
            ## Run and score

            Every candidate runs on the same 300 rows, those of one model back to back: effort is
            not part of the prompt, so after the first the others read each row's prompt from
            Kimi's prefix cache. That makes the comparison cheaper; `cost` is still each
            candidate's price on its own (what a run of it alone bills), `paid` what this
            comparison paid. A result store shared by the candidates (`store="compare.sqlite3"`)
            makes a rerun free: store keys include the model and the effort.
            """
        ),
        code(
            """
            result = kx.compare(candidates, data, gold, **settings)
            print(result.summary())
            """
        ),
        code(
            """
            columns = ["micro_f1", "row_exact", "cost", "paid", "cost_per_correct_row",
                       "reasoning_tokens", "errors", "pareto"]
            result.table[columns].sort_values("cost").style.format(
                {"micro_f1": "{:.1%}", "row_exact": "{:.1%}", "cost": "${:.3f}",
                 "paid": "${:.3f}", "cost_per_correct_row": "${:.4f}",
                 "reasoning_tokens": "{:,}"}
            )
            """
        ),
        md(
            """
            ## Accuracy against cost

            `kx.plot_compare(result)` (needs `pip install -e '.[plot]'`) draws each candidate's
            micro F1 with its 95 % bootstrap interval against its cost; the Pareto front is
            filled and joined. A candidate off the front is beaten by another that is at least
            as accurate and no dearer.
            """
        ),
        code('kx.plot_compare(result, title="300 invoices, 7 candidates")'),
        md(
            """
            ## Is a difference real?

            Every candidate ran on the *same* rows, so the right test pairs them:
            `result.better(a, b)` resamples the rows once for both and reports the difference of
            micro F1 with its interval and a p-value (an interval that excludes 0 is a real
            difference). The highspeed model is the same model served faster, so at the same
            effort its difference to `pro` is noise, at twice the price; a point on the front can
            be there by luck, which is what the paired test is for.
            """
        ),
        code(
            """
            pairs = [("pro-high", "pro-low"), ("pro-max", "pro-high"), ("k3-max", "pro-high"),
                     ("highspeed-low", "pro-low"), ("highspeed-high", "pro-high")]
            for a, b in pairs:
                print(f"{a:>13} vs {b:<9} {result.better(a, b)}")
            """
        ),
        md(
            """
            ## The cheapest that is good enough

            Say the team needs 97 % micro F1, and wants to be sure of it: the lower end of the
            interval must clear the bar, not only the point estimate (which a lucky candidate
            can clear).
            """
        ),
        code(
            """
            print("point estimate clears 97 %:", result.cheapest(0.97))
            choice = result.cheapest(0.97, confident=True)
            print("interval clears 97 %      :", choice)
            """
        ),
        md(
            """
            ## The rows to look at first

            Each candidate's `Evaluation` scores every field path and every row (`fields`,
            `rows`); `worst(n)` lists the rows with the lowest score. Beside them, what the
            candidate answered and the gold.
            """
        ),
        code(
            """
            chosen = result.evaluations[choice]
            chosen.fields[["support", "precision", "recall", "f1"]].round(3)
            """
        ),
        code(
            """
            worst = chosen.worst(5)
            output = result.outputs[choice]
            side_by_side = [
                {
                    "row": row,
                    "field": name,
                    "answered": output.loc[row, name],
                    "gold": gold[row].model_dump(mode="json")[name],
                }
                for row, wrong in worst["fields"].items()
                for name in dict.fromkeys(path.split("[")[0] for path in wrong)
            ]
            pd.DataFrame(side_by_side)
            """
        ),
        md(
            """
            ## A review page

            `kx.review` writes one static HTML page to check an output against its sources: each
            row's document beside the values extracted from it (with `grounding=True`, each value
            highlighted where it was found). Here, the worst rows of the chosen candidate. With
            `model=Invoice` every card also gets a check block: a reviewer marks each value right
            or wrong, types the right one (checked against the field's type), marks list items
            missing or adds them, and downloads the corrections;
            `kx.read_corrections(path, output, model=Invoice)` turns the file into gold for
            `kx.evaluate` and `kx.compare`.
            """
        ),
        code(
            """
            import tempfile
            from pathlib import Path

            review_path = Path(tempfile.mkdtemp()) / "review.html"
            on_page = output.loc[worst.index]
            kx.review(
                on_page, review_path, text_column="document", model=Invoice,
                title=f"{choice}: the worst rows",
            )
            print(f"{review_path.name}: {review_path.stat().st_size:,} bytes, no external assets")
            """
        ),
        md(
            """
            ## Corrections read back as gold

            In real use a reviewer opens the page, checks each card and presses **download
            corrections**; the browser saves `review.corrections.json` (the rows the reviewer
            acted on; meanwhile the page keeps the marks in the browser, so a reload loses
            nothing). Nobody clicks here, so the next cell writes that file as the page's download
            does, standing in for a reviewer who reads each invoice: a value that differs from
            the invoice is corrected, a line item not on it is marked *not in source*, a missing
            one is added, and every row is marked correct. The page carries what the file needs
            (its fields, their types, each row's values and the hash of them all) in its
            `kx-data` block. With a file downloaded from the page, skip this cell.
            """
        ),
        code(
            '''
            import json
            import re
            from datetime import UTC, datetime

            page = review_path.read_text(encoding="utf-8")
            block = r'<script type="application/json" id="kx-data">(.*?)</script>'
            page_data = json.loads(re.search(block, page, re.S).group(1))
            check = page_data["check"]  # the fields, their types, the data hash


            def marks_for(name, shown, right):
                """A reviewer's marks on one field's value, as the page records them."""
                if not isinstance(shown, list):
                    if shown == right:
                        return []
                    return [{"path": name, "status": "corrected", "value": right}]
                missing, marks = list(right or []), []
                for number, item in enumerate(shown):
                    if item in missing:
                        missing.remove(item)  # this item is on the invoice
                    else:
                        marks.append({"path": f"{name}[{number}]", "status": "not_in_source"})
                return marks + [{"path": name, "status": "added", "value": i} for i in missing]


            def after(name, shown, marks):
                """The value once the marks are applied, as the page computes it."""
                if not isinstance(shown, list):
                    return marks[0]["value"] if marks else shown
                dropped = {m["path"] for m in marks if m["status"] == "not_in_source"}
                kept = [item for n, item in enumerate(shown) if f"{name}[{n}]" not in dropped]
                return kept + [m["value"] for m in marks if m["status"] == "added"]


            rows = []
            for card in page_data["cards"]:
                for row in card["rows"]:
                    index, ident = row["key"]
                    right = gold[index].model_dump(mode="json")  # what the invoice says
                    fields = {}
                    for name in check["fields"]:
                        shown = row["values"][name]
                        marks = marks_for(name, shown, right[name])
                        fields[name] = {
                            "status": "corrected" if marks else "unmarked",
                            "value": after(name, shown, marks),
                            "shown": shown,
                            "marks": marks,
                        }
                    changed = any(field["marks"] for field in fields.values())
                    rows.append({
                        "position": row["pos"], "index": index, "id": ident,
                        "label": card["label"], "status": "corrected" if changed else "confirmed",
                        "confirmed": True, "fields": fields,
                    })

            corrections = {
                "format": check["format"], "version": check["version"],
                "data_hash": check["hash"], "page": check["name"], "model": check["model"],
                "typed": check["typed"], "prefix": check["prefix"],
                "id_column": check["id_column"], "fields": check["fields"],
                "types": check["types"], "saved": datetime.now(UTC).isoformat(),
                "rows": rows,
            }
            corrections_path = review_path.with_suffix(".corrections.json")
            corrections_path.write_text(json.dumps(corrections, indent=1), encoding="utf-8")
            for row in rows:
                marked = [m for field in row["fields"].values() for m in field["marks"]]
                print(f"row {row['index']}: {row['status']}",
                      [f"{m['path']} {m['status']}" for m in marked])
            '''
        ),
        md(
            """
            `kx.read_corrections(path, on_page, model=Invoice)` checks the file against the
            predictions the page was made from (by the data hash: a file from other predictions
            warns), validates every row against the model, and returns the gold: one row per
            reviewed row, with the predictions' index labels. `kx.evaluate` takes it as it takes any
            gold (predicted rows without a gold row are left out), and so does `kx.compare`,
            which then runs only the rows the gold covers. The stand-in reviewer read the
            invoices, so the corrections score these rows exactly as the invoices' gold did.
            """
        ),
        code(
            """
            reviewed = kx.read_corrections(corrections_path, on_page, model=Invoice)
            print(f"{len(reviewed)} rows of gold from {corrections_path.name}:",
                  list(reviewed.index))
            from_review = kx.evaluate(on_page, reviewed, model=Invoice)
            print(from_review.summary())
            same = from_review.rows["score"].equals(chosen.rows.loc[reviewed.index, "score"])
            print("\\nrow scores equal those against the invoices' gold:", same)
            """
        ),
        code(TEARDOWN),
    ]


NOTEBOOKS = {
    "01_dataframe_enrichment.ipynb": enrichment,
    "02_tables_from_documents.ipynb": documents,
    "03_image_captioning.ipynb": captioning,
    "04_choosing_a_model.ipynb": choosing,
}


def build(name: str) -> Any:
    """The notebook ``name`` (a key of ``NOTEBOOKS``), without outputs."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = NOTEBOOKS[name]()
    for number, cell in enumerate(notebook.cells):
        cell["id"] = f"cell-{number:02d}"  # stable ids keep rebuild diffs small
    notebook.metadata = {"kernelspec": dict(KERNELSPEC), "language_info": {"name": "python"}}
    return notebook


@contextmanager
def kernel_for_this_python() -> Iterator[str]:
    """A kernelspec running ``sys.executable``, visible to Jupyter while the context is open.

    Jupyter's own ``python3`` kernel may point at another interpreter (a user-level kernelspec
    wins over the one ipykernel installs into the venv), so execution uses a temporary kernelspec
    on ``JUPYTER_PATH`` under a name nothing else defines. Yields the kernel name.
    """
    with tempfile.TemporaryDirectory(prefix="kx-kernel-") as root:
        spec_dir = Path(root, "kernels", KERNEL_NAME)
        spec_dir.mkdir(parents=True)
        spec = {
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": f"Python ({sys.executable})",
            "language": "python",
        }
        (spec_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
        old = os.environ.get("JUPYTER_PATH")
        os.environ["JUPYTER_PATH"] = os.pathsep.join(p for p in (root, old) if p)
        try:
            yield KERNEL_NAME
        finally:
            if old is None:
                os.environ.pop("JUPYTER_PATH", None)
            else:
                os.environ["JUPYTER_PATH"] = old


def execute(notebook: Any, *, kernel_name: str, cwd: Path = HERE) -> Any:
    """Run every cell of ``notebook`` in place; raises ``nbclient.exceptions.CellExecutionError``
    on the first cell that fails."""
    from nbclient import NotebookClient

    client = NotebookClient(
        notebook,
        kernel_name=kernel_name,
        timeout=CELL_TIMEOUT_S,
        resources={"metadata": {"path": str(cwd)}},
    )
    client.execute()
    # Keep the saved metadata about the notebook, not about the machine that ran it.
    notebook.metadata["kernelspec"] = dict(KERNELSPEC)
    return notebook


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("only", nargs="*", help="notebook name prefixes (default: all)")
    parser.add_argument("--no-execute", action="store_true", help="write without outputs")
    args = parser.parse_args()
    names = [n for n in NOTEBOOKS if not args.only or any(n.startswith(p) for p in args.only)]
    with kernel_for_this_python() as kernel_name:
        for name in names:
            notebook = build(name)
            started = time.perf_counter()
            if not args.no_execute:
                execute(notebook, kernel_name=kernel_name)
            nbformat.validate(notebook)
            nbformat.write(notebook, HERE / name)
            print(f"{name}: {len(notebook.cells)} cells, {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
