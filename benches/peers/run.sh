#!/usr/bin/env bash
# Peer comparison (issue 7): the same workload through fresh-consumer, raw
# rdkafka, the librdkafka C API, confluent-kafka-python, kafkajs and Java's
# kafka-clients, against the quickstart's embedded broker or a real Apache
# Kafka broker. See benches/peers/README.md.
#
#   benches/peers/run.sh                                    # the quickstart's mock broker
#   PEERS_BROKER=kafka benches/peers/run.sh                 # Apache Kafka 4.3.1, started by .ci/kafka
#   PEERS_BOOTSTRAP=HOST:PORT PEERS_BROKER_PID=PID benches/peers/run.sh   # a broker already running
#
# From a fresh checkout it:
#  1. installs the pinned dependencies: `npm ci` in benches/peers/kafkajs,
#     a venv in benches/peers/.venv with `pip install -r python/requirements.txt`,
#     and `mvn -q -DskipTests package` in benches/peers/java (each only when
#     one of its clients runs; the venv always);
#  2. builds the peer_throughput example, and the quickstart for the mock (release);
#  3. the broker: by default starts `quickstart --serve` in the background and
#     reads its `bootstrap=HOST:PORT` line; with PEERS_BROKER=kafka starts a
#     one-node Apache Kafka with `.ci/kafka start` (stopped and deleted at
#     exit); with PEERS_BOOTSTRAP uses that broker as it is;
#  4. produces the workload once (produce.py) into topics of its own, not the
#     quickstart's topic, and checks the watermarks (on a real broker it
#     creates the topics first, 4 partitions each, with names unique to the
#     run, and deletes them at exit from a PEERS_BOOTSTRAP broker);
#  5. runs every client PEERS_ROUNDS times, round-robin, each run with a new
#     consumer group (so it reads everything from the start), and checks after
#     each run that the group committed every partition to its end;
#  6. prints a markdown table (median records/s, min-max, ratio to the raw
#     rdkafka, C and Java runs of the same round, CPU per record) and stops
#     the broker it started.
#
# Knobs (environment):
#   PEERS_ROUNDS (3)                    rounds of every client
#   PEERS_TOPICS (15)                   topics of 4 partitions each (the mock auto-creates 4;
#                                       on a real broker produce.py creates them with 4)
#   PEERS_RECORDS_PER_PARTITION (35000) 100 B payload, 8 B key: ~4.2 MB per partition (the mock
#                                       keeps 5 MiB; no such limit on Kafka)
#   PEERS_CLIENTS                       space-separated subset of:
#       c c-api raw fresh raw-otel python kafkajs kafkajs-batch python-nohist kafkajs-nohist
#       fresh-batched fresh-batch-of-one fresh-noheaders fresh-base java java-nohist
#       (default: the first ten; c is the plain C consumer (benches/peers/c/consume.c,
#       compiled with gcc -O2 against rdkafka-sys's bundled librdkafka: the same
#       build the Rust clients link), the "x C" column's baseline; java is Apache Kafka's Java client, kafka-clients
#       4.3.1, with the OpenTelemetry Java SDK histogram (benches/peers/java), on a
#       real broker only: it cannot connect to the mock;
#       fresh-noheaders is fresh with read_headers(false) (no header parse:
#       librdkafka allocates a parse buffer even for a record without headers);
#       fresh-batched / fresh-batch-of-one are the
#       batch handler with max_batch_records 500 / 1; c-api is the plain librdkafka C consumer through
#       rdkafka-sys, peer_throughput --c-api; the -nohist ones are diagnostics:
#       the wrapper without its histogram record; fresh-base is fresh from another build,
#       for a before/after in the same sitting: PEERS_BASE_BIN, see below)
#   PEERS_BASE_BIN                      for fresh-base: a peer_throughput binary built from the
#                                       commit to compare with, e.g.
#                                       git worktree add /tmp/base HEAD~1 &&
#                                       (cd /tmp/base && cargo build --release --example peer_throughput)
#                                       then PEERS_BASE_BIN=/tmp/base/target/release/examples/peer_throughput
#   PEERS_TIMEOUT_SECS (600)            per run
#   PEERS_BROKER (mock)                 mock: the quickstart's embedded librdkafka mock cluster;
#                                       kafka: Apache Kafka 4.3.1 started by `.ci/kafka start`
#                                       (needs Java 17+, Maven, kcat)
#   PEERS_BOOTSTRAP                     HOST:PORT of a broker already running (overrides
#                                       PEERS_BROKER); its topics are created by produce.py
#   PEERS_BROKER_PID                    with PEERS_BOOTSTRAP: the broker's pid, for the broker CPU
#                                       column (read from /proc/PID/stat; without it, 0)
#   PEERS_KEEP_TOPICS (0)               1: leave the run's topics on a PEERS_BOOTSTRAP broker
#   PEERS_PRELOAD                       a malloc to preload (LD_PRELOAD) into the clients that
#                                       consume through librdkafka (c, c-api, raw*, fresh*, python*),
#                                       e.g. /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 (Debian's
#                                       libjemalloc2); not into the broker, Java or kafkajs.
#                                       librdkafka allocates one op per fetched message on its
#                                       broker thread and the consuming thread frees it: glibc's
#                                       arena lock is a large share of every native client's CPU
#                                       (benches/README.md, "The allocator")
# Output: the table on stdout; the JSON lines, logs and the table under
# benches/peers/out/<UTC timestamp>/.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
rounds=${PEERS_ROUNDS:-3}
n_topics=${PEERS_TOPICS:-15}
per_partition=${PEERS_RECORDS_PER_PARTITION:-35000}
clients=${PEERS_CLIENTS:-c c-api raw fresh raw-otel python kafkajs kafkajs-batch python-nohist kafkajs-nohist}
timeout_secs=${PEERS_TIMEOUT_SECS:-600}
stamp=$(date -u +%Y%m%dT%H%M%SZ)
out=$here/out/$stamp
mkdir -p "$out"
log() { printf '[peers %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
if [[ -n ${PEERS_BOOTSTRAP:-} ]]; then
    broker_kind=external
else
    broker_kind=${PEERS_BROKER:-mock}
fi
case $broker_kind in
    mock | kafka | external) ;;
    *) log "PEERS_BROKER is mock or kafka, not $broker_kind"; exit 2 ;;
