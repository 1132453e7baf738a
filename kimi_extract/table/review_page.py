# ruff: noqa: E501  (the CSS keeps its own line lengths)
"""The review page's static parts: the HTML shell and its CSS (``table.review`` fills in the data,
``table.review_script`` holds the script).

Colours say how far a value is vouched for: verified matches (exact, normalized) are yellow, quote
matches yellow with a dotted underline, fuzzy matches orange with a dashed underline, near misses
(the closest text to a value that is not there) pink with a wavy underline, kinds this version
does not know grey; unsupported values (no evidence) are red in the fields table, inferred ones
(labels) muted. The controls in the header filter values by class, sort cards, open the list of
doubtful values or one field across rows (a side panel), and download the corrections.
A Content-Security-Policy ``<meta>`` forbids any network access: images are data URLs.
"""

from __future__ import annotations

import re

CSS = """
:root { --fg:#1d2125; --muted:#69717a; --line:#dde1e6; --bg:#f6f7f9; --card:#fff;
  --hl:#fff0a8; --hl-line:#c9a400; --fz:#ffd9b3; --fz-line:#e65100; --nr:#ffd0da; --nr-line:#c2185b;
  --ot:#e3e6ea; --ot-line:#7b848d; --sel:#2f6fdf; --bad:#c62828; --ok:#2e7d32; --warn:#e65100;
  --inf:#5c6bc0; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans",
  "Noto Sans CJK SC","PingFang SC","Microsoft YaHei",sans-serif; color:var(--fg); background:var(--bg); }
header.top { position:sticky; top:0; z-index:5; background:#fff; border-bottom:1px solid var(--line);
  padding:8px 16px; display:flex; flex-wrap:wrap; gap:6px 14px; align-items:center; }
header.top h1 { font-size:16px; margin:0; }
header.top .stats { color:var(--muted); }
header.top label { white-space:nowrap; cursor:pointer; }
header.top .n { color:var(--muted); font-size:12px; }
header.top .group { color:var(--muted); font-size:12px; }
header.top input[type=search] { min-width:14em; padding:3px 6px; }
header.top select, header.top button { font:inherit; font-size:13px; }
header.top .keys { color:var(--muted); font-size:12px; }
label.c-none, label.c-near { color:var(--bad); }
label.c-fuzzy { color:var(--warn); }
label.c-inferred { color:var(--inf); }
#kx-note { margin:8px 16px; color:var(--muted); }
#kx-list { padding:8px 16px 60vh; }
body.panel-open #kx-list, body.panel-open #kx-note { margin-right:min(44vw, 620px); }
.slot { margin:0 0 12px; min-height:60px; }
.slot[hidden] { display:none; }
.card { background:var(--card); border:1px solid var(--line); border-radius:6px; }
.card.current { outline:2px solid #4a7bd0; }
.card .head { display:flex; flex-wrap:wrap; gap:4px 12px; align-items:baseline; padding:8px 12px;
  border-bottom:1px solid var(--line); }
.card .head .label { font-weight:600; overflow-wrap:anywhere; }
.card .head .row { color:var(--muted); overflow-wrap:anywhere; }
.badge { display:inline-block; padding:0 6px; border-radius:9px; font-size:12px; border:1px solid; }
.badge.err, .badge.none { color:var(--bad); border-color:var(--bad); }
.badge.near { color:var(--nr-line); border-color:var(--nr-line); }
.badge.fuzzy { color:var(--warn); border-color:var(--warn); }
.badge.bad { color:var(--muted); border-color:var(--muted); }
.badge.ok { color:var(--ok); border-color:var(--ok); }
.card .body { display:grid; grid-template-columns:minmax(0,3fr) minmax(0,2fr); }
@media (max-width: 900px) { .card .body { grid-template-columns:1fr; } }
.sources { padding:8px 12px; border-right:1px solid var(--line); min-width:0; }
.section + .section { margin-top:10px; }
.section .ptitle { color:var(--muted); font-size:12px; margin-bottom:4px; }
.text { white-space:pre-wrap; overflow-wrap:anywhere; max-height:28em; overflow:auto;
  padding:6px 8px; background:#fbfbfc; border:1px solid var(--line); border-radius:4px; }
.text.none { color:var(--muted); font-style:italic; }
mark.kx-hl { color:inherit; cursor:pointer; border-radius:2px; background:var(--hl);
  border-bottom:2px solid var(--hl-line); }
mark.kx-hl.c-quote { border-bottom-style:dotted; border-bottom-color:var(--fz-line); }
mark.kx-hl.c-fuzzy { background:var(--fz); border-bottom:2px dashed var(--fz-line); }
mark.kx-hl.c-near { background:var(--nr); border-bottom:none; text-decoration:underline wavy var(--nr-line);
  text-decoration-skip-ink:none; }
mark.kx-hl.c-other { background:var(--ot); border-bottom-color:var(--ot-line); }
mark.kx-hl.selected { outline:2px solid var(--sel); outline-offset:1px; }
.pageview { overflow:auto; max-height:80vh; max-width:100%; margin-bottom:6px; }
.zoom { display:flex; gap:4px; align-items:center; margin-bottom:4px; color:var(--muted); font-size:12px; }
.zoom button { font:inherit; min-width:2em; }
.pagewrap { position:relative; display:inline-block; max-width:min(100%, 520px); border:1px solid var(--line); }
.pagewrap.zoomed { max-width:none; }
.pagewrap img { display:block; max-width:100%; height:auto; }
.pagewrap.zoomed img { max-width:none; }
.box { position:absolute; background:rgba(255,214,0,.35); outline:1px solid rgba(200,150,0,.9); cursor:pointer; }
.box.c-fuzzy { background:rgba(255,140,0,.3); outline-style:dashed; }
.box.c-near { background:rgba(233,30,99,.25); outline-color:var(--nr-line); }
.box.c-other { background:rgba(120,130,140,.25); outline-color:var(--ot-line); }
.box.selected { outline:2px solid var(--sel); }
.fields { padding:8px 12px; min-width:0; }
.fields table { border-collapse:collapse; width:100%; font-size:13px; }
.fields th, .fields td { text-align:left; vertical-align:top; padding:3px 6px;
  border-bottom:1px solid var(--line); overflow-wrap:anywhere; }
.fields th { color:var(--muted); font-weight:500; }
.fields tr.item th { color:var(--fg); background:#f1f3f6; font-weight:600; }
.fields tr.span { cursor:pointer; }
.fields tr.column td { color:var(--muted); }
.fields tr.selected td { background:#dce8fb; }
.fields tr.c-none td.value, .fields tr.c-near td.value { color:var(--bad); }
body.vfilter .fields tr.span, body.vfilter .fields tr.column { display:none; }
body.vf-none .fields tr.span.c-none, body.vf-near .fields tr.span.c-near,
body.vf-fuzzy .fields tr.span.c-fuzzy, body.vf-inferred .fields tr.span.c-inferred { display:table-row; }
.kind { font-size:12px; white-space:nowrap; }
.kind.c-none { color:var(--bad); font-weight:600; }
.kind.c-near { color:var(--nr-line); font-weight:600; }
.kind.c-fuzzy { color:var(--warn); }
.kind.c-verified, .kind.c-quote { color:var(--ok); }
.kind.c-inferred { color:var(--inf); font-style:italic; }
.kind.c-other { color:var(--muted); }
.kind .badspan { color:var(--muted); white-space:normal; font-style:italic; }
.diff { font-size:12px; margin-top:2px; color:var(--muted); }
.diff del { color:var(--bad); background:#fde4e4; text-decoration:line-through; }
.diff ins { color:var(--ok); background:#e3f4e4; text-decoration:none; }
.diff .d-note { color:var(--fg); background:#f1f3f6; padding:0 3px; margin-right:4px; border-radius:3px; }
.error, .note { margin:0 12px 8px; padding:6px 8px; border-radius:4px; white-space:pre-wrap;
  overflow-wrap:anywhere; }
.error { color:var(--bad); background:#fdecea; }
.note { color:var(--muted); background:#f1f3f6; }
.foot { padding:6px 12px; border-top:1px solid var(--line); color:var(--muted); font-size:12px; }
#kx-panel { position:fixed; right:0; bottom:0; width:min(44vw, 620px); background:#fff; z-index:4;
  border-left:1px solid var(--line); display:flex; flex-direction:column; }
#kx-panel[hidden] { display:none; }
#kx-panel .phead { display:flex; gap:8px; align-items:center; justify-content:space-between;
  padding:8px 12px; border-bottom:1px solid var(--line); font-weight:600; }
#kx-panel-body { overflow:auto; padding:4px 12px 24px; font-size:13px; }
#kx-panel table { border-collapse:collapse; width:100%; }
#kx-panel td, #kx-panel th { text-align:left; vertical-align:top; padding:3px 6px;
  border-bottom:1px solid var(--line); overflow-wrap:anywhere; }
#kx-panel th { color:var(--muted); font-weight:500; }
#kx-panel tr.pick { cursor:pointer; }
#kx-panel tr.pick:hover td { background:#eef3fc; }
#kx-panel .more { color:var(--muted); padding:6px; }
#kx-panel mark { background:var(--hl); color:inherit; }
.cx-check { margin-top:10px; border-top:2px solid var(--line); padding-top:6px; font-size:13px; }
.cx-head { display:flex; flex-wrap:wrap; gap:4px 10px; align-items:baseline; margin-bottom:4px; }
.cx-title { font-weight:600; }
.cx-state { color:var(--muted); font-size:12px; }
.cx-check.cx-confirmed .cx-state, .cx-check.cx-corrected .cx-state, .cx-check.cx-checked .cx-state { color:var(--ok); }
.cx-check.cx-unresolved .cx-state { color:var(--bad); }
.cx-table { border-collapse:collapse; width:100%; }
.cx-table td { padding:2px 6px; border-bottom:1px solid var(--line); vertical-align:top; overflow-wrap:anywhere; }
.cx-table td.cx-path { color:var(--muted); white-space:nowrap; overflow-wrap:normal; }
.cx-table td.cx-value { width:100%; }
.cx-null, .cx-muted { color:var(--muted); font-style:italic; }
.cx-act { white-space:nowrap; text-align:right; }
.cx-act button, .cx-head button, .cx-addrow button, .cx-form button, .cx-edit button { font:inherit; font-size:12px; }
.cx-act button.on { background:#dce8fb; border-color:var(--sel); }
tr.cx-m-ok .cx-v { color:var(--ok); }
tr.cx-m-wrong .cx-v { color:var(--bad); }
tr.cx-m-drop td, tr.cx-gone td { text-decoration:line-through; color:var(--muted); }
.cx-was { color:var(--bad); }
.cx-now { color:var(--ok); text-decoration:none; font-weight:600; }
tr.cx-added td { color:var(--ok); }
.cx-edit { margin-top:3px; display:flex; flex-wrap:wrap; gap:4px; align-items:center; }
.cx-input { font:inherit; font-size:13px; padding:1px 4px; min-width:10em; }
.cx-input[aria-invalid=true] { outline:2px solid var(--bad); }
.cx-error { color:var(--bad); flex-basis:100%; }
.cx-unfit { color:var(--bad); font-size:12px; }
.cx-field { display:inline-flex; gap:4px; align-items:center; margin:2px 8px 2px 0; }
.cx-key { color:var(--muted); }
"""

