//! lpt_balanced: LPT order combined with load balancing (caps.txt: "lpt_balanced | LPT with
//! load balancing | Good for heavy requests", one of the six near-identical top strategies).

use expertsim_serving::policies::batch::{BatchSelection, BatchSelector, CandidateWindow};
use expertsim_serving::rng::SimRng;

use super::linalg;
use super::lpt::lpt_order;

/// LPT with a balance constraint on the peak expert load. Candidates are considered in LPT
/// order (total load descending, then oldest first). Each step adds the candidate that keeps
/// the peak entry `max_j (L + v)_j` of the batch load lowest, the first in LPT order among
/// equals. In effect: the heaviest request that fits under the batch's current peak (adding
/// it does not lengthen the straggler expert), or, when none fits, the one that raises the
/// peak least. An empty batch (no pre-seed) is opened with the first candidate in LPT order.
///
/// Balancing comes from the peak: batch time follows the most loaded expert, so requests that
/// fill the valleys under it are free, and LPT order packs the heaviest such requests first.
///
/// Peaks are evaluated lazily but exactly: a candidate's peak can only grow as the batch
/// does, so the last peak computed for it is a lower bound, and candidates whose bound
/// already loses are not recomputed.
#[derive(Debug, Default)]
pub struct LptBalanced {
    totals: Vec<f64>,
    /// Unchosen candidates in LPT order.
    order: Vec<usize>,
    /// The last peak computed for each candidate, and the step it was computed at.
    peaks: Vec<f32>,
    peak_step: Vec<usize>,
    group: Vec<usize>,
    missing: Vec<usize>,
}

/// Candidates evaluated together.
const GROUP: usize = 4;
const NEVER: usize = usize::MAX;

impl LptBalanced {
    /// The peak of candidate `i` with the batch: exact if computed at this step, a lower
    /// bound otherwise (the batch load only grows, and so does `max(L + v)`), -inf if never.
    fn bound(&self, i: usize) -> f32 {
        if self.peak_step[i] == NEVER {
            f32::NEG_INFINITY
        } else {
            self.peaks[i]
        }
    }

    /// Computes the peaks of the candidates at the `order` positions in `group` where not
    /// current, and updates `best` (lowest peak, then earliest in LPT order).
    fn score_group(
        &mut self,
        window: &CandidateWindow<'_>,
        selection: &BatchSelection,
        step: usize,
        best: &mut Option<(f32, usize)>,
    ) {
        self.missing.clear();
        for &pos in &self.group {
            let i = self.order[pos];
            if self.peak_step[i] != step {
                self.missing.push(i);
                self.peak_step[i] = step;
            }
        }
        linalg::peaks_into(window, selection.load(), &self.missing, &mut self.peaks);
        for &pos in &self.group {
            let peak = self.peaks[self.order[pos]];
            if !loses(peak, pos, *best) {
                *best = Some((peak, pos));
            }
        }
    }
}

fn loses(peak: f32, pos: usize, best: Option<(f32, usize)>) -> bool {
    best.is_some_and(|(b, bp)| peak > b || (peak == b && pos > bp))
}

