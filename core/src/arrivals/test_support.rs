//! Helpers shared by the arrival processes' statistical tests.

use super::{Arrival, ArrivalProcess};

/// Drains `process` into a vector (tests only: real runs stream).
pub fn collect(process: &mut dyn ArrivalProcess) -> Vec<Arrival> {
    std::iter::from_fn(|| process.next_arrival()).collect()
}

/// Inter-arrival gaps in seconds, as the engine sees them (after rounding to nanoseconds).
pub fn gaps_s(arrivals: &[Arrival]) -> Vec<f64> {
    arrivals
        .windows(2)
        .map(|pair| pair[1].time.since(pair[0].time).as_secs_f64())
        .collect()
}

/// Sample mean and coefficient of variation (standard deviation / mean).
pub fn mean_and_cv(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, variance.sqrt() / mean)
}

/// Fraction of consecutive request pairs that carry the same topic.
pub fn consecutive_topic_agreement(arrivals: &[Arrival]) -> f64 {
    let same = arrivals
        .windows(2)
        .filter(|pair| pair[0].topic == pair[1].topic)
        .count();
    same as f64 / (arrivals.len() - 1) as f64
}

/// Asserts that arrival times never decrease.
pub fn assert_time_ordered(arrivals: &[Arrival]) {
    for pair in arrivals.windows(2) {
        assert!(
            pair[0].time <= pair[1].time,
            "arrivals out of order: {:?} then {:?}",
            pair[0],
            pair[1]
        );
    }
}
