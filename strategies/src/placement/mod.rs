//! MOSAIC expert-placement policies: which worker loads which expert LLM and how many of its
//! prompts each replica generates. One file per policy, each a [`Placement`] built from its
//! [`PlacementConfig`] variant by [`build`]: the paper's round-robin and data-parallel
//! baselines, its ILP, and an LPT heuristic as the baseline the ILP must beat.

use crate::batch::PolicyInfo;
use expertsim_serving::policies::placement::{Placement, PlacementConfig};

pub mod data_parallel;
pub mod ilp;
pub mod lpt;
pub mod round_robin;

#[cfg(test)]
mod brute_force;

/// The policy a scenario's `[placement]` table asks for.
pub fn build(config: &PlacementConfig) -> Box<dyn Placement> {
    match config {
        PlacementConfig::RoundRobin => Box::new(round_robin::RoundRobin),
        PlacementConfig::DataParallel => Box::new(data_parallel::DataParallel),
        PlacementConfig::Ilp {
            node_limit,
            valid_bound,
            warm_start,
            ..
        } => Box::new(ilp::Ilp {
            node_limit: *node_limit,
            valid_bound: *valid_bound,
            warm_start: *warm_start,
        }),
        PlacementConfig::Lpt { .. } => Box::new(lpt::Lpt),
    }
}

const fn placement(kind: &'static str, description: &'static str) -> PolicyInfo {
    PolicyInfo {
        family: "placement",
        kind,
        description,
    }
}

/// Every placement policy.
pub fn catalogue() -> Vec<PolicyInfo> {
    vec![
        placement(
            "round_robin",
            "model m to worker m mod N in first-seen order, one load per model (baseline)",
        ),
        placement(
            "data_parallel",
            "every model on every worker, prompts split evenly, a barrier per model (baseline)",
        ),
        placement(
            "ilp",
            "MOSAIC's MILP: replicas and integer prompt splits minimising the makespan (K, caps)",
        ),
        placement(
            "lpt",
            "longest processing time first: whole models to the least-loaded worker under K",
        ),
    ]
}

#[cfg(test)]
pub(crate) mod testutil {
    use expertsim_serving::policies::placement::{ModelDemand, PlacementProblem};

    /// A problem from (prompts, load_s, per_prompt_s, cap) rows.
    pub fn problem(rows: &[(u32, f64, f64, u32)], n: u32, k: u32) -> PlacementProblem {
        PlacementProblem {
            models: rows
                .iter()
                .enumerate()
                .map(|(i, &(p, l, tau, cap))| ModelDemand {
                    name: format!("m{i}"),
                    prompts: p,
                    load_s: l,
                    predicted_session_s: tau * f64::from(p),
                    per_prompt_s: tau,
                    replica_cap: cap,
                })
                .collect(),
            n_workers: n,
            max_models_per_worker: k,
        }
    }

