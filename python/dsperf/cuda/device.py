"""The GPU itself: availability, device count and name, synchronisation, asynchronous launches and
CUDA graphs."""
from __future__ import annotations

from ._base import *  # noqa: F401,F403  (the binding, dtypes, placement and checks)


def device_count() -> int:
    return int(_G.device_count())


def device_name(device: int = 0) -> str:
    return _G.device_name(A.integer("device", device, 0))


def synchronize(device: int = 0) -> None:
    _G.synchronize(A.integer("device", device, 0))


@contextlib.contextmanager
def async_launches(device: int = 0):
    """Kernels launched inside return without waiting for the GPU (errors may then surface at a
    later call); the block ends by waiting for `device`."""
    before = _G.synchronous()
    _G.set_synchronous(False)
    try:
        yield
        _G.synchronize(device)
    finally:
        _G.set_synchronous(before)


class CudaGraph:
    """Captures a sequence of dsperf.cuda calls into a CUDA graph, replayed with one launch.

        g = CudaGraph()
        with g:                                   # captured, not run
            out, lse = mla_decode(..., metadata=meta, out=(o, l), validate=False)
            y = experts_masked(x, counts, w13, w2, validate=False)
        g.replay()                                # runs them; o, l and y hold the results
        x.set(new_x); g.replay()                  # new inputs, same buffers

    Inside the block only GPU arrays are allowed, nothing may synchronise or copy from or to the
    host, and value checks must be off (validate=False); calls that would do otherwise raise
    RuntimeError. Warm up once before capturing (a plan's device arrays are made on its first
    use). Outputs allocated inside live as long as the graph; the inputs are the caller's to keep.
    Kernels that need scratch memory or always check ids (moe_gate, moe_permute, moe_unpermute) and
    the NCCL exchanges cannot be captured."""

    def __init__(self, device: int = 0):
        self.device = A.integer("device", device, 0)
        self._exec = self._stream = 0
        self._keep = []

    def __enter__(self):
        ok, why = available()
        if not ok:
            raise RuntimeError(f"no CUDA device: {why}")
        if self._exec:
            raise RuntimeError("this CudaGraph holds a capture already; make a new one")
        if _CA._capture_keep is not None:
            raise RuntimeError("a CUDA graph is being captured already")
        self._sync_before = _G.synchronous()
        self._stream = _G.graph_begin_capture(self.device)
        _G.set_synchronous(False)
        _CA._capture_keep = self._keep
        _capturing.active = True
        return self

    def __exit__(self, exc_type, exc, tb):
        _CA._capture_keep = None
        _capturing.active = False
        _G.set_synchronous(self._sync_before)
        try:
            self._exec = _G.graph_end_capture(self._stream, exc_type is not None, self.device)
        except Exception:
            self._stream = 0  # a failed capture takes its stream with it
            raise
        if not self._exec:
            self._stream = 0  # discarded: the stream went with it
        return False

    def replay(self):
        """Runs the captured work (waits for it unless inside async_launches)."""
        if not self._exec:
            raise RuntimeError("nothing captured: use the CudaGraph as a `with` block first")
        _G.graph_launch(self._exec, self._stream, self.device)

    def __del__(self):
        if self._exec or self._stream:
            try:
                _G.graph_destroy(self._exec, self._stream, self.device)
            except Exception:  # interpreter shutdown: nothing left to report to
                pass
