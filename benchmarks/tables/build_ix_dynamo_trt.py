"""The InferenceX TensorRT-LLM disaggregated latency rows (data/validation/latency_points.csv,
``ix_{gb200,gb300,b200}_trt_*``) from their sources: each record of an InferenceX results fixture
(``benchmarks.json`` of SemiAnalysisAI/InferenceX-app) and the srt-slurm recipe the run's
``nvidia-master.yaml`` names for its concurrency and decode layout.

    python benchmarks/tables/build_ix_dynamo_trt.py --fixture benchmarks.json \
        --inferencex path/to/InferenceX.git --srt-slurm path/to/srt-slurm.git [--emit rows.csv]

(dsperf importable: installed, or PYTHONPATH=python in a built tree; it reads the devices' node sizes
and table kinds, and the weight formats.)

Without --emit it checks every such row in latency_points.csv against its record and recipe (the
settings the simulator reads and the published medians) and exits 1 on a difference; with --emit it
also writes the rows the fixture holds and the file does not, each with its source, as `check`
rows added today. The repositories are git directories (bare mirrors do); nothing is fetched.

A record is kept only where the recipe agrees with the record on worker counts, TP and EP sizes and
DP attention, and neither side runs MTP. The pins below are the commits read on each run's day:
InferenceX's config of that day, and NVIDIA/srt-slurm's main (the sa-submission-q1-2026 branch
InferenceX's launcher checks out is not mirrored; for run 21701654125, 75f6e32a holds the same
files as main of that day).
"""
from __future__ import annotations

import argparse
import csv
import datetime
import functools
import io
import json
import subprocess
import sys
from pathlib import Path

import yaml

from dsperf.model.devices import load_device
from dsperf.model.grounded import WEIGHT_FORMATS, table_kind

ROOT = Path(__file__).resolve().parents[2]
POINTS = ROOT / "python" / "dsperf" / "data" / "validation" / "latency_points.csv"
FIXTURE = ("InferenceX (SemiAnalysisAI/InferenceX-app's benchmarks.json fixture as copied in the fork "
           "vngcloud/InferenceX-app at commit cb4e87cb7dd3494401343ba0fd41f8cba19fc097)")
# (run, hardware, precision) -> (InferenceX commit of nvidia-master.yaml, NVIDIA/srt-slurm commit)
RUNS = {
    ("21701654125", "gb200", "fp8"): ("d7dbd045", "75f6e32a"),
    ("21785935852", "gb300", "fp8"): ("04b564b3", "b0804707e315374796719f2278a6b5564cc45b12"),
    ("21640109636", "gb300", "fp4"): ("daa8239f", "961c9f82491b76fe4c6ce0a9889a87eddd22d551"),
    ("21957354903", "b200", "fp8"): ("d25c4e75", "9ad3a4857a15f46ed1d4257f7d8ce6e93aef17d0"),
    ("23438524239", "b200", "fp8"): ("26d415b3", "535b2dc7a129430aeee805492dce6550858549c8"),
    # Added 2026-11-29 after the rows above, pinned at each repository's last commit of the run's day (UTC).
    ("23438524239", "gb200", "fp4"): ("26d415b36c62a704bd3510cd68fb9066adf06136",
                                      "535b2dc7a129430aeee805492dce6550858549c8"),
    ("21934281915", "b300", "fp8"): ("d25c4e75b86d268728302085d0632fd7f73c5a91",
                                     "9ad3a4857a15f46ed1d4257f7d8ce6e93aef17d0"),
    # H100's recipes reached srt-slurm's main only with the merge of sa-submission-q1-2026 (5063eb43,
    # 2026-03-03, after the run): read there.
    ("21790074782", "h100", "fp8"): ("2767db504b61c1e4448e9ee337799241a1c4082c",
                                     "5063eb43"),
}
# The checkpoints the configs name, as dsperf prices their weights (NVFP4-v2: experts and wo in NVFP4,
# the rest of attention in BF16: weight_dtype fp4_v2). A run whose config names another (an alias such
# as "deepseek-r1-fp4", whose attention precision is not stated) is left out.
CHECKPOINT = {"deepseek-ai/DeepSeek-R1-0528": "fp8", "nvidia/DeepSeek-R1-0528-NVFP4-v2": "fp4_v2"}
TAG = {(1024, 1024): "1k1k", (1024, 8192): "1k8k", (8192, 1024): "8k1k"}
EXPERTS = 256  # DeepSeek-V3's routed experts: a load balancer's slots beyond them are redundant copies
# The columns that set a row's simulation or its figure, compared in check mode (a blank reads as
# the simulator's default, given here where it is not blank-equivalent already).
COMPARED = ("device", "metric", "published", "mode", "concurrency", "input_len", "output_len", "range_ratio",
            "num_prompts", "ep", "attn_tp", "moe_tp", "redundant_experts", "replicas", "max_running", "mtp", "kv_fp8",
            "dispatch_fp4", "weight_dtype", "prefill_ep", "prefill_attn_tp", "prefill_moe_tp", "prefill_redundant_experts",
            "prefill_replicas", "prefill_max_num_tokens", "prefill_max_running")
