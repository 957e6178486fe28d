/* attnsim live explorer: one front end for the served page (attnsim explore) and the notebook view (attnsim.view).
   AttnsimExplore.mount(root, boot) draws into `root`. boot.live: fetch each text's maps from the server (POST api/analyse);
   otherwise every head's maps are embedded (boot.data.all_maps, one byte a cell) and nothing is fetched. */
(function () {
  "use strict";
  var AX = (window.AttnsimExplore = window.AttnsimExplore || {});
  var DEBOUNCE_MS = 40;

  function decode(b64, kind) {
    var raw = atob(b64), bytes = new Uint8Array(raw.length);
    for (var i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
    return kind === "f4" ? new Float32Array(bytes.buffer) : bytes;
  }
  function el(tag, attrs, parent) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) { if (k === "text") e.textContent = attrs[k]; else e.setAttribute(k, attrs[k]); }
    if (parent) parent.appendChild(e);
    return e;
  }
  function fmt(v) {
    if (v === null || v === undefined) return "–";
    if (typeof v !== "number") return String(v);
    var a = Math.abs(v);
    return a !== 0 && (a < 1e-3 || a >= 1e5) ? v.toExponential(3) : v.toFixed(a < 1 ? 4 : 3);
  }
  // viridis-like ramp (5 stops) for t in [0, 1]
  var STOPS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
  function ramp(t) {
    t = Math.max(0, Math.min(1, t)) * 4;
    var i = Math.min(3, Math.floor(t)), f = t - i, a = STOPS[i], b = STOPS[i + 1];
    return [a[0] + (b[0] - a[0]) * f, a[1] + (b[1] - a[1]) * f, a[2] + (b[2] - a[2]) * f];
  }
  function checksum(values) {
    var h = 0;
    for (var i = 0; i < values.length; i++) h = (h * 31 + Math.round(values[i] * 1e6)) | 0;
    return String(h >>> 0);
  }

  AX.mount = function (root, boot) {
    var info = boot.info, L = info.layers, H = info.heads;
    var hashState = boot.live ? parseHash() : {};
    var state = {
      text: hashState.text !== undefined ? hashState.text : boot.initial.text,
      layer: clampInt(hashState.layer, L, boot.initial.layer), head: clampInt(hashState.head, H, boot.initial.head),
      off: hashState.off !== undefined ? hashState.off : (boot.initial.off || []).map(function (p) { return p[0] + "." + p[1]; }),
      mode: hashState.mode || boot.initial.mode || info.mode, stat: hashState.stat || "", hover: -1,
    };
    var context = boot.context || null, contextError = boot.context_error || "", data = null, seq = 0, shown = 0, lastInput = 0, timer = null;
    // at most one request in flight: edits made meanwhile are sent, as the newest state, when its answer arrives
    var inflight = false, pending = false, pageId = Math.random().toString(36).slice(2) + Date.now().toString(36);
    root.classList.add("attnsim-explore");
    root.innerHTML = "";
    var head = el("div", { class: "ax-head" }, root);
    el("h2", { text: "attnsim explore — " + info.model + " (" + L + " layers × " + H + " heads, " + info.kind + ")" }, head);
    var status = el("span", { class: "ax-status", "data-role": "status" }, head);
    var notice = el("div", { class: "ax-notice", "data-role": "notice" }, root);
    var box = el("textarea", { "data-role": "text", spellcheck: "false", "aria-label": "text to analyse" }, root);
    box.value = state.text;
    if (!boot.live) box.readOnly = true;
    var bar = el("div", { class: "ax-bar" }, root);
    var where = el("span", { "data-role": "where" }, bar);
    var offBtn = el("button", { "data-role": "toggle-off", text: "switch head off (x)" }, bar);
    el("label", { text: "ablation " }, bar);
    var modeSel = el("select", { "data-role": "mode" }, bar);
    ["zero", "mean"].forEach(function (m) { el("option", { value: m, text: m }, modeSel); });
    var clearBtn = el("button", { "data-role": "clear-off", text: "all heads on (c)" }, bar);
    el("label", { text: "sort / colour heads by " }, bar);
    var statSel = el("select", { "data-role": "stat" }, bar);
    var runBox = null;
    if (boot.live) {
      runBox = el("input", { "data-role": "run", placeholder: "run id for corpus context", size: "34" }, bar);
      if (context) runBox.value = context.run_id;
    }
    el("div", { class: "ax-keys", text: "keys (outside the text box): ↑/↓ layer, ←/→ head, x switch the head off/on, m zero/mean, c all heads on, Esc leaves the text box" }, root);
    var top = el("div", { class: "ax-row" }, root);
    var gridWrap = el("div", { class: "ax-panel" }, top);
    el("div", { class: "ax-cap", text: "model view: layers (rows, 0 at top) × heads (columns)" }, gridWrap);
    var grid = el("canvas", { class: "ax-grid", "data-role": "grid" }, gridWrap);
    var numWrap = el("div", { class: "ax-panel" }, top);
    el("div", { class: "ax-cap", text: "this head" }, numWrap);
    var numbers = el("table", { "data-role": "numbers" }, numWrap);
    var predWrap = el("div", { class: "ax-panel" }, top);
    var predCap = el("div", { class: "ax-cap" }, predWrap);
    var preds = el("table", { "data-role": "predictions" }, predWrap);
    var maps = el("div", { class: "ax-row" }, root);
    var panels = {};
    [["attention", "attention (rows: query, columns: key)"], ["csm", "CSM = Z Zᵀ (diagonal 0)"], ["rollout", "rollout after this layer"]].forEach(function (p) {
      var w = el("div", { class: "ax-panel" }, maps);
      el("div", { class: "ax-cap", text: p[1] }, w);
      panels[p[0]] = el("canvas", { id: "ax-" + p[0], "data-role": p[0] }, w);
    });
    var ablRow = el("div", { class: "ax-row" }, root);
    var ablPanels = {};
    [["attention", "attention with the heads off"], ["rollout", "rollout with the heads off"]].forEach(function (p) {
      var w = el("div", { class: "ax-panel" }, ablRow);
      el("div", { class: "ax-cap", text: p[1] }, w);
      ablPanels[p[0]] = el("canvas", { "data-role": "ablated-" + p[0] }, w);
    });
    var rankWrap = el("div", { class: "ax-panel" }, root);
    var rankCap = el("div", { class: "ax-cap" }, rankWrap);
    var rank = el("table", { class: "ax-rank", "data-role": "rank" }, rankWrap);
    var tip = el("div", { class: "ax-tip" }, root);
    root.__explore = { state: state, get data() { return data; }, decode: decode, timings: [], sent: 0, flying: 0, mostFlying: 0 };

    function clampInt(v, n, d) { v = parseInt(v, 10); return isNaN(v) ? d : v; }
    function parseHash() {
      var out = {}, h = (location.hash || "").replace(/^#/, "");
      if (!h) return out;
      h.split("&").forEach(function (kv) {
        var i = kv.indexOf("="); if (i < 0) return;
        var k = kv.slice(0, i), v = decodeURIComponent(kv.slice(i + 1));
        if (k === "off") out.off = v ? v.split(",") : []; else out[k] = v;
      });
      return out;
    }
    function writeHash() {
      if (!boot.live) return;
      var h = "layer=" + state.layer + "&head=" + state.head + "&mode=" + state.mode + "&off=" + state.off.join(",") +
        (state.stat ? "&stat=" + encodeURIComponent(state.stat) : "") + "&text=" + encodeURIComponent(state.text);
      history.replaceState(null, "", "#" + h);
    }
    function say(text, error) {
      status.textContent = text;
      status.className = "ax-status" + (error ? " ax-error" : "");
      root.setAttribute("data-state", error ? "error" : "ready");
    }

    // statistics to sort and colour by: this text's numbers, the corpus run's, the change with heads off
    function statOptions() {
      var names = [["", "layer order"]];
      if (data) Object.keys(data.numbers).forEach(function (n) { if (!/_chance$/.test(n)) names.push(["live:" + n, "this text: " + n]); });
      if (data && data.ablation) names.push(["change", "change of attention with the heads off"]);
      if (context) context.stats.forEach(function (n) { if (context.kinds[n] === "number") names.push(["run:" + n, "run: " + n]); });
      var current = statSel.value || state.stat;
      statSel.innerHTML = "";
      names.forEach(function (n) { el("option", { value: n[0], text: n[1] }, statSel); });
      statSel.value = names.some(function (n) { return n[0] === current; }) ? current : "";
      state.stat = statSel.value;
    }
    function statGrid(name) {
      if (!name) return null;
      if (name === "change") return data && data.ablation ? data.ablation.attention_change : null;
      if (name.indexOf("live:") === 0) return data ? data.numbers[name.slice(5)] : null;
      if (name.indexOf("run:") === 0 && context) return context.values[name.slice(4)];
      return null;
    }

    function drawGrid() {
      if (!data) return;
      var cells = data.thumbs.cells, codes = data.thumbs._codes || (data.thumbs._codes = decode(data.thumbs.codes, "u1"));
      var size = Math.max(3, Math.min(Math.floor(44 / cells), Math.floor(560 / (H * cells)))), gap = 4, tile = cells * size;
      grid.width = H * (tile + gap) + 30; grid.height = L * (tile + gap) + 4;
      var ctx = grid.getContext("2d"), values = statGrid(state.stat), lo = Infinity, hi = -Infinity;
      if (values) values.forEach(function (r) { r.forEach(function (v) { if (typeof v === "number") { lo = Math.min(lo, v); hi = Math.max(hi, v); } }); });
      ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, grid.width, grid.height);
      ctx.fillStyle = "#333"; ctx.font = "10px sans-serif";
      var img = ctx.createImageData(tile, tile), offs = {};
      state.off.forEach(function (k) { offs[k] = 1; });
      for (var l = 0; l < L; l++) {
        ctx.fillStyle = "#333"; ctx.fillText("L" + l, 2, l * (tile + gap) + tile / 2 + 4);
        for (var h = 0; h < H; h++) {
          var x = 26 + h * (tile + gap), y = l * (tile + gap) + 2, base = (l * H + h) * cells * cells;
          if (values && typeof values[l][h] === "number") {
            var c = ramp(hi > lo ? (values[l][h] - lo) / (hi - lo) : 0.5);
            ctx.fillStyle = "rgb(" + c.map(Math.round).join(",") + ")"; ctx.fillRect(x - 2, y - 2, tile + 4, tile + 4);
          }
          for (var i = 0; i < cells; i++) for (var j = 0; j < cells; j++) {
            var g = 255 - codes[base + i * cells + j];
            for (var a = 0; a < size; a++) for (var b = 0; b < size; b++) {
              var p = ((i * size + a) * tile + j * size + b) * 4;
              img.data[p] = g; img.data[p + 1] = g; img.data[p + 2] = g; img.data[p + 3] = 255;
            }
          }
          ctx.putImageData(img, x, y);
          if (offs[l + "." + h]) { ctx.strokeStyle = "#b00020"; ctx.lineWidth = 2; ctx.beginPath(); ctx.moveTo(x, y); ctx.lineTo(x + tile, y + tile); ctx.moveTo(x + tile, y); ctx.lineTo(x, y + tile); ctx.stroke(); }
          if (l === state.layer && h === state.head) { ctx.strokeStyle = "#e0a000"; ctx.lineWidth = 3; ctx.strokeRect(x - 1, y - 1, tile + 2, tile + 2); }
        }
      }
      grid._geo = { tile: tile, gap: gap };
      drawRank(values);
    }
    function drawRank(values) {
      rank.innerHTML = "";
      if (!values) { rankCap.textContent = "pick a statistic to rank the heads"; return; }
      rankCap.textContent = "heads by " + statSel.options[statSel.selectedIndex].text;
      var list = [];
      for (var l = 0; l < L; l++) for (var h = 0; h < H; h++) if (typeof values[l][h] === "number") list.push([values[l][h], l, h]);
      list.sort(function (a, b) { return b[0] - a[0]; });
      list.slice(0, 12).forEach(function (e) {
        var tr = el("tr", {}, rank);
        if (e[1] === state.layer && e[2] === state.head) tr.className = "ax-chosen";
        el("td", { text: "L" + e[1] + " H" + e[2] }, tr); el("td", { text: fmt(e[0]) }, tr);
        tr.onclick = function () { choose(e[1], e[2]); };
      });
    }
    grid.addEventListener("click", function (ev) {
      if (!grid._geo) return;
      var r = grid.getBoundingClientRect(), g = grid._geo, x = ev.clientX - r.left - 26, y = ev.clientY - r.top - 2;
      var h = Math.floor(x / (g.tile + g.gap)), l = Math.floor(y / (g.tile + g.gap));
      if (l >= 0 && l < L && h >= 0 && h < H) choose(l, h);
    });
    grid.addEventListener("mousemove", function (ev) {
      if (!grid._geo) return;
      var r = grid.getBoundingClientRect(), g = grid._geo, h = Math.floor((ev.clientX - r.left - 26) / (g.tile + g.gap)), l = Math.floor((ev.clientY - r.top - 2) / (g.tile + g.gap));
      if (l < 0 || l >= L || h < 0 || h >= H) { tip.style.display = "none"; return; }
      var values = statGrid(state.stat), line = "layer " + l + ", head " + h;
      if (values) line += "\n" + statSel.options[statSel.selectedIndex].text + ": " + fmt(values[l][h]);
      showTip(ev, line);
    });
    grid.addEventListener("mouseleave", function () { tip.style.display = "none"; });

    function showTip(ev, text) { tip.textContent = text; tip.style.display = "block"; tip.style.left = ev.clientX + 12 + "px"; tip.style.top = ev.clientY + 12 + "px"; }

    function drawMap(canvas, values, tokens, kind) {
      var T = tokens.length, cell = Math.max(2, Math.min(18, Math.floor(340 / T))), pad = 70, n = T * cell;
      canvas.width = n + pad; canvas.height = n + pad;
      var ctx = canvas.getContext("2d"), lo = Infinity, hi = -Infinity;
      for (var i = 0; i < values.length; i++) { if (isFinite(values[i])) { lo = Math.min(lo, values[i]); hi = Math.max(hi, values[i]); } }
      ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, canvas.width, canvas.height);
      var img = ctx.createImageData(n, n);
      for (var r = 0; r < T; r++) for (var c = 0; c < T; c++) {
        var v = values[r * T + c], col = ramp(hi > lo ? (v - lo) / (hi - lo) : 0);
        for (var a = 0; a < cell; a++) for (var b = 0; b < cell; b++) {
          var p = ((r * cell + a) * n + c * cell + b) * 4;
          img.data[p] = col[0]; img.data[p + 1] = col[1]; img.data[p + 2] = col[2]; img.data[p + 3] = 255;
        }
      }
      ctx.putImageData(img, pad, pad);
      var every = Math.max(1, Math.ceil(11 / cell));
      ctx.fillStyle = "#222"; ctx.font = Math.min(11, Math.max(8, cell)) + "px sans-serif"; ctx.textBaseline = "middle";
      for (var t = 0; t < T; t += every) {
        var label = tokens[t].length > 10 ? tokens[t].slice(0, 9) + "…" : tokens[t];
        ctx.textAlign = "right"; ctx.fillText(label, pad - 3, pad + t * cell + cell / 2);
        ctx.save(); ctx.translate(pad + t * cell + cell / 2, pad - 3); ctx.rotate(-Math.PI / 2); ctx.textAlign = "left"; ctx.fillText(label, 0, 0); ctx.restore();
      }
      if (state.hover >= 0 && state.hover < T) { ctx.strokeStyle = "#e0a000"; ctx.strokeRect(pad, pad + state.hover * cell, n, cell); }
      canvas._map = { values: values, tokens: tokens, cell: cell, pad: pad, kind: kind };
      canvas.setAttribute("data-checksum", checksum(values));
      canvas.setAttribute("data-range", fmt(lo) + " … " + fmt(hi));
    }
    function hoverMap(canvas) {
      canvas.addEventListener("mousemove", function (ev) {
        var m = canvas._map; if (!m) return;
        var r = canvas.getBoundingClientRect(), T = m.tokens.length;
        var col = Math.floor((ev.clientX - r.left - m.pad) / m.cell), row = Math.floor((ev.clientY - r.top - m.pad) / m.cell);
        if (row < 0 || col < 0 || row >= T || col >= T) { tip.style.display = "none"; return; }
        showTip(ev, m.kind + ": " + m.tokens[row] + " [" + row + "] → " + m.tokens[col] + " [" + col + "]\n" + fmt(m.values[row * T + col]));
        if (state.hover !== row) { state.hover = row; drawPredictions(); }
      });
      canvas.addEventListener("mouseleave", function () { tip.style.display = "none"; });
    }
    Object.keys(panels).forEach(function (k) { hoverMap(panels[k]); });
    Object.keys(ablPanels).forEach(function (k) { hoverMap(ablPanels[k]); });

    function drawNumbers() {
      numbers.innerHTML = "";
      var l = state.layer, h = state.head, n = data.numbers;
      var tr = el("tr", {}, numbers); el("th", { text: "layer " + l + ", head " + h + (state.off.indexOf(l + "." + h) >= 0 ? " (off)" : "") }, tr); el("th", { text: "this text" }, tr); el("th", { text: "chance" }, tr);
      [["attention_entropy", "entropy (nats)"], ["attention_cls", "first-token mass"], ["local_mass", "share within 4 tokens"], ["prev_token_score", "previous-token score"], ["induction_score", "induction score"]].forEach(function (s) {
        var r = el("tr", {}, numbers); el("td", { text: s[1] }, r);
        el("td", { text: n[s[0]][l][h] === null && s[0] === "induction_score" ? "– (no repeat)" : fmt(n[s[0]][l][h]) }, r);
        el("td", { text: s[0] === "attention_cls" ? "" : fmt((n[s[0] + "_chance"] || [])[l] ? n[s[0] + "_chance"][l][h] : null) }, r);
      });
      if (context) {
        var c = el("tr", {}, numbers); el("th", { text: "run " + (context.name || context.run_id) }, c); el("th", { text: "corpus" }, c);
        el("th", { text: "chance" }, c);
        var shown = 0;
        context.stats.forEach(function (name) {
          var v = context.values[name][l][h], chance = context.values[name + "_chance"];
          if (v === null || v === undefined || /_chance$/.test(name) || shown >= 8) return;
          shown++;
          var r2 = el("tr", {}, numbers); el("td", { text: name }, r2); el("td", { text: fmt(v) }, r2);
          el("td", { text: chance ? fmt(chance[l][h]) : "" }, r2);
        });
      }
    }
    function drawPredictions() {
      preds.innerHTML = ""; predCap.textContent = "";
      if (!data) return;
      var abl = data.ablation;
      if (data.classes) {
        predCap.textContent = "class probabilities" + (abl ? " (heads off beside clean)" : "");
        var names = info.classes || [];
        data.classes.p.forEach(function (p, i) {
          var r = el("tr", {}, preds); el("td", { text: names[i] || String(i) }, r); el("td", { text: fmt(p) }, r);
          if (abl && abl.classes) el("td", { class: "ax-off", text: fmt(abl.classes.p[i]) }, r);
        });
        return;
      }
      if (!data.predictions) {
        if (abl) predCap.textContent = "no next-token head: the change shows in the later layers' maps (colour: change)";
        return;
      }
      var T = data.tokens.length, pos = state.hover >= 0 && state.hover < T ? state.hover : T - 1, P = data.predictions;
      predCap.textContent = "top-5 next tokens after \"" + data.tokens[pos] + "\" [" + pos + "]" + (state.hover < 0 ? " (hover a row to move)" : "");
      var hdr = el("tr", {}, preds); el("th", { text: "clean" }, hdr); el("th", { text: "p" }, hdr);
      if (abl && abl.predictions) { el("th", { text: "heads off" }, hdr); el("th", { text: "p off" }, hdr); el("th", { text: "p clean" }, hdr); }
      for (var k = 0; k < P.tokens[pos].length; k++) {
        var r = el("tr", {}, preds); el("td", { text: P.tokens[pos][k] }, r); el("td", { text: fmt(P.p[pos][k]) }, r);
        if (abl && abl.predictions) { el("td", { class: "ax-off", text: abl.predictions.tokens[pos][k] }, r); el("td", { class: "ax-off", text: fmt(abl.predictions.p[pos][k]) }, r); el("td", { text: fmt(abl.predictions.clean[pos][k]) }, r); }
      }
    }

    function draw() {
      if (!data) return;
      where.textContent = "layer " + state.layer + ", head " + state.head + "  ·  off: " + (state.off.length ? state.off.map(function (k) { return "L" + k.replace(".", " H"); }).join(", ") : "none");
      root.setAttribute("data-layer", state.layer); root.setAttribute("data-head", state.head);
      modeSel.value = state.mode;
      statOptions();
      drawGrid();
      var m = data._maps || (data._maps = {});
      Object.keys(panels).forEach(function (k) { m[k] = m[k] || decode(data.maps[k], "f4"); drawMap(panels[k], m[k], data.tokens, k); });
      ablRow.style.display = data.ablation ? "" : "none";
      if (data.ablation) {
        var am = data.ablation._maps || (data.ablation._maps = {});
        Object.keys(ablPanels).forEach(function (k) { am[k] = am[k] || decode(data.ablation.maps[k], "f4"); drawMap(ablPanels[k], am[k], data.tokens, k + " (heads off)"); });
      }
      drawNumbers(); drawPredictions();
      notice.textContent = (contextError ? contextError + " " : "") + cutNotice(data);
      writeHash();
    }

    // the text cut: after max_tokens tokens, and (a long paste) after max_chars characters, which are all it tokenises
    function cutNotice(d) {
      var read = d.chars - d.chars_cut, unread = boot.live ? Math.max(d.chars_cut, state.text.length - read) : d.chars_cut;
      if ((d.cut_at === null || d.cut_at === undefined) && unread <= 0) return "";
      var says = d.cut_at !== null && d.cut_at !== undefined ? "The text is cut at token " + d.cut_at + ": the model reads at most " + d.max_tokens + " tokens with its special tokens" : "The text is cut";
      return says + (unread > 0 ? "; only its first " + read + " characters were read (" + unread + " more characters left out)." : ", and its last " + d.cut + " tokens were left out.");
    }

    // notebook view: one head's maps from the embedded bytes (scaled within each map: exact to 1/255 of its range)
    function localData(req) {
      var base = boot.data, all = base.all_maps, T = base.tokens.length;
      if (req.text !== boot.initial.text) throw new Error("This inline view holds one text; run attnsim explore (or attnsim.view with another text) to analyse another.");
      var sameOff = req.keys.slice().sort().join(",") === (boot.initial.off || []).map(function (p) { return p[0] + "." + p[1]; }).sort().join(",");
      var out = Object.assign({}, base, { layer: req.layer, head: req.head, maps: {}, _maps: {} });
      if (!sameOff || req.mode !== (boot.initial.mode || info.mode)) {
        delete out.ablation;
        if (req.keys.length) throw new Error("Switching other heads off needs the live server (attnsim explore); this view shows the heads off given to attnsim.view(off=...).");
      } else if (base.ablation && (req.layer !== base.layer || req.head !== base.head)) {
        out.ablation = Object.assign({}, base.ablation); delete out.ablation.maps; out.ablation._maps = {};
      }
      [["attention", (req.layer * H + req.head)], ["csm", (req.layer * H + req.head)], ["rollout", req.layer]].forEach(function (p) {
        if (req.layer === base.layer && req.head === base.head) { out._maps[p[0]] = base._exact[p[0]]; return; }
        var src = all[p[0]], codes = src._codes || (src._codes = decode(src.codes, "u1")), lo = src.low[p[1]], hi = src.high[p[1]], vals = new Float32Array(T * T);
        for (var i = 0; i < T * T; i++) vals[i] = lo + (hi - lo) * codes[p[1] * T * T + i] / 255;
        out._maps[p[0]] = vals;
      });
      if (out.ablation && !out.ablation.maps) { out.ablation = null; }
      return out;
    }

    // at most the characters the server tokenises (a 50 MB paste is not sent), never half of a surrogate pair
    function sendable(text) {
      var n = info.max_chars;
      if (!boot.live || !n || text.length <= n) return text;
      var code = text.charCodeAt(n - 1);
      return text.slice(0, code >= 0xd800 && code <= 0xdbff ? n - 1 : n);
    }

    function request() {
      if (boot.live && inflight) { pending = true; root.setAttribute("data-state", "busy"); return; }
      var mine = ++seq, body = { text: sendable(state.text), layer: state.layer, head: state.head, off: state.off.map(function (k) { return k.split(".").map(Number); }), mode: state.mode, page: pageId, seq: mine };
      var keys = state.off.slice();
      var started = performance.now();
      root.setAttribute("data-state", "busy");
      if (!boot.live) {
        try { data = localData(Object.assign({ keys: keys }, body)); shown = mine; draw(); say("layer " + state.layer + ", head " + state.head + " (embedded view)"); }
        catch (e) { say(e.message, true); }
        return;
      }
      var ex = root.__explore; inflight = true; ex.sent++; ex.flying++; ex.mostFlying = Math.max(ex.mostFlying, ex.flying);
      fetch(boot.api + "api/analyse", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) })
        .then(function (r) { return r.json().then(function (j) { return { ok: r.ok, status: r.status, json: j }; }); })
        .then(function (res) {
          if (pending || mine < seq || res.json.superseded) return; // a newer state waits to be sent: its answer is the one to draw
          if (!res.ok) { say(res.json.error || ("The server refused the request (HTTP " + res.status + ")."), true); return; }
          var received = performance.now();
          data = res.json; shown = mine; draw();
          var drawn = performance.now();
          var t = { server_ms: data.timing.server_ms, fetch_ms: received - started, draw_ms: drawn - received, typing_to_drawn_ms: lastInput ? drawn - lastInput : null };
          root.__explore.timings.push(t);
          root.setAttribute("data-seq", String(mine));
          say(data.n_tokens + " tokens · server " + t.server_ms.toFixed(0) + " ms · fetched " + t.fetch_ms.toFixed(0) + " ms · drawn " + t.draw_ms.toFixed(0) + " ms");
        })
        .catch(function (e) { if (mine === seq && !pending) say("The explorer server does not answer (" + e.message + "); is attnsim explore still running?", true); })
        .then(function () {
          inflight = false; ex.flying--;
          if (pending) { pending = false; request(); }
        });
    }
    function choose(l, h) {
      state.layer = (l + L) % L; state.head = (h + H) % H; state.hover = -1;
      request();
    }
    function toggleOff() {
      var k = state.layer + "." + state.head, i = state.off.indexOf(k);
      if (i >= 0) state.off.splice(i, 1); else state.off.push(k);
      request();
    }
    box.addEventListener("input", function () {
      lastInput = performance.now(); state.text = box.value;
      clearTimeout(timer); timer = setTimeout(request, DEBOUNCE_MS);
    });
    offBtn.onclick = toggleOff;
    clearBtn.onclick = function () { state.off = []; request(); };
    modeSel.onchange = function () { state.mode = modeSel.value; request(); };
    statSel.onchange = function () { state.stat = statSel.value; draw(); };
    if (runBox) runBox.addEventListener("change", function () {
      var id = runBox.value.trim();
      fetch(boot.api + "api/context?run=" + encodeURIComponent(id)).then(function (r) { return r.json().then(function (j) { return { ok: r.ok, json: j }; }); }).then(function (res) {
        if (!res.ok) { contextError = res.json.error; notice.textContent = contextError; say(res.json.error, true); return; }
        context = res.json.context; contextError = ""; if (data) draw(); say(context ? "corpus context: run " + context.name : "corpus context off");
      });
    });
    (boot.live ? document : root).addEventListener("keydown", function (ev) {
      if (ev.target === box || ev.target === runBox) { if (ev.key === "Escape") box.blur(); return; }
      if (ev.target && ev.target.tagName === "SELECT") return;
      var k = ev.key;
      if (k === "ArrowUp") choose(state.layer - 1, state.head);
      else if (k === "ArrowDown") choose(state.layer + 1, state.head);
      else if (k === "ArrowLeft") choose(state.layer, state.head - 1);
      else if (k === "ArrowRight") choose(state.layer, state.head + 1);
      else if (k === "x") toggleOff();
      else if (k === "m") { state.mode = state.mode === "zero" ? "mean" : "zero"; request(); }
      else if (k === "c") { state.off = []; request(); }
      else return;
      ev.preventDefault();
    });
    if (!boot.live) { root.tabIndex = 0; boot.data._exact = {}; ["attention", "csm", "rollout"].forEach(function (k) { boot.data._exact[k] = decode(boot.data.maps[k], "f4"); }); }
    if (boot.error) say(boot.error, true);
    if (boot.data && !boot.live) { data = localData({ text: state.text, layer: state.layer, head: state.head, keys: state.off.slice(), mode: state.mode }); if (boot.data.ablation) data.ablation = boot.data.ablation; draw(); say("layer " + state.layer + ", head " + state.head + " (embedded view)"); }
    else if (state.text.trim()) request();
    else say("Type a text to see every head.");
    if (contextError) notice.textContent = contextError;
  };
})();
