//! Process plumbing shared by the examples, none of it about Kafka: a bad
//! command line, a failed run, and the signals that stop a service.
//!
//! Each example includes it with `#[path = "support/cli.rs"] mod cli;`
//! (see `mock_broker.rs` next to it for why this folder is not an example).

// Each example uses part of this module.
#![allow(dead_code)]

use std::error::Error;
use std::ops::Deref;
use std::process::ExitCode;

/// The command line parsed by `parse`, or, when it fails, its message on
/// stderr as `program: message` and exit status 2 (bad usage).
pub fn args_or_exit<A>(program: &str, parse: impl FnOnce() -> Result<A, String>) -> A {
    parse().unwrap_or_else(|message| {
        eprintln!("{program}: {message}");
        std::process::exit(2)
    })
}

/// The number after `flag` on the command line (`value` is the argument
/// that followed it, if any), or the message `{flag} needs a number`.
pub fn number(flag: &str, value: Option<String>) -> Result<u64, String> {
    value
        .as_deref()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("{flag} needs a number"))
}

/// Prints a run's error with its causes on stderr, as
/// `program: outer: inner: innermost`, and returns exit status 1.
pub fn failed(program: &str, error: &dyn Error) -> ExitCode {
    eprintln!("{program}: {}", chain(error));
    ExitCode::FAILURE
}

/// A run's exit status: 0 when `result` is `Ok`, else [`failed`]'s (the
/// error on stderr, status 1). Takes `Box<dyn Error>` and
/// `Box<dyn Error + Send + Sync>` alike.
pub fn exit_status<E>(program: &str, result: Result<(), E>) -> ExitCode
where
    E: Deref,
    E::Target: Error,
{
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{program}: {}", chain(&*error));
            ExitCode::FAILURE
        }
    }
}

/// An error and its sources, `outer: inner: innermost`.
pub fn chain(error: &(impl Error + ?Sized)) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        message.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    message
}

/// Resolves on SIGTERM or SIGINT (Ctrl-C): the library's own, which
/// `FreshConsumer::run` uses too. (Not every example uses it.)
#[allow(unused_imports)]
pub use fresh_consumer::shutdown_signal;
