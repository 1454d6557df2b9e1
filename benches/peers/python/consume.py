#!/usr/bin/env python3
"""Peer comparison (issue 7, benches/peers/README.md): confluent-kafka-python.

    consume.py --bootstrap HOST:PORT --topic T[,T...] --records N [--group G]
               [--timeout-secs S] [--no-histogram]

A `Consumer.poll()` loop, one message per call, as the library's examples
and most users write it. Each message goes through a no-op handler; only
after it returned is the event age (now - message timestamp, in ms)
recorded into an OpenTelemetry histogram with topic and partition
attributes. The histogram is real: the SDK's MeterProvider with a
PeriodicExportingMetricReader (60 s, so no export during a run) to an
exporter that discards.

Commits: `enable.auto.commit=false`; the loop notes the next offset of each
partition after the handler and commits them with
`commit(offsets=..., asynchronous=True)` every 100 ms, and once more
(synchronously) at the end: the same policy as the raw rdkafka baseline and
fresh-consumer's `commit_interval(100 ms)`, so only handled records are
committed. (librdkafka's default, `enable.auto.commit=true` with
`enable.auto.offset.store=true`, stores an offset when poll() returns the
message, before the handler ran.)

--no-histogram (a diagnostic) keeps the wrapper and the handler but skips
the histogram record, to show what the OpenTelemetry SDK costs here.

Time runs from the first message returned by poll() to the N-th handled.
Prints one JSON line, the same shape as the other peers.
"""

import argparse
import importlib.metadata
import json
import os
import sys
import time

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka import libversion
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    PeriodicExportingMetricReader,
)

COMMIT_EVERY = 0.1  # seconds
AGE_METRIC = "peer.event_age"


class DiscardExporter(MetricExporter):
    """Drops what it is given (the SDK still aggregates every measurement),
    except the number of values in the age histogram, so a run can show every
    message's age was recorded."""

    ages_recorded = 0

    def export(self, metrics_data, timeout_millis: float = 10_000, **kwargs) -> MetricExportResult:
        count = 0
        for rm in metrics_data.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.name == AGE_METRIC:
                        count += sum(p.count for p in m.data.data_points)
        # Cumulative temporality (the default): the latest export holds everything.
        DiscardExporter.ages_recorded = count
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs) -> None:
        pass


provider = MeterProvider(
    metric_readers=[PeriodicExportingMetricReader(DiscardExporter(), export_interval_millis=60_000)]
)
metrics.set_meter_provider(provider)
event_age = metrics.get_meter("peer-freshness").create_histogram(
    AGE_METRIC,
    unit="ms",
    description="Event age (now - message timestamp) after the handler succeeded",
)


def track_freshness(handler, record=True):
    """Wraps a handler: the age is recorded only after it returned."""

    def wrapped(msg):
        handler(msg)
        _ts_type, ts_ms = msg.timestamp()
        if record and ts_ms >= 0:
            age_ms = time.time() * 1000.0 - ts_ms
            event_age.record(age_ms, {"topic": msg.topic(), "partition": str(msg.partition())})

    return wrapped


def handle(_msg):
    """The user's handler: a no-op."""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True, help="a topic or a comma-separated list")
    ap.add_argument("--records", type=int, required=True)
    ap.add_argument("--group", default=f"peer-python-{os.getpid()}-{int(time.time() * 1000)}")
    ap.add_argument("--timeout-secs", type=float, default=300)
    ap.add_argument("--no-histogram", action="store_true")
    args = ap.parse_args()
    topics = [t for t in args.topic.split(",") if t]

    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            # The same settings as the other librdkafka peers (benches' CONSUMER_PROPS):
            "fetch.queue.backoff.ms": 10,
            "fetch.wait.max.ms": 10,
            "session.timeout.ms": 6000,
        }
    )
    consumer.subscribe(topics)
    wrapped = track_freshness(handle, record=not args.no_histogram)

    next_offsets = {}  # (topic, partition) -> next offset to read
    commits = 0

    def commit(asynchronous):
        nonlocal commits
        if next_offsets:
            commits += 1
            consumer.commit(
                offsets=[TopicPartition(t, p, o) for (t, p), o in next_offsets.items()],
                asynchronous=asynchronous,
            )

    n = 0
    first = last = None
    last_commit = time.monotonic()
    deadline = time.monotonic() + args.timeout_secs
    while n < args.records:
        msg = consumer.poll(1.0)
        if msg is None:
            if time.monotonic() > deadline:
                print(f"consume.py: deadline: {n} of {args.records} records", file=sys.stderr)
                return 1
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                continue
            print(f"consume.py: {msg.error()}", file=sys.stderr)
            return 1
        now = time.monotonic()
        if first is None:
            first = now
        wrapped(msg)
        next_offsets[(msg.topic(), msg.partition())] = msg.offset() + 1
        n += 1
        if now - last_commit >= COMMIT_EVERY:
            commit(asynchronous=True)
            last_commit = now
    last = time.monotonic()
    commit(asynchronous=False)
    consumer.close()
    provider.shutdown()  # exports the final histogram once

    seconds = last - first
    print(
        json.dumps(
            {
                "client": "confluent-kafka-python",
                "mode": "poll" if not args.no_histogram else "poll, no histogram",
                "records": args.records,
                "seconds": round(seconds, 4),
                "records_per_s": round(args.records / seconds),
                "ages_recorded": DiscardExporter.ages_recorded,
                "commits": commits,
                "group": args.group,
                "confluent_kafka": importlib.metadata.version("confluent-kafka"),
                "librdkafka": libversion()[0],
                "python": sys.version.split()[0],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
