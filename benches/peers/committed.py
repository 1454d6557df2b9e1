#!/usr/bin/env python3
"""Checks what a consumer group committed (benches/peers/README.md).

    committed.py --bootstrap HOST:PORT --topics T[,T...] --group G

Compares the group's committed offset of every partition of the topics with
the partition's high watermark, and prints one JSON line: how many partitions
are committed up to their end, how many are behind (or have no committed
offset), and how many records the commits leave unacknowledged. Exits 0
either way: a peer that commits less is a finding, not a failure.
"""

import argparse
import json
import sys

from confluent_kafka import Consumer, TopicPartition


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topics", required=True)
    ap.add_argument("--group", required=True)
    args = ap.parse_args()
    topics = [t for t in args.topics.split(",") if t]

    # Reading committed offsets does not join the group.
    c = Consumer({"bootstrap.servers": args.bootstrap, "group.id": args.group, "enable.auto.commit": False})
    tps = []
    for topic in topics:
        md = c.list_topics(topic, timeout=10).topics[topic]
        tps += [TopicPartition(topic, p) for p in sorted(md.partitions)]
    committed = c.committed(tps, timeout=10)
    at_end = behind = 0
    uncommitted = 0
    for tp in committed:
        _lo, hi = c.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=10)
        if tp.offset == hi:
            at_end += 1
        else:
            behind += 1
            uncommitted += hi - max(tp.offset, 0)
    c.close()
    print(
        json.dumps(
            {
                "group": args.group,
                "partitions": len(tps),
                "committed_to_end": at_end,
                "behind": behind,
                "records_not_committed": uncommitted,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