impl BatchSelector for LptBalanced {
    fn select(
        &mut self,
        window: &CandidateWindow<'_>,
        selection: &mut BatchSelection,
        _rng: &mut SimRng,
    ) {
        if selection.is_full() {
            return;
        }
        lpt_order(window, selection, &mut self.totals, &mut self.order);
        self.peaks.clear();
        self.peaks.resize(window.len(), 0.0);
        self.peak_step.clear();
        self.peak_step.resize(window.len(), NEVER);
        if selection.is_empty() {
            let first = self.order.remove(0);
            selection.add(window, first);
        }
        // Lazy evaluation, exact as in the greedy selectors: candidates are scored lowest
        // bound first, and a candidate whose bound already loses is skipped.
        let mut step = 0;
        while !selection.is_full() && !self.order.is_empty() {
            let count = self.order.len();
            let mut best = None;
            // The GROUP lowest (bound, position) first.
            let mut lowest = [(f32::INFINITY, usize::MAX); GROUP];
            for pos in 0..count {
                let key = (self.bound(self.order[pos]), pos);
                let before =
                    |a: (f32, usize), b: (f32, usize)| a.0 < b.0 || (a.0 == b.0 && a.1 < b.1);
                if before(key, lowest[GROUP - 1]) {
                    let mut k = GROUP - 1;
                    while k > 0 && before(key, lowest[k - 1]) {
                        lowest[k] = lowest[k - 1];
                        k -= 1;
                    }
                    lowest[k] = key;
                }
            }
            self.group.clear();
            self.group
                .extend(lowest.iter().filter(|k| k.1 != usize::MAX).map(|k| k.1));
            self.score_group(window, selection, step, &mut best);
            // Then every other candidate whose bound does not already lose, in LPT order.
            let mut pos = 0;
            while pos < count {
                self.group.clear();
                while pos < count && self.group.len() < GROUP {
                    let i = self.order[pos];
                    let b = self.bound(i);
                    if self.peak_step[i] == step {
                        if !loses(b, pos, best) {
                            best = Some((b, pos));
                        }
                    } else if !loses(b, pos, best) {
                        self.group.push(pos);
                    }
                    pos += 1;
                }
                if !self.group.is_empty() {
                    self.score_group(window, selection, step, &mut best);
                }
            }
            let (_, best_pos) = best.expect("a non-empty pool");
            let chosen = self.order.remove(best_pos);
            selection.add(window, chosen);
            step += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::lpt::Lpt;
    use crate::batch::testutil::{random_window, rows, run};

    #[test]
    fn packs_the_heaviest_request_that_fits_under_the_peak() {
        let (dims, loads) = rows(&[
            &[10.0, 0.0, 0.0, 0.0],
            &[0.0, 1.0, 1.0, 1.0],     // fits under the peak, total 3
            &[20.0, 20.0, 20.0, 20.0], // heaviest, raises the peak to 30
            &[0.0, 5.0, 5.0, 5.0],     // fits under the peak, total 15
            &[0.0, 12.0, 0.0, 0.0],    // raises the peak to 12
        ]);
        let window = CandidateWindow::new(dims, &loads);
        let mut selector = LptBalanced::default();
        assert_eq!(run(&mut selector, &window, 3, &[0], 0), vec![0, 3, 1]);
        assert_eq!(run(&mut Lpt::default(), &window, 3, &[0], 0), vec![0, 2, 3]);
        // Unseeded it opens with the heaviest, then the one raising the peak least.
        assert_eq!(run(&mut selector, &window, 2, &[], 0), vec![2, 1]);
    }

    /// The plain rule: every step computes every peak.
    fn full_scan(window: &CandidateWindow<'_>, seeded: &[usize]) -> Vec<usize> {
        let mut selection = expertsim_serving::policies::batch::BatchSelection::new(window, 8);
        let mut totals = Vec::new();
        let mut order = Vec::new();
        for &i in seeded {
            selection.add(window, i);
        }
        lpt_order(window, &selection, &mut totals, &mut order);
        if selection.is_empty() {
            selection.add(window, order.remove(0));
        }
        while !selection.is_full() {
            let peak = |i: usize| {
                selection
                    .load()
                    .iter()
                    .zip(window.load(i))
                    .map(|(a, b)| a + b)
                    .fold(f32::NEG_INFINITY, f32::max)
            };
            let mut best = 0;
            for pos in 1..order.len() {
                if peak(order[pos]) < peak(order[best]) {
                    best = pos;
                }
            }
            let chosen = order.remove(best);
            selection.add(window, chosen);
        }
        selection.chosen().to_vec()
    }

    #[test]
    fn lazy_evaluation_picks_what_the_full_scan_picks() {
        for seed in 0..30 {
            let (dims, mut loads) = random_window(seed, 32, 40 + seed as usize);
            if seed % 2 == 1 {
                // Few distinct requests: ties everywhere.
                let distinct = loads[..3 * dims].to_vec();
                for (k, row) in loads.chunks_mut(dims).enumerate() {
                    let pick = (k * 5 + seed as usize) % 3;
                    row.copy_from_slice(&distinct[pick * dims..(pick + 1) * dims]);
                }
            }
            let window = CandidateWindow::new(dims, &loads);
            for seeded in [&[][..], &[0][..], &[3, 9][..]] {
                assert_eq!(
                    run(&mut LptBalanced::default(), &window, 8, seeded, 0),
                    full_scan(&window, seeded),
                    "seed {seed} {seeded:?}"
                );
            }
        }
    }

    #[test]
    fn keeps_the_peak_below_plain_lpt() {
        for seed in 0..8 {
            let (dims, loads) = random_window(seed, 32, 240);
            let window = CandidateWindow::new(dims, &loads);
            let peak = |chosen: Vec<usize>| {
                let mut sum = vec![0.0f32; dims];
                for i in chosen {
                    for (s, x) in sum.iter_mut().zip(window.load(i)) {
                        *s += x;
                    }
                }
                sum.into_iter().fold(0.0f32, f32::max)
            };
            let balanced = peak(run(&mut LptBalanced::default(), &window, 8, &[0], 0));
            let plain = peak(run(&mut Lpt::default(), &window, 8, &[0], 0));
            assert!(balanced < plain, "seed {seed}: {balanced} >= {plain}");
        }
    }
}
