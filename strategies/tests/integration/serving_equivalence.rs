//! The general `serving` family is the paper families' superset, not a fork: each paper's
//! headline scenario re-expressed in the serving family gives the same decisions where the
//! mechanisms coincide (issue 19; docs/serving-family.md, "Equivalence with the paper
//! families"). One test per family whose policy the serving family takes: CAPS (batch
//! selection) and GEM (expert mapping).

use serde_json::json;
use sim::caps::workload::{MoeRequest, RequestModel, RequestStreams};
use sim::load_cache::LoadCache;
use sim::recorder::ServingSummary;
use sim::records::{RecordSink, RequestRecord};
use sim::rng::{SimRng, stream};
use sim::serving::{QueuePolicyConfig, RouterConfig};
use sim::serving_family::batch_former::{BoxedDryRun, ServingCandidate};
use sim::serving_family::deployment::Deployment;
use sim::serving_family::mapping::{self, ExpertLayout};
use sim::serving_family::selector_former::DryRun;
use sim::serving_family::server::ServingServer;
use sim::serving_family::{ServingConfig, ServingScenario};
use std::collections::BTreeMap;
use std::path::Path;

/// The caps family's router dry-run as the serving family's: request `id` is the caps family's
/// request `id` (made in arrival order from the caps streams), routed by the caps request model
/// when it enters the window, as the caps family's former routes it.
struct CapsLoads {
    model: RequestModel,
    requests: Vec<MoeRequest>,
    prediction: SimRng,
}

impl DryRun for CapsLoads {
    type Request = ServingCandidate;
    fn dims(&self) -> usize {
        self.model.affinities.dims()
    }
    fn route(&mut self, request: &mut ServingCandidate, mut buffer: Vec<f32>) {
        let caps = &mut self.requests[request.id as usize];
        self.model.route(caps, &mut self.prediction, Vec::new());
        buffer.clear();
        buffer.extend_from_slice(caps.predicted());
        request.load = buffer;
    }
}

/// Finish time of each request (a static batch's requests all finish at its end).
#[derive(Default)]
struct Finishes(BTreeMap<u64, u64>);

impl RecordSink for Finishes {
    fn record(&mut self, r: &RequestRecord<'_>) {
        self.0.insert(r.id, r.finish.0);
    }
}

/// Serves `scenario` (one replica, linear layout, FCFS queue, round-robin router) at `seed`,
/// the replica's dry-run replaced by `dry_run` when given; every request's finish time.
fn serve_on_one_replica(
    scenario: &ServingScenario,
    seed: u64,
    dry_run: Option<BoxedDryRun<'_>>,
) -> Finishes {
    serve_and_summarise(scenario, seed, dry_run).0
}

