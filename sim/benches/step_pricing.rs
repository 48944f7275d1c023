//! Criterion benchmark of what one serving step costs to price and to simulate, on the shipped
//! `scenarios/serving/speed_moe_million.toml` (Mixtral-8x7B, four H100s a replica, TP 4, EP 4,
//! Zipf routing): issue 27's bar, pricing a step within 10 % of its cost before the kernel
//! model (docs/performance.md, "The cost of a step").
//!
//! - `price_decode_step/<n>`: one replica's `ReplicaStepCost` prices a decode step of `n`
//!   sequences at 600 tokens of context each, its routed tokens spread evenly over the experts
//!   (`decode_profile`): the dense part, then 32 MoE layers x 4 GPUs' grouped GEMMs and the
//!   all-to-all. 139 sequences is the 1M run's mean step; 1,163 rows is a step carrying a full
//!   1,024-token prefill chunk beside them.
//! - `moe_run_20k_requests`: the scenario cut to its first 20,000 requests, run as `expertsim
//!   run` runs a cell (routing, scheduling and pricing every step); its throughput is in steps.
//!
//! Run: `cargo bench -p expertsim-sim --bench step_pricing`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sim::serving_family::config::ServingScenario;
use sim::serving_family::deployment::Deployment;
use sim::serving_family::mapping::ExpertLayout;
use sim::serving_family::step_cost::ReplicaStepCost;
use std::path::Path;
use std::rc::Rc;

const REQUESTS: u64 = 20_000;

fn step_pricing(c: &mut Criterion) {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/serving/speed_moe_million.toml");
    let mut group = c.benchmark_group("step_pricing");

    let plan = sim::scenario::load(&path, &[]).expect("the speed scenario loads");
    let scenario: &ServingScenario = plan.cells[0].scenario.get().expect("a serving scenario");
    let shape = scenario.model.experts().expect("an MoE model");
    let r = &scenario.replica;
    let layout = ExpertLayout::linear(shape.n_layers, shape.n_experts, r.expert_parallel, r.gpus);
    let deployment = Deployment::new(scenario, None).expect("the replica fits");
    let mut cost = ReplicaStepCost::new(scenario, &deployment, Some(Rc::new(layout)), None);
    for sequences in [139u64, 1163] {
        group.bench_function(format!("price_decode_step/{sequences}"), |b| {
            b.iter(|| cost.decode_profile(std::hint::black_box(sequences), 600))
        });
    }

    let sets = [format!("workload.n_requests={REQUESTS}")];
    let plan = sim::scenario::load(&path, &sets).expect("the speed scenario loads");
    let scenario = &plan.cells[0].scenario;
    let run = || {
        sim::runner::run_cell(scenario, plan.seeds[0], &strategies::Registry, None, None)
            .expect("the speed scenario runs")
    };
    // Every event after the arrivals is a step's end.
    let events = run().output.details["events"]
        .as_u64()
        .expect("the run counts its events");
    group.throughput(Throughput::Elements(events - REQUESTS));
    group.sample_size(10);
    group.bench_function("moe_run_20k_requests", |b| b.iter(run));
    group.finish();
}

criterion_group!(benches, step_pricing);
criterion_main!(benches);
