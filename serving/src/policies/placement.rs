//! The model-placement extension point of the MoA expert stage: the problem a placement policy
//! sees (per-model prompt counts, load costs and calibrated per-prompt costs, replica caps,
//! workers, the per-worker model budget K), the plan it returns (per worker, an ordered list of
//! sessions with their prompt counts), the `Placement` trait, and the `PlacementConfig`
//! registry enum a scenario names a policy with.

use serde::{Deserialize, Serialize};

/// One expert model as the placement policy sees it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ModelDemand {
    pub name: String,
    /// Prompts recruited to this model (P_m), known before scheduling.
    pub prompts: u32,
    /// Session-start cost l_m, seconds.
    pub load_s: f64,
    /// Predicted generation time of all P_m prompts in one session (T^_m), seconds, from the
    /// model's calibration regression.
    pub predicted_session_s: f64,
    /// tau_m = T^_m / P_m, seconds per prompt.
    pub per_prompt_s: f64,
    /// cap_m = clamp(floor(T^_m / l_m), 1, N).
    pub replica_cap: u32,
}

/// Everything a placement policy may use. Models are listed in first-seen order (the order in
/// which they first appear in the question queue); models with no prompt are left out.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlacementProblem {
    pub models: Vec<ModelDemand>,
    pub n_workers: u32,
    /// At most this many distinct models per worker (the ILP's K; other policies may ignore it).
    pub max_models_per_worker: u32,
}

impl PlacementProblem {
    /// The replica cap of the paper's equation 8: clamp(1, floor(T^ / l), N).
    pub fn replica_cap(predicted_session_s: f64, load_s: f64, n_workers: u32) -> u32 {
        let ratio = if load_s > 0.0 {
            (predicted_session_s / load_s).floor()
        } else {
            f64::from(n_workers)
        };
        (ratio.max(1.0).min(f64::from(n_workers.max(1)))) as u32
    }

    /// `Err` when no placement can satisfy K: K x N < M, i.e. K < ceil(M / N).
    pub fn check_feasible(&self) -> Result<(), PlacementError> {
        let m = self.models.len() as u64;
        let n = u64::from(self.n_workers);
        let k = u64::from(self.max_models_per_worker);
        if n == 0 {
            return Err(PlacementError::Infeasible {
                reason: "there are no workers".into(),
            });
        }
        if k * n < m {
            return Err(PlacementError::Infeasible {
                reason: format!(
                    "{m} models need at least ceil({m}/{n}) = {} models per worker, but K = {k}",
                    m.div_ceil(n)
                ),
            });
        }
        Ok(())
    }

    /// The predicted time of worker sessions under the linear model: sum of l_m + tau_m y.
    pub fn predicted_worker_s(&self, sessions: &[Session]) -> f64 {
        sessions
            .iter()
            .map(|s| {
                let m = &self.models[s.model];
                m.load_s + m.per_prompt_s * f64::from(s.prompts)
            })
            .sum()
    }

    /// The plan's predicted makespan under the linear cost model (with barriers: the sum over
    /// rounds of the slowest worker's session of that round).
    pub fn predicted_makespan_s(&self, plan: &PlacementPlan) -> f64 {
        if plan.barrier_per_round {
            let rounds = plan.workers.iter().map(Vec::len).max().unwrap_or(0);
            (0..rounds)
                .map(|r| {
                    plan.workers
                        .iter()
                        .filter_map(|w| w.get(r))
                        .map(|s| self.predicted_worker_s(std::slice::from_ref(s)))
                        .fold(0.0, f64::max)
                })
                .sum()
        } else {
            plan.workers
                .iter()
                .map(|w| self.predicted_worker_s(w))
                .fold(0.0, f64::max)
        }
    }
}

/// One session of a worker: load model `model` (an index into `PlacementProblem::models`) and
/// generate `prompts` of its prompts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Session {
    pub model: usize,
    pub prompts: u32,
}

/// How the MILP solve ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SolveStatus {
    /// Proven optimal.
    Optimal,
    /// Stopped at the node budget (`PlacementConfig::Ilp::node_limit`) with a feasible
    /// incumbent; the gap says how far from proven.
    NodeLimit,
    /// Stopped within the requested relative gap.
    GapLimit,
    /// The solver found nothing in time; the plan is the warm start (a heuristic).
    NoIncumbent,
}

impl SolveStatus {
    /// The status as a number for the scalar metrics: 1 optimal, 2 node limit, 3 gap limit,
    /// 4 no incumbent (0 is "no solver ran").
    pub fn code(self) -> f64 {
        match self {
            SolveStatus::Optimal => 1.0,
            SolveStatus::NodeLimit => 2.0,
            SolveStatus::GapLimit => 3.0,
            SolveStatus::NoIncumbent => 4.0,
        }
    }
}

