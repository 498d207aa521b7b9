"""MoE layer of DeepSeek-V3 on one EP8 rank's share: 32 routed experts (of 256) + the shared expert,
top-8 routing among the 32, FP8 128x128 weights (1.4 GB); 1 to 2048 tokens, gate to combine in one call.
All 256 experts would need 22.6 GB in BF16, more than this machine's memory."""
import numpy as np

from dsperf import kernels as K

from . import gpu
from .common import DIM, MOE_INTER, median_ms, parse, print_table, random_bf16

EXPERTS = 32


def main():
    a = parse(__doc__)
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 256, size=(EXPERTS, 2 * MOE_INTER, DIM), dtype=np.uint8)
    bits[(bits & 0x7F) == 0x7F] = 0
    w13 = bits.view(K.FP8)
    bits2 = rng.integers(0, 256, size=(EXPERTS, DIM, MOE_INTER), dtype=np.uint8)
    bits2[(bits2 & 0x7F) == 0x7F] = 0
    w2 = bits2.view(K.FP8)
    s13 = np.full((EXPERTS, 2 * MOE_INTER // 128, DIM // 128), 1e-3, np.float32)
    s2 = np.full((EXPERTS, DIM // 128, MOE_INTER // 128), 1e-3, np.float32)
    sw13, sw2 = w13[0].copy(), w2[0].copy()
    gate = random_bf16(rng, (EXPERTS, DIM), 120)
    routing = dict(n_group=1, topk_group=1, top_k=8, route_scale=2.5)
    on_gpu, _ = gpu.status()
    if on_gpu:
        layer = gpu.MoeOnGpu(gate, w13, w2, sw13, sw2, w13_scale=s13, w2_scale=s2, shared_w13_scale=s13[0],
                             shared_w2_scale=s2[0], **routing)
    rows = []
    for t in a.tokens:
        x = random_bf16(rng, (t, DIM), 124)
        row = [t, median_ms(lambda: K.moe_layer(
            x, gate, w13, w2, w13_scale=s13, w2_scale=s2, shared_w13=sw13, shared_w2=sw2, shared_w13_scale=s13[0],
            shared_w2_scale=s2[0], **routing), a.repeats)]
        if on_gpu:
            xd = gpu.up(x)
            row.append(median_ms(lambda: layer(xd), a.repeats))
        rows.append(row)
    print_table(f"moe ({EXPERTS} local experts + shared, FP8)",
                ["test_cpu moe_layer (ms)"] + (["gpu composed (ms)"] if on_gpu else []), rows,
                gpu_note="gate (cuBLAS) -> routing -> grouping on the host -> permute -> grouped FFN -> un-permute, "
                         "baseline/gpu.py")


if __name__ == "__main__":
    main()
