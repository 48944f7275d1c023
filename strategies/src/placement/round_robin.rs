//! Round-robin placement (the paper's baseline): the i-th model in first-seen order goes to
//! worker i mod N, whole; a worker runs its models one after another. No calibration, exactly
//! one load per model, and blind to per-model cost.

use expertsim_serving::policies::placement::{
    Placement, PlacementError, PlacementPlan, PlacementProblem, Session,
};

pub struct RoundRobin;

impl Placement for RoundRobin {
    fn name(&self) -> &'static str {
        "round_robin"
    }
    fn respects_limits(&self) -> bool {
        false
    }
    fn place(&mut self, problem: &PlacementProblem) -> Result<PlacementPlan, PlacementError> {
        if problem.n_workers == 0 {
            return Err(PlacementError::Infeasible {
                reason: "there are no workers".into(),
            });
        }
        let n = problem.n_workers as usize;
        let mut workers = vec![Vec::new(); n];
        for (i, model) in problem.models.iter().enumerate() {
            workers[i % n].push(Session {
                model: i,
                prompts: model.prompts,
            });
        }
        Ok(PlacementPlan {
            workers,
            barrier_per_round: false,
            solver: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::testutil::problem;

    #[test]
    fn wraps_around_the_workers_in_first_seen_order() {
        let p = problem(&[(5, 1.0, 1.0, 1); 6], 4, 2);
        let plan = RoundRobin.place(&p).unwrap();
        let models: Vec<Vec<usize>> = plan
            .workers
            .iter()
            .map(|w| w.iter().map(|s| s.model).collect())
            .collect();
        assert_eq!(models, vec![vec![0, 4], vec![1, 5], vec![2], vec![3]]);
        plan.check(&p, true).unwrap();
    }
}
