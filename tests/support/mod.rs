//! What the test binaries share. Each binary declares `mod support;` and
//! uses what it needs (hence `#![allow(dead_code)]` in each module).

pub mod child;
#[path = "../../examples/support/dead_letters.rs"]
pub mod dead_letters;
pub mod handled;
pub mod kafka;
pub mod logs;
pub mod metrics;
pub mod otlp_receiver;
pub mod run;
pub mod wait;
