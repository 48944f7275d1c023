//! Round-robin expert placement: expert `e` on GPU `e mod G`.

use expertsim_serving::policies::mapping::{ExpertMapper, LayerMapping, LayerProblem};
use expertsim_serving::rng::SimRng;

#[derive(Clone, Copy, Debug, Default)]
pub struct RoundRobin;

impl ExpertMapper for RoundRobin {
    fn map_layer(&mut self, problem: &LayerProblem<'_>, _: &mut SimRng) -> LayerMapping {
        let g = problem.n_gpus();
        let gpus: Vec<usize> = (0..problem.n_experts).map(|e| e % g).collect();
        LayerMapping::from_assignment(&gpus, g)
    }
}
