#!/usr/bin/env bash
# The one prepared call for a lent GPU machine: `dsperf measure-gpu` within the call's time limit,
# every output (the GPU's table, the device file naming it, the comparison, the log) copied to $OUT.
#
#   run(command="MEASURE_BUILD_CUDA=1 GPU_TESTS=1 bash benchmarks/device_run_measure.sh", timeout_s=540)
#
# The lent machines run Python 3.12: a module built on a 3.11 machine does not import there, so it
# builds dsperf there (cmake, target _C, sm_90a: 23 s on the H200 machine's 16 cores). With
# MEASURE_BUILD_CUDA=1, or when no carried module imports and nvcc is there, it builds the CUDA
# kernels too; otherwise the CPU module only, and dsperf's own kernels' rows are skipped (the
# comparison says so). A module carried from elsewhere is used as it is when it imports. Knobs
# (environment):
#   CALL_LIMIT_S       the run call's timeout_s (default 540): the budget is what is left of it
#   MEASURE_BUDGET_S   upper bound on measure-gpu's --budget-s (default 420)
#   MEASURE_ARGS       more flags for measure-gpu, e.g. "--quick" or "--device H100"
#   MEASURE_BUILD_CUDA 1: build dsperf with its CUDA kernels first, even over a carried module that
#                      imports (sm_90a alone unless MEASURE_CUDA_ARCHS says otherwise)
#   HOPPER_CHECK       1 (default): where dsperf's CUDA kernels are present, first check the Hopper
#                      (wgmma + TMA) grouped GEMM and MLA decode against
#                      the mma.sync kernels (MLA also the CPU) and time both beside cuBLAS / mma.sync
#                      (gpu_validate.py --hopper), at most HOPPER_CHECK_S seconds each (default 120; a hang
#                      is killed; each family in its own process), before measure-gpu's budget.
#   HOPPER_SIZE        gpu_validate's --size for that check (default full)
#                      It needs dsperf's CUDA kernels: MEASURE_BUILD_CUDA=1, or carry a module built
#                      elsewhere with -DDSPERF_CUDA=ON -DDSPERF_PYTHON=ON (about 4 MB; its CUDA runtime
#                      is linked statically, so the lent machine's driver must be as new as that nvcc)
#   GPU_TESTS          1: first the GPU tests (tests/test_cuda*.py), at most GPU_TESTS_S s (150)
#   FULL_VALIDATE      1: gpu_validate.py over every family and the sustained-clock reading, before
#                      measure-gpu, at most FULL_VALIDATE_S s (150)
#   STEP_POINTS        decode validation points whose priced calls measure-gpu --step times (one
#                      archive each), at most STEP_S seconds each (120)
#   CHAIN_POINTS       decode validation points whose step measure-gpu --chain runs back to back (each
#                      call alone, the step as one CUDA graph and eagerly: the time between kernels),
#                      at most CHAIN_S seconds each (150), each point's files as one archive;
#                      CHAIN_CLOCK_S > 0: then the step's graph replays that long while nvidia-smi
#                      samples the SM clock (the sustained clock under that step's kernels)
#   MEASURE_TABLE      0: stop after those; no table measured (default 1)
#   HOPPER_SANITIZE    1: after that check, the same on tiny shapes under compute-sanitizer memcheck
#                      (and racecheck with HOPPER_RACECHECK=1), at most HOPPER_SANITIZE_S s each (90)
set -u
START=$(date +%s)
CALL_LIMIT_S=${CALL_LIMIT_S:-540}
MEASURE_BUDGET_S=${MEASURE_BUDGET_S:-420}
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/device_run_measure.log") 2>&1
elapsed() { echo $(( $(date +%s) - START )); }
PY=${PYTHON:-python3}

echo "== environment ($(date -u '+%Y-%m-%d %H:%M:%S UTC'))"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit,memory.total --format=csv || true
"$PY" --version
"$PY" - <<'PY' || true
import importlib
for name in ("torch", "flashinfer", "numpy", "pandas", "tabulate", "deep_gemm", "deep_ep"):
    try:
        m = importlib.import_module(name)
        print(f"{name} {getattr(m, '__version__', '?')}")
    except Exception as e:  # noqa: BLE001
        print(f"{name}: not importable ({type(e).__name__}: {str(e)[:100]})")
try:
    import torch
    print("torch CUDA", torch.version.cuda, "| GPU", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none",
          "| _scaled_grouped_mm", hasattr(torch, "_scaled_grouped_mm"), "| _grouped_mm", hasattr(torch, "_grouped_mm"))
