#!/usr/bin/env python3
"""Produce the peer comparison's workload (benches/peers/README.md).

    produce.py --bootstrap HOST:PORT --topics peers-a,peers-b --records-per-partition 35000 \
               [--order partition|round-robin] [--create-topics PARTITIONS]

Every partition of every topic gets the same number of records: an 8-byte
key, a 100-byte payload, CreateTime = now. A topic that does not exist is
created by the broker on first use (librdkafka's mock broker auto-creates
topics with 4 partitions; it has no CreateTopics). On a real broker, auto-creation
would give `num.partitions` (1 by default), so run.sh's real-broker mode passes
--create-topics 4: the script first creates the topics with an AdminClient
(that many partitions, replication factor 1; a topic that already exists is
left as it is, and the watermark check below then finds it not empty). Afterwards the script
checks every partition's watermarks: low 0 (the mock keeps at most 5 MiB per
partition and drops the head beyond that) and high = what was produced. It
prints one JSON line: topics, partitions, records, seconds.
"""

import argparse
import json
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

PAYLOAD = b"x" * 100


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topics", required=True, help="comma-separated topic names")
    ap.add_argument("--records-per-partition", type=int, required=True)
    ap.add_argument(
        "--order",
        choices=["partition", "round-robin"],
        default="partition",
        help="partition: all of a partition's records, then the next partition's (full "
        "producer batches, ~1 MB); round-robin: record i to every partition in turn (small "
        "batches). The mock broker returns one producer batch per partition per fetch.",
    )
    ap.add_argument(
        "--create-topics",
        type=int,
        metavar="PARTITIONS",
        help="create the topics first with this many partitions, replication factor 1 "
        "(a real broker; the mock has no CreateTopics)",
    )
    args = ap.parse_args()
    topics = [t for t in args.topics.split(",") if t]
    per_partition = args.records_per_partition

    if args.create_topics:
        admin = AdminClient({"bootstrap.servers": args.bootstrap})
        futures = admin.create_topics(
            [NewTopic(t, num_partitions=args.create_topics, replication_factor=1) for t in topics],
            operation_timeout=30,
        )
        for topic, future in futures.items():
            try:
                future.result(timeout=60)
            except KafkaException as e:
                if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise

    producer = Producer(
        {
            "bootstrap.servers": args.bootstrap,
            "linger.ms": 20,
            "batch.num.messages": 10000,
            "batch.size": 1000000,
            "queue.buffering.max.messages": 1000000,
            "queue.buffering.max.kbytes": 1048576,
            "acks": "all",
        }
    )

    # Metadata for each topic; the broker auto-creates a missing one.
    partitions = {}
    for topic in topics:
        deadline = time.monotonic() + 30
        while True:
            md = producer.list_topics(topic, timeout=10).topics.get(topic)
            # Right after CreateTopics the metadata can lag: wait for every partition.
            if md is not None and md.error is None and md.partitions and (
                not args.create_topics or len(md.partitions) == args.create_topics
            ):
                partitions[topic] = sorted(md.partitions)
                break
            if time.monotonic() > deadline:
                print(
                    f"produce.py: no metadata for {topic!r} (or not {args.create_topics} partitions): "
                    f"{md and (md.error or len(md.partitions))}",
                    file=sys.stderr,
                )
                return 1
            time.sleep(0.2)

    failures = []

    def on_delivery(err, _msg):
        if err is not None:
            failures.append(err)

    def send(topic, p, i):
        key = b"k%07d" % (i % 10_000_000)  # 8 bytes
        while True:
            try:
                producer.produce(topic, PAYLOAD, key, partition=p, on_delivery=on_delivery)
                return
            except BufferError:
                producer.poll(0.005)

    started = time.monotonic()
    if args.order == "partition":
        for topic in topics:
            for p in partitions[topic]:
                for i in range(per_partition):
                    send(topic, p, i)
                    if i % 1000 == 0:
                        producer.poll(0)
    else:
        for i in range(per_partition):
            for topic in topics:
                for p in partitions[topic]:
                    send(topic, p, i)
            if i % 1000 == 0:
                producer.poll(0)
    remaining = producer.flush(120)
    took = time.monotonic() - started
    if remaining or failures:
        print(f"produce.py: {remaining} undelivered, {len(failures)} failed: {failures[:3]}", file=sys.stderr)
        return 1

    # Watermarks: nothing dropped by the mock's retention, nothing missing.
    reader = Consumer({"bootstrap.servers": args.bootstrap, "group.id": "produce-py-watermarks"})
    bad = []
    for topic in topics:
        for p in partitions[topic]:
            lo, hi = reader.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if (lo, hi) != (0, per_partition):
                bad.append(f"{topic}[{p}]: low {lo}, high {hi}")
    reader.close()
    if bad:
        print(
            "produce.py: watermarks differ from (0, %d), the mock dropped records (5 MiB per "
            "partition) or the topic was not empty: %s" % (per_partition, "; ".join(bad)),
            file=sys.stderr,
        )
        return 1

    n_partitions = sum(len(v) for v in partitions.values())
    print(
        json.dumps(
            {
                "topics": topics,
                "partitions": n_partitions,
                "records_per_partition": per_partition,
                "records": n_partitions * per_partition,
                "seconds": round(took, 3),
            }
        )
    )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KafkaException as e:
        print(f"produce.py: {e}", file=sys.stderr)
        sys.exit(1)
