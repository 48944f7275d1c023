//! MOSAIC's placement ILP (mosaic.txt section 4.1.3), solved as a MILP through good_lp (the
//! pure-Rust microlp by default, HiGHS with the `highs` cargo feature):
//!
//! ```text
//! min C  s.t.  C >= sum_m l_m x_mn + tau_m y_mn      for every worker n   (4), (10)
//!              sum_n y_mn = P_m                        for every model m     (5)
//!              y_mn <= P_m x_mn                                              (6)
//!              1 <= sum_n x_mn <= cap_m                                      (7)
//!              sum_m x_mn <= K                                               (9)
//!              C >= l_m + tau_m P_m / cap_m            (valid bound, optional)
//!              W_n >= W_n+1                            (worker symmetry breaking)
//!              x binary, y integer >= 0
//! ```
//!
//! The solve is warm-started from the LPT plan (feasible for every K >= ceil(M/N)), stopped
//! after `node_limit` branch-and-bound nodes (a count, not the clock: the plan is the same on
//! every machine at any load), and reports its status, the relative gap to the best proven bound
//! and the solve time. An infeasible K is reported as `PlacementError::Infeasible` with the
//! reason. good_lp's microlp wrapper takes a time limit only, so the microlp backend builds
//! microlp's own problem from the same formulation (`microlp_problem`) and solves it with a node
//! limit; HiGHS gets the budget as its `mip_max_nodes` option.
//!
//! A solve is a pure function of the problem and the options (the branch and bound runs the
//! same way each time, and stops at the same node), so its plan is kept for the process
//! (`SOLVED`): MOSAIC's cells that differ only in what the placement does not see (the gate's
//! tau, the aggregator) solve once.

use super::lpt::lpt_plan;
use expertsim_serving::memo::{ExactKey, Memo};
use expertsim_serving::policies::placement::{
    ILP_NODE_LIMIT, Placement, PlacementError, PlacementPlan, PlacementProblem, Session,
    SolveStatus, SolverReport,
};
use good_lp::{Expression, ProblemVariables, ResolutionError, Variable, variable};
use std::time::Instant;

pub struct Ilp {
    /// Branch-and-bound nodes a solve attempt may take.
    pub node_limit: u32,
    pub valid_bound: bool,
    pub warm_start: bool,
}

impl Default for Ilp {
    fn default() -> Self {
        Ilp {
            node_limit: ILP_NODE_LIMIT,
            valid_bound: true,
            warm_start: true,
        }
    }
}

/// The variables of the formulation.
struct Formulation {
    vars: ProblemVariables,
    x: Vec<Vec<Variable>>,
    y: Vec<Vec<Variable>>,
    c: Variable,
    constraints: Vec<good_lp::Constraint>,
}

/// Times are divided by `scale` (the lower bound) so the coefficients are O(1), which keeps
/// the simplex well conditioned on instances mixing 0.01 s and 2 s per-prompt costs.
fn formulate(
    problem: &PlacementProblem,
    valid_bound: bool,
    symmetry_breaking: bool,
    scale: f64,
) -> Formulation {
    let (m_count, n) = (problem.models.len(), problem.n_workers as usize);
    let mut vars = ProblemVariables::new();
    let x: Vec<Vec<Variable>> = (0..m_count)
        .map(|_| (0..n).map(|_| vars.add(variable().binary())).collect())
        .collect();
    let y: Vec<Vec<Variable>> = problem
        .models
        .iter()
        .map(|m| {
            (0..n)
                .map(|_| vars.add(variable().integer().min(0).max(f64::from(m.prompts))))
                .collect()
        })
        .collect();
    let c = vars.add(variable().min(0));
    let mut constraints = Vec::new();
    let worker_time = |w: usize| -> Expression {
        let mut e = Expression::from(0.0);
        for (i, m) in problem.models.iter().enumerate() {
            e += (m.load_s / scale) * x[i][w] + (m.per_prompt_s / scale) * y[i][w];
        }
        e
    };
    for w in 0..n {
        constraints.push(worker_time(w).leq(c));
        if symmetry_breaking && w + 1 < n {
            constraints.push(worker_time(w + 1).leq(worker_time(w)));
        }
        let mut hosted = Expression::from(0.0);
        for row in &x {
            hosted += row[w];
        }
        constraints.push(hosted.leq(f64::from(problem.max_models_per_worker)));
    }
    for (i, m) in problem.models.iter().enumerate() {
        let p = f64::from(m.prompts);
        let mut placed = Expression::from(0.0);
        let mut replicas = Expression::from(0.0);
        for w in 0..n {
            placed += y[i][w];
            replicas += x[i][w];
            constraints.push((y[i][w] - p * x[i][w]).leq(0.0));
        }
        constraints.push(placed.eq(p));
        constraints.push(replicas.clone().geq(1.0));
        constraints.push(replicas.leq(f64::from(m.replica_cap)));
        if valid_bound {
            let bound = (m.load_s + m.per_prompt_s * p / f64::from(m.replica_cap.max(1))) / scale;
            constraints.push(Expression::from(c).geq(bound));
        }
    }
    Formulation {
        vars,
        x,
        y,
        c,
        constraints,
    }
}

