"""An evaluation as one static HTML page (``kimi-extract eval --html``): no script, no network.

The page holds the overall scores with their intervals and the money, one line per field path,
and the rows to look at first. Every text from the data (field paths, row keys, errors) is
HTML-escaped; the style sheet is inline, so the file can be mailed or archived as it is.
"""

from __future__ import annotations

import html
import math
from typing import Any

import pandas as pd

from .report import FIELD_METRICS, Evaluation, _ci

_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 72em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { padding: .25em .7em; border-bottom: 1px solid #ddd; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.low { color: #b30000; } .note { color: #666; }
"""


def evaluation_html(evaluation: Evaluation, *, title: str = "Evaluation", worst: int = 20) -> str:
    """The page for ``evaluation``: scores, fields, and the ``worst`` rows to look at first."""
    o = evaluation.overall
    tail = (
        f"{evaluation.confidence:.0%} intervals from {evaluation.n_boot:,} bootstrap resamples "
        "of rows"
        if evaluation.n_boot
        else "no intervals"
    )
    overall_rows = [
        ("rows", f"{int(o['rows']):,} ({int(o['failed']):,} without a prediction)"),
        ("micro F1", _ci(o, "micro_f1")),
        ("micro precision", _ci(o, "micro_precision")),
        ("micro recall", _ci(o, "micro_recall")),
        ("rows entirely right", _ci(o, "row_exact")),
        ("cost", _money(o["cost"])),
        ("cost per correct value", _money(o["cost_per_correct_value"])),
        ("cost per row entirely right", _money(o["cost_per_correct_row"])),
    ]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f'<p class="note">{_e(evaluation.model)}: {_e(tail)}.</p>',
        "<table>",
        *(f"<tr><th>{_e(name)}</th><td>{_e(value)}</td></tr>" for name, value in overall_rows),
        "</table>",
    ]
    if evaluation.skipped:
        parts.append(
            f'<p class="note">Not scored (no gold column): {_e(", ".join(evaluation.skipped))}.</p>'
        )
    parts += ["<h2>Fields</h2>", _fields_table(evaluation.fields)]
    rows = evaluation.worst(worst)
    rows = rows[rows["wrong"] > 0]
    parts.append(f"<h2>Rows to look at first ({len(rows):,} shown)</h2>")
    if rows.empty:
        parts.append("<p>Every row is entirely right.</p>")
    else:
        parts.append(_rows_table(rows))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _fields_table(fields: pd.DataFrame) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in ("field", "kind", "support", *FIELD_METRICS))
    lines = [f"<table><tr>{head}</tr>"]
    for path, row in fields.iterrows():
        cells = [
            f"<td>{_e(path)}</td>",
            f"<td>{_e(row['kind'])}</td>",
            f'<td class="n">{int(row["support"]):,}</td>',
        ]
        for name in FIELD_METRICS:
            low = row[name] < 0.9 if not pd.isna(row[name]) else False
            css = ' class="n low"' if low else ' class="n"'
            cells.append(f"<td{css}>{_e(_ci(row, name))}</td>")
        lines.append("<tr>" + "".join(cells) + "</tr>")
    lines.append("</table>")
    return "\n".join(lines)


def _rows_table(rows: pd.DataFrame) -> str:
    head = "".join(f"<th>{h}</th>" for h in ("row", "score", "wrong fields", "error"))
    lines = [f"<table><tr>{head}</tr>"]
    for key, row in rows.iterrows():
        error = row["error"] if isinstance(row["error"], str) else ""
        lines.append(
            f'<tr><td>{_e(key)}</td><td class="n">{row["score"]:.2f}</td>'
            f"<td>{_e(', '.join(row['fields']))}</td><td>{_e(error)}</td></tr>"
        )
    lines.append("</table>")
    return "\n".join(lines)


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _money(value: float) -> str:
    if math.isnan(value):
        return "unknown (no kx_cost column)"
    if math.isinf(value):
        return "- (none correct)"
    return f"${value:.6f}"
