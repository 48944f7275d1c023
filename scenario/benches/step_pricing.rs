//! Criterion benchmark of what one serving step costs to price and to simulate, on the shipped
//! `scenarios/serving/speed_moe_million.toml` (Mixtral-8x7B, four H100s a replica, TP 4, EP 4,
//! Zipf routing over 8 topics): issue 27's bar, pricing a step within 10 % of its cost before
//! the kernel model (docs/performance.md, "The cost of a step").
//!
//! - `price_decode_step/<n>`: one replica's `ReplicaStepCost` prices a decode step of `n`
//!   sequences at 600 tokens of context each, routed as a run routes it: the replica's
//!   `ExpertRouter` built as the serving family builds replica 0's (the scenario's Zipf table
//!   drawn from `stream(seed, "expert_popularity")`, the offsets and expert orders from
//!   `stream(seed, "expert_routing_0")`), sequence `i` of topic `i mod 8`, each layer routed at
//!   random. 64 such steps are routed before timing and priced in turn (`decode_routed`), so
//!   the time is the pricing alone: the dense part, then 32 MoE layers x 4 GPUs' grouped GEMMs
//!   and the all-to-all. 139 sequences is the 1M run's mean step; 1,163 rows is a step
//!   carrying a full 1,024-token prefill chunk beside them.
//! - `price_even_step/139`: the same step with its routed tokens spread evenly over the
//!   experts, every layer alike (`decode_profile`, what `price_decode_step` measured before).
//! - `moe_run_20k_requests`: the scenario cut to its first 20,000 requests, run as `expertsim
//!   run` runs a cell (routing, scheduling and pricing every step); its throughput is in steps.
//! - `expertweave_adapter_run`: scenarios/expertweave/serving_overhead.toml's heaviest cell (20
//!   adapters on a virtual weight tensor, 5 req/s) cut to 20 s of arrivals, run as a cell: each
//!   step's tokens routed per adapter by `AdapterRouter` (the fine-tuned experts' tokens to the
//!   adapters' copies) and priced with the copies beside the base experts, 8 GPUs. The adapter
//!   routing and the copies' rows were two thirds of `reproduce expertweave` before the layout
//!   indexed each expert's slots (docs/performance.md).
//!
//! Run: `cargo bench -p expertsim-scenario --bench step_pricing`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use expertsim_scenario::rng::stream;
use expertsim_scenario::serving::RoutedTokens;
use expertsim_scenario::serving_family::config::ServingScenario;
use expertsim_scenario::serving_family::deployment::Deployment;
use expertsim_scenario::serving_family::expert_routing::ExpertRouter;
use expertsim_scenario::serving_family::mapping::ExpertLayout;
use expertsim_scenario::serving_family::step_cost::ReplicaStepCost;
use std::path::Path;
use std::rc::Rc;

const REQUESTS: u64 = 20_000;

/// Steps routed before timing, priced in turn.
const ROUTED_STEPS: usize = 64;

/// One routed step: per layer, tokens per expert and per GPU.
struct Routed {
    layers: usize,
    per_expert: Vec<u32>,
    per_gpu: Vec<u32>,
}

fn step_pricing(c: &mut Criterion) {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/serving/speed_moe_million.toml");
    let mut group = c.benchmark_group("step_pricing");

    let plan = expertsim_scenario::scenario::load(&path, &[]).expect("the speed scenario loads");
    let scenario: &ServingScenario = plan.cells[0].scenario.get().expect("a serving scenario");
    let shape = scenario.model.experts().expect("an MoE model");
    let r = &scenario.replica;
    let layout = ExpertLayout::linear(shape.n_layers, shape.n_experts, r.expert_parallel, r.gpus);
    let deployment = Deployment::new(scenario, None).expect("the replica fits");
    let layout = Rc::new(layout);
    let mut cost = ReplicaStepCost::new(scenario, &deployment, Some(Rc::clone(&layout)), None);
    let seed = plan.seeds[0];
    for sequences in [139u64, 1163] {
        // Replica 0's router, as `ServingServer` builds it for `seed`.
        let mut router = ExpertRouter::new(
            &shape,
            scenario.expert_routing,
            scenario.n_topics,
            Rc::clone(&layout),
            &mut stream(seed, "expert_popularity"),
            stream(seed, "expert_routing_0"),
        );
        let topics = router.topic_tokens.len() as u64;
        for (t, tokens) in router.topic_tokens.iter_mut().enumerate() {
            *tokens = sequences / topics + u64::from((t as u64) < sequences % topics);
        }
        let steps: Vec<Routed> = (0..ROUTED_STEPS)
            .map(|_| {
                let routed = router.route(sequences);
                Routed {
                    layers: routed.layers,
                    per_expert: routed.per_expert.to_vec(),
                    per_gpu: routed.per_gpu.to_vec(),
                }
            })
            .collect();
        let mut next = steps.iter().cycle();
        group.bench_function(format!("price_decode_step/{sequences}"), |b| {
            b.iter(|| {
                let step = next.next().expect("a cycle never ends");
                let routed = RoutedTokens {
                    layers: step.layers,
                    per_expert: &step.per_expert,
                    per_gpu: &step.per_gpu,
                    per_slot: &[],
                    copies: &[],
                };
                cost.decode_routed(std::hint::black_box(sequences), 600, routed)
            })
        });
    }
    group.bench_function("price_even_step/139", |b| {
        b.iter(|| cost.decode_profile(std::hint::black_box(139), 600))
    });

    let sets = [format!("workload.n_requests={REQUESTS}")];
    let plan = expertsim_scenario::scenario::load(&path, &sets).expect("the speed scenario loads");
    let scenario = &plan.cells[0].scenario;
    let run = || {
        expertsim_scenario::runner::run_cell(
            scenario,
            plan.seeds[0],
            &strategies::Registry,
            None,
            None,
        )
        .expect("the speed scenario runs")
    };
    // Every event after the arrivals is a step's end.
    let events = run().output.details["events"]
        .as_u64()
        .expect("the run counts its events");
    group.throughput(Throughput::Elements(events - REQUESTS));
    group.sample_size(10);
    group.bench_function("moe_run_20k_requests", |b| b.iter(run));

    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios/expertweave/serving_overhead.toml");
    let sets = [
        "adapters.count=20",
        "arrival.rate_per_s=5",
        "adapters.memory.kind=virtual_weight_tensor",
        "workload.horizon_s=20",
    ]
    .map(String::from);
    let plan =
        expertsim_scenario::scenario::load(&path, &sets).expect("the ExpertWeave scenario loads");
    assert_eq!(plan.cells.len(), 1, "the sets narrow the sweep to one cell");
    let scenario = &plan.cells[0].scenario;
    let run = || {
        expertsim_scenario::runner::run_cell(
            scenario,
            plan.seeds[0],
            &strategies::Registry,
            None,
            None,
        )
        .expect("the ExpertWeave scenario runs")
    };
    let events = run().output.details["events"]
        .as_u64()
        .expect("the run counts its events");
    group.throughput(Throughput::Elements(events));
    group.bench_function("expertweave_adapter_run", |b| b.iter(run));
    group.finish();
}

criterion_group!(benches, step_pricing);
criterion_main!(benches);
