"""A self-contained HTML explorer of a run's example windows: CSM and attention side by side.

One file (``explorer.html`` among the run's artifacts) holds its data, script
and style inline: it opens from disk or in the MLflow UI's artifact view (a
sandboxed frame that allows scripts) with no network access. The researcher
picks an example window, a layer and a head; the CSM (left) and the attention
probabilities (right, rows: query, columns: key) are drawn as heatmaps with the
tokens along both axes, and hovering a cell shows its two tokens and value. A
run that captured no attention (``csm``) shows the CSM panel alone.

Examples are named ``<doc id> #<k>``, k being the window's index within its
document from 0 (:attr:`attnsim.findings.examples.Examples.labels`), so two
windows of one article are told apart.

Size: each matrix is pooled to at most ``max_tokens`` cells per axis (the
rule of :mod:`attnsim.plots.common`: average over blocks of ``ceil(T /
max_tokens)`` tokens; a pooled cell's label names its first and last token;
windows above 512 tokens on the blockwise path arrive already pooled by that
rule, :attr:`attnsim.findings.examples.Examples.blocks`)
and quantised to one byte per cell, scaled within its panel (254 levels
between the panel's minimum and maximum, which are stored to 4 significant
digits; 255 marks an undefined cell). Hover values are decoded from those
bytes, so they are exact to 1/254 of the panel's range.

Axis labels: one per cell, the token (cut to 12 characters), or for a pooled
cell its first and last tokens, ``first…last`` (``first…`` when that is longer;
:func:`axis_labels`); drawn on both axes and thinned to every k-th cell when
cells are narrower than a line of text.

The URL follows the view: ``explorer.html#example=0&layer=1&head=2`` opens that
view (a query string ``?example=0&...`` works too; the hash wins), and every
change of example, layer or head rewrites the hash (``history.replaceState``:
no new history entry per step), so the address can be copied or bookmarked. In
MLflow's artifact view the page sits in a frame whose address is not shown; open
the artifact in its own tab to use it. After each drawing the page records what
it drew in ``data-*`` attributes (selection, and an FNV-1a checksum of each
canvas's pixels), which the end-to-end browser test reads.
"""

from __future__ import annotations

import base64
import html
import json
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from attnsim.plots.common import pool_matrix

_LEVELS = 254  # quantisation levels 0..253; 255: undefined


def _quantise(panel: np.ndarray) -> tuple:
    """(n, n) float -> (uint8 bytes, [min, max]) scaled within the panel."""
    finite = panel[np.isfinite(panel)]
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)
    span = high - low
    scaled = np.zeros_like(panel) if span == 0 else (panel - low) / span
    codes = np.where(np.isfinite(panel), np.clip(np.rint(scaled * (_LEVELS - 1)), 0, _LEVELS - 1), 255).astype(np.uint8)
    return codes.tobytes(), [float(f"{low:.4g}"), float(f"{high:.4g}")]


def _cell_labels(tokens: Sequence[str], block: int) -> List[str]:
    """Label of each pooled cell: the token, or 'first … last [a-b]' for a block of several."""
    labels = []
    for start in range(0, len(tokens), block):
        part = tokens[start : start + block]
        labels.append(f"{part[0]} [{start}]" if len(part) == 1 else f"{part[0]} … {part[-1]} [{start}-{start + len(part) - 1}]")
    return labels


def axis_labels(tokens: Sequence[str], block: int, chars: int = 12) -> List[str]:
    """Axis label of each pooled cell, at most ``chars`` characters: the token; for a block of several
    tokens ``first…last``, or ``first…`` when both do not fit. A cut token ends in "…"."""
    labels = []
    for start in range(0, len(tokens), block):
        first, last = str(tokens[start]), str(tokens[min(start + block, len(tokens)) - 1])
        if min(start + block, len(tokens)) - start == 1:
            labels.append(first if len(first) <= chars else first[: chars - 1] + "…")
        else:
            joined = f"{first}…{last}"
            labels.append(joined if len(joined) <= chars else first[: chars - 1] + "…")
    return labels


