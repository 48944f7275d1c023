//! The two ranking-quality measures Chimera (chimera.txt) reports for its learned components:
//! the Kendall tau distance between a predicted and the true ranking (length predictor, Table 3)
//! and the macro mean average precision of per-model confidence scores (semantic router, Table
//! 2). Both families measure with them (`serving_family::workflows`, the chimera family).

/// Fraction of discordant pairs between `predicted` and `truth` (0 = same order, 0.5 = unrelated,
/// 1 = reversed). Pairs tied in `truth` are skipped; pairs tied only in `predicted` count one half.
/// Exact: the pairs are counted by sorting (Knight's method, O(n log n)) when every value is
/// finite, else pair by pair. `None` when no pair is untied in `truth`.
pub fn kendall_tau_distance(predicted: &[f64], truth: &[f64]) -> Option<f64> {
    assert_eq!(
        predicted.len(),
        truth.len(),
        "kendall_tau_distance: lengths differ"
    );
    let finite = predicted.iter().chain(truth).all(|x| x.is_finite());
    let (pairs, discordant2) = if finite {
        sorted_pair_counts(predicted, truth)
    } else {
        pairwise_counts(predicted, truth)
    };
    (pairs > 0).then(|| discordant2 as f64 / (2 * pairs) as f64)
}

/// The pairs untied in `truth` and twice their discordant count (a pair tied only in
/// `predicted` one half), pair by pair. Branch-free (the compiler vectorizes the inner loop): an
/// untied pair adds 1 when tied in `predicted`, else 2 when the two orders differ.
fn pairwise_counts(predicted: &[f64], truth: &[f64]) -> (u64, u64) {
    let n = predicted.len();
    let mut pairs = 0u64;
    let mut discordant2 = 0u64;
    for i in 0..n {
        let (ti, pi) = (truth[i], predicted[i]);
        for (&tj, &pj) in truth[i + 1..].iter().zip(&predicted[i + 1..]) {
            let (dt, dp) = (ti - tj, pi - pj);
            let untied = u64::from(dt != 0.0);
            let tie = u64::from(dp == 0.0);
            let differ = u64::from((dp > 0.0) != (dt > 0.0));
            pairs += untied;
            discordant2 += untied * (tie + 2 * differ * (1 - tie));
        }
    }
    (pairs, discordant2)
}

/// `pairwise_counts` for finite values (where `a - b == 0` is `a == b` and its sign is the
/// order), by sorting: the pairs untied in `truth` are all pairs less those tied in it; the
/// pairs tied in `predicted` alone are those tied in it less those tied in both; and, sorted by
/// (`truth`, `predicted`), a pair is discordant exactly when its `predicted` values are out of
/// order (a pair tied in `truth` is in order by the sort), counted while merge-sorting them.
fn sorted_pair_counts(predicted: &[f64], truth: &[f64]) -> (u64, u64) {
    let n = predicted.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_unstable_by(|&a, &b| {
        truth[a]
            .partial_cmp(&truth[b])
            .expect("finite")
            .then(predicted[a].partial_cmp(&predicted[b]).expect("finite"))
    });
    let all = (n as u64) * (n as u64).saturating_sub(1) / 2;
    let tied_truth = tied_pairs(order.iter().map(|&i| truth[i]));
    let tied_both = tied_pairs(order.iter().map(|&i| (truth[i], predicted[i])));
    let mut values: Vec<f64> = order.iter().map(|&i| predicted[i]).collect();
    let discordant = inversions(&mut values);
    // `values` is now `predicted` sorted.
    let tied_predicted = tied_pairs(values.iter().copied());
    (
        all - tied_truth,
        tied_predicted - tied_both + 2 * discordant,
    )
}

/// The pairs of equal neighbours' runs in a sorted sequence: `k (k - 1) / 2` a run of `k`.
fn tied_pairs<T: PartialEq>(sorted: impl Iterator<Item = T>) -> u64 {
    let (mut pairs, mut run) = (0u64, 0u64);
    let mut last: Option<T> = None;
    for x in sorted {
        if last.as_ref() == Some(&x) {
            run += 1;
        } else {
            pairs += run * run.saturating_sub(1) / 2;
            run = 1;
        }
        last = Some(x);
    }
    pairs + run * run.saturating_sub(1) / 2
}

