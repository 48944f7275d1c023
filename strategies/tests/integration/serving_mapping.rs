//! The serving family's expert mappings end to end (docs/serving-family.md, "Expert mapping"):
//! a mapper that reads the observed loads places the hot experts apart, and the step cost,
//! which prices each layer by its most loaded GPU, rewards it.

use expertsim_serving::load_cache::LoadCache;
use expertsim_serving::records::DiscardRecords;
use expertsim_serving::serving::{QueuePolicyConfig, RouterConfig};
use expertsim_serving::serving_family::{ServingConfig, run_recorded};
use serde_json::json;
use std::path::Path;

/// Mean step time of Mixtral-8x7B on 4 H100s (EP 4: two experts per GPU), one topic whose
/// Zipf(1.5) popularity sends 0.52 (capped at 0.5) and 0.18 of the assignments to its two
/// hottest experts of each layer, under `mapping`.
fn mean_step_ms(mapping: serde_json::Value) -> f64 {
    let scenario = serde_json::from_value::<ServingConfig>(json!({
        "model": {"name": "mixtral-8x7b"},
        "replica": {"gpus": 4, "tensor_parallel": 4, "expert_parallel": 4},
        "experts": {"routing": {"kind": "zipf", "exponent": 1.5}, "mapping": mapping},
        "workload": {"n_requests": 300,
                     "prompt_tokens": {"kind": "uniform", "low": 256, "high": 1024},
                     "output_tokens": {"kind": "uniform", "low": 16, "high": 64}},
        "arrival": {"pattern": "poisson", "rate_per_s": 20.0},
    }))
    .unwrap()
    .validate(Path::new("."), &mut LoadCache::default())
    .unwrap();
    let mut mapper = strategies::mapping::build(&scenario.expert_mapping);
    let out = run_recorded(
        &scenario,
        11,
        strategies::queue::build(&QueuePolicyConfig::Fcfs).as_mut(),
        strategies::routing::build(&RouterConfig::RoundRobin).as_mut(),
        mapper.as_mut(),
        &mut [],
        None,
        &mut DiscardRecords,
        None,
    )
    .unwrap();
    assert!(out.details.get("failed").is_none(), "{}", out.details);
    out.scalar("mean_step_ms").unwrap()
}

#[test]
fn load_aware_mappings_shorten_the_steps_of_a_skewed_layer() {
    // Linear pairs experts 2g and 2g + 1 whatever their popularity: in about 1 layer in 7 the
    // two hottest share a GPU, which then computes 0.68 of the layer's assignments instead of
    // at most 0.5. EPLB (balanced packing of the observed loads) and GEM (its score is the
    // slowest GPU) separate them: each must lower the mean step below linear's. (EPLB's
    // redundant slots need not: a copy is one more expert's weights for a GPU to stream in the
    // memory-bound decode steps.)
    let linear = mean_step_ms(json!({"kind": "linear"}));
    for mapping in [
        json!({"kind": "eplb"}),
        json!({"kind": "gem", "restarts": 4}),
    ] {
        let mapped = mean_step_ms(mapping.clone());
        assert!(
            mapped < linear,
            "{mapping}: {mapped} ms vs linear {linear} ms"
        );
    }
}

/// Mean expert-load imbalance of the batches of Qwen1.5-MoE-A2.7B (60 experts, top-4) on one
/// L4 (CAPS's setting), 16 topics of Zipf(1.0) popularity, 400 requests at once, static batches
/// of 8 from the 32 oldest chosen by `selector` on the dry-run's `loads`.
fn batch_imbalance(selector: &str, loads: &str) -> f64 {
    let scenario = serde_json::from_value::<ServingConfig>(json!({
        "model": {"name": "qwen1.5-moe-a2.7b-nf4"},
        "replica": {
            "gpu": "L4",
            "max_num_seqs": 8,
            "scheduler": {"kind": "static", "window_size": 32, "min_batch_trigger": 16,
                          "loads": loads},
            "batch_former": {"kind": selector},
        },
        "experts": {"routing": {"kind": "zipf", "exponent": 1.0}},
        "workload": {"n_requests": 400, "n_topics": 16,
                     "prompt_tokens": {"kind": "fixed", "value": 128},
                     "output_tokens": {"kind": "fixed", "value": 1}},
        "arrival": {"pattern": "offline"},
    }))
    .unwrap()
    .validate(Path::new("."), &mut LoadCache::default())
    .unwrap();
    let mut selectors = vec![strategies::batch::build(&scenario.replica.batch_former)];
    let out = run_recorded(
        &scenario,
        5,
        strategies::queue::build(&QueuePolicyConfig::Fcfs).as_mut(),
        strategies::routing::build(&RouterConfig::RoundRobin).as_mut(),
        strategies::mapping::build(&expertsim_serving::policies::mapping::MapperConfig::Linear)
            .as_mut(),
        &mut selectors,
        None,
        &mut DiscardRecords,
        None,
    )
    .unwrap();
    assert!(out.details.get("failed").is_none(), "{}", out.details);
    out.scalar("imbalance").unwrap()
}

#[test]
fn per_expert_loads_let_a_balancing_selector_balance_one_gpus_batches() {
    // On one GPU the per-GPU load vector is one entry per layer, the same for every 128-token
    // prompt: greedy_variance sees no difference between candidates and takes FCFS's batches.
    // With per-expert loads (CAPS's vector) it mixes topics whose hot experts differ, and the
    // batches' measured imbalance (routed tokens, max/mean per layer) falls below FCFS's.
    let fcfs = batch_imbalance("fcfs", "gpus");
    assert_eq!(batch_imbalance("greedy_variance", "gpus"), fcfs);
    let balanced = batch_imbalance("greedy_variance", "experts");
    assert!(
        balanced < 0.95 * fcfs,
        "greedy_variance {balanced} vs fcfs {fcfs}"
    );
}
