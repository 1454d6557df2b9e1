// A batch handler that is not `async`.
use fresh_consumer::{Batch, BatchError, FreshConsumer};

fn write(batch: Batch) -> Result<(), BatchError> {
    println!("up to offset {}", batch.last_offset());
    Ok(())
}

#[tokio::main]
async fn main() {
    let _ = FreshConsumer::batched(write)
        .bootstrap_servers("localhost:9092")
        .group_id("orders-sink")
        .topics(["orders"])
        .run()
        .await;
}
