//! `Memo<K, V>`: the one per-process cache of pure computations (a calibration pass, a planning
//! curve set, a synthetic expert trace, a GEM search), bounded to its `capacity` most recently
//! used entries, shared across the threads that run cells in parallel, and `ExactKey`, the
//! byte key most of its users write.
//!
//! Invariant: a memo holds only what a pure function of its key computed, so a hit returns
//! exactly what a fresh computation would; whether a cell finds the memo warm or cold, evicted
//! or full, changes its run time, never its results. The key must therefore name everything
//! the computation reads: an exact key (a struct with `Eq + Hash`, an `ExactKey`), or a
//! collision-resistant digest of one where the exact key would outweigh the value.
//!
//! Bound: at most `capacity` entries; inserting a new key into a full memo first drops the
//! least recently used entry (the one whose last lookup is oldest; a hit makes an entry the
//! most recent). A computation under way is an entry too: a second caller of the same key
//! waits for it rather than computing again. A caller that already holds an evicted entry
//! keeps its value (`Arc`); the memory a memo pins is `capacity` keys and values.

use std::collections::HashMap;
use std::fmt::{Debug, Write};
use std::hash::Hash;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// A bounded memo of the values of a pure function of `K` (see the module's invariant).
pub struct Memo<K, V> {
    capacity: usize,
    state: Mutex<Option<State<K, V>>>,
}

/// The entries, with a clock of lookups for the eviction order.
struct State<K, V> {
    entries: HashMap<K, Entry<V>>,
    clock: u64,
}

/// One key's value (empty while its computation runs) and the clock at its last lookup.
struct Entry<V> {
    slot: Arc<OnceLock<Arc<V>>>,
    used: u64,
}

impl<K: Eq + Hash + Clone, V> Memo<K, V> {
    /// An empty memo of at most `capacity` entries (at least 1), usable as a `static`.
    pub const fn new(capacity: usize) -> Memo<K, V> {
        assert!(capacity > 0, "a memo keeps at least one entry");
        Memo {
            capacity,
            state: Mutex::new(None),
        }
    }

    /// The value of `key`: the kept one, or `compute()`'s (kept, evicting the least recently
    /// used entry if the memo is full). A caller of a key whose computation is under way on
    /// another thread waits for that value. `compute` must be a pure function of `key`.
    pub fn get_or_compute(&self, key: &K, compute: impl FnOnce() -> V) -> Arc<V> {
        let slot = {
            let mut guard = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            let state = guard.get_or_insert_with(|| State {
                entries: HashMap::new(),
                clock: 0,
            });
            state.clock += 1;
            let clock = state.clock;
            if let Some(entry) = state.entries.get_mut(key) {
                entry.used = clock;
                Arc::clone(&entry.slot)
            } else {
                if state.entries.len() >= self.capacity {
                    let oldest = state
                        .entries
                        .iter()
                        .min_by_key(|(_, e)| e.used)
                        .map(|(k, _)| k.clone())
                        .expect("a full memo has an entry");
                    state.entries.remove(&oldest);
                }
                let slot = Arc::new(OnceLock::new());
                state.entries.insert(
                    key.clone(),
                    Entry {
                        slot: Arc::clone(&slot),
                        used: clock,
                    },
                );
                slot
            }
        };
        Arc::clone(slot.get_or_init(|| Arc::new(compute())))
    }

    /// The kept value of `key` if its computation has finished, without computing it and
    /// without counting as a lookup (it does not change the eviction order).
    pub fn get(&self, key: &K) -> Option<Arc<V>> {
        let guard = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = guard.as_ref()?.entries.get(key)?;
        entry.slot.get().cloned()
    }

