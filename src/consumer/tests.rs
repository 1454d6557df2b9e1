use super::*;
use crate::config::{is_secret_property, secret_fragments};
use crate::health::{ConsumerState, HealthReason, HealthStatus};

/// A handler for the tests that only build and validate a consumer.
struct Noop;

impl Handler for Noop {
    type Error = std::convert::Infallible;

    async fn handle(&self, _record: crate::record::Record) -> Result<(), Self::Error> {
        Ok(())
    }
}

fn base() -> FreshConsumer<Noop> {
    FreshConsumer::new(Noop)
        .bootstrap_servers("localhost:9092")
        .group_id("g")
        .topics(["t"])
}

#[test]
fn a_complete_config_validates() {
    base().validate().unwrap();
}

#[test]
fn missing_required_settings_are_typed_errors() {
    let e = FreshConsumer::new(Noop)
        .group_id("g")
        .topics(["t"])
        .validate();
    assert_eq!(e, Err(ConfigError::MissingBootstrapServers));
    let e = FreshConsumer::new(Noop)
        .bootstrap_servers("b:1")
        .topics(["t"])
        .validate();
    assert_eq!(e, Err(ConfigError::MissingGroupId));
    let e = FreshConsumer::new(Noop)
        .bootstrap_servers("b:1")
        .group_id("g")
        .validate();
    assert_eq!(e, Err(ConfigError::MissingTopics));
    let e = base().topics([""]).validate();
    assert_eq!(e, Err(ConfigError::EmptyTopicName));
}

#[test]
fn auto_commit_names_the_library_option() {
    let e = base()
        .set("enable.auto.commit", "true")
        .validate()
        .unwrap_err();
    assert_eq!(
        e,
        ConfigError::AutoCommit {
            property: "enable.auto.commit",
            instead: "commit_interval"
        }
    );
    assert!(e.to_string().contains("commit_interval"));
    let e = base()
        .set("enable.auto.offset.store", "true")
        .validate()
        .unwrap_err();
    assert!(matches!(e, ConfigError::AutoCommit { .. }));
    // librdkafka's other spellings of true and false.
    for v in ["1", "T", "TRUE"] {
        let e = base().set("enable.auto.commit", v).validate().unwrap_err();
        assert!(matches!(e, ConfigError::AutoCommit { .. }), "{v}");
    }
    for v in ["false", "0", "f"] {
        base().set("enable.auto.commit", v).validate().unwrap();
    }
}

#[test]
fn librdkafka_rejects_unknown_and_invalid_properties_before_io() {
    let e = base().set("no.such.property", "1").validate().unwrap_err();
    assert!(
        matches!(&e, ConfigError::InvalidProperty { property, .. } if property == "no.such.property"),
        "{e:?}"
    );
    let e = base()
        .set("session.timeout.ms", "soon")
        .validate()
        .unwrap_err();
    assert!(matches!(e, ConfigError::InvalidProperty { .. }), "{e:?}");
}

#[test]
fn check_crcs_needs_split_queues() {
    let e = base()
        .split_partition_queues(false)
        .set("check.crcs", "true")
        .validate()
        .unwrap_err();
    assert!(
        matches!(&e, ConfigError::InvalidProperty { property, .. } if property == "check.crcs"),
        "{e:?}"
    );
    base().set("check.crcs", "true").validate().unwrap();
    base()
        .split_partition_queues(false)
        .set("check.crcs", "false")
        .validate()
        .unwrap();
}

#[test]
fn library_options_are_checked() {
    for c in [
        base().max_buffered_records(0),
        base().commit_interval(Duration::ZERO),
        base().commit_batch_records(0),
        base().retry_backoff(Duration::from_secs(2), Duration::from_secs(1)),
        base().poll_warning_ratio(0.0),
        base().poll_warning_ratio(1.5),
        base()
            .set("max.poll.interval.ms", "5000")
            .revoke_timeout(Duration::from_secs(6)),
    ] {
        assert!(
            matches!(c.validate(), Err(ConfigError::InvalidOption { .. })),
            "{c:?}"
        );
    }
}

