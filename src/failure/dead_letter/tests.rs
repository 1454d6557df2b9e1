use std::time::{Duration, UNIX_EPOCH};

use rdkafka::ClientConfig;
use rdkafka::message::OwnedHeaders;

use super::*;
use crate::error::ConfigError;
use crate::failure::{DeadLetter, DeadLetterHeaders};
use crate::record::{Header, Record, RecordTimestamp};

#[test]
fn default_dead_letter_topic_follows_the_source() {
    assert_eq!(DeadLetter::new().topic_for("orders"), "orders.dlt");
    assert_eq!(
        DeadLetter::new().topic("all.dlq").topic_for("orders"),
        "all.dlq"
    );
}

fn info() -> FailureInfo {
    FailureInfo {
        attempts: 4,
        error_type: "handler_error",
        error_message: "é".repeat(600),
        first_failure: UNIX_EPOCH + Duration::from_millis(1_000),
        last_failure: UNIX_EPOCH + Duration::from_millis(2_000),
    }
}

fn to_record(h: OwnedHeaders, key: &[u8], payload: &[u8]) -> Record {
    use rdkafka::message::Headers;
    let mut r = Record::new("src.dlt", 0, 9)
        .with_key(key.to_vec())
        .with_payload(payload.to_vec());
    for x in h.iter() {
        r = r.with_header(x.key, x.value.map(<[u8]>::to_vec));
    }
    r
}

fn writer(style: DeadLetterHeaders) -> DeadLetterWriter {
    let mut producer = ClientConfig::new();
    producer.set("bootstrap.servers", "127.0.0.1:1");
    DeadLetterWriter::new(
        producer,
        DeadLetter::new()
            .headers(style)
            .max_error_message_bytes(101),
        "g1".into(),
        Vec::new(),
    )
    .unwrap()
}

#[test]
fn headers_round_trip_in_both_styles() {
    let original = Record::new("orders", 3, 386)
        .with_key(b"k".to_vec())
        .with_payload(b"p".to_vec())
        .with_header("trace", Some(b"abc".to_vec()))
        .with_timestamp(RecordTimestamp::CreateTime(1_700_000_000_000));
    for style in [DeadLetterHeaders::Native, DeadLetterHeaders::SpringKafka] {
        let w = writer(style);
        let h = w.headers(&original, &info(), &[]);
        let parked = to_record(h, b"k", b"p");
        let d = DeadLetterRecord::from_record(&parked).unwrap();
        assert_eq!(d.topic, "orders");
        assert_eq!(d.partition, 3);
        assert_eq!(d.offset, 386);
        assert_eq!(d.timestamp, RecordTimestamp::CreateTime(1_700_000_000_000));
        assert_eq!(d.group.as_deref(), Some("g1"));
        assert_eq!(d.attempts, Some(4));
        assert_eq!(d.error_type.as_deref(), Some("handler_error"));
        // Capped at 101 bytes, cut back to a character boundary.
        assert_eq!(d.error_message.as_deref().unwrap().len(), 100);
        assert_eq!(d.key.as_deref(), Some(&b"k"[..]));
        assert_eq!(
            d.headers,
            vec![Header {
                name: "trace".into(),
                value: Some(b"abc".to_vec())
            }]
        );
    }
}

#[test]
fn a_record_through_two_tiers_keeps_its_origin_and_gathers_its_history() {
    let original = Record::new("orders", 3, 386)
        .with_key(b"k".to_vec())
        .with_payload(b"p".to_vec())
        .with_header("trace", Some(b"abc".to_vec()))
        .with_timestamp(RecordTimestamp::CreateTime(1_700_000_000_000));
    for style in [DeadLetterHeaders::Native, DeadLetterHeaders::SpringKafka] {
        let w = writer(style);
        // Failed twice on the source, written to tier 1.
        let mut f = info();
        f.attempts = 2;
        let h = w.headers_for(
            "orders",
            &Origin::of(&original),
            &f,
            Destination::Tier {
                tier: 1,
                written_ms: 4_000,
                due_ms: 5_000,
            },
            &[],
        );
        let tier1 = to_record(h, b"k", b"p");
        let d = DeadLetterRecord::from_record(&tier1).unwrap();
        assert_eq!((d.retry_tier, d.retry_due), (Some(1), Some(5_000)));
        assert_eq!(d.attempts, Some(2));
        assert_eq!(d.history.len(), 1);
        assert_eq!(d.history[0].topic, "orders");
        assert_eq!(d.history[0].failed_at_ms, 2_000);
        // Read back from tier 1, failed once more, then dead-lettered.
        let origin = Origin::of_tier_record(&tier1);
        assert_eq!(origin.topic, "orders");
        assert_eq!(origin.offset, 386);
        assert_eq!(
            origin.timestamp,
            RecordTimestamp::CreateTime(1_700_000_000_000)
        );
        assert_eq!(origin.first_failure, Some(f.first_failure));
        let mut f2 = info();
        f2.attempts = 1;
        f2.error_type = "timeout";
        f2.last_failure = UNIX_EPOCH + Duration::from_millis(9_000);
        let h = w.headers_for(
            "orders.retry.1s",
            &origin,
            &f2,
            Destination::DeadLetter,
            &[],
        );
        let parked = to_record(h, b"k", b"p");
        let d = DeadLetterRecord::from_record(&parked).unwrap();
        assert_eq!(
            (d.topic.as_str(), d.partition, d.offset),
            ("orders", 3, 386)
        );
        assert_eq!(d.attempts, Some(3));
        assert_eq!(d.retry_tier, None);
        assert_eq!(
            d.history,
            vec![
                FailedStop {
                    topic: "orders".into(),
                    failed_at_ms: 2_000,
                    error_type: "handler_error".into()
                },
                FailedStop {
                    topic: "orders.retry.1s".into(),
                    failed_at_ms: 9_000,
                    error_type: "timeout".into()
                }
            ]
        );
        assert_eq!(d.error_type.as_deref(), Some("timeout"));
        // Only the user's header, once.
        assert_eq!(
            d.headers,
            vec![Header {
                name: "trace".into(),
                value: Some(b"abc".to_vec())
            }]
        );
        assert_eq!(
            parked
                .header(FIRST_FAILURE)
                .flatten()
                .map(|v| std::str::from_utf8(v).unwrap()),
            Some("1000")
        );
    }
}

