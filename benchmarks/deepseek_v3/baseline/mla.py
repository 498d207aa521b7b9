"""MLA layer of DeepSeek-V3 (128 heads, q_lora 1536, kv_lora 512), prefill of 1 to 2048 tokens from
an empty cache: the standard form (CC) and the absorbed form without concatenation (A_CC_ME)."""
import numpy as np

from dsperf import kernels as K

from .common import DIM, HEADS, KV_LORA, NOPE, Q_LORA, ROPE, V, median_ms, parse, print_table, random_bf16


def weights(rng):
    return {"wq_a": random_bf16(rng, (Q_LORA, DIM), 116), "q_norm": np.ones(Q_LORA, np.float32),
            "wq_b": random_bf16(rng, (HEADS * (NOPE + ROPE), Q_LORA), 116),
            "wkv_a": random_bf16(rng, (KV_LORA + ROPE, DIM), 116), "kv_norm": np.ones(KV_LORA, np.float32),
            "wkv_b": random_bf16(rng, (HEADS * (NOPE + V), KV_LORA), 116),
            "wo": random_bf16(rng, (DIM, HEADS * V), 116)}


def main():
    a = parse(__doc__)
    rng = np.random.default_rng(0)
    w = weights(rng)
    freqs = K.rope_frequencies()
    dims = dict(heads=HEADS, nope=NOPE, rope=ROPE, v=V, freqs=freqs, softmax_scale=(NOPE + ROPE) ** -0.5)
    rows = []
    for t in a.tokens:
        x = random_bf16(rng, (t, DIM), 124)

        def run(variant):
            return K.mla_forward(variant, x, w, K.MlaCache(t, KV_LORA, ROPE), **dims)

        rows.append([t, median_ms(lambda: run("CC"), a.repeats), median_ms(lambda: run("A_CC_ME"), a.repeats)])
    print_table("mla (prefill, causal)", ["test_cpu CC (ms)", "test_cpu A_CC_ME (ms)"], rows)


if __name__ == "__main__":
    main()
