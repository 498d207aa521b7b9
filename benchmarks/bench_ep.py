"""Expert-parallel dispatch/combine and the EP layer over MPI, at 2 and 4 ranks.

    python benchmarks/bench_ep.py [--quick] [--ranks 2,4]

Launches `mpirun -np N python -m dsperf.ep.bench` for each N and prints its tables: the EP layer
against the single-process layer; dispatch + combine latency and bandwidth by tokens (1 to 4096)
and mode against a raw MPI_Alltoallv of the same bytes in the same run (the shared-memory window
exchange; --previous adds the MPI_Alltoallv one), with copy passes per byte, beside the cost model's
all-to-all term fed with the loopback latency and bandwidth measured first; two-batch overlap
against none, beside the cost model's overlap bound. Needs OpenMPI (apt-get install openmpi-bin
libopenmpi-dev) and mpi4py.
"""
import argparse
import os
import shutil
import subprocess
import sys


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--ranks", default="2,4")
    p.add_argument("--tokens", default=None, help="tokens per rank, comma-separated (default 1..4096)")
    p.add_argument("--previous", action="store_true", help="also time the previous (MPI_Alltoallv) exchange")
    a = p.parse_args()
    if shutil.which("mpirun") is None:
        sys.exit("bench_ep needs mpirun (apt-get install openmpi-bin libopenmpi-dev)")
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    extra = ["--allow-run-as-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
    for n in (int(r) for r in a.ranks.split(",")):
        print(f"==== {n} ranks ====", flush=True)
        cmd = ["mpirun", "-np", str(n), "--oversubscribe", *extra, sys.executable, "-m", "dsperf.ep.bench"]
        cmd += ["--quick"] if a.quick else []
        cmd += ["--tokens", a.tokens] if a.tokens else []
        cmd += ["--previous"] if a.previous else []
        rc = subprocess.call(cmd, env=env)
        if rc:
            sys.exit(f"mpirun -np {n} failed with status {rc}")


if __name__ == "__main__":
    main()
