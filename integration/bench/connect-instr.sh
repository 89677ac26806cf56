#!/usr/bin/env bash
# Instructions a fenceproxy binary executes per connection (connect, auth,
# SELECT 1, quit: sysbench with ../shared/bench/lua/connect_select.lua, one
# thread), counted by valgrind's callgrind: a count, not a speed, so it
# repeats on a loaded machine. Each binary runs under callgrind in turn; after
# a warm-up its counters are zeroed (callgrind_control -z), EVENTS connections
# are driven, and the counters are dumped (callgrind_control -d): instructions
# (Ir) / EVENTS, all of the proxy's threads together (the Go runtime's too).
#
#   integration/bench/connect-instr.sh [--events N] [--rounds N] NAME=BINARY...
#
# Env: BACKEND (127.0.0.1:3306), SHARED, BENCH_WORK (/tmp/fenceproxy-bench),
# FP_LISTEN (127.0.0.1:6033).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SHARED=${SHARED:-$ROOT/../shared}
BENCH_WORK=${BENCH_WORK:-/tmp/fenceproxy-bench}
BACKEND=${BACKEND:-127.0.0.1:3306}
FP_LISTEN=${FP_LISTEN:-127.0.0.1:6033}
EVENTS=300 WARMUP=50 ROUNDS=1
while (($#)); do
  case $1 in
    --events) EVENTS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    -*) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
    *) break ;;
  esac
done
(($#)) || { echo "usage: $0 [--events N] [--rounds N] NAME=BINARY..." >&2; exit 2; }
command -v callgrind_control >/dev/null || { echo "valgrind (callgrind) not installed" >&2; exit 1; }
mkdir -p "$BENCH_WORK/instr"
printf 'listen: %s\nadmin: ""\nlog_level: warn\nbackend:\n  address: %s\n' "$FP_LISTEN" "$BACKEND" >"$BENCH_WORK/instr/cost.yaml"
drive() {  # drive EVENTS
  sysbench "$SHARED/bench/lua/connect_select.lua" --db-driver=mysql --mysql-host="${FP_LISTEN%:*}" --mysql-port="${FP_LISTEN##*:}" \
    --mysql-user=app --mysql-password=apppw --mysql-db=sbtest --threads=1 --events="$1" --time=0 run >/dev/null
}
vg=
cleanup() { [[ -n $vg ]] && { kill "$vg" 2>/dev/null || true; wait "$vg" 2>/dev/null || true; }; }
trap cleanup EXIT
for ((r = 1; r <= ROUNDS; r++)); do
  for t in "$@"; do
    name=${t%%=*} bin=${t#*=}
    out=$BENCH_WORK/instr/cg.$name.$r
    rm -f "$out" "$out".*
    GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" serve --config "$BENCH_WORK/instr/cost.yaml" \
      2>"$BENCH_WORK/instr/valgrind.$name.log" &
    vg=$!
    for _ in $(seq 600); do (exec 3<>"/dev/tcp/${FP_LISTEN%:*}/${FP_LISTEN##*:}") 2>/dev/null && break; sleep 0.1; done
    drive "$WARMUP"
    callgrind_control -z "$vg" >/dev/null 2>&1
    drive "$EVENTS"
    callgrind_control -d "$vg" >/dev/null 2>&1
    kill "$vg"; wait "$vg" 2>/dev/null || true; vg=
    # The dump after the zeroing is the first numbered part.
    part=$(ls "$out".* | sort -t. -k2n | head -n1)
    awk -v n="$EVENTS" -v name="$name" -v r="$r" '/^(summary|totals):/ {print "  round " r " " name ": " int($2 / n) " instructions per connection"; exit}' "$part"
  done
done
