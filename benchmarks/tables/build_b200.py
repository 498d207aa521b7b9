"""Write python/dsperf/data/efficiency/B200.csv: the Blackwell kernel table (B200.toml and GB200.toml
both read it), its derived rows (dsperf.model.derive_table) and the rows measured on Blackwell.

    PYTHONPATH=python python benchmarks/tables/build_b200.py [--check]

Measured rows: dispatch and combine inside an NVLink domain
------------------------------------------------------------
The network table's NVLink rows are DeepEP's normal kernels timed on H800 (153 / 158 GB/s at EP8,
deepseek-ai/DeepEP README), and a device without rows of its own scales them to its link: 900 / 200
of them on a Blackwell part (688 / 711 GB/s). DeepEP's hybrid-ep branch publishes the same kernels
timed on Blackwell (docs/README_Hybrid-EP.md, "Performance Results", read at branch head 94a9f8f6,
2026-07-10; the table's last change 17cfb81, 2026-05-13): 4,096 tokens, hidden 7,168, top-8,
uniformly random routing, 8 local experts, FP8 dispatch and BF16 combine, "algorithm bandwidth"
through the Torch API:

- B200 (one 8-GPU NVLink node), DeepEP at 16-48 SMs: 349 / 420 GB/s at 24 SMs;
- GB200 (NVL72; 4 GPUs a tray, so 8 ranks and more cross trays over the rack's NVLink), DeepEP at
  16 / 24 / 32 SMs and 8 / 16 / 24 ranks: 351 / 426, 339 / 378 and 351 / 164 GB/s at 24 SMs.

So the kernels the H800 rows measure do not scale with the link on Blackwell: at 24 SMs they move half
of what the link ratio gives (48 SMs move 554 / 586 on B200). The rows below are the 24-SM figures,
the SM count the device files hold for the normal kernels (comm_sms_prefill = 24): EP8 from the B200
platform's table (GB200's 8-rank figure agrees within 2%), 16 and 24 from GB200's. They are read as
fractions of one GPU's NVLink 5 link (900 GB/s per direction, link_gbps), inside the device's
NVLink domain at the call's own EP (a B200 node: EP8; a GB200 rack: up to 72, clamped to the EP24
row beyond it, and dsperf predict counts the call as clamped); calls between domains still read the
network table's RDMA rows. With no low-latency rows timed over NVLink, a decode inside the domain
runs at these normal kernels' rows too.

Not used, and why:
- DeepEP V2 (main branch README, 2026-04): 643 / 675 GB/s at 24 SMs on an SM100 EP8 node, "logical
  bandwidth" (local traffic included), no larger EP. A different kernel released after the
  deployments this table is validated on were run (their stacks pinned DeepEP V1); a user on V2
  can add its rows the same way.
- HybridEP's own rows (same tables: 404-455 / 484-569 GB/s at 32 SMs up to 36 ranks): NVIDIA's
  kernel, not the one the H800 rows measure.
"""
from __future__ import annotations

# The installed dsperf (as the other scripts): a source tree's dsperf has no built extension.
from dsperf.model import derive_table  # noqa: E402
from dsperf.model.devices import load_device  # noqa: E402

DEVICE = "B200"
NVLINK5_GBPS = 900.0  # one Blackwell GPU's NVLink 5, per direction (B200.toml, GB200.toml nvlink_gbps)
HYBRID_EP_README = ("deepseek-ai/DeepEP branch hybrid-ep, docs/README_Hybrid-EP.md (read at 94a9f8f6, 2026-07-10; "
                    "table last changed in 17cfb81, 2026-05-13), Performance Results, {platform} platform, DeepEP "
                    "(V1 normal kernels) through the Torch API at 24 SMs: 4,096 tokens, hidden 7,168, top-8, random "
                    "uniform routing, 8 local experts, FP8 dispatch, BF16 combine; {ranks} ranks{note} [link_gbps: one "
                    "GPU's NVLink 5 per direction]")
# (family, ranks, GB/s at 24 SMs, platform, note)
DEEPEP_BLACKWELL = [
    ("dispatch_normal", 8, 349.0, "B200", " (one 8-GPU node; GB200's 8-rank figure: 350.97)"),
    ("combine_normal", 8, 420.0, "B200", " (one 8-GPU node; GB200's 8-rank figure: 425.95)"),
    ("dispatch_normal", 16, 338.87, "GB200", " (four 4-GPU trays over the rack's NVLink)"),
    ("combine_normal", 16, 378.32, "GB200", " (four 4-GPU trays over the rack's NVLink)"),
    ("dispatch_normal", 24, 351.05, "GB200", " (six 4-GPU trays over the rack's NVLink)"),
    ("combine_normal", 24, 163.62, "GB200", " (six 4-GPU trays over the rack's NVLink)"),
]


def measured() -> list[dict]:
    """The measured rows, as read_table_rows gives them."""
    return [{"family": f, "ep": float(ranks), "gbps": gbps, "link_gbps": NVLINK5_GBPS, "basis": "measured",
             "source": HYBRID_EP_README.format(platform=platform, ranks=ranks, note=note)}
            for f, ranks, gbps, platform, note in DEEPEP_BLACKWELL]


def check() -> list[str]:
    """The devices that read this table have the link its rows are read against."""
    problems = []
    for name in ("B200", "GB200"):
        dev = load_device(name, "corrected")
        if abs(dev.nvlink_gbps - NVLINK5_GBPS) > 0.05:
            problems.append(f"{name}.toml nvlink_gbps is {dev.nvlink_gbps}, not NVLink 5's {NVLINK5_GBPS}")
    return problems


def main(argv=None) -> int:
    return derive_table.builder_main(__doc__, DEVICE, measured, check, argv)


if __name__ == "__main__":
    raise SystemExit(main())
