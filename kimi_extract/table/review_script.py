# ruff: noqa: E501  (the script keeps its own line lengths)
"""The review page's script (``table.review`` embeds it; ``table.review_page`` holds the shell):
this module draws the cards, ``review_edit`` takes corrections, ``review_controls`` moves between
them; ``SCRIPT`` is all three in one closure.

It builds every element from the embedded JSON with ``createElement`` / ``textContent`` (never
``innerHTML``), so nothing taken from the data is ever parsed as markup. Cards are rendered
lazily: the list holds one empty placeholder per card and an ``IntersectionObserver`` renders the
cards near the viewport and empties those that scroll far away (``.card.rendered`` counts them).

Work stays linear in the spans of a card: highlights are cut in one sweep over the sorted span
ends (a running set of open spans), and spans are bucketed by section once per render. The
value-vs-text difference of a doubtful span is the span's ``diff`` when the data has one, else a
character diff (longest common subsequence, bounded) of the value and its evidence.
"""

from __future__ import annotations

from .review_controls import CONTROLS
from .review_edit import EDITING

DRAWING = r"""
  var data = JSON.parse(document.getElementById("kx-data").textContent);
  var cards = data.cards, texts = data.texts, images = data.images;
  var list = document.getElementById("kx-list");
  var header = document.querySelector("header.top");
  var panel = document.getElementById("kx-panel");
  var panelTitle = document.getElementById("kx-panel-title");
  var panelBody = document.getElementById("kx-panel-body");
  var slots = [], order = [];
  var current = -1;
  var ESTIMATE = 180, PANEL_ROWS = 5000, DIFF_CELLS = 250000;
  var DOUBTFUL = {none: 1, near: 1, fuzzy: 1, other: 1};
  var RANK = {near: 6, none: 5, fuzzy: 4, other: 3, quote: 2, verified: 1, inferred: 0};

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }
  function num(n) { return Number(n).toLocaleString("en-US"); }
  function kindLabel(s) {
    if (s.cls === "none") return "unsupported";
    if (s.cls === "near") return "near miss " + Math.round(s.score);
    if (s.cls === "fuzzy") return "fuzzy " + Math.round(s.score);
    return s.kind;
  }
  function evidence(c, s) {
    if (s.sec < 0 || s.s === null) return null;
    var sec = c.sections[s.sec];
    return sec && sec.text !== null ? texts[sec.text].slice(s.s, s.e) : null;
  }

  function highlighted(text, spans) {
    // The text with one <mark> per run of characters covered by the same spans (overlaps
    // split), in one sweep over the sorted span ends: the open spans change only there.
    var node = el("div", "text");
    var events = [];
    spans.forEach(function (s, n) { if (s.e > s.s) { events.push([s.s, 1, n], [s.e, 0, n]); } });
    events.sort(function (a, b) { return a[0] - b[0] || a[1] - b[1]; });
    var open = new Map(), at = 0;
    function emit(a, b) {
      var piece = text.slice(a, b);
      if (!open.size) { node.appendChild(document.createTextNode(piece)); return; }
      var covering = Array.from(open.values()).sort(function (x, y) { return x.k - y.k; });
      var worst = covering[0];
      covering.forEach(function (s) { if ((RANK[s.cls] || 0) > (RANK[worst.cls] || 0)) worst = s; });
      var mark = el("mark", "kx-hl c-" + worst.cls, piece);
      mark.setAttribute("data-spans", covering.map(function (s) { return s.k; }).join(" "));
      mark.title = covering.map(function (s) {
        return s.path + ": " + s.value + " (" + s.kind + ", " + Math.round(s.score) + ")";
      }).join("\n");
      node.appendChild(mark);
    }
    for (var i = 0; i <= events.length; i++) {
      var point = i < events.length ? Math.min(events[i][0], text.length) : text.length;
      if (point > at) { emit(at, point); at = point; }
      if (i < events.length) {
        if (events[i][1]) open.set(events[i][2], spans[events[i][2]]); else open.delete(events[i][2]);
      }
    }
    return node;
  }

  function charDiff(a, b) {
    // [op, text] pieces: "=" in both, "-" only in the value, "+" only in the text.
    var x = Array.from(a), y = Array.from(b), p = 0, q = 0;
    while (p < x.length && p < y.length && x[p] === y[p]) p++;
    while (q < x.length - p && q < y.length - p && x[x.length - 1 - q] === y[y.length - 1 - q]) q++;
    var head = x.slice(0, p).join(""), tail = x.slice(x.length - q).join("");
    x = x.slice(p, x.length - q); y = y.slice(p, y.length - q);
    var out = [], n = x.length, m = y.length;
    function push(op, ch) {
      if (out.length && out[out.length - 1][0] === op) out[out.length - 1][1] += ch; else out.push([op, ch]);
    }
    if (head) push("=", head);
    if ((n + 1) * (m + 1) > DIFF_CELLS) {
      if (n) push("-", x.join(""));
      if (m) push("+", y.join(""));
    } else {
      var w = m + 1, lcs = new Uint32Array((n + 1) * w);
      for (var i = n - 1; i >= 0; i--) for (var j = m - 1; j >= 0; j--)
        lcs[i * w + j] = x[i] === y[j] ? lcs[(i + 1) * w + j + 1] + 1 : Math.max(lcs[(i + 1) * w + j], lcs[i * w + j + 1]);
      i = 0; j = 0;
      while (i < n || j < m) {
        if (i < n && j < m && x[i] === y[j]) { push("=", x[i]); i++; j++; }
        else if (j >= m || (i < n && lcs[(i + 1) * w + j] >= lcs[i * w + j + 1])) { push("-", x[i]); i++; }
        else { push("+", y[j]); j++; }
      }
    }
    if (tail) push("=", tail);
    return out;
  }

  function diffNode(c, s) {
    // The value against its evidence: given pieces (the span's diff) or a character diff.
    var given = Array.isArray(s.diff) && s.diff.length;
    var text = evidence(c, s);
    if (!given && (text === null || (s.cls !== "fuzzy" && s.cls !== "near"))) return null;
    var box = el("div", "diff");
    box.appendChild(el("span", "d-label", "value vs text: "));
    if (given) {
      s.diff.forEach(function (d) {
        if (d.note !== undefined) { box.appendChild(el("span", "d-note", d.note)); return; }
        box.appendChild(el("del", "d-v", d.v));
        box.appendChild(document.createTextNode(" → "));
        box.appendChild(el("ins", "d-x", d.x));
        box.appendChild(document.createTextNode(" "));
      });
    } else {
      charDiff(s.value, text).forEach(function (d) {
        if (d[0] === "=") box.appendChild(document.createTextNode(d[1]));
        else box.appendChild(el(d[0] === "-" ? "del" : "ins", d[0] === "-" ? "d-v" : "d-x", d[1]));
      });
    }
    return box;
  }

  function pageImage(image, spans) {
    var view = el("div", "pageview"), wrap = el("div", "pagewrap");
    var zoom = el("div", "zoom");
    var minus = el("button", "zoom-out", "−"), plus = el("button", "zoom-in", "+"), level = el("span", "level", "100%");
    minus.type = plus.type = "button"; minus.title = "zoom out"; plus.title = "zoom in";
    zoom.appendChild(minus); zoom.appendChild(plus); zoom.appendChild(level);
    var img = el("img");
    if (typeof image.src === "string" && image.src.indexOf("data:image/") === 0) img.src = image.src;
    img.alt = "page image";
    img.width = image.w; img.height = image.h;
    wrap.appendChild(img);
    spans.forEach(function (s) {
      (s.boxes || []).forEach(function (b) {
        var box = el("div", "box c-" + s.cls);
        box.style.left = (100 * b[0]) + "%"; box.style.top = (100 * b[1]) + "%";
        box.style.width = (100 * (b[2] - b[0])) + "%"; box.style.height = (100 * (b[3] - b[1])) + "%";
        box.setAttribute("data-spans", String(s.k));
        box.title = s.path + ": " + s.value;
        wrap.appendChild(box);
      });
    });
    view.appendChild(zoom);
    view.appendChild(wrap);
    return view;
  }

  var ZOOMS = [1, 1.5, 2, 3, 4];
  function zoomPage(view, direction) {
    var wrap = view.querySelector(".pagewrap"), img = wrap.querySelector("img");
    if (!wrap.dataset.base) wrap.dataset.base = String(img.getBoundingClientRect().width);
    var at = ZOOMS.indexOf(Number(wrap.dataset.zoom || 1));
    var next = ZOOMS[Math.max(0, Math.min(ZOOMS.length - 1, at + direction))];
    wrap.dataset.zoom = String(next);
    wrap.classList.toggle("zoomed", next !== 1);
    img.style.width = next === 1 ? "" : (Number(wrap.dataset.base) * next) + "px";
    view.querySelector(".level").textContent = Math.round(100 * next) + "%";
  }

  function spanRow(c, s) {
    var tr = el("tr", "span c-" + s.cls);
    tr.setAttribute("data-span", String(s.k));
    tr.appendChild(el("td", "path", s.path));
    var value = el("td", "value");
    value.appendChild(el("span", "v", s.value));
    var diff = diffNode(c, s);
    if (diff) value.appendChild(diff);
    tr.appendChild(value);
    var label = kindLabel(s);
    if (s.sec >= 0 && s.page !== null && s.page !== undefined) label += " · p." + s.page;
    var kind = el("td", "kind c-" + s.cls, label);
    if (s.quote) kind.title = "quote: " + s.quote;
    if (s.bad) kind.appendChild(el("div", "badspan", s.bad));
    tr.appendChild(kind);
    return tr;
  }

  function columnRow(f, wide) {
    var tr = el("tr", "column");
    tr.appendChild(el("td", "path", f[0]));
    tr.appendChild(el("td", "value", f[1]));
    if (wide) tr.appendChild(el("td", "kind", "column"));
    return tr;
  }

  function fieldsTable(c) {
    var table = el("table"), head = el("tr"), wide = c.spans.length > 0;
    (wide ? ["field", "value", "evidence"] : ["column", "value"]).forEach(function (n) { head.appendChild(el("th", null, n)); });
    table.appendChild(head);
    var byRow = c.rows.map(function () { return []; });
    c.spans.forEach(function (s) { (byRow[s.r] || byRow[0]).push(s); });
    c.rows.forEach(function (row, r) {
      if (c.rows.length > 1) {
        var tr = el("tr", "item"), th = el("th", null, row.item === null ? "no item" : "item " + row.item);
        th.colSpan = wide ? 3 : 2;
        tr.appendChild(th);
        table.appendChild(tr);
      }
      byRow[r].forEach(function (s) { table.appendChild(spanRow(c, s)); });
      row.fields.forEach(function (f) { table.appendChild(columnRow(f, wide)); });
    });
    c.fields.forEach(function (f) { table.appendChild(columnRow(f, wide)); });
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
    var c = cards[i], slot = slots[i], n = c.counts;
    var card = el("div", "card rendered");
    card.setAttribute("data-card", String(i));
    if (i === current) card.classList.add("current");
    var head = el("div", "head");
    var label = el("span", "label", c.label);
    if (c.source) label.title = c.source;
    head.appendChild(label);
    if (c.label !== c.row) head.appendChild(el("span", "row", "row " + c.row));
    if (c.error) head.appendChild(el("span", "badge err", "error"));
    if (n.none) head.appendChild(el("span", "badge none", n.none + " unsupported"));
    if (n.near) head.appendChild(el("span", "badge near", n.near + " near"));
    if (n.fuzzy) head.appendChild(el("span", "badge fuzzy", n.fuzzy + " fuzzy"));
    if (n.bad) head.appendChild(el("span", "badge bad", n.bad + " unusable span" + (n.bad === 1 ? "" : "s")));
    if (c.grounded !== null) head.appendChild(el("span", "badge ok", Math.round(100 * c.grounded) + "% grounded"));
    card.appendChild(head);
    if (c.error) card.appendChild(el("div", "error", c.error));
    if (c.note) card.appendChild(el("div", "note", "review: " + c.note));
    var body = el("div", "body"), sources = el("div", "sources");
    if (!c.sections.length) sources.appendChild(el("div", "text none", data.no_text));
    var marked = c.sections.map(function () { return []; }), boxed = c.sections.map(function () { return []; });
    c.spans.forEach(function (s) {
      if (s.sec >= 0 && s.s !== null && marked[s.sec]) marked[s.sec].push(s);
      if (s.bsec >= 0 && boxed[s.bsec]) boxed[s.bsec].push(s);
    });
    c.sections.forEach(function (sec, n) {
      var box = el("div", "section");
      if (sec.page !== null) box.appendChild(el("div", "ptitle", "page " + sec.page));
      if (sec.image !== null) box.appendChild(pageImage(images[sec.image], boxed[n]));
      if (sec.text !== null) box.appendChild(highlighted(texts[sec.text], marked[n]));
      sources.appendChild(box);
    });
    body.appendChild(sources);
    var fields = fieldsTable(c);
    if (check) c.rows.forEach(function (row) { if (row.pos !== undefined) fields.appendChild(checkBlock(c, row)); });
    body.appendChild(fields);
    card.appendChild(body);
    card.appendChild(footer(c));
    slot.textContent = "";
    slot.style.height = "";
    slot.appendChild(card);
    return card;
  }

"""

#: The whole script: one closure over the drawing part, ``review_edit.EDITING`` (corrections)
#: and ``review_controls.CONTROLS``.
SCRIPT = '"use strict";\n(function () {\n' + DRAWING + EDITING + CONTROLS + "})();\n"
