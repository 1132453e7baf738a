# ruff: noqa: E501  (the CSS and the script keep their own line lengths)
"""The review page's static parts: the HTML shell, its CSS and its script (``table.review`` fills
in the data).

The script builds every element from the embedded JSON with ``createElement`` / ``textContent``
(never ``innerHTML``), so nothing taken from the data is ever parsed as markup. Cards are rendered
lazily: the list holds one empty placeholder per card and an ``IntersectionObserver`` renders the
cards near the viewport and empties those that scroll far away (``.card.rendered`` counts them).
A Content-Security-Policy ``<meta>`` forbids any network access: images are data URLs.
"""

from __future__ import annotations

import re

CSS = """
:root { --fg:#1d2125; --muted:#69717a; --line:#dde1e6; --bg:#f6f7f9; --card:#fff;
  --hl:#fff0a8; --hl-sel:#ffbf47; --bad:#c62828; --ok:#2e7d32; --fuzzy:#ef6c00; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans",
  "Noto Sans CJK SC","PingFang SC","Microsoft YaHei",sans-serif; color:var(--fg); background:var(--bg); }
header.top { position:sticky; top:0; z-index:5; background:#fff; border-bottom:1px solid var(--line);
  padding:8px 16px; display:flex; flex-wrap:wrap; gap:6px 18px; align-items:center; }
header.top h1 { font-size:16px; margin:0; }
header.top .stats { color:var(--muted); }
header.top label { white-space:nowrap; cursor:pointer; }
header.top input[type=search] { min-width:14em; padding:3px 6px; }
header.top .keys { color:var(--muted); font-size:12px; }
#kx-note { margin:8px 16px; color:var(--muted); }
#kx-list { padding:8px 16px 60vh; }
.slot { margin:0 0 12px; min-height:60px; }
.slot[hidden] { display:none; }
.card { background:var(--card); border:1px solid var(--line); border-radius:6px; }
.card.current { outline:2px solid #4a7bd0; }
.card .head { display:flex; flex-wrap:wrap; gap:4px 12px; align-items:baseline; padding:8px 12px;
  border-bottom:1px solid var(--line); }
.card .head .label { font-weight:600; }
.card .head .src { color:var(--muted); overflow-wrap:anywhere; }
.badge { display:inline-block; padding:0 6px; border-radius:9px; font-size:12px; border:1px solid; }
.badge.err { color:var(--bad); border-color:var(--bad); }
.badge.warn { color:var(--fuzzy); border-color:var(--fuzzy); }
.badge.ok { color:var(--ok); border-color:var(--ok); }
.card .body { display:grid; grid-template-columns:minmax(0,3fr) minmax(0,2fr); }
@media (max-width: 900px) { .card .body { grid-template-columns:1fr; } }
.sources { padding:8px 12px; border-right:1px solid var(--line); min-width:0; }
.section + .section { margin-top:10px; }
.section .ptitle { color:var(--muted); font-size:12px; margin-bottom:4px; }
.text { white-space:pre-wrap; overflow-wrap:anywhere; max-height:28em; overflow:auto;
  padding:6px 8px; background:#fbfbfc; border:1px solid var(--line); border-radius:4px; }
.text.none { color:var(--muted); font-style:italic; }
mark.kx-hl { background:var(--hl); color:inherit; border-bottom:2px solid #d4b106; cursor:pointer;
  border-radius:2px; }
mark.kx-hl.fuzzy, mark.kx-hl.quote { border-bottom-color:var(--fuzzy); }
mark.kx-hl.selected { background:var(--hl-sel); }
.pagewrap { position:relative; display:inline-block; max-width:min(100%, 520px); margin-bottom:6px;
  border:1px solid var(--line); }
.pagewrap img { display:block; max-width:100%; height:auto; }
.box { position:absolute; background:rgba(255,214,0,.35); outline:1px solid rgba(200,150,0,.9);
  cursor:pointer; }
.box.selected { background:rgba(255,120,0,.45); outline:2px solid #e65100; }
.fields { padding:8px 12px; min-width:0; }
.fields table { border-collapse:collapse; width:100%; font-size:13px; }
.fields th, .fields td { text-align:left; vertical-align:top; padding:3px 6px;
  border-bottom:1px solid var(--line); overflow-wrap:anywhere; }
.fields th { color:var(--muted); font-weight:500; }
.fields tr.span { cursor:pointer; }
.fields tr.column td { color:var(--muted); }
.fields tr.selected td { background:#ffe7b8; }
.fields tr.unsupported td.value { color:var(--bad); }
.kind { font-size:12px; white-space:nowrap; }
.kind.none { color:var(--bad); font-weight:600; }
.kind.fuzzy, .kind.quote { color:var(--fuzzy); }
.kind.exact, .kind.normalized { color:var(--ok); }
.error { margin:0 12px 8px; padding:6px 8px; color:var(--bad); background:#fdecea;
  border-radius:4px; white-space:pre-wrap; overflow-wrap:anywhere; }
.foot { padding:6px 12px; border-top:1px solid var(--line); color:var(--muted); font-size:12px; }
"""

