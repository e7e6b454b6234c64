#!/usr/bin/env bash
# perf_analyzer with --shared-memory cuda (and system, none beside it) against pbserve
# serving models/examples' add_sub (FP32 [16]) over gRPC, on a GPU machine:
#   bash bench/gpu_perf_analyzer.sh PA_DIR      (PA_DIR: perf_analyzer and its lib/,
#                                                made by bench/gpu_carry.sh)
# Prints each run's throughput and the server's counts; bench/gpu_run.sh calls it.
set -u
pa_dir=${1:?usage: gpu_perf_analyzer.sh PA_DIR}
log=${TMPDIR:-/tmp}/pa_server.log
python3 -m pbserve --model-repository models/examples --model-control-mode explicit \
    --load-model add_sub --http-port 18000 --grpc-port 18001 --metrics-port 18002 \
    > "$log" 2>&1 &
server=$!
trap 'kill -INT $server 2>/dev/null; wait $server' EXIT
python3 - <<'PY' || { echo "server not ready"; tail -20 "$log"; exit 1; }
import time, urllib.request
for _ in range(300):
    try:
        urllib.request.urlopen("http://127.0.0.1:18000/v2/models/add_sub/ready", timeout=1)
        raise SystemExit(0)
    except Exception:
        time.sleep(0.1)
raise SystemExit(1)
PY
for memory in none system cuda; do
    echo "--- --shared-memory $memory"
    LD_LIBRARY_PATH="$pa_dir/lib" "$pa_dir/perf_analyzer" -m add_sub -u 127.0.0.1:18001 \
        -i grpc --shared-memory $memory --output-shared-memory-size 64 \
        --concurrency-range 4 --measurement-interval 2000 -p 2000 2>&1 \
        | grep -E "Throughput|throughput|Avg latency|error|Error|[Ff]ailed" | head -8
    echo "rc=${PIPESTATUS[0]}"
done
echo "--- the server's log, errors"
grep -E "^E|Error|error" "$log" | head -10