#[test]
fn partition_eof_events_are_refused() {
    for v in ["true", "T", "1"] {
        let e = base()
            .set("enable.partition.eof", v)
            .validate()
            .unwrap_err();
        assert!(
            matches!(&e, ConfigError::InvalidProperty { property, .. } if property == "enable.partition.eof"),
            "{v}: {e:?}"
        );
    }
    for v in ["false", "F", "0"] {
        base().set("enable.partition.eof", v).validate().unwrap();
    }
}

#[test]
fn turning_headers_off_conflicts_with_options_that_need_them() {
    base().read_headers(false).validate().unwrap();
    for c in [
        base().read_headers(false).event_time_header("event-time"),
        base()
            .read_headers(false)
            .on_exhausted(OnExhausted::DeadLetter(Default::default())),
    ] {
        assert!(
            matches!(
                c.validate(),
                Err(ConfigError::InvalidOption {
                    option: "read_headers",
                    ..
                })
            ),
            "{c:?}"
        );
    }
}

#[test]
fn bad_retry_topics_are_typed_config_errors() {
    use crate::error::RetryTopicsError;
    use crate::failure::RetryTopics;
    let s = Duration::from_secs;
    base()
        .on_exhausted(OnExhausted::RetryTopics(RetryTopics::new([s(1), s(2)])))
        .validate()
        .unwrap();
    for (policy, topics, want) in [
        (RetryTopics::new([]), vec!["t"], RetryTopicsError::NoTiers),
        (
            RetryTopics::new([s(2), s(1)]),
            vec!["t"],
            RetryTopicsError::UnsortedDelays { tier: 2 },
        ),
        (
            RetryTopics::new([Duration::ZERO]),
            vec!["t"],
            RetryTopicsError::ZeroDelay { tier: 1 },
        ),
        (
            RetryTopics::new([s(1)]),
            vec!["t", "t.retry.1s"],
            RetryTopicsError::TopicCollision {
                topic: "t.retry.1s".into(),
                first: "source topic t.retry.1s".into(),
                second: "tier 1 of t".into(),
            },
        ),
    ] {
        let e = base()
            .topics(topics)
            .on_exhausted(OnExhausted::RetryTopics(policy))
            .validate();
        assert_eq!(e, Err(ConfigError::RetryTopics(want)));
    }
    assert!(matches!(
        base()
            .read_headers(false)
            .on_exhausted(OnExhausted::RetryTopics(RetryTopics::new([s(1)])))
            .validate(),
        Err(ConfigError::InvalidOption {
            option: "read_headers",
            ..
        })
    ));
}

#[test]
fn secrets_never_show_in_debug_or_errors() {
    let c = base()
        .set("security.protocol", "SASL_PLAINTEXT")
        .set("sasl.mechanisms", "PLAIN")
        .set("sasl.username", "alice")
        .set("sasl.password", "hunter2-very-secret")
        .set("sasl.oauthbearer.client.secret", "s3cr3t-oauth")
        .set("ssl.key.password", "keypass-xyz");
    let dbg = format!("{c:?}");
    for secret in ["hunter2-very-secret", "s3cr3t-oauth", "keypass-xyz"] {
        assert!(!dbg.contains(secret), "{dbg}");
    }
    assert!(dbg.contains("alice"));
    // An invalid value for a secret property is reported without the value.
    let e = base()
        .set("sasl.oauthbearer.config", "\u{0}hunter2-very-secret")
        .validate();
    if let Err(e) = e {
        assert!(!format!("{e} {e:?}").contains("hunter2-very-secret"));
    }
}

