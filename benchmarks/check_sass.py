"""Check, without a GPU, that dsperf's Hopper kernels are built from Hopper's own instructions.

    python benchmarks/check_sass.py [LIBRARY_OR_CUBIN] [--compile] [--json]

Runs `cuobjdump -sass` on the built CUDA library (default: build/cuda/libdsperf_cuda.a, the
target .ci/run builds) for sm_90a, finds the Hopper kernels' functions (grouped_gemm_wgmma_kernel
for BF16 and for FP8, mla_decode_wgmma_kernel) and counts, in their SASS:
  HGMMA    the warpgroup MMA (wgmma.mma_async) on BF16, QGMMA on FP8 e4m3,
  UTMALDG  the TMA tile load (cp.async.bulk.tensor),
  SYNCS.*  the mbarrier operations (init, arrive / expect-tx, try-wait) the pipeline runs on.
Each must be there at least once; the counts are printed. Exit 0 when all are, 1 when one is
missing, 2 when the check cannot run here (no cuobjdump, nothing built).

--compile builds the Hopper sources (csrc/kernels/cuda/grouped_gemm_sm90.cu, mla_decode_sm90.cu)
alone for sm_90a with nvcc (cubins in a temporary folder, seconds) and checks those instead of the
library.

cuobjdump comes with the CUDA toolkit, or from PyPI (nvidia-cuda-cuobjdump with nvidia-cuda-nvdisasm,
found under site-packages/nvidia/cu*/bin); it needs nvdisasm beside it or on PATH.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KERNEL_SOURCES = (ROOT / "csrc/kernels/cuda/grouped_gemm_sm90.cu", ROOT / "csrc/kernels/cuda/mla_decode_sm90.cu")
HOPPER_SOURCES = KERNEL_SOURCES + (ROOT / "csrc/kernels/cuda/sm90_ptx.cuh",)
# The Hopper kernels: a readable name -> (substrings of the mangled name, its warpgroup MMA opcode:
# HGMMA for 16-bit inputs, QGMMA for FP8).
KERNELS = {
    "grouped_gemm_wgmma_kernel<Bf16Tiles>": (("grouped_gemm_wgmma_kernel", "Bf16Tiles"), "HGMMA"),
    "grouped_gemm_wgmma_kernel<Fp8Tiles>": (("grouped_gemm_wgmma_kernel", "Fp8Tiles"), "QGMMA"),
    # MLA decode over a BF16 and an FP8 latent cache (template argument kFp8 false / true; the FP8
    # latent is dequantised to BF16 in shared memory, so both multiply BF16).
    "mla_decode_wgmma_kernel<bf16 cache>": (("mla_decode_wgmma_kernel", "ILb0E"), "HGMMA"),
    "mla_decode_wgmma_kernel<fp8 cache>": (("mla_decode_wgmma_kernel", "ILb1E"), "HGMMA"),
}
# What every kernel's SASS must contain besides its MMA: (label, regex on an instruction's opcode).
REQUIRED = (("UTMALDG", r"^UTMALDG\b"), ("SYNCS", r"^SYNCS\."))
ARCH = "sm_90a"


def tool_dirs():
    """Folders that may hold cuobjdump / nvdisasm / nvcc: PATH's, the toolkit's, the PyPI wheels'."""
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            dirs.append(str(Path(home) / "bin"))
    try:
        import nvidia  # the namespace package of NVIDIA's PyPI wheels
        for base in nvidia.__path__:
            dirs += sorted(glob.glob(os.path.join(base, "cu*", "bin"))) + sorted(glob.glob(os.path.join(base, "*",
                                                                                                        "bin")))
    except ImportError:
        pass
    return dirs


def find_tool(name):
    for d in tool_dirs():
        p = Path(d) / name
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    return None


def find_cuobjdump():
    """(cuobjdump, why): the tool and an environment in which it finds nvdisasm, or None and why."""
    tool, disasm = find_tool("cuobjdump"), find_tool("nvdisasm")
    if not tool:
        return None, "no cuobjdump (CUDA toolkit, or pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)"
    if not disasm:
        return None, "cuobjdump needs nvdisasm, which is not installed (pip install nvidia-cuda-nvdisasm)"
    return tool, ""


def tool_env():
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join(dict.fromkeys(tool_dirs()))
    return env


