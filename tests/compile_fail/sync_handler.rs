// A handler that is not `async`: it returns a `Result`, not a future.
use fresh_consumer::{FreshConsumer, Record};

fn handle(record: Record) -> Result<(), std::io::Error> {
    println!("{}@{}", record.topic(), record.offset());
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
