"""The Blackwell all-to-all rows (benchmarks/tables/build_b200.py): DeepEP's normal kernels timed on
B200 and across a GB200 NVL72 rack, read inside a device's NVLink domain at the call's own EP, while
calls between domains keep the network table's RDMA rows."""
import subprocess
import sys
from pathlib import Path

import pytest

from dsperf.model import grounded, table_files

ROOT = Path(__file__).resolve().parents[1]


def _gbps(result) -> dict:
    return {c["family"]: (c["efficiency"], c["clamped"]) for c in result["calls"]
            if c["stage"] in ("dispatch", "combine")}


@pytest.mark.parametrize("ep, dispatch, combine, clamped", [
    (8, 349.0, 420.0, False),      # the B200 platform's EP8 row
    (16, 338.87, 378.32, False),   # GB200, four trays
    (24, 351.05, 163.62, False),   # GB200, six trays
    (48, 351.05, 163.62, True),    # beyond the rows: the EP24 row, counted as clamped
])
def test_a_gb200_prefill_reads_the_rack_rows_at_its_own_ep(ep, dispatch, combine, clamped):
    g = _gbps(grounded.prefill(device="GB200", tokens=8192, prompt_len=4096, ep=ep))
    assert g["dispatch_normal"] == (pytest.approx(dispatch), clamped)
    assert g["combine_normal"] == (pytest.approx(combine), clamped)


def test_a_b200_reads_its_node_row_inside_and_the_rdma_rows_between_nodes():
    """EP8 stays inside a B200 node (its own row, not 153 / 200 of its 900 GB/s link); EP32 spans four
    nodes and reads the network table's RDMA row at EP32 (58 GB/s of a 50-GB/s NIC table, on its
    50 GB/s NIC), as it did before the device had rows of its own."""
    inside = _gbps(grounded.prefill(device="B200", tokens=8192, prompt_len=4096, ep=8))
    assert inside["dispatch_normal"][0] == pytest.approx(349.0)
    assert inside["dispatch_normal"][0] != pytest.approx(153 / 200 * 900)
    between = _gbps(grounded.prefill(device="B200", tokens=8192, prompt_len=4096, ep=32))
    assert between["dispatch_normal"][0] == pytest.approx(58.0)
    assert between["combine_normal"][0] == pytest.approx(57.0)
    # A decode inside the node runs the normal kernels at the node's row (no low-latency rows timed
    # over NVLink); across nodes the low-latency kernels over the NICs.
    d_in = _gbps(grounded.decode(device="B200", batch=64, kv_len=2048, ep=8))
    assert d_in["dispatch_normal"][0] == pytest.approx(349.0)
    d_out = _gbps(grounded.decode(device="B200", batch=64, kv_len=2048, ep=32))
    assert set(d_out) == {"dispatch_ll", "combine_ll"}


def test_the_shipped_b200_table_is_what_its_builder_writes():
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "tables" / "build_b200.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_domain_rows_take_only_dispatch_and_combine_with_a_real_ep_and_rate():
    from dsperf import _C

    t = _C.step_model.KernelTables()
    t.add_domain_bandwidth("combine_ll", 8, 97.0)
    assert t.has_domain_rows("combine_ll") and not t.has_domain_rows("dispatch_ll")
    for family, ep, gbps, what in (("allreduce", 8, 100.0, "dispatch or combine"), ("gemm_fp8", 8, 100.0, "dispatch"),
                                   ("dispatch_normal", 0.5, 100.0, "ep"), ("dispatch_normal", 8, 0.0, "gbps"),
                                   ("dispatch_normal", 8, float("nan"), "gbps")):
        with pytest.raises(ValueError, match=what):
            t.add_domain_bandwidth(family, ep, gbps)


def test_a_device_table_gives_both_halves_of_an_exchange(tmp_path):
    """A domain's dispatch rows without their combine rows would price the combine at the default:
    the table is refused, naming the file and the missing family."""
    bad = tmp_path / "half.csv"
    bad.write_text("family,ep,gbps,link_gbps,basis,source\ndispatch_normal,8,349,900,measured,somewhere\n")
    with pytest.raises(ValueError, match=r"half\.csv.*dispatch_normal rows but no combine_normal"):
        table_files._device_comm_rows(bad, grounded.read_table_rows(bad))