/// A lower bound on any plan's makespan: the valid bound of every model, and the total work
/// (one load per model at least) spread over all workers.
pub fn lower_bound(problem: &PlacementProblem) -> f64 {
    let per_model = problem
        .models
        .iter()
        .map(|m| m.load_s + m.per_prompt_s * f64::from(m.prompts) / f64::from(m.replica_cap.max(1)))
        .fold(0.0, f64::max);
    let work: f64 = problem
        .models
        .iter()
        .map(|m| m.load_s + m.per_prompt_s * f64::from(m.prompts))
        .sum();
    per_model.max(work / f64::from(problem.n_workers.max(1)))
}

/// What the backend returns when it has a plan.
struct RawSolution {
    values: Vec<f64>,
    status: SolveStatus,
    bound: Option<f64>,
    nodes: u64,
}

/// The formulation as microlp's own problem, built as good_lp's microlp wrapper builds it (the
/// same columns in the same order, the same rows), with each good_lp variable's column.
#[cfg(not(feature = "highs"))]
fn microlp_problem(
    f: &Formulation,
) -> Result<
    (
        microlp::Problem,
        std::collections::HashMap<Variable, microlp::Variable>,
    ),
    ResolutionError,
> {
    use good_lp::IntoAffineExpression;
    let integer_bound = |bound: f64| {
        (f64::from(i32::MIN)..=f64::from(i32::MAX))
            .contains(&bound)
            .then_some(bound as i32)
            .ok_or_else(|| ResolutionError::Str(format!("integer bound {bound} past i32")))
    };
    let mut problem = microlp::Problem::new(microlp::OptimizationDirection::Minimize);
    let mut columns = std::collections::HashMap::new();
    for (var, definition) in f.vars.iter_variables_with_def() {
        let cost = if var == f.c { 1.0 } else { 0.0 };
        let (min, max) = (definition.get_min(), definition.get_max());
        let column = if definition.is_integer() {
            problem.add_integer_var(cost, (integer_bound(min)?, integer_bound(max)?))
        } else {
            problem.add_var(cost, (min, max))
        };
        columns.insert(var, column);
    }
    for constraint in &f.constraints {
        let expression = constraint.expression();
        let mut row = microlp::LinearExpr::empty();
        for (var, coefficient) in expression.linear_coefficients() {
            row.add(columns[&var], coefficient);
        }
        let op = if constraint.is_equality() {
            microlp::ComparisonOp::Eq
        } else {
            microlp::ComparisonOp::Le
        };
        problem.add_constraint(row, op, -expression.constant());
    }
    Ok((problem, columns))
}

