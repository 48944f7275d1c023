//! Where to sample (GEM section 3.3.2): latency only changes where a count crosses a tile
//! boundary, so counts are sampled just below and at each step (`k x tile` and
//! `k x tile + 1`) up to a dense limit, then every `sparse_step` up to a sparse limit, and the
//! simulator interpolates linearly between samples (exact on a staircase). The calibration
//! measures at these counts and the analytic profiles (`roofline::ProfileCurves`) compute at
//! them, so a measured and an analytic profile sample the same grid.

/// Token counts: 1, both sides of each tile boundary up to `dense_limit` (the last boundary
/// only from below), then every `sparse_step` past the last dense sample up to `sparse_limit`.
pub fn token_points(
    tile: usize,
    dense_limit: usize,
    sparse_step: usize,
    sparse_limit: usize,
) -> Vec<usize> {
    let tile = tile.max(1);
    let dense = dense_limit.max(tile);
    let mut points = vec![1];
    let mut boundary = tile;
    while boundary <= dense {
        points.push(boundary);
        if boundary + tile <= dense {
            points.push(boundary + 1);
        }
        boundary += tile;
    }
    if sparse_step > 0 {
        let mut sparse = points[points.len() - 1] + sparse_step;
        while sparse <= sparse_limit {
            points.push(sparse);
            sparse += sparse_step;
        }
    }
    points.dedup();
    points
}

/// Batch sizes: every size up to one tile (decode curves are steep there), then both sides of
/// each tile boundary up to `max_batch`, which is always included.
pub fn batch_points(tile: usize, max_batch: usize) -> Vec<usize> {
    let tile = tile.max(1);
    let max = max_batch.max(1);
    let mut points: Vec<usize> = (1..=tile.min(max)).collect();
    let mut boundary = tile;
    while boundary < max {
        points.push(boundary + 1);
        points.push((boundary + tile).min(max));
        boundary += tile;
    }
    points.dedup();
    points
}

/// The counts after which a sampled curve jumps: for each pair of consecutive samples whose
/// latency rises by more than `threshold`, the lower count.
pub fn steps(samples: &[(f64, f64)], threshold: f64) -> Vec<f64> {
    samples
        .windows(2)
        .filter(|w| w[1].1 - w[0].1 > threshold)
        .map(|w| w[0].0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CostCurve;

    /// How many samples [`token_points`] takes with no sparse part: 1, then two per tile boundary
    /// below the dense limit and one at it.
    fn dense_sample_count(tile: usize, dense_limit: usize) -> usize {
        let boundaries = dense_limit.max(tile) / tile.max(1);
        if tile == 1 {
            boundaries
        } else {
            2 * boundaries
        }
    }

    /// A staircase: flat within each tile, a jump of `step` at every boundary.
    fn staircase(tile: usize, base: f64, step: f64) -> impl Fn(usize) -> f64 {
        move |n| base + step * n.div_ceil(tile) as f64
    }

    #[test]
    fn finds_every_step_of_a_staircase_with_the_implied_samples() {
        for (tile, dense) in [(64, 4096), (32, 1024), (16, 100), (128, 8192)] {
            let f = staircase(tile, 1_000.0, 250.0);
            let points = token_points(tile, dense, 0, 0);
            assert_eq!(points.len(), dense_sample_count(tile, dense), "tile {tile}");
            let samples: Vec<(f64, f64)> = points.iter().map(|&n| (n as f64, f(n))).collect();
            // Every step, and only the steps, show up between consecutive samples.
            let found = steps(&samples, 1.0);
            let expected: Vec<f64> = (1..=dense / tile - 1).map(|k| (k * tile) as f64).collect();
            assert_eq!(found, expected, "tile {tile}");
            // Linear interpolation between the samples reproduces the staircase exactly.
            let curve = CostCurve::new(samples).unwrap();
            for n in 1..=(dense / tile) * tile {
                assert_eq!(curve.at(n as f64), f(n), "tile {tile}, n {n}");
            }
        }
    }

    #[test]
    fn gem_sample_budget_and_sparse_tail() {
        // 64-token tiles to 4096 tokens: 128 dense samples; then every 1024 to 16384: 12 more.
        let points = token_points(64, 4096, 1024, 16_384);
        assert_eq!(&points[..5], &[1, 64, 65, 128, 129]);
        assert_eq!(points.len(), 128 + 12);
        assert_eq!(&points[points.len() - 2..], &[15_360, 16_384]);
        assert!(points.windows(2).all(|w| w[0] < w[1]));
        // Sampling only at tile boundaries misses nothing a coarse grid would catch: a
        // coarse 100-token grid misses most steps.
        let f = staircase(64, 0.0, 1.0);
        let coarse: Vec<(f64, f64)> = (1..=40).map(|i| ((i * 100) as f64, f(i * 100))).collect();
        assert!(steps(&coarse, 0.5).len() < 4096 / 64 - 1);
    }

    #[test]
    fn batch_points_cover_the_first_tile_then_boundaries() {
        assert_eq!(batch_points(4, 8), vec![1, 2, 3, 4, 5, 8]);
        let b = batch_points(64, 256);
        assert_eq!(&b[b.len() - 3..], &[192, 193, 256]);
        assert_eq!(batch_points(64, 1), vec![1]);
    }
}
