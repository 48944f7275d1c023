//! power_of_d: power-of-d-choices sampling with the variance objective (caps.txt: "power_of_d |
//! Sample k candidates, min variance | O(B×k×d) | k=8 default"; Mitzenmacher, "The Power of Two
//! Choices in Randomized Load Balancing").

use expertsim_serving::policies::batch::{BatchSelection, BatchSelector, CandidateWindow};
use expertsim_serving::rng::SimRng;

use super::greedy::{Greedy, Needs};
use super::greedy_variance;

/// Each step draws `samples` of the remaining candidates uniformly without replacement (a
/// partial Fisher-Yates shuffle, `samples` RNG draws) and adds the one minimising `Var(L+v)`
/// (the greedy_variance objective); ties go to the oldest sampled candidate. When at most
/// `samples` candidates remain, all are scored and no random number is drawn, so with
/// `samples >= window size` this is exactly greedy_variance. `samples = 0` is treated as 1.
#[derive(Debug)]
pub struct PowerOfD {
    samples: usize,
    greedy: Greedy,
}

impl PowerOfD {
    pub fn new(samples: usize) -> Self {
        PowerOfD {
            samples,
            greedy: Greedy::default(),
        }
    }
}

impl BatchSelector for PowerOfD {
    fn select(
        &mut self,
        window: &CandidateWindow<'_>,
        selection: &mut BatchSelection,
        rng: &mut SimRng,
    ) {
        self.greedy.fill_sampled(
            window,
            selection,
            Needs::Stats,
            Some((self.samples, rng)),
            greedy_variance::score,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::greedy_variance::GreedyVariance;
    use crate::batch::testutil::{random_window, run};

    #[test]
    fn samples_at_least_the_window_is_greedy_variance() {
        for seed in 0..6 {
            let (dims, loads) = random_window(seed, 32, 1440);
            let window = CandidateWindow::new(dims, &loads);
            for seeded in [&[][..], &[0][..]] {
                let greedy = run(&mut GreedyVariance::default(), &window, 8, seeded, seed);
                for samples in [32, 100] {
                    let sampled = run(&mut PowerOfD::new(samples), &window, 8, seeded, seed);
                    assert_eq!(sampled, greedy);
                }
            }
        }
    }

    #[test]
    fn sampling_is_random_but_never_takes_the_worst_of_two() {
        let (dims, loads) = random_window(7, 32, 240);
        let window = CandidateWindow::new(dims, &loads);
        // With two samples, the first pick after the seed is never the candidate that is the
        // unique worst for the variance objective.
        let mut worst = (f64::NEG_INFINITY, 0);
        let l = window.load(0);
        for i in 1..window.len() {
            let sum: Vec<f64> = l
                .iter()
                .zip(window.load(i))
                .map(|(a, b)| f64::from(a + b))
                .collect();
            let mean = sum.iter().sum::<f64>() / sum.len() as f64;
            let var = sum.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>();
            if var > worst.0 {
                worst = (var, i);
            }
        }
        let mut firsts = std::collections::BTreeSet::new();
        for seed in 0..200 {
            let chosen = run(&mut PowerOfD::new(2), &window, 8, &[0], seed);
            assert_ne!(chosen[1], worst.1);
            firsts.insert(chosen[1]);
        }
        assert!(firsts.len() > 5, "sampling looks deterministic: {firsts:?}");
    }
}
