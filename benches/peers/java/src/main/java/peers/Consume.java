// Peer comparison (benches/peers/README.md): Apache Kafka's Java client,
// kafka-clients, with a hand-written freshness wrapper.
//
//   java -jar target/kafka-clients-peer.jar --bootstrap HOST:PORT --topic T[,T...] --records N
//        [--group G] [--timeout-secs S] [--no-histogram]
//
// A plain KafkaConsumer poll loop, as the client's documentation writes it.
// Each record goes through a no-op handler; only after it returned is the
// event age (now - record timestamp, in seconds) recorded into an
// OpenTelemetry histogram with topic and partition attributes. The histogram
// is real: the OpenTelemetry Java SDK's SdkMeterProvider with a
// PeriodicMetricReader (60 s, so no export during a run) to an exporter that
// discards, except that it counts the ages, so a run shows every record's
// age was recorded.
//
// Commits: enable.auto.commit=false; the loop notes the next offset of each
// partition after the handler and sends them with commitAsync(offsets, ...)
// every 100 ms, and with commitSync(offsets) once at the end: the same
// policy as the Python and raw rdkafka peers, so only handled records are
// committed. (commitAsync() without offsets would commit the positions of
// the last poll(), records the handler has not seen yet included.)
//
// Consumer properties as in the librdkafka peers where Java has them:
// auto.offset.reset=earliest, fetch.max.wait.ms=10 (librdkafka's
// fetch.wait.max.ms=10), session.timeout.ms=6000; the classic group
// protocol (kafka-clients' default, and librdkafka's).
//
// --no-histogram (a diagnostic) keeps the wrapper and the handler but skips
// the histogram record, to show what the OpenTelemetry SDK costs here.
//
// Time runs from the first record poll() returned to the N-th handled
// (the JVM's start, the group join and the shutdown are not timed; the JIT's
// warm-up is). Prints one JSON line, the same shape as the other peers.

package peers;

import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.api.metrics.DoubleHistogram;
import io.opentelemetry.sdk.common.CompletableResultCode;
import io.opentelemetry.sdk.metrics.InstrumentType;
import io.opentelemetry.sdk.metrics.SdkMeterProvider;
import io.opentelemetry.sdk.metrics.data.AggregationTemporality;
import io.opentelemetry.sdk.metrics.data.HistogramPointData;
import io.opentelemetry.sdk.metrics.data.MetricData;
import io.opentelemetry.sdk.metrics.export.MetricExporter;
import io.opentelemetry.sdk.metrics.export.PeriodicMetricReader;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.utils.AppInfoParser;

public final class Consume {
    static final String AGE_METRIC = "peer.event_age";
    static final long COMMIT_EVERY_NANOS = 100_000_000L; // 100 ms
    static final AttributeKey<String> TOPIC = AttributeKey.stringKey("topic");
    static final AttributeKey<String> PARTITION = AttributeKey.stringKey("partition");

    /** Drops what it is given (the SDK still aggregates every measurement),
     *  except the number of values in the age histogram. */
    static final class DiscardExporter implements MetricExporter {
        final AtomicLong agesRecorded = new AtomicLong();

        @Override
        public CompletableResultCode export(Collection<MetricData> metrics) {
            long count = 0;
            for (MetricData m : metrics) {
                if (m.getName().equals(AGE_METRIC)) {
                    for (HistogramPointData p : m.getHistogramData().getPoints()) {
                        count += p.getCount();
                    }
                }
            }
            // Cumulative temporality: the latest export holds everything.
            agesRecorded.set(count);
            return CompletableResultCode.ofSuccess();
        }

        @Override
        public AggregationTemporality getAggregationTemporality(InstrumentType type) {
            return AggregationTemporality.CUMULATIVE;
        }

        @Override
        public CompletableResultCode flush() {
            return CompletableResultCode.ofSuccess();
        }

        @Override
        public CompletableResultCode shutdown() {
            return CompletableResultCode.ofSuccess();
        }
    }

    /** The user's handler: a no-op. */
    static void handle(ConsumerRecord<byte[], byte[]> record) {}

    static final String USAGE = "usage: Consume --bootstrap HOST:PORT --topic T[,T...] --records N "
            + "[--group G] [--timeout-secs S] [--no-histogram]";

