//! greedy_dot_product: "Minimize v·L (dot product)" (caps.txt: "greedy_dot_product | Minimize
//! v·L | Panigrahy et al.", the literature-optimal member of the equivalent objectives).

use expertsim_serving::policies::batch::{BatchSelection, BatchSelector, CandidateWindow};
use expertsim_serving::rng::SimRng;

use super::greedy::{BatchStats, CandidateStats, Greedy, Needs};

/// Each step adds the remaining candidate `v` with the smallest overlap `v · L` with the
/// batch load so far (Panigrahy et al.'s dot-product heuristic for vector bin packing); ties go
/// to the oldest candidate, so an empty batch starts with candidate 0.
#[derive(Debug, Default)]
pub struct GreedyDotProduct {
    greedy: Greedy,
}

/// The `greedy_dot_product` objective (shared with `power_of_d_dot`).
pub(crate) fn score(_batch: &BatchStats, c: &CandidateStats) -> f64 {
    c.dot
}

impl BatchSelector for GreedyDotProduct {
    fn select(
        &mut self,
        window: &CandidateWindow<'_>,
        selection: &mut BatchSelection,
        _rng: &mut SimRng,
    ) {
        self.greedy.fill(window, selection, Needs::DotOnly, score);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::greedy_variance::GreedyVariance;
    use crate::batch::norm_minimizing::NormMinimizing;
    use crate::batch::testutil::{rows, run};
    use rand::RngExt;

    #[test]
    fn takes_the_least_overlapping_candidate_whatever_its_size() {
        let (dims, loads) = rows(&[
            &[4.0, 0.0, 0.0, 0.0],
            &[1.0, 0.0, 0.0, 0.0], // overlap 4
            &[0.0, 9.0, 9.0, 9.0], // overlap 0
        ]);
        let window = CandidateWindow::new(dims, &loads);
        assert_eq!(
            run(&mut GreedyDotProduct::default(), &window, 2, &[0], 0),
            vec![0, 2]
        );
        assert_eq!(
            run(&mut NormMinimizing::default(), &window, 2, &[0], 0),
            vec![0, 1]
        );
    }

    /// The paper's equivalence: when every candidate has the same total (and the same |v|²,
    /// e.g. all are permutations of one token-count vector), Var(L+v), ||L+v||² and v·L
    /// differ only by per-step constants and pick the same batch.
    #[test]
    fn variance_norm_and_dot_product_agree_when_totals_are_equal() {
        let dims = 240;
        let base: Vec<f32> = (0..dims).map(|j| ((j * 7) % 13) as f32).collect();
        for seed in 0..8 {
            let mut rng = expertsim_serving::rng::stream(seed, "equal-totals");
            let mut loads = Vec::new();
            for _ in 0..32 {
                let mut v = base.clone();
                for j in (1..dims).rev() {
                    v.swap(j, rng.random_range(0..=j));
                }
                loads.extend(v);
            }
            let window = CandidateWindow::new(dims, &loads);
            for seeded in [&[][..], &[0][..]] {
                let var = run(&mut GreedyVariance::default(), &window, 8, seeded, 0);
                let norm = run(&mut NormMinimizing::default(), &window, 8, seeded, 0);
                let dot = run(&mut GreedyDotProduct::default(), &window, 8, seeded, 0);
                assert_eq!(var, norm);
                assert_eq!(var, dot);
                // And they are not simply FCFS.
                assert_ne!(var, (0..8).collect::<Vec<_>>());
            }
        }
    }
}
