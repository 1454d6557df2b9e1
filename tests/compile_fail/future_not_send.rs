// A handler whose future is not `Send`: it holds an `Rc` across an `.await`.
use std::rc::Rc;

use fresh_consumer::{FreshConsumer, Record};

async fn handle(record: Record) -> Result<(), std::io::Error> {
    let topic = Rc::new(record.topic().to_owned());
    tokio::task::yield_now().await;
    println!("{topic}@{}", record.offset());
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
