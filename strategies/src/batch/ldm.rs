//! Shared skeleton of the two differencing selectors (karmarkar_karp on scalar totals,
//! differencing on load vectors): the balanced largest-differencing method (BLDM) of
//! Karmarkar & Karp as extended to k-way partitioning with equal part sizes
//! (Michiels, Aarts, Korst & van Leeuwen).
//!
//! Layout. Let `p` be the pre-seeded candidates, `m = capacity - p` the picks still to make
//! and `n` the unchosen candidates (oldest first). The oldest `k * m` of them, `k = n / m`
//! (rounded down; the youngest `n mod m` wait for a later decision), are partitioned into `k`
//! parts of exactly `m` candidates: one of those parts becomes the rest of the batch. They are
//! sorted by total load, descending (oldest first among equals), and cut into `m` rows of `k`
//! consecutive candidates; a row is a partial partition (a "tuple") with one candidate in each
//! of its `k` parts. The selector then repeatedly takes the two tuples with the largest spread
//! (the KK "difference"; the earlier tuple wins ties) and combines them into one by joining
//! each part of the first with a part of the second, pairing heavy with light, until one tuple
//! of `k` parts of `m` candidates remains. What "spread" and "pairing" mean is the selector's.
//!
//! Members of a part are kept as linked lists of slots (slot = position in the sorted list),
//! so combining is O(k) and nothing is allocated once the buffers have grown.

use expertsim_serving::policies::batch::{BatchSelection, CandidateWindow};

use super::linalg;

const NONE: usize = usize::MAX;

#[derive(Debug, Default)]
pub(crate) struct Ldm {
    /// Slot -> candidate index (sorted by total load, descending).
    pub items: Vec<usize>,
    /// Head slot -> total load of the part it heads.
    pub sums: Vec<f64>,
    /// Slot -> `|v|²` of its candidate's load.
    pub squares: Vec<f64>,
    next: Vec<usize>,
    tail: Vec<usize>,
    /// Tuple `t`, part `g` -> head slot, at `t * parts + g`.
    pub groups: Vec<usize>,
    /// Tuples not yet combined away, in creation order.
    pub alive: Vec<usize>,
    /// `k`, parts per tuple.
    pub parts: usize,
    /// `m`, candidates per part (= rows = initial tuples).
    pub rows: usize,
    candidate_totals: Vec<f64>,
    candidate_squares: Vec<f64>,
}

impl Ldm {
    /// Lays out the partition for `selection`; false when the batch is already full.
    pub(crate) fn setup(
        &mut self,
        window: &CandidateWindow<'_>,
        selection: &BatchSelection,
    ) -> bool {
        if selection.is_full() {
            return false;
        }
        let m = selection.capacity() - selection.len();
        self.items.clear();
        self.items.extend(selection.remaining());
        let n = self.items.len();
        let k = n / m;
        self.items.truncate(k * m);
        self.parts = k;
        self.rows = m;
        self.candidate_totals.clear();
        self.candidate_totals.resize(window.len(), 0.0);
        self.candidate_squares.clear();
        self.candidate_squares.resize(window.len(), 0.0);
        linalg::stats_into(
            window,
            &self.items,
            &mut self.candidate_totals,
            &mut self.candidate_squares,
        );
        let totals = &self.candidate_totals;
        self.items
            .sort_unstable_by(|&a, &b| totals[b].total_cmp(&totals[a]).then(a.cmp(&b)));
        let slots = k * m;
        self.sums.clear();
        self.sums.extend(self.items.iter().map(|&i| totals[i]));
        self.squares.clear();
        let squares = &self.candidate_squares;
        self.squares.extend(self.items.iter().map(|&i| squares[i]));
        self.next.clear();
        self.next.resize(slots, NONE);
        self.tail.clear();
        self.tail.extend(0..slots);
        self.groups.clear();
        self.groups.extend(0..slots);
        self.alive.clear();
        self.alive.extend(0..m);
        true
    }

    /// The head slots of tuple `t`'s parts.
    pub(crate) fn tuple(&self, t: usize) -> &[usize] {
        &self.groups[t * self.parts..(t + 1) * self.parts]
    }

    /// Positions in `alive` of the two tuples with the largest `spread` (earlier wins ties),
    /// the larger first.
    pub(crate) fn two_largest(&self, spread: impl Fn(usize) -> f64) -> (usize, usize) {
        let mut first: Option<(f64, usize)> = None;
        let mut second: Option<(f64, usize)> = None;
        for (pos, &t) in self.alive.iter().enumerate() {
            let s = spread(t);
            if first.is_none_or(|(f, _)| s > f) {
                second = first;
                first = Some((s, pos));
            } else if second.is_none_or(|(f, _)| s > f) {
                second = Some((s, pos));
            }
        }
        (first.expect("two tuples").1, second.expect("two tuples").1)
    }

    /// Sorts tuple `t`'s parts by total load, descending or ascending, oldest member-slot
    /// candidate first among equals.
    pub(crate) fn sort_tuple(&mut self, t: usize, descending: bool) {
        let (sums, items) = (&self.sums, &self.items);
        let k = self.parts;
        self.groups[t * k..(t + 1) * k].sort_unstable_by(|&a, &b| {
            let order = sums[a].total_cmp(&sums[b]);
            let order = if descending { order.reverse() } else { order };
            order.then(items[a].cmp(&items[b]))
        });
    }

    /// Appends part `b` (a head slot) to part `a`, summing their totals; `a` heads the result.
    pub(crate) fn join(&mut self, a: usize, b: usize) {
        self.next[self.tail[a]] = b;
        self.tail[a] = self.tail[b];
        self.sums[a] += self.sums[b];
    }

    /// Candidate indices of the part headed by `head`.
    pub(crate) fn members(&self, head: usize) -> impl Iterator<Item = usize> + '_ {
        std::iter::successors(Some(head), |&s| Some(self.next[s]).filter(|&n| n != NONE))
            .map(|s| self.items[s])
    }

    /// Adds the members of the part headed by `head` to `selection`, oldest first.
    pub(crate) fn add_part(
        &self,
        window: &CandidateWindow<'_>,
        selection: &mut BatchSelection,
        head: usize,
        scratch: &mut Vec<usize>,
    ) {
        scratch.clear();
        scratch.extend(self.members(head));
        scratch.sort_unstable();
        for &i in scratch.iter() {
            selection.add(window, i);
        }
    }

    /// The head slot of the part of the final tuple that holds candidate `idx`.
    pub(crate) fn part_holding(&self, idx: usize) -> usize {
        let last = self.alive[0];
        *self
            .tuple(last)
            .iter()
            .find(|&&head| self.members(head).any(|i| i == idx))
            .expect("every partitioned candidate is in a part")
    }

    /// The oldest candidate in the partition (it is always the oldest unchosen one).
    pub(crate) fn oldest(&self) -> usize {
        *self.items.iter().min().expect("a non-empty partition")
    }
}