    public static void main(String[] argv) throws Exception {
        String bootstrap = null, group = null;
        List<String> topics = null;
        long records = 0;
        double timeoutSecs = 300;
        boolean histogram = true;
        for (int i = 0; i < argv.length; i++) {
            String flag = argv[i];
            if (flag.equals("--no-histogram")) {
                histogram = false;
                continue;
            }
            if (flag.equals("--help") || flag.equals("-h")) {
                System.out.println(USAGE);
                return;
            }
            if (i + 1 >= argv.length) fail(flag + " needs a value\n" + USAGE);
            String value = argv[++i];
            switch (flag) {
                case "--bootstrap" -> bootstrap = value;
                case "--topic" -> topics = List.of(value.split(",")).stream().filter(t -> !t.isEmpty()).toList();
                case "--group" -> group = value;
                case "--records" -> records = Long.parseLong(value);
                case "--timeout-secs" -> timeoutSecs = Double.parseDouble(value);
                default -> fail("unknown argument " + flag + "\n" + USAGE);
            }
        }
        if (bootstrap == null || topics == null || topics.isEmpty()) fail("--bootstrap and --topic are required\n" + USAGE);
        if (records <= 0) fail("--records N (N > 0) is required\n" + USAGE);
        if (group == null) group = "peer-java-" + ProcessHandle.current().pid() + "-" + System.currentTimeMillis();

        DiscardExporter exporter = new DiscardExporter();
        SdkMeterProvider provider = SdkMeterProvider.builder()
                .registerMetricReader(PeriodicMetricReader.builder(exporter).setInterval(Duration.ofSeconds(60)).build())
                .build();
        DoubleHistogram eventAge = provider.get("peer-freshness")
                .histogramBuilder(AGE_METRIC)
                .setUnit("s")
                .setDescription("Event age (now - record timestamp) after the handler succeeded")
                .build();

        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "10");
        props.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "6000");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());

        long n = 0, commits = 0, first = -1, last;
        Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
        long[] failedCommits = {0};
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(topics);
            long deadline = System.nanoTime() + (long) (timeoutSecs * 1e9);
            long lastCommit = System.nanoTime();
            outer:
            while (true) {
                ConsumerRecords<byte[], byte[]> batch = consumer.poll(Duration.ofMillis(100));
                if (batch.isEmpty()) {
                    if (System.nanoTime() > deadline) {
                        fail("deadline: " + n + " of " + records + " records");
                    }
                    continue;
                }
                for (ConsumerRecord<byte[], byte[]> record : batch) {
                    long now = System.nanoTime();
                    if (first < 0) first = now;
                    // The wrapper: the handler, then the age.
                    handle(record);
                    if (histogram && record.timestamp() >= 0) {
                        double ageSecs = (System.currentTimeMillis() - record.timestamp()) / 1000.0;
                        eventAge.record(ageSecs, Attributes.of(TOPIC, record.topic(), PARTITION,
                                Integer.toString(record.partition())));
                    }
                    next.put(new TopicPartition(record.topic(), record.partition()),
                            new OffsetAndMetadata(record.offset() + 1));
                    n++;
                    if (n >= records) break outer;
                    if (now - lastCommit >= COMMIT_EVERY_NANOS) {
                        consumer.commitAsync(new HashMap<>(next), (offsets, e) -> {
                            if (e != null) failedCommits[0]++;
                        });
                        commits++;
                        lastCommit = now;
                    }
                }
            }
            last = System.nanoTime();
            consumer.commitSync(next);
            commits++;
        }
        provider.forceFlush().join(10, TimeUnit.SECONDS); // exports the final histogram once
        provider.shutdown().join(10, TimeUnit.SECONDS);
        if (failedCommits[0] > 0) {
            System.err.println("Consume: " + failedCommits[0] + " async commits failed (the final sync commit succeeded)");
        }

        double seconds = (last - first) / 1e9;
        System.out.printf("{\"client\":\"kafka-clients\",\"mode\":\"%s\",\"records\":%d,\"seconds\":%.4f,"
                        + "\"records_per_s\":%.0f,\"ages_recorded\":%s,\"commits\":%d,\"group\":\"%s\","
                        + "\"kafka_clients\":\"%s\",\"java\":\"%s\"}%n",
                histogram ? "java" : "java, no histogram", records, seconds, records / seconds,
                histogram ? Long.toString(exporter.agesRecorded.get()) : "null", commits, group,
                AppInfoParser.getVersion(), System.getProperty("java.version"));
    }

    static void fail(String message) {
        System.err.println("Consume: " + message);
        System.exit(1);
    }
}
