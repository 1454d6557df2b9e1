//! What handlers did: the offsets that succeeded, per partition, in order.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt;
use std::future::Ready;
use std::sync::{Arc, Mutex};

use std::time::Duration;

use fresh_consumer::{Handler, Record};

/// Offsets whose handler succeeded, per partition, in the order they
/// succeeded. Cloning shares it.
#[derive(Clone, Default)]
pub struct Seen(Arc<Mutex<BTreeMap<i32, Vec<i64>>>>);

impl Seen {
    pub fn push(&self, r: &Record) {
        self.push_at(r.partition(), r.offset());
    }

    pub fn push_at(&self, partition: i32, offset: i64) {
        self.0
            .lock()
            .unwrap()
            .entry(partition)
            .or_default()
            .push(offset);
    }

    /// The offsets of `partition`, in the order they succeeded.
    pub fn of(&self, partition: i32) -> Vec<i64> {
        self.0
            .lock()
            .unwrap()
            .get(&partition)
            .cloned()
            .unwrap_or_default()
    }

    pub fn count(&self, partition: i32) -> usize {
        self.0.lock().unwrap().get(&partition).map_or(0, Vec::len)
    }

    pub fn total(&self) -> usize {
        self.0.lock().unwrap().values().map(Vec::len).sum()
    }

    pub fn snapshot(&self) -> BTreeMap<i32, Vec<i64>> {
        self.0.lock().unwrap().clone()
    }

    /// Every offset `0..counts[p]` of every partition succeeded exactly once,
    /// in offset order.
    pub fn assert_exactly_once_in_order(&self, counts: &[i64]) {
        let seen = self.snapshot();
        for (p, &n) in counts.iter().enumerate() {
            let got = seen.get(&(p as i32)).cloned().unwrap_or_default();
            let want: Vec<i64> = (0..n).collect();
            if got != want {
                let first_bad = got
                    .iter()
                    .zip(&want)
                    .position(|(a, b)| a != b)
                    .unwrap_or(got.len().min(want.len()));
                panic!(
                    "partition {p}: {} records succeeded, expected offsets 0..{n} once each in order; \
                     first difference at index {first_bad}: got {:?}",
                    got.len(),
                    &got[first_bad.saturating_sub(2)..(first_bad + 3).min(got.len())]
                );
            }
        }
    }

    /// Every offset `0..counts[p]` of every partition succeeded at least once.
    pub fn assert_at_least_once(&self, counts: &[i64]) {
        let seen = self.snapshot();
        for (p, &n) in counts.iter().enumerate() {
            let mut got = seen.get(&(p as i32)).cloned().unwrap_or_default();
            got.sort_unstable();
            got.dedup();
            assert_eq!(
                got,
                (0..n).collect::<Vec<_>>(),
                "partition {p}: not every offset below {n} succeeded"
            );
        }
    }

    /// A handler that sleeps 1 ms (without blocking) on the records `slow`
    /// picks, and records every record as succeeded.
    pub fn slow_recorder(
        &self,
        slow: impl Fn(&Record) -> bool + Send + Sync + 'static,
    ) -> impl Handler {
        let seen = self.clone();
        move |r: Record| {
            let (seen, slow) = (seen.clone(), slow(&r));
            async move {
                if slow {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                seen.push(&r);
                Ok::<(), std::io::Error>(())
            }
        }
    }

    /// A handler that records every record as succeeded, at once.
    pub fn recorder(
        &self,
    ) -> impl Fn(Record) -> Ready<Result<(), std::io::Error>> + Send + Sync + 'static {
        let seen = self.clone();
        move |r: Record| {
            seen.push(&r);
            std::future::ready(Ok(()))
        }
    }
}

/// A handler that calls `handle` with each record and a clone of `state` of
/// its own (what a handler closure otherwise writes out twice: one clone
/// moved into the closure, one into each call's future).
pub fn with_state<S, F, Fut>(state: S, handle: F) -> impl Fn(Record) -> Fut + Send + Sync + 'static
where
    S: Clone + Send + Sync + 'static,
    F: Fn(Record, S) -> Fut + Send + Sync + 'static,
{
    move |r: Record| handle(r, state.clone())
}

/// (partition, records, last offset) per partition: what a timed-out wait
/// shows.
impl fmt::Debug for Seen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let handled: Vec<(i32, usize, Option<i64>)> = self
            .snapshot()
            .iter()
            .map(|(p, v)| (*p, v.len(), v.last().copied()))
            .collect();
        write!(f, "handled (partition, records, last offset): {handled:?}")
    }
}
