"""Dense MLP of DeepSeek-V3's first three layers (7168 -> 18432 -> 7168, merged gate_up), BF16 and
FP8 128x128 block-scaled weights, 1 to 2048 tokens."""
import numpy as np

from dsperf import kernels as K

from . import gpu
from .common import DIM, INTER, median_ms, parse, print_table, random_bf16


def main():
    a = parse(__doc__)
    rng = np.random.default_rng(0)
    w13 = random_bf16(rng, (1, 2 * INTER, DIM))
    w2 = random_bf16(rng, (1, DIM, INTER))
    w13q = w13.astype(np.float32).astype(K.FP8)
    w2q = w2.astype(np.float32).astype(K.FP8)
    s13 = np.ones((1, 2 * INTER // 128, DIM // 128), np.float32)
    s2 = np.ones((1, DIM // 128, INTER // 128), np.float32)
    on_gpu, _ = gpu.status()
    if on_gpu:
        g = [gpu.up(a) for a in (w13, w2, w13q, w2q, s13, s2)]
    rows = []
    for t in a.tokens:
        x = random_bf16(rng, (t, DIM), 124)
        off = np.array([0, t], np.int64)
        row = [t, median_ms(lambda: K.experts_contiguous(x, off, w13, w2), a.repeats),
               median_ms(lambda: K.experts_contiguous(x, off, w13q, w2q, s13, s2), a.repeats)]
        if on_gpu:
            xd = gpu.up(x)
            row += [median_ms(lambda: gpu.dense_mlp(xd, g[0], g[1]), a.repeats),
                    median_ms(lambda: gpu.dense_mlp(xd, g[2], g[3], g[4], g[5]), a.repeats)]
        rows.append(row)
    columns = ["test_cpu BF16 (ms)", "test_cpu FP8 (ms)"] + (["gpu BF16 (ms)", "gpu FP8 (ms)"] if on_gpu else [])
    print_table("mlp (dense, 396M parameters)", columns, rows,
                gpu_note="dsperf.cuda.experts_contiguous with one expert, inputs and weights on the GPU")


if __name__ == "__main__":
    main()