/// The solve of `f` within `node_limit` nodes: the values of `read`, or `None` when the budget
/// ran out before any feasible plan.
#[cfg(not(feature = "highs"))]
fn solve_backend(
    f: Formulation,
    read: &[Variable],
    node_limit: u32,
    initial: Option<Vec<(Variable, f64)>>,
) -> Result<Option<RawSolution>, ResolutionError> {
    let (problem, columns) = microlp_problem(&f)?;
    let mut options = microlp::SolveOptions::default();
    options.node_limit = Some(u64::from(node_limit));
    options.warm_start = initial.map(|values| {
        values
            .into_iter()
            .map(|(var, value)| (columns[&var], value))
            .collect()
    });
    let Ok(solution) = problem.solve_with(options)?.into_solution() else {
        return Ok(None);
    };
    let status = match solution.termination_reason() {
        microlp::TerminationReason::ProvenOptimal => SolveStatus::Optimal,
        microlp::TerminationReason::MipGap => SolveStatus::GapLimit,
        // The node budget: no other limit is set.
        _ => SolveStatus::NodeLimit,
    };
    let stats = solution.stats();
    Ok(Some(RawSolution {
        values: read
            .iter()
            .map(|v| solution.var_value(columns[v]))
            .collect(),
        status,
        bound: stats.best_bound,
        nodes: stats.nodes_solved,
    }))
}

#[cfg(feature = "highs")]
fn solve_backend(
    f: Formulation,
    read: &[Variable],
    node_limit: u32,
    initial: Option<Vec<(Variable, f64)>>,
) -> Result<Option<RawSolution>, ResolutionError> {
    use good_lp::{Solution, SolutionStatus, SolverModel, WithInitialSolution};
    let mut model = f
        .vars
        .minimise(f.c)
        .using(good_lp::solvers::highs::highs)
        .set_option(
            "mip_max_nodes",
            i32::try_from(node_limit).unwrap_or(i32::MAX),
        );
    for constraint in f.constraints {
        model.add_constraint(constraint);
    }
    if let Some(initial) = initial {
        model = model.with_initial_solution(initial);
    }
    let solution = model.solve()?;
    let values = read.iter().map(|&v| solution.value(v)).collect();
    let status = match solution.status() {
        SolutionStatus::Optimal => SolveStatus::Optimal,
        SolutionStatus::GapLimit => SolveStatus::GapLimit,
        // good_lp folds every HiGHS limit into `TimeLimit`; the node budget is the one set.
        SolutionStatus::TimeLimit => SolveStatus::NodeLimit,
    };
    // HiGHS's bound and node count are not exposed through good_lp's solution; the gap is then
    // taken against `lower_bound` unless the solve is optimal.
    Ok(Some(RawSolution {
        values,
        status,
        bound: None,
        nodes: 0,
    }))
}

impl Ilp {
    /// The warm start: the LPT plan, workers sorted by predicted time (the symmetry-breaking
    /// order), as variable values.
    fn initial_values(
        problem: &PlacementProblem,
        f: &Formulation,
        plan: &PlacementPlan,
        scale: f64,
    ) -> Vec<(Variable, f64)> {
        let mut workers = plan.workers.clone();
        workers.sort_by(|a, b| {
            problem
                .predicted_worker_s(b)
                .total_cmp(&problem.predicted_worker_s(a))
        });
        let mut values = Vec::new();
        for (i, _) in problem.models.iter().enumerate() {
            for (w, sessions) in workers.iter().enumerate() {
                let prompts: u32 = sessions
                    .iter()
                    .filter(|s| s.model == i)
                    .map(|s| s.prompts)
                    .sum();
                let hosted = sessions.iter().any(|s| s.model == i);
                values.push((f.x[i][w], if hosted { 1.0 } else { 0.0 }));
                values.push((f.y[i][w], f64::from(prompts)));
            }
        }
        values.push((f.c, problem.predicted_makespan_s(plan) / scale));
        values
    }
}

/// The plans by `solve_key` (`None`: a solve that gave no plan, which the next caller repeats);
/// a second caller of a solve under way waits for it. It keeps the 256 most recently used: a
/// plan is a few sessions per worker and its key a few dozen bytes per model.
static SOLVED: Memo<ExactKey, Option<PlacementPlan>> = Memo::new(256);

