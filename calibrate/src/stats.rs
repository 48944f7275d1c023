//! Summaries of repeated timings: median and spread (10th/90th percentiles, min, max), with
//! statrs's order statistics.

use statrs::statistics::{Data, Max, Min, OrderStatistics};

/// One measured point: `[x, median, p10, p90, min, max]`, as profiles store it.
pub fn summarize(x: f64, samples_ns: &[f64]) -> [f64; 6] {
    let mut data = Data::new(samples_ns.to_vec());
    [
        x,
        data.median(),
        data.percentile(10),
        data.percentile(90),
        data.min(),
        data.max(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_spread() {
        let samples: Vec<f64> = (1..=101).rev().map(f64::from).collect();
        let row = summarize(7.0, &samples);
        assert_eq!(row[0], 7.0);
        assert_eq!(row[1], 51.0);
        assert!(
            (row[2] - 11.0).abs() < 1.0 && (row[3] - 91.0).abs() < 1.0,
            "{row:?}"
        );
        assert_eq!((row[4], row[5]), (1.0, 101.0));
        let one = summarize(1.0, &[5.0]);
        assert_eq!(one, [1.0, 5.0, 5.0, 5.0, 5.0, 5.0]);
    }
}