/// As `serve_on_one_replica`, with the run's summary.
fn serve_and_summarise(
    scenario: &ServingScenario,
    seed: u64,
    dry_run: Option<BoxedDryRun<'_>>,
) -> (Finishes, ServingSummary) {
    let deployment = Deployment::new(scenario, None).expect("the model fits an L4");
    let mut queue = strategies::queue::build(&QueuePolicyConfig::Fcfs);
    let mut router = strategies::routing::build(&RouterConfig::RoundRobin);
    let mut linear = strategies::mapping::build(&sim::policies::mapping::MapperConfig::Linear);
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
    if let Some(dry_run) = dry_run {
        server = server.with_dry_run(0, dry_run);
    }
    sim::engine::run(&mut server);
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

/// CAPS's headline setting (scenarios/caps/headlines.toml: Qwen1.5-MoE-A2.7B in nf4 on one L4,
/// `greedy_variance`, batches of at most 8 from the 32 oldest, a batch once 16 wait) with all
/// 400 requests arriving at once (offline), so that which requests form which batch depends
/// only on their order and their load vectors, not on how long a batch takes.
///
/// Coincide: the batch former (serving_family::selector_former::SelectorFormer: window, oldest-first seeding, the
/// selector), the static batch on serving::Replica, the dispatch rule (trigger, tick grid), the
/// requests (ids in arrival order) and their router dry-run (the caps request model, injected
/// as the static replica's dry-run). Differ, and do not enter the decisions here: the batch
/// durations (the caps execution model vs the serving family's roofline and layout) and the
/// token counts each family draws (the serving family's come from its own length streams).
/// The serving family's own dry-run (per-GPU loads on the layout) is not the caps one: with the
/// same requests it would choose other batches, by design.
#[test]
fn caps_batches_are_the_same_in_the_serving_family() {
    let seed = 42;
    let caps = serde_json::from_value::<sim::caps::CapsConfig>(json!({
        "model": {"preset": "qwen1.5-moe-a2.7b-nf4"},
        "workload": {"n_requests": 400, "output_tokens": {"median": 4, "sigma": 0.5, "max": 16}},
        "arrival": {"pattern": "offline"},
        "scheduler": {"selector": {"kind": "greedy_variance"}},
        "execution": {"model": "grouped", "gpu": "L4"},
    }))
    .expect("the caps scenario parses")
    .validate(Path::new("."), &mut LoadCache::default())
    .expect("the caps scenario is valid");

    #[derive(Default)]
    struct CapsBatches(Vec<(u64, u64)>);
    impl RecordSink for CapsBatches {
        fn record(&mut self, r: &RequestRecord<'_>) {
            self.0.push((r.id, sim::caps::run::batch_of(r)));
        }
    }
    let mut selector = strategies::batch::build(&caps.selector);
    let mut caps_batches = CapsBatches::default();
    sim::caps::run::simulate(&caps, seed, selector.as_mut(), &mut caps_batches);
    let expected = batches(caps_batches.0);

    let scenario = serving(json!({
        "model": {"name": "qwen1.5-moe-a2.7b-nf4"},
        "replica": {
            "gpu": "L4",
            "max_num_seqs": 8,
            "scheduler": {"kind": "static", "window_size": 32, "min_batch_trigger": 16,
                          "scheduling_interval_ms": 100.0, "seed_with_oldest": true},
            "batch_former": {"kind": "greedy_variance"},
        },
        "workload": {"n_requests": 400,
                     "prompt_tokens": {"kind": "uniform", "low": 16, "high": 256},
                     "output_tokens": {"kind": "uniform", "low": 1, "high": 16}},
        "arrival": {"pattern": "offline"},
    }));
    // The caps family's requests, in arrival order, as its server makes them.
    let model = sim::caps::run::request_model(&caps, seed);
    let mut arrivals = sim::caps::run::arrival_process(&caps, seed);
    let mut streams = RequestStreams {
        tokens: stream(seed, "tokens"),
        mixing: stream(seed, "mixing"),
    };
    let mut requests = Vec::new();
    while let Some(arrival) = arrivals.next_arrival() {
        requests.push(model.make_request(requests.len() as u64, &arrival, &mut streams));
    }
    let dry_run = CapsLoads {
        model,
        requests,
        prediction: stream(seed, "prediction"),
    };

    let finishes = serve_on_one_replica(&scenario, seed, Some(Box::new(dry_run)));
    let got = batches(finishes.0);

    assert_eq!(expected.len(), 50, "400 requests in batches of 8");
    assert_eq!(got, expected, "same batches, same order");
    // Not trivially so: greedy_variance does not take the oldest eight.
    assert!(
        expected
            .iter()
            .any(|b| b.windows(2).any(|w| w[1] != w[0] + 1))
    );
}

/// GEM's headline setting (scenarios/gem/headlines.toml: Mixtral-8x22B on 4 GPUs, one 12 %
/// straggler, GEM with 8 restarts) : the serving family maps each layer of an expert-parallel
/// group with `serving_family::mapping::map_group`, and given the gem family's observed loads
/// (the window of its trace) and its per-GPU cost curves, it returns the gem family's mapping,
/// layer by layer; the layout the serving family's step cost prices then sends each GPU the
/// tokens GEM's score counts.
///
/// Coincide: the mapper (strategies::mapping::gem, the same `ExpertMapper`), the problem it
/// solves per layer (window of tokens per expert per step, per-GPU latency curves, GEM's score),
/// the per-layer random streams given. Differ: where the loads come from (the gem family's
/// synthetic or recorded trace; the serving family's observation pass of its own routing model
/// and arrivals) and the curves' inputs (both plan with `policies::mapping::gpu_costs::planning_costs`, the one
/// MoE entry point at each GPU's compute and bandwidth factors, the gem family on the H200's
/// measured grouped GEMMs where its expert shape was measured), and the serving family's stream
/// names (`expert_mapping/replica<r>/copy<c>/layer<l>`).
#[test]
fn gem_mapping_is_the_same_in_the_serving_family() {
    let seed = 7;
    let config: sim::gem::GemConfig = serde_json::from_value(json!({
        "model": {"name": "mixtral-8x22b"},
        "cluster": {"variability": "high"},
        "workload": {"n_requests": 300},
        "mapper": {"kind": "gem", "restarts": 8},
    }))
    .expect("the gem scenario parses");
    let gem = config
        .validate(Path::new("."), &mut LoadCache::default())
        .expect("the gem scenario is valid");
    let window = gem.mapper.window();
    let deployment = sim::gem::server::Deployment::new(&gem, seed);
    let mut mapper = strategies::mapping::build(&gem.mapper);
    let expected = deployment.map_layers(mapper.as_mut(), window, seed);

    let n_experts = gem.shape.n_experts;
    let windows: Vec<Vec<f32>> = (0..gem.shape.n_layers)
        .map(|layer| deployment.problem(layer, window).window.to_vec())
        .collect();
    let mut mapper = strategies::mapping::build(&gem.mapper);
    let got = mapping::map_group(
        mapper.as_mut(),
        n_experts,
        &windows,
        &deployment.costs,
        |layer| stream(seed, &format!("gem/mapper/layer{layer}")),
    );
    assert_eq!(got, expected, "same mapping, layer by layer");
    assert!(
        expected.iter().any(|m| m.slots[0] != vec![0, 1]),
        "GEM moved an expert away from the linear layout"
    );

    let layout = ExpertLayout::new(n_experts, &[got]);
    let mut out = vec![0u32; layout.slots_per_gpu];
    for (layer, window) in windows.iter().enumerate() {
        for step in window.chunks(n_experts) {
            let counts: Vec<u32> = step.iter().map(|&n| n as u32).collect();
            let scored = expected[layer].gpu_tokens(step);
            for (gpu, &tokens) in scored.iter().enumerate() {
                layout.gpu_tokens(layer, &counts, gpu, &mut out);
                assert_eq!(f64::from(out.iter().sum::<u32>()), tokens);
            }
        }
    }
}

/// GEM's headline cell as a serving preset (scenarios/gem/evaluation_serving.toml: Mixtral-8x22B
/// on 4 H200s, GPU 0 at 0.88, GEM with 8 restarts here): with `experts.trace` the serving
/// family's mapper reads the trace's observed steps (no observation pass) and with
/// `experts.streams = "shared"` draws the gem family's streams, so its layout is the gem
/// family's mapping, layer by layer, for the gem family's `factors = "clock"` (the serving
/// family's speed factors are clock factors: gem-preset.md, gap 3). A second seed draws another
/// trace and another mapping in both.
#[test]
fn gem_preset_maps_from_the_trace_as_the_gem_family_does() {
    let gem_mapping = |seed: u64| {
        let config: sim::gem::GemConfig = serde_json::from_value(json!({
            "model": {"name": "mixtral-8x22b"},
            "cluster": {"variability": "high", "factors": "clock"},
            "workload": {"n_requests": 300},
            "mapper": {"kind": "gem", "restarts": 8},
        }))
        .expect("the gem scenario parses");
        let gem = config
            .validate(Path::new("."), &mut LoadCache::default())
            .expect("the gem scenario is valid");
        let deployment = sim::gem::server::Deployment::new(&gem, seed);
        let mut mapper = strategies::mapping::build(&gem.mapper);
        deployment.map_layers(mapper.as_mut(), gem.mapper.window(), seed)
    };
    let preset = serving(json!({
        "model": {"name": "mixtral-8x22b"},
        "replica": {"gpu": "H200", "gpus": 4, "tensor_parallel": 4, "expert_parallel": 4,
                    "speed_factors": [0.88, 1.0, 1.0, 1.0]},
        "experts": {"mapping": {"kind": "gem", "restarts": 8}, "streams": "shared",
                    "trace": {}},
        "workload": {"n_requests": 300,
                     "prompt_tokens": {"kind": "fixed", "value": 100},
                     "output_tokens": {"kind": "fixed", "value": 10}},
        "arrival": {"pattern": "offline"},
    }));
    let preset_layout = |seed: u64| {
        let mut deployment = Deployment::new(&preset, None).expect("Mixtral-8x22B fits 4 H200s");
        let shape = preset.model.experts().expect("an MoE model");
        deployment.expert_trace = preset
            .expert_trace
            .as_ref()
            .map(|t| t.build(shape.n_layers, shape.n_experts, shape.top_k, seed));
        let mut queue = strategies::queue::build(&QueuePolicyConfig::Fcfs);
        let mut router = strategies::routing::build(&RouterConfig::RoundRobin);
        let mut mapper = strategies::mapping::build(&preset.expert_mapping);
        let layouts = mapping::replica_layouts(
            &preset,
            std::slice::from_ref(&deployment),
            seed,
            mapper.as_mut(),
            &mut [],
            queue.as_mut(),
            router.as_mut(),
        );
        layouts[0].clone().expect("an MoE replica has a layout")
    };
    let mut seen = Vec::new();
    for seed in [1, 2] {
        let expected = gem_mapping(seed);
        let layout = preset_layout(seed);
        for (layer, mapping) in expected.iter().enumerate() {
            for (gpu, slots) in mapping.slots.iter().enumerate() {
                assert_eq!(
                    &layout.hosted(layer, gpu),
                    slots,
                    "seed {seed} layer {layer} gpu {gpu}"
                );
            }
        }
        assert!(
            expected.iter().any(|m| m.slots[0] != vec![0, 1]),
            "GEM moved an expert away from the linear layout"
        );
        seen.push(expected);
    }
    assert_ne!(seen[0], seen[1], "another seed, another trace and mapping");
}

/// The requests of a caps-family run: (id, batch) in finishing order, and each one's finish.
#[derive(Default)]
struct CapsRuns(Vec<(u64, u64)>, BTreeMap<u64, u64>);

impl RecordSink for CapsRuns {
    fn record(&mut self, r: &RequestRecord<'_>) {
        self.0.push((r.id, sim::caps::run::batch_of(r)));
        self.1.insert(r.id, r.finish.0);
    }
}

/// The caps family's run at `seed` of 300 Poisson requests at 250/s (Qwen1.5-MoE nf4, 16
/// topics, log-normal prompts and outputs) with `selector` and `[execution]` `execution`.
fn caps_run(
    selector: &str,
    execution: serde_json::Value,
    seed: u64,
) -> (sim::caps::metrics::RunMetrics, CapsRuns) {
    let caps = serde_json::from_value::<sim::caps::CapsConfig>(json!({
        "model": {"preset": "qwen1.5-moe-a2.7b-nf4"},
        "workload": {"n_requests": 300, "n_topics": 16, "affinity_concentration": 0.3,
                     "topic_purity": 0.8,
                     "prompt_tokens": {"median": 128, "sigma": 0.6, "max": 2048},
                     "output_tokens": {"median": 4, "sigma": 0.5, "max": 16}},
        "arrival": {"pattern": "poisson", "rate_per_s": 250},
        "scheduler": {"selector": {"kind": selector}},
        "execution": execution,
    }))
    .expect("the caps scenario parses")
    .validate(Path::new("."), &mut LoadCache::default())
    .expect("the caps scenario is valid");
    let mut caps_selector = strategies::batch::build(&caps.selector);
    let mut runs = CapsRuns::default();
    let (metrics, _) = sim::caps::run::simulate(&caps, seed, caps_selector.as_mut(), &mut runs);
    (metrics, runs)
}

/// `caps_run`'s workload as the serving-family preset: affinity routing, one token stream, one
/// L4 of `max_num_seqs = 8`, its static `scheduler` and `selector` as the batch former.
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

/// The CAPS evaluation as a serving-family preset (scenarios/caps/evaluation_serving.toml):
/// affinity routing (the caps request model, `serving::topic_affinity`), the per-expert
/// dry-run, static batches priced from their expected routing by the grouped model
/// (`replica.scheduler.pricing = "expected_routing"`) and both token lengths from one stream
/// (`workload.one_token_stream`): with Poisson arrivals, so that the batches depend on how long
/// each takes, the serving family forms the caps family's batches and finishes every request
/// at the same nanosecond, for two seeds and two selectors (`greedy_variance` and `fcfs` draw
/// nothing from their stream, which the families name apart: `selector` vs `selector_0`).
#[test]
fn the_caps_evaluation_runs_identically_as_a_serving_family_preset() {
    for (seed, selector) in [(42, "greedy_variance"), (7, "fcfs")] {
        let (_, caps_runs) = caps_run(selector, json!({"model": "grouped", "gpu": "L4"}), seed);
        let scenario = caps_preset(
            selector,
            json!({"kind": "static", "window_size": 32, "min_batch_trigger": 16,
                   "scheduling_interval_ms": 100.0, "seed_with_oldest": true,
                   "loads": "experts", "pricing": "expected_routing"}),
        );
        let finishes = serve_on_one_replica(&scenario, seed, None);

        assert_eq!(finishes.0.len(), 300);
        assert_eq!(
            finishes.0, caps_runs.1,
            "seed {seed}, {selector}: same finish times"
        );
        // Same finish times give the same batches (a batch's requests finish together).
        let by_finish = batches(finishes.0.iter().map(|(&id, &t)| (id, t)));
        let expected = batches(caps_runs.0);
        assert_eq!(by_finish, expected, "seed {seed}, {selector}: same batches");
        // Not trivially so: more than one batch ran, and not all of them full.
        assert!(expected.len() > 300 / 8 && expected.len() < 300);
    }
}

/// The CAPS preset with caps's other execution models and metrics: for each of `cv`,
/// `straggler`, `constant` and `exponential` (caps's `[execution].model`, the serving family's
/// `replica.scheduler.pricing`) and a selector, 300 Poisson requests at 250/s, the serving
/// family finishes every request at the caps family's nanosecond in the same batches and reports
/// the same imbalance, load CV, imbalance factor (the `cv` model's sensitivity x CV) and mean
/// queue depth. With `replica.scheduler.streams = "shared"` the selectors that draw (`random`,
/// `power_of_d`) and the exponential service draw from the caps family's streams (`selector`,
/// `service`), so they coincide too.
#[test]
fn the_caps_execution_models_and_metrics_agree_in_the_serving_preset() {
    let cases = [
        (
            "cv",
            json!({"model": "cv", "gpu": "L4"}),
            json!({}),
            "greedy_dot_product",
        ),
        (
            "straggler",
            json!({"model": "straggler", "gpu": "L4"}),
            json!({}),
            "power_of_d",
        ),
        (
            "constant",
            json!({"model": "constant", "service_ms": 30.0}),
            json!({"service_ms": 30.0}),
            "random",
        ),
        (
            "exponential",
            json!({"model": "exponential", "service_ms": 30.0}),
            json!({"service_ms": 30.0}),
            "fcfs",
        ),
    ];
    for (seed, (pricing, execution, keys, selector)) in [3u64, 11, 42, 5].into_iter().zip(cases) {
        let (metrics, caps_runs) = caps_run(selector, execution, seed);
        let mut scheduler = json!({"kind": "static", "loads": "experts", "pricing": pricing,
                                   "streams": "shared"});
        for (key, value) in keys.as_object().expect("keys") {
            scheduler[key] = value.clone();
        }
        let scenario = caps_preset(selector, scheduler);
        let (finishes, summary) = serve_and_summarise(&scenario, seed, None);
        let case = format!("{pricing}, {selector}, seed {seed}");
        assert_eq!(finishes.0, caps_runs.1, "{case}: same finish times");
        let expected = batches(caps_runs.0);
        assert_eq!(
            batches(finishes.0.iter().map(|(&id, &t)| (id, t))),
            expected,
            "{case}: same batches"
        );
        assert!(expected.len() > 300 / 8 && expected.len() < 300, "{case}");
        let load = summary.expert_load;
        assert_eq!(load.imbalance(), metrics.imbalance, "{case}: imbalance");
        assert_eq!(load.load_cv(), metrics.load_cv, "{case}: load CV");
        let factor = load.imbalance_factor();
        assert!(
            (factor - metrics.imbalance_factor).abs() <= 1e-12 * factor,
            "{case}: imbalance factor {factor} vs {}",
            metrics.imbalance_factor
        );
        if pricing == "cv" {
            // The cv model's derived sensitivity weighs the CV (below 1 on the L4).
            assert!(factor - 1.0 < load.load_cv(), "{case}: {factor}");
        } else {
            assert_eq!(factor, 1.0 + load.load_cv(), "{case}");
        }
        assert_eq!(
            summary.queue_depth_mean, metrics.queue_depth_mean,
            "{case}: mean queue depth"
        );
        assert!(metrics.queue_depth_mean > 0.0, "{case}");
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
