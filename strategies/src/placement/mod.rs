//! MOSAIC expert-placement policies: which worker loads which expert LLM and how many of its
//! prompts each replica generates. One file per policy, each a [`Placement`] built from its
//! [`PlacementConfig`] variant by [`build`]: the paper's round-robin and data-parallel
//! baselines, its ILP, and an LPT heuristic as the baseline the ILP must beat.

use crate::batch::PolicyInfo;
use sim::policies::placement::{Placement, PlacementConfig};

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
            time_limit_s,
            valid_bound,
            warm_start,
            ..
        } => Box::new(ilp::Ilp {
            time_limit_s: *time_limit_s,
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
    use sim::policies::placement::{ModelDemand, PlacementProblem};

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
                time_limit_s: 1.0,
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

    fn toml_config(kind: &str) -> PlacementConfig {
        match kind {
            "round_robin" => PlacementConfig::RoundRobin,
            "data_parallel" => PlacementConfig::DataParallel,
            "ilp" => PlacementConfig::Ilp {
                time_limit_s: 10.0,
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

/// Whole runs through `sim::mosaic::simulate` with the real policies.
#[cfg(test)]
mod simulated {
    use super::*;
    use sim::mosaic::config::{
        AggregatorFile, CalibrationFile, ClusterFile, DatasetFile, OutputFile, PoolFile,
        ServingFile,
    };
    use sim::mosaic::{MosaicConfig, MosaicScenario, simulate};
    use sim::policies::gate::GateConfig;
    use std::path::Path;

    fn scenario(dataset: &str, placement: PlacementConfig) -> MosaicScenario {
        MosaicConfig {
            serving: ServingFile::default(),
            cluster: ClusterFile { n_workers: 4 },
            pool: Some(PoolFile {
                preset: "hybrid".into(),
            }),
            experts: vec![],
            aggregator: AggregatorFile::default(),
            dataset: DatasetFile {
                preset: Some(dataset.into()),
                name: None,
                questions: None,
                slots: None,
                calibration_questions: None,
                prompt_tokens_mean: None,
                prompt_tokens_sigma: 0.3,
                buckets: None,
                reasoning_output_scale: 1.0,
                instruction_output_scale: 1.0,
            },
            calibration: CalibrationFile {
                sweep_max_prompts: 256,
                ..CalibrationFile::default()
            },
            placement,
            gate: GateConfig::Threshold { tau: 1.0 },
            output: OutputFile::default(),
        }
        .validate(Path::new("."), &mut Default::default())
        .unwrap()
    }

    fn makespan(dataset: &str, config: PlacementConfig) -> (f64, serde_json::Value) {
        let s = scenario(dataset, config);
        let mut placement = build(&s.placement);
        let mut gate = crate::gating::build(&s.gate);
        let mut fcfs = crate::queue::build(&sim::serving::QueuePolicyConfig::Fcfs);
        let out = simulate(&s, 0, placement.as_mut(), gate.as_mut(), fcfs.as_mut());
        (out.scalar("expert_makespan_s").unwrap(), out.details)
    }

    #[test]
    fn the_ilp_beats_round_robin_and_replicates_the_reasoning_experts() {
        // The paper's claim is that the ILP beats round-robin on every benchmark; on MMLU-Pro
        // by more than 10 %. GPQA's gain is the smaller one (its LlamaR1 session is dominated
        // by its longest traces, and round-robin's one large session per reasoning model is
        // rarely preempted under vLLM's watermark: docs/reproduction.md, ilp-expert-stage), so
        // there only the direction is asserted.
        for (dataset, at_most) in [("mmlu_pro", 0.9), ("gpqa", 1.0)] {
            let (rr, _) = makespan(dataset, PlacementConfig::RoundRobin);
            let (ilp, details) = makespan(
                dataset,
                PlacementConfig::Ilp {
                    time_limit_s: 10.0,
                    max_models_per_worker: 2,
                    valid_bound: true,
                    warm_start: true,
                },
            );
            assert!(ilp < at_most * rr, "{dataset}: ILP {ilp} vs RR {rr}");
            let llama_r1_workers = details["plan"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|w| {
                    w.as_array()
                        .unwrap()
                        .iter()
                        .any(|s| s["model"] == "LlamaR1")
                })
                .count();
            assert!(llama_r1_workers >= 2, "{dataset}: {}", details["plan"]);
            assert_eq!(details["solver"]["status"], "optimal");
        }
    }

    #[test]
    fn ilp_runs_are_byte_identical() {
        let ilp = PlacementConfig::Ilp {
            time_limit_s: 10.0,
            max_models_per_worker: 2,
            valid_bound: true,
            warm_start: true,
        };
        let s = scenario("gpqa", ilp);
        let run = || {
            let mut placement = build(&s.placement);
            let mut gate = crate::gating::build(&s.gate);
            let mut fcfs = crate::queue::build(&sim::serving::QueuePolicyConfig::Fcfs);
            let out = simulate(&s, 3, placement.as_mut(), gate.as_mut(), fcfs.as_mut());
            serde_json::to_string(&out).unwrap()
        };
        assert_eq!(run(), run());
    }
}
