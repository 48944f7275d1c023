//! Shared engine of the greedy "add the candidate with the lowest score" selectors
//! (greedy_variance, greedy_dot_product, norm_minimizing, best_fit, power_of_d, power_of_d_dot):
//! per-candidate statistics computed once per decision, the O(d) dot product `L · v` per
//! candidate per step, and the scan for the best score with the oldest-index tie-break.
//!
//! With `L` the summed load of the batch so far, `v` a candidate's load and `d` the number of
//! entries, every CAPS objective is a function of `L · v`, `|v|²`, `sum(v)`, `sum(L)` and `d`
//! (plus `|L|²`, which is the same for every candidate of a step and so never needed):
//! `||L+v||² = |L|² + 2 L·v + |v|²` and `d · Var(L+v) = ||L+v||² - (sum(L) + sum(v))² / d`.
//!
//! Lazy evaluation (exact). Loads are non-negative, so `L · v` never decreases as candidates
//! join the batch, and the computed dot product never does either (`L` grows entrywise and
//! every floating-point step of the kernel is monotone). Every objective here is
//! nondecreasing in `L · v`, so the score a candidate would get with the last dot product
//! computed for it in this decision is a lower bound on its current score. Each step scores
//! the candidates with the lowest bounds first and skips every candidate whose bound already
//! loses to the best exact score (ties: lower index). Scores that are computed are computed
//! from scratch, so the pick is exactly the full scan's, in about half the dot products.
//! (This relies on the window's contract that loads are non-negative; with negative loads
//! the selection is still valid, but may differ from the full scan's.)

use expertsim_serving::policies::batch::{BatchSelection, CandidateWindow};
use expertsim_serving::rng::SimRng;
use rand::RngExt;

use super::linalg;

/// What the batch looks like at a step.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BatchStats {
    /// `sum(L)` (only maintained when statistics are requested; 0 otherwise).
    pub total: f64,
    /// `1 / d`, `d` the length of the load vectors.
    pub inv_dims: f64,
}

/// One candidate at a step.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CandidateStats {
    /// `sum(v)` (0 unless statistics are requested).
    pub total: f64,
    /// `|v|²` (0 unless statistics are requested).
    pub square: f64,
    /// `L · v`.
    pub dot: f64,
}

/// Whether an objective needs `sum(v)`, `|v|²` and `sum(L)` besides `L · v`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Needs {
    DotOnly,
    Stats,
}

/// Candidates scored together (one pass of the batch vector per group).
const GROUP: usize = 4;

/// Never computed in this decision.
const NEVER: usize = usize::MAX;

/// Buffers reused across decisions (sized to the window on each call; no allocation once the
/// window size has been seen).
#[derive(Debug, Default)]
pub(crate) struct Greedy {
    totals: Vec<f64>,
    squares: Vec<f64>,
    has_stats: Vec<bool>,
    /// The last `L · v` computed for each candidate, and the step it was computed at.
    dots: Vec<f64>,
    dot_step: Vec<usize>,
    /// Unchosen candidates.
    pool: Vec<usize>,
    /// Scratch: candidates needing statistics; the group being scored.
    missing: Vec<usize>,
    group: Vec<usize>,
    /// Pool position -> the candidate's score bound at the current step.
    bounds: Vec<f64>,
    #[cfg(test)]
    pub(crate) dot_products: usize,
}

/// `x`'s bits as an unsigned integer in the order of `x` (-0 just below +0; NaNs at the ends):
/// for comparing bounds without branches.
fn order_key(x: f64) -> u64 {
    let bits = x.to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | 1 << 63
    }
}

/// Whether `(score, index)` loses to `best` (lower score wins, then lower index).
fn loses(score: f64, index: usize, best: Option<(f64, usize, usize)>) -> bool {
    best.is_some_and(|(b, bi, _)| score > b || (score == b && index > bi))
}

