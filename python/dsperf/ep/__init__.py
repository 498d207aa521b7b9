"""Expert parallelism across processes: EPLB (no MPI needed), and, over MPI (mpi4py), all-to-all
dispatch/combine in DeepEP's normal and low-latency layouts, an EP MoE layer and two-batch overlap.
One dispatch/combine (routed.py) over a transport interface (transport.py: MPI, simulated; NCCL in
dsperf.cuda.nccl), one plan and handle (plan.py), and the shared-memory window exchange
(exchange.py) as the tuned intranode path with the same plan and handle.

    mpirun -np 4 python -m dsperf.ep.bench [--quick]

See docs/EP.md. The MPI parts import mpi4py when first used, so `import dsperf.ep` works without it.
"""
from .eplb import EplbPlan, imbalance, rebalance, zipf_load


def mpi_available() -> tuple[bool, str]:
    """(True, "") when mpi4py imports and MPI initialises, else (False, the reason)."""
    try:
        from mpi4py import MPI  # noqa: F401
    except Exception as exc:  # ImportError, or a RuntimeError from a broken MPI library
        return False, f"mpi4py/MPI unavailable: {exc}"
    return True, ""


def __getattr__(name):
    # The MPI-backed parts load on first use.
    if name in ("EpComm", "choose_exchange"):
        from . import comm
        return getattr(comm, name)
    if name == "WindowEpComm":
        from . import exchange
        return exchange.WindowEpComm
    if name == "ExchangeHandle":
        from .plan import ExchangeHandle
        return ExchangeHandle
    if name in ("Transport", "SimulatedTransport", "MpiTransport"):
        from . import transport
        return getattr(transport, name)
    if name in ("AlltoallvEpComm", "DispatchHandle", "LowLatencyHandle", "raw_alltoallv"):
        from . import alltoall
        return getattr(alltoall, name)
    if name in ("EpMoeLayer", "ep_moe_layer"):
        from . import layer
        return getattr(layer, name)
    if name == "loopback":
        from .bench import loopback
        return loopback
    raise AttributeError(f"module 'dsperf.ep' has no attribute {name!r}")
