"""A dense layer of DeepSeek-V3 (one of the first three): RMSNorm -> MLA (CC, prefill) -> residual
-> RMSNorm -> dense MLP -> residual, for 1 to 2048 tokens, BF16 weights."""
import numpy as np

from dsperf import kernels as K

from .common import DIM, INTER, KV_LORA, NOPE, ROPE, HEADS, V, median_ms, parse, print_table, random_bf16
from .mla import weights


def main():
    a = parse(__doc__)
    rng = np.random.default_rng(0)
    w = weights(rng)
    w13 = random_bf16(rng, (1, 2 * INTER, DIM), 116)
    w2 = random_bf16(rng, (1, DIM, INTER), 116)
    norm = np.ones(DIM, np.float32)
    dims = dict(heads=HEADS, nope=NOPE, rope=ROPE, v=V, freqs=K.rope_frequencies(), softmax_scale=(NOPE + ROPE) ** -0.5)
    rows = []
    for t in a.tokens:
        x = random_bf16(rng, (t, DIM), 124)

        def layer():
            h = K.mla_forward("CC", K.rmsnorm(x, norm), w, K.MlaCache(t, KV_LORA, ROPE), **dims)
            x1 = (x.astype(np.float32) + h).astype(K.BF16)
            m = K.experts_contiguous(K.rmsnorm(x1, norm), np.array([0, t], np.int64), w13, w2)
            return (x1.astype(np.float32) + m).astype(K.BF16)

        rows.append([t, median_ms(layer, a.repeats)])
    print_table("dense_layer (MLA + dense MLP)", ["test_cpu (ms)"], rows)


if __name__ == "__main__":
    main()
