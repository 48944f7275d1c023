//! One batch-selection decision of every CAPS strategy at the paper's operating point:
//! window W = 32, d = 24 layers x 60 experts = 1440, batch B = 8, pre-seeded with the oldest
//! candidate as the scheduler does.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use expertsim_serving::policies::batch::{BatchSelection, CandidateWindow};
use rand::RngExt;

const WINDOW: usize = 32;
const LAYERS: usize = 24;
const EXPERTS: usize = 60;
const TOP_K: usize = 4;
const BATCH: usize = 8;

/// Token-count load vectors of a bursty window: requests of a few topics, each topic
/// favouring its own experts, each token routed to `TOP_K` experts per layer.
fn window_loads() -> Vec<f32> {
    let mut rng = expertsim_serving::rng::stream(42, "bench-window");
    let topics: Vec<Vec<f32>> = (0..4)
        .map(|_| {
            (0..LAYERS * EXPERTS)
                .map(|_| {
                    if rng.random_range(0..6u32) == 0 {
                        8.0
                    } else {
                        1.0
                    }
                })
                .collect()
        })
        .collect();
    let mut loads = vec![0.0f32; WINDOW * LAYERS * EXPERTS];
    for row in loads.chunks_exact_mut(LAYERS * EXPERTS) {
        let topic = &topics[rng.random_range(0..topics.len())];
        let tokens = rng.random_range(50..500usize);
        for layer in 0..LAYERS {
            let weights = &topic[layer * EXPERTS..(layer + 1) * EXPERTS];
            let total: f32 = weights.iter().sum();
            for _ in 0..tokens {
                let mut picked = [usize::MAX; TOP_K];
                for slot in 0..TOP_K {
                    // Sample an expert by weight, without repeating one for this token.
                    let expert = loop {
                        let mut x = rng.random_range(0.0..total);
                        let mut e = 0;
                        while e + 1 < EXPERTS && x >= weights[e] {
                            x -= weights[e];
                            e += 1;
                        }
                        if !picked.contains(&e) {
                            break e;
                        }
                    };
                    picked[slot] = expert;
                    row[layer * EXPERTS + expert] += 1.0;
                }
            }
        }
    }
    loads
}

fn selectors(c: &mut Criterion) {
    let loads = window_loads();
    let window = CandidateWindow::new(LAYERS * EXPERTS, &loads);
    let mut group = c.benchmark_group("select_W32_d1440_B8");
    for info in strategies::batch::catalogue() {
        let config: expertsim_serving::policies::batch::BatchSelectorConfig =
            serde_json::from_value(serde_json::json!({ "kind": info.kind })).unwrap();
        let mut selector = strategies::batch::build(&config);
        let mut rng = expertsim_serving::rng::stream(7, "bench-selector");
        group.bench_function(info.kind, |b| {
            b.iter(|| {
                let mut selection = BatchSelection::new(&window, BATCH);
                selection.add(&window, 0);
                selector.select(black_box(&window), &mut selection, &mut rng);
                black_box(selection.chosen()[BATCH - 1])
            })
        });
    }
    group.finish();
}

criterion_group!(benches, selectors);
criterion_main!(benches);