impl Greedy {
    fn begin(&mut self, window: &CandidateWindow<'_>, selection: &BatchSelection) {
        let w = window.len();
        for buffer in [&mut self.totals, &mut self.squares, &mut self.dots] {
            buffer.clear();
            buffer.resize(w, 0.0);
        }
        self.has_stats.clear();
        self.has_stats.resize(w, false);
        self.dot_step.clear();
        self.dot_step.resize(w, NEVER);
        self.pool.clear();
        self.pool.extend(selection.remaining());
    }

    /// Computes the statistics of `pool[..count]` where missing, together with their dot
    /// products for step `step` (one pass over each load).
    fn ensure_stats(
        &mut self,
        window: &CandidateWindow<'_>,
        selection: &BatchSelection,
        count: usize,
        step: usize,
    ) {
        self.missing.clear();
        for &i in &self.pool[..count] {
            if !self.has_stats[i] {
                self.has_stats[i] = true;
                self.missing.push(i);
            }
        }
        if selection.is_empty() {
            linalg::stats_into(window, &self.missing, &mut self.totals, &mut self.squares);
        } else {
            linalg::dot_stats_into(
                window,
                selection.load(),
                &self.missing,
                &mut self.dots,
                &mut self.totals,
                &mut self.squares,
            );
        }
        for &i in &self.missing {
            // With L = 0 every dot product is 0 (`dots` was zeroed in `begin`).
            self.dot_step[i] = step;
        }
    }

    /// The score of candidate `i` with the last dot product computed for it: exact when that
    /// was computed at the current step, a lower bound otherwise, -inf when never computed.
    fn bound<F>(&self, i: usize, batch: &BatchStats, score: &F) -> f64
    where
        F: Fn(&BatchStats, &CandidateStats) -> f64,
    {
        if self.dot_step[i] == NEVER {
            return f64::NEG_INFINITY;
        }
        let stats = CandidateStats {
            total: self.totals[i],
            square: self.squares[i],
            dot: self.dots[i],
        };
        score(batch, &stats)
    }

    /// Scores the candidates at the pool positions in `self.group` (computing their dot
    /// products for step `step` where not current) and updates `best`.
    fn score_group<F>(
        &mut self,
        window: &CandidateWindow<'_>,
        selection: &BatchSelection,
        step: usize,
        (batch, score): (&BatchStats, &F),
        best: &mut Option<(f64, usize, usize)>,
    ) where
        F: Fn(&BatchStats, &CandidateStats) -> f64,
    {
        self.missing.clear();
        for &pos in &self.group {
            let i = self.pool[pos];
            if self.dot_step[i] != step {
                self.missing.push(i);
            }
        }
        if selection.is_empty() {
            for &i in &self.missing {
                self.dots[i] = 0.0;
            }
        } else {
            linalg::dots_into(window, selection.load(), &self.missing, &mut self.dots);
        }
        #[cfg(test)]
        {
            self.dot_products += self.missing.len();
        }
        for &i in &self.missing {
            self.dot_step[i] = step;
        }
        for &pos in &self.group {
            let i = self.pool[pos];
            let s = self.bound(i, batch, score);
            self.bounds[pos] = s;
            if !loses(s, i, *best) {
                *best = Some((s, i, pos));
            }
        }
    }

