"""MLA on the GPU: decode metadata, paged absorbed decode and causal prefill."""
from __future__ import annotations

from ._base import *  # noqa: F401,F403  (the binding, dtypes, placement and checks)


# ---- MLA decode --------------------------------------------------------------------------------
class MlaMetadata:
    """The plan of a split-KV decode (FlashMLA's tile-scheduler metadata): work items
    (request, first block, end block, split) over blocks of `block_size` tokens, and each request's
    first partial slot. `items` and `split_offsets` are numpy; `on(device)` gives them on a GPU."""

    def __init__(self, items, split_offsets, rows_per_request, block_size):
        self.items, self.split_offsets = items, split_offsets
        self.rows_per_request, self.block_size = rows_per_request, block_size
        self._dev = {}

    @property
    def num_items(self) -> int:
        return int(self.items.shape[0])

    @property
    def num_partials(self) -> int:
        return int(self.split_offsets[-1])

    @property
    def batch(self) -> int:
        return int(self.split_offsets.shape[0] - 1)

    def splits(self) -> np.ndarray:
        return np.diff(self.split_offsets)

    def on(self, device, kv_lora):
        """(items, split_offsets, partial outputs, partial LSEs) on `device`: made once, reused by
        every call with this plan (no allocation, hence no synchronisation, per call)."""
        key = (device, kv_lora)
        if key not in self._dev:
            self._dev[key] = (DeviceArray.from_numpy(self.items, device),
                              DeviceArray.from_numpy(self.split_offsets, device),
                              DeviceArray((self.num_partials, self.rows_per_request, kv_lora), F32, device),
                              DeviceArray((self.num_partials, self.rows_per_request), F32, device))
        return self._dev[key]


def get_mla_metadata(seqlens, q_len, heads, *, num_splits=None, block_size=64, sm_count=None, device=0,
                     variant=None):
    """Plans mla_decode over requests of seqlens[b] tokens (q_len new ones each, heads query
    heads). num_splits: a fixed number of KV splits per request (at most its block count); None
    sizes them so that about two work items per SM exist for the mma.sync kernels, one for the
    Hopper kernel, whose block fills an SM (mla_plan.hpp; sm_count: the GPU's, asked when None). variant: the kernel the plan is for, chosen as mla_decode chooses (None: the Hopper kernel on
    an sm_90 GPU for 64-token blocks). A plan is valid for either kernel; only its speed differs."""
    if isinstance(seqlens, np.ndarray):
        s = A.ids("seqlens", seqlens, 1)
    else:
        d = as_device_array(seqlens, "seqlens")
        _check("seqlens", d, (I32,), 1)
        s = d.numpy()  # planning is host work (FlashMLA's plan is a GPU kernel; here it is cheap)
    q_len, heads = A.integer("q_len", q_len, 1), A.integer("heads", heads, 1)
    block_size = A.integer("block_size", block_size, 1)
    if num_splits is not None:
        num_splits = A.integer("num_splits", num_splits, 1)
    if sm_count is None:
        sm_count = 1 if num_splits is not None else int(_G.sm_count(A.integer("device", device, 0)))
    sm_count = A.integer("sm_count", sm_count, 1)
    if s.size and s.min() < 0:
        raise ValueError(f"seqlens must be >= 0, got {s.min()}")
    # The 64-row decode kernel (the default; DSPERF_MLA_MMA=0 selects the 16-row one) needs more
    # splits to fill the GPU than the 16-row one.
    rows_per_block = 16 if os.environ.get(MLA_MMA_ENV) == "0" else 64
    # The page size is all a plan knows of the Hopper kernel's rules (the widths are mla_decode's).
    fits = not _G.mla_decode_wgmma_block_reason(block_size)
    chosen, _ = _kernel_variant(variant, fits, fits, A.integer("device", device, 0))
    items, offsets = _G.mla_plan(s, block_size, q_len * heads, num_splits or 0, sm_count, rows_per_block,
                                 chosen == "wgmma")
    return MlaMetadata(items, offsets, q_len * heads, block_size)


def _check_mla_wgmma(c, L, R, bs, asked):
    """The Hopper MLA decode's own limits, named as the caller asked for it (argument or environment)."""
    why = _G.mla_decode_wgmma_shape_reason(L, R, bs)
    if why:
        raise ValueError(f"{asked} {why}")
    _require_sm90(c, asked)


