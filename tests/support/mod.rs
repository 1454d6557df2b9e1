//! What the test binaries share. Each binary declares `mod support;` and
//! uses what it needs (hence `#![allow(dead_code)]` in each module).

pub mod child;
pub mod cluster;
#[path = "../../examples/support/dead_letters.rs"]
pub mod dead_letters;
pub mod handled;
pub mod kafka;
pub mod logs;
pub mod metrics;
pub mod otlp_receiver;
pub mod run;
pub mod wait;

/// The `fresh-monitor` binary. A plain `cargo test` builds it: the crate's
/// self dev-dependency enables the `cli` feature its `required-features`
/// name, and cargo sets `CARGO_BIN_EXE_fresh-monitor` for the integration
/// tests.
#[allow(dead_code)]
pub fn monitor_binary() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_BIN_EXE_fresh-monitor"))
}

/// The executable of example `name`, built with the cargo that runs the
/// tests (same target directory and profile; a plain `cargo test` has
/// built it already, so this is a no-op then).
#[allow(dead_code)]
pub fn example_binary(name: &str) -> std::path::PathBuf {
    use std::process::Stdio;
    let mut build = std::process::Command::new(env!("CARGO"));
    build
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["build", "--example", name, "--message-format=json"])
        .stderr(Stdio::inherit());
    let exe = std::env::current_exe().expect("test binary");
    if exe.components().any(|c| c.as_os_str() == "release") {
        build.arg("--release");
    }
    let out = build.output().expect("cargo build --example");
    assert!(out.status.success(), "cargo build --example {name} failed");
    // The example's artifact is the one line of kind "example" with an
    // executable.
    let stdout = String::from_utf8(out.stdout).expect("cargo's JSON is UTF-8");
    let line = stdout
        .lines()
        .find(|l| l.contains(r#""kind":["example"]"#) && l.contains(r#""executable":""#))
        .expect("cargo reported the example's executable");
    let start = line.find(r#""executable":""#).unwrap() + r#""executable":""#.len();
    let end = start + line[start..].find('"').unwrap();
    std::path::PathBuf::from(&line[start..end])
}
