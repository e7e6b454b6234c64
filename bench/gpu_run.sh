#!/usr/bin/env bash
# Every GPU check, as one command on a lent GPU machine (the `device` tool's run):
#   bash bench/gpu_run.sh            carry: [".whl", ".gpu_carry"]
# made here first by bench/gpu_wheels.sh (.whl: the wheels the image lacks) and
# bench/gpu_carry.sh (.gpu_carry: Triton's qa/ and python_backend's examples/ at r24.10,
# perf_analyzer with its libraries). Stages, each bounded, their output in $OUT:
#   ours.txt          our GPU tests (tests/core/test_gpu.py, test_cuda_ipc.py, CUDA shm)
#   triton_qa_gpu.txt Triton's GPU cases (bench/triton_qa/cases_gpu.py), as they ran, table
#   backend_gpu.txt   ONNX Runtime and TorchScript on KIND_GPU against KIND_CPU, bit-exact
#   pa.txt            perf_analyzer --shared-memory cuda (and system, beside it)
#   gpu_bench.txt     bench/gpu.py (alone at the end: it times)
#   qa_logs.tar.gz    the server and client logs of Triton's cases
# All but the bench run at once (16 cores); everything also goes to $OUT/gpu_log.txt.
# NO_BENCH=1 leaves bench/gpu.py out (a rerun that needs no timing).
set -u
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_log.txt") 2>&1
export PYTHONUNBUFFERED=1
start=$(date +%s)
[ -n "${NO_WHEELS:-}" ] || python3 -m pip install -q --no-index --no-deps --no-compile \
    --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
CARRY=$PWD/.gpu_carry
nvidia-smi -L
python3 - <<'PY'
import sys, importlib
print("python", sys.version.split()[0])
for name in ("numpy", "cupy", "torch", "onnxruntime", "tritonclient", "cuda.bindings"):
    try:
        module = importlib.import_module(name)
        print(name, getattr(module, "__version__", "?"))
    except Exception as exc:
        print(name, "missing:", exc)
import onnxruntime
print("onnxruntime providers", onnxruntime.get_available_providers())
PY
stage() { echo "=== $1 ($(($(date +%s) - start)) s)"; }

# Triton's cases in seven groups at once, each on its own loopback address (the clients
# find Triton's ports 8000-8002 there: TRITONSERVER_IPADDR); ours and perf_analyzer beside
qa_group() {  # qa_group HOST NAME CASE-PREFIX...: one run.py over those cases
    local host=$1 name=$2; shift 2
    local only=(); for c in "$@"; do only+=(--only "$c"); done
    TMPDIR=/tmp/qa TRITON_QA_HOST=$host timeout ${QA_TIMEOUT:-300} \
        python3 bench/triton_qa/run.py --keep \
        --server-repo "$CARRY/triton-server" --python-backend-repo "$CARRY/python_backend" \
        "${only[@]}" > "/tmp/qa/$name.txt" 2>&1
    echo "rc=$?" >> "/tmp/qa/$name.txt"
}
export TRITON_QA_CLIENT_TIMEOUT=${CLIENT_TIMEOUT:-120}
mkdir -p /tmp/qa
stage "at once: ours, perf_analyzer, Triton's cases (7 groups), the backends"
( timeout ${OURS_TIMEOUT:-200} python3 -m pytest -q -rs -p no:cacheprovider --durations=5 \
    --tb=short --timeout 60 tests/core/test_gpu.py tests/core/test_cuda_ipc.py \
    tests/server/test_cuda_shared_memory.py > "$OUT/ours.txt" 2>&1
  echo "rc=$?" >> "$OUT/ours.txt"
  timeout ${PA_TIMEOUT:-60} bash bench/gpu_perf_analyzer.sh "$CARRY/pa" > "$OUT/pa.txt" 2>&1
  echo "rc=$?" >> "$OUT/pa.txt" ) &
pids=($!)
n=0
for group in "gpu_bls_non_decoupled_64mb" "gpu_bls_decoupled_64mb" "gpu_bls_non_decoupled_256mb" \
             "gpu_bls_decoupled_256mb" "gpu_python_test gpu_add_sub gpu_dlpack" "gpu_io"; do
    n=$((n + 1)); qa_group 127.0.0.$n qa$n $group & pids+=($!)
done
( qa_group 127.0.0.7 qa7 gpu_ensemble gpu_decoupled
  TMPDIR=/tmp/qa TRITON_QA_HOST=127.0.0.7 timeout ${BACKEND_TIMEOUT:-100} \
      python3 bench/triton_qa/backend_gpu.py \
      --server-repo "$CARRY/triton-server" > "$OUT/backend_gpu.txt" 2>&1
  echo "rc=$?" >> "$OUT/backend_gpu.txt" ) & pids+=($!)
wait "${pids[@]}"
cat /tmp/qa/qa[1-7].txt > "$OUT/triton_qa_gpu.txt"
tar -czf "$OUT/qa_logs.tar.gz" -C /tmp/qa --exclude='*.py' --exclude='*.pt' \
    --exclude='*.onnx' --exclude='*.pbtxt' . 2>/dev/null
stage "done at once"
tail -3 "$OUT/ours.txt"; grep -E "^ *(pass|FAIL|skip) " "$OUT/triton_qa_gpu.txt"
tail -3 "$OUT/backend_gpu.txt"; grep -E "throughput|rc=" "$OUT/pa.txt"

left() { echo "pbserve entries left in /dev/shm: $(ls /dev/shm | grep -c pbserve)"; }
[ -n "${NO_BENCH:-}" ] && { stage "end (no bench)"; left; exit 0; }
stage "bench/gpu.py"
timeout ${BENCH_TIMEOUT:-50} python3 bench/gpu.py --mib 1024 --repeat 3 > "$OUT/gpu_bench.txt" 2>&1
echo "rc=$?" >> "$OUT/gpu_bench.txt"; cat "$OUT/gpu_bench.txt"
stage "end"
left
