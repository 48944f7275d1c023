//! Criterion benchmark of the serving family's speed goal for one dense replica: 10,000
//! Llama-2-7B requests (512 prompt, 128 output tokens, Poisson at 20/s) on one H100 under the
//! `vllm` scheduler, in under 0.3 s (docs/performance.md). The policies are minimal stand-ins
//! of the `strategies` crate's `fcfs` and `round_robin` (which cannot be a dependency of `sim`).
//! Run: `cargo bench -p expertsim-sim --bench serving`.

use criterion::{Criterion, criterion_group, criterion_main};
use sim::records::DiscardRecords;
use sim::scenario::validate::LoadCache;
use sim::serving::{EngineState, QueuePolicy, QueuedRequest, RouteRequest, Router};
use sim::serving_family::{ServingConfig, run_recorded};
use std::collections::VecDeque;
use std::path::Path;

#[derive(Default)]
struct Fifo(Vec<VecDeque<QueuedRequest>>);
impl QueuePolicy for Fifo {
    fn name(&self) -> &'static str {
        "fcfs"
    }
    fn reset(&mut self, n: usize) {
        self.0 = vec![VecDeque::new(); n];
    }
    fn push(&mut self, e: usize, r: QueuedRequest) {
        let at = self.0[e].partition_point(|q| q.id < r.id);
        self.0[e].insert(at, r);
    }
    fn pop(&mut self, e: usize, _: u64) -> Option<QueuedRequest> {
        self.0[e].pop_front()
    }
    fn len(&self, e: usize) -> usize {
        self.0[e].len()
    }
}

#[derive(Default)]
struct Turns(usize);
impl Router for Turns {
    fn name(&self) -> &'static str {
        "round_robin"
    }
    fn reset(&mut self, _: usize) {
        self.0 = 0;
    }
    fn route(&mut self, _: &RouteRequest<'_>, engines: &[EngineState]) -> usize {
        self.0 += 1;
        (self.0 - 1) % engines.len()
    }
}

const SCENARIO: &str = r#"
[model]
name = "llama-2-7b"
[workload]
n_requests = 10000
prompt_tokens = { kind = "fixed", value = 512 }
output_tokens = { kind = "fixed", value = 128 }
[arrival]
pattern = "poisson"
rate_per_s = 20.0
"#;

/// The bench serves a dense model: no expert is ever mapped.
struct DenseHasNoExperts;

impl sim::gem::ExpertMapper for DenseHasNoExperts {
    fn map_layer(
        &mut self,
        _: &sim::gem::LayerProblem<'_>,
        _: &mut sim::rng::SimRng,
    ) -> sim::gem::LayerMapping {
        unreachable!("a dense model has no experts to map")
    }
}

fn ten_thousand_dense(c: &mut Criterion) {
    let config: ServingConfig = toml::from_str(SCENARIO).expect("bench scenario parses");
    let scenario = config
        .validate(Path::new("."), &mut LoadCache::default())
        .expect("bench scenario is valid");
    let mut group = c.benchmark_group("serving");
    group.sample_size(20);
    group.bench_function("ten_thousand_requests_one_dense_replica", |b| {
        b.iter(|| {
            let out = run_recorded(
                &scenario,
                1,
                &mut Fifo::default(),
                &mut Turns::default(),
                &mut DenseHasNoExperts,
                &mut [],
                None,
                &mut DiscardRecords,
                None,
            )
            .expect("no file written");
            assert_eq!(out.scalar("completed"), Some(10_000.0));
            out
        })
    });
    group.finish();
}

criterion_group!(benches, ten_thousand_dense);
criterion_main!(benches);
