//! The plumbing of `examples/quickstart.rs`, none of it the lesson: the
//! command line (`args.rs`), the embedded broker or the user's cluster and
//! its checks (`cluster.rs`), the demo workload and what ends a run
//! (`workload.rs`), the meter and tracer providers with the in-process
//! reader of the event ages (`telemetry.rs`), and the table printed at the
//! end with the demo's check (`report.rs`).
//!
//! The example includes it with `#[path = "support/quickstart/mod.rs"] mod kit;`
//! (see `../mock_broker.rs` for why this folder is not an example); it uses
//! the example's `cli`, `mock_broker` and `names` modules.

mod args;
mod cluster;
mod report;
mod telemetry;
mod workload;

pub use args::Args;
pub use cluster::Target;
pub use report::{check_demo, print_report};
pub use telemetry::Telemetry;
pub use workload::{Tally, Workload, stop_signal};

/// Log lines on stderr, `RUST_LOG` or `warn`; colours only on a terminal.
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}
