//! greedy_variance: the original CAPS rule, "Greedily add requests that minimize aggregate load
//! variance" (caps.txt: `select_batch`, "greedy_variance | Minimize Var(L+v) | Original CAPS").

use expertsim_serving::policies::batch::{BatchSelection, BatchSelector, CandidateWindow};
use expertsim_serving::rng::SimRng;

use super::greedy::{BatchStats, CandidateStats, Greedy, Needs};

/// Each step adds the remaining candidate `v` minimising the variance over all entries of
/// `L + v` (`L` = the batch's summed load so far); ties go to the oldest candidate.
///
/// Evaluated as `d · Var(L+v) - |L|² = 2 L·v + |v|² - (sum(L) + sum(v))² / d`: the dropped
/// `|L|²` and the factor `d` are the same for every candidate of a step, so the argmin is that
/// of `Var(L+v)`, with less rounding.
#[derive(Debug, Default)]
pub struct GreedyVariance {
    greedy: Greedy,
}

/// The `greedy_variance` objective (shared with `best_fit`, whose distance to uniform it is, and
/// `power_of_d`).
pub(crate) fn score(batch: &BatchStats, c: &CandidateStats) -> f64 {
    let total = batch.total + c.total;
    2.0 * c.dot + c.square - total * total * batch.inv_dims
}

impl BatchSelector for GreedyVariance {
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
    use crate::batch::testutil::{random_window, rows, run};

    fn variance(x: &[f64]) -> f64 {
        let mean = x.iter().sum::<f64>() / x.len() as f64;
        x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / x.len() as f64
    }

    #[test]
    fn pairs_complementary_vectors_instead_of_identical_ones() {
        let (dims, loads) = rows(&[
            &[5.0, 1.0, 0.0, 0.0],
            &[5.0, 1.0, 0.0, 0.0],
            &[0.0, 0.0, 5.0, 1.0],
            &[0.0, 1.0, 0.0, 5.0],
            &[5.0, 0.0, 1.0, 0.0],
        ]);
        let window = CandidateWindow::new(dims, &loads);
        let mut selector = GreedyVariance::default();
        // Seeded with 0, the twin 1 and the near-twin 4 are avoided.
        assert_eq!(run(&mut selector, &window, 3, &[0], 0), vec![0, 2, 3]);
    }

    #[test]
    fn every_step_takes_the_brute_force_minimum_variance() {
        for seed in 0..6 {
            let (dims, loads) = random_window(seed, 32, 96);
            let window = CandidateWindow::new(dims, &loads);
            let chosen = run(&mut GreedyVariance::default(), &window, 8, &[0], seed);
            let mut batch: Vec<f64> = window.load(0).iter().map(|x| f64::from(*x)).collect();
            for step in 1..chosen.len() {
                let var_with = |i: usize| {
                    let sum: Vec<f64> = batch
                        .iter()
                        .zip(window.load(i))
                        .map(|(a, b)| a + f64::from(*b))
                        .collect();
                    variance(&sum)
                };
                let best = (0..window.len())
                    .filter(|i| !chosen[..step].contains(i))
                    .map(var_with)
                    .fold(f64::INFINITY, f64::min);
                let got = var_with(chosen[step]);
                assert!(got <= best * (1.0 + 1e-12), "step {step}: {got} > {best}");
                for (a, b) in batch.iter_mut().zip(window.load(chosen[step])) {
                    *a += f64::from(*b);
                }
            }
        }
    }
}