esac
if [[ $broker_kind == mock && " $clients " == *" java"* ]]; then
    # kafka-clients 4.3.1 cannot talk to librdkafka 2.12.1's mock cluster: the
    # mock answers its ApiVersions v4 with a v0-shaped error reply, which the
    # client reads as a throttle time of ~20 min; it then never sees the
    # broker as ready and rebootstraps forever (benches/peers/README.md).
    log "the java clients need a real broker: set PEERS_BROKER=kafka or PEERS_BOOTSTRAP"
    exit 2
fi

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
java_jar=$here/java/target/kafka-clients-peer.jar
if [[ " $clients " == *" java"* ]]; then
    log "mvn -q -DskipTests package (benches/peers/java)"
    (cd "$here/java" && mvn -B -q -DskipTests package) >"$out/mvn.log" 2>&1 \
        || { tail -40 "$out/mvn.log" >&2; exit 1; }
fi

# 2. The Rust side (the quickstart only for the mock broker).
examples=(--example peer_throughput)
if [[ $broker_kind == mock ]]; then examples=(--example quickstart "${examples[@]}"); fi
log "cargo build --release ${examples[*]}"
(cd "$root" && cargo build --release "${examples[@]}") >"$out/cargo.log" 2>&1 \
    || { tail -40 "$out/cargo.log" >&2; exit 1; }
