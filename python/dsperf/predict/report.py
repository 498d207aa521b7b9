"""`dsperf report`: the main job. Calibrate this machine (or reuse the calibration), print the
seed's tables, run the kernel sweep, predict every point with the calibrated cost model, and write
a report folder:

    report.md                  the summary (each accuracy target met or not), machine, efficiencies,
                               errors, worst points, seed tables
    predicted_vs_measured.csv  one row per measured point: kernel, predicted_ms, measured_ms, ...
    errors_by_family.csv       median / 90th-percentile |relative error| per family and overall
    efficiencies.csv           the fitted per-family efficiencies
    fit_sweep.csv              the calibration sweep they were fitted on (other shapes, measured
                               in the same run, shuffled with the report's points)
    seed_tables.md             every table of the seed analysis (as_published)
    *.png                      predicted vs measured, errors by family, roofline
    ep/, ep_predicted_vs_measured.png
                               the expert-parallel all-to-all under mpirun -np 2 against a raw
                               exchange and the cost model's term (report_ep.py; where MPI exists)
"""
from __future__ import annotations

import datetime
import sys
import time
from pathlib import Path

import numpy as np

DEFAULT_OUT = Path("report")

# The report's accuracy targets, on |relative error| over every point of its sweep (out of sample):
# (column of errors_by_family.csv, what it is, the most it may be).
TARGETS = (("median_abs_error", "median |error|", 0.15), ("p90_abs_error", "90th percentile |error|", 0.35))


def evaluate_targets(summary) -> list[dict]:
    """Each target with its value and whether it is met (a NaN value is not met)."""
    overall = summary[summary["kernel"] == "overall"].iloc[0]
    return [{"name": name, "value": float(overall[col]), "limit": limit, "met": bool(overall[col] <= limit)}
            for col, name, limit in TARGETS]


def report_targets(out) -> list[dict]:
    """evaluate_targets of a written report folder (`dsperf report --check` exits 1 when one is missed)."""
    import pandas as pd

    return evaluate_targets(pd.read_csv(Path(out) / "errors_by_family.csv"))


def targets_line(targets) -> str:
    """'median |error| 12.5% (target <= 15%): met; ...: NOT MET' and the verdict."""
    parts = [f"{t['name']} {_fmt_pct(t['value'])} (target <= {_fmt_pct(t['limit'])}): {'met' if t['met'] else 'NOT MET'}"
             for t in targets]
    verdict = "all targets met" if all(t["met"] for t in targets) else "targets not met"
    return f"{verdict}: " + "; ".join(parts)


def _seed_tables() -> str:
    from ..seed.tables import TableOptions, all_tables, render

    return render(all_tables(TableOptions(), ("model", "devices", "prefill", "decode")), "markdown")


def _fmt_pct(x):
    return f"{x * 100:.1f}%"


