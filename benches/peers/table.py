#!/usr/bin/env python3
"""Prints run.sh's markdown table from its results (benches/peers/README.md).

    table.py out/<stamp>/results.jsonl [out/<stamp>/meta.txt]

One row per client: median records/s over the rounds, min-max, and the
median (min-max) of the per-round ratio to the raw rdkafka run of the same
round and to the plain C consumer (`c`, or without it the same loop from
Rust, `c-api`) of the same round
(and, when the results have a `java` run, to Java's kafka-clients of the
same round: the "x Java" column), plus the median client and broker CPU
seconds per run, the median client CPU per record in microseconds (client
CPU s / records; process start and group join included), commits per run,
and in how many runs the group ended committed to the end of every partition
and the histogram held one age per record.
"""

import json
import statistics
import sys

NAMES = {
    "c": "plain C consumer (`rd_kafka_consumer_poll` loop in C, async commit / 100 ms; the C ceiling)",
    "c-api": "librdkafka C API from Rust (`peer_throughput --c-api`, the same loop through rdkafka-sys)",
    "raw": "rdkafka `StreamConsumer` (raw baseline: no handler, no histogram)",
    "fresh": "fresh-consumer (no-op handler; the library's own instruments)",
    "fresh-noheaders": "fresh-consumer with `read_headers(false)` (no header parse)",
    "fresh-base": "fresh-consumer from the build `PEERS_BASE_BIN` names (a before/after in one sitting)",
    "raw-otel": "rdkafka `StreamConsumer` + hand-written wrapper (no-op handler, OTel histogram)",
    "python": "confluent-kafka-python `poll()` + wrapper (OTel histogram)",
    "kafkajs": "kafkajs `eachMessage` + wrapper (OTel histogram)",
    "kafkajs-batch": "kafkajs `eachBatch` + wrapper (OTel histogram)",
    "python-nohist": "diagnostic: confluent-kafka-python, wrapper without the histogram record",
    "kafkajs-nohist": "diagnostic: kafkajs `eachMessage`, wrapper without the histogram record",
    "java": "Java kafka-clients `KafkaConsumer.poll()` + wrapper (OTel Java SDK histogram)",
    "java-nohist": "diagnostic: Java kafka-clients, wrapper without the histogram record",
}


def ratio_cell(rs, by_round):
    ratios = [r["records_per_s"] / by_round[r["round"]] for r in rs if r["round"] in by_round]
    return f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})" if ratios else "-"


def main() -> int:
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    if len(sys.argv) > 2:
        for line in open(sys.argv[2]).read().strip().splitlines():
            print(f"- {line}")
        print()
    order = []
    for r in rows:
        if r["peer"] not in order:
            order.append(r["peer"])
    raw_by_round = {r["round"]: r["records_per_s"] for r in rows if r["peer"] == "raw"}
    # The plain C consumer when it ran, else the same loop from Rust.
    c_peer = "c" if any(r["peer"] == "c" for r in rows) else "c-api"
    c_by_round = {r["round"]: r["records_per_s"] for r in rows if r["peer"] == c_peer}
    java_by_round = {r["round"]: r["records_per_s"] for r in rows if r["peer"] == "java"}
    java_col = " x Java |" if java_by_round else ""
    print(
        "| client | median records/s | min-max | x raw (median of per-round ratios, min-max) | x C |"
        f"{java_col} client CPU s per run | client CPU us per record | broker CPU s per run "
        "| commits per run | committed to end | ages recorded = records |"
    )
    print("|---|---:|---:|---:|---:|" + ("---:|" if java_by_round else "") + "---:|---:|---:|---:|---|---|")
    for peer in order:
        rs = [r for r in rows if r["peer"] == peer]
        rates = [r["records_per_s"] for r in rs]
        ratio = ratio_cell(rs, raw_by_round)
        c_ratio = ratio_cell(rs, c_by_round)
        java_ratio = f" {ratio_cell(rs, java_by_round)} |" if java_by_round else ""
        us_per_record = statistics.median(r["client_cpu_s"] / r["records"] * 1e6 for r in rs)
        committed = sum(1 for r in rs if r["committed"]["behind"] == 0)
        if peer in ("raw", "c", "c-api") or peer.endswith("-nohist"):
            ages = "- (no histogram)"
        else:
            ages = f"{sum(1 for r in rs if r.get('ages_recorded') == r['records'])}/{len(rs)} runs"
        print(
            f"| {NAMES.get(peer, peer)} | {statistics.median(rates):,.0f} | {min(rates):,.0f}-{max(rates):,.0f} "
            f"| {ratio} | {c_ratio} |{java_ratio} {statistics.median(r['client_cpu_s'] for r in rs):.1f} "
            f"| {us_per_record:.2f} | {statistics.median(r['broker_cpu_s'] for r in rs):.1f} "
            f"| {statistics.median(r['commits'] for r in rs):,.0f} | {committed}/{len(rs)} runs | {ages} |"
        )
    print()
    print(
        f"{len(rows)} runs, {max(r['round'] for r in rows)} rounds round-robin, "
        f"{rows[0]['records']:,} records each."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
