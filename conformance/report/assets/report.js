/* index.html: filters, the errors / parameters toggle, the per-case view and the
   in-page self-test (#selftest).  Inlined by conformance/report/html.py.
   Every string from the data is written with textContent, never innerHTML. */
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("report-data").textContent);
  /* a number: an index into one table of stable texts (html.py: Strings) */
  function shared(v) {
    return typeof v === "number" ? data.strings[v] : v;
  }
  /* a matrix cell's outcome word (html_matrix.matrix_cell: an index, or a list) */
  function wordOf(m) { return data.strings[typeof m === "number" ? m : m[0]]; }
  /* a cell's figures (html.py figures_data: max abs, rel, weights max abs, parameters,
     formula, fully masked row; "" where none, empty trailing ones left out) in words */
  function figuresText(f) {
    var v = function (i) { return i < f.length ? f[i] : ""; }, parts = [];
    if (v(0) !== "") { parts.push("max abs " + v(0) + ", rel " + v(1)); }
    if (v(2) !== "") { parts.push("weights max abs " + v(2)); }
    if (v(3) !== "") {
      parts.push("parameters " + v(3) + " (" + (v(3) === v(4) ? "= formula" :
        "formula " + v(4)) + ")");
    }
    if (v(5) !== "") { parts.push("fully masked row: " + v(5)); }
    return parts.join("\n");
  }
  /* a case's k-th cell is its k-th non-empty matrix cell's: runner and word from there,
     then data.cell_fields (figures, reason, notes; empty trailing fields left out) */
  data.cases.forEach(function (c, ci) {
    var k = 0, out = [];
    (data.matrix[ci] || []).forEach(function (m, n) {
      if (m === null) { return; }
      var a = c.cells[k++] || [], o = { runner: data.runners[n], label: wordOf(m) };
      data.cell_fields.forEach(function (f, i) {
        var v = i < a.length ? a[i] : (f === "notes" || f === "figures" ? [] : "");
        o[f] = f === "figures" ? figuresText(v) :
          (Array.isArray(v) ? v.map(shared) : shared(v));
        if (f === "figures") { o.figs = v; }
      });
      out.push(o);
    });
    c.cells = out;
  });
  data.ledger.forEach(function (s) {  /* a ledger cell is a list of data.ledger_fields */
    s.cells = s.cells.map(function (a) {
      var o = {};  /* a number: an interned text (axis, source, value: html.py ledger_data) */
      data.ledger_fields.forEach(function (f, i) { o[f] = shared(a[i]); });
      return o;
    });
  });
  var table = document.getElementById("matrix");
  var filters = { framework: "", runner: "", tag: "", outcome: "" };

  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    if (cls) { e.className = cls; }
    return e;
  }
  var TITLE_LIMIT = 80;  /* html_matrix.py: a cell's hover text, the reason cut */
  /* one matrix cell from the data (html_matrix.matrix_cell): a word's index alone (its
     text comes from the CSS), [word] (its views are its figures'), or [word, error
     view(, parameter view)]; null: no row.  x: its case-view cell (reason, figures) */
  function matrixCell(cell, x) {
    if (cell === null) { return el("td"); }
    var reason = x ? x.reason : "", figs = x ? x.figs : [];
    var one = typeof cell === "number", word = wordOf(cell);
    var td = el("td", null, "o-" + word.replace(/ /g, "-"));
    if (one) { return td; }
    if (reason) {
      td.title = reason.length <= TITLE_LIMIT ? reason :
        reason.slice(0, TITLE_LIMIT - 1) + "\u2026";
    }
    if (cell.length === 1) {  /* both views are its figures' (html_matrix.figures_views) */
      var count = figs.length > 3 ? figs[3] : "";
      cell = [cell[0], figs.length ? figs[0] : "", typeof count === "number" ? String(count) : ""];
    }
    td.appendChild(el("span", cell[1], "v-err"));
    td.appendChild(el("span", cell.length > 2 ? cell[2] : cell[1], "v-par"));
    return td;
  }
  /* the matrix body: one row per case (data.cases order), one cell per runner column */
  function buildMatrix() {
    var body = table.tBodies[0];
    data.cases.forEach(function (c, i) {
      var tr = el("tr"), th = el("th"), a = el("a", c.id, "case-link"), byRunner = {};
      c.cells.forEach(function (x) { byRunner[x.runner] = x; });
      tr.setAttribute("data-case", c.id);
      tr.setAttribute("data-tags", JSON.stringify(c.tags));
      a.setAttribute("href", "#case=" + encodeURIComponent(c.id));
      th.appendChild(a);
      tr.appendChild(th);
      (data.matrix[i] || []).forEach(function (cell, n) {
        tr.appendChild(matrixCell(cell, byRunner[data.runners[n]]));
      });
      body.appendChild(tr);
    });
    return Array.prototype.slice.call(body.rows);
  }
  var rows = buildMatrix();
  function clear(node) { while (node.firstChild) { node.removeChild(node.firstChild); } }
  function find(list, key, value) {
    for (var i = 0; i < list.length; i++) { if (list[i][key] === value) { return list[i]; } }
    return null;
  }
  function columnShown(cell) {
    return (!filters.framework || cell.getAttribute("data-framework") === filters.framework) &&
      (!filters.runner || cell.getAttribute("data-runner") === filters.runner);
  }
  function outcomeOf(td) {  // a cell's outcome is its o- class ("o-known-mismatch")
    var m = /(?:^| )o-(\S+)/.exec(td.className);
    return m ? m[1].replace("-", " ") : "";
  }
  function apply() {
    var heads = table.tHead.rows[0].cells, shown = 0;
    for (var h = 1; h < heads.length; h++) { heads[h].hidden = !columnShown(heads[h]); }
    rows.forEach(function (tr) {
      var tags = JSON.parse(tr.getAttribute("data-tags") || "[]");
      var any = false;
      for (var i = 1; i < tr.cells.length; i++) {
        var td = tr.cells[i], visible = columnShown(heads[i]);
        var match = !filters.outcome || outcomeOf(td) === filters.outcome;
        td.hidden = !visible;
        td.classList.toggle("dim", !match);
        if (visible && match) { any = true; }
      }
      tr.hidden = !((!filters.tag || tags.indexOf(filters.tag) >= 0) && any);
      if (!tr.hidden) { shown++; }
    });
    document.getElementById("matrix-count").textContent =
      shown + " of " + rows.length + " cases shown";
    return shown;
  }
  function setFilter(name, value) {
    filters[name] = value;
    document.getElementById("filter-" + name).value = value;
    return apply();
  }

  function pairs(parent, list) {
    var t = el("table");
    list.forEach(function (p) {
      var tr = el("tr");
      tr.appendChild(el("th", p[0]));
      tr.appendChild(el("td", p[1], "wrap"));
      t.appendChild(tr);
    });
    parent.appendChild(t);
  }
  function ledgerCells(runner) {
    var sys = find(data.ledger, "system", runner);
    if (!sys) { return null; }
    var d = el("details");
    d.appendChild(el("summary", "conventions ledger (" + sys.cells.length + " cells)"));
    pairs(d, sys.cells.map(function (c) {
      return [c.axis, c.value + " (" + c.source + "): " + c.evidence];
    }));
    return d;
  }
  function runnerTable(c) {
    var t = el("table");
    var head = el("tr");
    ["runner", "outcome", "figures", "reason and notes"].forEach(function (h) {
      head.appendChild(el("th", h));
    });
    t.appendChild(head);
    c.cells.forEach(function (x) {
      var tr = el("tr", null, "o-" + x.label.replace(/ /g, "-"));
      tr.appendChild(el("td", x.runner));
      tr.appendChild(el("td", x.label));
      tr.appendChild(el("td", x.figures, "wrap"));
      var why = el("td", [x.reason].concat(x.notes).filter(Boolean).join("\n"), "wrap");
      var ledger = ledgerCells(x.runner);
      if (ledger) { why.appendChild(ledger); }
      tr.appendChild(why);
      t.appendChild(tr);
    });
    return t;
  }
  function showCase(id) {
    var view = document.getElementById("case-view"), c = find(data.cases, "id", id);
    clear(view);
    view.hidden = !c;
    if (!c) { return; }
    view.appendChild(el("h2", "Case " + c.id + ": " + c.title));
    view.appendChild(el("p", c.description, "wrap"));
    pairs(view, [["source", c.source], ["tags", c.tags.join(", ")], ["file", c.file]]);
    view.appendChild(el("h3", "Configuration"));
    view.appendChild(el("pre", JSON.stringify(c.config, null, 1)));
    view.appendChild(el("h3", "Each runner"));
    var page = el("a", "cases/" + c.id + ".md");  /* ids are slugs (the loader's rule) */
    page.setAttribute("href", "cases/" + encodeURIComponent(c.id) + ".md");
    var where = el("p", "Each runner's native call and weight names and shapes: ");
    where.appendChild(page);
    view.appendChild(where);
    view.appendChild(runnerTable(c));
  }
  /* the two-system comparison: every axis where the two systems' ledger values differ */
  var SILENT = ["", "not_applicable", "not_probed"];
  function valueOf(system, axis) {
    var sys = find(data.ledger, "system", system), c = sys && find(sys.cells, "axis", axis);
    return c || { value: "", evidence: "" };
  }
  function showDiff() {
    var table = document.getElementById("diff-table");
    if (!table) { return -1; }
    var a = document.getElementById("diff-a").value, b = document.getElementById("diff-b").value;
    var shown = 0, agree = 0;
    clear(table);
    var head = el("tr");
    ["axis", a, b, "what to do", "evidence"].forEach(function (h) { head.appendChild(el("th", h)); });
    table.appendChild(head);
    (data.axes || []).forEach(function (ax) {
      var ca = valueOf(a, ax[0]), cb = valueOf(b, ax[0]);
      if (SILENT.indexOf(ca.value) >= 0 && SILENT.indexOf(cb.value) >= 0) { return; }
      if (ca.value === cb.value) { agree++; return; }
      var tr = el("tr");
      tr.appendChild(el("td", ax[1] + " (" + ax[0] + ")"));
      tr.appendChild(el("td", ca.value || "(no cell)", "wrap"));
      tr.appendChild(el("td", cb.value || "(no cell)", "wrap"));
      tr.appendChild(el("td", ax[2], "wrap"));
      var ev = el("details");
      ev.appendChild(el("summary", "evidence"));
      ev.appendChild(el("p", a + ": " + ca.evidence, "wrap"));
      ev.appendChild(el("p", b + ": " + cb.evidence, "wrap"));
      var td = el("td");
      td.appendChild(ev);
      tr.appendChild(td);
      table.appendChild(tr);
      shown++;
    });
    document.getElementById("diff-count").textContent = shown === 0 ?
      a + " and " + b + ": nothing differs (" + agree + " axes agree)" :
      shown + " axes differ, " + agree + " agree";
    return shown;
  }
  function route() {
    var h = window.location.hash;
    if (h.indexOf("#case=") === 0) {
      showCase(decodeURIComponent(h.slice(6)));
      document.getElementById("case-view").scrollIntoView();
    }
  }

  function selftest() {
    var out = { rows: rows.length, cases: data.cases.length, filters: {} };
    out.cells_per_row = rows.map(function (tr) { return tr.cells.length - 1; });
    Object.keys(filters).forEach(function (name) {
      var sel = document.getElementById("filter-" + name), counts = {};
      Array.prototype.forEach.call(sel.options, function (o) {
        counts[o.value] = setFilter(name, o.value);
      });
      setFilter(name, "");
      out.filters[name] = counts;
    });
    data.cases.forEach(function (c) { showCase(c.id); });
    out.case_view_text = document.getElementById("case-view").textContent.length;
    out.headline = document.querySelectorAll("#headline li").length;
    if (document.getElementById("diff-a")) {
      var sa = document.getElementById("diff-a"), sb = document.getElementById("diff-b");
      out.diff = { pair: [sa.value, sb.value], rows: showDiff() };
      sb.value = sa.value;
      out.diff.same = showDiff();
      out.diff.same_text = document.getElementById("diff-count").textContent;
    }
    out.scripts = document.scripts.length;
    var pre = el("pre", JSON.stringify(out));
    pre.id = "selftest-result";
    document.body.appendChild(pre);
  }

  Object.keys(filters).forEach(function (name) {
    document.getElementById("filter-" + name).addEventListener("change", function (e) {
      setFilter(name, e.target.value);
    });
  });
  document.getElementById("view-params").addEventListener("change", function (e) {
    table.classList.toggle("view-params", e.target.checked);
  });
  ["diff-a", "diff-b"].forEach(function (id) {
    var sel = document.getElementById(id);
    if (sel) { sel.addEventListener("change", showDiff); }
  });
  showDiff();
  window.addEventListener("hashchange", route);
  apply();
  route();
  if (window.location.hash === "#selftest") { selftest(); }
}());
