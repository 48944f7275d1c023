//! Criterion benchmark of the serving family's speed goal for one dense replica: 10,000
//! Llama-2-7B requests (512 prompt, 128 output tokens, Poisson at 20/s) on one H100 under the
//! `vllm` scheduler, in under 0.3 s (docs/performance.md): the shipped
//! `scenarios/serving/speed_dense.toml`, run as `expertsim run` runs a cell (the `strategies`
//! crate's policies, no records written).
//! Run: `cargo bench -p expertsim-scenario --bench serving`.

use criterion::{Criterion, criterion_group, criterion_main};
use std::path::Path;

fn ten_thousand_dense(c: &mut Criterion) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/serving/speed_dense.toml");
    let plan = expertsim_scenario::scenario::load(&path, &[]).expect("the speed scenario loads");
    let scenario = &plan.cells[0].scenario;
    let mut group = c.benchmark_group("serving");
    group.sample_size(20);
    group.bench_function("ten_thousand_requests_one_dense_replica", |b| {
        b.iter(|| {
            let run = expertsim_scenario::runner::run_cell(
                scenario,
                plan.seeds[0],
                &strategies::Registry,
                None,
                None,
            )
            .expect("the speed scenario runs");
            assert_eq!(run.output.scalar("completed"), Some(10_000.0));
            run
        })
    });
    group.finish();
}

criterion_group!(benches, ten_thousand_dense);
criterion_main!(benches);
