//! Poisson arrivals: exponential inter-arrival gaps at a fixed rate, topics independent and uniform.

use super::{
    Arrival, ArrivalProcess, check_n_topics, check_rate, exponential_gap_s, uniform_topic,
};
use crate::rng::SimRng;
use crate::time::SimTime;

/// A homogeneous Poisson process of `n_requests` arrivals at `rate_per_s`.
///
/// Gaps are exact exponential draws in `f64` seconds. The absolute arrival time is accumulated in
/// `f64` and each one is rounded to the nearest nanosecond on its own, so rounding never
/// accumulates across arrivals. Per arrival the stream draws the gap, then the topic.
pub struct Poisson {
    rate_per_s: f64,
    n_topics: u32,
    remaining: usize,
    now_s: f64,
    rng: SimRng,
}

impl Poisson {
    /// # Panics
    /// If `rate_per_s` is not finite and positive or `n_topics` is zero (the scenario validates
    /// both before building a process).
    pub fn new(rate_per_s: f64, n_requests: usize, n_topics: u32, rng: SimRng) -> Poisson {
        check_rate("Poisson", rate_per_s);
        check_n_topics("Poisson", n_topics);
        Poisson {
            rate_per_s,
            n_topics,
            remaining: n_requests,
            now_s: 0.0,
            rng,
        }
    }
}

impl ArrivalProcess for Poisson {
    fn next_arrival(&mut self) -> Option<Arrival> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        self.now_s += exponential_gap_s(&mut self.rng, self.rate_per_s);
        Some(Arrival {
            time: SimTime::from_secs_f64(self.now_s),
            topic: uniform_topic(&mut self.rng, self.n_topics),
            prompt_tokens: None,
            output_tokens: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{
        assert_time_ordered, collect, consecutive_topic_agreement, gaps_s, mean_and_cv,
    };
    use super::*;
    use crate::rng::stream;

    const RATE_PER_S: f64 = 200.0;

    fn arrivals(seed: u64, n_requests: usize) -> Vec<Arrival> {
        collect(&mut Poisson::new(
            RATE_PER_S,
            n_requests,
            10,
            stream(seed, "arrivals"),
        ))
    }

    #[test]
    fn count_order_and_no_token_counts() {
        let arrivals = arrivals(1, 5_000);
        assert_eq!(arrivals.len(), 5_000);
        assert_time_ordered(&arrivals);
        assert!(arrivals.iter().all(|a| a.topic < 10));
        assert!(
            arrivals
                .iter()
                .all(|a| a.prompt_tokens.is_none() && a.output_tokens.is_none())
        );
    }

    #[test]
    fn gaps_are_exponential_with_the_requested_rate() {
        let n_requests = 100_001;
        let mut gaps = gaps_s(&arrivals(42, n_requests));
        let n = gaps.len();
        assert_eq!(n, 100_000);

        // Mean gap within 1% of 1/rate (the standard error is 1/sqrt(n) = 0.32%).
        let (mean, cv) = mean_and_cv(&gaps);
        let expected_mean = 1.0 / RATE_PER_S;
        assert!(
            (mean - expected_mean).abs() < 0.01 * expected_mean,
            "mean gap {mean} s, expected {expected_mean} s"
        );
        // An exponential has CV 1; the sample CV's standard error here is about 0.5%.
        assert!((cv - 1.0).abs() < 0.02, "gap CV {cv}, expected 1");

        // One-sample Kolmogorov-Smirnov test against Exp(rate) at the 1% level.
        gaps.sort_by(f64::total_cmp);
        let ks_statistic = gaps
            .iter()
            .enumerate()
            .map(|(i, &gap)| {
                let cdf = 1.0 - (-RATE_PER_S * gap).exp();
                let below = cdf - i as f64 / n as f64;
                let above = (i + 1) as f64 / n as f64 - cdf;
                below.max(above)
            })
            .fold(0.0_f64, f64::max);
        let critical_value = 1.628 / (n as f64).sqrt();
        assert!(
            ks_statistic < critical_value,
            "KS statistic {ks_statistic} >= critical value {critical_value}"
        );
    }

    #[test]
    fn topics_are_uniform_and_independent() {
        let arrivals = arrivals(7, 100_000);
        let mut counts = [0usize; 10];
        for arrival in &arrivals {
            counts[arrival.topic as usize] += 1;
        }
        // Chi-square goodness of fit, 9 degrees of freedom: the 1% critical value is 21.666.
        let expected = arrivals.len() as f64 / 10.0;
        let chi_square: f64 = counts
            .iter()
            .map(|&c| (c as f64 - expected).powi(2) / expected)
            .sum();
        assert!(
            chi_square < 21.666,
            "chi-square {chi_square}, counts {counts:?}"
        );
        // Consecutive agreement of independent uniform topics is 1/n_topics = 0.1 (standard
        // error 0.001 over 100_000 pairs).
        let agreement = consecutive_topic_agreement(&arrivals);
        assert!((agreement - 0.1).abs() < 0.005, "agreement {agreement}");
    }

    #[test]
    fn same_seed_gives_the_same_sequence() {
        assert_eq!(arrivals(3, 2_000), arrivals(3, 2_000));
        assert_ne!(arrivals(3, 2_000), arrivals(4, 2_000));
    }

    #[test]
    fn zero_requests_is_immediately_exhausted() {
        assert!(arrivals(1, 0).is_empty());
    }

    #[test]
    #[should_panic(expected = "rate_per_s must be finite and positive")]
    fn rejects_a_zero_rate() {
        let _ = Poisson::new(0.0, 1, 1, stream(1, "arrivals"));
    }
}
