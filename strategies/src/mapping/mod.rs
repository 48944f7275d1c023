//! Expert-mapping strategies (gem.txt): which GPU hosts which expert of each MoE layer. One
//! file per policy, each an [`ExpertMapper`] built from its [`MapperConfig`] by [`build`].

use crate::batch::PolicyInfo;
use expertsim_serving::policies::mapping::{ExpertMapper, MapperConfig};

pub mod eplb;
pub mod gem;
pub mod linear;
pub mod round_robin;

/// The mapper a scenario's `[mapper]` table asks for.
pub fn build(config: &MapperConfig) -> Box<dyn ExpertMapper> {
    match config {
        MapperConfig::Linear => Box::new(linear::Linear),
        MapperConfig::RoundRobin => Box::new(round_robin::RoundRobin),
        MapperConfig::Eplb {
            redundant_slots,
            n_groups,
            n_nodes,
            ..
        } => Box::new(eplb::Eplb {
            redundant_slots: *redundant_slots,
            n_groups: *n_groups,
            n_nodes: *n_nodes,
        }),
        MapperConfig::Gem {
            restarts,
            noise,
            min_relative_drop,
            keep_linear_if_better,
            ..
        } => Box::new(gem::Gem {
            restarts: *restarts,
            noise: *noise,
            min_relative_drop: *min_relative_drop,
            keep_linear_if_better: *keep_linear_if_better,
        }),
    }
}

const fn mapping(kind: &'static str, description: &'static str) -> PolicyInfo {
    PolicyInfo {
        family: "mapping",
        kind,
        description,
    }
}

/// Every expert mapper.
pub fn catalogue() -> Vec<PolicyInfo> {
    vec![
        mapping(
            "linear",
            "vLLM default: contiguous blocks of experts by index (baseline)",
        ),
        mapping("round_robin", "expert e on GPU e mod G"),
        mapping(
            "eplb",
            "DeepSeek EPLB: balanced packing of summed window loads, `redundant_slots` replicas (default 0)",
        ),
        mapping(
            "gem",
            "GEM: variability-aware search over the trace window (K = 30 restarts, window 16)",
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use expertsim_serving::cost::curve::CostCurve;
    use expertsim_serving::policies::mapping::LayerProblem;
    use expertsim_serving::policies::mapping::gpu_costs::GpuCosts;
    use expertsim_serving::rng::stream;

    #[test]
    fn every_catalogued_kind_builds_and_keeps_equal_experts_per_gpu() {
        let curve = CostCurve::new(vec![(1.0, 100.0), (64.0, 100.0), (65.0, 200.0)]).unwrap();
        let costs = GpuCosts::scaled(&curve, &[0.88, 1.0, 1.0, 1.0], 1000);
        let window: Vec<f32> = (0..16 * 16).map(|i| ((i * 7919) % 97) as f32).collect();
        let problem = LayerProblem {
            layer: 0,
            n_experts: 16,
            window: &window,
            costs: &costs,
        };
        for info in catalogue() {
            assert_eq!(info.family, "mapping");
            let config: MapperConfig =
                serde_json::from_str(&format!("{{\"kind\": \"{}\"}}", info.kind)).unwrap();
            assert_eq!(config.kind(), info.kind);
            let mapping = build(&config).map_layer(&problem, &mut stream(1, "m"));
            mapping.check(16, 4).unwrap();
            assert!(mapping.slots.iter().all(|s| s.len() == 4), "{}", info.kind);
        }
        let eplb: MapperConfig =
            serde_json::from_str(r#"{"kind": "eplb", "redundant_slots": 4}"#).unwrap();
        let mapping = build(&eplb).map_layer(&problem, &mut stream(1, "m"));
        mapping.check(16, 4).unwrap();
        assert!(mapping.slots.iter().all(|s| s.len() == 5));
    }

    /// The paper's expected shape on its most favourable model: under one straggler GPU, GEM
    /// serves faster than EPLB, which serves faster than linear (Mixtral-8x22B, 300 requests,
    /// the serving simulator's GEM preset).
    #[test]
    fn gem_beats_eplb_beats_linear_on_mixtral_with_a_straggler() {
        let e2e = |mapper: serde_json::Value| {
            let scenario =
                serde_json::from_value::<expertsim_serving::serving_family::ServingConfig>(
                    serde_json::json!({
                        "model": {"name": "mixtral-8x22b"},
                        "replica": {
                            "gpu": "H200", "gpus": 4, "tensor_parallel": 4, "expert_parallel": 4,
                            "variability": {"setup": "high"}, "speed_factors_kind": "throughput",
                            "bandwidth_share": 0.0, "max_num_seqs": 1024,
                            "scheduler": {"kind": "sarathi", "chunk_size": 8192, "kv": "unbounded"},
                        },
                        "experts": {"mapping": mapper, "streams": "shared", "trace": {}},
                        "workload": {"n_requests": 300, "dataset": "sharegpt", "streams": "gem"},
                        "arrival": {"pattern": "offline"},
                    }),
                )
                .unwrap()
                .validate(std::path::Path::new("."), &mut Default::default())
                .unwrap();
            let mut mapper = build(&scenario.expert_mapping);
            expertsim_serving::serving_family::run_recorded(
                &scenario,
                5,
                crate::queue::build(&expertsim_serving::serving::QueuePolicyConfig::Fcfs).as_mut(),
                crate::routing::build(&expertsim_serving::serving::RouterConfig::RoundRobin)
                    .as_mut(),
                mapper.as_mut(),
                &mut [],
                None,
                &mut expertsim_serving::records::DiscardRecords,
                None,
            )
            .unwrap()
            .scalar("e2e_mean_ms")
            .unwrap()
        };
        let linear = e2e(serde_json::json!({"kind": "linear"}));
        let eplb = e2e(serde_json::json!({"kind": "eplb"}));
        let gem = e2e(serde_json::json!({"kind": "gem", "restarts": 8}));
        assert!(
            gem < eplb && eplb < linear,
            "gem {gem}, eplb {eplb}, linear {linear}"
        );
        assert!(gem < 0.98 * linear, "gem {gem} vs linear {linear}");
    }
}
