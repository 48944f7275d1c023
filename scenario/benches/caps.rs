//! Criterion benchmark of the CAPS preset's speed goals (docs/performance.md: the full CAPS
//! evaluation and 1M CAPS requests each under 3 s): what a static batch's expected routing
//! costs to price, and a CAPS run.
//!
//! - `price_expected_layers/24`: the physical (`grouped`) model's MoE part of one batch pass,
//!   Qwen1.5-MoE-A2.7B (24 layers x 60 experts) on the L4, the layers' expected loads priced
//!   as `GroupedModel::moe_nanos` prices them (`MoeLayerCost::expected_lanes`, `LANES` layers
//!   at a time); `price_expected_layers_one_by_one/24` the same layers one `gpu` call each
//!   (the same bits, the way they were priced before). The loads are a batch's: mostly tens
//!   of rows per expert, every seventh expert below one row (an expectation).
//! - `caps_run_20k_requests`: `scenarios/smoke/million_requests.toml` cut to its first
//!   20,000 requests, run as `expertsim run` runs a cell.
//!
//! Run: `cargo bench -p expertsim-scenario --bench caps`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use expertsim_scenario::cost::gpu::GpuSpec;
use expertsim_scenario::cost::kernel::Timing;
use expertsim_scenario::cost::moe_layer::{ExpertRows, MoeLayerCost, SpeedFactors};
use expertsim_scenario::serving_family::config::ServingScenario;
use std::hint::black_box;
use std::path::Path;

const REQUESTS: u64 = 20_000;

fn caps(c: &mut Criterion) {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/smoke/million_requests.toml");
    let mut group = c.benchmark_group("caps");

    let plan = expertsim_scenario::scenario::load(&path, &[]).expect("the 1M scenario loads");
    let scenario: &ServingScenario = plan.cells[0].scenario.get().expect("a serving scenario");
    let shape = scenario.model.experts().expect("an MoE model");
    let gpu = GpuSpec::by_name("L4").expect("the L4 is known");
    let layer = MoeLayerCost::new(&gpu, &shape, Timing::Eager);
    let n = shape.n_experts;
    let loads: Vec<f32> = (0..shape.n_layers * n)
        .map(|i| {
            if i % 7 == 3 {
                0.25 + (i % 5) as f32 * 0.1
            } else {
                (i * 37 % 97) as f32 + 0.5
            }
        })
        .collect();
    let layers = shape.n_layers;
    group.bench_function(format!("price_expected_layers/{layers}"), |b| {
        b.iter(|| {
            black_box(&loads)
                .chunks(n * expertsim_scenario::cost::kernel::LANES)
                .flat_map(|group| {
                    let layers: Vec<&[f32]> = group.chunks_exact(n).collect();
                    let priced = layer.expected_lanes(&layers);
                    priced.into_iter().take(layers.len()).map(|c| c.nanos)
                })
                .sum::<f64>()
        })
    });
    group.bench_function(format!("price_expected_layers_one_by_one/{layers}"), |b| {
        b.iter(|| {
            black_box(&loads)
                .chunks_exact(n)
                .map(|l| {
                    layer
                        .gpu(ExpertRows::Expected(l), SpeedFactors::NOMINAL)
                        .nanos
                })
                .sum::<f64>()
        })
    });

    let sets = [format!("workload.n_requests={REQUESTS}")];
    let plan = expertsim_scenario::scenario::load(&path, &sets).expect("the 1M scenario loads");
    let scenario = &plan.cells[0].scenario;
    let run = || {
        expertsim_scenario::runner::run_cell(
            scenario,
            plan.seeds[0],
            &strategies::Registry,
            None,
            None,
        )
        .expect("the CAPS scenario runs")
    };
    group.throughput(Throughput::Elements(REQUESTS));
    group.sample_size(10);
    group.bench_function("caps_run_20k_requests", |b| b.iter(run));
    group.finish();
}

criterion_group!(benches, caps);
criterion_main!(benches);
