//! Criterion benchmark of the serving simulator's GEM preset: 4000 offline ShareGPT-like
//! requests on Qwen3-30B-A3B (48 layers x 128 experts, the most routing work per step of the
//! five models) over four H200s with one straggler, under the linear mapping
//! (`scenarios/gem/quick.toml` with that model and request count, its first cell). Measures the
//! engine loop, the replica, the per-step trace routing of every expert and GPU, and the step
//! cost, as `expertsim run` runs a cell (the `strategies` crate's policies, no records); the
//! mapping search has its own bench (`strategies`, `--bench mapping`).
//! Run: `cargo bench -p expertsim-scenario --bench gem`.

use criterion::{Criterion, criterion_group, criterion_main};
use std::path::Path;

fn gem_serving(c: &mut Criterion) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/gem/quick.toml");
    let sets = [
        "model.name=qwen3-30b-a3b".to_string(),
        "workload.n_requests=4000".to_string(),
    ];
    let plan = expertsim_scenario::scenario::load(&path, &sets).expect("the GEM preset loads");
    let cell = &plan.cells[0];
    assert_eq!(cell.id, "experts.mapping.kind=linear");
    let mut group = c.benchmark_group("gem");
    group.sample_size(10);
    group.bench_function("serve_qwen3_30b_a3b_4000_offline_requests", |b| {
        b.iter(|| {
            let run = expertsim_scenario::runner::run_cell(
                &cell.scenario,
                plan.seeds[0],
                &strategies::Registry,
                None,
                None,
            )
            .expect("the preset runs");
            assert_eq!(run.output.scalar("completed"), Some(4000.0));
            run
        })
    });
    group.finish();
}

criterion_group!(benches, gem_serving);
criterion_main!(benches);