/// Everything `Ilp::solve` reads: the options and every field of the problem, each number by its
/// bits and each name behind its length.
fn solve_key(ilp: &Ilp, problem: &PlacementProblem) -> ExactKey {
    let mut key = ExactKey::new();
    key.u64(u64::from(ilp.node_limit))
        .u64(u64::from(ilp.valid_bound))
        .u64(u64::from(ilp.warm_start))
        .u64(u64::from(problem.n_workers))
        .u64(u64::from(problem.max_models_per_worker))
        .usize(problem.models.len());
    for m in &problem.models {
        key.str(&m.name)
            .u64(u64::from(m.prompts))
            .f64(m.load_s)
            .f64(m.predicted_session_s)
            .f64(m.per_prompt_s)
            .u64(u64::from(m.replica_cap));
    }
    key
}

impl Placement for Ilp {
    fn name(&self) -> &'static str {
        "ilp"
    }
    fn respects_limits(&self) -> bool {
        true
    }
    fn place(&mut self, problem: &PlacementProblem) -> Result<PlacementPlan, PlacementError> {
        let mut fresh = None;
        let kept = SOLVED.get_or_compute(&solve_key(self, problem), || {
            let solved = self.solve(problem);
            let keep = solved.as_ref().ok().cloned();
            fresh = Some(solved);
            keep
        });
        match (fresh, kept.as_ref()) {
            (Some(solved), _) => solved,
            (None, Some(plan)) => Ok(plan.clone()),
            (None, None) => self.solve(problem),
        }
    }
}