    /// Returns the position in `pool` of the candidate among `pool[..count]` with the lowest
    /// score (ties: lowest index), scoring lazily (see the module documentation).
    fn best_of<F>(
        &mut self,
        window: &CandidateWindow<'_>,
        selection: &BatchSelection,
        count: usize,
        step: usize,
        batch: BatchStats,
        score: &F,
    ) -> usize
    where
        F: Fn(&BatchStats, &CandidateStats) -> f64,
    {
        let mut best = None;
        // First the GROUP candidates with the lowest bounds, so that the best exact score is
        // low early. Only a guess of where to start: the pass below compares every candidate
        // exactly, so ties here may go either way, and the bounds are compared as integers
        // (`order_key`), without branches to mispredict.
        self.bounds.clear();
        for pos in 0..count {
            let b = self.bound(self.pool[pos], &batch, score);
            self.bounds.push(b);
        }
        let mut lowest = [(u64::MAX, usize::MAX); GROUP];
        for (pos, &b) in self.bounds.iter().enumerate() {
            let mut key = (order_key(b), pos);
            for slot in &mut lowest {
                let lower = key.0 < slot.0;
                let (kept, passed) = if lower { (key, *slot) } else { (*slot, key) };
                *slot = kept;
                key = passed;
            }
        }
        self.group.clear();
        self.group
            .extend(lowest.iter().filter(|k| k.1 != usize::MAX).map(|k| k.1));
        self.score_group(window, selection, step, (&batch, score), &mut best);
        // Then, in pool order, every other candidate whose bound does not already lose.
        let mut pos = 0;
        while pos < count {
            self.group.clear();
            while pos < count && self.group.len() < GROUP {
                let i = self.pool[pos];
                let b = self.bounds[pos];
                if self.dot_step[i] == step {
                    // Exact already (scored above, or computed with the statistics).
                    if !loses(b, i, best) {
                        best = Some((b, i, pos));
                    }
                } else if !loses(b, i, best) {
                    self.group.push(pos);
                }
                pos += 1;
            }
            if !self.group.is_empty() {
                self.score_group(window, selection, step, (&batch, score), &mut best);
            }
        }
        best.expect("a non-empty pool").2
    }

    /// Fills `selection` by repeatedly adding the remaining candidate with the lowest
    /// `score(batch, candidate)`; ties go to the oldest (lowest-index) candidate. `score`
    /// must be nondecreasing in `candidate.dot`.
    pub(crate) fn fill<F>(
        &mut self,
        window: &CandidateWindow<'_>,
        selection: &mut BatchSelection,
        needs: Needs,
        score: F,
    ) where
        F: Fn(&BatchStats, &CandidateStats) -> f64,
    {
        self.fill_sampled(window, selection, needs, None, score);
    }

