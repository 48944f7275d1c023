//! When to stop repeating a point: once its median is known to a stated precision. The
//! confidence interval of the median is distribution-free, from order statistics: with `n`
//! sorted samples, `[x(l), x(n + 1 - l)]` covers the true median with probability
//! `1 - 2 P(B < l)`, `B ~ Binomial(n, 1/2)` (the number of samples below the median), so `l`
//! is the largest rank with `P(B < l) <= (1 - confidence) / 2`. A point stops once
//! `(x(u) - x(l)) / 2 <= precision x median`, after at least `min_repetitions` and at most
//! `max_repetitions` samples; a fixed count is the rule with `min = max`.

use statrs::distribution::{Binomial, DiscreteCDF};

/// How long to repeat a point.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StoppingRule {
    /// Coverage of the median's interval, e.g. 0.95.
    pub confidence: f64,
    /// Largest accepted half-width of that interval, relative to the median, e.g. 0.02.
    pub relative_half_width: f64,
    pub min_repetitions: usize,
    pub max_repetitions: usize,
}

impl Default for StoppingRule {
    /// Relative half-width 2 % at 95 %, 10 to 500 repetitions (500 is GEM's fixed count).
    fn default() -> Self {
        StoppingRule {
            confidence: 0.95,
            relative_half_width: 0.02,
            min_repetitions: 10,
            max_repetitions: 500,
        }
    }
}

impl StoppingRule {
    /// Exactly `repetitions` samples, whatever their spread.
    pub fn fixed(repetitions: usize) -> StoppingRule {
        StoppingRule {
            min_repetitions: repetitions,
            max_repetitions: repetitions,
            ..StoppingRule::default()
        }
    }

    /// Whether the count is fixed (`min = max`).
    pub fn is_fixed(&self) -> bool {
        self.min_repetitions == self.max_repetitions
    }

    /// The first problem with the rule, naming the flag.
    pub fn check(&self) -> Result<(), String> {
        if !(self.confidence > 0.0 && self.confidence < 1.0) {
            return Err(format!(
                "--confidence: {} is not strictly between 0 and 1",
                self.confidence
            ));
        }
        if !(self.relative_half_width > 0.0 && self.relative_half_width.is_finite()) {
            return Err(format!(
                "--precision: {} is not a positive number",
                self.relative_half_width
            ));
        }
        if self.min_repetitions == 0 {
            return Err("--min-repetitions: must be at least 1".into());
        }
        if self.max_repetitions < self.min_repetitions {
            return Err(format!(
                "--max-repetitions: {} is below --min-repetitions {}",
                self.max_repetitions, self.min_repetitions
            ));
        }
        Ok(())
    }

    /// One line for logs and profile notes.
    pub fn describe(&self) -> String {
        if self.is_fixed() {
            format!("{} repetitions per point", self.max_repetitions)
        } else {
            format!(
                "repetitions until the {:.0} % order-statistic interval of the median has a \
                 relative half-width <= {} % ({} to {} per point)",
                self.confidence * 100.0,
                self.relative_half_width * 100.0,
                self.min_repetitions,
                self.max_repetitions
            )
        }
    }
}

/// The 1-based ranks `(l, u = n + 1 - l)` of the order statistics that bound the median with
/// at least `confidence`, or `None` when `n` samples are too few for any such interval.
pub fn median_interval_ranks(n: usize, confidence: f64) -> Option<(usize, usize)> {
    if n == 0 {
        return None;
    }
    let tail = (1.0 - confidence) / 2.0;
    let below = Binomial::new(0.5, n as u64).expect("p = 1/2 is a probability");
    // P(B < l) = cdf(l - 1) grows with l; find the largest l in 1..=n/2 with cdf(l - 1) <= tail.
    let (mut good, mut bad) = (0usize, n / 2 + 1);
    while bad - good > 1 {
        let l = (good + bad) / 2;
        if below.cdf(l as u64 - 1) <= tail {
            good = l;
        } else {
            bad = l;
        }
    }
    (good >= 1).then_some((good, n + 1 - good))
}