def run_report(out=DEFAULT_OUT, quick=False, cold=True, force_calibration=False, calibration=None, points=None,
               fit_points=None, repeats=None, progress=True, print_tables=True, stream=None, ep=True) -> Path:
    """Runs the whole job and returns the report folder. points / fit_points override the sweeps
    (tests use tiny ones); calibration is the device file to use or write; ep adds the
    expert-parallel section (dsperf.ep under mpirun -np 2, where MPI is installed)."""
    from . import plots, sweeps
    from .calibrate import RoofSampler, calibrate, probe_bands, save, with_roof_samples
    from .harness import run_sweep
    from .fit import efficiencies_table, error_summary, fit_efficiencies, predict_frame

    stream = stream or sys.stdout
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"out: '{out}' exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()

    # The calibration stays in memory; it is written once, after the fit (calibrate.save).
    cal_path, m = calibrate(force=force_calibration, quick=quick, path=calibration, fit=False, progress=progress)
    spec = m["spec"]
    stream.write(f"calibration: {cal_path} ({'reused' if m['reused'] else 'measured now'}); "
                 f"{spec.fp16_tflops * 1e3:.0f} GFLOPS, {spec.mem_bw_gbps:.1f} GB/s, "
                 f"{spec.call_overhead_us:.1f} us per call\n")

    tables = _seed_tables()
    (out / "seed_tables.md").write_text(tables)
    if print_tables:
        stream.write(tables + "\n")

    # The calibration sweep and the report's sweep are measured together, in one shuffled order,
    # so that drift of this shared machine over the minutes of the run hits both alike; the fit
    # sees only the first, the errors only the second.
    fit_pts = sweeps.fit_points(quick) if fit_points is None else list(fit_points)
    pts = sweeps.default_points(quick) if points is None else list(points)
    tagged = [("fit", i, p) for i, p in enumerate(fit_pts)] + [("report", i, p) for i, p in enumerate(pts)]
    order = np.random.default_rng(0).permutation(len(tagged))
    tagged = [tagged[i] for i in order]
    stream.write(f"kernel sweep: {len(fit_pts)} calibration + {len(pts)} report points, "
                 f"{'cold (caches flushed)' if cold else 'cache-resident'}\n")
    stream.flush()
    sampler = RoofSampler(m, quick)
    sweep = run_sweep([p for _, _, p in tagged], repeats=repeats or (3 if quick else 5), cold=cold, progress=progress,
                      between=sampler)
    m = with_roof_samples(m, sampler.samples)
    spec = m["spec"]
    stream.write(f"memory roof: {spec.mem_bw_gbps:.1f} GB/s, the better of the calibration's probe "
                 f"({m['read_gbps_probe']:.1f}) and the median of {len(sampler.samples)} probes between the kernel "
                 f"calls ({m['read_sweep_median_gbps']:.1f}; lowest {min(sampler.samples):.1f}, best "
                 f"{m['read_sweep_best_gbps']:.1f})\n")
    sweep["sweep"], sweep["point"] = [t for t, _, _ in tagged], [i for _, i, _ in tagged]
    # Back in each sweep's own order for the tables.
    fit_df = sweep[sweep["sweep"] == "fit"].sort_values("point").drop(columns=["sweep", "point"])
    measured = sweep[sweep["sweep"] == "report"].sort_values("point").drop(columns=["sweep", "point"])
    effs = fit_efficiencies(fit_df, spec, cache_resident=not cold)
    fit_df.dropna(axis=1, how="all").to_csv(out / "fit_sweep.csv", index=False)
    if cold:  # the calibration file keeps the cold-data fit
        save(cal_path, m, effs, fit_df)
    elif not m["reused"]:  # cache-resident efficiencies are not this machine's calibration
        save(cal_path, m, {})
    measured = measured.dropna(axis=1, how="all").reset_index(drop=True)

    pred = predict_frame(measured, spec, effs, cache_resident=not cold, bands=probe_bands(m))
    summary = error_summary(pred)
    targets = evaluate_targets(summary)
    lead = ["kernel", "predicted_ms", "measured_ms", "rel_error"]
    pred = pred[lead + [c for c in pred.columns if c not in lead]]
    pred.to_csv(out / "predicted_vs_measured.csv", index=False)
    summary.to_csv(out / "errors_by_family.csv", index=False)
    eff_table = efficiencies_table(effs)
    eff_table.to_csv(out / "efficiencies.csv", index=False)
    figures = plots.save_all(pred, summary, spec, out)
    m = dict(m, efficiency=effs)

    stream.write(summary.to_markdown(index=False, floatfmt=".3f") + "\n")
    stream.write(f"\npredicted vs measured over {len(pred)} points: {targets_line(targets)}\n")
    stuck = [k for k, e in effs.items() if e.at_bound]
    if stuck:
        stream.write(f"warning: fitted efficiencies at a bound of the search (clipped guesses): {', '.join(stuck)}\n")
    if m.get("unsteady_probes"):
        stream.write(f"warning: probes whose spread stayed above {m.get('probe_spread_bound', 0.1):.0%}: "
                     f"{m['unsteady_probes']}\n")
    busy = int((pred.get("foreign_cores", 0) > 0.3).sum())
    if busy:
        stream.write(f"warning: {busy} of {len(pred)} points were measured while other processes kept more than "
                     "0.3 cores busy (column foreign_cores); their times are inflated\n")
    ep_lines = []
    if ep:
        from . import report_ep
        ep_lines = report_ep.run(out, quick, stream)

    elapsed = time.perf_counter() - t_start
    md = _markdown(spec, m, cal_path, eff_table, summary, pred, figures, cold, elapsed, targets)
    (out / "report.md").write_text(md + "\n" + "\n".join(ep_lines))
    stream.write(f"report written to {out.resolve()} ({elapsed:.0f} s)\n")
    return out


