"""The fake CUDA device of tests/test_cuda_fake.py: host memory standing in for GPU memory and the
CPU kernels for the CUDA ones, behind the binding's exact signatures (FakeG), and the fixture that
swaps it in (install_fake / fake)."""
import ctypes
import sys

import numpy as np
import pytest

from dsperf import _C, kernels as K
from dsperf.cuda_array import BF16, FP8, DeviceArray
from kernel_helpers import f32

REAL = _C.cuda


def view(ptr, shape, dtype):
    """A numpy view of fake device memory at ptr."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if n == 0:
        return np.zeros(shape, dtype)
    buf = (ctypes.c_char * n).from_address(ptr)
    return np.frombuffer(buf, dtype).reshape(shape)


class FakeAllocation:
    def __init__(self, nbytes, device):
        self._buf = np.zeros(max(nbytes, 1) + 16, np.uint8)
        self.ptr = 0 if nbytes == 0 else (self._buf.ctypes.data + 15) // 16 * 16  # 16-byte aligned
        self.nbytes, self.device = nbytes, device


# The argument structs are bound in every build (plain C++): the fake takes the real classes, so a
# call that fills a misspelt or missing field fails here as it would on a GPU.
GemmLayout = REAL.GemmLayout


class FakeG:
    """The binding's surface with host memory and the CPU kernels."""

    def __init__(self, devices=2, cc=80):
        self.devices = devices
        # sm_80 unless a test asks for Hopper: on sm_90 calls whose inputs fit take the wgmma kernels
        # by default (tests/test_cuda_hopper.py's fixture), and these tests cover the mma.sync plumbing.
        self.cc = cc
        self.calls = []
        self.recording = None  # a list while a "graph" is captured
        self.graphs = {}
        self.sync = True
        self.last = {}  # kernel name -> the argument struct of its last call

    # availability and memory
    def built_with_cuda(self): return True
    def why_unavailable(self): return ""
    def device_count(self): return self.devices
    def sm_count(self, d): return 8
    def compute_capability(self, d): return self.cc
    def device_name(self, d): return "fake"
    def synchronize(self, d): pass
    def set_synchronous(self, on): self.sync = on
    def synchronous(self): return self.sync
    def pointer_device(self, p): return 0
    Allocation = FakeAllocation
    dlpack_export = staticmethod(REAL.dlpack_export)
    dlpack_import = staticmethod(REAL.dlpack_import)
    mla_plan = staticmethod(REAL.mla_plan)
    # The Hopper kernels' input rules are plain C++, bound in every build: the real ones.
    grouped_gemm_wgmma_operands_reason = staticmethod(REAL.grouped_gemm_wgmma_operands_reason)
    grouped_gemm_wgmma_k_reason = staticmethod(REAL.grouped_gemm_wgmma_k_reason)
    mla_decode_wgmma_shape_reason = staticmethod(REAL.mla_decode_wgmma_shape_reason)
    mla_decode_wgmma_block_reason = staticmethod(REAL.mla_decode_wgmma_block_reason)
    GemmLayout = REAL.GemmLayout
    GroupedGemmArgs = REAL.GroupedGemmArgs
    MlaDecodeArgs = REAL.MlaDecodeArgs
    MlaPrefillArgs = REAL.MlaPrefillArgs
    AllToAllPart = REAL.AllToAllPart

    def copy_to_device(self, dst, src, n, d): ctypes.memmove(dst, src, n)
    def copy_to_host(self, dst, src, n, d): ctypes.memmove(dst, src, n)

    def _run(self, name, fn):
        self.calls.append(name)
        if self.recording is not None:
            self.recording.append(fn)  # a captured graph runs its work at replay
        else:
            fn()

    def copy_on_device(self, dst, src, n, d): self._run("copy", lambda: ctypes.memmove(dst, src, n))
    def fill_zero(self, p, n, d): self._run("fill_zero", lambda: ctypes.memset(p, 0, n))

    # kernels: the CPU twins on views of the fake memory
    def rmsnorm(self, x, w, y, rows, dim, eps, d):
        def go():
            view(y, (rows, dim), np.float32)[:] = K.rmsnorm(view(x, (rows, dim), np.float32),
                                                            view(w, (dim,), np.float32).copy(), eps)
        self._run("rmsnorm", go)

    def silu_mul(self, gu, out, rows, inter, d):
        def go():
            view(out, (rows, inter), BF16)[:] = K.silu_mul(view(gu, (rows, 2 * inter), np.float32).copy())
        self._run("silu_mul", go)

    def act_quant(self, x, rows, dim, q, s, d):
        def go():
            qq, ss = K.act_quant(view(x, (rows, dim), BF16).copy())
            view(q, (rows, dim), FP8)[:] = qq
            view(s, (rows, -(-dim // 128)), np.float32)[:] = ss
        self._run("act_quant", go)

    def rope_bf16(self, x, tokens, heads, ld_token, ld_head, pos, freqs, rope_dim, d):
        assert ld_head == rope_dim and ld_token == heads * rope_dim
        def go():
            a = view(x, (tokens, heads, rope_dim), BF16)
            a[:] = K.apply_rope(a.copy(), view(pos, (tokens,), np.int32).copy(),
                                view(freqs, (rope_dim // 2,), np.float32).copy())
        self._run("rope", go)

    def moe_gate(self, logits, T, E, bias, config, w, ids, d):
        def go():
            b = None if bias == 0 else view(bias, (E,), np.float32).copy()
            ww, ii = K._K.moe_gate(view(logits, (T, E), np.float32).copy(), b, config)
            view(w, (T, config.top_k), np.float32)[:] = ww
            view(ids, (T, config.top_k), np.int32)[:] = ii
        self._run("moe_gate", go)

    def moe_permute(self, x, tokens, row_bytes, source, rows, out, d):
        def go():
            src = view(source, (rows,), np.int32)
            assert src.size == 0 or (src.min() >= 0 and src.max() < tokens)
            view(out, (rows, row_bytes), np.uint8)[:] = view(x, (tokens, row_bytes), np.uint8)[src]
        self._run("moe_permute", go)

    def moe_unpermute(self, y, rows, dim, position, weights, T, Kk, out, d):
        def go():
            view(out, (T, dim), np.float32)[:] = K.moe_unpermute(view(y, (rows, dim), np.float32).copy(),
                                                                 view(position, (T, Kk), np.int32).copy(),
                                                                 view(weights, (T, Kk), np.float32).copy())
        self._run("moe_unpermute", go)

    def grouped_gemm_wgmma(self, g, d):
        # The Hopper kernels' contract is grouped_gemm's, within their input rules (the front checked them).
        fp8 = bool(g.a_scale)
        assert not REAL.grouped_gemm_wgmma_operands_reason(fp8, bool(g.b_scale))
        assert not REAL.grouped_gemm_wgmma_k_reason(fp8, g.K)
        self.grouped_gemm(g, d, name="grouped_gemm_wgmma")

    def wgmma_unsupported_reason(self, d):
        return "" if self.compute_capability(d) == 90 else f"GPU {d} is sm_{self.compute_capability(d)}"

    def grouped_gemm(self, g, d, name="grouped_gemm"):
        assert isinstance(g, REAL.GroupedGemmArgs) and isinstance(g.layout, GemmLayout)
        self.last[name] = g
        a, a_scale, b, b_scale, c, offsets, counts = g.a, g.a_scale, g.b, g.b_scale, g.c, g.offsets, g.counts
        M, N, Kd, E, capacity = g.M, g.N, g.K, g.E, g.capacity
        masked = g.layout == GemmLayout.Masked
        assert (offsets == 0) == masked and (counts == 0) != masked  # the layout's one index array
        assert M == (E * capacity if masked else M) and (capacity == 0 or masked)
        def go():
            fp8_a, fp8_b = a_scale != 0, b_scale != 0
            A = f32(view(a, (M, Kd), FP8 if fp8_a else BF16))
            B = f32(view(b, (E, N, Kd), FP8 if fp8_b else BF16))
            kb, nb = -(-Kd // 128), -(-N // 128)
            if fp8_b:
                s = view(b_scale, (E, nb, kb), np.float32)
                B = B * np.repeat(np.repeat(s, 128, 1), 128, 2)[:, :N, :Kd]
                if not fp8_a:
                    B = f32(B.astype(BF16))  # the CPU experts' BF16 dequantisation
            if fp8_a:
                A = A * np.repeat(view(a_scale, (M, kb), np.float32), 128, 1)[:, :Kd]
            C = view(c, (M, N), np.float32)
            if masked:
                cnt = view(counts, (E,), np.int32)
                C[:] = 0
                rng = [(e * capacity, e * capacity + cnt[e]) for e in range(E)]
            else:
                o = view(offsets, (E + 1,), np.int64)
                rng = [(o[e], o[e + 1]) for e in range(E)]
            for e, (r0, r1) in enumerate(rng):
                C[r0:r1] = A[r0:r1] @ B[e].T
        self._run(name, go)

    def cublas_why_unavailable(self): return ""

    def cublas_gemm_bf16(self, a, b, c, M, N, Kd, batch, sa, sb, sc, d):
        assert (sa, sb, sc) == (M * Kd, N * Kd, M * N)
        def go():
            view(c, (batch, M, N), np.float32)[:] = np.einsum("bmk,bnk->bmn", f32(view(a, (batch, M, Kd), BF16)),
                                                              f32(view(b, (batch, N, Kd), BF16)))
        self._run("cublas", go)

    def mla_decode_wgmma(self, a, d):
        # The Hopper kernel's contract is mla_decode's, for DeepSeek's shapes only (BF16 or FP8 cache).
        assert (a.kv_lora, a.rope_dim, a.block_size) == (512, 64, 64)
        self.mla_decode(a, d, name="mla_decode_wgmma")

    def mla_decode(self, a, d, name="mla_decode"):
        assert isinstance(a, REAL.MlaDecodeArgs)
        self.last[name] = a
        qn, qr, lat, lat_s, rope, bt, sl = a.q_nope, a.q_rope, a.latent, a.latent_scale, a.rope, a.block_table, a.seqlens
        items, offs, n_items, n_part = a.items, a.split_offsets, a.n_items, a.n_partials
        B, Q, H, L, R, nblocks, bs = a.batch, a.q_len, a.heads, a.kv_lora, a.rope_dim, a.num_blocks, a.block_size
        max_blocks, scale, out, lse = a.max_blocks, a.softmax_scale, a.out, a.lse
        assert a.part_out and a.part_lse  # the plan's workspace is always passed
        assert isinstance(scale, float) and isinstance(a.check_values, bool)
        def go():
            self.last_items = view(items, (n_items, 4), np.int32).copy()
            self.last_offsets = view(offs, (B + 1,), np.int32).copy()
            assert self.last_offsets[-1] == n_part
            fp8 = lat_s != 0
            o, ls = K.mla_decode(view(qn, (B, Q, H, L), BF16).copy(), view(qr, (B, Q, H, R), BF16).copy(),
                                 view(lat, (nblocks, bs, L), FP8 if fp8 else BF16).copy(),
                                 view(rope, (nblocks, bs, R), BF16).copy(), view(bt, (B, max_blocks), np.int32).copy(),
                                 view(sl, (B,), np.int32).copy(), scale,
                                 latent_scale=view(lat_s, (nblocks, bs, -(-L // 128)), np.float32).copy() if fp8
                                 else None)
            view(out, (B, Q, H, L), np.float32)[:] = o
            view(lse, (B, Q, H), np.float32)[:] = ls
        self._run(name, go)

    def mla_prefill(self, p, d):
        assert isinstance(p, REAL.MlaPrefillArgs)
        self.last["mla_prefill"] = p
        q, k, v, T, S, H, dqk, dv, scale, out, lse = (p.q, p.k, p.v, p.q_len, p.kv_len, p.heads, p.dqk, p.dv,
                                                      p.softmax_scale, p.out, p.lse)
        def go():
            qq, kk, vv = (f32(view(p, (n, H, w), BF16)) for p, n, w in ((q, T, dqk), (k, S, dqk), (v, S, dv)))
            s = np.einsum("thd,shd->hts", qq, kk) * scale
            s = np.where((np.arange(S)[None, :] <= S - T + np.arange(T)[:, None])[None], s, -np.inf)
            m = s.max(-1, keepdims=True)
            p = np.exp(s - m)
            view(out, (T, H, dv), np.float32)[:] = np.einsum("hts,shd->thd", p / p.sum(-1, keepdims=True), vv)
            view(lse, (T, H), np.float32)[:] = (m[..., 0] + np.log(p.sum(-1))).T
        self._run("mla_prefill", go)

    # NCCL: every rank in this process; alltoallv moves bytes between the fake buffers.
    def nccl_why_unavailable(self): return ""
    def nccl_init_all(self, devices): return [1000 + d for d in devices]
    def nccl_destroy(self, comm): pass

    def nccl_alltoallv(self, parts, row_bytes):
        self.calls.append("alltoallv")
        by_rank = {p.comm - 1000: p for p in parts}
        for r, s in by_rank.items():
            for peer, d in by_rank.items():
                n = s.send_counts[peer]
                assert n == d.recv_counts[r], f"rank {r} sends {n} rows to {peer}, which expects {d.recv_counts[r]}"
                if n:
                    ctypes.memmove(d.recv + d.recv_offsets[r] * row_bytes, s.send + s.send_offsets[peer] * row_bytes,
                                   n * row_bytes)

    # graphs: captured calls are recorded, replay runs them
    def graph_begin_capture(self, d):
        self.recording = []
        return 7

    def graph_end_capture(self, stream, discard, d):
        work, self.recording = self.recording, None
        if discard:
            return 0
        self.graphs[99] = work
        return 99

    def graph_launch(self, exec_, stream, d):
        for fn in self.graphs[exec_]:
            fn()

    def graph_destroy(self, exec_, stream, d): pass


def install_fake(monkeypatch) -> "FakeG":
    """A FakeG in place of the CUDA binding in every dsperf.cuda module that holds it (the family
    modules, arrays, nccl): the one place the tests swap the device."""
    g = FakeG()
    for mod in [m for name, m in list(sys.modules.items()) if name.startswith("dsperf.cuda") and hasattr(m, "_G")]:
        monkeypatch.setattr(mod, "_G", g)
    return g


@pytest.fixture
def fake(monkeypatch):
    return install_fake(monkeypatch)


def dev(a, device=0):
    return DeviceArray.from_numpy(a, device)
