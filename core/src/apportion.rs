//! Largest-remainder rounding: integer counts that sum to a total and follow given shares.

/// Integers summing to `total` in proportion to `shares` (negative shares count as zero): each
/// gets the floor of its exact share, and the units left go to the largest remainders, ties to
/// the lower index. With no positive share the total is split evenly, the remainder to the
/// first entries.
pub fn apportion(total: u32, shares: &[f64]) -> Vec<u32> {
    if shares.is_empty() {
        return Vec::new();
    }
    let sum: f64 = shares.iter().map(|s| s.max(0.0)).sum();
    let exact: Vec<f64> = if sum > 0.0 {
        shares
            .iter()
            .map(|s| f64::from(total) * s.max(0.0) / sum)
            .collect()
    } else {
        vec![f64::from(total) / shares.len() as f64; shares.len()]
    };
    let mut counts: Vec<u32> = exact.iter().map(|x| x.floor() as u32).collect();
    let mut left = total.saturating_sub(counts.iter().sum::<u32>());
    let mut order: Vec<usize> = (0..shares.len()).collect();
    order.sort_by(|&a, &b| {
        let (ra, rb) = (exact[a] - exact[a].floor(), exact[b] - exact[b].floor());
        rb.total_cmp(&ra).then(a.cmp(&b))
    });
    for i in order {
        if left == 0 {
            break;
        }
        counts[i] += 1;
        left -= 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::apportion;

    #[test]
    fn follows_the_largest_remainders_and_splits_evenly_without_shares() {
        assert_eq!(apportion(8, &[0.5, 2.6, 0.9, 4.0]), vec![0, 3, 1, 4]);
        assert_eq!(apportion(10, &[1.0, 1.0, 1.0]), vec![4, 3, 3]);
        assert_eq!(apportion(4, &[0.0, 0.0, 0.0]), vec![2, 1, 1]);
        assert_eq!(apportion(5, &[-1.0, 1.0]), vec![0, 5]);
        assert!(apportion(3, &[]).is_empty());
        for total in [0, 1, 7, 1000] {
            assert_eq!(
                apportion(total, &[0.3, 0.2, 0.5]).iter().sum::<u32>(),
                total
            );
        }
    }
}