/// What a MILP solver reports beside its plan.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SolverReport {
    pub status: SolveStatus,
    /// Objective of the returned plan (predicted makespan), seconds.
    pub objective_s: f64,
    /// Best proven lower bound, seconds.
    pub bound_s: f64,
    /// Relative gap (objective - bound) / objective.
    pub gap: f64,
    /// Wall-clock time of the solve, seconds (not deterministic: kept out of results unless
    /// asked for).
    pub solve_time_s: f64,
    /// Branch-and-bound nodes solved (at most the node budget).
    pub nodes: u64,
}

/// A placement: per worker, the sessions it runs in order.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlacementPlan {
    pub workers: Vec<Vec<Session>>,
    /// Whether round r starts on every worker only once every worker has finished round r - 1
    /// (data parallelism's per-model barrier).
    pub barrier_per_round: bool,
    pub solver: Option<SolverReport>,
}

impl PlacementPlan {
    /// Data parallelism's plan: every model on every worker in first-seen order, its prompts split
    /// evenly (the first `P mod N` workers take one more), a barrier after each model. Shared by
    /// the `data_parallel` policy and the tests here, which cannot depend on `strategies`.
    pub fn data_parallel(problem: &PlacementProblem) -> PlacementPlan {
        let n = problem.n_workers;
        let workers = (0..n)
            .map(|w| {
                problem
                    .models
                    .iter()
                    .enumerate()
                    .map(|(i, m)| Session {
                        model: i,
                        prompts: m.prompts / n + u32::from(w < m.prompts % n),
                    })
                    .collect()
            })
            .collect();
        PlacementPlan {
            workers,
            barrier_per_round: true,
            solver: None,
        }
    }
}

/// Why a policy produced no plan.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PlacementError {
    #[error("infeasible placement: {reason}")]
    Infeasible { reason: String },
    #[error("placement solver failed: {0}")]
    Solver(String),
}

/// A rule that a plan breaks.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("invalid plan: {0}")]
pub struct PlanViolation(pub String);

impl PlacementPlan {
    /// Checks the plan covers every prompt exactly once, names only known models, has one
    /// entry per worker, and (when `limits` is set) respects K and the replica caps.
    pub fn check(&self, problem: &PlacementProblem, limits: bool) -> Result<(), PlanViolation> {
        if self.workers.len() != problem.n_workers as usize {
            return Err(PlanViolation(format!(
                "{} workers in the plan, {} in the problem",
                self.workers.len(),
                problem.n_workers
            )));
        }
        let m = problem.models.len();
        let mut placed = vec![0u64; m];
        let mut replicas = vec![0u32; m];
        for (w, sessions) in self.workers.iter().enumerate() {
            let mut seen = vec![false; m];
            for s in sessions {
                if s.model >= m {
                    return Err(PlanViolation(format!(
                        "worker {w}: unknown model {}",
                        s.model
                    )));
                }
                placed[s.model] += u64::from(s.prompts);
                if !seen[s.model] {
                    seen[s.model] = true;
                    replicas[s.model] += 1;
                }
            }
            let distinct = seen.iter().filter(|&&b| b).count() as u32;
            if limits && distinct > problem.max_models_per_worker {
                return Err(PlanViolation(format!(
                    "worker {w} hosts {distinct} models, K = {}",
                    problem.max_models_per_worker
                )));
            }
        }
        for (i, model) in problem.models.iter().enumerate() {
            if placed[i] != u64::from(model.prompts) {
                return Err(PlanViolation(format!(
                    "model {}: {} prompts placed, {} recruited",
                    model.name, placed[i], model.prompts
                )));
            }
            if limits && (replicas[i] < 1 || replicas[i] > model.replica_cap) {
                return Err(PlanViolation(format!(
                    "model {}: {} replicas, cap {}",
                    model.name, replicas[i], model.replica_cap
                )));
            }
        }
        Ok(())
    }
}

/// A model-placement policy.
pub trait Placement: Send {
    /// The snake_case kind of the policy.
    fn name(&self) -> &'static str;
    /// Whether the plan must respect K and the replica caps (the ILP and LPT do; round-robin
    /// and data parallelism, the paper's baselines, do not).
    fn respects_limits(&self) -> bool;
    fn place(&mut self, problem: &PlacementProblem) -> Result<PlacementPlan, PlacementError>;
}

/// The ILP's default node budget (`PlacementConfig::Ilp::node_limit`).
pub const ILP_NODE_LIMIT: u32 = 20_000;