/// The interval's half-width relative to the median of `sorted` samples (ascending), or
/// `None` when there are too few for an interval at `confidence`.
pub fn relative_half_width(sorted: &[f64], confidence: f64) -> Option<f64> {
    let (l, u) = median_interval_ranks(sorted.len(), confidence)?;
    let median = median_of_sorted(sorted);
    let half = (sorted[u - 1] - sorted[l - 1]) / 2.0;
    Some(if median > 0.0 {
        half / median
    } else if half == 0.0 {
        0.0
    } else {
        f64::INFINITY
    })
}

/// The median of ascending samples (the mean of the middle two for an even count).
pub fn median_of_sorted(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

/// Why a point stopped repeating.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The median's interval became narrow enough (or the count is fixed and was reached).
    Precise,
    /// `max_repetitions` were taken and the interval was still too wide.
    Maximum,
}

/// The samples of one point and why they ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Repeated {
    pub samples: Vec<f64>,
    pub stop: Stop,
}

/// Draws samples from `draw(count)` until `rule` is met: first `min_repetitions`, then
/// batches of a quarter of the samples so far (at least one, never past the maximum), checking
/// the interval after each batch. `draw` is the device (or, in tests, a fixed sequence).
pub fn repeat_until_precise<E>(
    rule: &StoppingRule,
    mut draw: impl FnMut(usize) -> Result<Vec<f64>, E>,
) -> Result<Repeated, E> {
    let mut samples = draw(rule.min_repetitions)?;
    let mut sorted = samples.clone();
    loop {
        sorted.sort_by(f64::total_cmp);
        let precise = rule.is_fixed()
            || relative_half_width(&sorted, rule.confidence)
                .is_some_and(|w| w <= rule.relative_half_width);
        if precise {
            return Ok(Repeated {
                samples,
                stop: Stop::Precise,
            });
        }
        if samples.len() >= rule.max_repetitions {
            return Ok(Repeated {
                samples,
                stop: Stop::Maximum,
            });
        }
        let batch = (samples.len() / 4).clamp(1, rule.max_repetitions - samples.len());
        let more = draw(batch)?;
        sorted.extend_from_slice(&more);
        samples.extend(more);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    /// Binomial(n, 1/2) cumulative probabilities by hand: sum of C(n, i) / 2^n for i <= k.
    fn binomial_cdf_by_hand(n: u64, k: u64) -> f64 {
        let mut c = 1.0f64;
        let mut sum = 0.0;
        for i in 0..=k {
            if i > 0 {
                c = c * (n - i + 1) as f64 / i as f64;
            }
            sum += c;
        }
        sum / 2f64.powi(n as i32)
    }

    #[test]
    fn median_ranks_for_twenty_samples_at_95_percent_are_6_and_15() {
        // P(B <= 5) = (1 + 20 + 190 + 1140 + 4845 + 15504) / 2^20 = 21700 / 1048576 = 0.0207
        // <= 0.025, and P(B <= 6) = 60460 / 1048576 = 0.0577 > 0.025: l = 6, u = 21 - 6 = 15,
        // coverage 1 - 2 x 0.0207 = 0.9586.
        assert!((binomial_cdf_by_hand(20, 5) - 21_700.0 / 1_048_576.0).abs() < 1e-15);
        assert_eq!(median_interval_ranks(20, 0.95), Some((6, 15)));
        // n = 10: P(B <= 1) = 11/1024 = 0.0107, P(B <= 2) = 56/1024 = 0.0547 -> (2, 9).
        assert_eq!(median_interval_ranks(10, 0.95), Some((2, 9)));
        // n = 6: P(B = 0) = 1/64 = 0.0156 -> (1, 6); n = 5: 1/32 = 0.031 > 0.025 -> none.
        assert_eq!(median_interval_ranks(6, 0.95), Some((1, 6)));
        assert_eq!(median_interval_ranks(5, 0.95), None);
        // At 99 %, n = 20: P(B <= 3) = 1351/2^20 = 0.0013 <= 0.005 < P(B <= 4) = 0.0059.
        assert_eq!(median_interval_ranks(20, 0.99), Some((4, 17)));
        // The ranks agree with the by-hand binomial for every n up to 60.
        for n in 1..=60u64 {
            let expected = (1..=n / 2)
                .filter(|&l| binomial_cdf_by_hand(n, l - 1) <= 0.025)
                .max()
                .map(|l| (l as usize, (n + 1 - l) as usize));
            assert_eq!(median_interval_ranks(n as usize, 0.95), expected, "n = {n}");
        }
    }

    #[test]
    fn half_width_reads_the_order_statistics() {
        // Twenty samples 91..=110: x(6) = 96, x(15) = 105, median 100.5.
        let sorted: Vec<f64> = (91..=110).map(f64::from).collect();
        let w = relative_half_width(&sorted, 0.95).unwrap();
        assert!((w - 4.5 / 100.5).abs() < 1e-12, "{w}");
        assert_eq!(relative_half_width(&sorted[..5], 0.95), None);
    }

    /// A fixed sequence replayed in order: no device, no clock.
    fn sequence(values: Vec<f64>) -> impl FnMut(usize) -> Result<Vec<f64>, Infallible> {
        let mut next = 0;
        move |count| {
            let out = (0..count)
                .map(|i| values[(next + i) % values.len()])
                .collect();
            next += count;
            Ok(out)
        }
    }

    #[test]
    fn constant_samples_stop_at_the_minimum() {
        let rule = StoppingRule::default();
        let r = repeat_until_precise(&rule, sequence(vec![1000.0])).unwrap();
        assert_eq!((r.samples.len(), r.stop), (10, Stop::Precise));
    }

    #[test]
    fn wildly_spread_samples_run_to_the_maximum() {
        // Spread evenly in log over four decades (1 to 10^4): near the median (100) one rank
        // is about 100 x ln(10) x 4 / n apart, so the interval's half-width is about
        // 9 / sqrt(n) of the median, far above 2 % at n = 500.
        let rule = StoppingRule::default();
        let spread: Vec<f64> = (0..1000)
            .map(|i| 10f64.powf(4.0 * ((i as f64 * 0.618_033_988_7) % 1.0)))
            .collect();
        let r = repeat_until_precise(&rule, sequence(spread)).unwrap();
        assert_eq!((r.samples.len(), r.stop), (500, Stop::Maximum));
    }

    #[test]
    fn moderate_spread_stops_in_between_with_the_stated_precision() {
        // 1000 +- 5 % spread evenly (a golden-ratio sequence): the interval narrows like
        // 1/sqrt(n), so it takes more than the minimum and far fewer than the maximum.
        let values: Vec<f64> = (0..1000)
            .map(|i| 1000.0 * (0.95 + 0.1 * ((i as f64 * 0.618_033_988_7) % 1.0)))
            .collect();
        let rule = StoppingRule::default();
        let r = repeat_until_precise(&rule, sequence(values)).unwrap();
        assert_eq!(r.stop, Stop::Precise);
        assert!(
            r.samples.len() > 10 && r.samples.len() < 100,
            "{}",
            r.samples.len()
        );
        let mut sorted = r.samples.clone();
        sorted.sort_by(f64::total_cmp);
        assert!(relative_half_width(&sorted, 0.95).unwrap() <= 0.02);
    }

    #[test]
    fn a_fixed_rule_takes_exactly_its_count_and_bad_rules_name_the_flag() {
        let spread = vec![1.0, 1000.0];
        let r = repeat_until_precise(&StoppingRule::fixed(3), sequence(spread)).unwrap();
        assert_eq!((r.samples.len(), r.stop), (3, Stop::Precise));
        let bad = StoppingRule {
            max_repetitions: 5,
            ..StoppingRule::default()
        };
        assert!(bad.check().unwrap_err().starts_with("--max-repetitions"));
        let bad = StoppingRule {
            relative_half_width: 0.0,
            ..StoppingRule::default()
        };
        assert!(bad.check().unwrap_err().starts_with("--precision"));
    }
}
