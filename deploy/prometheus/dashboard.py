#!/usr/bin/env python3
"""Writes grafana-dashboard.json: one consumer group's freshness dashboard.

The panels follow docs/slo.md, "Reading the signals next to each other":
the objective (SLIs, burn rates, records by result, event age), then the
partitions (head-of-line age, lag, stalls, status), then the consumers
(throughput, handler time, failures, membership, poll gaps, records lost),
then retention (margin and time left, in-process and from the group monitor)
and the group monitor (time lag, stalled partitions, diagnosis, drain time
and replica suggestion).

Usage (from anywhere):

    python3 deploy/prometheus/dashboard.py          # rewrite the JSON
    python3 deploy/prometheus/dashboard.py --check  # exit 1 if it is stale or
                                                    # a query does not parse

--check also parses every query with `promtool check rules` (as the
expression of a throwaway recording rule) when promtool is on PATH; the
names in the queries are checked against src/metrics/{names,monitor_names}.rs by
tests/prometheus_names.rs.
"""

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUTPUT = HERE / "grafana-dashboard.json"

DS = {"type": "prometheus", "uid": "${datasource}"}
G = 'messaging_consumer_group_name="$group"'
GT = f'{G}, messaging_destination_name=~"$topic"'
RI = "$__rate_interval"
PART = "messaging_destination_name, messaging_destination_partition_id"

