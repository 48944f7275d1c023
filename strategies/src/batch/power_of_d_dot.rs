//! power_of_d_dot: power-of-d-choices sampling with the dot-product objective (caps.txt:
//! "power_of_d_dot | Sample k candidates, min dot product | O(B×k×d) | Literature recommended").

use expertsim_serving::policies::batch::{BatchSelection, BatchSelector, CandidateWindow};
use expertsim_serving::rng::SimRng;

use super::greedy::{Greedy, Needs};
use super::greedy_dot_product;

/// Each step draws `samples` of the remaining candidates uniformly without replacement (a
/// partial Fisher-Yates shuffle, `samples` RNG draws) and adds the one with the smallest
/// overlap `v · L` with the batch load (the greedy_dot_product objective); ties go to the
/// oldest sampled candidate. When at most `samples` candidates remain, all are scored and no
/// random number is drawn, so with `samples >= window size` this is exactly
/// greedy_dot_product. `samples = 0` is treated as 1.
#[derive(Debug)]
pub struct PowerOfDDot {
    samples: usize,
    greedy: Greedy,
}

impl PowerOfDDot {
    pub fn new(samples: usize) -> Self {
        PowerOfDDot {
            samples,
            greedy: Greedy::default(),
        }
    }
}

impl BatchSelector for PowerOfDDot {
    fn select(
        &mut self,
        window: &CandidateWindow<'_>,
        selection: &mut BatchSelection,
        rng: &mut SimRng,
    ) {
        self.greedy.fill_sampled(
            window,
            selection,
            Needs::DotOnly,
            Some((self.samples, rng)),
            greedy_dot_product::score,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::greedy_dot_product::GreedyDotProduct;
    use crate::batch::testutil::{random_window, run};

    #[test]
    fn samples_at_least_the_window_is_greedy_dot_product() {
        for seed in 0..6 {
            let (dims, loads) = random_window(seed, 32, 1440);
            let window = CandidateWindow::new(dims, &loads);
            for seeded in [&[][..], &[0][..]] {
                let greedy = run(&mut GreedyDotProduct::default(), &window, 8, seeded, seed);
                let sampled = run(&mut PowerOfDDot::new(32), &window, 8, seeded, seed);
                assert_eq!(sampled, greedy);
            }
        }
    }

    #[test]
    fn small_samples_depend_on_the_seed() {
        let (dims, loads) = random_window(11, 32, 240);
        let window = CandidateWindow::new(dims, &loads);
        let batches: std::collections::BTreeSet<Vec<usize>> = (0..20)
            .map(|seed| run(&mut PowerOfDDot::new(3), &window, 8, &[0], seed))
            .collect();
        assert!(batches.len() > 1);
    }
}