def find_library():
    """The newest built libdsperf_cuda.a under build/, or None."""
    found = sorted(glob.glob(str(ROOT / "build" / "*" / "libdsperf_cuda.a")), key=os.path.getmtime)
    return found[-1] if found else None


def stale(path):
    """Whether a Hopper source changed after `path` was built."""
    built = os.path.getmtime(path)
    return any(src.exists() and src.stat().st_mtime > built for src in HOPPER_SOURCES)


def compile_cubins(out_dir):
    """One sm_90a cubin per Hopper kernel source, compiled as the library's build does (warnings are errors)."""
    nvcc = find_tool("nvcc")
    if not nvcc:
        raise FileNotFoundError("no nvcc")
    cubins = []
    for src in KERNEL_SOURCES:
        cubin = Path(out_dir) / (src.stem + ".cubin")
        subprocess.run([nvcc, "-std=c++17", "-O3", f"-I{ROOT / 'csrc'}", "-gencode", "arch=compute_90a,code=sm_90a",
                        "-Werror=all-warnings", "-cubin", "-o", str(cubin), str(src)], check=True)
        cubins.append(str(cubin))
    return cubins


def sass_functions(path):
    """{mangled function name: [opcodes]} of the sm_90a SASS in a library, object or cubin."""
    tool, why = find_cuobjdump()
    if not tool:
        raise FileNotFoundError(why)
    r = subprocess.run([tool, "-sass", "-arch", ARCH, path], capture_output=True, text=True, env=tool_env())
    if r.returncode != 0:
        raise RuntimeError(f"cuobjdump failed on {path}: {r.stderr.strip()[-500:]}")
    funcs, current = {}, None
    for line in r.stdout.splitlines():
        m = re.match(r"\s*Function\s*:\s*(\S+)", line)
        if m:
            current = funcs.setdefault(m.group(1), [])
            continue
        # An instruction line: /*0a40*/  [@P0] OPCODE operands ;
        m = re.match(r"\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if m and current is not None:
            current.append(m.group(1))
    return funcs


def required(kernel):
    return ((KERNELS[kernel][1], rf"^{KERNELS[kernel][1]}\b"),) + REQUIRED


def kernel_counts(path):
    """{kernel: {label: count, ...}} for each Hopper kernel found in `path` (one file or a list);
    opcodes of each SYNCS kind too."""
    funcs = {}
    for p in [path] if isinstance(path, str) else path:
        funcs.update(sass_functions(p))
    result = {}
    for kernel, (parts, _) in KERNELS.items():
        ops = [op for name, opcodes in funcs.items() if all(p in name for p in parts) for op in opcodes]
        if not ops:
            continue
        counts = {label: sum(bool(re.match(rx, op)) for op in ops) for label, rx in required(kernel)}
        for op in sorted({op for op in ops if op.startswith("SYNCS.")}):
            counts[op] = ops.count(op)
        counts["instructions"] = len(ops)
        result[kernel] = counts
    return result


def missing(counts):
    """What the check found wanting: kernels absent, or a required instruction absent in one."""
    problems = [f"{k}: not in the SASS" for k in KERNELS if k not in counts]
    for kernel, c in counts.items():
        problems += [f"{kernel}: no {label}" for label, _ in required(kernel) if c[label] == 0]
    return problems


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", nargs="?", help="library, object or cubin (default: the newest build/*/libdsperf_cuda.a)")
    ap.add_argument("--compile", action="store_true", help="compile the Hopper kernel alone with nvcc and check that")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    tool, why = find_cuobjdump()
    if not tool:
        print(f"check_sass: cannot check here: {why}")
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        if args.compile:
            path = compile_cubins(tmp)
        else:
            path = args.path or find_library()
            if not path:
                print("check_sass: nothing built: cmake -S . -B build/cuda -DDSPERF_CUDA=ON && "
                      "cmake --build build/cuda --target dsperf_cuda (or pass --compile)")
                return 2
            if stale(path):
                print(f"check_sass: note: {path} is older than the Hopper sources; rebuild it to check them")
        counts = kernel_counts(path)
    if args.json:
        print(json.dumps({"path": path, "arch": ARCH, "kernels": counts}, indent=1))
    else:
        print(f"{ARCH} SASS of {path if isinstance(path, str) else ', '.join(Path(p).name for p in path)}:")
        for kernel, c in counts.items():
            print(f"  {kernel}: " + ", ".join(f"{k} {v}" for k, v in c.items()))
    problems = missing(counts)
    for p in problems:
        print(f"MISSING {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