def _lut(name: str) -> str:
    """256 RGB triples of a matplotlib colour map, base64."""
    from matplotlib import colormaps

    rgb = (colormaps[name](np.linspace(0, 1, 256))[:, :3] * 255).round().astype(np.uint8)
    return base64.b64encode(rgb.tobytes()).decode()


def explorer_data(
    csm: Optional[np.ndarray],
    attention: Optional[np.ndarray],
    tokens: List[List[str]],
    lengths: Sequence[int],
    doc_ids: Sequence[str],
    max_tokens: int,
    names: Optional[Sequence[str]] = None,
    blocks: Optional[Sequence[int]] = None,
) -> Dict[str, Any]:
    """The explorer's embedded data.

    Args:
        csm: (layer, example, head, T, T) Context Similarity Matrices, or None.
        attention: (layer, example, head, T, T) attention probabilities, or None.
        tokens: per example, T token labels.
        lengths: per example, the number of leading real positions drawn.
        doc_ids: per example, its document id.
        max_tokens: most cells per axis after pooling.
        names: per example, its name in the page (``<doc id> #<k>``); default the document id.
        blocks: None: ``csm`` and ``attention`` are the T x T maps, pooled here; else, per example, the
            tokens per cell its maps are already pooled over (example e's leading ``ceil(lengths[e] /
            blocks[e])`` cells are read; :attr:`attnsim.findings.examples.Examples.blocks`).

    Returns:
        A JSON-ready dict: layer and head counts, colour tables, and per example its ``doc``,
        ``name``, ``length``, ``cells``, ``block``, hover ``labels`` (one per cell, with positions),
        ``axis`` labels (one per cell, :func:`axis_labels`), and per kind captured (``csm``,
        ``attention``) the base64 codes and ranges; a kind not captured is absent.

    Raises:
        ValueError: neither ``csm`` nor ``attention`` is given.
    """
    source = csm if csm is not None else attention
    if source is None:
        raise ValueError("the explorer needs CSM or attention matrices")
    n_layers, n_examples, n_heads = source.shape[:3]
    examples = []
    for e in range(n_examples):
        length = int(lengths[e])
        entry: Dict[str, Any] = {"doc": str(doc_ids[e]), "name": str(names[e] if names is not None else doc_ids[e]), "length": length}
        for kind, values in (("csm", csm), ("attention", attention)):
            if values is None:
                continue
            if blocks is None:
                panels = np.asarray(values[:, e, :, :length, :length], dtype=np.float64)  # (L, H, n, n)
                pooled, block = pool_matrix(panels, max_tokens)
            else:  # recorded pooled (long windows on the blockwise path)
                block = int(blocks[e])
                cells = -(-length // block)
                pooled = np.asarray(values[:, e, :, :cells, :cells], dtype=np.float64)
            chunks, ranges = [], []
            for layer in range(n_layers):
                row = []
                for head in range(n_heads):
                    code, span = _quantise(pooled[layer, head])
                    chunks.append(code)
                    row.append(span)
                ranges.append(row)
            entry[kind] = {"codes": base64.b64encode(b"".join(chunks)).decode(), "ranges": ranges}
            entry["cells"] = int(pooled.shape[-1])
            entry["block"] = int(block)
        entry["labels"] = _cell_labels(list(tokens[e][:length]), entry["block"])
        entry["axis"] = axis_labels(list(tokens[e][:length]), entry["block"])
        examples.append(entry)
    return {"layers": int(n_layers), "heads": int(n_heads), "examples": examples, "lut": {"csm": _lut("magma"), "attention": _lut("viridis")}}


_STYLE = """
body{font:13px system-ui,sans-serif;margin:12px;color:#222}
header{display:flex;gap:14px;align-items:center;flex-wrap:wrap}
select{font:inherit}
.panels{display:flex;gap:12px;flex-wrap:wrap;margin-top:10px}
figure{margin:0}
figcaption{font-weight:600;margin-bottom:4px}
canvas{border:1px solid #999;image-rendering:pixelated;cursor:crosshair;display:block}
.plot{display:grid;grid-template-columns:auto auto;align-items:start}
.ylab,.xlab{position:relative;font:11px ui-monospace,monospace;color:#333}
.ylab span{position:absolute;right:4px;white-space:nowrap;transform:translateY(-50%)}
.xlab span{position:absolute;top:4px;white-space:nowrap;writing-mode:vertical-rl;transform:translateX(-50%) rotate(180deg)}
#hover{margin-top:8px;min-height:1.4em;font-family:ui-monospace,monospace;white-space:pre}
.note{color:#666;font-size:12px}
.notice{margin-top:8px;padding:4px 8px;background:#fff3cd;border:1px solid #e0c060}
"""

_SCRIPT = r"""
(function(){
const D = JSON.parse(document.getElementById('explorer-data').textContent);
const LINE = 14;  // a label needs a line of text: thinner cells label every k-th
// canvas side (pixels): up to 512, less where the panels would not stand side by side (MLflow's artifact pane is
// about 1,000 px wide; each panel also holds its row labels)
function side(){return Math.max(160, Math.min(512, Math.floor(((window.innerWidth||1024) - 60) / Math.max(1, KINDS.length) - 110)));}
const KINDS = ['csm','attention'].filter(function(k){return document.getElementById(k);});
function bytes(b64){const s=atob(b64);const a=new Uint8Array(s.length);for(let i=0;i<s.length;i++)a[i]=s.charCodeAt(i);return a;}
const LUT = {csm: bytes(D.lut.csm), attention: bytes(D.lut.attention)};
const cache = {};
function codes(e, kind){const k=e+':'+kind;if(!(k in cache))cache[k]=bytes(D.examples[e][kind].codes);return cache[k];}
function parse(text, out){text.split('&').forEach(function(p){const kv=p.split('=');if(kv.length===2&&kv[0]&&/^\d+$/.test(kv[1]))out[kv[0]]=parseInt(kv[1],10);});return out;}
// the view named by the URL: query string first, then the hash, which wins
function params(){return parse((location.hash||'').replace(/^#/,''), parse((location.search||'').replace(/^\?/,''), {}));}
const state = {example:0, layer:0, head:0};
const LIMIT = {example: D.examples.length, layer: D.layers, head: D.heads};
const sel = {example: document.getElementById('example'), layer: document.getElementById('layer'), head: document.getElementById('head')};
function fill(select, n, name){for(let i=0;i<n;i++){const o=document.createElement('option');o.value=i;o.textContent=name(i);select.appendChild(o);}}
fill(sel.example, D.examples.length, function(i){return i+': '+D.examples[i].name;});
fill(sel.layer, D.layers, function(i){return 'layer '+i;});
fill(sel.head, D.heads, function(i){return 'head '+i;});
function fnv(data){let h=0x811c9dc5;for(let i=0;i<data.length;i++){h^=data[i];h=Math.imul(h,0x01000193)>>>0;}return h.toString(16);}
function axes(kind, ex, cell){
  // token labels along the rows (left) and the columns (below), every step-th cell
  const step = Math.max(1, Math.ceil(LINE / cell)), n = ex.cells, side = n*cell;
  const widest = Math.min(12, Math.max.apply(null, ex.axis.map(function(t){return t.length;}).concat([1])));
  [['ylab', 'top', 'width'], ['xlab', 'left', 'height']].forEach(function(a){
    const box = document.getElementById(kind+'-'+a[0]);
    box.textContent = '';
    box.style[a[2]] = (widest*7+10)+'px';
    box.style[a[2]==='width'?'height':'width'] = side+'px';
    for(let i=0;i<n;i+=step){const t=document.createElement('span');t.textContent=ex.axis[i];t.style[a[1]]=((i+0.5)*cell)+'px';t.dataset.cell=i;box.appendChild(t);}
  });
}
function draw(kind){
  const canvas = document.getElementById(kind);
  if(!canvas) return;
  const ex = D.examples[state.example];
  const n = ex.cells, cell = Math.max(1, Math.floor(side() / n));
  canvas.width = n*cell; canvas.height = n*cell;
  const ctx = canvas.getContext('2d');
  const img = ctx.createImageData(n*cell, n*cell);
  const all = codes(state.example, kind), lut = LUT[kind];
  const base = (state.layer*D.heads + state.head)*n*n;
  for(let i=0;i<n;i++){for(let j=0;j<n;j++){
    const c = all[base+i*n+j];
    const r = c===255?255:lut[3*c], g = c===255?255:lut[3*c+1], b = c===255?255:lut[3*c+2];
    for(let y=0;y<cell;y++){let p=((i*cell+y)*n*cell+j*cell)*4;for(let x=0;x<cell;x++){img.data[p]=r;img.data[p+1]=g;img.data[p+2]=b;img.data[p+3]=255;p+=4;}}
  }}
  ctx.putImageData(img, 0, 0);
  canvas.dataset.checksum = fnv(ctx.getImageData(0,0,canvas.width,canvas.height).data);
  canvas.dataset.cell = cell;
  axes(kind, ex, cell);
  const range = ex[kind].ranges[state.layer][state.head];
  document.getElementById(kind+'-range').textContent = 'panel range '+range[0]+' … '+range[1];
}
function value(kind, i, j){
  const ex = D.examples[state.example], n = ex.cells;
  const c = codes(state.example, kind)[(state.layer*D.heads + state.head)*n*n + i*n + j];
  if(c===255) return 'undefined';
  const r = ex[kind].ranges[state.layer][state.head];
  return (r[0] + (r[1]-r[0])*c/253).toPrecision(4);
}
function writeHash(){
  // the address follows the view, without a history entry per step
  const hash = '#example='+state.example+'&layer='+state.layer+'&head='+state.head;
  if(location.hash !== hash){
    try { history.replaceState(history.state, '', hash); }
    catch(err) { try { location.replace(hash); } catch(err2) {} }  // e.g. a sandboxed frame
  }
  document.body.dataset.hash = location.hash;
}
function render(){
  sel.example.value = state.example; sel.layer.value = state.layer; sel.head.value = state.head;
  KINDS.forEach(draw);
  const ex = D.examples[state.example];
  document.getElementById('status').textContent = 'example '+state.example+' ('+ex.name+'), layer '+state.layer+', head '+state.head+(ex.block>1?'; cells pooled over '+ex.block+' tokens':'');
  document.body.dataset.example = state.example; document.body.dataset.layer = state.layer; document.body.dataset.head = state.head;
  writeHash();
}
function hover(kind){
  const canvas = document.getElementById(kind);
  canvas.addEventListener('mousemove', function(ev){
    const cell = parseInt(canvas.dataset.cell,10), ex = D.examples[state.example];
    const rect = canvas.getBoundingClientRect();
    const j = Math.floor((ev.clientX-rect.left)/cell), i = Math.floor((ev.clientY-rect.top)/cell);
    if(i<0||j<0||i>=ex.cells||j>=ex.cells) return;
    let text = (kind==='attention'?'query ':'row ')+ex.labels[i]+'  ->  '+(kind==='attention'?'key ':'column ')+ex.labels[j]+'\n';
    KINDS.forEach(function(k){text += k.toUpperCase()+' = '+value(k,i,j)+'   ';});
    document.getElementById('hover').textContent = text;
  });
}
function adopt(q){
  // a link to a view this page does not hold (#layer=99) says so, and shows the nearest view it holds
  const wrong = [];
  ['example','layer','head'].forEach(function(k){
    if(!(k in q)) return;
    if(q[k]>=0&&q[k]<LIMIT[k]) state[k]=q[k];
    else wrong.push(k+' '+q[k]+' (this page has '+k+'s 0-'+(LIMIT[k]-1)+')');
  });
  const notice = document.getElementById('notice');
  notice.textContent = wrong.length ? 'The link asks for '+wrong.join(', ')+': showing '+['example','layer','head'].map(function(k){return k+' '+state[k];}).join(', ')+' instead.' : '';
  notice.hidden = !wrong.length;
}
['example','layer','head'].forEach(function(k){sel[k].addEventListener('change', function(){state[k]=parseInt(sel[k].value,10);render();});});
document.addEventListener('keydown', function(ev){
  if(ev.key.indexOf('Arrow')!==0) return;
  // one step per key press: a focused menu would also move its own value (two steps)
  if(ev.target&&ev.target.tagName==='SELECT') ev.preventDefault();
  if(ev.key==='ArrowRight'){state.head=(state.head+1)%D.heads;render();}
  else if(ev.key==='ArrowLeft'){state.head=(state.head+D.heads-1)%D.heads;render();}
  else if(ev.key==='ArrowDown'){state.layer=(state.layer+1)%D.layers;render();}
  else if(ev.key==='ArrowUp'){state.layer=(state.layer+D.layers-1)%D.layers;render();}
});
adopt(params());
KINDS.forEach(hover);
window.addEventListener('hashchange', function(){adopt(params());render();});
window.addEventListener('resize', function(){KINDS.forEach(draw);});
render();
})();
"""


def _panel(kind: str, caption: str) -> str:
    """One heatmap: caption, row labels left of the canvas, column labels below it, value range."""
    return (
        f'<figure><figcaption>{caption}</figcaption><div class="plot"><div class="ylab" id="{kind}-ylab"></div>'
        f'<canvas id="{kind}" width="1" height="1"></canvas><div></div><div class="xlab" id="{kind}-xlab"></div></div>'
        f'<div class="note" id="{kind}-range"></div></figure>'
    )


def explorer_html(data: Dict[str, Any], title: str) -> str:
    """The complete HTML page for :func:`explorer_data`'s ``data`` (inline data, script and style): a panel
    for each kind the examples carry (CSM, attention), none for a kind not captured."""
    first = data["examples"][0] if data["examples"] else {}
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")  # keep the JSON inside its script element
    panels = (_panel("csm", "CSM (Z Zᵀ, diagonal 0; rows and columns: tokens)") if "csm" in first else "") + (
        _panel("attention", "Attention probabilities (rows: query, columns: key)") if "attention" in first else ""
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title><style>{_STYLE}</style></head>
<body>
<h3>{html.escape(title)}</h3>
<header>
<label>example <select id="example"></select></label>
<label>layer <select id="layer"></select></label>
<label>head <select id="head"></select></label>
<span class="note">layers and heads 0-indexed; arrow keys step head (left/right) and layer (up/down); each panel coloured within its own range</span>
</header>
<div id="notice" class="notice" hidden></div>
<div id="status"></div>
<div class="panels">{panels}</div>
<div id="hover"></div>
<script type="application/json" id="explorer-data">{payload}</script>
<script>{_SCRIPT}</script>
</body></html>
"""


def explorer_from_examples(examples, max_tokens: int, title: str) -> Optional[str]:  # noqa: ANN001 - findings.examples.Examples
    """The explorer page of a run's recorded examples, or None when there is nothing to show."""
    if examples is None or len(examples) == 0 or (examples.csm is None and examples.attention is None):
        return None
    lengths = []
    for e in range(len(examples)):
        valid = examples.valid[e].numpy()
        lengths.append(int(valid.nonzero()[0].max()) + 1 if valid.any() else 0)
    blocks = list(getattr(examples, "blocks", None) or []) or None  # maps recorded pooled: read as they are
    csm = (examples.csm.double() if blocks else examples.csm.float()).numpy() if examples.csm is not None else None
    attention = (examples.attention.double() if blocks else examples.attention.float()).numpy() if examples.attention is not None else None
    data = explorer_data(csm, attention, examples.tokens, lengths, examples.doc_ids, max_tokens, [examples.label(e) for e in range(len(examples))], blocks)
    return explorer_html(data, title)


__all__ = ["explorer_data", "explorer_html", "explorer_from_examples"]
