"""embed_tokens: DeepSeek-V3's 129280 x 7168 BF16 table (1.85 GB), looked up for 1 to 2048 tokens."""
import numpy as np

from dsperf import kernels as K

from .common import DIM, VOCAB, median_ms, parse, print_table, random_bf16


def main():
    a = parse(__doc__)
    rng = np.random.default_rng(0)
    table = random_bf16(rng, (VOCAB, DIM))
    rows = []
    for t in a.tokens:
        ids = rng.integers(0, VOCAB, t).astype(np.int32)
        rows.append([t, median_ms(lambda: K.embedding(table, ids), a.repeats),
                     median_ms(lambda: table[ids], a.repeats)])
    print_table("embed_tokens", ["test_cpu dsperf (ms)", "test_cpu numpy (ms)"], rows)


if __name__ == "__main__":
    main()