#[test]
fn secret_fragments_cover_values_and_their_parts() {
    let props = [
        ("sasl.username".to_owned(), "alice".to_owned()),
        ("sasl.password".to_owned(), "pw".to_owned()),
        (
            "sasl.oauthbearer.config".to_owned(),
            "principal=u extension_x=ext-secret tail-secret".to_owned(),
        ),
        (
            "sasl.oauthbearer.assertion.private.key.passphrase".to_owned(),
            "phrase-1".to_owned(),
        ),
    ];
    let f = secret_fragments(&props);
    for want in [
        "pw",
        "principal=u extension_x=ext-secret tail-secret",
        "extension_x=ext-secret",
        "ext-secret",
        "tail-secret",
        "principal=u",
        "phrase-1",
    ] {
        assert!(f.iter().any(|s| s == want), "{want} missing from {f:?}");
    }
    assert!(!f.iter().any(|s| s == "alice" || s == "u"), "{f:?}");
    assert!(
        f.windows(2).all(|w| w[0].len() >= w[1].len()),
        "longest first"
    );
    for key in [
        "sasl.oauthbearer.assertion.private.key.passphrase",
        "sasl.oauthbearer.assertion.private.key.pem",
    ] {
        assert!(is_secret_property(key), "{key}");
    }
    assert!(!is_secret_property("ssl.certificate.pem"));
}

#[test]
fn properties_the_consumer_protocol_refuses_are_config_errors() {
    let kip848 = || {
        FreshConsumer::new(Noop)
            .bootstrap_servers("b:1")
            .group_id("g")
            .topics(["t"])
            .set("group.protocol", "consumer")
    };
    kip848().validate().unwrap();
    kip848()
        .set("max.poll.interval.ms", "60000")
        .validate()
        .unwrap();
    for property in [
        "session.timeout.ms",
        "heartbeat.interval.ms",
        "partition.assignment.strategy",
        "group.protocol.type",
    ] {
        match kip848().set(property, "1000").validate() {
            Err(ConfigError::InvalidProperty {
                property: p,
                reason,
            }) => {
                assert_eq!(p, property);
                assert!(reason.contains("group.protocol=consumer"), "{reason}");
            }
            other => panic!("{property}: {other:?}"),
        }
    }
    // The classic protocol takes them.
    FreshConsumer::new(Noop)
        .bootstrap_servers("b:1")
        .group_id("g")
        .topics(["t"])
        .set("session.timeout.ms", "10000")
        .validate()
        .unwrap();
}

#[test]
fn lag_counts_to_the_last_stable_offset_unless_read_uncommitted() {
    let read_committed = |c: FreshConsumer<Noop>| {
        c.bootstrap_servers("b:1")
            .group_id("g")
            .topics(["t"])
            .settings
            .validate()
            .unwrap()
            .health
            .read_committed
    };
    assert!(read_committed(FreshConsumer::new(Noop)));
    assert!(read_committed(
        FreshConsumer::new(Noop).set("isolation.level", "read_committed")
    ));
    assert!(!read_committed(
        FreshConsumer::new(Noop).set("isolation.level", "read_uncommitted")
    ));
}

#[test]
fn options_are_validated() {
    let base = || {
        FreshConsumer::new(Noop)
            .bootstrap_servers("b:1")
            .group_id("g")
            .topics(["t"])
    };
    base().validate().unwrap();
    assert!(matches!(
        base()
            .health_thresholds(HealthThresholds::default().with_stall_after(Duration::ZERO))
            .validate(),
        Err(ConfigError::InvalidOption {
            option: "health_thresholds",
            ..
        })
    ));
    assert!(matches!(
        base().set("auto.offset.reset", "sometimes").validate(),
        Err(ConfigError::InvalidProperty { property, .. }) if property == "auto.offset.reset"
    ));
    base()
        .set("auto.offset.reset", "latest")
        .validate()
        .unwrap();
    base()
        .statistics_interval(Duration::ZERO)
        .validate()
        .unwrap();
    assert!(matches!(
        base()
            .statistics_interval(Duration::from_secs(100_000))
            .validate(),
        Err(ConfigError::InvalidOption {
            option: "statistics_interval",
            ..
        })
    ));
    assert!(
        base()
            .set("statistics.interval.ms", "often")
            .validate()
            .is_err()
    );
}

#[test]
fn a_handle_before_the_run_says_not_started() {
    let c = FreshConsumer::new(Noop).group_id("g");
    let s = c.health_handle().snapshot();
    assert_eq!(s.state, ConsumerState::NotStarted);
    assert_eq!(s.status, HealthStatus::Degraded);
    assert_eq!(s.reasons, vec![HealthReason::NotStarted]);
    assert!(s.partitions.is_empty());
}