# (title, unit, [(expr, legend)], options); None starts a row: ("row", title).
PANELS = [
    ("row", "Freshness objective"),
    ("SLI against the target (1h)", "percentunit", [
        (f"fresh_consumer:slo_sli:ratio_rate1h{{{GT}}}", "{{messaging_destination_name}} {{fresh_consumer_slo_threshold}}s SLI"),
        (f"fresh_consumer:slo_sli_latency:ratio_rate1h{{{GT}}}", "{{messaging_destination_name}} {{fresh_consumer_slo_threshold}}s latency only"),
        (f"fresh_consumer:slo_target:ratio{{{GT}}}", "{{messaging_destination_name}} {{fresh_consumer_slo_threshold}}s target"),
    ], {}),
    ("Burn rate (1 = the budget lasts the period)", "none", [
        (f"fresh_consumer:slo_burn_rate:rate5m{{{GT}}}", "{{messaging_destination_name}} {{fresh_consumer_slo_threshold}}s 5m"),
        (f"fresh_consumer:slo_burn_rate:rate1h{{{GT}}}", "{{messaging_destination_name}} {{fresh_consumer_slo_threshold}}s 1h"),
        (f"fresh_consumer:slo_burn_rate:rate6h{{{GT}}}", "{{messaging_destination_name}} {{fresh_consumer_slo_threshold}}s 6h"),
        (f"fresh_consumer:slo_burn_rate:rate1d{{{GT}}}", "{{messaging_destination_name}} {{fresh_consumer_slo_threshold}}s 1d"),
    ], {}),
    ("Records by result", "short", [
        (f"sum by (fresh_consumer_slo_result) (fresh_consumer:slo_messages:rate5m{{{GT}}})", "{{fresh_consumer_slo_result}}"),
    ], {"stack": True}),
    ("Event age after the handler succeeded", "s", [
        (f"histogram_quantile(0.5, sum by (le, messaging_destination_name) (rate(fresh_consumer_event_age_seconds_bucket{{{GT}}}[{RI}])))", "{{messaging_destination_name}} p50"),
        (f"histogram_quantile(0.99, sum by (le, messaging_destination_name) (rate(fresh_consumer_event_age_seconds_bucket{{{GT}}}[{RI}])))", "{{messaging_destination_name}} p99"),
    ], {}),
    ("row", "Partitions"),
    ("Head-of-line age (oldest waiting record)", "s", [
        (f"max by ({PART}) (fresh_consumer_partition_head_age_seconds{{{GT}}})", "{{messaging_destination_name}}/{{messaging_destination_partition_id}}"),
        (f"fresh_consumer:head_age_limit:seconds{{{GT}}}", "{{messaging_destination_name}} limit"),
    ], {}),
    ("Offset lag, committed (never summed)", "short", [
        (f'max by ({PART}) (fresh_consumer_partition_lag{{{GT}, fresh_consumer_lag_position="committed"}})', "{{messaging_destination_name}}/{{messaging_destination_partition_id}}"),
    ], {}),
    ("Stalled for", "s", [
        (f"max by ({PART}) (fresh_consumer_partition_stall_age_seconds{{{GT}}})", "{{messaging_destination_name}}/{{messaging_destination_partition_id}}"),
        (f"fresh_consumer:stalled_limit:seconds{{{GT}}}", "{{messaging_destination_name}} limit"),
    ], {}),
    ("Partitions not OK, and blocked", "short", [
        (f'count by (fresh_consumer_status) (fresh_consumer_partition_status_ratio{{{GT}, fresh_consumer_status!="ok"}} == 1)', "{{fresh_consumer_status}}"),
        (f"sum(fresh_consumer_partition_blocked_ratio{{{GT}}})", "blocked"),
    ], {}),
    ("row", "Consumers"),
    ("Throughput: received and completed", "short", [
        (f"sum by (messaging_destination_name) (rate(messaging_client_consumed_messages_total{{{GT}}}[{RI}]))", "{{messaging_destination_name}} received"),
        (f"sum by (messaging_destination_name) (rate(fresh_consumer_event_age_seconds_count{{{GT}}}[{RI}]))", "{{messaging_destination_name}} completed"),
    ], {}),
    ("Handler and batch duration, p99", "s", [
        (f"histogram_quantile(0.99, sum by (le, messaging_destination_name) (rate(messaging_process_duration_seconds_bucket{{{GT}}}[{RI}])))", "{{messaging_destination_name}} handler"),
        (f"histogram_quantile(0.99, sum by (le, messaging_destination_name) (rate(fresh_consumer_batch_duration_seconds_bucket{{{GT}}}[{RI}])))", "{{messaging_destination_name}} batch"),
    ], {}),
    ("Failures", "short", [
        (f"sum by (messaging_destination_name) (rate(fresh_consumer_handler_retries_total{{{GT}}}[{RI}]))", "{{messaging_destination_name}} retries"),
        (f"sum by (messaging_destination_name) (rate(fresh_consumer_dead_letter_messages_total{{{GT}}}[{RI}]))", "{{messaging_destination_name}} dead-lettered"),
        (f"sum by (messaging_destination_name) (rate(fresh_consumer_skipped_messages_total{{{GT}}}[{RI}]))", "{{messaging_destination_name}} skipped"),
    ], {}),
    ("Group membership", "short", [
        (f"sum by (fresh_consumer_rebalance_type) (increase(fresh_consumer_rebalances_total{{{G}}}[15m]))", "rebalances {{fresh_consumer_rebalance_type}} /15m"),
        (f"sum by (instance) (fresh_consumer_assignment_size{{{G}}})", "{{instance}} partitions"),
    ], {}),
    ("Poll gaps", "s", [
        (f"histogram_quantile(0.99, sum by (le, instance) (rate(fresh_consumer_poll_interval_seconds_bucket{{{G}}}[{RI}])))", "{{instance}} p99 gap"),
        (f"sum by (instance) (increase(fresh_consumer_poll_interval_warnings_total{{{G}}}[15m]))", "{{instance}} warnings /15m"),
        (f"sum by (instance) (increase(fresh_consumer_poll_interval_exceeded_events_total{{{G}}}[15m]))", "{{instance}} exceeded /15m"),
    ], {}),
    ("Records lost, offsets reset, no timestamp", "short", [
        (f"sum by ({PART}) (increase(fresh_consumer_retention_overrun_messages_total{{{GT}}}[1h]))", "{{messaging_destination_name}}/{{messaging_destination_partition_id}} lost /1h"),
        (f"sum by (messaging_destination_name, fresh_consumer_offset_reset_reason) (increase(fresh_consumer_offset_resets_total{{{GT}}}[1h]))", "{{messaging_destination_name}} reset {{fresh_consumer_offset_reset_reason}} /1h"),
        (f'sum by (messaging_destination_name) (fresh_consumer:slo_messages:rate1h{{{GT}, fresh_consumer_slo_result="no_timestamp"}})', "{{messaging_destination_name}} no timestamp /s"),
    ], {}),
    ("row", "Retention"),
    ("Retention margin: records left before retention reaches unprocessed ones", "short", [
        (f"min by ({PART}) (fresh_consumer_partition_retention_margin{{{GT}}})", "{{messaging_destination_name}}/{{messaging_destination_partition_id}} in-process"),
        (f"min by ({PART}) (fresh_consumer_monitor_retention_margin{{{GT}}})", "{{messaging_destination_name}}/{{messaging_destination_partition_id}} monitor"),
    ], {}),
    ("Retention: estimated time until the log start passes the committed offset", "s", [
        (f"min by ({PART}) (fresh_consumer_partition_retention_eta_seconds{{{GT}}})", "{{messaging_destination_name}}/{{messaging_destination_partition_id}} in-process"),
        (f"min by ({PART}) (fresh_consumer_monitor_retention_eta_seconds{{{GT}}})", "{{messaging_destination_name}}/{{messaging_destination_partition_id}} monitor"),
    ], {}),
    ("row", "Group monitor (read from the brokers: shows dead consumers too)"),
    ("Time lag: age of the oldest unprocessed record", "s", [
        (f"max by ({PART}) (fresh_consumer_monitor_time_lag_seconds{{{GT}}})", "{{messaging_destination_name}}/{{messaging_destination_partition_id}}"),
        ("0.6 * fresh_consumer:monitor_time_lag_objective:seconds", "60 % of the objective (alert threshold)"),
    ], {}),
    ("Stalled partitions (committed frozen while the log end moves), and commit age", "short", [
        (f'count by (messaging_destination_name) (max by ({PART}) (fresh_consumer_monitor_partition_status_ratio{{{GT}, fresh_consumer_status="stalled"}}) == 1)', "{{messaging_destination_name}} stalled"),
        (f'count by (messaging_destination_name, fresh_consumer_status) (max by ({PART}, fresh_consumer_status) (fresh_consumer_monitor_partition_status_ratio{{{GT}, fresh_consumer_status!~"ok|stalled"}}) == 1)', "{{messaging_destination_name}} {{fresh_consumer_status}}"),
        (f"max by (messaging_destination_name) (fresh_consumer_monitor_commit_age_seconds{{{GT}}}) / 60", "{{messaging_destination_name}} max minutes since a commit moved"),
    ], {}),
    ("Group diagnosis (1 = current)", "short", [
        (f"max by (fresh_consumer_diagnosis) (fresh_consumer_monitor_group_diagnosis_ratio{{{G}}}) == 1", "{{fresh_consumer_diagnosis}}"),
    ], {"stack": True}),
    ("Drain time and replica suggestion", "short", [
        (f"max(fresh_consumer_monitor_group_drain_time_seconds{{{G}}}) / 60", "minutes to drain the backlog"),
        (f"max(fresh_consumer_monitor_group_replicas_suggested{{{G}}})", "replicas suggested (consumer_bound only)"),
    ], {}),
]


