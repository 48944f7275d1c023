//! Criterion benchmark of GEM's serving model on the shared replica: 4000 offline ShareGPT-like
//! requests on Qwen3-30B-A3B (48 layers x 128 experts, the most routing work per step of the
//! five models) over four H200s with one straggler, under the linear mapping. Measures the
//! engine loop, the replica, the per-step routing of every expert and GPU, and the step cost;
//! the mapping search has its own bench (`strategies`, `--bench mapping`). The mapper and the
//! FCFS queue are minimal stand-ins, so that the bench times the serving model alone.
//! Run: `cargo bench -p expertsim-sim --bench gem`.

use criterion::{Criterion, criterion_group, criterion_main};
use sim::gem::{GemConfig, simulate};
use sim::policies::mapping::{ExpertMapper, LayerMapping, LayerProblem};
use sim::rng::SimRng;
use sim::serving::{QueuePolicy, QueuedRequest};
use std::collections::VecDeque;
use std::path::Path;

/// vLLM's contiguous blocks of experts.
struct Linear;
impl ExpertMapper for Linear {
    fn map_layer(&mut self, problem: &LayerProblem<'_>, _: &mut SimRng) -> LayerMapping {
        let per = problem.n_experts / problem.n_gpus();
        let gpus: Vec<usize> = (0..problem.n_experts).map(|e| e / per).collect();
        LayerMapping::from_assignment(&gpus, problem.n_gpus())
    }
}

#[derive(Default)]
struct Fifo(VecDeque<QueuedRequest>);
impl QueuePolicy for Fifo {
    fn name(&self) -> &'static str {
        "fcfs"
    }
    fn reset(&mut self, _: usize) {
        self.0.clear();
    }
    fn push(&mut self, _: usize, r: QueuedRequest) {
        self.0.push_back(r);
    }
    fn pop(&mut self, _: usize, _: u64) -> Option<QueuedRequest> {
        self.0.pop_front()
    }
    fn len(&self, _: usize) -> usize {
        self.0.len()
    }
}

const SCENARIO: &str = r#"
model = { name = "qwen3-30b-a3b" }
cluster = { variability = "high" }
workload = { n_requests = 4000 }
mapper = { kind = "linear" }
"#;

fn gem_serving(c: &mut Criterion) {
    let config: GemConfig = toml::from_str(SCENARIO).unwrap();
    let scenario = config
        .validate(Path::new("."), &mut Default::default())
        .unwrap();
    let mut group = c.benchmark_group("gem");
    group.sample_size(10);
    group.bench_function("serve_qwen3_30b_a3b_4000_offline_requests", |b| {
        b.iter(|| simulate(&scenario, 1, &mut Linear, &mut Fifo::default()))
    });
    group.finish();
}

criterion_group!(benches, gem_serving);
criterion_main!(benches);
