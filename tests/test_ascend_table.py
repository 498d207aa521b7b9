"""The Ascend 910C kernel table: derived MLA decode rows (benchmarks/tables/build_ascend910c.py)."""
import subprocess
import sys
from pathlib import Path

from dsperf.model import derive_table, grounded

ROOT = Path(__file__).resolve().parents[1]


def test_ascend_table_loads_with_both_sources():
    rows = grounded.read_table_rows(grounded._tables_dir() / "Ascend910C.csv")
    assert rows and {r["family"] for r in rows} == {"mla_decode"}
    for r in rows:
        assert r["basis"] == "derived"
        assert "InferSim" in r["source"]                      # the H800 curve over shapes
        assert "2509.25224" in r["source2"] and "614" in r["source2"]   # the AMLA paper's best case
    assert grounded.device_pricing("Ascend910C")["kernel_table"] == "Ascend910C"
    # Only the attention core has rows: most of a step still runs at the default efficiency.
    assert grounded.table_kind("Ascend910C") == "partial"


def test_ascend_mla_decode_priced_from_the_table():
    out = grounded.decode(device="Ascend910C", batch=96, kv_len=4224, ep=320, redundant_experts=64, mtp=1,
                          mtp_accepted=0.7)
    core = [c for c in out["calls"] if c["family"] == "mla_decode"]
    assert len(core) == 1 and core[0]["from_table"]
    # Compute-bound on the package's roofline; at most the published best, 614 of 707.8 TFLOPS.
    assert 0.6 < core[0]["efficiency"] <= 614 / 707.8 + 1e-9
    assert out["calls_from_table"] == 3  # the attention core, dispatch and combine


def test_ascend_table_is_what_the_builder_writes():
    anchor = [a for a in derive_table.read_anchors() if a["table"] == "Ascend910C"]
    assert [(a["families"], a["published"], a["peak_field"]) for a in anchor] == [(["mla_decode"], 614.0,
                                                                                    "fp16_tflops")]
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "tables" / "build_ascend910c.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
