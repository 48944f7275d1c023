//! The steps the decode group's members finish in, kept on a timing wheel: one bucket per step
//! modulo the wheel's size, so that a member's join is a push and a step's finishing members are
//! one bucket's read (where an ordered set paid a tree insertion a join, the replica's largest
//! cost on overloaded runs whose group is settled and rebuilt every few steps). Entries are never
//! removed early: one whose member left the group goes stale and is dropped when its step comes
//! (the replica checks each entry against the sequence at its place).

/// A member's finishing step (`at`), its admission `order` and its place in the batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Finishing {
    pub at: u64,
    pub order: u64,
    pub place: u32,
}

/// The finishing steps, by step modulo `SLOTS`; a bucket holds the steps `SLOTS` apart, so an
/// entry more than `SLOTS` steps ahead stays in its bucket until its own step comes.
#[derive(Clone, Debug, Default)]
pub(crate) struct FinishWheel {
    /// Empty until the first push (a replica without a decode group allocates nothing).
    buckets: Vec<Vec<Finishing>>,
}

impl FinishWheel {
    /// A power of two above most outputs, so few entries wait a lap.
    const SLOTS: usize = 1024;

    fn bucket(at: u64) -> usize {
        (at % Self::SLOTS as u64) as usize
    }

    pub fn push(&mut self, entry: Finishing) {
        if self.buckets.is_empty() {
            self.buckets.resize_with(Self::SLOTS, Vec::new);
        }
        self.buckets[Self::bucket(entry.at)].push(entry);
    }

    /// Moves the entries due by step `step` (those of `step`, and any earlier one left behind)
    /// into `out`, in the order pushed; the later steps sharing the bucket stay.
    pub fn take(&mut self, step: u64, out: &mut Vec<Finishing>) {
        let Some(bucket) = self.buckets.get_mut(Self::bucket(step)) else {
            return;
        };
        if out.is_empty() && bucket.iter().all(|entry| entry.at <= step) {
            // Every entry is due (none waits a lap, the common case): the bucket's vector is
            // handed over whole, in its order, and `out`'s empty one takes its place.
            std::mem::swap(bucket, out);
            return;
        }
        bucket.retain(|entry| {
            if entry.at <= step {
                out.push(*entry);
                false
            } else {
                true
            }
        });
    }

    /// The member `order`, due at step `at`, moved to `place`.
    pub fn moved(&mut self, at: u64, order: u64, place: u32) {
        if let Some(bucket) = self.buckets.get_mut(Self::bucket(at)) {
            for entry in bucket.iter_mut().filter(|e| e.order == order && e.at == at) {
                entry.place = place;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::RngExt;
    use std::collections::BTreeMap;

    /// Against an ordered map of (step, order) -> place, the reference the wheel replaced: random
    /// pushes up to three laps ahead, moves and steps give, step by step, the same entries due
    /// (as a set: the wheel keeps push order, the map key order).
    #[test]
    fn the_wheel_gives_each_step_the_entries_an_ordered_map_does() {
        let mut rng = crate::rng::stream(7, "finish-wheel");
        let mut wheel = FinishWheel::default();
        let mut reference: BTreeMap<(u64, u64), u32> = BTreeMap::new();
        let mut due = Vec::new();
        let (mut order, mut laps, mut taken) = (0u64, 0, 0);
        for step in 0..20_000u64 {
            for _ in 0..rng.random_range(0..4) {
                let ahead = if rng.random_bool(0.05) {
                    rng.random_range(1..3 * FinishWheel::SLOTS as u64)
                } else {
                    rng.random_range(1..200)
                };
                let (at, place) = (step + ahead, rng.random_range(0..256));
                laps += usize::from(ahead >= FinishWheel::SLOTS as u64);
                wheel.push(Finishing { at, order, place });
                reference.insert((at, order), place);
                order += 1;
            }
            if let Some((&(at, moved), _)) = reference.iter().nth(rng.random_range(0..8)) {
                let place = rng.random_range(0..256);
                wheel.moved(at, moved, place);
                reference.insert((at, moved), place);
            }
            due.clear();
            wheel.take(step, &mut due);
            let mut ours: Vec<(u64, u64, u32)> =
                due.iter().map(|e| (e.at, e.order, e.place)).collect();
            ours.sort_unstable();
            let mut expected = Vec::new();
            while let Some(entry) = reference.first_entry() {
                if entry.key().0 > step {
                    break;
                }
                let ((at, order), place) = entry.remove_entry();
                expected.push((at, order, place));
            }
            assert_eq!(ours, expected, "step {step}");
            taken += ours.len();
        }
        assert!(laps > 500 && taken > 25_000, "{laps} laps, {taken} taken");
    }
}
