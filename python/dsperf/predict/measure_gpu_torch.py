"""dsperf measure-gpu, its real timer: each family's production kernel (and dsperf's own) run through
PyTorch on the GPU at hand (TorchTimer), timed as dsperf.predict.gpu_timing times kernels."""
from __future__ import annotations

import datetime
import math

import numpy as np

from .measure_gpu_plan import DSPERF_FAMILIES, KERNEL_TEXT, MLA_PAGE, Measurement, Shape, prefill_keys


# ---- the real timer ----------------------------------------------------------------------------------
def _tiled(shape, dtype, rng, scale=1.0):
    """Random values for dsperf's numpy-staged inputs, a 1M-value block tiled over the shape (the
    kernels' speed does not depend on the values)."""
    block = np.clip(rng.standard_normal(1 << 20) * scale, -448.0, 448.0).astype(np.float32).astype(dtype)
    return np.resize(block, shape)


class TorchTimer:
    """Times shapes on GPU 0 through PyTorch (and FlashInfer, and dsperf.cuda, where present)."""

    def __init__(self, torch):
        from .gpu_timing import flush_kernel_names

        self.torch = torch
        props = torch.cuda.get_device_properties(0)
        self.flush = torch.empty(props.L2_cache_size, dtype=torch.int32, device="cuda")  # 4 B each: 4x the L2
        self.flush_kernels = flush_kernel_names(torch, self.flush)
        self.one = torch.ones((), dtype=torch.float32, device="cuda")
        self._kernel_text = {}

    def environment(self) -> dict:
        t = self.torch
        env = {"gpu": t.cuda.get_device_name(0), "torch": t.__version__.split("+")[0], "cuda": t.version.cuda,
               "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
               "kernel_text": dict(self._kernel_text)}
        try:
            import flashinfer
            env["flashinfer"] = getattr(flashinfer, "__version__", "?")
        except Exception:  # noqa: BLE001 - optional
            pass
        return env

    def available(self) -> dict:
        """(family, kernel) -> None where it can run here, else why not."""
        t = self.torch
        out = {}
        major, minor = t.cuda.get_device_capability(0)
        fp8 = (major, minor) >= (8, 9) and hasattr(t, "float8_e4m3fn") and hasattr(t, "_scaled_mm")
        out[("gemm_fp8", "production")] = None if fp8 else "no FP8 GEMM (needs sm_89+ and torch._scaled_mm)"
        out[("gemm_bf16", "production")] = out[("elementwise", "production")] = None
        grouped = None
        if not hasattr(t, "_scaled_grouped_mm"):
            grouped = (f"torch {t.__version__} has no torch._scaled_grouped_mm (a production grouped FP8 GEMM); a loop "
                       "of per-expert GEMMs would not be one")
        elif major < 9:
            grouped = "torch._scaled_grouped_mm needs sm_90 or newer"
        out[("grouped_masked", "production")] = out[("grouped_contiguous", "production")] = grouped
        try:
            import flashinfer  # noqa: F401
            import flashinfer.mla  # noqa: F401
            out[("mla_decode", "production")] = None
            self._kernel_text[("mla_decode", "production")] = (
                KERNEL_TEXT[("mla_decode", "production")].replace("flashinfer ", f"flashinfer {flashinfer.__version__} "))
        except Exception as e:  # noqa: BLE001 - any import failure means no FlashInfer here
            out[("mla_decode", "production")] = f"flashinfer is not importable here ({type(e).__name__}: {e})"
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: F401
            out[("mla_prefill", "production")] = None
        except ImportError:
            out[("mla_prefill", "production")] = f"torch {t.__version__} has no torch.nn.attention.sdpa_kernel"
        try:
            from .. import cuda
            ok, why = cuda.available()
        except Exception as e:  # noqa: BLE001
            ok, why = False, f"{type(e).__name__}: {e}"
        for fam in DSPERF_FAMILIES:
            out[(fam, "dsperf")] = None if ok else f"dsperf's CUDA kernels are not usable: {why}"
        return out

    def _check_memory(self, shape: Shape):
        free, _ = self.torch.cuda.mem_get_info(0)
        need = shape.input_bytes() * 1.2
        if need > free:
            raise MemoryError(f"needs about {need / 1e9:.1f} GB, {free / 1e9:.1f} GB free")

    def measure(self, shape: Shape, iters: int) -> Measurement:
        from .gpu_timing import kernel_times, time_us

        self._check_memory(shape)
        build = getattr(self, f"_{shape.kernel}_{shape.family}")
        fn, keep = build(shape)
        try:
            us, names = kernel_times(self.torch, fn, iters, self.flush, self.flush_kernels)
            event = time_us(self.torch, fn, iters, self.flush)
            if shape.family == "mla_prefill" and names:
                self._kernel_text[(shape.family, shape.kernel)] = (
                    f"{KERNEL_TEXT[(shape.family, shape.kernel)]}, fused backend {_sdpa_backend(names[0])}")
        finally:
            del keep
            self.torch.cuda.synchronize()
            self.torch.cuda.empty_cache()
        return Measurement(us, event, tuple(names))

    # production kernels: each builder returns (the call, the tensors it must keep alive)
    def _production_gemm_fp8(self, s):
        t = self.torch
        a = t.randn(s.get("m"), s.get("k"), device="cuda", dtype=t.bfloat16).to(t.float8_e4m3fn)
        b = (t.randn(s.get("n"), s.get("k"), device="cuda", dtype=t.bfloat16) * 0.05).to(t.float8_e4m3fn)
        one = self.one
        return (lambda: t._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=t.bfloat16)), (a, b)

    def _production_gemm_bf16(self, s):
        t = self.torch
        e = s.get("groups", 1)
        if e > 1:  # a per-head GEMM (MLA's absorbed projections): one batched cuBLAS call
            a = t.randn(e, s.get("m"), s.get("k"), device="cuda", dtype=t.bfloat16)
            b = t.randn(e, s.get("k"), s.get("n"), device="cuda", dtype=t.bfloat16) * 0.05
            return (lambda: t.bmm(a, b)), (a, b)
        a = t.randn(s.get("m"), s.get("k"), device="cuda", dtype=t.bfloat16)
        b = t.randn(s.get("n"), s.get("k"), device="cuda", dtype=t.bfloat16) * 0.05
        return (lambda: a @ b.t()), (a, b)

    def _production_elementwise(self, s):
        t = self.torch
        n = max(1, int(s.get("bytes")) // 4)  # BF16 values: half the bytes read, half written
        x = t.randn(n, device="cuda", dtype=t.bfloat16)
        y = t.empty_like(x)
        return (lambda: t.mul(x, 2.0, out=y)), (x, y)

    def _grouped_operands(self, s):
        t = self.torch
        e, m, n, k = s.get("groups"), s.get("m"), s.get("n"), s.get("k")
        a = t.randn(e, m, k, device="cuda", dtype=t.bfloat16).to(t.float8_e4m3fn)
        b = (t.randn(e, n, k, device="cuda", dtype=t.bfloat16) * 0.05).to(t.float8_e4m3fn)
        return e, m, n, k, a, b

    def _production_grouped_masked(self, s):
        t = self.torch
        e, m, n, k, a, b = self._grouped_operands(s)
        sa = t.ones(e, m, device="cuda", dtype=t.float32)
        sb = t.ones(e, n, device="cuda", dtype=t.float32)
        bt = b.transpose(-2, -1)  # column-major B, as the kernel wants it
        return (lambda: t._scaled_grouped_mm(a, bt, sa, sb, out_dtype=t.bfloat16)), (a, b, sa, sb)

    def _production_grouped_contiguous(self, s):
        t = self.torch
        e, m, n, k, a, b = self._grouped_operands(s)
        a2 = a.reshape(e * m, k)
        offs = (t.arange(1, e + 1, device="cuda", dtype=t.int32) * m)
        sa = t.ones(e * m, device="cuda", dtype=t.float32)
        sb = t.ones(e, n, device="cuda", dtype=t.float32)
        bt = b.transpose(-2, -1)
        return (lambda: t._scaled_grouped_mm(a2, bt, sa, sb, offs=offs, out_dtype=t.bfloat16)), (a, b, sa, sb, offs)

    def _production_mla_decode(self, s):
        import flashinfer

        t = self.torch
        bsz, kv, heads, q_len = s.get("batch"), s.get("kv_len"), s.get("heads"), s.get("q_len", 1)
        pages = math.ceil(kv / MLA_PAGE)
        ckv = t.randn(bsz * pages, MLA_PAGE, 512, device="cuda", dtype=t.bfloat16)
        kpe = t.randn(bsz * pages, MLA_PAGE, 64, device="cuda", dtype=t.bfloat16)
        q_nope = t.randn(bsz * q_len, heads, 512, device="cuda", dtype=t.bfloat16) * 0.05
        q_pe = t.randn(bsz * q_len, heads, 64, device="cuda", dtype=t.bfloat16) * 0.05
        qo_indptr = t.arange(bsz + 1, device="cuda", dtype=t.int32) * q_len
        kv_indptr = t.arange(bsz + 1, device="cuda", dtype=t.int32) * pages
        kv_indices = t.arange(bsz * pages, device="cuda", dtype=t.int32)
        kv_lens = t.full((bsz,), kv, device="cuda", dtype=t.int32)
        workspace = t.empty(128 << 20, dtype=t.int8, device="cuda")
        wrapper = flashinfer.mla.BatchMLAPagedAttentionWrapper(workspace, backend="auto")
        wrapper.plan(qo_indptr, kv_indptr, kv_indices, kv_lens, heads, 512, 64, MLA_PAGE, False, 192 ** -0.5,
                     t.bfloat16, t.bfloat16)
        out = t.empty(bsz * q_len, heads, 512, device="cuda", dtype=t.bfloat16)
        return (lambda: wrapper.run(q_nope, q_pe, ckv, kpe, out=out)), (ckv, kpe, q_nope, q_pe, workspace, wrapper, out)

    def _production_mla_prefill(self, s):
        t = self.torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
        import torch.nn.functional as F

        tokens, heads, keys = prefill_keys(s)
        q = t.randn(1, heads, tokens, 192, device="cuda", dtype=t.bfloat16)
        k = t.randn(1, heads, keys, 192, device="cuda", dtype=t.bfloat16)
        v = t.randn(1, heads, keys, 128, device="cuda", dtype=t.bfloat16)
        backends = [getattr(SDPBackend, b) for b in ("CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION")
                    if hasattr(SDPBackend, b)]
        # New tokens after a cached prefix attend to the whole prefix and causally among themselves:
        # the causal mask aligned to the last key (is_causal aligns it to the first).
        mask = None
        if keys > tokens:
            from torch.nn.attention.bias import causal_lower_right
            mask = causal_lower_right(tokens, keys)

        def call():
            with sdpa_kernel(backends):  # the unfused math path is not a production kernel: refused
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None,
                                                      scale=192 ** -0.5)
        return call, (q, k, v)

    # dsperf's own kernels, on its DeviceArrays (staged from numpy as gpu_validate.py does)
    def _dsperf_grouped(self, s, masked: bool):
        from .. import cuda
        from ..cuda import FP8, DeviceArray

        rng = np.random.default_rng(0)
        e, m, n, k = s.get("groups"), s.get("m"), s.get("n"), s.get("k")
        kb, nb = -(-k // 128), -(-n // 128)
        a_shape = (e, m, k) if masked else (e * m, k)
        a = DeviceArray.from_numpy(_tiled(a_shape, FP8, rng, 100.0))
        a_s = DeviceArray.from_numpy(np.full(a_shape[:-1] + (kb,), 1e-2, np.float32))
        b = DeviceArray.from_numpy(_tiled((e, n, k), FP8, rng, 100.0))
        b_s = DeviceArray.from_numpy(np.full((e, nb, kb), 1e-2, np.float32))
        out = DeviceArray(a_shape[:-1] + (n,), np.float32)
        if masked:
            counts = DeviceArray.from_numpy(np.full(e, m, np.int32))
            fn = lambda: cuda.grouped_gemm(a, b, counts=counts, a_scale=a_s, b_scale=b_s, out=out,  # noqa: E731
                                           validate=False)
            keep = (a, a_s, b, b_s, out, counts)
        else:
            offs = DeviceArray.from_numpy(np.arange(e + 1, dtype=np.int64) * m)
            fn = lambda: cuda.grouped_gemm(a, b, offsets=offs, a_scale=a_s, b_scale=b_s, out=out,  # noqa: E731
                                           validate=False)
            keep = (a, a_s, b, b_s, out, offs)
        return fn, keep

    def _dsperf_grouped_masked(self, s):
        return self._dsperf_grouped(s, True)

    def _dsperf_grouped_contiguous(self, s):
        return self._dsperf_grouped(s, False)

    def _dsperf_mla_decode(self, s):
        from .. import cuda
        from ..cuda import BF16, DeviceArray

        rng = np.random.default_rng(0)
        bsz, kv, heads, q_len = s.get("batch"), s.get("kv_len"), s.get("heads"), s.get("q_len", 1)
        pages = math.ceil(kv / MLA_PAGE)
        latent = DeviceArray.from_numpy(_tiled((bsz * pages, MLA_PAGE, 512), BF16, rng))
        rope = DeviceArray.from_numpy(_tiled((bsz * pages, MLA_PAGE, 64), BF16, rng))
        table = DeviceArray.from_numpy(np.arange(bsz * pages, dtype=np.int32).reshape(bsz, pages))
        lens = DeviceArray.from_numpy(np.full(bsz, kv, np.int32))
        q = (DeviceArray.from_numpy(_tiled((bsz, q_len, heads, 512), BF16, rng, 0.05)),
             DeviceArray.from_numpy(_tiled((bsz, q_len, heads, 64), BF16, rng, 0.05)))
        out = (DeviceArray((bsz, q_len, heads, 512), np.float32), DeviceArray((bsz, q_len, heads), np.float32))
        meta = cuda.get_mla_metadata(lens, q_len, heads)
        fn = lambda: cuda.mla_decode(*q, latent, rope, table, lens, 192 ** -0.5, meta, out=out,  # noqa: E731
                                     validate=False)
        return fn, (latent, rope, table, lens, q, out, meta)


def _sdpa_backend(kernel_name: str) -> str:
    name = kernel_name.lower()
    for key, label in (("cudnn", "cuDNN"), ("flash", "FlashAttention"), ("fmha", "memory-efficient (fmha)"),
                       ("efficient", "memory-efficient")):
        if key in name:
            return label
    return f"kernel {kernel_name[:60]}"
