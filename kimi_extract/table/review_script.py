# ruff: noqa: E501  (the script keeps its own line lengths)
"""The review page's script (``table.review`` embeds it; ``table.review_page`` holds the shell).

It builds every element from the embedded JSON with ``createElement`` / ``textContent`` (never
``innerHTML``), so nothing taken from the data is ever parsed as markup. Cards are rendered
lazily: the list holds one empty placeholder per card and an ``IntersectionObserver`` renders the
cards near the viewport and empties those that scroll far away (``.card.rendered`` counts them).

Work stays linear in the spans of a card: highlights are cut in one sweep over the sorted span
ends (a running set of open spans), and spans are bucketed by section once per render. The
value-vs-text difference of a doubtful span is the span's ``diff`` when the data has one, else a
character diff (longest common subsequence, bounded) of the value and its evidence.
Selecting a value scrolls its evidence into view: every scrolled box holding it (the text pane, a
zoomed page) and then the window, below the sticky header.
"""

from __future__ import annotations

SCRIPT = r"""
"use strict";
(function () {
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
    body.appendChild(fieldsTable(c));
    card.appendChild(body);
    card.appendChild(footer(c));
    slot.textContent = "";
    slot.style.height = "";
    slot.appendChild(card);
    return card;
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
    order.push(i);
    frag.appendChild(slot);
  });
  list.appendChild(frag);
  slots.forEach(function (slot) { observer.observe(slot); });

  function cardOf(i) { return slots[i].querySelector(".card") || render(i); }

  function reveal(node) {
    // Scroll every scrolled box holding node so that it shows, then the window so that node
    // sits below the sticky header.
    for (var box = node.parentElement; box && box !== document.body && box !== document.documentElement; box = box.parentElement) {
      var style = getComputedStyle(box);
      if (!/(auto|scroll)/.test(style.overflowY + " " + style.overflowX)) continue;
      var b = box.getBoundingClientRect(), r = node.getBoundingClientRect();
      if (r.top < b.top || r.bottom > b.bottom) box.scrollTop += r.top - b.top - Math.max(0, (box.clientHeight - r.height) / 2);
      if (r.left < b.left || r.right > b.right) box.scrollLeft += r.left - b.left - Math.max(0, (box.clientWidth - r.width) / 2);
    }
    var top = header.getBoundingClientRect().bottom, rect = node.getBoundingClientRect();
    var room = window.innerHeight - top;
    if (rect.top < top || rect.bottom > window.innerHeight) window.scrollBy(0, rect.top - top - Math.max(0, (room - rect.height) / 2));
  }

  function evidenceNode(card, k) {
    return card.querySelector("mark.selected") || card.querySelector(".box.selected")
      || card.querySelector('tr[data-span="' + k + '"]');
  }

  function select(i, k, show) {
    var card = cardOf(i);
    card.querySelectorAll(".selected").forEach(function (n) { n.classList.remove("selected"); });
    var key = String(k);
    card.querySelectorAll("[data-spans]").forEach(function (n) {
      if (n.getAttribute("data-spans").split(" ").indexOf(key) >= 0) n.classList.add("selected");
    });
    var row = card.querySelector('tr[data-span="' + key + '"]');
    if (row) row.classList.add("selected");
    setCurrent(i, false);
    if (show) reveal(evidenceNode(card, k));
    return row;
  }

  function jump(i, k) {
    // From a panel: show card i (even when filtered out) and the evidence of its span k.
    slots[i].hidden = false;
    setCurrent(i, true);
    if (k === null) return;
    select(i, k, true);
    // Cards around it render after this frame and may move it: look again then.
    requestAnimationFrame(function () { requestAnimationFrame(function () {
      var card = slots[i].querySelector(".card");
      if (card) reveal(evidenceNode(card, k));
    }); });
  }

  list.addEventListener("click", function (event) {
    var target = event.target;
    var button = target.closest("button.zoom-in, button.zoom-out");
    if (button) { zoomPage(button.closest(".pageview"), button.classList.contains("zoom-in") ? 1 : -1); return; }
    var holder = target.closest("[data-card]");
    if (!holder) return;
    var i = Number(holder.getAttribute("data-card"));
    var hit = target.closest("[data-spans]");
    if (hit) { select(i, Number(hit.getAttribute("data-spans").split(" ")[0]), false); return; }
    var row = target.closest("tr[data-span]");
    if (row) select(i, Number(row.getAttribute("data-span")), true);
  });

  function setCurrent(i, scroll) {
    if (current >= 0) {
      var old = slots[current].querySelector(".card");
      if (old) old.classList.remove("current");
    }
    current = i;
    if (i < 0) return;
    if (!slots[i].firstChild) render(i);
    if (scroll) { slots[i].scrollIntoView({block: "start"}); window.scrollBy(0, -header.offsetHeight - 8); }
    slots[i].querySelector(".card").classList.add("current");
  }

  function step(direction) {
    var at = current < 0 ? -1 : order.indexOf(current);
    if (current < 0 && direction < 0) return;
    for (var p = at + direction; p >= 0 && p < order.length; p += direction) {
      if (!slots[order[p]].hidden) { setCurrent(order[p], true); return; }
    }
  }

  document.addEventListener("keydown", function (event) {
    var tag = event.target && event.target.tagName;
    if (tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.key === "j" || event.key === "ArrowDown") { step(1); event.preventDefault(); }
    else if (event.key === "k" || event.key === "ArrowUp") { step(-1); event.preventDefault(); }
  });

  // -- filters: errors per card, value classes per value ------------------------------------
  var onlyErrors = document.getElementById("f-errors");
  var query = document.getElementById("f-query");
  var shown = document.getElementById("kx-shown");
  var VALUES = {unsupported: ["none", "near"], near: ["near"], fuzzy: ["fuzzy"], inferred: ["inferred"]};
  var valueBoxes = {};
  var totals = {none: 0, near: 0, fuzzy: 0, inferred: 0};
  cards.forEach(function (c) { Object.keys(totals).forEach(function (k) { totals[k] += c.counts[k] || 0; }); });
  Object.keys(VALUES).forEach(function (name) {
    valueBoxes[name] = document.getElementById("f-" + name);
    var n = VALUES[name].reduce(function (sum, k) { return sum + totals[k]; }, 0);
    document.getElementById("n-" + name).textContent = "(" + num(n) + ")";
  });
  document.getElementById("n-errors").textContent = "(" + num(cards.filter(function (c) { return !!c.error; }).length) + ")";

  function matches(c, q) {
    if (!q) return true;
    if (c.label.toLowerCase().indexOf(q) >= 0) return true;
    if (c.source && c.source.toLowerCase().indexOf(q) >= 0) return true;
    if (c.error && c.error.toLowerCase().indexOf(q) >= 0) return true;
    if (c.note && c.note.toLowerCase().indexOf(q) >= 0) return true;
    function inFields(f) { return (f[0] + " " + f[1]).toLowerCase().indexOf(q) >= 0; }
    return c.spans.some(function (s) { return (s.path + " " + s.value).toLowerCase().indexOf(q) >= 0; })
      || c.fields.some(inFields) || c.rows.some(function (r) { return r.fields.some(inFields); });
  }
  function applyFilters() {
    var q = query.value.trim().toLowerCase(), count = 0, values = 0, want = {};
    Object.keys(VALUES).forEach(function (name) {
      if (valueBoxes[name].checked) VALUES[name].forEach(function (k) { want[k] = 1; });
    });
    var classes = Object.keys(want), any = classes.length > 0;
    document.body.classList.toggle("vfilter", any);
    ["none", "near", "fuzzy", "inferred"].forEach(function (k) { document.body.classList.toggle("vf-" + k, !!want[k]); });
    cards.forEach(function (c, i) {
      var n = 0;
      classes.forEach(function (k) { n += c.counts[k] || 0; });
      var keep = (!onlyErrors.checked || !!c.error) && (!any || n > 0) && matches(c, q);
      slots[i].hidden = !keep;
      if (keep) { count++; values += n; }
    });
    var cardsText = num(count) + " of " + num(cards.length) + " shown";
    shown.textContent = any ? num(values) + " value" + (values === 1 ? "" : "s") + " · " + cardsText : cardsText;
  }
  var timer = null;
  onlyErrors.addEventListener("change", applyFilters);
  Object.keys(valueBoxes).forEach(function (name) { valueBoxes[name].addEventListener("change", applyFilters); });
  query.addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(applyFilters, 150); });
  applyFilters();

  // -- sorting ----------------------------------------------------------------------------------
  var sorter = document.getElementById("f-sort");
  var KEYS = {
    order: function () { return 0; },
    grounded: function (c) { return c.grounded === null ? Infinity : c.grounded; },
    cost: function (c) { return c.cost === null ? Infinity : -c.cost; },
    error: function (c) { return c.error ? 0 : 1; }
  };
  function applySort() {
    var key = KEYS[sorter.value] || KEYS.order;
    order = cards.map(function (c, i) { return i; });
    order.sort(function (a, b) { return (key(cards[a]) - key(cards[b])) || (a - b); });
    var frag = document.createDocumentFragment();
    order.forEach(function (i) { frag.appendChild(slots[i]); });
    list.appendChild(frag);
  }
  sorter.addEventListener("change", applySort);

  // -- the side panel: doubtful values, or one field across rows ----------------------------
  function openPanel(title, head, rows, total) {
    panelTitle.textContent = title;
    panelBody.textContent = "";
    var table = el("table"), tr = el("tr");
    head.forEach(function (h) { tr.appendChild(el("th", null, h)); });
    table.appendChild(tr);
    rows.forEach(function (r) { table.appendChild(r); });
    panelBody.appendChild(table);
    if (total > rows.length) panelBody.appendChild(el("div", "more", "the first " + num(rows.length) + " of " + num(total) + " are listed"));
    panel.style.top = header.getBoundingClientRect().bottom + "px";
    panel.hidden = false;
    document.body.classList.add("panel-open");
  }
  function closePanel() {
    panel.hidden = true;
    document.body.classList.remove("panel-open");
    fieldChoice.value = "";
  }
  function pick(i, k, cells) {
    var tr = el("tr", "pick");
    tr.setAttribute("data-card", String(i));
    if (k !== null) tr.setAttribute("data-span", String(k));
    cells.forEach(function (cell) { tr.appendChild(cell instanceof Node ? cell : el("td", null, cell)); });
    return tr;
  }
  function kindCell(s) { return el("td", "kind c-" + s.cls, kindLabel(s)); }
  function snippet(c, s) {
    var td = el("td", "evidence"), sec = s.sec >= 0 ? c.sections[s.sec] : null;
    if (!sec || sec.text === null || s.s === null) return td;
    var text = texts[sec.text], a = Math.max(0, s.s - 30), b = Math.min(text.length, s.e + 30);
    td.appendChild(document.createTextNode((a > 0 ? "…" : "") + text.slice(a, s.s)));
    td.appendChild(el("mark", null, text.slice(s.s, s.e)));
    td.appendChild(document.createTextNode(text.slice(s.e, b) + (b < text.length ? "…" : "")));
    return td;
  }

  var doubtfulButton = document.getElementById("f-doubtful");
  var doubtfulCount = 0;
  cards.forEach(function (c) { c.spans.forEach(function (s) { if (DOUBTFUL[s.cls]) doubtfulCount++; }); });
  doubtfulButton.textContent = "doubtful values (" + num(doubtfulCount) + ")";
  doubtfulButton.addEventListener("click", function () {
    var rows = [], total = 0;
    order.forEach(function (i) {
      var c = cards[i];
      c.spans.forEach(function (s) {
        if (!DOUBTFUL[s.cls]) return;
        total++;
        if (rows.length < PANEL_ROWS) rows.push(pick(i, s.k, [c.label, s.path, s.value, kindCell(s)]));
      });
    });
    fieldChoice.value = "";
    openPanel("Doubtful values: " + num(total), ["card", "field", "value", "kind"], rows, total);
  });

  var fieldChoice = document.getElementById("f-field");
  var fieldCounts = {};
  cards.forEach(function (c) {
    c.spans.forEach(function (s) { fieldCounts[s.field] = (fieldCounts[s.field] || 0) + 1; });
    var columns = c.fields.slice();
    c.rows.forEach(function (r) { columns = columns.concat(r.fields); });
    columns.forEach(function (f) { fieldCounts[f[0]] = (fieldCounts[f[0]] || 0) + 1; });
  });
  Object.keys(fieldCounts).sort().forEach(function (name) {
    var option = el("option", null, name + " (" + num(fieldCounts[name]) + ")");
    option.value = name;
    fieldChoice.appendChild(option);
  });
  fieldChoice.addEventListener("change", function () {
    var name = fieldChoice.value;
    if (!name) { closePanel(); return; }
    var rows = [], total = 0;
    order.forEach(function (i) {
      var c = cards[i];
      c.spans.forEach(function (s) {
        if (s.field !== name) return;
        total++;
        if (rows.length < PANEL_ROWS) rows.push(pick(i, s.k, [c.label, s.value, kindCell(s), snippet(c, s)]));
      });
      var columns = c.fields.slice();
      c.rows.forEach(function (r) { columns = columns.concat(r.fields); });
      columns.forEach(function (f) {
        if (f[0] !== name) return;
        total++;
        if (rows.length < PANEL_ROWS) rows.push(pick(i, null, [c.label, f[1], el("td", "kind", "column"), el("td")]));
      });
    });
    openPanel("Field " + name + ": " + num(total) + " values", ["card", "value", "kind", "evidence"], rows, total);
    fieldChoice.value = name;
  });

  panelBody.addEventListener("click", function (event) {
    var tr = event.target.closest("tr.pick");
    if (!tr) return;
    var k = tr.getAttribute("data-span");
    jump(Number(tr.getAttribute("data-card")), k === null ? null : Number(k));
  });
  document.getElementById("kx-panel-close").addEventListener("click", closePanel);

  window.kxReview = {cards: cards.length, select: select, step: step, jump: jump,
    order: function () { return order.slice(); },
    rendered: function () { return document.querySelectorAll(".card.rendered").length; }};
  document.body.setAttribute("data-ready", "1");
})();
"""