except Exception as e:  # noqa: BLE001
    print("torch:", e)
PY
command -v nvcc >/dev/null && nvcc --version | tail -1

export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
# cuBLAS (the grouped GEMMs' baseline, loaded by dlopen) where the toolkit or PyTorch's wheels keep it.
CUBLAS=$(ls /usr/local/cuda/lib64/libcublas.so.1[23] 2>/dev/null | head -1)
[ -n "$CUBLAS" ] || CUBLAS=$("$PY" -c "import glob, site; print(next(iter(sorted(sum((glob.glob(d + '/nvidia/**/libcublas.so.1[23]', recursive=True) for d in site.getsitepackages()), []))), ''))" 2>/dev/null)
[ -n "$CUBLAS" ] && export LD_LIBRARY_PATH="$(dirname "$CUBLAS")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "cuBLAS for the baseline: ${CUBLAS:-not found}"
build_module() {  # $1: OFF (CPU module only) or ON (with dsperf's CUDA kernels)
    echo "== building dsperf's module (DSPERF_CUDA=$1) at $(elapsed) s"
    local gen=""; command -v ninja >/dev/null && gen="-G Ninja"
    cmake -S . -B build/device-$1 $gen -DCMAKE_BUILD_TYPE=Release -DDSPERF_PYTHON=ON -DDSPERF_CUDA="$1" \
          -DCMAKE_CUDA_ARCHITECTURES="${MEASURE_CUDA_ARCHS:-90a}" \
          -Dpybind11_DIR="$("$PY" -m pybind11 --cmakedir)" -DPython_EXECUTABLE="$(command -v "$PY")" >/dev/null &&
        cmake --build build/device-$1 --target _C -j "$(nproc)" >/dev/null &&
        cp build/device-$1/_C*.so python/dsperf/ && echo "built at $(elapsed) s"
}
if [ "${MEASURE_BUILD_CUDA:-0}" = 1 ]; then
    build_module ON || echo "the CUDA build failed; measuring with the module at hand"
fi
if ! "$PY" -c "import dsperf._C" 2>/dev/null; then
    echo "no carried dsperf module imports here ($("$PY" -c 'import dsperf._C' 2>&1 | tail -1))"
    { command -v nvcc >/dev/null && build_module ON; } || build_module OFF ||
        { echo "no dsperf module: nothing measured"; exit 1; }
fi
"$PY" -c "from dsperf import cuda; print('dsperf CUDA kernels:', cuda.available())"

export PYTHONFAULTHANDLER=1  # a crash names its Python line
# The GPU tests that skip on machines without one (GPU_TESTS=1; at most GPU_TESTS_S seconds, 150).
if [ "${GPU_TESTS:-0}" = 1 ]; then
    echo "== GPU tests (tests/test_cuda*.py) at $(elapsed) s"
    timeout -s KILL "${GPU_TESTS_S:-150}" "$PY" -m pytest -q -p no:cacheprovider -rs tests/test_cuda.py \
        tests/test_cuda_array.py tests/test_cuda_nccl.py tests/test_cuda_hopper.py > "$OUT/gpu_tests.log" 2>&1
    echo "exit status $? at $(elapsed) s"; tail -n 25 "$OUT/gpu_tests.log"
fi

# The Hopper kernels' first run: results against mma.sync, then times (its log in $OUT).
if [ "${HOPPER_CHECK:-1}" = 1 ] && "$PY" -c "from dsperf import cuda; import sys; sys.exit(not cuda.available()[0])"; then
    # One process per family, so that a hang in one (killed at HOPPER_CHECK_S) cannot hide the other.
    for family in gemm mla; do
        echo "== Hopper $family check (gpu_validate.py --hopper --only $family) at $(elapsed) s"
        timeout -s KILL "${HOPPER_CHECK_S:-120}" "$PY" benchmarks/gpu_validate.py --hopper --only $family \
            --iters 10 ${HOPPER_SIZE:+--size $HOPPER_SIZE} > "$OUT/hopper_$family.log" 2>&1
        echo "exit status $? (137: killed at ${HOPPER_CHECK_S:-120} s, a hang) at $(elapsed) s"
        cat "$OUT/hopper_$family.log"
    done
    tools=""
    [ "${HOPPER_SANITIZE:-0}" = 1 ] && tools="memcheck"
    [ "${HOPPER_RACECHECK:-0}" = 1 ] && tools="$tools racecheck"
    for tool in $tools; do
        command -v compute-sanitizer >/dev/null || { echo "no compute-sanitizer here"; break; }
        echo "== compute-sanitizer --tool $tool on gpu_validate.py --hopper --size tiny at $(elapsed) s"
        timeout -s KILL "${HOPPER_SANITIZE_S:-90}" compute-sanitizer --tool "$tool" --error-exitcode 3 \
            "$PY" benchmarks/gpu_validate.py --hopper --size tiny --iters 1 > "$OUT/hopper_$tool.log" 2>&1
        echo "exit status $? (3: errors found; 137: killed) at $(elapsed) s"
        tail -n 15 "$OUT/hopper_$tool.log"
    done
