"""The dsperf command: tables in the seed's layout, clean one-line errors."""
import subprocess
import sys

import pytest


def run(*args):
    return subprocess.run([sys.executable, "-m", "dsperf.cli", *args], capture_output=True, text=True, timeout=120)


def test_tables_default_prints_every_section():
    r = run("tables")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for figure in ("0.37429248", "68.62", "5.265", "52240.1", "1026.840", "1302.842", "28.7",
                   "3246.137", "1879.856", "35.367", "1306.001", "TimeBudget", "H20_3e_FP16_Absorb"):
        assert figure in out, figure
    titles = [line for line in out.splitlines() if line.startswith("## ")]
    assert titles[0].startswith("## 1.1") and titles[-1].startswith("## 3.7")
    # Sections come in the seed's order.
    numbers = [t.split()[1] for t in titles]
    assert numbers == sorted(numbers, key=lambda s: tuple(int(x) for x in s.split(".")))


def test_tables_csv_and_options():
    r = run("tables", "--devices", "H200,B200", "--mode", "corrected", "--format", "csv", "--sections", "prefill,decode")
    assert r.returncode == 0, r.stderr
    assert "# 2.1" in r.stdout and "B200" in r.stdout and "|" not in r.stdout


@pytest.mark.parametrize("args, word", [
    (["tables", "--devices", "H800,H999"], "H999"),
    (["tables", "--kv-cache-hit", "1.5"], "kv_cache_hit"),
    (["tables", "--tp", "3"], "tp"),
    (["tables", "--seq-len", "abc"], "--seq-len"),
    (["tables", "--mode", "exact"], "mode"),
    (["tables", "--mode", "corrected+nofix"], "nofix"),
    (["tables", "--sections", "prefil"], "prefil"),
    (["tables", "--model", "Nope"], "Nope"),
    (["tables", "--ep", "0"], "ep"),
    (["tables", "--ep", "512", "--redundant-experts", "0"], "ep (512)"),
])
def test_bad_input_is_one_line(args, word):
    r = run(*args)
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and word in lines[0] and "Traceback" not in r.stderr


def test_tables_with_ep_and_model_options():
    r = run("tables", "--ep", "72", "--model", "Kimi-K2", "--sections", "decode", "--batch-sizes", "16,48")
    assert r.returncode == 0, r.stderr
    assert "EP72" in r.stdout and "| BatchSize" in r.stdout


def test_devices_and_deepseek_commands():
    r = run("devices")
    assert r.returncode == 0 and "B200" in r.stdout and "RTX4090" in r.stdout
    r = run("deepseek")
    assert r.returncode == 0 and "14800" in r.stdout and "73700" in r.stdout


def test_explore_emits_dynamo_with_the_chosen_backend(tmp_path):
    r = run("explore", "--devices", "H200", "--tpot-ms", "50", "--out", str(tmp_path), "--emit", "dynamo",
            "--dynamo-backend", "vllm")
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "launch_dynamo.txt").read_text()
    assert text.startswith("# dynamo:") and "python3 -m dynamo.frontend" in text
    assert "python3 -m dynamo.vllm" in text and "kind: DynamoGraphDeployment" in text
    assert "python3 -m dynamo.vllm" in r.stdout


@pytest.mark.parametrize("args, word", [
    (["--emit", "dynamo", "--dynamo-backend", "tgi"], "--dynamo-backend must be one of sglang, vllm, trtllm, got 'tgi'"),
    (["--emit", "vllm", "--dynamo-backend", "vllm"], "--dynamo-backend applies to --emit dynamo only"),
])
def test_explore_bad_dynamo_backend_is_one_line(args, word):
    r = run("explore", "--devices", "H200", *args)
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and word in lines[0] and "Traceback" not in r.stderr
