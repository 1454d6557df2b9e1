#!/usr/bin/env bash
# Peer comparison (issue 7): the same workload through fresh-consumer, raw
# rdkafka, confluent-kafka-python and kafkajs, against the quickstart's
# embedded broker. See benches/peers/README.md.
#
#   benches/peers/run.sh
#
# From a fresh checkout it:
#  1. installs the pinned dependencies: `npm ci` in benches/peers/kafkajs,
#     a venv in benches/peers/.venv with `pip install -r python/requirements.txt`;
#  2. builds the quickstart and the peer_throughput example (release);
#  3. starts `quickstart --serve` in the background and reads its
#     `bootstrap=HOST:PORT` line;
#  4. produces the workload once (produce.py) into topics of its own, not the
#     quickstart's topic, and checks the watermarks;
#  5. runs every client PEERS_ROUNDS times, round-robin, each run with a new
#     consumer group (so it reads everything from the start), and checks after
#     each run that the group committed every partition to its end;
#  6. prints a markdown table (median records/s, min-max, ratio to the raw
#     rdkafka run of the same round) and stops the quickstart.
#
# Knobs (environment):
#   PEERS_ROUNDS (3)                    rounds of every client
#   PEERS_TOPICS (15)                   topics of 4 partitions each (the mock auto-creates 4)
#   PEERS_RECORDS_PER_PARTITION (35000) 100 B payload, 8 B key: ~4.2 MB per partition (mock keeps 5 MiB)
#   PEERS_CLIENTS                       space-separated subset of:
#       c-api raw fresh raw-otel python kafkajs kafkajs-batch python-nohist kafkajs-nohist
#       fresh-batched fresh-batch-of-one
#       (default: the first nine; fresh-batched / fresh-batch-of-one are the
#       batch handler with max_batch_records 500 / 1; c-api is the plain librdkafka C consumer through
#       rdkafka-sys, peer_throughput --c-api; the -nohist ones are diagnostics:
#       the wrapper without its histogram record)
#   PEERS_TIMEOUT_SECS (600)            per run
# Output: the table on stdout; the JSON lines, logs and the table under
# benches/peers/out/<UTC timestamp>/.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
rounds=${PEERS_ROUNDS:-3}
n_topics=${PEERS_TOPICS:-15}
per_partition=${PEERS_RECORDS_PER_PARTITION:-35000}
clients=${PEERS_CLIENTS:-c-api raw fresh raw-otel python kafkajs kafkajs-batch python-nohist kafkajs-nohist}
timeout_secs=${PEERS_TIMEOUT_SECS:-600}
stamp=$(date -u +%Y%m%dT%H%M%SZ)
out=$here/out/$stamp
mkdir -p "$out"
log() { printf '[peers %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

# 1. Dependencies, pinned.
# (npm only when a kafkajs client runs; the venv always: produce.py and
# committed.py use confluent-kafka.)
if [[ " $clients " == *" kafkajs"* ]]; then
    log "npm ci (benches/peers/kafkajs)"
    (cd "$here/kafkajs" && npm ci --no-audit --no-fund --loglevel=error) >"$out/npm.log" 2>&1 \
        || { cat "$out/npm.log" >&2; exit 1; }
fi
if [[ ! -x $here/.venv/bin/python ]]; then
    log "python3 -m venv benches/peers/.venv"
    python3 -m venv "$here/.venv"
fi
py=$here/.venv/bin/python
log "pip install -r python/requirements.txt"
"$py" -m pip install --disable-pip-version-check -q -r "$here/python/requirements.txt" >"$out/pip.log" 2>&1 \
    || { cat "$out/pip.log" >&2; exit 1; }

# 2. The Rust side.
log "cargo build --release --example quickstart --example peer_throughput"
(cd "$root" && cargo build --release --example quickstart --example peer_throughput) >"$out/cargo.log" 2>&1 \
    || { tail -40 "$out/cargo.log" >&2; exit 1; }
target_dir=${CARGO_TARGET_DIR:-$root/target}
[[ $target_dir = /* ]] || target_dir=$root/$target_dir
bin=$target_dir/release/examples

# 3. The broker: the quickstart in serve mode (its own FreshConsumer reads
#    only the "quickstart" topic, which stays empty).
qs_pid=
stop_quickstart() {
    if [[ -n $qs_pid ]] && kill -0 "$qs_pid" 2>/dev/null; then
        kill -TERM "$qs_pid" 2>/dev/null || true
        for _ in $(seq 1 100); do kill -0 "$qs_pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$qs_pid" 2>/dev/null && kill -KILL "$qs_pid" 2>/dev/null || true
        wait "$qs_pid" 2>/dev/null || true
    fi
    qs_pid=
}
trap stop_quickstart EXIT
trap 'exit 130' INT TERM
"$bin/quickstart" --serve >"$out/quickstart.log" 2>&1 &
qs_pid=$!
bootstrap=
for _ in $(seq 1 300); do
    bootstrap=$(sed -n 's/^bootstrap=//p' "$out/quickstart.log" | head -1)
    [[ -n $bootstrap ]] && break
    kill -0 "$qs_pid" 2>/dev/null || { cat "$out/quickstart.log" >&2; exit 1; }
    sleep 0.1
done
[[ -n $bootstrap ]] || { log "no bootstrap= line from the quickstart"; cat "$out/quickstart.log" >&2; exit 1; }
log "quickstart pid $qs_pid, bootstrap $bootstrap"

# 4. The workload, produced once.
topics=$(for i in $(seq -w 1 "$n_topics"); do printf 'peers-%s,' "$i"; done)
topics=${topics%,}
log "producing $n_topics topics x 4 partitions x $per_partition records"
# Partition by partition: full producer batches (~1 MB). The mock returns one
# producer batch per partition per fetch, so this makes its fetches about the
# size a real broker's are (max.partition.fetch.bytes, 1 MiB by default).
"$py" "$here/produce.py" --bootstrap "$bootstrap" --topics "$topics" --order partition \
    --records-per-partition "$per_partition" | tee "$out/produce.json" >&2
records=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["records"])' "$out/produce.json")

# 5. The runs.
machine() {
    printf 'nproc %s (%s); uptime: %s' "$(nproc)" \
        "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)" "$(uptime | sed 's/^ *//')"
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
hz=$(getconf CLK_TCK)
run_client() { # client group
    case $1 in
        c-api) "$bin/peer_throughput" --c-api --bootstrap "$bootstrap" --topic "$topics" --group "$2" --records "$records" --timeout-secs "$timeout_secs" ;;
        raw) "$bin/peer_throughput" --raw --bootstrap "$bootstrap" --topic "$topics" --group "$2" --records "$records" --timeout-secs "$timeout_secs" ;;
        raw-otel) "$bin/peer_throughput" --raw-otel --bootstrap "$bootstrap" --topic "$topics" --group "$2" --records "$records" --timeout-secs "$timeout_secs" ;;
        fresh) "$bin/peer_throughput" --bootstrap "$bootstrap" --topic "$topics" --group "$2" --records "$records" --timeout-secs "$timeout_secs" ;;
        fresh-batched) "$bin/peer_throughput" --batched 500 --bootstrap "$bootstrap" --topic "$topics" --group "$2" --records "$records" --timeout-secs "$timeout_secs" ;;
        fresh-batch-of-one) "$bin/peer_throughput" --batched 1 --bootstrap "$bootstrap" --topic "$topics" --group "$2" --records "$records" --timeout-secs "$timeout_secs" ;;
        python) "$py" "$here/python/consume.py" --bootstrap "$bootstrap" --topic "$topics" --group "$2" --records "$records" --timeout-secs "$timeout_secs" ;;
        kafkajs) node "$here/kafkajs/consume.js" --mode eachMessage --bootstrap "$bootstrap" --topic "$topics" --group "$2" --records "$records" --timeout-secs "$timeout_secs" ;;
        kafkajs-batch) node "$here/kafkajs/consume.js" --mode eachBatch --bootstrap "$bootstrap" --topic "$topics" --group "$2" --records "$records" --timeout-secs "$timeout_secs" ;;
        python-nohist) "$py" "$here/python/consume.py" --no-histogram --bootstrap "$bootstrap" --topic "$topics" --group "$2" --records "$records" --timeout-secs "$timeout_secs" ;;
        kafkajs-nohist) node "$here/kafkajs/consume.js" --no-histogram --mode eachMessage --bootstrap "$bootstrap" --topic "$topics" --group "$2" --records "$records" --timeout-secs "$timeout_secs" ;;
        *) log "unknown client $1"; return 2 ;;
    esac
}
{
    echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "machine at start: $(machine)"
    echo "workload: $n_topics topics x 4 partitions x $per_partition records = $records records (100 B payload, 8 B key)"
} >"$out/meta.txt"
results=$out/results.jsonl
: >"$results"
for round in $(seq 1 "$rounds"); do
    for client in $clients; do
        group=peer-$client-r$round-$stamp
        log "round $round/$rounds: $client"
        broker_before=$(cpu_ticks "$qs_pid")
        TIMEFORMAT='%U %S'
        if ! { time run_client "$client" "$group" >"$out/$client-r$round.json" 2>"$out/$client-r$round.err"; } 2>"$out/$client-r$round.time"; then
            log "$client failed:"; cat "$out/$client-r$round.err" >&2; exit 1
        fi
        broker_after=$(cpu_ticks "$qs_pid")
        committed=$("$py" "$here/committed.py" --bootstrap "$bootstrap" --topics "$topics" --group "$group")
        line=$(grep '^{' "$out/$client-r$round.json" | tail -1)
        [[ -n $line ]] || { log "$client printed no result"; cat "$out/$client-r$round.err" >&2; exit 1; }
        "$py" - "$line" "$client" "$round" "$committed" "$(cat "$out/$client-r$round.time")" \
            "$(( broker_after - broker_before ))" "$hz" "$(cut -d' ' -f1 /proc/loadavg)" >>"$results" <<'EOF'
import json, sys
r = json.loads(sys.argv[1])
user, sys_ = (float(x) for x in sys.argv[5].split())
r.update(peer=sys.argv[2], round=int(sys.argv[3]), committed=json.loads(sys.argv[4]),
         client_cpu_s=round(user + sys_, 2), broker_cpu_s=round(int(sys.argv[6]) / int(sys.argv[7]), 2),
         load1=float(sys.argv[8]))
print(json.dumps(r))
EOF
        tail -1 "$results" >&2
    done
done
echo "machine at end: $(machine)" >>"$out/meta.txt"
stop_quickstart

# 6. The table.
"$py" "$here/table.py" "$results" "$out/meta.txt" | tee "$out/table.md"
log "results in $out"