/// `[placement]`: the policy registry. `strategies::placement::build` turns it into a
/// `Box<dyn Placement>`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum PlacementConfig {
    /// Model m to worker m mod N in first-seen order.
    #[default]
    RoundRobin,
    /// Every model on every worker, prompts split evenly, a barrier per model.
    DataParallel,
    /// The paper's ILP.
    Ilp {
        /// The solve's budget: branch-and-bound nodes, after which it returns its best plan and
        /// the gap to its bound. A count, not the clock (the former `time_limit_s`), so that the
        /// plan is the same on every machine at any load.
        #[serde(default = "default_node_limit")]
        node_limit: u32,
        /// K: at most this many distinct models per worker.
        #[serde(default = "default_k")]
        max_models_per_worker: u32,
        /// Add the valid bound C >= l_m + tau_m P_m / cap_m.
        #[serde(default = "default_true")]
        valid_bound: bool,
        /// Start from the LPT plan (so a solve cut by its node budget always has an incumbent).
        #[serde(default = "default_true")]
        warm_start: bool,
    },
    /// Longest processing time first: whole models, the heaviest to the least-loaded worker
    /// that hosts fewer than K models.
    Lpt {
        #[serde(default = "default_k")]
        max_models_per_worker: u32,
    },
}

fn default_node_limit() -> u32 {
    ILP_NODE_LIMIT
}
fn default_k() -> u32 {
    2
}
fn default_true() -> bool {
    true
}

impl PlacementConfig {
    /// The `kind` tag as written in scenario files.
    pub fn kind(&self) -> &'static str {
        match self {
            PlacementConfig::RoundRobin => "round_robin",
            PlacementConfig::DataParallel => "data_parallel",
            PlacementConfig::Ilp { .. } => "ilp",
            PlacementConfig::Lpt { .. } => "lpt",
        }
    }

    /// K when the policy has one.
    pub fn max_models_per_worker(&self) -> Option<u32> {
        match self {
            PlacementConfig::Ilp {
                max_models_per_worker,
                ..
            }
            | PlacementConfig::Lpt {
                max_models_per_worker,
            } => Some(*max_models_per_worker),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(prompts: u32, load: f64, tau: f64, cap: u32) -> ModelDemand {
        ModelDemand {
            name: format!("m{prompts}"),
            prompts,
            load_s: load,
            predicted_session_s: tau * f64::from(prompts),
            per_prompt_s: tau,
            replica_cap: cap,
        }
    }

    #[test]
    fn replica_cap_is_clamped() {
        assert_eq!(PlacementProblem::replica_cap(2000.0, 40.0, 4), 4);
        assert_eq!(PlacementProblem::replica_cap(100.0, 40.0, 4), 2);
        assert_eq!(PlacementProblem::replica_cap(10.0, 40.0, 4), 1);
    }

    #[test]
    fn infeasible_k_names_the_bound() {
        let problem = PlacementProblem {
            models: (1..=6).map(|p| model(p, 1.0, 1.0, 1)).collect(),
            n_workers: 4,
            max_models_per_worker: 1,
        };
        let err = problem.check_feasible().unwrap_err();
        assert!(err.to_string().contains("ceil(6/4) = 2"), "{err}");
    }

    #[test]
    fn plan_check_catches_missing_prompts_and_broken_caps() {
        let problem = PlacementProblem {
            models: vec![model(4, 1.0, 1.0, 1), model(2, 1.0, 1.0, 2)],
            n_workers: 2,
            max_models_per_worker: 1,
        };
        let good = PlacementPlan {
            workers: vec![
                vec![Session {
                    model: 0,
                    prompts: 4,
                }],
                vec![Session {
                    model: 1,
                    prompts: 2,
                }],
            ],
            barrier_per_round: false,
            solver: None,
        };
        good.check(&problem, true).unwrap();
        assert_eq!(problem.predicted_makespan_s(&good), 5.0);
        let mut short = good.clone();
        short.workers[1][0].prompts = 1;
        assert!(short.check(&problem, false).is_err());
        let mut split = good.clone();
        split.workers[0][0].prompts = 2;
        split.workers[1].push(Session {
            model: 0,
            prompts: 2,
        });
        split.check(&problem, false).unwrap();
        assert!(split.check(&problem, true).is_err());
    }

    #[test]
    fn placement_config_parses_every_kind() {
        let ilp: PlacementConfig =
            toml::from_str("kind = \"ilp\"\nmax_models_per_worker = 3").unwrap();
        assert_eq!(ilp.max_models_per_worker(), Some(3));
        assert_eq!(ilp.kind(), "ilp");
        for kind in ["round_robin", "data_parallel", "lpt"] {
            let c: PlacementConfig = toml::from_str(&format!("kind = \"{kind}\"")).unwrap();
            assert_eq!(c.kind(), kind);
        }
        assert!(toml::from_str::<PlacementConfig>("kind = \"ilp\"\nk = 3").is_err());
    }
}
