"""EpComm: the expert-parallel exchange for a communicator, chosen from its node layout.

    ep = EpComm(num_experts, hidden, comm=comm, max_tokens=..., exchange="auto")

exchange="auto" (the default): "window" when every rank shares memory with every other (one node:
dispatch/combine through MPI-3 shared-memory windows, exchange.WindowEpComm); "hierarchical" across
nodes of equal size (windows inside each node, MPI_Alltoallv between them, once per destination
node); else "alltoallv" (MPI_Ialltoallv and point-to-point messages, alltoall.AlltoallvEpComm, the
previous exchange). exchange="window", "hierarchical" or "alltoallv" forces one; nodes=n (or DSPERF_EP_NODES=n)
splits the ranks into n pretend nodes of consecutive ranks, so one machine runs the multi-node
choice. Every rank must pass the same arguments (collective).
"""
from __future__ import annotations

EXCHANGES = ("auto", "window", "hierarchical", "alltoallv")


def choose_exchange(comm, exchange="auto", nodes=None):
    """(the exchange EpComm builds for comm: "window", "hierarchical" or "alltoallv", the node of
    every rank). Collective."""
    import numpy as np

    from .window import node_layout
    if exchange not in EXCHANGES:
        raise ValueError(f"exchange must be one of {', '.join(map(repr, EXCHANGES))}, got {exchange!r}")
    node, _ = node_layout(comm, nodes)
    spans = int(node.max()) + 1
    even = bool(np.all(np.bincount(node) == np.bincount(node)[0]))
    if exchange == "window" and spans > 1:
        raise ValueError(f"exchange='window' needs every rank on one node; the ranks span {spans} nodes")
    if exchange == "hierarchical" and not even:
        raise ValueError(f"exchange='hierarchical' needs the same number of ranks on every node, got "
                         f"{np.bincount(node).tolist()}")
    if exchange == "auto":
        exchange = "window" if spans == 1 else ("hierarchical" if even else "alltoallv")
    return exchange, node


def EpComm(num_experts, hidden, *, comm=None, max_tokens=None, timeout_s=60.0, abort_on_error=True, exchange="auto",
           nodes=None):
    """Dispatch and combine over the ranks of comm (default MPI_COMM_WORLD), each owning
    num_experts / ranks consecutive experts; see exchange.WindowEpComm and alltoall.AlltoallvEpComm
    for the calls (the same on both)."""
    from .alltoall import AlltoallvEpComm, _mpi
    if comm is None:
        comm = _mpi().COMM_WORLD
    kind, node = choose_exchange(comm, exchange, nodes)
    if kind in ("window", "hierarchical"):
        from .exchange import WindowEpComm
        return WindowEpComm(num_experts, hidden, comm=comm, max_tokens=max_tokens, timeout_s=timeout_s,
                            abort_on_error=abort_on_error, node=node)
    return AlltoallvEpComm(num_experts, hidden, comm=comm, max_tokens=max_tokens, timeout_s=timeout_s,
                           abort_on_error=abort_on_error)
