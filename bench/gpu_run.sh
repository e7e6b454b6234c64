#!/usr/bin/env bash
# The GPU checks, as one command on a lent GPU machine (the `device` tool's run):
#   bash bench/gpu_run.sh [pytest args...]     (carry: .whl, the wheels this image lacks,
#                                                made here by bench/gpu_wheels.sh)
# Installs the missing wheels, prints the GPU and the frameworks, runs the GPU tests and
# bench/gpu.py; everything also goes to $OUT/gpu_log.txt.
set -u
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_log.txt") 2>&1
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi -L
python3 - <<'PY'
import sys, importlib
print(sys.version.split()[0])
for name in ("numpy", "cupy", "torch", "tritonclient", "cuda.bindings"):
    try:
        module = importlib.import_module(name)
        print(name, getattr(module, "__version__", "?"))
    except Exception as exc:
        print(name, "missing:", exc)
PY
tests=${*:-tests/core/test_gpu.py tests/core/test_cuda_ipc.py tests/server/test_cuda_shared_memory.py}
# a hung test fails after 60 s with its stack; at 100 s every stub writes its threads'
( sleep ${DUMP_AFTER:-100}; pkill -USR1 -f "m stub --prefix" ) &
timeout ${PYTEST_TIMEOUT:-130} python3 -m pytest -q -rs -p no:cacheprovider --durations=8 \
    -s --tb=short --timeout 30 $tests
timeout ${BENCH_TIMEOUT:-50} python3 bench/gpu.py --mib 1024 --repeat 3
ls /dev/shm | grep -c pbserve || true
