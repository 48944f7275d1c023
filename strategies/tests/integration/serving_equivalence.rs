//! The general `serving` family is the paper families' superset, not a fork: CAPS, whose own
//! server is gone, runs as the serving family's preset (its pricings, metrics and refusals
//! here). GEM's server is gone too (docs/unified-model-changes/gem-preset.md); its mapping's
//! equivalence was checked against it while both existed.

use expertsim_serving::load_cache::LoadCache;
use expertsim_serving::recorder::ServingSummary;
use expertsim_serving::recorder::replica::step_of;
use expertsim_serving::records::{RecordSink, RequestRecord};
use expertsim_serving::serving::{QueuePolicyConfig, RouterConfig};
use expertsim_serving::serving_family::deployment::Deployment;
use expertsim_serving::serving_family::mapping;
use expertsim_serving::serving_family::server::ServingServer;
use expertsim_serving::serving_family::{ServingConfig, ServingScenario};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;

/// Finish time of each request (a static batch's requests all finish at its end), and the
/// step (batch) its record names.
#[derive(Default)]
struct Finishes(BTreeMap<u64, u64>, Vec<(u64, u64)>);

impl RecordSink for Finishes {
    fn record(&mut self, r: &RequestRecord<'_>) {
        self.0.insert(r.id, r.finish.0);
        self.1.push((r.id, step_of(r)));
    }
}

/// Serves `scenario` (one replica, linear layout, FCFS queue, round-robin router) at `seed`:
/// every request's finish time and step, and the run's summary.
fn serve_and_summarise(scenario: &ServingScenario, seed: u64) -> (Finishes, ServingSummary) {
    let deployment = Deployment::new(scenario, None).expect("the model fits an L4");
    let mut queue = strategies::queue::build(&QueuePolicyConfig::Fcfs);
    let mut router = strategies::routing::build(&RouterConfig::RoundRobin);
    let mut linear =
        strategies::mapping::build(&expertsim_serving::policies::mapping::MapperConfig::Linear);
    let mut selectors = vec![strategies::batch::build(&scenario.replica.batch_former)];
    let layouts = mapping::replica_layouts(
        scenario,
        std::slice::from_ref(&deployment),
        seed,
        linear.as_mut(),
        &mut selectors,
        queue.as_mut(),
        router.as_mut(),
    );
    let mut finishes = Finishes::default();
    let mut server = ServingServer::new(
        scenario,
        std::slice::from_ref(&deployment),
        None,
        seed,
        &layouts,
        &mut selectors,
        queue.as_mut(),
        router.as_mut(),
        &mut finishes,
    );
    expertsim_serving::engine::run(&mut server);
    let (summary, _) = server.finish().expect("the run's checks pass");
    (finishes, summary)
}

/// Request ids batch by batch, batches in the order they ran, from each request's batch key.
fn batches(keys: impl IntoIterator<Item = (u64, u64)>) -> Vec<Vec<u64>> {
    let mut by_key: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for (id, key) in keys {
        by_key.entry(key).or_default().push(id);
    }
    by_key
        .into_values()
        .map(|mut ids| {
            ids.sort_unstable();
            ids
        })
        .collect()
}

fn serving(config: serde_json::Value) -> ServingScenario {
    serde_json::from_value::<ServingConfig>(config)
        .expect("the test's serving scenario parses")
        .validate(Path::new("."), &mut LoadCache::default())
        .expect("the test's serving scenario is valid")
}

/// The CAPS preset at 300 Poisson requests at 250/s (Qwen1.5-MoE nf4, 16 topics, log-normal
/// prompts and outputs from one stream, affinity routing) on one L4 of `max_num_seqs = 8`, its
/// static `scheduler` and `selector` as the batch former.
fn caps_preset(selector: &str, scheduler: serde_json::Value) -> ServingScenario {
    serving(json!({
        "model": {"name": "qwen1.5-moe-a2.7b-nf4"},
        "replica": {"gpu": "L4", "max_num_seqs": 8, "scheduler": scheduler,
                    "batch_former": {"kind": selector}},
        "experts": {"routing": {"kind": "affinity", "concentration": 0.3, "purity": 0.8}},
        "workload": {"n_requests": 300, "n_topics": 16, "one_token_stream": true,
                     "prompt_tokens": {"kind": "log_normal", "median": 128, "sigma": 0.6,
                                       "max": 2048},
                     "output_tokens": {"kind": "log_normal", "median": 4, "sigma": 0.5,
                                       "max": 16}},
        "arrival": {"pattern": "poisson", "rate_per_s": 250},
    }))
}

