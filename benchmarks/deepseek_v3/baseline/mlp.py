"""Dense MLP of DeepSeek-V3's first three layers (7168 -> 18432 -> 7168, merged gate_up), BF16 and
FP8 128x128 block-scaled weights, 1 to 2048 tokens."""
import numpy as np

from dsperf import kernels as K

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
    rows = []
    for t in a.tokens:
        x = random_bf16(rng, (t, DIM), 124)
        off = np.array([0, t], np.int64)
        rows.append([t, median_ms(lambda: K.experts_contiguous(x, off, w13, w2), a.repeats),
                     median_ms(lambda: K.experts_contiguous(x, off, w13q, w2q, s13, s2), a.repeats)])
    print_table("mlp (dense, 396M parameters)", ["test_cpu BF16 (ms)", "test_cpu FP8 (ms)"], rows)


if __name__ == "__main__":
    main()
