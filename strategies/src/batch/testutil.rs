//! Test helpers shared by the selector tests: window builders and a one-decision runner.

use expertsim_serving::policies::batch::{BatchSelection, BatchSelector, CandidateWindow};
use rand::RngExt;

/// A window of `len` candidates with `dims` integer-valued (token-count) loads, clustered by
/// "topic" so that candidates of one topic load the same entries: `(dims, flattened loads)`.
pub(crate) fn random_window(seed: u64, len: usize, dims: usize) -> (usize, Vec<f32>) {
    let mut rng = expertsim_serving::rng::stream(seed, "strategies-test-window");
    let mut loads = Vec::with_capacity(len * dims);
    for _ in 0..len {
        let topic = rng.random_range(0..4usize);
        let scale = rng.random_range(1..4u32);
        for j in 0..dims {
            let base = rng.random_range(0..3u32);
            let hot = if j % 4 == topic {
                rng.random_range(0..20u32)
            } else {
                0
            };
            loads.push(((base + hot) * scale) as f32);
        }
    }
    (dims, loads)
}

/// Flattens hand-written rows into a window's storage: `(dims, loads)`.
pub(crate) fn rows(rows: &[&[f32]]) -> (usize, Vec<f32>) {
    let dims = rows[0].len();
    assert!(rows.iter().all(|r| r.len() == dims));
    (dims, rows.concat())
}

/// Runs one decision of `selector` on `window` with batch size `max_size`, the selection
/// pre-seeded with `seeded`, and the RNG stream of `seed`; returns the chosen indices in the
/// order chosen (pre-seeded first).
pub(crate) fn run(
    selector: &mut dyn BatchSelector,
    window: &CandidateWindow<'_>,
    max_size: usize,
    seeded: &[usize],
    seed: u64,
) -> Vec<usize> {
    let mut selection = BatchSelection::new(window, max_size);
    for &i in seeded {
        selection.add(window, i);
    }
    let mut rng = expertsim_serving::rng::stream(seed, "strategies-test-selector");
    selector.select(window, &mut selection, &mut rng);
    selection.chosen().to_vec()
}

/// The chosen set, sorted (for comparing batches regardless of pick order).
pub(crate) fn sorted(mut v: Vec<usize>) -> Vec<usize> {
    v.sort_unstable();
    v
}