SCRIPT = r"""
"use strict";
(function () {
  var data = JSON.parse(document.getElementById("kx-data").textContent);
  var cards = data.cards, texts = data.texts, images = data.images;
  var list = document.getElementById("kx-list");
  var slots = [];
  var current = -1;
  var ESTIMATE = 180;

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }
  function num(n) { return Number(n).toLocaleString("en-US"); }
  function isUnsupported(s) { return s.kind === "none"; }

  function highlighted(text, spans) {
    // The text with one <mark> per run of characters covered by the same spans (overlaps split).
    var node = el("div", "text");
    var cuts = {0: true};
    cuts[text.length] = true;
    spans.forEach(function (s) { cuts[s.s] = true; cuts[s.e] = true; });
    var points = Object.keys(cuts).map(Number).sort(function (a, b) { return a - b; });
    for (var p = 0; p + 1 < points.length; p++) {
      var a = points[p], b = points[p + 1];
      if (b <= a) continue;
      var covering = spans.filter(function (s) { return s.s <= a && s.e >= b; });
      var piece = text.slice(a, b);
      if (!covering.length) { node.appendChild(document.createTextNode(piece)); continue; }
      var mark = el("mark", "kx-hl", piece);
      if (covering.some(function (s) { return s.kind === "fuzzy"; })) mark.classList.add("fuzzy");
      if (covering.some(function (s) { return s.kind === "quote"; })) mark.classList.add("quote");
      mark.setAttribute("data-spans", covering.map(function (s) { return s.k; }).join(" "));
      mark.title = covering.map(function (s) {
        return s.path + ": " + s.value + " (" + s.kind + ", " + Math.round(s.score) + ")";
      }).join("\n");
      node.appendChild(mark);
    }
    return node;
  }

  function pageImage(image, spans) {
    var wrap = el("div", "pagewrap");
    var img = el("img");
    if (typeof image.src === "string" && image.src.indexOf("data:image/") === 0) img.src = image.src;
    img.alt = "page image";
    img.width = image.w; img.height = image.h;
    wrap.appendChild(img);
    spans.forEach(function (s) {
      (s.boxes || []).forEach(function (b) {
        var box = el("div", "box");
        box.style.left = (100 * b[0]) + "%"; box.style.top = (100 * b[1]) + "%";
        box.style.width = (100 * (b[2] - b[0])) + "%"; box.style.height = (100 * (b[3] - b[1])) + "%";
        box.setAttribute("data-spans", String(s.k));
        box.title = s.path + ": " + s.value;
        wrap.appendChild(box);
      });
    });
    return wrap;
  }

  function fieldsTable(c) {
    var table = el("table");
    var head = el("tr");
    var names = c.spans.length ? ["field", "value", "evidence"] : ["column", "value"];
    names.forEach(function (n) { head.appendChild(el("th", null, n)); });
    table.appendChild(head);
    c.spans.forEach(function (s) {
      var tr = el("tr", "span");
      tr.setAttribute("data-span", String(s.k));
      if (isUnsupported(s)) tr.classList.add("unsupported");
      tr.appendChild(el("td", "path", s.path));
      tr.appendChild(el("td", "value", s.value));
      var label = isUnsupported(s) ? "unsupported" : s.kind + (s.kind === "fuzzy" ? " " + Math.round(s.score) : "");
      if (!isUnsupported(s) && s.page !== null && s.page !== undefined) label += " · p." + s.page;
      var kind = el("td", "kind " + s.kind, label);
      if (s.quote) kind.title = "quote: " + s.quote;
      tr.appendChild(kind);
      table.appendChild(tr);
    });
    c.fields.forEach(function (f) {
      var tr = el("tr", "column");
      tr.appendChild(el("td", "path", f[0]));
      tr.appendChild(el("td", "value", f[1]));
      if (c.spans.length) tr.appendChild(el("td", "kind", "column"));
      table.appendChild(tr);
    });
    var box = el("div", "fields");
    box.appendChild(table);
    return box;
  }

  function footer(c) {
    var u = c.usage, parts = [];
    if (u.prompt !== null) parts.push("prompt " + num(u.prompt) + " tokens (cached " + num(u.cached || 0) + ")");
    if (u.completion !== null) parts.push("completion " + num(u.completion) + " (reasoning " + num(u.reasoning || 0) + ")");
    if (c.cost !== null) parts.push("$" + Number(c.cost).toFixed(6));
    if (u.attempts !== null) parts.push(u.attempts + " attempt" + (u.attempts === 1 ? "" : "s"));
    if (u.latency !== null) parts.push(Number(u.latency).toFixed(2) + " s");
    if (u.from_store) parts.push("from the result store");
    return el("div", "foot", parts.join(" · ") || "no accounting columns");
  }

  function render(i) {
    var c = cards[i], slot = slots[i];
    var card = el("div", "card rendered");
    card.setAttribute("data-card", String(i));
    if (i === current) card.classList.add("current");
    var head = el("div", "head");
    head.appendChild(el("span", "label", c.label));
    if (c.source) {
      var src = el("span", "src", c.source.split(/[\\/]/).pop() + (c.page !== null ? " · page " + c.page : ""));
      src.title = c.source;
      head.appendChild(src);
    }
    if (c.error) head.appendChild(el("span", "badge err", "error"));
    if (c.unsupported) head.appendChild(el("span", "badge warn", c.unsupported + " unsupported"));
    if (c.grounded !== null) head.appendChild(el("span", "badge ok", Math.round(100 * c.grounded) + "% grounded"));
    card.appendChild(head);
    if (c.error) card.appendChild(el("div", "error", c.error));
    var body = el("div", "body"), sources = el("div", "sources");
    if (!c.sections.length) sources.appendChild(el("div", "text none", data.no_text));
    c.sections.forEach(function (sec, n) {
      var box = el("div", "section");
      if (sec.page !== null) box.appendChild(el("div", "ptitle", "page " + sec.page));
      var boxed = c.spans.filter(function (s) { return s.bsec === n; });
      var marked = c.spans.filter(function (s) { return s.sec === n && s.s !== null; });
      if (sec.image !== null) box.appendChild(pageImage(images[sec.image], boxed));
      if (sec.text !== null) box.appendChild(highlighted(texts[sec.text], marked));
      sources.appendChild(box);
    });
    body.appendChild(sources);
    body.appendChild(fieldsTable(c));
    card.appendChild(body);
    card.appendChild(footer(c));
    slot.textContent = "";
    slot.style.height = "";
    slot.appendChild(card);
  }

  function unrender(i) {
    var slot = slots[i];
    if (!slot.firstChild) return;
    slot.style.height = slot.offsetHeight + "px";
    slot.textContent = "";
  }

  var observer = new IntersectionObserver(function (entries) {
    entries.forEach(function (entry) {
      var i = Number(entry.target.getAttribute("data-i"));
      if (entry.isIntersecting) { if (!entry.target.firstChild) render(i); }
      else unrender(i);
    });
  }, {rootMargin: "1200px 0px"});

  var frag = document.createDocumentFragment();
  cards.forEach(function (c, i) {
    var slot = el("div", "slot");
    slot.setAttribute("data-i", String(i));
    slot.style.height = ESTIMATE + "px";
    slots.push(slot);
    frag.appendChild(slot);
  });
  list.appendChild(frag);
  slots.forEach(function (slot) { observer.observe(slot); });

  function select(i, k) {
    var card = slots[i].querySelector(".card");
    if (!card) return;
    card.querySelectorAll(".selected").forEach(function (n) { n.classList.remove("selected"); });
    card.querySelectorAll("[data-spans]").forEach(function (n) {
      if (n.getAttribute("data-spans").split(" ").indexOf(String(k)) >= 0) n.classList.add("selected");
    });
    var row = card.querySelector('tr[data-span="' + k + '"]');
    if (row) row.classList.add("selected");
    setCurrent(i, false);
    return row;
  }

  list.addEventListener("click", function (event) {
    var target = event.target;
    var holder = target.closest("[data-card]");
    if (!holder) return;
    var i = Number(holder.getAttribute("data-card"));
    var hit = target.closest("[data-spans]");
    if (hit) { select(i, Number(hit.getAttribute("data-spans").split(" ")[0])); return; }
    var row = target.closest("tr[data-span]");
    if (row) {
      select(i, Number(row.getAttribute("data-span")));
      var mark = holder.querySelector("mark.selected, .box.selected");
      if (mark) mark.scrollIntoView({block: "nearest"});
    }
  });

  function setCurrent(i, scroll) {
    if (current >= 0) {
      var old = slots[current].querySelector(".card");
      if (old) old.classList.remove("current");
    }
    current = i;
    if (i < 0) return;
    if (scroll) { slots[i].scrollIntoView({block: "start"}); window.scrollBy(0, -60); }
    if (!slots[i].firstChild) render(i);
    slots[i].querySelector(".card").classList.add("current");
  }

  function step(direction) {
    var i = current;
    for (;;) {
      i += direction;
      if (i < 0 || i >= slots.length) return;
      if (!slots[i].hidden) { setCurrent(i, true); return; }
    }
  }

  document.addEventListener("keydown", function (event) {
    var tag = event.target && event.target.tagName;
    if (tag === "INPUT" || tag === "TEXTAREA" || event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.key === "j" || event.key === "ArrowDown") { step(1); event.preventDefault(); }
    else if (event.key === "k" || event.key === "ArrowUp") { step(-1); event.preventDefault(); }
  });

  var onlyErrors = document.getElementById("f-errors");
  var onlyUnsupported = document.getElementById("f-unsupported");
  var query = document.getElementById("f-query");
  var shown = document.getElementById("kx-shown");
  function matches(c, q) {
    if (!q) return true;
    if (c.label.toLowerCase().indexOf(q) >= 0) return true;
    if (c.source && c.source.toLowerCase().indexOf(q) >= 0) return true;
    if (c.error && c.error.toLowerCase().indexOf(q) >= 0) return true;
    return c.spans.some(function (s) { return (s.path + " " + s.value).toLowerCase().indexOf(q) >= 0; })
      || c.fields.some(function (f) { return (f[0] + " " + f[1]).toLowerCase().indexOf(q) >= 0; });
  }
  function applyFilters() {
    var q = query.value.trim().toLowerCase(), count = 0;
    cards.forEach(function (c, i) {
      var keep = (!onlyErrors.checked || !!c.error) && (!onlyUnsupported.checked || c.unsupported > 0)
        && matches(c, q);
      slots[i].hidden = !keep;
      if (keep) count++;
    });
    shown.textContent = num(count) + " of " + num(cards.length) + " shown";
  }
  var timer = null;
  onlyErrors.addEventListener("change", applyFilters);
  onlyUnsupported.addEventListener("change", applyFilters);
  query.addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(applyFilters, 150); });
  applyFilters();

  window.kxReview = {cards: cards.length, select: select, step: step,
    rendered: function () { return document.querySelectorAll(".card.rendered").length; }};
  document.body.setAttribute("data-ready", "1");
})();
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
<label><input type="checkbox" id="f-errors"> errors only</label>
<label><input type="checkbox" id="f-unsupported"> unsupported values only</label>
<input type="search" id="f-query" placeholder="filter: field, value, source, error">
<span class="stats" id="kx-shown"></span>
<span class="keys">j / k or arrows: next / previous card; click a highlight to select its field</span>
</header>
<div id="kx-note">@@NOTE@@</div>
<main id="kx-list"></main>
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