    /// The paper's instance shape: two heavy reasoning experts, four light ones, N = 4, K = 2
    /// (MMLU-Pro slot counts, ~40 s loads, per-prompt costs of the order the calibration gives).
    pub fn paper_instance() -> PlacementProblem {
        let rows = [
            (1632, 46.2, 0.25, 1),
            (1428, 38.0, 2.0, 4),
            (956, 38.0, 0.1, 1),
            (1070, 40.1, 1.8, 4),
            (547, 39.0, 0.12, 1),
            (667, 47.0, 0.12, 1),
        ];
        problem(&rows, 4, 2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_matches_the_kind_and_catalogue_lists_every_kind() {
        let configs = [
            PlacementConfig::RoundRobin,
            PlacementConfig::DataParallel,
            PlacementConfig::Ilp {
                node_limit: 1,
                max_models_per_worker: 2,
                valid_bound: true,
                warm_start: true,
            },
            PlacementConfig::Lpt {
                max_models_per_worker: 2,
            },
        ];
        let kinds: Vec<_> = catalogue().iter().map(|p| p.kind).collect();
        for config in configs {
            assert_eq!(build(&config).name(), config.kind());
            assert!(kinds.contains(&config.kind()));
        }
        assert!(catalogue().iter().all(|p| p.family == "placement"));
    }

    #[test]
    fn every_policy_places_every_prompt_exactly_once() {
        let problem = testutil::paper_instance();
        for kind in ["round_robin", "data_parallel", "ilp", "lpt"] {
            let config: PlacementConfig = toml_config(kind);
            let mut policy = build(&config);
            let plan = policy.place(&problem).unwrap();
            plan.check(&problem, policy.respects_limits())
                .unwrap_or_else(|e| panic!("{kind}: {e}"));
        }
    }

    /// The ILP's budget is validated where the file writes it; the wall-clock key it replaced
    /// is refused naming the new one.
    #[test]
    fn the_node_budget_is_refused_at_its_file_line_and_field() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/mosaic/gate.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let line = 1 + text
            .lines()
            .position(|l| l == "policy = { kind = \"ilp\" }")
            .expect("gate.toml places with the ILP");
        let refused = |policy: &str| {
            let text = text.replacen("policy = { kind = \"ilp\" }", policy, 1);
            match expertsim_scenario::scenario::load_str(&path, &text, &[]) {
                Err(e) => e.to_string(),
                Ok(_) => panic!("{policy} was accepted"),
            }
        };
        let at = format!("gate.toml:{line}:");
        let err = refused("policy = { kind = \"ilp\", node_limit = 0 }");
        assert!(err.contains(&at), "{err}");
        assert!(err.contains("field `placement.policy.node_limit`"), "{err}");
        assert!(err.contains("must be at least 1"), "{err}");
        let err = refused("policy = { kind = \"ilp\", time_limit_s = 10 }");
        assert!(err.contains(&at), "{err}");
        assert!(err.contains("field `placement.policy`"), "{err}");
        assert!(err.contains("unknown field `time_limit_s`"), "{err}");
        assert!(err.contains("`node_limit`"), "{err}");
        let budget = "policy = { kind = \"ilp\", node_limit = 500 }";
        let plan = expertsim_scenario::scenario::load_str(
            &path,
            &text.replacen("policy = { kind = \"ilp\" }", budget, 1),
            &[],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let scenario = format!("{:?}", plan.cells[0].scenario);
        assert!(scenario.contains("node_limit: 500"), "{scenario}");
    }

    fn toml_config(kind: &str) -> PlacementConfig {
        match kind {
            "round_robin" => PlacementConfig::RoundRobin,
            "data_parallel" => PlacementConfig::DataParallel,
            "ilp" => PlacementConfig::Ilp {
                node_limit: 20_000,
                max_models_per_worker: 2,
                valid_bound: true,
                warm_start: true,
            },
            _ => PlacementConfig::Lpt {
                max_models_per_worker: 2,
            },
        }
    }
}

/// Whole runs of MOSAIC's evaluation cells on the serving simulator
/// (scenarios/mosaic/evaluation.toml) with the real policies.
#[cfg(test)]
mod simulated {
    use expertsim_serving::metrics::RunOutput;
    use std::path::Path;

    /// Seed `seed` of the cell of `dataset`'s evaluation file under placement policy `kind`
    /// (the gate's tau at 1: the expert stage does not depend on it).
    fn run(dataset: &str, kind: &str, seed: u64) -> RunOutput {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/mosaic/evaluation.toml");
        let plan = expertsim_scenario::scenario::load(&path, &[]).unwrap_or_else(|e| panic!("{e}"));
        let at = |cell: &expertsim_scenario::scenario::Cell, key: &str| {
            cell.coords
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        };
        let cell = plan
            .cells
            .iter()
            .find(|c| {
                at(c, "workload.questions.dataset").and_then(|v| v.as_str().map(String::from))
                    == Some(dataset.to_string())
                    && at(c, "placement.policy.kind").and_then(|v| v.as_str().map(String::from))
                        == Some(kind.to_string())
                    && at(c, "workload.questions.gate.tau").and_then(|v| v.as_float()) == Some(1.0)
            })
            .unwrap_or_else(|| panic!("{dataset}: no {kind} cell at tau 1"));
        expertsim_scenario::runner::run_cell(&cell.scenario, seed, &crate::Registry, None, None)
            .unwrap_or_else(|e| panic!("{e}"))
            .output
    }

    #[test]
    fn the_ilp_beats_round_robin_and_replicates_the_reasoning_experts() {
        // The paper's claim is that the ILP beats round-robin on every benchmark; on MMLU-Pro
        // by more than 10 %. GPQA's gain is the smaller one (its LlamaR1 session is dominated
        // by its longest traces), so there only the direction is asserted.
        for (dataset, at_most) in [("mmlu_pro", 0.9), ("gpqa", 1.0)] {
            let makespan = |out: &RunOutput| out.scalar("expert_makespan_s").unwrap();
            let rr = makespan(&run(dataset, "round_robin", 0));
            let out = run(dataset, "ilp", 0);
            let ilp = makespan(&out);
            assert!(ilp < at_most * rr, "{dataset}: ILP {ilp} vs RR {rr}");
            let placement = &out.details["placement"];
            let llama_r1_workers = placement["plan"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|w| {
                    w.as_array().unwrap().iter().any(|s| {
                        s["model"]
                            .as_str()
                            .is_some_and(|m| m.to_lowercase().contains("r1-distill-llama"))
                    })
                })
                .count();
            assert!(llama_r1_workers >= 2, "{dataset}: {}", placement["plan"]);
            assert_eq!(placement["solver"]["status"], "optimal");
        }
    }

    #[test]
    fn ilp_runs_are_byte_identical() {
        let once = || serde_json::to_string(&run("gpqa", "ilp", 1)).unwrap();
        assert_eq!(once(), once());
    }
}
