//! vLLM's default expert placement: contiguous blocks of experts by index, the remainder (when
//! G does not divide E) going one each to the first ranks.

use expertsim_serving::policies::mapping::{ExpertMapper, LayerMapping, LayerProblem};
use expertsim_serving::rng::SimRng;

/// Expert `e` on the rank whose contiguous block holds it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Linear;

/// The GPU of each expert under vLLM's linear placement: rank r hosts
/// `E / G + (1 if r < E mod G)` experts starting at `r (E / G) + min(r, E mod G)`.
pub fn linear_assignment(n_experts: usize, n_gpus: usize) -> Vec<usize> {
    let base = n_experts / n_gpus;
    let remainder = n_experts % n_gpus;
    let mut gpus = Vec::with_capacity(n_experts);
    for rank in 0..n_gpus {
        let count = base + usize::from(rank < remainder);
        gpus.extend(std::iter::repeat_n(rank, count));
    }
    gpus
}

impl ExpertMapper for Linear {
    fn map_layer(&mut self, problem: &LayerProblem<'_>, _: &mut SimRng) -> LayerMapping {
        LayerMapping::from_assignment(
            &linear_assignment(problem.n_experts, problem.n_gpus()),
            problem.n_gpus(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_blocks_with_remainder_to_the_first_ranks() {
        assert_eq!(linear_assignment(8, 4), vec![0, 0, 1, 1, 2, 2, 3, 3]);
        assert_eq!(linear_assignment(10, 4), vec![0, 0, 0, 1, 1, 1, 2, 2, 3, 3]);
        assert_eq!(linear_assignment(16, 4)[..5], [0, 0, 0, 0, 1]);
    }
}