    /// Like [`Greedy::fill`], but each step scores only `samples` remaining candidates drawn
    /// uniformly without replacement (all of them, and no draw, when at most `samples` remain;
    /// `None` = always all).
    pub(crate) fn fill_sampled<F>(
        &mut self,
        window: &CandidateWindow<'_>,
        selection: &mut BatchSelection,
        needs: Needs,
        sampling: Option<(usize, &mut SimRng)>,
        score: F,
    ) where
        F: Fn(&BatchStats, &CandidateStats) -> f64,
    {
        if selection.is_full() {
            return;
        }
        self.begin(window, selection);
        // sum(L): that of the pre-seeded load, plus the total of each candidate added.
        let mut batch = BatchStats {
            total: 0.0,
            inv_dims: 1.0 / window.dims() as f64,
        };
        if needs == Needs::Stats && !selection.is_empty() {
            batch.total = linalg::sum(selection.load());
        }
        let mut sampling = sampling.map(|(samples, rng)| (samples.max(1), rng));
        let mut step = 0;
        while !selection.is_full() && !self.pool.is_empty() {
            let n = self.pool.len();
            let count = match &mut sampling {
                Some((samples, rng)) if *samples < n => {
                    // Partial Fisher-Yates: pool[..samples] becomes a uniform sample.
                    for t in 0..*samples {
                        let j = rng.random_range(t..n);
                        self.pool.swap(t, j);
                    }
                    *samples
                }
                _ => n,
            };
            if needs == Needs::Stats {
                self.ensure_stats(window, selection, count, step);
            }
            let pos = self.best_of(window, selection, count, step, batch, &score);
            let chosen = self.pool.swap_remove(pos);
            selection.add(window, chosen);
            batch.total += self.totals[chosen];
            step += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::testutil::random_window;

    type Objective = fn(&BatchStats, &CandidateStats) -> f64;

    fn objectives() -> [(Needs, Objective); 4] {
        [
            (Needs::Stats, crate::batch::greedy_variance::score),
            (Needs::DotOnly, crate::batch::greedy_dot_product::score),
            (Needs::Stats, |_, c| 2.0 * c.dot + c.square),
            (Needs::Stats, |b, c| {
                let t = b.total + c.total;
                2.0 * c.dot + c.square - t * t * b.inv_dims
            }),
        ]
    }

    /// The plain greedy: every step scores every remaining candidate from scratch.
    fn full_scan(
        window: &CandidateWindow<'_>,
        max_size: usize,
        seeded: &[usize],
        score: Objective,
    ) -> Vec<usize> {
        let mut selection = BatchSelection::new(window, max_size);
        for &i in seeded {
            selection.add(window, i);
        }
        let inv_dims = 1.0 / window.dims() as f64;
        let mut total = if seeded.is_empty() {
            0.0
        } else {
            linalg::sum(selection.load())
        };
        while !selection.is_full() {
            let batch = BatchStats { total, inv_dims };
            let mut best: Option<(f64, usize)> = None;
            for i in selection.remaining() {
                let (total, square) = linalg::sum_and_square(window.load(i));
                let dot = linalg::dot(selection.load(), window.load(i));
                let s = score(&batch, &CandidateStats { total, square, dot });
                if best.is_none_or(|(b, _)| s < b) {
                    best = Some((s, i));
                }
            }
            let chosen = best.unwrap().1;
            total += linalg::sum(window.load(chosen));
            selection.add(window, chosen);
        }
        selection.chosen().to_vec()
    }

    fn lazy(
        greedy: &mut Greedy,
        window: &CandidateWindow<'_>,
        max_size: usize,
        seeded: &[usize],
        (needs, score): (Needs, Objective),
    ) -> Vec<usize> {
        let mut selection = BatchSelection::new(window, max_size);
        for &i in seeded {
            selection.add(window, i);
        }
        greedy.fill(window, &mut selection, needs, score);
        selection.chosen().to_vec()
    }

    #[test]
    fn order_keys_sort_as_the_numbers_do() {
        let xs = [
            f64::NEG_INFINITY,
            -1e300,
            -2.5,
            -f64::MIN_POSITIVE,
            -0.0,
            0.0,
            f64::MIN_POSITIVE,
            1.0,
            1.0 + f64::EPSILON,
            1e300,
            f64::INFINITY,
        ];
        for w in xs.windows(2) {
            assert!(order_key(w[0]) < order_key(w[1]), "{} {}", w[0], w[1]);
        }
    }

    #[test]
    fn lazy_evaluation_picks_exactly_what_the_full_scan_picks() {
        let mut greedy = Greedy::default();
        let mut computed = 0;
        let mut full = 0;
        for seed in 0..40u64 {
            // Small integer loads (many exact ties) and fractional ones.
            let (dims, mut loads) = random_window(seed, 32, 8 + (seed as usize % 5) * 37);
            match seed % 3 {
                // Fractional loads.
                1 => {
                    for (j, x) in loads.iter_mut().enumerate() {
                        *x *= 1.0 + (j % 7) as f32 * 0.013;
                    }
                }
                // Only four distinct requests, repeated: exact ties everywhere.
                2 => {
                    let distinct = loads[..4 * dims].to_vec();
                    for (k, row) in loads.chunks_mut(dims).enumerate() {
                        let pick = (k * 7 + seed as usize) % 4;
                        row.copy_from_slice(&distinct[pick * dims..(pick + 1) * dims]);
                    }
                }
                _ => {}
            }
            let window = CandidateWindow::new(dims, &loads);
            for seeded in [&[][..], &[0][..], &[5, 17][..]] {
                for objective in objectives() {
                    greedy.dot_products = 0;
                    let got = lazy(&mut greedy, &window, 8, seeded, objective);
                    assert_eq!(
                        got,
                        full_scan(&window, 8, seeded, objective.1),
                        "seed {seed}"
                    );
                    computed += greedy.dot_products;
                    full += (1..=8 - seeded.len().max(1))
                        .map(|k| 32 - seeded.len().max(1) - k + 1)
                        .sum::<usize>();
                }
            }
        }
        // And it is lazy: well under the full scan's dot products.
        assert!(computed * 4 < full * 3, "{computed} of {full}");
    }
}
