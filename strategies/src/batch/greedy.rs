//! Shared engine of the greedy "add the candidate with the lowest score" selectors
//! (greedy_variance, greedy_dot_product, norm_minimizing, best_fit, power_of_d, power_of_d_dot):
//! per-candidate statistics computed once per decision, the O(d) dot product `L · v` per
//! candidate per step, and the scan for the best score with the oldest-index tie-break.
//!
//! With `L` the summed load of the batch so far, `v` a candidate's load and `d` the number of
//! entries, every CAPS objective is a function of `L · v`, `|v|²`, `sum(v)`, `sum(L)` and `d`
//! (plus `|L|²`, which is the same for every candidate of a step and so never needed):
//! `||L+v||² = |L|² + 2 L·v + |v|²` and `d · Var(L+v) = ||L+v||² - (sum(L) + sum(v))² / d`.

use rand::RngExt;
use sim::batch::{BatchSelection, CandidateWindow};
use sim::rng::SimRng;

use super::linalg;

/// What the batch looks like at a step.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BatchStats {
    /// `sum(L)` (only maintained when statistics are requested; 0 otherwise).
    pub total: f64,
    /// `d`, the length of the load vectors.
    pub dims: f64,
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

/// Buffers reused across decisions (sized to the window on each call; no allocation once the
/// window size has been seen).
#[derive(Debug, Default)]
pub(crate) struct Greedy {
    totals: Vec<f64>,
    squares: Vec<f64>,
    dots: Vec<f64>,
    has_stats: Vec<bool>,
    pool: Vec<usize>,
    missing: Vec<usize>,
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
        self.pool.clear();
        self.pool.extend(selection.remaining());
    }

    fn ensure_stats(&mut self, window: &CandidateWindow<'_>, indices_in_pool: usize) {
        self.missing.clear();
        for &i in &self.pool[..indices_in_pool] {
            if !self.has_stats[i] {
                self.has_stats[i] = true;
                self.missing.push(i);
            }
        }
        linalg::stats_into(window, &self.missing, &mut self.totals, &mut self.squares);
    }

    /// Scores `pool[..count]` and returns the position (in `pool`) of the lowest score; ties go
    /// to the lowest candidate index.
    fn best_of<F>(
        &mut self,
        window: &CandidateWindow<'_>,
        selection: &BatchSelection,
        count: usize,
        batch: BatchStats,
        score: &F,
    ) -> usize
    where
        F: Fn(&BatchStats, &CandidateStats) -> f64,
    {
        let candidates = &self.pool[..count];
        if selection.is_empty() {
            // L = 0: every dot product is 0.
            for &i in candidates {
                self.dots[i] = 0.0;
            }
        } else {
            linalg::dots_into(window, selection.load(), candidates, &mut self.dots);
        }
        let mut best_pos = 0;
        let mut best: Option<(f64, usize)> = None;
        for (pos, &i) in candidates.iter().enumerate() {
            let stats = CandidateStats {
                total: self.totals[i],
                square: self.squares[i],
                dot: self.dots[i],
            };
            let s = score(&batch, &stats);
            let better = match best {
                None => true,
                Some((b, bi)) => s < b || (s == b && i < bi),
            };
            if better {
                best = Some((s, i));
                best_pos = pos;
            }
        }
        best_pos
    }

    /// Fills `selection` by repeatedly adding the remaining candidate with the lowest
    /// `score(batch, candidate)`; ties go to the oldest (lowest-index) candidate.
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
        let mut batch = BatchStats {
            total: 0.0,
            dims: window.dims() as f64,
        };
        if needs == Needs::Stats {
            batch.total = linalg::sum(selection.load());
        }
        let mut sampling = sampling.map(|(samples, rng)| (samples.max(1), rng));
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
                self.ensure_stats(window, count);
            }
            let pos = self.best_of(window, selection, count, batch, &score);
            let chosen = if sampling.is_some() {
                self.pool.swap_remove(pos)
            } else {
                // Keep the pool in index order (cheap: at most a window's worth of moves).
                self.pool.remove(pos)
            };
            selection.add(window, chosen);
            batch.total += self.totals[chosen];
        }
    }
}
