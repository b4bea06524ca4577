#!/usr/bin/env bash
# The seed's P0 release gate: burst tests on every release.
#
#   1. start the engine: burstguard's emulator (default), or use TARGET (real vLLM, ...)
#   2. run the steady-vs-burst scenario (32 users, then the seed's bursts at the same rate)
#   3. gate: the seed's rules (exit 1 on failure, 2 when the run itself is invalid)
#   4. diagnose: why it failed, in the seed's order, with the flags to change
#   5. with BASELINE (the last release's run dir): the regression gate, within TOLERANCE
# Everything lands in OUT (keep it as the CI artifact; the next release's BASELINE is
# OUT/run). Exit: the worst of the gates (2 > 1 > 0).
set -uo pipefail

BURSTGUARD=${BURSTGUARD:-burstguard}
OUT=${OUT:-burst-gate}
TARGET=${TARGET:-}
DURATION=${DURATION:-120}          # seconds of each leg, in engine time
SPEEDUP=${SPEEDUP:-1}              # emulator only: run engine time this much faster
PROFILE=${PROFILE:-llama3-8b-h100} # emulator only: hardware + model profile
ENGINE_ARGS=${ENGINE_ARGS:-}       # emulator only: vLLM flags, e.g. "--max-num-seqs 64"
SHAPE=${SHAPE:---prompt-tokens 1024 --output-tokens 256}
GATE_ARGS=${GATE_ARGS:-}           # extra compare limits, e.g. "--max-preemptions 0"
BASELINE=${BASELINE:-}
TOLERANCE=${TOLERANCE:-0.10}

mkdir -p "$OUT"
emulator_pid=""
cleanup() { [ -n "$emulator_pid" ] && kill "$emulator_pid" 2>/dev/null; wait 2>/dev/null; }
trap cleanup EXIT

if [ -z "$TARGET" ]; then
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  # shellcheck disable=SC2086
  $BURSTGUARD emulate --profile "$PROFILE" --speedup "$SPEEDUP" --host 127.0.0.1 \
    --port "$port" $ENGINE_ARGS >"$OUT/emulator.log" 2>&1 &
  emulator_pid=$!
  TARGET="http://127.0.0.1:$port"
  for _ in $(seq 1 100); do
    curl -sf "$TARGET/health" >/dev/null && break
    sleep 0.2
  done
fi

# shellcheck disable=SC2086
$BURSTGUARD bench --target "$TARGET" --scenario steady-vs-burst --duration "$DURATION" \
  --speedup "$SPEEDUP" $SHAPE --out "$OUT/run" --report "$OUT/report.html" --quiet --force
scenario=$?
# the seed's rules again, with this gate's own limits, as JSON for the artifact
# shellcheck disable=SC2086
$BURSTGUARD compare "$OUT/run/steady" "$OUT/run/burst" $GATE_ARGS --json >"$OUT/verdict.json"
gate=$?
[ "$scenario" -eq 2 ] && gate=2
$BURSTGUARD diagnose "$OUT/run" | tee "$OUT/diagnosis.txt"
$BURSTGUARD diagnose "$OUT/run" --json >"$OUT/diagnosis.json"

regression=0
if [ -n "$BASELINE" ]; then
  $BURSTGUARD compare --baseline "$BASELINE" "$OUT/run" --tolerance "$TOLERANCE" \
    --report "$OUT/baseline.html"
  regression=$?
fi

status=$(( gate > regression ? gate : regression ))
echo "burst gate: seed rules exit $gate, baseline exit $regression -> exit $status"
exit "$status"