#[test]
fn headers_of_the_other_style_are_the_users_and_never_the_origin() {
    let forged_native = [
        (TOPIC, b"elsewhere".to_vec()),
        (PARTITION, b"7".to_vec()),
        (OFFSET, b"999".to_vec()),
        (TIMESTAMP, b"5".to_vec()),
        (TIMESTAMP_TYPE, b"create_time".to_vec()),
        (RETRY_HISTORY, b"elsewhere:1:panic".to_vec()),
    ];
    let forged_spring = [
        (SPRING_TOPIC, b"elsewhere".to_vec()),
        (SPRING_PARTITION, 7i32.to_be_bytes().to_vec()),
        (SPRING_OFFSET, 999i64.to_be_bytes().to_vec()),
        (SPRING_TIMESTAMP, 5i64.to_be_bytes().to_vec()),
        (SPRING_TIMESTAMP_TYPE, b"CREATE_TIME".to_vec()),
    ];
    for style in [DeadLetterHeaders::Native, DeadLetterHeaders::SpringKafka] {
        let (same, other) = match style {
            DeadLetterHeaders::Native => (&forged_native[..], &forged_spring[..]),
            DeadLetterHeaders::SpringKafka => (&forged_spring[..], &forged_native[..]),
        };
        // The source record carries a complete set of each style.
        let mut original = Record::new("orders", 3, 386)
            .with_timestamp(RecordTimestamp::CreateTime(1_700_000_000_000));
        for (k, v) in other.iter().chain(same) {
            original = original.with_header(*k, Some(v.clone()));
        }
        let w = writer(style);
        let mut f = info();
        f.attempts = 1;
        let tier = Destination::Tier {
            tier: 1,
            written_ms: 4_000,
            due_ms: 5_000,
        };
        let h = w.headers_for("orders", &Origin::of(&original), &f, tier, &[]);
        let tier1 = to_record(h, b"k", b"p");
        let origin = Origin::of_tier_record(&tier1);
        assert_eq!(
            (origin.topic.as_str(), origin.partition, origin.offset),
            ("orders", 3, 386),
            "{style:?}"
        );
        assert_eq!(
            origin.timestamp,
            RecordTimestamp::CreateTime(1_700_000_000_000)
        );
        assert_eq!(origin.history, "orders:2000:handler_error");
        let h = w.headers_for("orders.retry.1s", &origin, &f, Destination::DeadLetter, &[]);
        let parked = to_record(h, b"k", b"p");
        for r in [&tier1, &parked] {
            let d = DeadLetterRecord::from_record(r).unwrap();
            assert_eq!(
                format!("{d:?}"),
                format!(
                    "{:?}",
                    DeadLetterRecord::from_record_with(r, style).unwrap()
                )
            );
            assert_eq!((d.topic.as_str(), d.offset), ("orders", 386), "{style:?}");
            // The other style's headers are the user's, once; the
            // forged ones of the written style (and the shared retry
            // history) are gone.
            let own: Vec<(&str, &[u8])> = d
                .headers
                .iter()
                .map(|h| (h.name.as_str(), h.value.as_deref().unwrap()))
                .collect();
            let want: Vec<(&str, &[u8])> = other
                .iter()
                .filter(|(k, _)| *k != RETRY_HISTORY)
                .map(|(k, v)| (*k, v.as_slice()))
                .collect();
            assert_eq!(own, want, "{style:?}");
            for (k, _) in same.iter().chain(other) {
                let n = r.headers().iter().filter(|h| h.name == *k).count();
                assert!(n <= 1, "{style:?}: {k} written {n} times");
            }
        }
        let d = DeadLetterRecord::from_record(&parked).unwrap();
        assert_eq!(d.history.len(), 2, "{:?}", d.history);
        assert_eq!(d.history[0].topic, "orders");
    }
}

