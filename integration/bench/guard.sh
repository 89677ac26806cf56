#!/usr/bin/env bash
# The cost of guard triggers (fencing.database_guard: triggers) on fenced
# writes through fenceproxy: guard_write.lua's autocommit UPDATE by primary
# key and INSERT, each against two proxies in the same run, one protecting
# a table without guard triggers, one an identical table with them
# (installed by fenceproxy init --config). Rounds are interleaved and the
# first target rotates; the ratio guard/no-guard is taken per round, and
# its median reported. fenced.sh runs it after its own comparison.
#
#   integration/bench/guard.sh [--threads N] [--time S] [--rounds N]
#
# Besides throughput it reports the CPU time the server and the proxy spent
# per write (utime + stime from /proc, read around each run): on a loaded
# machine a steadier figure than transactions per second, as long as
# nothing else uses the server (BACKEND of a server of its own).
#
# Env: BACKEND (127.0.0.1:3306: root over TCP without a password creates the
# schemas, the benchmark user app/apppw and the proxies' own account), BENCH_WORK
# (/tmp/fenceproxy-bench), GUARD_PLAIN_LISTEN (127.0.0.1:6041),
# GUARD_LISTEN (127.0.0.1:6042), TABLE_SIZE (50000).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE=$ROOT/integration/bench
export BENCH_WORK=${BENCH_WORK:-/tmp/fenceproxy-bench}
BACKEND=${BACKEND:-127.0.0.1:3306}
PLAIN=${GUARD_PLAIN_LISTEN:-127.0.0.1:6041}
GUARD=${GUARD_LISTEN:-127.0.0.1:6042}
TABLE_SIZE=${TABLE_SIZE:-50000}
THREADS=16 DURATION=6 ROUNDS=5
while (($#)); do
  case $1 in
    --threads) THREADS=$2; shift 2 ;;
    --time) DURATION=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    *) echo "guard.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$BENCH_WORK"
OUT=$BENCH_WORK/guard-$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT"

rootsql() { mariadb --protocol=TCP -h "${BACKEND%:*}" -P "${BACKEND##*:}" -uroot -e "$1"; }
rootsql "CREATE USER IF NOT EXISTS 'app'@'%' IDENTIFIED BY 'apppw'; GRANT ALL ON *.* TO 'app'@'%';
  CREATE USER IF NOT EXISTS 'app'@'localhost' IDENTIFIED BY 'apppw'; GRANT ALL ON *.* TO 'app'@'localhost';
  CREATE USER IF NOT EXISTS 'fpbench'@'%' IDENTIFIED BY 'fpbench-Pw1';
  GRANT SELECT, SHOW VIEW, TRIGGER, EVENT, INSERT, UPDATE, DELETE ON *.* TO 'fpbench'@'%'"
for db in sbplain sbguard; do
  rootsql "DROP DATABASE IF EXISTS $db; CREATE DATABASE $db;
    CREATE TABLE $db.gt (id INT AUTO_INCREMENT PRIMARY KEY, k INT NOT NULL, c CHAR(60) NOT NULL) ENGINE=InnoDB;
    USE $db; INSERT INTO gt (k, c) SELECT seq, REPEAT('x', 60) FROM seq_1_to_$TABLE_SIZE"
done

(cd "$ROOT" && go build -o "$BENCH_WORK/fenceproxy" ./cmd/fenceproxy)
export FP_BENCH_PW=fpbench-Pw1
config() { # config NAME LISTEN SCHEMA GUARD
  cat >"$BENCH_WORK/guard-$1.yaml" <<YAML
listen: $2
admin: ""
log_level: warn
backend:
  address: $BACKEND
  user: fpbench
  password_env: FP_BENCH_PW
fencing:
  database_guard: $4
tables:
  - name: $3.gt
YAML
}
config plain "$PLAIN" sbplain off
config guard "$GUARD" sbguard triggers
ROOTDSN="root@tcp($BACKEND)/"
for n in plain guard; do
  "$BENCH_WORK/fenceproxy" init --dsn "$ROOTDSN" --config "$BENCH_WORK/guard-$n.yaml" >"$OUT/init-$n.log"
done
PIDS=""
cleanup() { kill $PIDS 2>/dev/null || true; wait $PIDS 2>/dev/null || true; }
trap cleanup EXIT
for n in plain guard; do
  "$BENCH_WORK/fenceproxy" serve --config "$BENCH_WORK/guard-$n.yaml" 2>"$OUT/fenceproxy-$n.log" &
  PIDS="$PIDS $!"
done
for addr in "$PLAIN" "$GUARD"; do
  for _ in $(seq 200); do (exec 3<>"/dev/tcp/${addr%:*}/${addr##*:}") 2>/dev/null && break; sleep 0.05; done
done

