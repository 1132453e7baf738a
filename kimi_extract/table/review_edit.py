# ruff: noqa: E501  (the script keeps its own line lengths)
"""The review page's corrections (a part of ``review_script.SCRIPT``, inside the same closure).

Under each row's fields a "check" block lists every value of the row's fields (``data.check``:
the fields, their JSON types per path, each row's values), with buttons to mark it correct or
wrong, to type the right value, to mark a list item as not in the source, and to add list items
(an item of a list of objects with one input per field). A typed value is parsed and checked
against its path's type (the same rules as ``review_types.check_value``); one that does not fit
is refused with a message saying what the field takes. "mark row correct" confirms a row; a row
enters the gold once it is confirmed or anything in it is marked (its values not marked are then
taken as shown); a value marked wrong without its right value, or a value that does not fit its
type (a failed row's none where the model wants a number), keeps its row out until corrected.

The marks live in ``fixes`` (row position -> confirmed, marks per path, added items per list),
saved to ``localStorage`` under the page's data hash after every change, so a reload keeps them.
"download corrections" writes them as one JSON file (``table.corrections`` reads it back) from a
Blob: nothing leaves the page but the download. ``window.kxReview.corrections()`` returns what
the download would hold; ``window.kxReview.parse(text, path)`` the page's reading of a typed value.
"""

from __future__ import annotations