fi

# Every kernel family beside its baselines and the sustained SM clock under GEMMs (FULL_VALIDATE=1;
# at most FULL_VALIDATE_S seconds, 150).
if [ "${FULL_VALIDATE:-0}" = 1 ]; then
    echo "== gpu_validate.py --skip-tests (every family, the clock reading) at $(elapsed) s"
    timeout -s KILL "${FULL_VALIDATE_S:-150}" "$PY" benchmarks/gpu_validate.py --skip-tests --iters 10 \
        > "$OUT/gpu_validate.log" 2>&1
    echo "exit status $? at $(elapsed) s"; grep -vE "^hopper check: running" "$OUT/gpu_validate.log" | tail -n 30
fi

# Decode steps' priced calls timed at their own shapes (STEP_POINTS="point ..."; measure-gpu --step;
# at most STEP_S seconds each, 120), each point's files as one archive.
for point in ${STEP_POINTS:-}; do
    echo "== dsperf measure-gpu --step $point at $(elapsed) s"
    timeout -s INT "${STEP_S:-120}" "$PY" -m dsperf.cli measure-gpu --step "$point" --out "$OUT/step-$point" \
        --budget-s $(( ${STEP_S:-120} - 20 )) --verbose
    echo "exit status $? at $(elapsed) s"
    [ -d "$OUT/step-$point" ] && tar -C "$OUT" -czf "$OUT/step-$point.tar.gz" "step-$point" && rm -r "$OUT/step-$point"
done
# Decode steps run back to back (CHAIN_POINTS="point ..."; measure-gpu --chain; CHAIN_S each, 150).
for point in ${CHAIN_POINTS:-}; do
    echo "== dsperf measure-gpu --chain $point at $(elapsed) s"
    timeout -s INT "${CHAIN_S:-150}" "$PY" -m dsperf.cli measure-gpu --chain "$point" --out "$OUT/chain-$point" --verbose \
        --clock-seconds "${CHAIN_CLOCK_S:-0}"
    echo "exit status $? at $(elapsed) s"
    [ -d "$OUT/chain-$point" ] && tar -C "$OUT" -czf "$OUT/chain-$point.tar.gz" "chain-$point" && rm -r "$OUT/chain-$point"
done
[ "${MEASURE_TABLE:-1}" = 1 ] || { echo "== done at $(elapsed) s (MEASURE_TABLE=0: no table measured)"; exit 0; }

# What is left of the call, less a minute for start-up, writing and the copy back.
LEFT=$(( CALL_LIMIT_S - $(elapsed) - 60 ))
BUDGET=$(( LEFT < MEASURE_BUDGET_S ? LEFT : MEASURE_BUDGET_S ))
if [ "$BUDGET" -lt 30 ]; then echo "only $LEFT s left of the call: nothing measured"; exit 1; fi
echo "== dsperf measure-gpu, budget $BUDGET s, at $(elapsed) s"
# A hard stop 30 s past the budget (one long shape or a slow library first call); the budget
# itself ends the run cleanly and writes what was measured.
timeout -s INT $(( BUDGET + 30 )) "$PY" -m dsperf.cli measure-gpu --budget-s "$BUDGET" --out "$OUT/measure-gpu" \
    --verbose ${MEASURE_ARGS:-}
echo "== measure-gpu exit status $? at $(elapsed) s; files:"
ls -la "$OUT/measure-gpu" 2>/dev/null
# The lent machine returns at most 8 files: measure-gpu's folder travels as one archive.
[ -d "$OUT/measure-gpu" ] && tar -C "$OUT" -czf "$OUT/measure-gpu.tar.gz" measure-gpu && rm -r "$OUT/measure-gpu"
