//! lpt_balanced: LPT order combined with load balancing (caps.txt: "lpt_balanced | LPT with
//! load balancing | Good for heavy requests", one of the six near-identical top strategies).

use sim::batch::{BatchSelection, BatchSelector, CandidateWindow};
use sim::rng::SimRng;

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
#[derive(Debug, Default)]
pub struct LptBalanced {
    totals: Vec<f64>,
    order: Vec<usize>,
    peaks: Vec<f32>,
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
        if selection.is_empty() {
            let first = self.order.remove(0);
            selection.add(window, first);
        }
        while !selection.is_full() && !self.order.is_empty() {
            linalg::peaks_into(window, selection.load(), &self.order, &mut self.peaks);
            let mut best_pos = 0;
            for (pos, &i) in self.order.iter().enumerate().skip(1) {
                if self.peaks[i] < self.peaks[self.order[best_pos]] {
                    best_pos = pos;
                }
            }
            let chosen = self.order.remove(best_pos);
            selection.add(window, chosen);
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