/// The pairs `i < j` with `values[i] > values[j]`, sorting `values` (a bottom-up merge sort).
fn inversions(values: &mut Vec<f64>) -> u64 {
    let n = values.len();
    let mut from = std::mem::take(values);
    let mut to = vec![0.0; n];
    let mut count = 0u64;
    let mut width = 1;
    while width < n {
        for start in (0..n).step_by(2 * width) {
            let mid = (start + width).min(n);
            let end = (start + 2 * width).min(n);
            let (mut i, mut j) = (start, mid);
            for slot in &mut to[start..end] {
                if j == end || (i < mid && from[i] <= from[j]) {
                    *slot = from[i];
                    i += 1;
                } else {
                    // `from[j]` is smaller than every value left on the left.
                    count += (mid - i) as u64;
                    *slot = from[j];
                    j += 1;
                }
            }
        }
        std::mem::swap(&mut from, &mut to);
        width *= 2;
    }
    *values = from;
    count
}

/// Average precision of ranking by `scores` (descending) against binary `labels`: the mean of the
/// precision at each positive's rank. Tied scores are ranked pessimistically (negatives first).
/// `None` when there is no positive.
pub fn average_precision(scores: &[f64], labels: &[bool]) -> Option<f64> {
    assert_eq!(
        scores.len(),
        labels.len(),
        "average_precision: lengths differ"
    );
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| {
        scores[b]
            .total_cmp(&scores[a])
            .then(labels[a].cmp(&labels[b]))
    });
    let mut hits = 0u64;
    let mut sum = 0.0;
    for (rank, &idx) in order.iter().enumerate() {
        if labels[idx] {
            hits += 1;
            sum += hits as f64 / (rank + 1) as f64;
        }
    }
    (hits > 0).then(|| sum / hits as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kendall_distance_of_same_reversed_and_tied_orders() {
        let truth = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(
            kendall_tau_distance(&[10.0, 20.0, 30.0, 40.0], &truth),
            Some(0.0)
        );
        assert_eq!(
            kendall_tau_distance(&[4.0, 3.0, 2.0, 1.0], &truth),
            Some(1.0)
        );
        // One swapped adjacent pair out of six.
        let d = kendall_tau_distance(&[1.0, 3.0, 2.0, 4.0], &truth).unwrap();
        assert!((d - 1.0 / 6.0).abs() < 1e-12);
        // A constant prediction is a coin flip on every pair.
        assert_eq!(kendall_tau_distance(&[0.0; 4], &truth), Some(0.5));
        assert_eq!(kendall_tau_distance(&[1.0, 2.0], &[5.0, 5.0]), None);
    }

    /// The branch-free count against the pair-by-pair definition, on draws with ties in both.
    #[test]
    fn kendall_distance_counts_the_pairs_as_the_definition_does() {
        use rand::RngExt;
        let mut rng = crate::rng::stream(11, "kendall-model");
        for (n, spread) in [
            (0, 20),
            (1, 20),
            (2, 20),
            (7, 20),
            (64, 20),
            (300, 20),
            (513, 4),
            (2_000, 5_000),
        ] {
            let truth: Vec<f64> = (0..n)
                .map(|_| f64::from(rng.random_range(0..spread)))
                .collect();
            // Signed zeros among the predictions: equal, as `-` sees them.
            let predicted: Vec<f64> = (0..n)
                .map(|_| {
                    f64::from(rng.random_range(-7..8))
                        * if rng.random_bool(0.5) { 0.5 } else { -0.5 }
                })
                .collect();
            let (mut pairs, mut discordant2) = (0u64, 0u64);
            for i in 0..n {
                for j in i + 1..n {
                    if truth[i] == truth[j] {
                        continue;
                    }
                    pairs += 1;
                    if predicted[i] == predicted[j] {
                        discordant2 += 1;
                    } else if (predicted[i] > predicted[j]) != (truth[i] > truth[j]) {
                        discordant2 += 2;
                    }
                }
            }
            let expected = (pairs > 0).then(|| discordant2 as f64 / (2 * pairs) as f64);
            assert_eq!(
                kendall_tau_distance(&predicted, &truth),
                expected,
                "n = {n}"
            );
            assert_eq!(
                sorted_pair_counts(&predicted, &truth),
                pairwise_counts(&predicted, &truth),
                "n = {n}"
            );
        }
        // A value that is not finite: pair by pair, as the definition reads.
        let nan = kendall_tau_distance(&[1.0, f64::NAN, 3.0], &[1.0, 2.0, 3.0]);
        assert_eq!(nan, Some(0.0));
    }

    #[test]
    fn average_precision_of_perfect_and_worst_rankings() {
        let labels = [true, true, false, false];
        assert_eq!(average_precision(&[0.9, 0.8, 0.2, 0.1], &labels), Some(1.0));
        // Positives at ranks 3 and 4: (1/3 + 2/4) / 2.
        let worst = average_precision(&[0.1, 0.2, 0.8, 0.9], &labels).unwrap();
        assert!((worst - (1.0 / 3.0 + 0.5) / 2.0).abs() < 1e-12);
        assert_eq!(average_precision(&[0.5], &[false]), None);
    }
}
