//! best_fit: vector-bin-packing Best Fit, "Minimize distance to uniform" (caps.txt: "best_fit |
//! Minimize distance to uniform | VBP Best Fit", "VBP residual minimization").

use expertsim_serving::policies::batch::{BatchSelection, BatchSelector, CandidateWindow};
use expertsim_serving::rng::SimRng;

use super::greedy::{BatchStats, CandidateStats, Greedy, Needs};

/// Each step adds the remaining candidate `v` whose batch load `L + v` is closest, in
/// Euclidean distance, to the perfectly balanced vector of the same total, `u = (sum(L) +
/// sum(v)) / d · 1`: the candidate that best fills the residual `u - L` of the batch up to a
/// flat level (Best Fit with the balanced vector as the bin's shape). Ties go to the oldest
/// candidate.
///
/// `||L+v - u||² = ||L+v||² - (sum(L)+sum(v))² / d`, evaluated (minus the per-step constant
/// `|L|²`) as `2 L·v + |v|² - (sum(L) + sum(v))² / d`. That is exactly `d · Var(L+v)`, so
/// best_fit selects the same batches as greedy_variance, which is why caps.txt reports
/// identical numbers for the two. What sets both apart from norm_minimizing: a large
/// request that levels the batch beats a small one that leaves it lopsided.
#[derive(Debug, Default)]
pub struct BestFit {
    greedy: Greedy,
}

fn score(batch: &BatchStats, c: &CandidateStats) -> f64 {
    let total = batch.total + c.total;
    let uniform_square = total * total * batch.inv_dims; // ||u||² = u · (L+v)
    2.0 * c.dot + c.square - uniform_square
}

impl BatchSelector for BestFit {
    fn select(
        &mut self,
        window: &CandidateWindow<'_>,
        selection: &mut BatchSelection,
        _rng: &mut SimRng,
    ) {
        self.greedy.fill(window, selection, Needs::Stats, score);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::greedy_variance::GreedyVariance;
    use crate::batch::norm_minimizing::NormMinimizing;
    use crate::batch::testutil::{random_window, rows, run};

    #[test]
    fn fills_the_residual_up_to_the_balanced_level() {
        let (dims, loads) = rows(&[
            &[3.0, 0.0, 0.0, 0.0],
            &[0.0, 1.0, 0.0, 0.0], // L+v = (3,1,0,0): 6 from flat
            &[0.0, 3.0, 3.0, 3.0], // L+v = (3,3,3,3): exactly flat
            &[0.0, 2.0, 2.0, 2.0], // L+v = (3,2,2,2): 0.75 from flat
        ]);
        let window = CandidateWindow::new(dims, &loads);
        assert_eq!(
            run(&mut BestFit::default(), &window, 2, &[0], 0),
            vec![0, 2]
        );
        // The norm objective takes the small request instead.
        assert_eq!(
            run(&mut NormMinimizing::default(), &window, 2, &[0], 0),
            vec![0, 1]
        );
    }

    #[test]
    fn selects_what_greedy_variance_selects() {
        for seed in 0..8 {
            let (dims, loads) = random_window(seed, 32, 1440);
            let window = CandidateWindow::new(dims, &loads);
            for seeded in [&[][..], &[0][..]] {
                assert_eq!(
                    run(&mut BestFit::default(), &window, 8, seeded, 0),
                    run(&mut GreedyVariance::default(), &window, 8, seeded, 0)
                );
            }
        }
    }
}
