// A handler that borrows the record: handlers take an owned `Record`.
use fresh_consumer::{FreshConsumer, Record};

async fn handle(record: &Record) -> Result<(), std::io::Error> {
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
