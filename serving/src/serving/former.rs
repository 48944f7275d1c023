//! The batch-former extension point of a static replica: when the replica is empty, which of the
//! requests waiting at it form the next batch. The former holds those requests (a static batch
//! is chosen as a set, not popped one at a time as a `QueuePolicy` admits), picks the batch from
//! its candidate window and, as the family's `AdmitHook`, says how long each output is. CAPS's
//! batch selectors reach the replica through one (`serving_family::selector_former::SelectorFormer`).

use super::queue::QueuedRequest;
use super::replica::AdmitHook;

/// Forms a static replica's batches from the requests waiting at it.
pub trait BatchFormer: AdmitHook {
    /// Removes the next batch from the waiting requests: at most `capacity` of them, chosen from
    /// the former's candidate window, appended to `batch` in the order they join it (nothing
    /// when no request waits).
    fn form(&mut self, capacity: usize, batch: &mut Vec<QueuedRequest>);
    /// Takes back `requests` (the tail of the batch just formed, in batch order) that the
    /// replica's KV cache cannot hold alongside the rest: they wait again, ahead of the others.
    fn put_back(&mut self, requests: Vec<QueuedRequest>);
}
