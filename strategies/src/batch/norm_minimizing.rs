//! norm_minimizing: "Minimize ||L+v||² directly" (caps.txt strategy list; "Minimize ||L+v||² |
//! Chakrabarty & Swamy", one of the near-optimal, equivalent objectives).

use expertsim_serving::policies::batch::{BatchSelection, BatchSelector, CandidateWindow};
use expertsim_serving::rng::SimRng;

use super::greedy::{BatchStats, CandidateStats, Greedy, Needs};

/// Each step adds the remaining candidate `v` minimising the squared L2 norm `||L+v||²` of the
/// batch load; ties go to the oldest candidate. Evaluated as `2 L·v + |v|²` (`||L+v||²` minus
/// the `|L|²` every candidate of the step shares). Unlike the variance it charges a candidate
/// for its own size, so it prefers light requests; with equal totals the two coincide.
#[derive(Debug, Default)]
pub struct NormMinimizing {
    greedy: Greedy,
}

fn score(_batch: &BatchStats, c: &CandidateStats) -> f64 {
    2.0 * c.dot + c.square
}

impl BatchSelector for NormMinimizing {
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
    use crate::batch::testutil::{rows, run};

    #[test]
    fn prefers_the_smaller_norm_even_when_the_variance_disagrees() {
        let (dims, loads) = rows(&[
            &[4.0, 0.0, 0.0, 0.0],
            &[0.0, 6.0, 6.0, 6.0], // ||L+v||² = 124, but L+v is nearly flat
            &[0.0, 1.0, 0.0, 0.0], // ||L+v||² = 17
        ]);
        let window = CandidateWindow::new(dims, &loads);
        assert_eq!(
            run(&mut NormMinimizing::default(), &window, 2, &[0], 0),
            vec![0, 2]
        );
        assert_eq!(
            run(&mut GreedyVariance::default(), &window, 2, &[0], 0),
            vec![0, 1]
        );
    }
}
