"""The explorer's result as one self-contained interactive page: `write_html(rows, path)`.

The page works offline and needs no server: the rows are embedded as JSON, the plots are SVG drawn
by a few lines of plain JavaScript (no library, no network). It shows the Pareto frontier (tokens/s
per user against tokens/s per GPU, as `explore.pareto`) and the cost frontier (cost per million
output tokens against TPOT), hover details per configuration, SLA filters (TPOT, TTFT, tokens/s per
user, device) and, for the selected row, its launch command (`dsperf.model.launch`, SGLang).

The filters also read the page's URL fragment (`page.html#tpot_ms=30&device=H200`), so that a
link can carry a view; the count of shown and frontier points is in the page (`#shown`,
`#frontier-count`), where a test or a reader can check it. Script errors are written into the page
(`#errors`) as well as the console.
"""
from __future__ import annotations

import html
import json
import math
from pathlib import Path

import pandas as pd

from . import explore, launch

# The columns the page carries per row (the explorer's SHOWN ones and what the plots need).
COLUMNS = list(dict.fromkeys(explore.SHOWN + ["tps_user", "tokens_per_gpu_s_served", "tpot_ms", "ttft_ms",
                                              "cost_per_m_output_usd", "error_band"]))


def _json_value(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if hasattr(v, "item"):
        v = v.item()
        if isinstance(v, float) and not math.isfinite(v):
            return None
    return v


def _command(row) -> str:
    try:
        return launch.emit(row, "sglang").text()
    except ValueError as e:  # a layout SGLang cannot run: say why instead of a command
        return f"# no SGLang command: {e}"


def _on_either_frontier(rows: pd.DataFrame) -> set:
    if not len(rows):
        return set()
    out = set(explore.pareto(rows).index)
    if "cost_per_m_output_usd" in rows.columns:
        out |= set(explore.cost_frontier(rows).index)
    return out


def thin(rows: pd.DataFrame, max_rows: int) -> pd.DataFrame:
    """At most max_rows rows (more only if the frontiers alone hold more), keeping every frontier
    row first (global, then each device's), then the most tokens/s per GPU: what a page can carry
    without losing what its filters can reach."""
    if len(rows) <= max_rows:
        return rows
    keep = dict.fromkeys(_on_either_frontier(rows))
    for _, g in rows.groupby(rows["device"].astype(str), observed=True):
        keep.update(dict.fromkeys(_on_either_frontier(g)))
    rest = rows.drop(index=list(keep)).sort_values("tokens_per_gpu_s_served", ascending=False)
    keep.update(dict.fromkeys(rest.index[:max(0, max_rows - len(keep))]))
    return rows.loc[list(keep)]


def page_data(rows: pd.DataFrame) -> list[dict]:
    """The rows as the page embeds them: SHOWN columns (4 significant digits), a frontier flag
    (explore.pareto over these rows) and, for frontier rows, the launch command."""
    frontier = set(explore.pareto(rows).index) if len(rows) else set()
    commands = _on_either_frontier(rows)
    out = []
    for idx, r in rows.iterrows():
        d = {}
        for c in COLUMNS:
            if c in rows.columns:
                v = _json_value(r[c])
                d[c] = float(f"{v:.4g}") if isinstance(v, float) else v
        d["device"] = str(r["device"])
        d["frontier"] = idx in frontier
        d["command"] = _command(r) if idx in commands else ""
        out.append(d)
    return out


def write_html(rows: pd.DataFrame, path, *, title="dsperf explore", sla: dict | None = None,
               max_rows: int = 3000) -> Path:
    """Write the page for `rows` (feasible explorer rows, e.g. explore.meets_sla's) to `path`.
    sla: the SLA the rows were chosen under, shown in the header. Past max_rows the page keeps every
    frontier row and the rows with the most tokens/s per GPU (thin), and says so."""
    if not isinstance(rows, pd.DataFrame):
        raise TypeError(f"rows must be a pandas DataFrame of explorer rows, got {type(rows).__name__}")
    missing = [c for c in ("device", "tps_user", "tokens_per_gpu_s_served", "tpot_ms") if c not in rows.columns]
    if missing:
        raise ValueError(f"rows: column '{missing[0]}' is required (explorer rows from dsperf.explore.search)")
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
        raise ValueError(f"max_rows must be a positive integer, got {max_rows!r}")
    shown = thin(rows, max_rows)
    data = json.dumps(page_data(shown), allow_nan=False).replace("</", "<\\/")
    sla_text = ", ".join(f"{k} {v:g}" for k, v in (sla or {}).items() if v is not None) or "none"
    carried = f"{len(shown)} of {len(rows)} rows" + ("" if len(shown) == len(rows) else
                                                     " (every frontier row, then the most tokens/s per GPU)")
    page = _TEMPLATE.replace("@TITLE@", html.escape(title)).replace("@SLA@", html.escape(sla_text)) \
                    .replace("@ROWS@", html.escape(carried)).replace("@DATA@", data)
    path = Path(path)
    path.write_text(page, encoding="utf-8")
    return path


_TEMPLATE = r"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>@TITLE@</title>
<style>
body{font-family:system-ui,sans-serif;margin:1em;color:#222}
.plots{display:flex;flex-wrap:wrap;gap:1em}
svg{border:1px solid #ccc;background:#fff}
circle{fill:#9ab;opacity:.6}circle.frontier{fill:#c33;opacity:1}circle.selected{stroke:#000;stroke-width:2}
#tip{position:absolute;background:#ffe;border:1px solid #999;padding:4px;font-size:12px;display:none;pointer-events:none}
label{margin-right:1em}pre{background:#f4f4f4;padding:.5em;white-space:pre-wrap}
#errors{color:#c00}#errors:empty{display:none}
</style></head><body>
<h1>@TITLE@</h1>
<p>SLA of the search: @SLA@; the page carries @ROWS@. Points shown: <span id="shown">0</span>; on the frontier:
<span id="frontier-count">0</span> (red: no other shown configuration has more tokens/s per user and
per GPU).</p>
<div>
<label>TPOT &le; <input id="tpot_ms" type="number" step="any"> ms</label>
<label>TTFT &le; <input id="ttft_ms" type="number" step="any"> ms</label>
<label>tokens/s per user &ge; <input id="tps_user" type="number" step="any"></label>
<label>device <select id="device"><option value="">all</option></select></label>
</div>
<div class="plots">
<svg id="frontier" width="520" height="380"></svg>
<svg id="cost" width="520" height="380"></svg>
</div>
<h2>Selected configuration</h2><pre id="selected">(click a point)</pre>
<pre id="errors"></pre>
<div id="tip"></div>
<script>
"use strict";
window.onerror = function (msg) { document.getElementById("errors").textContent += msg + "\n"; };
const ROWS = @DATA@;
ROWS.forEach((r, i) => { r.key = i; });
const NS = "http://www.w3.org/2000/svg";
const SHOW = ["device","gpus","prefill_gpus","ep","redundant_experts","attn_tp","moe_tp","mtp","kv_fp8","overlap",
              "batch","tpot_ms","tps_user","tokens_per_gpu_s_served","ttft_ms","cost_per_m_output_usd","error_band"];
const fmt = v => v === null || v === undefined ? "-" : (typeof v === "number" ? +v.toPrecision(4) : v);
function params() {
  const p = {};
  for (const kv of location.hash.replace(/^#/, "").split("&")) {
    const [k, v] = kv.split("=");
    if (k) p[decodeURIComponent(k)] = decodeURIComponent(v || "");
  }
  return p;
}
function filters() {
  const num = id => { const v = document.getElementById(id).value; return v === "" ? null : +v; };
  return {tpot_ms: num("tpot_ms"), ttft_ms: num("ttft_ms"), tps_user: num("tps_user"),
          device: document.getElementById("device").value};
}
function shownRows() {
  const f = filters();
  return ROWS.filter(r => (f.tpot_ms === null || (r.tpot_ms !== null && r.tpot_ms <= f.tpot_ms)) &&
    (f.ttft_ms === null || (r.ttft_ms !== null && r.ttft_ms <= f.ttft_ms)) &&
    (f.tps_user === null || (r.tps_user !== null && r.tps_user >= f.tps_user)) &&
    (f.device === "" || r.device === f.device));
}
// explore.pareto: x descending then y descending, keep each row whose y beats every kept one.
function pareto(rows, x, y) {
  const ok = rows.filter(r => Number.isFinite(r[x]) && Number.isFinite(r[y]));
  ok.sort((a, b) => (b[x] - a[x]) || (b[y] - a[y]));
  const keep = new Set(); let best = -Infinity;
  for (const r of ok) if (r[y] > best) { keep.add(r); best = r[y]; }
  return keep;
}
function plot(svg, rows, x, y, xlabel, ylabel, onFront) {
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const W = +svg.getAttribute("width"), H = +svg.getAttribute("height"), m = 50;
  const pts = rows.filter(r => Number.isFinite(r[x]) && Number.isFinite(r[y]));
  const xs = pts.map(r => r[x]), ys = pts.map(r => r[y]);
  const x0 = Math.min(...xs, 0), x1 = Math.max(...xs, 1), y0 = Math.min(...ys, 0), y1 = Math.max(...ys, 1);
  const sx = v => m + (v - x0) / (x1 - x0 || 1) * (W - 2 * m), sy = v => H - m - (v - y0) / (y1 - y0 || 1) * (H - 2 * m);
  const text = (s, tx, ty, rot) => { const t = document.createElementNS(NS, "text"); t.textContent = s;
    t.setAttribute("x", tx); t.setAttribute("y", ty); t.setAttribute("font-size", "12");
    if (rot) t.setAttribute("transform", `rotate(-90 ${tx} ${ty})`); svg.appendChild(t); };
  text(xlabel, W / 2 - 60, H - 10); text(ylabel, 14, H / 2 + 60, true);
  text(fmt(x0), m, H - m + 15); text(fmt(x1), W - m - 20, H - m + 15); text(fmt(y0), 24, H - m); text(fmt(y1), 24, m - 6);
  for (const r of pts) {
    const c = document.createElementNS(NS, "circle");
    c.setAttribute("cx", sx(r[x])); c.setAttribute("cy", sy(r[y])); c.setAttribute("r", onFront(r) ? 5 : 3);
    if (onFront(r)) c.setAttribute("class", "frontier");
    c.addEventListener("mousemove", ev => { const tip = document.getElementById("tip"); tip.style.display = "block";
      tip.style.left = ev.pageX + 12 + "px"; tip.style.top = ev.pageY + 12 + "px";
      tip.innerHTML = SHOW.filter(k => k in r).map(k => `${k}: ${fmt(r[k])}`).join("<br>"); });
    c.addEventListener("mouseleave", () => { document.getElementById("tip").style.display = "none"; });
    c.addEventListener("click", () => { document.getElementById("selected").textContent =
      SHOW.filter(k => k in r).map(k => `${k}: ${fmt(r[k])}`).join("\n") + "\n\n" +
      (r.command || "(launch commands are embedded for frontier points; dsperf.model.launch.emit writes any row's)"); });
    svg.appendChild(c);
  }
}
function render() {
  const rows = shownRows();
  const untouched = Object.values(filters()).every(v => v === null || v === "");
  // Unfiltered, the frontier is the explorer's own (the CSV's); filtered, recomputed the same way.
  const front = untouched ? new Set(rows.filter(r => r.frontier)) : pareto(rows, "tps_user", "tokens_per_gpu_s_served");
  document.getElementById("shown").textContent = rows.length;
  document.getElementById("frontier-count").textContent = front.size;
  plot(document.getElementById("frontier"), rows, "tps_user", "tokens_per_gpu_s_served",
       "tokens/s per user", "tokens/s per GPU (prefill GPUs counted)", r => front.has(r));
  const cheap = pareto(rows.map(r => Object.assign({}, r, {ntpot: -r.tpot_ms, ncost: -r.cost_per_m_output_usd})),
                       "ntpot", "ncost");
  const cheapKeys = new Set([...cheap].map(r => r.key));
  plot(document.getElementById("cost"), rows, "tpot_ms", "cost_per_m_output_usd", "TPOT (ms)",
       "USD per million output tokens", r => cheapKeys.has(r.key));
}
const sel = document.getElementById("device");
for (const d of [...new Set(ROWS.map(r => r.device))]) { const o = document.createElement("option"); o.value = d;
  o.textContent = d; sel.appendChild(o); }
const p = params();
for (const k of ["tpot_ms", "ttft_ms", "tps_user", "device"]) if (k in p) document.getElementById(k).value = p[k];
for (const k of ["tpot_ms", "ttft_ms", "tps_user", "device"]) document.getElementById(k).addEventListener("input", render);
render();
</script></body></html>
"""
