//! random: uniform random selection, the "Random selection | O(B) | Lower bound on benefits"
//! baseline of caps.txt.

use expertsim_serving::policies::batch::{BatchSelection, BatchSelector, CandidateWindow};
use expertsim_serving::rng::SimRng;
use rand::RngExt;

/// Fills the batch with a uniformly random subset of the unchosen candidates: a partial
/// Fisher-Yates shuffle of the remaining indices (in index order), one `random_range` draw per
/// pick, so the result depends only on the window's chosen set and the RNG state.
#[derive(Debug, Default)]
pub struct Random {
    pool: Vec<usize>,
}

impl BatchSelector for Random {
    fn select(
        &mut self,
        window: &CandidateWindow<'_>,
        selection: &mut BatchSelection,
        rng: &mut SimRng,
    ) {
        self.pool.clear();
        self.pool.extend(selection.remaining());
        let n = self.pool.len();
        let mut t = 0;
        while !selection.is_full() && t < n {
            let j = rng.random_range(t..n);
            self.pool.swap(t, j);
            selection.add(window, self.pool[t]);
            t += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::testutil::{random_window, run};

    #[test]
    fn different_seeds_give_different_batches_on_a_large_window() {
        let (dims, loads) = random_window(2, 256, 16);
        let window = CandidateWindow::new(dims, &loads);
        let a = run(&mut Random::default(), &window, 8, &[], 1);
        let b = run(&mut Random::default(), &window, 8, &[], 2);
        assert_ne!(a, b);
        // Same seed, same batch.
        assert_eq!(a, run(&mut Random::default(), &window, 8, &[], 1));
    }

    #[test]
    fn every_candidate_can_be_drawn() {
        // Over many decisions on a small window, every candidate shows up (uniformity smoke
        // test: a selector that never leaves the first few indices fails it).
        let (dims, loads) = random_window(3, 16, 8);
        let window = CandidateWindow::new(dims, &loads);
        let mut seen = [0usize; 16];
        for seed in 0..200 {
            for i in run(&mut Random::default(), &window, 4, &[], seed) {
                seen[i] += 1;
            }
        }
        // 800 picks over 16 candidates: about 50 each.
        assert!(seen.iter().all(|&c| (20..=90).contains(&c)), "{seen:?}");
    }
}