#: The page: its ``@@NAME@@`` slots are filled in one pass (``fill``): TITLE, SUMMARY and NOTE
#: HTML-escaped by the caller, DATA as JSON with ``<``, ``>``, ``&``, U+2028 and U+2029 escaped.
SHELL = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src data:; \
style-src 'unsafe-inline'; script-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>@@TITLE@@</title>
<link rel="icon" href="data:,">
<style>@@CSS@@</style>
</head>
<body>
<header class="top">
<h1>@@TITLE@@</h1>
<span class="stats">@@SUMMARY@@</span>
<label><input type="checkbox" id="f-errors"> errors only <span class="n" id="n-errors"></span></label>
<span class="group">values:</span>
<label class="c-none" title="values without evidence: no match, or a near miss"><input type="checkbox" id="f-unsupported"> unsupported <span class="n" id="n-unsupported"></span></label>
<label class="c-near" title="near misses: the closest text differs from the value"><input type="checkbox" id="f-near"> near <span class="n" id="n-near"></span></label>
<label class="c-fuzzy"><input type="checkbox" id="f-fuzzy"> fuzzy <span class="n" id="n-fuzzy"></span></label>
<label class="c-inferred" title="labels (enums, booleans, marked fields): inferred, not quoted"><input type="checkbox" id="f-inferred"> inferred <span class="n" id="n-inferred"></span></label>
<input type="search" id="f-query" placeholder="filter: field, value, source, error">
<select id="f-sort" title="order of the cards">
<option value="order">row order</option>
<option value="grounded">least grounded first</option>
<option value="cost">highest cost first</option>
<option value="error">errors first</option>
</select>
<select id="f-field" title="one field's values across rows"><option value="">field view…</option></select>
<button type="button" id="f-doubtful">doubtful values</button>
<button type="button" id="kx-download" hidden title="save your corrections as a JSON file (kimi_extract.read_corrections reads it)">download corrections</button>
<span class="stats" id="kx-reviewed"></span>
<span class="stats" id="kx-shown"></span>
<span class="keys">j / k: next / previous card</span>
</header>
<div id="kx-note">@@NOTE@@</div>
<main id="kx-list"></main>
<aside id="kx-panel" hidden><div class="phead"><span id="kx-panel-title"></span>\
<button type="button" id="kx-panel-close">close</button></div><div id="kx-panel-body"></div></aside>
<script type="application/json" id="kx-data">@@DATA@@</script>
<script>@@SCRIPT@@</script>
</body>
</html>
"""


_SLOT = re.compile(r"@@([A-Z]+)@@")


def fill(values: dict[str, str]) -> str:
    """The page with every slot of ``SHELL`` replaced, in one pass (a value is never rescanned,
    so data holding ``@@SCRIPT@@`` stays text)."""
    return _SLOT.sub(lambda match: values[match.group(1)], SHELL)