def _summary_lines(m, eff_table, pred, targets) -> list[str]:
    """The report's verdict first: each target met or not, then what makes the figures less
    trustworthy than they look (unsteady probes, efficiencies at a bound of the search)."""
    from .calibrate import probe_bands

    lines = ["## Summary", "", f"Predicted vs measured over {len(pred)} points: {targets_line(targets)}.", ""]
    bands = probe_bands(m)
    if "probe_band" in pred:
        within = int((pred["rel_error"].abs() <= pred["probe_band"]).sum())
        lines += [f"Prediction band (the spread of the best rounds of the probe behind each roof): compute "
                  f"+/-{_fmt_pct(bands['compute'])}, memory +/-{_fmt_pct(bands['memory'])}, cache "
                  f"+/-{_fmt_pct(bands['cache'])}; {within} of {len(pred)} points err within the band of their roof "
                  "(column probe_band).", ""]
    if m.get("unsteady_probes"):
        lines += [f"Not steady: {m['unsteady_probes']} (spread above {_fmt_pct(m.get('probe_spread_bound', 0.1))} "
                  "when the rounds ran out; their figures carry that spread).", ""]
    stuck = eff_table[eff_table["at_bound"] != ""] if "at_bound" in eff_table else eff_table.iloc[:0]
    if len(stuck):
        lines += ["Fitted efficiencies at a bound of the search (the data wanted a value beyond it, so the fit "
                  "is a clipped guess): " + "; ".join(f"{r.key} ({r.at_bound})" for r in stuck.itertuples()) + ".", ""]
    return lines


def _worst_points(pred, n: int = 8):
    """The n points with the largest |error|, each point's shape as one 'shape' column of the
    parameters it has (families have different ones: a column per parameter is mostly empty)."""
    import pandas as pd

    params = ["variant", "dtype", "tokens", "prefix", "rows", "active", "keys", "batch", "q_len", "heads", "m", "n",
              "k"]
    worst = pred.reindex(pred["rel_error"].abs().sort_values(ascending=False).index).head(n)

    def shape(row) -> str:
        parts = []
        for k in params:
            v = row.get(k)
            if v is None or (isinstance(v, float) and np.isnan(v)):
                continue
            parts.append(f"{k}={int(v) if isinstance(v, (float, np.floating)) and float(v).is_integer() else v}")
        return ", ".join(parts)

    out = pd.DataFrame({"kernel": worst["kernel"], "shape": [shape(r) for r in worst.to_dict("records")]})
    for c in ("measured_ms", "predicted_ms", "rel_error", "bound"):
        if c in worst.columns:
            out[c] = worst[c].to_numpy()
    return out


def _markdown(spec, m, cal_path, eff_table, summary, pred, figures, cold, elapsed, targets) -> str:
    worst = _worst_points(pred)
    from .calibrate import IN_MEMORY_KEYS

    cal_rows = [(k, v) for k, v in m.items() if k not in IN_MEMORY_KEYS]
    lines = [
        "# dsperf report",
        "",
        f"Written {datetime.datetime.now().isoformat(timespec='seconds')} in {elapsed:.0f} s.",
        "",
        *_summary_lines(m, eff_table, pred, targets),
        "## This machine",
        "",
        f"Device file: `{cal_path}` ({'reused' if m.get('reused') else 'measured in this run'}).",
        f"Compute peak {spec.fp16_tflops * 1e3:.1f} GFLOPS, memory {spec.mem_bw_gbps:.2f} GB/s "
        f"(cache-resident {spec.cache_bw_gbps:.1f} GB/s), {spec.call_overhead_us:.2f} us per call.",
        "",
        "| measurement | value |",
        "|---|---|",
    ]
    lines += [f"| {k} | {v:.4g} |" if isinstance(v, float) else f"| {k} | {v} |" for k, v in cal_rows]
    lines += [
        "",
        "## Fitted efficiencies (from the calibration sweep, fit_sweep.csv, measured in this run)",
        "",
        eff_table.to_markdown(index=False, floatfmt=".3g"),
        "",
        f"## Predicted vs measured ({'caches flushed before each call' if cold else 'cache-resident data'})",
        "",
        "Out of sample: the sweep's shapes differ from the calibration sweep's (the two were measured",
        "together in one shuffled order); moe_layer and decode_layer are predicted as the sum of their",
        "parts and never fitted.",
        "",
        summary.to_markdown(index=False, floatfmt=".3f"),
        "",
        "Worst points:",
        "",
        worst.to_markdown(index=False, floatfmt=".3g"),
        "",
    ]
    busy = pred[pred.get("foreign_cores", 0) > 0.3] if "foreign_cores" in pred else pred.iloc[:0]
    if len(busy):
        lines += [f"{len(busy)} of {len(pred)} points were measured while other processes kept more than 0.3 cores "
                  "busy even after re-measuring (column foreign_cores): their times are inflated.", ""]
    lines += [f"![{f.stem}]({f.name})" for f in figures]
    lines += ["", "Every point: predicted_vs_measured.csv. The seed's tables: seed_tables.md.", ""]
    return "\n".join(lines)