/// The CAPS preset's pricings and metrics (the old caps family's execution models, whose
/// server this preset replaced with equal results: docs/unified-model-changes/caps-preset.md):
/// for each of `expected_routing`, `cv`, `straggler`, `constant` and `exponential` with a
/// selector, the requests of a batch finish together and their records name the same step;
/// batches hold at most 8 and some fewer; the imbalance factor is 1 + load CV except under
/// `cv`, whose derived sensitivity (below 1 on the L4) weighs the CV; requests waited; and a
/// second run of the seed finishes every request at the same nanosecond.
#[test]
fn the_caps_preset_prices_batches_and_reports_caps_metrics() {
    let cases = [
        ("expected_routing", json!({}), "greedy_variance"),
        ("cv", json!({}), "greedy_dot_product"),
        ("straggler", json!({}), "power_of_d"),
        ("constant", json!({"service_ms": 30.0}), "random"),
        ("exponential", json!({"service_ms": 30.0}), "fcfs"),
    ];
    for (seed, (pricing, keys, selector)) in [3u64, 11, 42, 5, 7].into_iter().zip(cases) {
        let mut scheduler = json!({"kind": "static", "loads": "experts", "pricing": pricing,
                                   "streams": "shared"});
        for (key, value) in keys.as_object().expect("keys") {
            scheduler[key] = value.clone();
        }
        let scenario = caps_preset(selector, scheduler);
        let (finishes, summary) = serve_and_summarise(&scenario, seed);
        let case = format!("{pricing}, {selector}, seed {seed}");
        assert_eq!(finishes.0.len(), 300, "{case}");
        let by_finish = batches(finishes.0.iter().map(|(&id, &t)| (id, t)));
        assert_eq!(
            by_finish,
            batches(finishes.1.clone()),
            "{case}: step = batch"
        );
        assert!(by_finish.iter().all(|b| b.len() <= 8), "{case}");
        assert!(by_finish.len() > 300 / 8 && by_finish.len() < 300, "{case}");
        let load = summary.expert_load;
        let factor = load.imbalance_factor();
        assert!(load.imbalance() > 1.0, "{case}: imbalance");
        if pricing == "cv" {
            assert!(
                factor > 1.0 && factor - 1.0 < load.load_cv(),
                "{case}: {factor}"
            );
        } else {
            assert_eq!(factor, 1.0 + load.load_cv(), "{case}");
        }
        assert!(summary.queue_depth_mean > 0.0, "{case}");
        let (again, _) = serve_and_summarise(&scenario, seed);
        assert_eq!(again.0, finishes.0, "{case}: deterministic");
    }
}

/// `pricing = "expected_routing"` sums per-expert load vectors on one GPU: without
/// `loads = "experts"`, on a dense model or on two GPUs it is refused naming the key.
#[test]
fn expected_routing_pricing_is_refused_where_it_cannot_price() {
    let refusal = |model: &str, gpus: usize, loads: &str| {
        let config = serde_json::from_value::<ServingConfig>(json!({
            "model": {"name": model},
            "replica": {
                "gpu": "H100-SXM", "gpus": gpus, "expert_parallel": gpus, "max_num_seqs": 8,
                "scheduler": {"kind": "static", "loads": loads, "pricing": "expected_routing"},
            },
            "workload": {"n_requests": 10,
                         "prompt_tokens": {"kind": "fixed", "value": 16},
                         "output_tokens": {"kind": "fixed", "value": 1}},
            "arrival": {"pattern": "offline"},
        }))
        .expect("the scenario parses");
        config
            .validate(Path::new("."), &mut LoadCache::default())
            .err()
            .map(|e| (e.path, e.message))
    };
    let qwen = "qwen1.5-moe-a2.7b";
    assert_eq!(
        refusal(qwen, 1, "experts"),
        None,
        "the one setting it prices"
    );
    for (model, gpus, loads, why) in [
        (qwen, 1, "gpus", "loads = \"experts\""),
        (qwen, 2, "experts", "gpus = 1"),
        ("llama-2-7b", 1, "experts", "an MoE model"),
    ] {
        let (field, message) = refusal(model, gpus, loads).expect("refused");
        assert_eq!(field, "replica.scheduler.pricing", "{message}");
        assert!(message.contains(why), "{message}");
    }
}

/// The keys beside `pricing` are refused where they do not apply or are missing, naming the key:
/// `sensitivity` belongs to `cv`, `service_ms` to the queueing references (and is required
/// there), `streams = "shared"` to a cluster of one replica; `cv` and `straggler` need what
/// `expected_routing` needs.
#[test]
fn the_static_pricing_keys_are_refused_where_they_do_not_apply() {
    let refusal = |scheduler: serde_json::Value, count: usize| {
        let mut table = json!({"kind": "static", "loads": "experts"});
        for (key, value) in scheduler.as_object().expect("keys") {
            table[key] = value.clone();
        }
        serde_json::from_value::<ServingConfig>(json!({
            "model": {"name": "qwen1.5-moe-a2.7b"},
            "replica": {"gpu": "H100-SXM", "count": count, "max_num_seqs": 8,
                        "scheduler": table},
            "workload": {"n_requests": 10,
                         "prompt_tokens": {"kind": "fixed", "value": 16},
                         "output_tokens": {"kind": "fixed", "value": 1}},
            "arrival": {"pattern": "offline"},
        }))
        .expect("the scenario parses")
        .validate(Path::new("."), &mut LoadCache::default())
        .err()
        .map(|e| (e.path, e.message))
    };
    for accepted in [
        json!({"pricing": "cv"}),
        json!({"pricing": "cv", "sensitivity": 0.5}),
        json!({"pricing": "straggler", "streams": "shared"}),
        json!({"pricing": "exponential", "service_ms": 20.0}),
    ] {
        assert_eq!(refusal(accepted.clone(), 1), None, "{accepted}");
    }
    for (scheduler, count, field, why) in [
        (
            json!({"pricing": "straggler", "sensitivity": 0.5}),
            1,
            "sensitivity",
            "does not apply",
        ),
        (
            json!({"pricing": "cv", "sensitivity": -1.0}),
            1,
            "sensitivity",
            ">= 0",
        ),
        (
            json!({"pricing": "constant"}),
            1,
            "service_ms",
            "is required",
        ),
        (
            json!({"pricing": "cv", "service_ms": 5.0}),
            1,
            "service_ms",
            "does not apply",
        ),
        (
            json!({"pricing": "cv", "loads": "gpus"}),
            1,
            "pricing",
            "loads = \"experts\"",
        ),
        (
            json!({"streams": "shared"}),
            2,
            "streams",
            "the cluster has 2",
        ),
    ] {
        let (path, message) = refusal(scheduler.clone(), count).expect("refused");
        assert_eq!(
            path,
            format!("replica.scheduler.{field}"),
            "{scheduler}: {message}"
        );
        assert!(message.contains(why), "{scheduler}: {message}");
    }
}