target_dir=${CARGO_TARGET_DIR:-$root/target}
[[ $target_dir = /* ]] || target_dir=$root/$target_dir
bin=$target_dir/release/examples

# The plain C consumer, linked against the librdkafka the release build just
# compiled (rdkafka-sys's bundled static library and its header; the newest
# build directory, which is the one peer_throughput links).
c_bin=$out/c-consume
if [[ " $clients " == *" c "* ]]; then
    rdk_out=$(ls -td "$target_dir"/release/build/rdkafka-sys-*/out/src 2>/dev/null \
        | while read -r d; do [[ -f $d/librdkafka.a ]] && { echo "$d"; break; }; done)
    [[ -n $rdk_out ]] || { log "no librdkafka.a under $target_dir/release/build/rdkafka-sys-*"; exit 1; }
    libs=$(sed -n 's/^LIBS+=[[:space:]]*//p' "$rdk_out/../Makefile.config" | tr '\n' ' ')
    log "gcc -O2 benches/peers/c/consume.c ($rdk_out/librdkafka.a $libs)"
    # shellcheck disable=SC2086
    gcc -O2 -o "$c_bin" "$here/c/consume.c" -I"$rdk_out" "$rdk_out/librdkafka.a" $libs \
        >"$out/gcc.log" 2>&1 || { cat "$out/gcc.log" >&2; exit 1; }
fi

# 3. The broker: the quickstart in serve mode (its own FreshConsumer reads
#    only the "quickstart" topic, which stays empty), a Kafka broker of
#    .ci/kafka, or the one at PEERS_BOOTSTRAP.
qs_pid=
kafka_dir=
topics=
delete_topics= # set once the topics exist on a PEERS_BOOTSTRAP broker
stop_quickstart() {
    if [[ -n $qs_pid ]] && kill -0 "$qs_pid" 2>/dev/null; then
        kill -TERM "$qs_pid" 2>/dev/null || true
        for _ in $(seq 1 100); do kill -0 "$qs_pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$qs_pid" 2>/dev/null && kill -KILL "$qs_pid" 2>/dev/null || true
        wait "$qs_pid" 2>/dev/null || true
    fi
    qs_pid=
}
stop_broker() {
    stop_quickstart
    if [[ -n $kafka_dir ]]; then
        log "stopping the Kafka broker ($kafka_dir)"
        bash "$root/.ci/kafka" stop "$kafka_dir" || true
        kafka_dir=
    fi
    if [[ -n $delete_topics ]]; then
        delete_topics=
        log "deleting the run's topics from $bootstrap"
        "$py" - "$bootstrap" "$topics" <<'EOF' || true
import sys
from confluent_kafka.admin import AdminClient
admin = AdminClient({"bootstrap.servers": sys.argv[1]})  # kept: a dropped client fails its futures
futures = admin.delete_topics(sys.argv[2].split(","), operation_timeout=30)
for f in futures.values():
    f.result(timeout=60)
EOF
    fi
}
trap stop_broker EXIT
trap 'exit 130' INT TERM
bootstrap=
case $broker_kind in
    mock)
        "$bin/quickstart" --serve >"$out/quickstart.log" 2>&1 &
        qs_pid=$!
        for _ in $(seq 1 300); do
            bootstrap=$(sed -n 's/^bootstrap=//p' "$out/quickstart.log" | head -1)
            [[ -n $bootstrap ]] && break
            kill -0 "$qs_pid" 2>/dev/null || { cat "$out/quickstart.log" >&2; exit 1; }
            sleep 0.1
        done
        [[ -n $bootstrap ]] || { log "no bootstrap= line from the quickstart"; cat "$out/quickstart.log" >&2; exit 1; }
        broker_pid=$qs_pid
        broker_desc="the quickstart's embedded mock cluster (librdkafka), pid $qs_pid"
        log "quickstart pid $qs_pid, bootstrap $bootstrap"
        ;;
    kafka)
        log "bash .ci/kafka start"
        kafka_env=$(bash "$root/.ci/kafka" start 2>"$out/kafka-start.log") \
            || { cat "$out/kafka-start.log" >&2; exit 1; }
        eval "$kafka_env"
        kafka_dir=$KAFKA_DIR
        bootstrap=$FRESH_CONSUMER_TEST_BOOTSTRAP
        broker_pid=$KAFKA_PID
        broker_desc="Apache Kafka ${KAFKA_VERSION:-4.3.1} (one KRaft node, .ci/kafka), pid $broker_pid"
        log "Kafka pid $broker_pid, bootstrap $bootstrap, dir $kafka_dir"
        ;;
    external)
        bootstrap=$PEERS_BOOTSTRAP
        broker_pid=${PEERS_BROKER_PID:-}
        [[ -n $broker_pid ]] || log "no PEERS_BROKER_PID: the broker CPU column will be 0"
        broker_desc="a broker already running at $bootstrap, pid ${broker_pid:-unknown}"
        log "broker at $bootstrap, pid ${broker_pid:-unknown}"
        ;;
esac

# 4. The workload, produced once.
create=()
if [[ $broker_kind == mock ]]; then
    topics=$(for i in $(seq -w 1 "$n_topics"); do printf 'peers-%s,' "$i"; done)
else
    # A real broker keeps topics between runs, and auto-creates them with
    # num.partitions (1): new names every run, created with 4 partitions.
    topics=$(for i in $(seq -w 1 "$n_topics"); do printf 'peers-%s-%s,' "$stamp" "$i"; done)
    create=(--create-topics 4)
    if [[ $broker_kind == external && ${PEERS_KEEP_TOPICS:-0} != 1 ]]; then delete_topics=1; fi
fi
topics=${topics%,}
log "producing $n_topics topics x 4 partitions x $per_partition records"
# Partition by partition: full producer batches (~1 MB). The mock returns one
# producer batch per partition per fetch, so this makes its fetches about the
# size a real broker's are (max.partition.fetch.bytes, 1 MiB by default).
"$py" "$here/produce.py" --bootstrap "$bootstrap" --topics "$topics" --order partition \
    --records-per-partition "$per_partition" "${create[@]}" | tee "$out/produce.json" >&2
records=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["records"])' "$out/produce.json")