def build():
    panels, y, x, pid = [], 0, 0, 1
    for entry in PANELS:
        if entry[0] == "row":
            if x:
                y, x = y + 8, 0
            panels.append({
                "type": "row", "id": pid, "title": entry[1], "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": [],
            })
            pid, y = pid + 1, y + 1
            continue
        title, unit, queries, opts = entry
        custom = {"lineWidth": 1, "fillOpacity": 10, "showPoints": "never"}
        if opts.get("stack"):
            custom.update({"stacking": {"mode": "normal", "group": "A"}, "fillOpacity": 60})
        panels.append({
            "type": "timeseries", "id": pid, "title": title, "datasource": DS,
            "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
            "fieldConfig": {"defaults": {"unit": unit, "custom": custom}, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom"},
                        "tooltip": {"mode": "multi", "sort": "desc"}},
            "targets": [
                {"datasource": DS, "expr": expr, "legendFormat": legend, "refId": chr(ord("A") + i)}
                for i, (expr, legend) in enumerate(queries)
            ],
        })
        pid += 1
        x = 12 if x == 0 else 0
        if x == 0:
            y += 8
    var = lambda name, label, query, multi: {
        "name": name, "label": label, "type": "query", "datasource": DS,
        "query": {"query": query, "refId": name}, "definition": query,
        "refresh": 2, "sort": 1, "multi": multi, "includeAll": multi,
        "current": {}, "options": [],
    }
    return {
        "title": "fresh-consumer: freshness",
        "uid": "fresh-consumer-freshness",
        "description": "Generated by deploy/prometheus/dashboard.py; see docs/slo.md.",
        "tags": ["kafka", "fresh-consumer", "slo"],
        "schemaVersion": 39,
        "editable": True,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "1m",
        "templating": {"list": [
            {"name": "datasource", "label": "Prometheus", "type": "datasource",
             "query": "prometheus", "current": {}, "options": [], "refresh": 1},
            # Groups and topics seen by a consumer or by the group monitor
            # (a group whose consumers are all dead exports only the latter).
            var("group", "Consumer group",
                'label_values({__name__=~"messaging_client_consumed_messages_total|fresh_consumer_monitor_lag"}, messaging_consumer_group_name)', False),
            var("topic", "Topic",
                'label_values({__name__=~"messaging_client_consumed_messages_total|fresh_consumer_monitor_lag", messaging_consumer_group_name="$group"}, messaging_destination_name)', True),
        ]},
        "panels": panels,
    }


def render():
    return json.dumps(build(), indent=2) + "\n"


def queries():
    return [t["expr"] for p in build()["panels"] for t in p.get("targets", [])]


def promtool_parse(exprs):
    """Parses each query as a recording rule's expression with promtool."""
    promtool = shutil.which("promtool")
    if not promtool:
        print("promtool not on PATH: queries not parsed")
        return
    lines = ["groups:", "  - name: dashboard-queries", "    rules:"]
    for i, e in enumerate(exprs):
        e = e.replace("$__rate_interval", "5m").replace("$group", "g").replace("$topic", ".*")
        lines += [f"      - record: dashboard:query:{i}", f"        expr: {json.dumps(e)}"]
    with tempfile.NamedTemporaryFile("w", suffix=".yml") as f:
        f.write("\n".join(lines) + "\n")
        f.flush()
        result = subprocess.run([promtool, "check", "rules", f.name], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit("a dashboard query does not parse:\n" + result.stdout + result.stderr)
    print(f"promtool parsed all {len(exprs)} dashboard queries")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if stale or a query does not parse")
    args = parser.parse_args()
    text = render()
    if args.check:
        if not OUTPUT.exists() or OUTPUT.read_text() != text:
            sys.exit(f"{OUTPUT} is stale: run python3 deploy/prometheus/dashboard.py")
        print(f"{OUTPUT.name} is up to date")
        promtool_parse(queries())
        return
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT}")


if __name__ == "__main__":
    main()
