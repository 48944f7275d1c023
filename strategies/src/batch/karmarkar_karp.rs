//! karmarkar_karp: Karmarkar-Karp number partitioning on the requests' scalar total loads
//! (caps.txt: "karmarkar_karp | Number partitioning | O(W log W) | Suboptimal for vectors").

use expertsim_serving::policies::batch::{BatchSelection, BatchSelector, CandidateWindow};
use expertsim_serving::rng::SimRng;

use super::ldm::Ldm;

/// The balanced largest-differencing method on scalar totals (see `ldm` for the layout):
/// the oldest `k * m` unchosen candidates (`m` = picks still to make, `k` = unchosen / `m`)
/// are split into `k` parts of `m` candidates with near-equal total load, as KK would split
/// the window into `k` equally long batches. Each tuple (initially a row of `k` candidates of
/// similar total) is measured by its KK difference, `max - min` of its part totals; the two
/// tuples with the largest differences are combined by joining the heaviest part of one with
/// the lightest part of the other, second heaviest with second lightest, and so on.
///
/// The batch that falls out: the pre-seeded candidates plus the part that holds the oldest
/// unchosen candidate, so the oldest waiting request always goes next. Only totals are
/// looked at, so the batch has an average total, not a balanced expert load: suboptimal for
/// vectors, as caps.txt says. With `m = 1` (one pick left) or fewer than `2m` unchosen this
/// degenerates to FCFS.
#[derive(Debug, Default)]
pub struct KarmarkarKarp {
    ldm: Ldm,
    scratch: Vec<usize>,
}

impl BatchSelector for KarmarkarKarp {
    fn select(
        &mut self,
        window: &CandidateWindow<'_>,
        selection: &mut BatchSelection,
        _rng: &mut SimRng,
    ) {
        let ldm = &mut self.ldm;
        if !ldm.setup(window, selection) {
            return;
        }
        while ldm.alive.len() > 1 {
            let (pa, pb) = ldm.two_largest(|t| {
                let sums = ldm.tuple(t).iter().map(|&h| ldm.sums[h]);
                let hi = sums.clone().fold(f64::NEG_INFINITY, f64::max);
                let lo = sums.fold(f64::INFINITY, f64::min);
                hi - lo
            });
            let (ta, tb) = (ldm.alive[pa], ldm.alive[pb]);
            ldm.sort_tuple(ta, true);
            ldm.sort_tuple(tb, false);
            for g in 0..ldm.parts {
                let (a, b) = (ldm.tuple(ta)[g], ldm.tuple(tb)[g]);
                ldm.join(a, b);
            }
            ldm.alive.remove(pb);
        }
        let head = ldm.part_holding(ldm.oldest());
        ldm.add_part(window, selection, head, &mut self.scratch);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::testutil::{random_window, run, sorted};
    use rand::RngExt;

    fn scalar_window(totals: &[f32]) -> (usize, Vec<f32>) {
        (1, totals.to_vec())
    }

    #[test]
    fn pairs_heavy_with_light_and_takes_the_part_of_the_oldest() {
        // Totals 1, 9, 10, 2: rows (10, 9) and (2, 1) combine into {10, 1} and {9, 2}.
        let (dims, loads) = scalar_window(&[1.0, 9.0, 10.0, 2.0]);
        let window = CandidateWindow::new(dims, &loads);
        assert_eq!(
            run(&mut KarmarkarKarp::default(), &window, 2, &[], 0),
            vec![0, 2]
        );
        // Pre-seeded with 1, one pick is left (m = 1): three one-candidate parts, and the
        // part of the oldest (0) goes, as in FCFS.
        assert_eq!(
            run(&mut KarmarkarKarp::default(), &window, 2, &[1], 0),
            vec![1, 0]
        );
    }

    #[test]
    fn three_way_split_of_a_small_window() {
        // 9 candidates, batch of 3: k = 3 parts of 3. Sorted totals 9 8 7 | 6 5 4 | 3 2 1;
        // KK: rows (9,8,7) (6,5,4) (3,2,1), spreads 2, 2, 2: combine rows 0 and 1 into
        // (9+4, 8+5, 7+6) = (13, 13, 13), then with (1, 2, 3) -> (14, 15, 16) in some order.
        let totals = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0];
        let (dims, loads) = scalar_window(&totals);
        let window = CandidateWindow::new(dims, &loads);
        let chosen = sorted(run(&mut KarmarkarKarp::default(), &window, 3, &[], 0));
        // Candidate 0 (total 1) was joined to the heaviest part (9+4 = 13 vs 13, 13: the
        // first, headed by 9): {9, 4, 1} -> indices {8, 3, 0}.
        assert_eq!(chosen, vec![0, 3, 8]);
    }

    #[test]
    fn two_way_batch_total_is_within_the_largest_row_difference_of_half() {
        // BLDM guarantee for two parts: |part - other| <= max over rows of the pair
        // difference.
        for seed in 0..20 {
            let mut rng = expertsim_serving::rng::stream(seed, "kk");
            let totals: Vec<f32> = (0..16)
                .map(|_| rng.random_range(1..200u32) as f32)
                .collect();
            let (dims, loads) = scalar_window(&totals);
            let window = CandidateWindow::new(dims, &loads);
            let chosen = run(&mut KarmarkarKarp::default(), &window, 8, &[], 0);
            assert!(chosen.contains(&0));
            let batch: f32 = chosen.iter().map(|&i| totals[i]).sum();
            let all: f32 = totals.iter().sum();
            let mut desc = totals.clone();
            desc.sort_by(|a, b| b.total_cmp(a));
            let bound = desc.chunks(2).map(|p| p[0] - p[1]).fold(0.0, f32::max);
            assert!(
                (batch - (all - batch)).abs() <= bound,
                "seed {seed}: {batch} vs {}",
                all - batch
            );
        }
    }

    #[test]
    fn ignores_where_the_load_falls() {
        // Permuting each candidate's vector entries changes nothing: only totals count.
        let (dims, loads) = random_window(4, 32, 64);
        let window = CandidateWindow::new(dims, &loads);
        let mut flipped = loads.clone();
        for row in flipped.chunks_mut(dims) {
            row.reverse();
        }
        let flipped_window = CandidateWindow::new(dims, &flipped);
        let a = run(&mut KarmarkarKarp::default(), &window, 8, &[0], 0);
        let b = run(&mut KarmarkarKarp::default(), &flipped_window, 8, &[0], 0);
        assert_eq!(a, b);
        assert_ne!(sorted(a), (0..8).collect::<Vec<_>>());
    }
}