    /// Forgets every entry, so that the next lookups compute again (for a benchmark that
    /// times the computation rather than the memo).
    pub fn clear(&self) {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// The entries kept (computed or under way).
    pub fn len(&self) -> usize {
        let guard = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        guard.as_ref().map_or(0, |s| s.entries.len())
    }

    /// Whether no entry is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most entries kept.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

/// An exact byte key: the parts written in order, each whole (integers and floats by their
/// bits, text and bytes behind their length), so two keys are equal exactly when their parts
/// are; no part is rounded, truncated or able to run into the next.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ExactKey(Vec<u8>);

impl ExactKey {
    /// An empty key.
    pub fn new() -> ExactKey {
        ExactKey::default()
    }

    /// Appends `x`.
    pub fn u64(&mut self, x: u64) -> &mut ExactKey {
        self.0.extend_from_slice(&x.to_le_bytes());
        self
    }

    /// Appends `x` (as a `u64`).
    pub fn usize(&mut self, x: usize) -> &mut ExactKey {
        self.u64(x as u64)
    }

    /// Appends `x`'s bits (so -0.0 and 0.0 differ, and every NaN is its own payload).
    pub fn f64(&mut self, x: f64) -> &mut ExactKey {
        self.u64(x.to_bits())
    }

    /// Appends `bytes` behind their length.
    pub fn bytes(&mut self, bytes: &[u8]) -> &mut ExactKey {
        self.usize(bytes.len());
        self.0.extend_from_slice(bytes);
        self
    }

    /// Appends `text` behind its length.
    pub fn str(&mut self, text: &str) -> &mut ExactKey {
        self.bytes(text.as_bytes())
    }

    /// Appends `value`'s `Debug` text behind its length: for a value whose types all derive
    /// `Debug` (every field written, each float in its shortest form that reads back to the
    /// same bits, strings quoted and escaped) the text determines the value, so the part is
    /// exact; not for a type with a hand-written `Debug` that leaves something out.
    pub fn debug(&mut self, value: &dyn Debug) -> &mut ExactKey {
        let mut text = String::new();
        write!(text, "{value:?}").expect("a String takes every write");
        self.str(&text)
    }

    /// The key's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A pure function with a counter of how often it ran.
    fn square(x: u64, runs: &AtomicUsize) -> u64 {
        runs.fetch_add(1, Ordering::SeqCst);
        x * x
    }

    #[test]
    fn a_hit_returns_what_a_fresh_computation_would_and_does_not_compute() {
        let memo: Memo<u64, u64> = Memo::new(4);
        let runs = AtomicUsize::new(0);
        let cold = memo.get_or_compute(&7, || square(7, &runs));
        let warm = memo.get_or_compute(&7, || square(7, &runs));
        assert_eq!((*cold, *warm), (49, square(7, &AtomicUsize::new(0))));
        assert!(Arc::ptr_eq(&cold, &warm));
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn the_bound_is_respected() {
        let memo: Memo<u64, u64> = Memo::new(3);
        let runs = AtomicUsize::new(0);
        for x in 0..10 {
            assert_eq!(*memo.get_or_compute(&x, || square(x, &runs)), x * x);
            assert!(memo.len() <= 3);
        }
        assert_eq!((memo.len(), memo.capacity()), (3, 3));
        assert_eq!(runs.load(Ordering::SeqCst), 10);
    }

    #[test]
    fn the_least_recently_used_entry_is_evicted_first() {
        let memo: Memo<u64, u64> = Memo::new(2);
        let runs = AtomicUsize::new(0);
        memo.get_or_compute(&1, || square(1, &runs));
        memo.get_or_compute(&2, || square(2, &runs));
        // A hit on 1 makes 2 the oldest: 3 evicts it, and 1 stays.
        memo.get_or_compute(&1, || square(1, &runs));
        memo.get_or_compute(&3, || square(3, &runs));
        assert_eq!(runs.load(Ordering::SeqCst), 3);
        assert_eq!(memo.get(&2), None);
        assert_eq!(memo.get(&3).as_deref(), Some(&9));
        memo.get_or_compute(&1, || square(1, &runs));
        assert_eq!(runs.load(Ordering::SeqCst), 3, "1 was kept");
        assert_eq!(*memo.get_or_compute(&2, || square(2, &runs)), 4);
        assert_eq!(
            runs.load(Ordering::SeqCst),
            4,
            "2 was evicted and computed again"
        );
    }

    #[test]
    fn clear_forgets_every_entry() {
        let memo: Memo<u64, u64> = Memo::new(2);
        let runs = AtomicUsize::new(0);
        memo.get_or_compute(&5, || square(5, &runs));
        memo.clear();
        assert!(memo.is_empty());
        assert_eq!(*memo.get_or_compute(&5, || square(5, &runs)), 25);
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn threads_sharing_a_memo_compute_each_key_once_and_agree() {
        static MEMO: Memo<u64, u64> = Memo::new(64);
        let runs = AtomicUsize::new(0);
        let seen: Vec<Vec<u64>> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..8)
                .map(|t| {
                    let runs = &runs;
                    scope.spawn(move || {
                        (0..32u64)
                            .map(|i| {
                                let x = (i + t) % 32;
                                *MEMO.get_or_compute(&x, || {
                                    std::thread::yield_now();
                                    square(x, runs)
                                })
                            })
                            .collect::<Vec<u64>>()
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        for (t, values) in seen.iter().enumerate() {
            for (i, &v) in values.iter().enumerate() {
                let x = (i as u64 + t as u64) % 32;
                assert_eq!(v, x * x);
            }
        }
        assert_eq!(runs.load(Ordering::SeqCst), 32, "each key computed once");
        assert_eq!(MEMO.len(), 32);
    }

    #[test]
    fn exact_keys_differ_when_any_part_does() {
        let key = |a: &str, b: &str, x: f64| {
            let mut k = ExactKey::new();
            k.str(a).str(b).f64(x);
            k
        };
        assert_eq!(key("ab", "c", 1.0), key("ab", "c", 1.0));
        assert_ne!(key("ab", "c", 1.0), key("a", "bc", 1.0));
        assert_ne!(key("ab", "c", 0.0), key("ab", "c", -0.0));
        assert_ne!(
            key("ab", "c", 0.1),
            key("ab", "c", f64::from_bits(0.1f64.to_bits() + 1))
        );
        let mut debug = ExactKey::new();
        debug.debug(&(0.1f64, "x"));
        let mut other = ExactKey::new();
        other.debug(&(f64::from_bits(0.1f64.to_bits() + 1), "x"));
        assert_ne!(debug, other);
    }
}