impl Ilp {
    /// The MILP's plan for `problem`, solved afresh.
    fn solve(&self, problem: &PlacementProblem) -> Result<PlacementPlan, PlacementError> {
        problem.check_feasible()?;
        let started = Instant::now();
        let heuristic = lpt_plan(problem)?;
        let (m_count, n) = (problem.models.len(), problem.n_workers as usize);
        let own_bound = lower_bound(problem);
        let scale = if own_bound > 0.0 { own_bound } else { 1.0 };
        // microlp can stop on a numerical failure ("singular matrix"); the formulation is then
        // retried without the symmetry-breaking rows, then without the warm start, each attempt
        // with the whole node budget. A budget spent without a plan is not retried.
        let attempts = [
            (true, self.warm_start),
            (false, self.warm_start),
            (false, false),
        ];
        let mut result = Err(ResolutionError::Str("not solved".into()));
        for (symmetry, warm) in attempts {
            let f = formulate(problem, self.valid_bound, symmetry, scale);
            let read: Vec<Variable> = f.y.iter().flatten().copied().collect();
            let initial = warm.then(|| Self::initial_values(problem, &f, &heuristic, scale));
            result = solve_backend(f, &read, self.node_limit, initial);
            if !matches!(
                result,
                Err(ResolutionError::Str(_)) | Err(ResolutionError::Other(_))
            ) {
                break;
            }
        }
        let solve_time_s = started.elapsed().as_secs_f64();
        let (mut plan, status, solver_bound, nodes) = match result {
            Ok(Some(raw)) => {
                let mut workers = vec![Vec::new(); n];
                for i in 0..m_count {
                    for (w, sessions) in workers.iter_mut().enumerate() {
                        let prompts = raw.values[i * n + w].round().max(0.0) as u32;
                        if prompts > 0 {
                            sessions.push(Session { model: i, prompts });
                        }
                    }
                }
                let plan = PlacementPlan {
                    workers,
                    barrier_per_round: false,
                    solver: None,
                };
                (plan, raw.status, raw.bound.map(|b| b * scale), raw.nodes)
            }
            Err(ResolutionError::Infeasible) => {
                return Err(PlacementError::Infeasible {
                    reason: "the MILP solver proved the constraints infeasible".into(),
                });
            }
            // No incumbent within the node budget, or a numerical failure of every attempt: the
            // warm-start heuristic is returned, flagged as such.
            Ok(None) | Err(ResolutionError::Other(_)) | Err(ResolutionError::Str(_)) => {
                (heuristic, SolveStatus::NoIncumbent, None, 0)
            }
            Err(e) => return Err(PlacementError::Solver(e.to_string())),
        };
        let objective_s = problem.predicted_makespan_s(&plan);
        let bound_s = if status == SolveStatus::Optimal {
            objective_s
        } else {
            solver_bound.unwrap_or(0.0).max(own_bound).min(objective_s)
        };
        plan.solver = Some(SolverReport {
            status,
            objective_s,
            bound_s,
            gap: if objective_s > 0.0 {
                (objective_s - bound_s) / objective_s
            } else {
                0.0
            },
            solve_time_s,
            nodes,
        });
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::brute_force::optimal_makespan;
    use crate::placement::lpt::Lpt;
    use crate::placement::testutil::{paper_instance, problem};
    use rand::RngExt;

    #[test]
    fn matches_brute_force_on_small_instances() {
        let mut rng = expertsim_serving::rng::stream(11, "ilp-brute-force");
        let mut checked = 0;
        for case in 0..40 {
            let m = rng.random_range(1..=4usize);
            let n = rng.random_range(1..=3u32);
            let rows: Vec<(u32, f64, f64, u32)> = (0..m)
                .map(|_| {
                    (
                        rng.random_range(1..=5u32),
                        f64::from(rng.random_range(0..=6u32)),
                        f64::from(rng.random_range(1..=12u32)) * 0.5,
                        rng.random_range(1..=n),
                    )
                })
                .collect();
            let min_k = (m as u32).div_ceil(n);
            let k = rng.random_range(min_k..=m as u32);
            let p = problem(&rows, n, k);
            let plan = Ilp::default().place(&p).unwrap();
            plan.check(&p, true)
                .unwrap_or_else(|e| panic!("case {case}: {e}"));
            let report = plan.solver.as_ref().unwrap();
            assert_eq!(report.status, SolveStatus::Optimal, "case {case}");
            let best = optimal_makespan(&p);
            let got = p.predicted_makespan_s(&plan);
            assert!(
                (got - best).abs() <= 1e-6 * best.max(1.0),
                "case {case}: ILP {got}, brute force {best}, {rows:?} N={n} K={k}"
            );
            checked += 1;
        }
        assert_eq!(checked, 40);
    }

    #[test]
    fn splits_the_heavy_experts_and_beats_lpt_on_the_paper_instance() {
        let p = paper_instance();
        let plan = Ilp::default().place(&p).unwrap();
        plan.check(&p, true).unwrap();
        let report = plan.solver.clone().unwrap();
        assert_eq!(report.status, SolveStatus::Optimal);
        assert!(report.gap.abs() < 1e-9);
        let ilp = p.predicted_makespan_s(&plan);
        let lpt = p.predicted_makespan_s(&Lpt.place(&p).unwrap());
        assert!(ilp < 0.8 * lpt, "ILP {ilp} vs LPT {lpt}");
        assert!(ilp >= lower_bound(&p) - 1e-6);
        // The two reasoning experts (models 1 and 3) are replicated.
        for heavy in [1, 3] {
            let replicas = plan
                .workers
                .iter()
                .filter(|w| w.iter().any(|s| s.model == heavy))
                .count();
            assert!(replicas >= 2, "model {heavy}: {replicas} replicas");
        }
    }

    #[test]
    fn a_kept_solve_is_the_solve_run_afresh_and_its_key_names_every_input() {
        let p = problem(
            &[
                (40, 2.0, 0.5, 3),
                (12, 1.0, 1.5, 2),
                (7, 3.0, 0.2, 1),
                (30, 1.5, 0.3, 3),
            ],
            3,
            2,
        );
        let ilp = Ilp::default();
        // The solve time is the clock's, the only field that may differ.
        let timeless = |plan: PlacementPlan| {
            let mut plan = plan;
            if let Some(report) = &mut plan.solver {
                report.solve_time_s = 0.0;
            }
            plan
        };
        let fresh = timeless(ilp.solve(&p).unwrap());
        assert_eq!(
            fresh.solver.as_ref().map(|s| s.status),
            Some(SolveStatus::Optimal)
        );
        for _ in 0..2 {
            assert_eq!(timeless(Ilp::default().place(&p).unwrap()), fresh);
        }
        let key = solve_key(&ilp, &p);
        assert!(SOLVED.get(&key).is_some_and(|kept| kept.is_some()));
        let mut changed = Vec::new();
        for edit in 0..9 {
            let mut q = p.clone();
            let mut other = Ilp::default();
            match edit {
                0 => q.n_workers += 1,
                1 => q.max_models_per_worker += 1,
                2 => q.models[1].prompts += 1,
                3 => q.models[2].load_s = f64::from_bits(q.models[2].load_s.to_bits() + 1),
                4 => q.models[3].per_prompt_s *= 1.5,
                5 => q.models[0].replica_cap -= 1,
                6 => q.models[0].name.push('x'),
                7 => other.node_limit += 1,
                _ => other.valid_bound = false,
            }
            changed.push(solve_key(&other, &q));
        }
        assert!(changed.iter().all(|k| *k != key));
        assert_eq!(solve_key(&Ilp::default(), &p.clone()), key);
    }

    #[test]
    fn a_solve_cut_by_its_node_budget_is_the_same_every_time_and_reports_its_gap() {
        let p = paper_instance();
        let optimal = Ilp::default().solve(&p).unwrap();
        let optimal_report = optimal.solver.clone().unwrap();
        assert_eq!(optimal_report.status, SolveStatus::Optimal);
        let budget = 8;
        assert!(optimal_report.nodes > 2 * budget, "{optimal_report:?}");
        let mut cut = Ilp {
            node_limit: budget as u32,
            ..Ilp::default()
        };
        // The solve time is the clock's, the only field that may differ.
        let timeless = |plan: PlacementPlan| {
            let mut plan = plan;
            if let Some(report) = &mut plan.solver {
                report.solve_time_s = 0.0;
            }
            plan
        };
        let first = timeless(cut.solve(&p).unwrap());
        for _ in 0..2 {
            assert_eq!(timeless(cut.solve(&p).unwrap()), first);
        }
        first.check(&p, true).unwrap();
        let report = first.solver.clone().unwrap();
        assert_eq!(report.status, SolveStatus::NodeLimit, "{report:?}");
        assert_eq!(report.nodes, budget);
        assert!(report.gap > 0.0, "{report:?}");
        assert!(report.bound_s <= optimal_report.objective_s, "{report:?}");
        assert!(
            report.objective_s >= optimal_report.objective_s,
            "{report:?}"
        );
        assert!(report.objective_s <= p.predicted_makespan_s(&Lpt.place(&p).unwrap()));
        // Such a plan depends on nothing but its inputs, so it is kept like an optimal one.
        for _ in 0..2 {
            assert_eq!(timeless(cut.place(&p).unwrap()), first);
        }
        assert!(
            SOLVED
                .get(&solve_key(&cut, &p))
                .is_some_and(|kept| kept.is_some())
        );
    }

    #[test]
    fn infeasible_k_is_reported_with_its_reason() {
        let mut p = paper_instance();
        p.max_models_per_worker = 1;
        match Ilp::default().place(&p) {
            Err(PlacementError::Infeasible { reason }) => {
                assert!(reason.contains("ceil(6/4) = 2"), "{reason}")
            }
            other => panic!("expected infeasible, got {other:?}"),
        }
    }

    #[test]
    fn replica_caps_bind() {
        // One huge model, cap 1: it cannot be split however long it runs.
        let p = problem(&[(10, 1.0, 10.0, 1), (1, 1.0, 1.0, 1)], 3, 2);
        let plan = Ilp::default().place(&p).unwrap();
        plan.check(&p, true).unwrap();
        assert_eq!(p.predicted_makespan_s(&plan), 101.0);
        let p = problem(&[(10, 1.0, 10.0, 2), (1, 1.0, 1.0, 1)], 3, 2);
        let plan = Ilp::default().place(&p).unwrap();
        assert_eq!(p.predicted_makespan_s(&plan), 51.0);
    }
}
