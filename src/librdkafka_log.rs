//! librdkafka's log lines and client errors into `tracing` (target
//! `librdkafka`), with secret property values redacted: shared by the
//! consumer's context and the library's producers' (dead-letter, retry
//! tiers, outputs).

use rdkafka::config::RDKafkaLogLevel;

/// `text` with every occurrence of a secret replaced by `[redacted]`
/// (`secrets`: secret property values and parts of them, longest first).
pub(crate) fn redact<'a>(secrets: &[String], text: &'a str) -> std::borrow::Cow<'a, str> {
    let mut out = std::borrow::Cow::Borrowed(text);
    for s in secrets {
        if out.contains(s.as_str()) {
            out = std::borrow::Cow::Owned(out.replace(s.as_str(), "[redacted]"));
        }
    }
    out
}

/// Emits one librdkafka log line (facility `fac`) at its level, redacted.
pub(crate) fn log(secrets: &[String], level: RDKafkaLogLevel, fac: &str, message: &str) {
    let message = redact(secrets, message);
    match level {
        RDKafkaLogLevel::Emerg
        | RDKafkaLogLevel::Alert
        | RDKafkaLogLevel::Critical
        | RDKafkaLogLevel::Error => {
            tracing::error!(target: "librdkafka", facility = fac, "{message}")
        }
        RDKafkaLogLevel::Warning => {
            tracing::warn!(target: "librdkafka", facility = fac, "{message}")
        }
        RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
            tracing::info!(target: "librdkafka", facility = fac, "{message}")
        }
        RDKafkaLogLevel::Debug => {
            tracing::debug!(target: "librdkafka", facility = fac, "{message}")
        }
    }
}