sb() { # sb ADDR SCHEMA WRITE SECONDS
  sysbench "$HERE/guard_write.lua" --db-driver=mysql --mysql-host="${1%:*}" --mysql-port="${1##*:}" \
    --mysql-user=app --mysql-password=apppw --mysql-db="$2" --write="$3" --table-size="$TABLE_SIZE" \
    --threads="$THREADS" --time="$4" --report-interval=0 --histogram=off run
}
tps() { awk '/transactions:/ {gsub(/\(/, "", $3); print $3}' "$1"; }
txns() { awk '/transactions:/ {print $2}' "$1"; }
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)
SERVER_PID=${SERVER_PID:-$(ss -ltnpH "sport = :${BACKEND##*:}" | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2)}
[[ -n $SERVER_PID ]] || { echo "guard.sh: no process listens on $BACKEND (set SERVER_PID)" >&2; exit 1; }
read -r PLAIN_PID GUARD_PID <<<"$PIDS"
p95() { awk '/95th percentile:/ {print $3}' "$1"; }

echo "== guard triggers: fenceproxy $(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) cores, $THREADS threads, $ROUNDS rounds x ${DURATION}s, gt $TABLE_SIZE rows"
for w in update insert; do sb "$PLAIN" sbplain $w 2 >/dev/null; sb "$GUARD" sbguard $w 2 >/dev/null; done # warm-up
printf 'write\tround\ttarget\ttps\tp95_ms\tserver_us\tproxy_us\n' >"$OUT/runs.tsv"
for ((r = 1; r <= ROUNDS; r++)); do
  for w in update insert; do
    order=(plain guard); ((r % 2 == 0)) && order=(guard plain)
    for t in "${order[@]}"; do
      addr=$PLAIN db=sbplain
      [[ $t == guard ]] && addr=$GUARD db=sbguard
      log=$OUT/r$r.$w.$t.log
      pid=$PLAIN_PID
      [[ $t == guard ]] && pid=$GUARD_PID
      s0=$(ticks "$SERVER_PID") p0=$(ticks "$pid")
      sb "$addr" "$db" $w "$DURATION" >"$log" 2>&1 || { echo "guard.sh: sysbench failed, see $log" >&2; exit 1; }
      s1=$(ticks "$SERVER_PID") p1=$(ticks "$pid") n=$(txns "$log")
      su=$(( (s1 - s0) * 1000000 / HZ / n )) pu=$(( (p1 - p0) * 1000000 / HZ / n ))
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$w" "$r" "$t" "$(tps "$log")" "$(p95 "$log")" "$su" "$pu" >>"$OUT/runs.tsv"
      printf '  round %d %-6s %-6s %s tps\n' "$r" "$w" "$t" "$(tps "$log")" >&2
    done
  done
done
python3 - "$OUT/runs.tsv" <<'PY' | tee "$OUT/summary.txt"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
print("| fenced write, through fenceproxy | no guard tps | guard triggers tps | ratio (median of rounds) | ratios per round | p95 ms no guard / guard | server CPU us/write no guard / guard | proxy CPU us/write no guard / guard |")
print("| --- | ---: | ---: | ---: | --- | --- | --- | --- |")
for w in ("update", "insert"):
    by = {}
    for r in rows:
        if r["write"] == w:
            by.setdefault(r["round"], {})[r["target"]] = r
    ratios = [float(v["guard"]["tps"]) / float(v["plain"]["tps"]) for v in by.values()]
    plain = statistics.median(float(v["plain"]["tps"]) for v in by.values())
    guard = statistics.median(float(v["guard"]["tps"]) for v in by.values())
    p95p = statistics.median(float(v["plain"]["p95_ms"]) for v in by.values())
    p95g = statistics.median(float(v["guard"]["p95_ms"]) for v in by.values())
    cpu = lambda t, k: statistics.median(float(v[t][k]) for v in by.values())
    name = {"update": "UPDATE by primary key", "insert": "INSERT (guarded by the proxy)"}[w]
    print(f"| {name} | {plain:.0f} | {guard:.0f} | {statistics.median(ratios):.3f}x | {' '.join(f'{x:.2f}' for x in ratios)} | {p95p:.2f} / {p95g:.2f} | "
          f"{cpu('plain', 'server_us'):.0f} / {cpu('guard', 'server_us'):.0f} | {cpu('plain', 'proxy_us'):.0f} / {cpu('guard', 'proxy_us'):.0f} |")
PY
# Every write ran under its thread's own valid lease: a rejection or a
# guard's refusal means the numbers measure something else.
bad=$(cat "$OUT"/fenceproxy-*.log | grep -c -e "fenced write rejected" -e "guard trigger" || true)
echo "writes rejected during the run: $bad"
[[ $bad == 0 ]] || { echo "guard.sh: writes were rejected: the benchmark is not measuring fenced writes" >&2; exit 1; }
