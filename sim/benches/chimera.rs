//! Criterion benchmark of the Chimera family's speed target: one simulated hour of workflows at
//! RPS 16 on four heterogeneous engines (Qwen2.5 1.5B/3B/7B/14B on RTX A6000s), in under one
//! second. The policies are minimal stand-ins of the same cost class as the real ones, so that
//! the bench times the family's loop rather than a policy's details: shortest predicted total
//! first from an ordered map, and the engine with the lowest estimated delay.
//! Run: `cargo bench -p expertsim-sim --bench chimera`.

use criterion::{Criterion, criterion_group, criterion_main};
use sim::chimera::{ChimeraConfig, run};
use sim::serving::{EngineState, QueuePolicy, QueuedRequest, RouteRequest, Router};
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Default)]
struct ShortestTotal(Vec<BTreeMap<(u64, u64), QueuedRequest>>);
impl QueuePolicy for ShortestTotal {
    fn name(&self) -> &'static str {
        "stjf"
    }
    fn reset(&mut self, n: usize) {
        self.0 = vec![BTreeMap::new(); n];
    }
    fn push(&mut self, e: usize, r: QueuedRequest) {
        self.0[e].insert((r.predicted_total_tokens as u64, r.id), r);
    }
    fn pop(&mut self, e: usize, _: u64) -> Option<QueuedRequest> {
        self.0[e].pop_first().map(|(_, r)| r)
    }
    fn len(&self, e: usize) -> usize {
        self.0[e].len()
    }
}

struct LeastDelay;
impl Router for LeastDelay {
    fn name(&self) -> &'static str {
        "least_delay"
    }
    fn reset(&mut self, _: usize) {}
    fn route(&mut self, _: &RouteRequest<'_>, engines: &[EngineState]) -> usize {
        (0..engines.len())
            .min_by(|&a, &b| {
                engines[a]
                    .estimated_delay_ms()
                    .total_cmp(&engines[b].estimated_delay_ms())
            })
            .unwrap_or(0)
    }
}

const SCENARIO: &str = r#"
[cluster]
models = ["qwen2.5-1.5b", "qwen2.5-3b", "qwen2.5-7b", "qwen2.5-14b"]
[workload]
dataset = "apps"
rps = 16
duration_s = 3600
[queue]
kind = "stjf"
[routing]
kind = "chimera"
slack = 0.5
"#;

fn one_hour_rps16(c: &mut Criterion) {
    let config: ChimeraConfig = toml::from_str(SCENARIO).expect("bench scenario parses");
    let scenario = config
        .validate(Path::new("."), &mut Default::default())
        .expect("bench scenario is valid");
    let mut group = c.benchmark_group("chimera");
    group.sample_size(10);
    group.bench_function("one_hour_rps16_four_engines", |b| {
        b.iter(|| {
            let metrics =
                run::simulate(&scenario, 1, &mut ShortestTotal::default(), &mut LeastDelay);
            assert!(metrics.n_workflows > 50_000);
            metrics
        })
    });
    group.finish();
}

criterion_group!(benches, one_hour_rps16);
criterion_main!(benches);
