/*
 * The plain C consumer of the peer comparison (client `c`, issue 28): an
 * independent `rd_kafka_consumer_poll` loop in C, linked against the very
 * librdkafka build the Rust crate uses (rdkafka-sys's bundled 2.12.1, the
 * static library in its build directory; run.sh finds and links it), with
 * the properties every librdkafka peer uses. No handler, no histogram:
 * librdkafka stores each polled record's offset
 * (`enable.auto.offset.store`, its default) and the loop sends an
 * asynchronous commit of the stored offsets every 100 ms, a synchronous one
 * at the end.
 *
 *   consume --bootstrap HOST:PORT --topic t1,t2 --group G --records N
 *           [--timeout-secs S] [--set key=value ...]
 *
 * Prints one JSON line (as every peer does): records/s from the first record
 * received to the N-th, and the commits sent. Exit 1 on bad arguments or a
 * librdkafka error, 3 when the deadline passes first.
 */
#define _POSIX_C_SOURCE 200809L
#include "rdkafka.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The benches' CONSUMER_PROPS (examples/support/bench.rs), plus the group's. */
static const char *const COMMON[][2] = {
    {"fetch.wait.max.ms", "10"},
    {"fetch.queue.backoff.ms", "10"},
    {"session.timeout.ms", "6000"},
    {"enable.auto.commit", "false"},
    {"auto.offset.reset", "earliest"},
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int set(rd_kafka_conf_t *conf, const char *k, const char *v) {
    char err[512];
    if (rd_kafka_conf_set(conf, k, v, err, sizeof err) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "consume: %s=%s: %s\n", k, v, err);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *bootstrap = NULL, *topics = NULL, *group = NULL;
    long long records = 0;
    double timeout = 600;
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    for (size_t i = 0; i < sizeof COMMON / sizeof COMMON[0]; i++)
        if (set(conf, COMMON[i][0], COMMON[i][1]))
            return 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--bootstrap"))
            bootstrap = v;
        else if (!strcmp(k, "--topic"))
            topics = v;
        else if (!strcmp(k, "--group"))
            group = v;
        else if (!strcmp(k, "--records"))
            records = atoll(v);
        else if (!strcmp(k, "--timeout-secs"))
            timeout = atof(v);
        else if (!strcmp(k, "--set")) {
            char *kv = strdup(v), *eq = strchr(kv, '=');
            if (!eq) {
                fprintf(stderr, "consume: --set takes key=value, not %s\n", v);
                return 1;
            }
            *eq = '\0';
            if (set(conf, kv, eq + 1))
                return 1;
            free(kv);
        } else {
            fprintf(stderr, "consume: unknown argument %s\n", k);
            return 1;
        }
    }
    if (!bootstrap || !topics || !group || records <= 0) {
        fprintf(stderr, "usage: consume --bootstrap HOST:PORT --topic T[,T...] --group G "
                        "--records N [--timeout-secs S] [--set key=value ...]\n");
        return 1;
    }
    if (set(conf, "bootstrap.servers", bootstrap) || set(conf, "group.id", group))
        return 1;
    char err[512];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    if (!rk) {
        fprintf(stderr, "consume: %s\n", err);
        return 1;
    }
    rd_kafka_poll_set_consumer(rk);
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(16);
    char *names = strdup(topics);
    for (char *save = NULL, *t = strtok_r(names, ",", &save); t; t = strtok_r(NULL, ",", &save))
        rd_kafka_topic_partition_list_add(list, t, RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t e = rd_kafka_subscribe(rk, list);
    rd_kafka_topic_partition_list_destroy(list);
    free(names);
    if (e) {
        fprintf(stderr, "consume: subscribe: %s\n", rd_kafka_err2str(e));
        return 1;
    }
    const double deadline = now_s() + timeout;
    double first = 0, last_commit = now_s(), last = 0;
    long long n = 0, commits = 0;
    while (n < records) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
        if (!m) {
            if (now_s() > deadline)
                break;
            continue;
        }
        if (!m->err) {
            last = now_s();
            if (n == 0)
                first = last;
            n++;
            if (last - last_commit >= 0.1) {
                rd_kafka_commit(rk, NULL, 1);
                commits++;
                last_commit = last;
            }
        } else if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            fprintf(stderr, "consume: %s\n", rd_kafka_message_errstr(m));
        }
        rd_kafka_message_destroy(m);
    }
    rd_kafka_commit(rk, NULL, 0);
    commits++;
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    if (n < records) {
        fprintf(stderr, "consume: deadline: %lld of %lld records\n", n, records);
        return 3;
    }
    double secs = last - first;
    printf("{\"client\":\"c\",\"mode\":\"c\",\"records\":%lld,\"seconds\":%.4f,"
           "\"records_per_s\":%.0f,\"ages_recorded\":null,\"commits\":%lld,\"group\":\"%s\","
           "\"librdkafka\":\"%s\"}\n",
           records, secs, secs > 0 ? (double)records / secs : 0.0, commits, group,
           rd_kafka_version_str());
    return 0;
}
