pub mod kafka;
pub mod otlp_receiver;