#[test]
fn a_record_is_read_in_the_style_written_last() {
    // A Spring-style record that carried one native header, and a
    // native one that carried one Spring header.
    let spring = Record::new("src.dlt", 0, 1)
        .with_header(TOPIC, Some(b"forged".to_vec()))
        .with_header(SPRING_TOPIC, Some(b"orders".to_vec()))
        .with_header(SPRING_PARTITION, Some(2i32.to_be_bytes().to_vec()))
        .with_header(SPRING_OFFSET, Some(9i64.to_be_bytes().to_vec()));
    let d = DeadLetterRecord::from_record(&spring).unwrap();
    assert_eq!((d.topic.as_str(), d.partition, d.offset), ("orders", 2, 9));
    assert_eq!(d.headers.len(), 1);
    let native = Record::new("src.dlt", 0, 1)
        .with_header(SPRING_TOPIC, Some(b"forged".to_vec()))
        .with_header(TOPIC, Some(b"orders".to_vec()))
        .with_header(PARTITION, Some(b"2".to_vec()))
        .with_header(OFFSET, Some(b"9".to_vec()));
    let d = DeadLetterRecord::from_record(&native).unwrap();
    assert_eq!((d.topic.as_str(), d.partition, d.offset), ("orders", 2, 9));
    // One style only: the other's headers do not make a dead-letter
    // record.
    let e =
        DeadLetterRecord::from_record_with(&native, DeadLetterHeaders::SpringKafka).unwrap_err();
    assert_eq!(e.header, SPRING_PARTITION);
    // Malformed headers of the style written last are an error, not a
    // fall-back to the other style.
    let malformed = native.clone().with_header(OFFSET, Some(b"x".to_vec()));
    assert_eq!(
        DeadLetterRecord::from_record(&malformed)
            .unwrap_err()
            .header,
        OFFSET
    );
    // A tier record with malformed headers is its own origin.
    let origin = Origin::of_tier_record(&malformed);
    assert_eq!((origin.topic.as_str(), origin.offset), ("src.dlt", 1));
}

#[test]
fn weakening_producer_properties_are_refused() {
    for (k, v) in [
        ("acks", "0"),
        ("acks", "1"),
        ("request.required.acks", "0"),
        ("enable.idempotence", "false"),
        ("max.in.flight.requests.per.connection", "6"),
        ("max.in.flight", "6"),
        ("transactional.id", "t"),
    ] {
        let e = DeadLetter::new()
            .producer_property(k, v)
            .check_producer_properties()
            .unwrap_err();
        assert!(
            matches!(&e, ConfigError::DeadLetterProducerProperty { property, value, .. } if property == k && value == v),
            "{e:?}"
        );
    }
    for (k, v) in [
        ("acks", "all"),
        ("acks", "ALL"),
        ("acks", "-1"),
        ("request.required.acks", " -1"),
        ("enable.idempotence", "true"),
        ("max.in.flight", "5"),
        ("message.timeout.ms", "300"),
    ] {
        DeadLetter::new()
            .producer_property(k, v)
            .check_producer_properties()
            .unwrap_or_else(|e| panic!("{k}={v}: {e}"));
    }
}

#[test]
fn the_trace_context_replaces_the_original_one() {
    let original = Record::new("orders", 0, 1)
        .with_header("traceparent", Some(b"00-old".to_vec()))
        .with_header("other", Some(b"x".to_vec()))
        .with_header("tracestate", Some(b"a=1".to_vec()));
    let trace = [("traceparent".to_owned(), "00-new".to_owned())];
    let h = writer(DeadLetterHeaders::Native).headers(&original, &info(), &trace);
    let d = DeadLetterRecord::from_record(&to_record(h, b"k", b"p")).unwrap();
    let names: Vec<(&str, &[u8])> = d
        .headers
        .iter()
        .map(|h| (h.name.as_str(), h.value.as_deref().unwrap()))
        .collect();
    // Only the headers the propagator writes are replaced.
    assert_eq!(
        names,
        [
            ("other", &b"x"[..]),
            ("tracestate", &b"a=1"[..]),
            ("traceparent", &b"00-new"[..])
        ]
    );
}

#[test]
fn a_plain_record_is_not_a_dead_letter() {
    let e = DeadLetterRecord::from_record(&Record::new("t", 0, 0)).unwrap_err();
    assert_eq!(e.header, TOPIC);
}

#[test]
fn the_producer_inherits_security_but_not_consumer_settings() {
    let props = vec![
        ("bootstrap.servers".to_owned(), "b:9092".to_owned()),
        ("sasl.password".to_owned(), "pw".to_owned()),
        ("session.timeout.ms".to_owned(), "6000".to_owned()),
    ];
    let cc = DeadLetterWriter::producer_config(&props, &DeadLetter::new());
    assert_eq!(cc.get("bootstrap.servers"), Some("b:9092"));
    assert_eq!(cc.get("sasl.password"), Some("pw"));
    assert_eq!(cc.get("session.timeout.ms"), None);
    assert_eq!(cc.get("acks"), Some("all"));
    assert_eq!(cc.get("enable.idempotence"), Some("true"));
}
