# ruff: noqa: E501  (the script keeps its own line lengths)
"""The review page's controls (the second part of ``review_script.SCRIPT``, inside the same
closure): the lazy card list, selecting a value and scrolling its evidence into view, the
keyboard, filters and counts per value, sorting, and the side panel (doubtful values, or one
field across rows).

Selecting a value scrolls its evidence into view: every scrolled box holding it (the text pane, a
zoomed page) and then the window, below the sticky header. A jump from the panel renders the card
first, and looks again two frames later, once the cards around it have rendered.
"""

from __future__ import annotations

CONTROLS = r"""
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
    corrections: check ? correctionsFile : null, parse: check ? parse : null,
    checkValue: check ? checkValue : null,
    rendered: function () { return document.querySelectorAll(".card.rendered").length; }};
  document.body.setAttribute("data-ready", "1");
"""