BLANK_IS = {"moe_tp": "1", "prefill_moe_tp": "1", "prefill_redundant_experts": "0", "redundant_experts": "0"}


def git_show(git_dir: str, commit: str, path: str) -> str:
    out = subprocess.run(["git", f"--git-dir={git_dir}", "show", f"{commit}:{path}"], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{git_dir}: cannot read {path} at {commit}: {out.stderr.strip()}")
    return out.stdout


@functools.lru_cache(maxsize=None)
def gpus_per_node(device: str) -> int:
    """A device's node size (its device file read once for all its records)."""
    return load_device(device).gpus_per_node


@functools.lru_cache(maxsize=None)
def run_config(inferencex: str, key: tuple) -> dict:
    """A run's entry of nvidia-master.yaml at its pinned commit (read once for all its records)."""
    _, hw, prec = key
    return yaml.safe_load(git_show(inferencex, RUNS[key][0], ".github/configs/nvidia-master.yaml"))[
        f"dsr1-{prec}-{hw}-dynamo-trt"]


def recipe(args, record: dict, key: tuple) -> tuple[str, dict, str] | None:
    """The recipe path, its parsed YAML and the checkpoint the config names for a record, or None
    where no search-space entry of the run's config lists its concurrency with its decode layout and
    no MTP."""
    config = run_config(args.inferencex, key)
    for lengths in config["seq-len-configs"]:
        if (lengths["isl"], lengths["osl"]) != (record["isl"], record["osl"]):
            continue
        for space in lengths["search-space"]:
            dec = space["decode"]
            if (space.get("spec-decoding", "none") != "none" or record["conc"] not in space["conc-list"]
                    or (dec["num-worker"], dec["tp"], dec["ep"], dec["dp-attn"]) != (
                        record["decode_num_workers"], record["decode_tp"], record["decode_ep"],
                        record["decode_dp_attention"])):
                continue
            path = space["prefill"]["additional-settings"][0].split("=", 1)[1]
            return path, yaml.safe_load(git_show(args.srt_slurm, RUNS[key][1], path)), config["model"]
    return None


def agrees(record: dict, res: dict, P: dict, D: dict) -> bool:
    return (res["prefill_workers"] == record["prefill_num_workers"] and res["decode_workers"] == record["decode_num_workers"]
            and (P["tensor_parallel_size"], P["moe_expert_parallel_size"], P["enable_attention_dp"]) ==
            (record["prefill_tp"], record["prefill_ep"], record["prefill_dp_attention"])
            and (D["tensor_parallel_size"], D["moe_expert_parallel_size"], D["enable_attention_dp"]) ==
            (record["decode_tp"], record["decode_ep"], record["decode_dp_attention"])
            and P.get("speculative_config") is None and D.get("speculative_config") is None)


def layout_text(workers: int, c: dict) -> str:
    tp, ep = c["tensor_parallel_size"], c["moe_expert_parallel_size"]
    if c["enable_attention_dp"]:
        return f"{workers} x (TP{tp} EP{ep} DP attention)"
    experts = f"EP{ep} experts" if ep == tp else f"TP{tp // ep} x EP{ep} experts" if ep > 1 else f"TP{tp} experts"
    return f"{workers} x (TP{tp} attention, {experts})"


def redundant(c: dict) -> int:
    balancer = (c.get("moe_config") or {}).get("load_balancer")
    return balancer["num_slots"] - EXPERTS if balancer else 0


def rows_for(record: dict, key: tuple, path: str, y: dict, checkpoint: str, added: str) -> list[dict]:
    """The TTFT and TPOT rows of one record (the settings as the simulator reads them)."""
    run, hw, prec = key
    ix, srt = RUNS[key]
    res, tc = y["resources"], y["backend"]["trtllm_config"]
    P, D = tc["prefill"], tc["decode"]
    weight_dtype = CHECKPOINT[checkpoint]
    kv_fp8 = D["kv_cache_config"].get("dtype") == "fp8"
    name = f"ix_{hw}_trt_{prec + '_' if hw.startswith('gb') else ''}{TAG[(record['isl'], record['osl'])]}_c{record['conc']}"
    m = record["metrics"]
    moe = lambda c: (c.get("moe_config") or {}).get("backend", "default")  # noqa: E731
    source = (f"{FIXTURE}, run {run} ({record['date']}): {hw.upper()}, dynamo-trt ({record['image'].split(':')[-1]}), "
              f"{prec.upper()} ({checkpoint}), no MTP, disaggregated: prefill {layout_text(res['prefill_workers'], P)}, "
              f"decode {layout_text(res['decode_workers'], D)}; {record['isl']} in / {record['osl']} out; concurrency "
              f"{record['conc']}; median_ttft {m['median_ttft']:.5g} s; settings from the recipe InferenceX's "
              f"nvidia-master.yaml ({ix[:8]}) names, {path}, read in NVIDIA/srt-slurm at {srt[:8]}: prefill max_num_tokens "
              f"{P['max_num_tokens']}, max_batch_size {P['max_batch_size']}, MoE backend {moe(P)}; decode max_batch_size "
              f"{D['max_batch_size']}, MoE backend {moe(D)}"
              + (f", EPLB {redundant(D) + EXPERTS} slots" if redundant(D) else "")
              + (f", allreduce {D['allreduce_strategy']}" if D.get("allreduce_strategy") else "")
              + f"; KV cache {D['kv_cache_config'].get('dtype', 'auto')}; KV transfer "
              f"{P['cache_transceiver_config']['backend']}; sa-bench: concurrency x 10 prompts, random range ratio 0.8")
    assumed = ("lengths drawn as the benchmark's random dataset draws them (range ratio 0.8); 10 prompts a client "
               "(sa-bench's bench.sh since 88ff268, 2026-01-23); the memory share at dsperf's default (the recipes' "
               "free_gpu_memory_fraction is a share of the memory left after the weights; their max_batch_size caps "
               "bind first); no micro-batch overlap; KV hand-off at the scale-out rate")
    wide = [k for k, c in (("prefill", P), ("decode", D)) if not c["enable_attention_dp"]
            and c["tensor_parallel_size"] > gpus_per_node(hw.upper())]
    missing = ("" if table_kind(hw.upper()) == "measured" else
               f"a {hw.upper()} kernel table measured per shape (derived rows); ") + (
        f"a measured all-reduce over {hw.upper()} nodes (the {' and '.join(wide)} TP group spans nodes: NCCL's "
        "latency model prices it); " if wide else "") + (
        "Dynamo's routing of requests to decode workers (the simulator balances them by load)")
    settings = dict(
        device=hw.upper(), kind="peak", role="check", added=added, mode="disaggregated", concurrency=record["conc"],
        input_len=record["isl"], output_len=record["osl"], duration_s="", range_ratio="0.8",
        num_prompts=10 * record["conc"], ep=D["tensor_parallel_size"],
        attn_tp=1 if D["enable_attention_dp"] else D["tensor_parallel_size"],
        moe_tp=D["tensor_parallel_size"] // D["moe_expert_parallel_size"], redundant_experts=redundant(D),
        replicas=res["decode_workers"], max_running=D["max_batch_size"], overlap="none", mtp=0, mtp_accepted=0,
        kv_fp8="true" if kv_fp8 else "false", weight_dtype=weight_dtype, prefill_ep=P["tensor_parallel_size"],
        # TensorRT-LLM's all-to-all (DP attention) quantises the tokens for NVFP4 experts before it sends them
        # (TRTLLM_MOE_POST_QUANT_ALLTOALLV, on by default).
        dispatch_fp4="true" if WEIGHT_FORMATS[weight_dtype].experts_fp4 and D["enable_attention_dp"] else "",
        prefill_attn_tp=1 if P["enable_attention_dp"] else P["tensor_parallel_size"],
        prefill_redundant_experts=redundant(P), prefill_replicas=res["prefill_workers"],
        prefill_moe_tp=P["tensor_parallel_size"] // P["moe_expert_parallel_size"], prefill_overlap="none",
        prefill_max_num_tokens=P["max_num_tokens"], prefill_max_running=P["max_batch_size"], mem_fraction="",
        recv_interval="", assumed=assumed, missing=missing)
    return [dict(settings, point=f"{name}_ttft", source=source, metric="ttft_p50_ms",
                 published=round(m["median_ttft"] * 1e3, 4)),
            dict(settings, point=f"{name}_tpot", metric="tpot_p50_ms", published=round(m["median_tpot"] * 1e3, 5),
                 source=f"InferenceX run {run} (as {name}_ttft): median_tpot {m['median_tpot'] * 1e3:.5g} ms",
                 assumed=f"as {name}_ttft")]


def same(field: str, ours, theirs: str) -> bool:
    ours, theirs = str(ours), theirs or BLANK_IS.get(field, "")
    try:
        return float(ours) == float(theirs)
    except ValueError:
        return ours == theirs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixture", required=True, help="InferenceX-app's benchmarks.json")
    ap.add_argument("--inferencex", required=True, help="git directory of SemiAnalysisAI/InferenceX")
    ap.add_argument("--srt-slurm", required=True, help="git directory of NVIDIA/srt-slurm")
    ap.add_argument("--emit", help="write the fixture's rows missing from latency_points.csv to this CSV")
    args = ap.parse_args(argv)
    if not Path(args.fixture).is_file():
        ap.error(f"--fixture: no file {args.fixture}")
    for flag, git_dir in (("--inferencex", args.inferencex), ("--srt-slurm", args.srt_slurm)):
        if subprocess.run(["git", f"--git-dir={git_dir}", "rev-parse"], capture_output=True).returncode:
            ap.error(f"{flag}: {git_dir} is not a git directory")
    fixture = json.loads(Path(args.fixture).read_text())
    with POINTS.open(newline="") as f:
        lines = [line for line in f if not line.startswith("#")]
    shipped = {r["point"]: r for r in csv.DictReader(lines)}
    header = lines[0].strip().split(",")
    today = datetime.date.today().isoformat()
    checked, differ, new, left_out = 0, [], [], []
    for record in fixture:
        run = record["run_url"].split("/")[-3] if record.get("run_url") else ""
        key = (run, record.get("hardware"), record.get("precision"))
        if not (record.get("model") == "dsr1" and record.get("framework") == "dynamo-trt"
                and record.get("spec_method") == "none" and key in RUNS):
            continue
        found = recipe(args, record, key)
        what = f"run {run} {record['hardware']} {record['isl']}/{record['osl']} c{record['conc']}"
        if found is None or not agrees(record, found[1]["resources"], *(
                found[1]["backend"]["trtllm_config"][k] for k in ("prefill", "decode"))):
            left_out.append(f"{what} (no recipe, or recipe and record disagree)")
            continue
        if found[2] not in CHECKPOINT:
            left_out.append(f"{what} (checkpoint {found[2]})")
            continue
        for row in rows_for(record, key, *found, today):
            if row["point"] not in shipped:
                new.append(row)
                continue
            checked += 1
            differ += [f"{row['point']} {k}: recipe/record {row[k]!r}, latency_points.csv {shipped[row['point']][k]!r}"
                       for k in COMPARED if not same(k, row[k], shipped[row["point"]][k])]
    print(f"{checked} rows checked against their record and recipe, {len(differ)} differences; "
          f"{len(new)} rows in the fixture and not in latency_points.csv; left out: {', '.join(left_out) or 'none'}")
    for line in differ:
        print("  " + line)
    if args.emit:
        out = io.StringIO()
        csv.DictWriter(out, fieldnames=header, lineterminator="\n").writerows(new)
        Path(args.emit).write_text(out.getvalue())
        print(f"wrote {len(new)} rows to {args.emit}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
