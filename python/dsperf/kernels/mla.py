"""MLA: the paged latent cache, absorbed decode, the prolog and the five execution variants."""
from __future__ import annotations

from ._base import *  # noqa: F401,F403  (numpy, the extension, placement and checks)


# ---- MLA ---------------------------------------------------------------------------------------
def _check_decompressed(cache, ndim: int) -> None:
    """A cache's decompressed keys and values (CD variant): both or neither, BF16, `ndim` dims."""
    if (cache.k_full is None) != (cache.v_full is None):
        raise ValueError("cache.k_full and cache.v_full go together")
    if cache.k_full is not None:
        _cache_array("cache.k_full", cache.k_full, (BF16,), ndim)
        _cache_array("cache.v_full", cache.v_full, (BF16,), ndim)


class PagedMlaCache:
    """A paged latent cache shared by many requests: `num_blocks` blocks of `block_size` tokens
    holding each token's latent (BF16, or FP8 e4m3 with one FP32 scale per 128 values) and its
    rotated rope key (BF16). Requests address it through block tables (see paged_cache_write and
    mla_decode)."""

    def __init__(self, num_blocks, block_size=64, kv_lora=512, rope=64, *, dtype="bf16", decompressed=False,
                 heads=None, nope=128, v=128):
        if dtype not in ("bf16", "fp8"):
            raise ValueError(f"dtype must be 'bf16' or 'fp8', got {dtype!r}")
        nb, bs = _int("num_blocks", num_blocks, 1), _int("block_size", block_size, 1)
        kv_lora, rope = _int("kv_lora", kv_lora, 1), _int("rope", rope, 2)
        decompressed = _bool("decompressed", decompressed)
        if decompressed:
            heads, nope, v = _int("heads", heads, 1), _int("nope", nope, 1), _int("v", v, 1)
        per_token = kv_lora * 2 + -(-kv_lora // 128) * 4 + rope * 2 + (heads * (nope + rope + v) * 2 if decompressed else 0)
        _check_bytes("num_blocks", nb * bs * per_token, "the paged cache (num_blocks x block_size tokens of kv_lora + "
                     "rope values, and heads x (nope + rope + v) when decompressed)")
        self.latent = np.zeros((nb, bs, kv_lora), BF16 if dtype == "bf16" else FP8)
        self.latent_scale = None if dtype == "bf16" else np.zeros((nb, bs, -(-kv_lora // 128)), np.float32)
        self.rope = np.zeros((nb, bs, rope), BF16)
        # The CD variant's per-head decompressed keys and values, paged the same way.
        self.k_full = self.v_full = None
        if decompressed:
            self.k_full = np.zeros((nb, bs, heads, nope + rope), BF16)
            self.v_full = np.zeros((nb, bs, heads, v), BF16)

    @property
    def dtype(self):
        return "bf16" if self.latent_scale is None else "fp8"

    def _check(self):
        """The arrays the kernels write into (they are attributes a caller may have replaced)."""
        fp8 = isinstance(self.latent, np.ndarray) and self.latent.dtype == FP8
        _cache_array("cache.latent", self.latent, (FP8 if fp8 else BF16,), 3)
        if fp8:
            _cache_array("cache.latent_scale", self.latent_scale, (F32,), 3)
        elif self.latent_scale is not None:
            raise ValueError("cache.latent_scale goes with an FP8 cache.latent only")
        _cache_array("cache.rope", self.rope, (BF16,), 3)
        _check_decompressed(self, 4)


def paged_cache_write(cache, block_table, requests, positions, latent, k_pe):
    """Writes tokens into a PagedMlaCache in place: token t (latent BF16 [T, kv_lora], k_pe BF16
    [T, rope]) of request requests[t] at position positions[t]. An FP8 cache quantises the latent
    per 128 values. Ids outside the table or the cache raise ValueError."""
    if not isinstance(cache, PagedMlaCache):
        raise TypeError(f"cache must be a PagedMlaCache, got {type(cache).__name__}")
    cache._check()
    _arr("latent", latent, (BF16,), 2)
    _arr("k_pe", k_pe, (BF16,), 2)
    _K.paged_cache_write(_bits(cache.latent), cache.latent_scale, _bits(cache.rope), _ids("block_table", block_table, 2),
                         _ids("requests", requests, 1), _ids("positions", positions, 1), _bits(latent), _bits(k_pe))


def mla_decode(q_nope, q_rope, latent_cache, rope_cache, block_table, seqlens, softmax_scale, num_splits=1,
               latent_scale=None):
    """Absorbed MLA decode over a paged latent cache (FlashMLA's contract, on the CPU).

    q_nope BF16 [B, Q, H, kv_lora] (queries with W_UK folded in), q_rope BF16 [B, Q, H, rope_dim];
    latent_cache [blocks, block_size, kv_lora] BF16, or FP8 with latent_scale FP32
    [blocks, block_size, kv_lora / 128]; rope_cache BF16 [blocks, block_size, rope_dim] (a
    PagedMlaCache holds all three); block_table int32 [B, max_blocks]; seqlens int32 [B] (each
    request's tokens, the Q new ones last, causal among themselves). Keys split into num_splits
    ranges per request, merged by log-sum-exp. Returns (out FP32 [B, Q, H, kv_lora] in latent space --
    apply W_UV next -- and lse FP32 [B, Q, H]).
    """
    if _on_gpu(q_nope, q_rope, latent_cache, rope_cache, block_table, seqlens, latent_scale):
        return _cuda().mla_decode(q_nope, q_rope, latent_cache, rope_cache, block_table, seqlens, softmax_scale,
                                  latent_scale=latent_scale, num_splits=num_splits)
    for name, a in (("q_nope", q_nope), ("q_rope", q_rope)):
        _arr(name, a, (BF16,), 4)
    _arr("latent_cache", latent_cache, (BF16, FP8), 3)
    _arr("rope_cache", rope_cache, (BF16,), 3)
    if (latent_cache.dtype == FP8) != (latent_scale is not None):
        raise ValueError("an FP8 latent_cache needs latent_scale, and a BF16 one takes none")
    if latent_scale is not None:
        _arr("latent_scale", latent_scale, (F32,), 3)
    block_table = _ids("block_table", block_table, 2)
    seqlens = _ids("seqlens", seqlens, 1)
    if q_nope.shape[:3] != q_rope.shape[:3]:
        raise ValueError(f"q_rope must match q_nope's [batch, q_len, heads] {q_nope.shape[:3]}, got {q_rope.shape[:3]}")
    if latent_cache.shape[:2] != rope_cache.shape[:2]:
        raise ValueError("latent_cache and rope_cache must have the same [blocks, block_size]")
    if q_nope.shape[3] != latent_cache.shape[2] or q_rope.shape[3] != rope_cache.shape[2]:
        raise ValueError("q_nope / q_rope widths must match latent_cache / rope_cache")
    if block_table.shape[0] != q_nope.shape[0] or seqlens.shape[0] != q_nope.shape[0]:
        raise ValueError(f"block_table and seqlens must have one row per request ({q_nope.shape[0]})")
    softmax_scale = _real("softmax_scale", softmax_scale, positive=True)
    num_splits = _int("num_splits", num_splits, 1)  # the binding bounds the split buffers by memory
    return _K.mla_decode_absorbed(_bits(q_nope), _bits(q_rope), _bits(latent_cache), latent_scale, _bits(rope_cache),
                                  block_table, seqlens, softmax_scale, num_splits)


MLA_VARIANTS = tuple(_K.MLA_VARIANTS)  # declared once in C++ (csrc/model/mla_variant.hpp), in value order
_MLA_BF16 = ("wq_a", "wq_b", "wkv_a", "wkv_b", "wo")
_MLA_F32 = ("q_norm", "kv_norm")


class MlaCache:
    """One sequence's MLA cache, filled in place by mla_forward: the kv_norm'ed latent BF16
    [capacity, kv_lora] and the rotated rope key BF16 [capacity, rope]; with `decompressed=True`
    (the CD variant) also the per-head keys [capacity, heads, nope + rope] and values
    [capacity, heads, v]. `prefix` counts the tokens already in it."""

    def __init__(self, capacity, kv_lora=512, rope=64, *, decompressed=False, heads=None, nope=128, v=128):
        capacity = _int("capacity", capacity, 1)
        kv_lora, rope = _int("kv_lora", kv_lora, 1), _int("rope", rope, 2)
        decompressed = _bool("decompressed", decompressed)
        if decompressed:
            heads, nope, v = _int("heads", heads, 1), _int("nope", nope, 1), _int("v", v, 1)
        per_token = (kv_lora + rope + (heads * (nope + rope + v) if decompressed else 0)) * 2
        _check_bytes("capacity", capacity * per_token, "the cache (capacity tokens of kv_lora + rope values, and "
                     "heads x (nope + rope + v) when decompressed)")
        self.latent = np.zeros((capacity, kv_lora), BF16)
        self.k_pe = np.zeros((capacity, rope), BF16)
        self.k_full = self.v_full = None
        if decompressed:
            self.k_full = np.zeros((capacity, heads, nope + rope), BF16)
            self.v_full = np.zeros((capacity, heads, v), BF16)
        self.prefix = 0

    @property
    def capacity(self):
        return self.latent.shape[0]

    def _check(self):
        """The arrays the kernels write into and the fill mark (attributes a caller may have
        replaced): a strided or converted array would take the new rows in a temporary copy."""
        _cache_array("cache.latent", self.latent, (BF16,), 2)
        _cache_array("cache.k_pe", self.k_pe, (BF16,), 2)
        _check_decompressed(self, 3)
        return _int("cache.prefix", self.prefix, 0, self.capacity)


def _check_mla_call(variant, x, cache, weights):
    """The checks mla_forward and decode_layer share: variant, x, the cache's kind and room, and
    the materialised products AM_CC_ME needs."""
    if variant not in MLA_VARIANTS:
        raise ValueError(f"variant must be one of {MLA_VARIANTS}, got {variant!r}")
    _arr("x", x, (BF16,), 2)
    if x.shape[0] == 0:
        raise ValueError("x must hold at least one token")
    if not isinstance(cache, MlaCache):
        raise TypeError(f"cache must be an MlaCache, got {type(cache).__name__}")
    cache._check()
    if variant == "CD" and cache.k_full is None:
        raise ValueError("the CD variant needs MlaCache(..., decompressed=True)")
    if variant == "AM_CC_ME" and (not isinstance(weights, dict) or weights.get("q_absorb") is None):
        raise ValueError("AM_CC_ME needs weights['q_absorb'] and ['o_absorb'] (mla_absorb_weights)")
    if cache.prefix + x.shape[0] > cache.capacity:
        raise ValueError(f"cache has room for {cache.capacity - cache.prefix} more tokens, not {x.shape[0]}")


def _mla_weights(weights):
    if not isinstance(weights, dict):
        raise TypeError(f"weights must be a dict of arrays, got {type(weights).__name__}")
    out = {}
    for k in _MLA_BF16:
        if k not in weights:
            raise ValueError(f"weights is missing '{k}'")
        out[k] = _bits(_arr(f"weights['{k}']", weights[k], (BF16,), 2))
    for k in _MLA_F32:
        if k not in weights:
            raise ValueError(f"weights is missing '{k}'")
        out[k] = np.ascontiguousarray(_arr(f"weights['{k}']", weights[k], (F32, BF16), 1), dtype=np.float32)
    if (weights.get("q_absorb") is None) != (weights.get("o_absorb") is None):
        raise ValueError("weights['q_absorb'] and weights['o_absorb'] go together (mla_absorb_weights makes both)")
    for k in ("q_absorb", "o_absorb"):
        if weights.get(k) is not None:
            out[k] = _bits(_arr(f"weights['{k}']", weights[k], (BF16,), 2))
    return out


def mla_prolog(x, weights, positions, *, heads, freqs, nope=128, rope=64, v=128, eps=1e-6, cache=None,
               block_table=None, requests=None):
    """The fused MLA prolog (seed 003) in one call: x BF16 [T, dim] at positions int32 [T] ->
    dict(qa [T, q_lora] (the q_norm output), q_nope [T, heads, nope], q_pe [T, heads, rope] (RoPE'd),
    latent [T, kv_lora] (kv_norm'ed), k_pe [T, rope] (RoPE'd)), all BF16. With a PagedMlaCache,
    block_table and requests (int32 [T], each token's row of the table), the new latent and k_pe are
    also written into the cache at their positions."""
    _arr("x", x, (BF16,), 2)
    positions = _ids("positions", positions, 1)
    _arr("freqs", freqs, (F32,), 1)
    if positions.shape[0] != x.shape[0]:
        raise ValueError(f"positions must have one entry per token of x ({x.shape[0]}), got {positions.shape[0]}")
    if (cache is None) != (block_table is None) or (cache is None) != (requests is None):
        raise ValueError("cache, block_table and requests go together")
    qa, q, latent, k_pe = _K.mla_prolog(_bits(x), _mla_weights(weights), _int("heads", heads, 1), _int("nope", nope, 1),
                                        _int("rope", rope, 2), _int("v", v, 1), _real("eps", eps, minimum=0), positions,
                                        freqs)
    q = q.view(BF16)
    out = dict(qa=qa.view(BF16), q_nope=np.ascontiguousarray(q[..., :nope]), q_pe=np.ascontiguousarray(q[..., nope:]),
               latent=latent.view(BF16), k_pe=k_pe.view(BF16))
    if cache is not None:
        paged_cache_write(cache, block_table, requests, positions, out["latent"], out["k_pe"])
    return out


def mla_absorb_weights(weights, *, heads, nope=128, rope=64, v=128):
    """A copy of weights with the AM_CC_ME products added: q_absorb [heads * kv_lora, q_lora]
    (W_UK^T wq_b_nope per head) and o_absorb [dim, heads * kv_lora] (wo W_UV per head), BF16."""
    w = _mla_weights(weights)
    qa, oa = _K.mla_absorb_weights(w, _int("heads", heads, 1), _int("nope", nope, 1), _int("rope", rope, 2),
                                   _int("v", v, 1))
    return dict(weights, q_absorb=qa.view(BF16), o_absorb=oa.view(BF16))


def mla_forward(variant, x, weights, cache, *, heads, freqs, softmax_scale, nope=128, rope=64, v=128, eps=1e-6):
    """One MLA layer for the tokens x BF16 [T, dim] that follow cache.prefix tokens (prefill: T > 1,
    causal; decode: T = 1), in one of the five execution variants (MLA_VARIANTS). Runs the prolog
    (wq_a -> q_norm -> wq_b -> RoPE; wkv_a -> kv_norm, RoPE'd k_pe), appends the tokens to the
    cache (advancing cache.prefix), attends, and applies wo. weights: wq_a, q_norm, wq_b, wkv_a,
    kv_norm, wkv_b, wo (and q_absorb, o_absorb for AM_CC_ME: see mla_absorb_weights).
    Returns FP32 [T, dim]."""
    _check_mla_call(variant, x, cache, weights)
    _arr("freqs", freqs, (F32,), 1)
    softmax_scale = _real("softmax_scale", softmax_scale, positive=True)
    w = _mla_weights(weights)
    y = _K.mla_forward(variant, _bits(x), w, _int("heads", heads, 1), _int("nope", nope, 1), _int("rope", rope, 2),
                       _int("v", v, 1), _real("eps", eps, minimum=0), freqs, softmax_scale, _bits(cache.latent),
                       _bits(cache.k_pe), None if cache.k_full is None else _bits(cache.k_full),
                       None if cache.v_full is None else _bits(cache.v_full), cache.prefix)
    cache.prefix += x.shape[0]
    return y


def _paged_rows(pages, blocks, n):
    """The first n token rows of a request whose tokens live in `blocks` (a contiguous copy)."""
    return pages[blocks].reshape((-1,) + pages.shape[2:])[:n]


def mla_forward_paged(variant, x, weights, cache, block_table, seqlens, new_tokens, *, heads, freqs, softmax_scale,
                      nope=128, rope=64, v=128, eps=1e-6):
    """mla_forward over a PagedMlaCache for a batch of requests: request b has seqlens[b] tokens in
    the cache (in the blocks its row of block_table lists) and new_tokens[b] new ones, the rows of x
    in request order. Each request's cached rows are gathered into a contiguous MlaCache (an FP8
    latent dequantised to BF16), the variant runs on it, and its new tokens are written back into
    its pages (the FP8 latent quantised per 128 values). The gather copies the request's cache once
    per call - the cost of reusing the contiguous kernels; the absorbed decode path (mla_decode)
    reads the pages in place. CD needs PagedMlaCache(decompressed=True). Returns FP32 [rows, dim];
    the caller advances seqlens."""
    if not isinstance(cache, PagedMlaCache):
        raise TypeError(f"cache must be a PagedMlaCache, got {type(cache).__name__}")
    if variant not in MLA_VARIANTS:
        raise ValueError(f"variant must be one of {MLA_VARIANTS}, got {variant!r}")
    cache._check()
    if variant == "CD" and cache.k_full is None:
        raise ValueError("the CD variant needs PagedMlaCache(..., decompressed=True)")
    _arr("x", x, (BF16,), 2)
    block_table = _ids("block_table", block_table, 2)
    # Token counts in int64: seqlens + new_tokens must not wrap around in int32.
    seqlens = _ids("seqlens", seqlens, 1).astype(np.int64)
    new_tokens = _ids("new_tokens", new_tokens, 1).astype(np.int64)
    B, bs = block_table.shape[0], cache.latent.shape[1]
    if B == 0:
        raise ValueError("block_table must have a row for at least one request")
    if seqlens.shape[0] != B or new_tokens.shape[0] != B:
        raise ValueError(f"seqlens and new_tokens must have one entry per request ({B})")
    if np.any(seqlens < 0) or np.any(new_tokens < 1):
        raise ValueError("seqlens must be >= 0 and new_tokens >= 1")
    if int(new_tokens.sum()) != x.shape[0]:
        raise ValueError(f"x must have sum(new_tokens) = {int(new_tokens.sum())} rows, got {x.shape[0]}")
    need = -(-(seqlens + new_tokens) // bs)
    if np.any(need > block_table.shape[1]):
        raise ValueError(f"seqlens + new_tokens need up to {need.max()} blocks per request; block_table has "
                         f"{block_table.shape[1]}")
    # Each request's rows are gathered into a contiguous cache: a table naming one block many
    # times could ask for more than the paged cache holds.
    _check_bytes("seqlens", int((seqlens + new_tokens).max()) * cache.latent.shape[2] * 4, "a request's gathered cache")
    used = np.concatenate([block_table[b, :need[b]] for b in range(B)])
    if used.size and (used.min() < 0 or used.max() >= cache.latent.shape[0]):
        raise ValueError(f"block_table points outside the cache's {cache.latent.shape[0]} blocks")
    L = cache.latent.shape[2]
    outs, row = [], 0
    for b in range(B):
        P, T = int(seqlens[b]), int(new_tokens[b])
        blocks = block_table[b, :need[b]]
        seq = MlaCache(P + T, L, cache.rope.shape[2], decompressed=cache.k_full is not None,
                       heads=None if cache.k_full is None else cache.k_full.shape[2], nope=nope,
                       v=v if cache.v_full is None else cache.v_full.shape[3])
        if P:
            lat = _paged_rows(cache.latent, blocks, P)
            if cache.latent_scale is not None:
                sc = np.repeat(_paged_rows(cache.latent_scale, blocks, P), 128, axis=1)[:, :L]
                lat = (lat.astype(np.float32) * sc).astype(BF16)
            seq.latent[:P] = lat
            seq.k_pe[:P] = _paged_rows(cache.rope, blocks, P)
            if seq.k_full is not None:
                seq.k_full[:P] = _paged_rows(cache.k_full, blocks, P)
                seq.v_full[:P] = _paged_rows(cache.v_full, blocks, P)
        seq.prefix = P
        y = mla_forward(variant, x[row:row + T], weights, seq, heads=heads, freqs=freqs, softmax_scale=softmax_scale,
                        nope=nope, rope=rope, v=v, eps=eps)
        outs.append(y)
        # The new tokens back into the request's pages.
        pos = np.arange(P, P + T, dtype=np.int32)
        paged_cache_write(cache, block_table, np.full(T, b, np.int32), pos, seq.latent[P:P + T], seq.k_pe[P:P + T])
        if cache.k_full is not None:
            blk, off = block_table[b, pos // bs], pos % bs
            cache.k_full[blk, off] = seq.k_full[P:P + T]
            cache.v_full[blk, off] = seq.v_full[P:P + T]
        row += T
    return np.concatenate(outs)
