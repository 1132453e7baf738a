"""Pull line-item tables out of PDFs (text layers and a scanned page) into one DataFrame.

    python examples/tables_from_pdf.py --simulate           # offline: base_url="simulator"
    python examples/tables_from_pdf.py examples/docs        # real API (KIMI_API_KEY set)

Every page is one request (``per_page=True``): pages with a text layer send their text, the
scanned page is rendered to an image (``pdf_mode="auto"``). ``explode="rows"`` turns each page's
list of rows into table rows, with ``kx_source``, ``kx_page`` and ``kx_item`` saying where each
came from; token and cost columns sit on each page's first row, so their sums stay exact. Needs
pypdfium2: ``pip install -e '.[pdf]'``. The same from the shell:

    kimi-extract run-docs examples/docs --schema examples/tables_from_pdf.py:PageTable \\
        --per-page --explode rows --out tables.csv --simulate
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
from pydantic import BaseModel, Field

import kimi_extract as kx
from kimi_extract.exceptions import install_hint

HERE = Path(__file__).resolve().parent


class LineItem(BaseModel):
    """One row of an order table."""

    item: str = Field(description="Item name as printed")
    quantity: int = Field(description="Quantity ordered")
    unit_price: float | None = Field(description="Unit price in USD, if printed")


class PageTable(BaseModel):
    """The order table on one page (empty when the page has none)."""

    title: str | None = Field(description="The table's title or heading, if any")
    rows: list[LineItem] = Field(description="Every table row, in order; [] if no table")


def main() -> int:
    """Run the example; the exit status is 0 when every page was read, else 1."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs="*", default=[str(HERE / "docs")])
    parser.add_argument("--simulate", action="store_true", help="use the bundled simulator")
    parser.add_argument("--out", help="write the table here (.csv, .jsonl or .parquet)")
    args = parser.parse_args()
    try:
        import pypdfium2  # noqa: F401
    except ImportError:  # every page would fail alike: say so once, before any request
        print(f"error: reading PDFs needs pypdfium2: {install_hint('pdf')}", file=sys.stderr)
        return 1

    extractor = kx.Extractor(
        PageTable,
        instructions="Copy the order table on this page. Quantities are integers.",
        progress=False,
        # The bundled simulator: made-up answers, no key, no result store.
        base_url="simulator" if args.simulate else None,
    )
    pdfs = [p for s in args.sources for p in _pdfs(Path(s))]
    table = extractor.run_documents(pdfs, per_page=True, explode="rows")
    columns = ["kx_source", "kx_page", "kx_item", "item", "quantity", "unit_price"]
    with pd.option_context("display.width", 200, "display.max_columns", 12):
        print(table.assign(kx_source=table["kx_source"].map(lambda s: Path(s).name))[columns])
    print(f"prompt tokens: {table['kx_prompt_tokens'].sum():,} (summed over pages, not items)")
    if extractor.last_run is not None:
        print(extractor.last_run.summary())
    if args.out:
        from kimi_extract.table.export import write_table

        write_table(table, Path(args.out))
    failed = table.drop_duplicates(["kx_source", "kx_page"])["kx_error"].dropna()
    for error in failed:
        print(f"error: {error}", file=sys.stderr)
    return 1 if len(failed) else 0


def _pdfs(path: Path) -> list[Path]:
    return sorted(path.glob("*.pdf")) if path.is_dir() else [path]


if __name__ == "__main__":
    sys.exit(main())
