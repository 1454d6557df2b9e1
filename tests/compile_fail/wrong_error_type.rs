// A handler whose error type does not convert into `BoxError`: a
// `Box<dyn Error>` is neither `Send` nor `Sync`.
use std::error::Error;

use fresh_consumer::{FreshConsumer, Record};

async fn handle(record: Record) -> Result<(), Box<dyn Error>> {
    let text = std::str::from_utf8(record.payload().unwrap_or_default())?;
    println!("{text}");
    Ok(())
}

#[tokio::main]
async fn main() {
    let _ = FreshConsumer::new(handle)
        .bootstrap_servers("localhost:9092")
        .group_id("orders-projector")
        .topics(["orders"])
        .run()
        .await;
}
