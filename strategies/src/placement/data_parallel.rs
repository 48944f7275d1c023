//! Data-parallel placement (the paper's section A.6): every model is loaded on every worker,
//! its prompts split evenly (the first P mod N workers take one more), models run in first-seen
//! order with a barrier after each, so the stage costs the sum over models of the slowest
//! shard: straggler idle time traded for N loads per model and smaller per-shard batches.

use expertsim_serving::policies::placement::{
    Placement, PlacementError, PlacementPlan, PlacementProblem,
};

pub struct DataParallel;

impl Placement for DataParallel {
    fn name(&self) -> &'static str {
        "data_parallel"
    }
    fn respects_limits(&self) -> bool {
        false
    }
    fn place(&mut self, problem: &PlacementProblem) -> Result<PlacementPlan, PlacementError> {
        let n = problem.n_workers;
        if n == 0 {
            return Err(PlacementError::Infeasible {
                reason: "there are no workers".into(),
            });
        }
        Ok(PlacementPlan::data_parallel(problem))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::testutil::problem;

    #[test]
    fn splits_evenly_with_barriers() {
        let p = problem(&[(10, 2.0, 1.0, 4), (3, 1.0, 1.0, 1)], 4, 2);
        let plan = DataParallel.place(&p).unwrap();
        let shares: Vec<u32> = plan.workers.iter().map(|w| w[0].prompts).collect();
        assert_eq!(shares, vec![3, 3, 2, 2]);
        let shares: Vec<u32> = plan.workers.iter().map(|w| w[1].prompts).collect();
        assert_eq!(shares, vec![1, 1, 1, 0]);
        plan.check(&p, false).unwrap();
        // Barrier per model: (2 + 3) + (1 + 1).
        assert_eq!(p.predicted_makespan_s(&plan), 7.0);
    }
}
