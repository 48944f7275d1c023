//! Longest-processing-time-first placement: whole models, heaviest predicted session (load +
//! generation) first, each to the least-loaded worker that still hosts fewer than K models. A
//! cost-aware greedy baseline that cannot split a model: the ILP must beat it whenever one
//! reasoning expert outweighs a worker's fair share. Also the ILP's warm start.

use expertsim_serving::policies::placement::{
    Placement, PlacementError, PlacementPlan, PlacementProblem, Session,
};

pub struct Lpt;

/// The LPT plan of `problem`, or why K cannot be met.
pub fn lpt_plan(problem: &PlacementProblem) -> Result<PlacementPlan, PlacementError> {
    problem.check_feasible()?;
    let n = problem.n_workers as usize;
    let k = problem.max_models_per_worker as usize;
    let mut order: Vec<usize> = (0..problem.models.len()).collect();
    let cost = |i: usize| problem.models[i].load_s + problem.models[i].predicted_session_s;
    order.sort_by(|&a, &b| cost(b).total_cmp(&cost(a)).then(a.cmp(&b)));
    let mut load = vec![0.0f64; n];
    let mut workers: Vec<Vec<Session>> = vec![Vec::new(); n];
    for i in order {
        let w = (0..n)
            .filter(|&w| workers[w].len() < k)
            .min_by(|&a, &b| load[a].total_cmp(&load[b]).then(a.cmp(&b)))
            .expect("K x N >= M leaves a worker with room");
        load[w] += cost(i);
        workers[w].push(Session {
            model: i,
            prompts: problem.models[i].prompts,
        });
    }
    Ok(PlacementPlan {
        workers,
        barrier_per_round: false,
        solver: None,
    })
}

impl Placement for Lpt {
    fn name(&self) -> &'static str {
        "lpt"
    }
    fn respects_limits(&self) -> bool {
        true
    }
    fn place(&mut self, problem: &PlacementProblem) -> Result<PlacementPlan, PlacementError> {
        lpt_plan(problem)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::testutil::{paper_instance, problem};

    #[test]
    fn heaviest_first_to_the_least_loaded_worker() {
        let p = problem(
            &[(1, 0.0, 3.0, 1), (1, 0.0, 5.0, 1), (1, 0.0, 4.0, 1)],
            2,
            2,
        );
        let plan = Lpt.place(&p).unwrap();
        // 5 -> w0, 4 -> w1, 3 -> w1.
        assert_eq!(p.predicted_makespan_s(&plan), 7.0);
        plan.check(&p, true).unwrap();
    }

    #[test]
    fn respects_k_and_reports_infeasible_k() {
        let mut p = paper_instance();
        let plan = Lpt.place(&p).unwrap();
        plan.check(&p, true).unwrap();
        p.max_models_per_worker = 1;
        assert!(matches!(
            Lpt.place(&p),
            Err(PlacementError::Infeasible { .. })
        ));
    }
}