EDITING = r"""
  var check = data.check || null;
  var fixes = {}, rowsByPos = [], storageProblem = null;
  var STORE = check ? "kimi_extract.corrections:" + check.hash : null;
  var FORMATS = {};
  var LABEL = {ok: "correct", wrong: "wrong", fix: "corrected", drop: "not_in_source"};
  if (check) {
    Object.keys(check.formats).forEach(function (f) { FORMATS[f] = new RegExp(check.formats[f]); });
    cards.forEach(function (c, i) { c.rows.forEach(function (row, r) { if (row.pos !== undefined) rowsByPos[row.pos] = [i, r]; }); });
    var raw = null, stored = null;
    try { raw = window.localStorage.getItem(STORE); }
    catch (e) { storageProblem = "corrections are not kept on reload here: " + e.message; }
    try { stored = JSON.parse(raw || "null"); } catch (e) { stored = null; }  // unreadable: start afresh
    if (stored && stored.hash === check.hash && stored.rows && typeof stored.rows === "object") {
      Object.keys(stored.rows).forEach(function (pos) {
        var fx = stored.rows[pos];
        if (rowsByPos[Number(pos)] && fx && typeof fx.marks === "object" && typeof fx.added === "object") fixes[pos] = fx;
      });
    }
  }

  function isObj(v) { return v !== null && typeof v === "object" && !Array.isArray(v); }
  function typeAt(tpath) { return (check.types[tpath] || null); }
  function kindsAt(tpath) { var t = typeAt(tpath); return t ? t.t : ["any"]; }
  function show(v) { return v === null || v === undefined ? "none" : typeof v === "string" ? v : JSON.stringify(v); }
  function jsonType(v) {
    if (v === null) return "null";
    if (typeof v === "boolean") return "boolean";
    if (typeof v === "number") return Number.isInteger(v) ? "integer" : "number";
    if (typeof v === "string") return "string";
    if (Array.isArray(v)) return "array";
    if (typeof v === "object") return "object";
    return "any";
  }
  function short(v) { var s = JSON.stringify(v); return s.length <= 80 ? s : s.slice(0, 80) + "…"; }
  function wanted(kinds) { return kinds.filter(function (k) { return k !== "null"; }).sort().join(" or "); }

  function formatted(text, fmt) {
    var m = FORMATS[fmt] ? FORMATS[fmt].exec(text) : null;
    if (!m) return false;
    var g = m.slice(1, 7).map(function (x) { return x ? Number(x) : null; });
    if (g[0] !== null) {
      var d = new Date(Date.UTC(g[0], g[1] - 1, g[2]));
      if (d.getUTCFullYear() !== g[0] || d.getUTCMonth() !== g[1] - 1 || d.getUTCDate() !== g[2]) return false;
    }
    return (g[3] || 0) < 24 && (g[4] || 0) < 60 && (g[5] || 0) < 60;
  }

  function checkValue(v, path) {
    // Why v does not fit path's type, or null (review_types.check_value, the same rules).
    var t = typeAt(path);
    if (!t) return null;
    var kinds = t.t, has = function (k) { return kinds.indexOf(k) >= 0; };
    if (v === null) return has("null") || has("any") ? null : path + " takes " + wanted(kinds) + ", not none";
    var kind = jsonType(v);
    var fits = has("any") || has(kind) || (kind === "integer" && has("number"));
    if (!fits) return path + " takes " + wanted(kinds) + ", not " + kind + " " + short(v);
    if (t.e && t.e.length && !t.e.some(function (a) { return a === v; })) return path + " takes one of " + short(t.e) + ", not " + short(v);
    if (t.f && typeof v === "string" && !formatted(v, t.f)) return path + " takes a " + t.f + " (ISO 8601), not " + short(v);
    if (isObj(v)) {
      var keys = Object.keys(v);
      for (var i = 0; i < keys.length; i++) {
        var sub = path + "." + keys[i];
        if (t.k && t.k.indexOf(keys[i]) < 0 && !check.types[sub]) return path + " has no key " + JSON.stringify(keys[i]) + " (its keys: " + t.k.join(", ") + ")";
        var p = checkValue(v[keys[i]], sub);
        if (p) return p;
      }
    }
    if (Array.isArray(v)) {
      for (var j = 0; j < v.length; j++) {
        var q = checkValue(v[j], path + "[]");
        if (q) return q.replace(path + "[]", path + "[" + j + "]");
      }
    }
    return null;
  }

  var NUMBER = /^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/;
  function parse(text, tpath) {
    // A typed text -> {value} read by the path's type, or {error}.
    var t = typeAt(tpath), kinds = kindsAt(tpath), trimmed = text.trim();
    var has = function (k) { return kinds.indexOf(k) >= 0; };
    var got;
    if (t && t.e && t.e.length) {
      var hit = t.e.filter(function (a) { return String(a) === trimmed; });
      if (!hit.length) return {error: tpath + " takes one of " + t.e.map(String).join(", ") + ": " + JSON.stringify(text) + " is not one of them"};
      got = {value: hit[0]};
    } else if (has("any")) {
      try { got = {value: JSON.parse(text)}; } catch (e) { got = {value: text}; }
    } else if ((has("object") || has("array")) && /^[\[{]/.test(trimmed)) {
      try { got = {value: JSON.parse(trimmed)}; } catch (e) { return {error: tpath + " takes " + wanted(kinds) + " as JSON: " + e.message}; }
    } else if ((has("integer") || has("number")) && NUMBER.test(trimmed)) {
      var n = Number(trimmed);
      if (!isFinite(n)) return {error: tpath + " takes a finite number, not " + JSON.stringify(text)};
      if (!has("number") && !Number.isInteger(n)) {
        if (!has("string")) return {error: tpath + " takes a whole number (integer): " + JSON.stringify(text) + " has a fraction"};
        got = {value: text};
      } else if (Number.isInteger(n) && !Number.isSafeInteger(n)) {
        return {error: tpath + " takes an integer JavaScript can hold exactly (at most 15 digits), not " + JSON.stringify(text)};
      } else got = {value: n};
    } else if (has("boolean") && /^(true|false)$/i.test(trimmed)) {
      got = {value: trimmed.toLowerCase() === "true"};
    } else if (has("string")) {
      got = {value: text};
    } else {
      var what = has("integer") && !has("number") ? "a whole number (integer)" : has("number") || has("integer") ? "a number (digits, '.' for decimals, e.g. 1234.5)" : has("boolean") ? "true or false" : wanted(kinds) + " as JSON";
      return {error: tpath + " takes " + what + ": " + JSON.stringify(text) + " is not one"};
    }
    var problem = checkValue(got.value, tpath);
    return problem ? {error: problem} : got;
  }

  // -- the marks -----------------------------------------------------------------------------
  function fixOf(pos) { return fixes[pos] || null; }
  function touch(pos) {
    if (!fixes[pos]) fixes[pos] = {confirmed: false, marks: {}, added: {}};
    return fixes[pos];
  }
  function tidy(pos) {
    var fx = fixes[pos];
    if (!fx) return;
    Object.keys(fx.added).forEach(function (p) { if (!fx.added[p].length) delete fx.added[p]; });
    if (!fx.confirmed && !Object.keys(fx.marks).length && !Object.keys(fx.added).length) delete fixes[pos];
  }
  function stateOf(fx, pos) {
    if (!fx) return "open";
    var marks = Object.keys(fx.marks).map(function (p) { return fx.marks[p].s; });
    if (marks.indexOf("wrong") >= 0 || misfit(fx, pos)) return "unresolved";
    if (marks.indexOf("fix") >= 0 || marks.indexOf("drop") >= 0 || Object.keys(fx.added).length) return "corrected";
    if (fx.confirmed) return "confirmed";
    return marks.length ? "checked" : "open";
  }
  function misfit(fx, pos) {
    // The first value of the row (as corrected) that does not fit its type, or null.
    var at = rowsByPos[pos];
    if (!at) return null;
    var row = cards[at[0]].rows[at[1]];
    for (var i = 0; i < check.fields.length; i++) {
      var name = check.fields[i], problem = checkValue(corrected(row.values[name], name, fx), name);
      if (problem) return problem;
    }
    return null;
  }
  function under(path, name) {
    return path === name || path.indexOf(name + ".") === 0 || path.indexOf(name + "[") === 0;
  }
  function corrected(v, path, fx) {
    var m = fx.marks[path], added = fx.added[path] || [];
    if (m && m.s === "fix") return m.v;
    if (Array.isArray(v)) {
      var out = [];
      v.forEach(function (x, i) {
        var p = path + "[" + i + "]";
        if (fx.marks[p] && fx.marks[p].s === "drop") return;
        out.push(corrected(x, p, fx));
      });
      return out.concat(added);
    }
    if (isObj(v)) {
      var o = {};
      Object.keys(v).forEach(function (k) { o[k] = corrected(v[k], path + "." + k, fx); });
      return o;
    }
    return v === null && added.length ? added.slice() : v;
  }
  function fieldState(fx, name, row) {
    var marks = Object.keys(fx.marks).filter(function (p) { return under(p, name); }).map(function (p) { return fx.marks[p].s; });
    if (marks.indexOf("wrong") >= 0 || checkValue(corrected(row.values[name], name, fx), name)) return "unresolved";
    var added = Object.keys(fx.added).some(function (p) { return under(p, name); });
    if (added || marks.indexOf("fix") >= 0 || marks.indexOf("drop") >= 0) return "corrected";
    return marks.length ? "correct" : "unmarked";
  }

  function correctionsFile() {
    var rows = [];
    Object.keys(fixes).map(Number).sort(function (a, b) { return a - b; }).forEach(function (pos) {
      var fx = fixes[pos], state = stateOf(fx, pos), at = rowsByPos[pos];
      if (state === "open" || !at) return;
      var row = cards[at[0]].rows[at[1]], fields = {};
      check.fields.forEach(function (name) {
        var marks = [];
        Object.keys(fx.marks).sort().forEach(function (p) {
          if (!under(p, name)) return;
          var m = fx.marks[p], entry = {path: p, status: LABEL[m.s]};
          if (m.s === "fix") entry.value = m.v;
          marks.push(entry);
        });
        Object.keys(fx.added).sort().forEach(function (p) {
          if (under(p, name)) fx.added[p].forEach(function (v) { marks.push({path: p, status: "added", value: v}); });
        });
        fields[name] = {status: fieldState(fx, name, row), value: corrected(row.values[name], name, fx), shown: row.values[name], marks: marks};
      });
      rows.push({position: pos, index: row.key[0], id: row.key[1], label: cards[at[0]].label, status: state, confirmed: !!fx.confirmed, fields: fields});
    });
    return {format: check.format, version: check.version, data_hash: check.hash, page: check.name,
      model: check.model, typed: check.typed, prefix: check.prefix, id_column: check.id_column,
      fields: check.fields, types: check.types, saved: new Date().toISOString(), rows: rows};
  }

  var downloadButton = document.getElementById("kx-download"), reviewed = document.getElementById("kx-reviewed");
  function saveFixes() {
    try { window.localStorage.setItem(STORE, JSON.stringify({hash: check.hash, rows: fixes})); storageProblem = null; }
    catch (e) { storageProblem = "corrections are not kept on reload here: " + e.message; }
    counts();
  }
  function counts() {
    var n = {confirmed: 0, checked: 0, corrected: 0, unresolved: 0};
    Object.keys(fixes).forEach(function (pos) { var s = stateOf(fixes[pos], pos); if (n[s] !== undefined) n[s]++; });
    var gold = n.confirmed + n.checked + n.corrected;
    var text = num(gold) + " of " + num(rowsByPos.length) + " rows reviewed (" + num(n.corrected) + " corrected)";
    if (n.unresolved) text += " · " + num(n.unresolved) + " need a value";
    if (storageProblem) text += " · " + storageProblem;
    reviewed.textContent = text;
  }

  // -- drawing the check block of one row -------------------------------------------------------
  function lines(v, path, tpath, out, depth) {
    if (Array.isArray(v)) {
      v.forEach(function (x, i) {
        var p = path + "[" + i + "]", tp = tpath + "[]";
        if ((isObj(x) || Array.isArray(x)) && depth < 24) { out.push({kind: "item", path: p, tpath: tp}); lines(x, p, tp, out, depth + 1); }
        else out.push({kind: "leaf", path: p, tpath: tp, value: x, element: true});
      });
      out.push({kind: "add", path: path, tpath: tpath});
    } else if (isObj(v) && depth < 24) {
      Object.keys(v).forEach(function (k) { lines(v[k], path + "." + k, tpath + "." + k, out, depth + 1); });
    } else {
      out.push({kind: "leaf", path: path, tpath: tpath, value: v, element: false});
      if (v === null && kindsAt(tpath).indexOf("array") >= 0) out.push({kind: "add", path: path, tpath: tpath});
    }
  }
  function makeButton(cls, text, title) {
    var b = el("button", cls, text);
    b.type = "button";
    if (title) b.title = title;
    return b;
  }
  function dropped(fx, path) {
    if (!fx) return false;
    return Object.keys(fx.marks).some(function (p) {
      return fx.marks[p].s === "drop" && p !== path && (path.indexOf(p + ".") === 0 || path.indexOf(p + "[") === 0);
    });
  }
  function editor(value, tpath, addTo) {
    var box = el("div", "cx-edit"), input = el("input", "cx-input");
    input.type = "text";
    input.value = value;
    input.setAttribute("aria-label", "the right value of " + tpath);
    box.appendChild(input);
    box.appendChild(makeButton("cx-save", "save", "keep this value (Enter)"));
    var kinds = kindsAt(tpath);
    if (kinds.indexOf("null") >= 0 || kinds.indexOf("any") >= 0) box.appendChild(makeButton("cx-none", "no value", "the source has no value here"));
    box.appendChild(makeButton("cx-cancel", "cancel"));
    var error = el("div", "cx-error");
    error.setAttribute("role", "alert");
    box.appendChild(error);
    return box;
  }
  function addForm(entry) {
    var tr = el("tr", "cx-form"), td = el("td");
    td.colSpan = 3;
    tr.setAttribute("data-list", entry.path);
    tr.setAttribute("data-tpath", entry.tpath);
    var itemType = entry.tpath + "[]", t = typeAt(itemType);
    var keys = t && t.k && t.t.indexOf("object") >= 0 ? t.k : null;
    (keys || [null]).forEach(function (k) {
      var label = el("label", "cx-field");
      label.appendChild(el("span", "cx-key", k === null ? "value" : k));
      var input = el("input", "cx-input");
      input.type = "text";
      input.setAttribute("data-key", k === null ? "" : k);
      input.setAttribute("aria-label", (k === null ? "new value of " : k + " of the new item of ") + entry.path);
      label.appendChild(input);
      td.appendChild(label);
    });
    td.appendChild(makeButton("cx-add-save", "add", "add this item"));
    td.appendChild(makeButton("cx-add-cancel", "cancel"));
    var error = el("div", "cx-error");
    error.setAttribute("role", "alert");
    td.appendChild(error);
    tr.appendChild(td);
    return tr;
  }
  var STATE_TEXT = {
    open: "not reviewed: left out of the gold until you mark it correct or correct it",
    checked: "reviewed: in the gold (values not marked are taken as shown)",
    confirmed: "marked correct: in the gold",
    corrected: "corrected: in the gold (values not marked are taken as shown)",
    unresolved: "a value marked wrong needs its right value (or undo): left out of the gold"
  };
  function checkBlock(c, row) {
    var pos = row.pos, fx = fixOf(pos), state = stateOf(fx, pos);
    var box = el("div", "cx-check cx-" + state);
    box.setAttribute("data-pos", String(pos));
    var head = el("div", "cx-head");
    head.appendChild(el("span", "cx-title", "check " + (row.item !== null && row.item !== undefined ? "item " + row.item : "row " + c.row)));
    var problem = state === "unresolved" && !Object.keys(fx.marks).some(function (p) { return fx.marks[p].s === "wrong"; }) ? misfit(fx, pos) : null;
    head.appendChild(el("span", "cx-state", problem ? "left out of the gold: " + problem + ": correct it (✗)" : STATE_TEXT[state]));
    head.appendChild(makeButton("cx-confirm", fx && fx.confirmed ? "marked correct ✓" : "mark row correct", "every value of this row is right (with your corrections)"));
    if (fx) head.appendChild(makeButton("cx-reset", "reset", "forget the marks of this row"));
    box.appendChild(head);
    var table = el("table", "cx-table"), entries = [];
    check.fields.forEach(function (name) { lines(row.values[name], name, name, entries, 0); });
    entries.forEach(function (e) {
      var m = fx ? fx.marks[e.path] : null, gone = dropped(fx, e.path), tr;
      if (e.kind === "add") {
        ((fx && fx.added[e.path]) || []).forEach(function (v, n) {
          var added = el("tr", "cx-added");
          added.setAttribute("data-list", e.path);
          added.setAttribute("data-n", String(n));
          added.appendChild(el("td", "cx-path", e.path + "[+" + (n + 1) + "]"));
          added.appendChild(el("td", "cx-value", show(v)));
          var cell = el("td", "cx-act");
          cell.appendChild(makeButton("cx-remove", "remove", "remove this added item"));
          added.appendChild(cell);
          table.appendChild(added);
        });
        tr = el("tr", "cx-addrow" + (gone ? " cx-gone" : ""));
        tr.setAttribute("data-list", e.path);
        tr.setAttribute("data-tpath", e.tpath);
        var td = el("td");
        td.colSpan = 3;
        var itemType = typeAt(e.tpath + "[]");
        td.appendChild(makeButton("cx-add", (itemType && itemType.t.indexOf("object") >= 0 ? "add an item to " : "add a value to ") + e.path, "a value the extraction missed"));
        tr.appendChild(td);
        table.appendChild(tr);
        return;
      }
      var unfit = e.kind === "leaf" && !gone && !(m && m.s === "fix") ? checkValue(e.value, e.tpath) : null;
      tr = el("tr", (e.kind === "item" ? "cx-item" : "cx-leaf") + (m ? " cx-m-" + m.s : "") + (gone ? " cx-gone" : "") + (unfit ? " cx-misfit" : ""));
      tr.setAttribute("data-path", e.path);
      tr.setAttribute("data-tpath", e.tpath);
      tr.appendChild(el("td", "cx-path", e.path));
      var value = el("td", "cx-value"), act = el("td", "cx-act");
      if (e.kind === "leaf") {
        if (m && m.s === "fix") {
          value.appendChild(el("del", "cx-was", show(e.value)));
          value.appendChild(document.createTextNode(" → "));
          value.appendChild(el("ins", "cx-now", show(m.v)));
        } else value.appendChild(el("span", e.value === null ? "cx-v cx-null" : "cx-v", show(e.value)));
        if (unfit) value.appendChild(el("div", "cx-unfit", "does not fit: " + unfit));
        if (m && m.s === "wrong") value.appendChild(editor(e.value === null ? "" : show(e.value), e.tpath));
        if (!gone) {
          act.appendChild(makeButton("cx-ok" + (m && m.s === "ok" ? " on" : ""), "✓", "this value is right"));
          act.appendChild(makeButton("cx-bad" + (m && (m.s === "wrong" || m.s === "fix") ? " on" : ""), "✗", "this value is wrong: type the right one"));
        }
      } else value.appendChild(el("span", "cx-v cx-muted", m && m.s === "drop" ? "not in the source" : "item"));
      if (!gone && (e.element || e.kind === "item")) act.appendChild(makeButton("cx-drop" + (m && m.s === "drop" ? " on" : ""), "not in source", "the source has no such item: drop it"));
      if (m && !gone) act.appendChild(makeButton("cx-undo", "undo", "forget this mark"));
      tr.appendChild(value);
      tr.appendChild(act);
      table.appendChild(tr);
    });
    box.appendChild(table);
    return box;
  }

  function redraw(pos) {
    // Draw the row's block again, keeping what is being typed: open value editors (their text
    // and message) and open "add" forms.
    var at = rowsByPos[pos], old = list.querySelector('.cx-check[data-pos="' + pos + '"]');
    if (!at || !old) return null;
    var typing = {}, forms = {};
    old.querySelectorAll("tr[data-path] .cx-edit").forEach(function (box) {
      typing[box.closest("tr").getAttribute("data-path")] = [box.querySelector(".cx-input").value, box.querySelector(".cx-error").textContent];
    });
    old.querySelectorAll("tr.cx-form").forEach(function (form) {
      forms[form.getAttribute("data-list")] = [Array.from(form.querySelectorAll("input")).map(function (i) { return i.value; }), form.querySelector(".cx-error").textContent];
    });
    var fresh = checkBlock(cards[at[0]], cards[at[0]].rows[at[1]]);
    fresh.querySelectorAll("tr[data-path] .cx-edit").forEach(function (box) {
      var kept = typing[box.closest("tr").getAttribute("data-path")];
      if (kept) { box.querySelector(".cx-input").value = kept[0]; box.querySelector(".cx-error").textContent = kept[1]; }
    });
    fresh.querySelectorAll("tr.cx-addrow").forEach(function (row) {
      var kept = forms[row.getAttribute("data-list")];
      if (!kept) return;
      var form = addForm({path: row.getAttribute("data-list"), tpath: row.getAttribute("data-tpath")});
      form.querySelectorAll("input").forEach(function (input, n) { input.value = kept[0][n] || ""; });
      form.querySelector(".cx-error").textContent = kept[1];
      row.after(form);
    });
    old.replaceWith(fresh);
    return fresh;
  }
  function changed(pos) { tidy(pos); saveFixes(); return redraw(pos); }

  function saveEdit(box, pos, path, tpath, toNull) {
    var got = toNull ? (checkValue(null, tpath) ? {error: checkValue(null, tpath)} : {value: null}) : parse(box.querySelector(".cx-input").value, tpath);
    if (got.error) {
      box.querySelector(".cx-error").textContent = "refused: " + got.error;
      box.querySelector(".cx-input").setAttribute("aria-invalid", "true");
      return;
    }
    touch(pos).marks[path] = {s: "fix", v: got.value};
    changed(pos);
  }
  function saveAdd(form, pos) {
    var listPath = form.getAttribute("data-list"), itemPath = form.getAttribute("data-tpath") + "[]";
    var inputs = form.querySelectorAll("input.cx-input"), item = {}, single = null, error = null;
    inputs.forEach(function (input) {
      if (error) return;
      var key = input.getAttribute("data-key"), sub = key ? itemPath + "." + key : itemPath;
      var kinds = kindsAt(sub), got;
      if (input.value === "" && (kinds.indexOf("null") >= 0 || kinds.indexOf("string") < 0)) got = checkValue(null, sub) ? {error: checkValue(null, sub)} : {value: null};
      else got = parse(input.value, sub);
      if (got.error) { error = got.error; input.setAttribute("aria-invalid", "true"); return; }
      if (key) item[key] = got.value; else single = got.value;
    });
    var value = inputs.length === 1 && !inputs[0].getAttribute("data-key") ? single : item;
    if (!error) error = checkValue(value, itemPath);
    if (error) { form.querySelector(".cx-error").textContent = "refused: " + error; return; }
    var fx = touch(pos);
    (fx.added[listPath] = fx.added[listPath] || []).push(value);
    form.remove();
    changed(pos);
  }

  function onCheckClick(event) {
    var b = event.target.closest("button");
    var box = event.target.closest(".cx-check");
    if (!b || !box) return false;
    var pos = Number(box.getAttribute("data-pos")), tr = b.closest("tr"), fx;
    var path = tr ? tr.getAttribute("data-path") : null, tpath = tr ? tr.getAttribute("data-tpath") : null;
    if (b.classList.contains("cx-confirm")) { fx = touch(pos); fx.confirmed = !fx.confirmed; changed(pos); }
    else if (b.classList.contains("cx-reset")) { delete fixes[pos]; changed(pos); }
    else if (b.classList.contains("cx-ok")) { fx = touch(pos); if (fx.marks[path] && fx.marks[path].s === "ok") delete fx.marks[path]; else fx.marks[path] = {s: "ok"}; changed(pos); }
    else if (b.classList.contains("cx-bad")) {
      fx = touch(pos);
      var before = fx.marks[path];
      fx.marks[path] = {s: "wrong", was: before && before.s === "fix" ? before : null};
      var fresh = changed(pos), input = fresh && fresh.querySelector('tr[data-path="' + CSS.escape(path) + '"] .cx-input');
      if (input) { if (before && before.s === "fix") input.value = before.v === null ? "" : show(before.v); input.focus(); input.select(); }
    }
    else if (b.classList.contains("cx-drop")) { fx = touch(pos); if (fx.marks[path] && fx.marks[path].s === "drop") delete fx.marks[path]; else fx.marks[path] = {s: "drop"}; changed(pos); }
    else if (b.classList.contains("cx-undo")) { fx = touch(pos); delete fx.marks[path]; changed(pos); }
    else if (b.classList.contains("cx-save")) saveEdit(b.closest(".cx-edit"), pos, path, tpath, false);
    else if (b.classList.contains("cx-none")) saveEdit(b.closest(".cx-edit"), pos, path, tpath, true);
    else if (b.classList.contains("cx-cancel")) {
      fx = touch(pos);
      var was = fx.marks[path] && fx.marks[path].was;
      if (was) fx.marks[path] = was; else delete fx.marks[path];
      changed(pos);
    }
    else if (b.classList.contains("cx-add")) {
      var row = b.closest("tr"), next = row.nextElementSibling;
      if (next && next.classList.contains("cx-form")) return true;
      var form = addForm({path: row.getAttribute("data-list"), tpath: row.getAttribute("data-tpath")});
      row.after(form);
      var first = form.querySelector("input");
      if (first) first.focus();
    }
    else if (b.classList.contains("cx-add-save")) saveAdd(b.closest("tr.cx-form"), pos);
    else if (b.classList.contains("cx-add-cancel")) b.closest("tr.cx-form").remove();
    else if (b.classList.contains("cx-remove")) {
      fx = touch(pos);
      var added = fx.added[tr.getAttribute("data-list")] || [];
      added.splice(Number(tr.getAttribute("data-n")), 1);
      changed(pos);
    }
    return true;
  }

  function onCheckKey(event) {
    if (event.key !== "Enter" || !event.target.classList || !event.target.classList.contains("cx-input")) return;
    var save = event.target.closest(".cx-edit, tr.cx-form").querySelector(".cx-save, .cx-add-save");
    if (save) { event.preventDefault(); save.click(); }
  }

  function download() {
    var file = correctionsFile();
    var blob = new Blob([JSON.stringify(file, null, 1)], {type: "application/json"});
    var a = el("a");
    a.href = URL.createObjectURL(blob);
    a.download = (check.name || "review") + ".corrections.json";
    document.body.appendChild(a);
    a.click();
    setTimeout(function () { URL.revokeObjectURL(a.href); a.remove(); }, 60000);
  }

  if (check) {
    list.addEventListener("click", function (event) { if (onCheckClick(event)) event.stopPropagation(); }, true);
    list.addEventListener("keydown", onCheckKey);
    downloadButton.hidden = false;
    downloadButton.addEventListener("click", download);
    counts();
  }
"""
