//! Handlers with a wrong signature fail to compile where they are passed
//! (the argument of `FreshConsumer::new` / `FreshConsumer::batched`), with
//! the crate's own message (issue 44, item 4).
//!
//! Each `tests/compile_fail/*.rs` must fail to compile, and rustc's output
//! must equal its `.stderr` file (trybuild blanks out paths and the line
//! numbers outside the case). The `.stderr` files are pinned to the
//! toolchain CI uses (rustc 1.95): another rustc may word or lay out the
//! same errors differently. After a toolchain update, or a change to the
//! `Handler`/`BatchHandler` bounds or their messages, regenerate them with
//!
//! ```text
//! TRYBUILD=overwrite cargo test --test compile_fail
//! ```
//!
//! and read the diff before committing it. A case must not make rustc quote
//! the standard library's source (a note pointing into `$RUST/...`): rustc
//! prints that source only where the `rust-src` component is installed, so
//! the pinned output would differ from machine to machine.
//!
//! trybuild checks the cases in a project of its own under
//! `target/tests/trybuild/`, with the crate's dependencies and
//! dev-dependencies: its first run compiles them again (`cargo check`).

#[test]
fn handlers_with_a_wrong_signature() {
    trybuild::TestCases::new().compile_fail("tests/compile_fail/*.rs");
}