# 5. The runs.
machine() {
    printf 'nproc %s (%s); uptime: %s' "$(nproc)" \
        "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)" "$(uptime | sed 's/^ *//')"
}
cpu_ticks() { [[ -n $1 ]] && awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
hz=$(getconf CLK_TCK)
preload=${PEERS_PRELOAD:-}
if [[ -n $preload && ! -r $preload ]]; then
    log "PEERS_PRELOAD=$preload: no such file"
    exit 2
fi
run_client() ( # client group; a subshell, so LD_PRELOAD stays in it
    # The librdkafka clients run with the preloaded malloc, if any.
    case $1 in
        c | c-api | raw* | fresh* | python*) [[ -z $preload ]] || export LD_PRELOAD=$preload ;;
    esac
    case $1 in
        c) "$c_bin" --bootstrap "$bootstrap" --topic "$topics" --group "$2" --records "$records" --timeout-secs "$timeout_secs" ;;
        c-api) "$bin/peer_throughput" --c-api --bootstrap "$bootstrap" --topic "$topics" --group "$2" --records "$records" --timeout-secs "$timeout_secs" ;;
        raw) "$bin/peer_throughput" --raw --bootstrap "$bootstrap" --topic "$topics" --group "$2" --records "$records" --timeout-secs "$timeout_secs" ;;
        raw-otel) "$bin/peer_throughput" --raw-otel --bootstrap "$bootstrap" --topic "$topics" --group "$2" --records "$records" --timeout-secs "$timeout_secs" ;;
        fresh) "$bin/peer_throughput" --bootstrap "$bootstrap" --topic "$topics" --group "$2" --records "$records" --timeout-secs "$timeout_secs" ;;
        fresh-base) "${PEERS_BASE_BIN:?fresh-base needs PEERS_BASE_BIN (a peer_throughput binary of the build to compare with)}" --bootstrap "$bootstrap" --topic "$topics" --group "$2" --records "$records" --timeout-secs "$timeout_secs" ;;
        fresh-noheaders) "$bin/peer_throughput" --no-headers --bootstrap "$bootstrap" --topic "$topics" --group "$2" --records "$records" --timeout-secs "$timeout_secs" ;;
        fresh-batched) "$bin/peer_throughput" --batched 500 --bootstrap "$bootstrap" --topic "$topics" --group "$2" --records "$records" --timeout-secs "$timeout_secs" ;;
        fresh-batch-of-one) "$bin/peer_throughput" --batched 1 --bootstrap "$bootstrap" --topic "$topics" --group "$2" --records "$records" --timeout-secs "$timeout_secs" ;;
        python) "$py" "$here/python/consume.py" --bootstrap "$bootstrap" --topic "$topics" --group "$2" --records "$records" --timeout-secs "$timeout_secs" ;;
        kafkajs) node "$here/kafkajs/consume.js" --mode eachMessage --bootstrap "$bootstrap" --topic "$topics" --group "$2" --records "$records" --timeout-secs "$timeout_secs" ;;
        kafkajs-batch) node "$here/kafkajs/consume.js" --mode eachBatch --bootstrap "$bootstrap" --topic "$topics" --group "$2" --records "$records" --timeout-secs "$timeout_secs" ;;
        python-nohist) "$py" "$here/python/consume.py" --no-histogram --bootstrap "$bootstrap" --topic "$topics" --group "$2" --records "$records" --timeout-secs "$timeout_secs" ;;
        kafkajs-nohist) node "$here/kafkajs/consume.js" --no-histogram --mode eachMessage --bootstrap "$bootstrap" --topic "$topics" --group "$2" --records "$records" --timeout-secs "$timeout_secs" ;;
        java) java -jar "$java_jar" --bootstrap "$bootstrap" --topic "$topics" --group "$2" --records "$records" --timeout-secs "$timeout_secs" ;;
        java-nohist) java -jar "$java_jar" --no-histogram --bootstrap "$bootstrap" --topic "$topics" --group "$2" --records "$records" --timeout-secs "$timeout_secs" ;;
        *) log "unknown client $1"; exit 2 ;;
    esac
)
{
    echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "machine at start: $(machine)"
    echo "broker: $broker_desc"
    echo "workload: $n_topics topics x 4 partitions x $per_partition records = $records records (100 B payload, 8 B key)"
    echo "malloc of the librdkafka clients: ${preload:-glibc (no PEERS_PRELOAD)}"
} >"$out/meta.txt"
results=$out/results.jsonl
: >"$results"
for round in $(seq 1 "$rounds"); do
    for client in $clients; do
        group=peer-$client-r$round-$stamp
        log "round $round/$rounds: $client"
        broker_before=$(cpu_ticks "$broker_pid")
        TIMEFORMAT='%U %S'
        if ! { time run_client "$client" "$group" >"$out/$client-r$round.json" 2>"$out/$client-r$round.err"; } 2>"$out/$client-r$round.time"; then
            log "$client failed:"; cat "$out/$client-r$round.err" >&2; exit 1
        fi
        broker_after=$(cpu_ticks "$broker_pid")
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
stop_broker

# 6. The table.
"$py" "$here/table.py" "$results" "$out/meta.txt" | tee "$out/table.md"
log "results in $out"