def mla_decode(q_nope, q_rope, latent_cache, rope_cache, block_table, seqlens, softmax_scale, metadata=None,
               latent_scale=None, num_splits=None, *, out=None, validate=True, variant=None):
    """Absorbed MLA decode over a paged latent cache, with dsperf.kernels.mla_decode's arguments
    and semantics: q_nope BF16 [B, Q, H, kv_lora], q_rope BF16 [B, Q, H, rope]; latent_cache
    [blocks, block_size, kv_lora] BF16, or FP8 with latent_scale FP32 [blocks, block_size,
    kv_lora/128]; rope_cache BF16 [blocks, block_size, rope]; block_table int32 [B, max_blocks];
    seqlens int32 [B]. metadata: from get_mla_metadata (planned here when None, with num_splits);
    it also holds the partial-result workspace, so one plan serves one call at a time.
    Returns (out FP32 [B, Q, H, kv_lora], lse FP32 [B, Q, H]). GPU arrays only: out = (out, lse)
    preallocated, and validate=False skips the device-side check of seqlens and block ids (a
    synchronisation) -- bad values then read out of bounds instead of raising.

    variant: "mma" (mma.sync kernels, every GPU), "wgmma" (Hopper's wgmma + TMA, sm_90 only; kv_lora
    512, rope 64, block_size 64, BF16 or FP8 cache) or None (the default): "wgmma" on an sm_90 GPU
    for those shapes, else "mma" (DSPERF_CUDA_WGMMA=0 keeps "mma", =1 insists on "wgmma"). On an
    H200 wgmma ran 3.6x the mma.sync kernel at B=128, s=4096, h=128 (docs/CUDA.md)."""
    c = _Call(("q_nope", q_nope), ("q_rope", q_rope), ("latent_cache", latent_cache), ("rope_cache", rope_cache),
              ("block_table", block_table), ("seqlens", seqlens), ("latent_scale", latent_scale))
    for name in ("q_nope", "q_rope"):
        _check(name, c[name], (BF16,), 4)
    _check("latent_cache", c["latent_cache"], (BF16, FP8), 3)
    _check("rope_cache", c["rope_cache"], (BF16,), 3)
    fp8 = c["latent_cache"].dtype == FP8
    if fp8 != (latent_scale is not None):
        raise ValueError("an FP8 latent_cache needs latent_scale, and a BF16 one takes none")
    bt, sl = _ids(c, "block_table", 2), _ids(c, "seqlens", 1)
    B, Q, H, L = c["q_nope"].shape
    R = c["q_rope"].shape[3]
    nblocks, bs, _ = c["latent_cache"].shape
    if c["q_rope"].shape[:3] != (B, Q, H):
        raise ValueError(f"q_rope must match q_nope's [batch, q_len, heads] {(B, Q, H)}, got {c['q_rope'].shape[:3]}")
    if c["rope_cache"].shape[:2] != (nblocks, bs):
        raise ValueError("latent_cache and rope_cache must have the same [blocks, block_size]")
    if L != c["latent_cache"].shape[2] or R != c["rope_cache"].shape[2]:
        raise ValueError("q_nope / q_rope widths must match latent_cache / rope_cache")
    if fp8:
        _check("latent_scale", c["latent_scale"], (F32,), 3)
        if c["latent_scale"].shape != (nblocks, bs, -(-L // 128)):
            raise ValueError(f"latent_scale must have shape {(nblocks, bs, -(-L // 128))}, got "
                             f"{c['latent_scale'].shape}")
    if bt.shape[0] != B or sl.shape[0] != B:
        raise ValueError(f"block_table and seqlens must have one row per request ({B})")
    if L % 16 or not 16 <= L <= 512 or R % 16 or R < 16:
        raise ValueError(f"the GPU kernel needs kv_lora a multiple of 16 in [16, 512] and rope a positive multiple "
                         f"of 16, got {L} and {R}")
    if isinstance(softmax_scale, bool) or not (isinstance(softmax_scale, numbers.Real) and softmax_scale > 0):
        raise ValueError(f"softmax_scale must be a positive number, got {softmax_scale!r}")
    if isinstance(sl, np.ndarray):  # the CPU's value checks for host inputs (GPU inputs: checked there)
        for b in range(B):
            if not Q <= sl[b] <= bt.shape[1] * bs:
                raise ValueError(f"seqlens[{b}] = {sl[b]} must lie in [q_len = {Q}, the block table's "
                                 f"{bt.shape[1] * bs} tokens]")
            used = bt[b, :-(-int(sl[b]) // bs)]
            if used.size and (used.min() < 0 or used.max() >= nblocks):
                raise ValueError(f"block_table[{b}] holds blocks outside the cache's {nblocks}")
    deepseek = not _G.mla_decode_wgmma_shape_reason(L, R, bs)
    chosen, asked = _kernel_variant(variant, deepseek, deepseek, c.device)
    if chosen == "wgmma":
        _check_mla_wgmma(c, L, R, bs, asked)
    if metadata is None:
        metadata = get_mla_metadata(sl if isinstance(sl, np.ndarray) else sl, Q, H, num_splits=num_splits,
                                    block_size=bs, device=c.device, variant=chosen)
    elif not isinstance(metadata, MlaMetadata):
        raise TypeError(f"metadata must come from get_mla_metadata, got {type(metadata).__name__}")
    if metadata.batch != B or metadata.block_size != bs or metadata.rows_per_request != Q * H:
        raise ValueError("metadata was planned for another batch, block size or q_len x heads")
    if out is not None and not (isinstance(out, tuple) and len(out) == 2):
        raise TypeError("out must be a tuple (out, lse)")
    o = _out(c, None if out is None else out[0], (B, Q, H, L), F32, "out[0]")
    lse = _out(c, None if out is None else out[1], (B, Q, H), F32, "out[1]")
    items, offs, part_o, part_lse = metadata.on(c.device, L)
    args = _G.MlaDecodeArgs(
        q_nope=c.dev("q_nope").ptr, q_rope=c.dev("q_rope").ptr, latent=c.dev("latent_cache").ptr,
        latent_scale=_ptr(c.dev("latent_scale")), rope=c.dev("rope_cache").ptr, block_table=c.dev("block_table").ptr,
        seqlens=c.dev("seqlens").ptr, items=items.ptr, split_offsets=offs.ptr, n_items=metadata.num_items,
        n_partials=metadata.num_partials, batch=B, q_len=Q, heads=H, kv_lora=L, rope_dim=R, num_blocks=nblocks,
        block_size=bs, max_blocks=bt.shape[1], softmax_scale=float(softmax_scale), out=o.ptr, lse=lse.ptr,
        part_out=part_o.ptr, part_lse=part_lse.ptr, check_values=bool(validate) or not c.on_device)
    (_G.mla_decode_wgmma if chosen == "wgmma" else _G.mla_decode)(args, c.device)
    return c.out(o), c.out(lse)


# ---- MLA prefill -------------------------------------------------------------------------------
def mla_prefill(q, k, v, softmax_scale):
    """Non-absorbed causal MLA attention of one sequence (prefill): q BF16 [q_len, heads, dqk]
    (nope | rope per head), k BF16 [kv_len, heads, dqk] (k_nope | the shared k_pe broadcast), v BF16
    [kv_len, heads, dv]; query t sits at position kv_len - q_len + t and sees keys up to it (a
    cached prefix of kv_len - q_len tokens comes first). Returns (out FP32 [q_len, heads, dv],
    lse FP32 [q_len, heads]). Probabilities are rounded to BF16 for the value product."""
    c = _Call(("q", q), ("k", k), ("v", v))
    for name in ("q", "k", "v"):
        _check(name, c[name], (BF16,), 3)
    T, H, dqk = c["q"].shape
    S = c["k"].shape[0]
    if c["k"].shape != (S, H, dqk):
        raise ValueError(f"k must be [kv_len, heads = {H}, {dqk}], got {c['k'].shape}")
    if c["v"].shape[:2] != (S, H):
        raise ValueError(f"v must be [kv_len = {S}, heads = {H}, dv], got {c['v'].shape}")
    dv = c["v"].shape[2]
    if S < T:
        raise ValueError(f"k must hold at least the {T} query tokens, got {S}")
    if dqk % 16 or not 16 <= dqk <= 256 or dv % 16 or not 16 <= dv <= 128:
        raise ValueError(f"the GPU kernel needs dqk a multiple of 16 in [16, 256] and dv a multiple of 16 in "
                         f"[16, 128], got {dqk} and {dv}")
    if isinstance(softmax_scale, bool) or not (isinstance(softmax_scale, numbers.Real) and softmax_scale > 0):
        raise ValueError(f"softmax_scale must be a positive number, got {softmax_scale!r}")
    c.require_gpu()
    out, lse = c.new((T, H, dv), F32), c.new((T, H), F32)
    args = _G.MlaPrefillArgs(q=c.dev("q").ptr, k=c.dev("k").ptr, v=c.dev("v").ptr, q_len=T, kv_len=S, heads=H,
                             dqk=dqk, dv=dv, softmax_scale=float(softmax_scale), out=out.ptr, lse=lse.ptr)
    _G.mla_prefill(args, c.device)
    return c.out(out), c.out(lse)
