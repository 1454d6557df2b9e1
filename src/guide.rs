//! The guide: what the library does in each situation, with the settings,
//! signals and measurements behind it. Documentation only (no items).
//!
//! The chapters are the files in `docs/guide/` of the repository; their
//! examples are compiled and run as doctests.
//!
//! | chapter | for |
//! |---|---|
//! | [`trying_it`] | the quickstart on the embedded broker or your cluster |
//! | [`handlers`] | the handler, the builder, failures and stopping |
//! | [`batches`] | a partition's records in one call |
//! | [`guarantees`] | ordering, commits, rebalances, shutdown, offset resets |
//! | [`configuration`] | every setting, its default, pausing and throttling |
//! | [`failures`] | retries, dead letters, retry topics, stale records, redrive |
//! | [`outputs`] | effects, outputs, freshness across hops |
//! | [`transactions`] | exactly once into Kafka |
//! | [`metrics`] | instruments, units, attributes, OTLP, semantic conventions |
//! | [`traces`] | spans and links |
//! | [`signals`] | the six ways a lag graph lies |
//! | [`slo`] | freshness objectives: SLO counters and Prometheus rules |
//! | [`monitor`] | `fresh-monitor`, Prometheus, KEDA |
//! | [`testing`] | the test kit for your handlers |
//! | [`performance`] | throughput and CPU beside C and Java |
//! | [`architecture`] | how it is built, for contributors |

#[doc = include_str!("../docs/guide/trying-it.md")]
pub mod trying_it {}

#[doc = include_str!("../docs/guide/handlers.md")]
pub mod handlers {}

#[doc = include_str!("../docs/guide/batches.md")]
pub mod batches {}

#[doc = include_str!("../docs/guide/guarantees.md")]
pub mod guarantees {}

#[doc = include_str!("../docs/guide/configuration.md")]
pub mod configuration {}

#[doc = include_str!("../docs/guide/failures.md")]
pub mod failures {}

#[doc = include_str!("../docs/guide/outputs.md")]
pub mod outputs {}

#[doc = include_str!("../docs/guide/transactions.md")]
pub mod transactions {}

#[doc = include_str!("../docs/guide/metrics.md")]
pub mod metrics {}

#[doc = include_str!("../docs/guide/traces.md")]
pub mod traces {}

#[doc = include_str!("../docs/guide/signals.md")]
pub mod signals {}

#[doc = include_str!("../docs/guide/slo.md")]
pub mod slo {}

#[doc = include_str!("../docs/guide/monitor.md")]
pub mod monitor {}

#[doc = include_str!("../docs/guide/testing.md")]
pub mod testing {}

#[doc = include_str!("../docs/guide/performance.md")]
pub mod performance {}

#[doc = include_str!("../docs/guide/architecture.md")]
pub mod architecture {}
