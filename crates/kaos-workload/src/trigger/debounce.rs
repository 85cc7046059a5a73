//! A trigger that waits for quiet: an item is passed on once it has not recurred for `quiet`
//! (and at the latest `max_wait` after it first came), so a burst of changes to one object is
//! one reconcile. The Controller's own debounce (`RECONCILE_DEBOUNCE`, 200 ms) merges what
//! arrives together; this is for changes that cost a rollout each (a ModelAPI's LiteLLM config
//! gets an entry per budgeted agent: a hundred agents applied at once should roll it once).

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};

use super::receive;

/// `input`, each item held until it has been quiet for `quiet` or waited `max_wait`. Must be
/// called within a Tokio runtime (the holding runs in a task of its own, ended with `input` or
/// when the returned stream is dropped).
pub fn debounced<T>(
    input: impl Stream<Item = T> + Send + 'static,
    quiet: Duration,
    max_wait: Duration,
) -> impl Stream<Item = T> + Send + 'static
where
    T: Eq + Hash + Clone + Send + 'static,
{
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut input = Box::pin(input);
        // Per item: when it first came, and when it is due.
        let mut held: HashMap<T, (Instant, Instant)> = HashMap::new();
        loop {
            let next_due = held.values().map(|(_, due)| *due).min();
            tokio::select! {
                item = input.next() => {
                    let Some(item) = item else { break };
                    let now = Instant::now();
                    let first = held.get(&item).map_or(now, |(first, _)| *first);
                    held.insert(item, (first, (now + quiet).min(first + max_wait)));
                }
                () = sleep_until(next_due.unwrap_or_else(Instant::now)), if next_due.is_some() => {
                    let now = Instant::now();
                    let due: Vec<T> = held
                        .iter()
                        .filter(|(_, (_, at))| *at <= now)
                        .map(|(item, _)| item.clone())
                        .collect();
                    for item in due {
                        held.remove(&item);
                        if tx.send(item).is_err() {
                            return;
                        }
                    }
                }
            }
        }
        // The input ended: what is held goes now.
        for item in held.into_keys() {
            let _ = tx.send(item);
        }
    });
    receive(rx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::stream;

    /// What `debounced` yields for items arriving at these offsets (ms), with when it yields
    /// them.
    async fn run(arrivals: Vec<(u64, &'static str)>) -> Vec<(u64, &'static str)> {
        let start = Instant::now();
        // An input that stays open, as a watch does.
        let input = stream::iter(arrivals)
            .then(move |(at, item)| async move {
                sleep_until(start + Duration::from_millis(at)).await;
                item
            })
            .chain(stream::pending());
        debounced(input, Duration::from_secs(2), Duration::from_secs(10))
            .map(|item| ((Instant::now() - start).as_millis() as u64, item))
            .take_until(tokio::time::sleep(Duration::from_secs(60)))
            .collect()
            .await
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_is_one_item_once_it_is_quiet() {
        let burst = (0..10).map(|i| (i * 500, "llm")).collect();
        assert_eq!(run(burst).await, [(6500, "llm")]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_that_never_stops_still_passes_after_the_longest_wait() {
        let endless = (0..30).map(|i| (i * 1000, "llm")).collect::<Vec<_>>();
        let out = run(endless).await;
        assert_eq!(out[0], (10_000, "llm"));
        assert!(out.len() >= 2 && out.len() <= 4, "{out:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn items_are_held_apart() {
        let out = run(vec![(0, "a"), (1000, "b"), (1500, "a")]).await;
        assert_eq!(out, [(3000, "b"), (3500, "a")]);
    }
}
