//! One sampler per distribution, for every family: log-normal (from a median or from a mean, with
//! its log-space sigma), exponential, gamma (from a mean and a coefficient of variation),
//! uniform, fixed, Zipf and categorical (an index drawn in proportion to given weights), and the
//! expected maximum of n standard normals (CAPS's CV model, GEM's variability at scale);
//! `TokenCount`, a log-normal rounded and clamped to `[1, max]`; and `TokenLength`, a prompt or
//! output length drawn from any of fixed, discrete uniform, rounded continuous uniform, Zipf or
//! that log-normal. A sampler is
//! built once, its parameters checked, and draws from the `SimRng` stream the caller passes in.

use crate::rng::SimRng;
use rand::RngExt;
use rand_distr::Distribution;

/// A distribution's parameters are out of range; the message names the parameter and its value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DistributionError(String);

fn check(ok: bool, message: impl FnOnce() -> String) -> Result<(), DistributionError> {
    if ok {
        Ok(())
    } else {
        Err(DistributionError(message()))
    }
}

/// `exp(mu + sigma Z)` with `Z` standard normal. Drawn through `rand_distr::LogNormal` (one
/// standard-normal draw per sample, the ziggurat method), so its sequence is that crate's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LogNormal {
    mu: f64,
    sigma: f64,
    inner: rand_distr::LogNormal<f64>,
}

impl LogNormal {
    fn new(mu: f64, sigma: f64) -> Result<LogNormal, DistributionError> {
        check(sigma.is_finite() && sigma >= 0.0, || {
            format!("sigma must be finite and >= 0, got {sigma}")
        })?;
        let inner = rand_distr::LogNormal::new(mu, sigma)
            .map_err(|e| DistributionError(format!("log-normal({mu}, {sigma}): {e}")))?;
        Ok(LogNormal { mu, sigma, inner })
    }

    /// The log-normal whose median is `median` (`mu = ln median`).
    pub fn from_median(median: f64, sigma: f64) -> Result<LogNormal, DistributionError> {
        check(median.is_finite() && median > 0.0, || {
            format!("median must be finite and positive, got {median}")
        })?;
        LogNormal::new(median.ln(), sigma)
    }

    /// The log-normal whose mean is `mean` (`mu = ln mean - sigma^2 / 2`).
    pub fn from_mean(mean: f64, sigma: f64) -> Result<LogNormal, DistributionError> {
        check(mean.is_finite() && mean > 0.0, || {
            format!("mean must be finite and positive, got {mean}")
        })?;
        LogNormal::new(mean.ln() - sigma * sigma / 2.0, sigma)
    }

    pub fn median(&self) -> f64 {
        self.mu.exp()
    }

    pub fn mean(&self) -> f64 {
        (self.mu + self.sigma * self.sigma / 2.0).exp()
    }

    pub fn sample(&self, rng: &mut SimRng) -> f64 {
        self.inner.sample(rng)
    }
}

/// Exponential with rate `rate` (mean `1 / rate`), by inversion of the CDF: `-ln(1 - u) / rate`
/// with `u` uniform in `[0, 1)`: exact (no clipping), finite, one uniform draw per sample, and
/// written out here so the sequence cannot change with a crate's sampling algorithm.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Exponential {
    rate: f64,
}

impl Exponential {
    pub fn new(rate: f64) -> Result<Exponential, DistributionError> {
        check(rate.is_finite() && rate > 0.0, || {
            format!("rate must be finite and positive, got {rate}")
        })?;
        Ok(Exponential { rate })
    }

    pub fn sample(&self, rng: &mut SimRng) -> f64 {
        let u: f64 = rng.random::<f64>();
        -(-u).ln_1p() / self.rate
    }
}

/// Gamma with shape `k` and scale `theta`, built from its mean `k theta` and coefficient of
/// variation `1 / sqrt(k)`: the inter-arrival gaps of a gamma renewal process (CV 1 is
/// exponential, below 1 more regular, above 1 burstier). Drawn through `rand_distr::Gamma`
/// (Marsaglia and Tsang's method), so its sequence is that crate's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gamma {
    shape: f64,
    scale: f64,
    inner: rand_distr::Gamma<f64>,
}

impl Gamma {
    /// The gamma with mean `mean` and coefficient of variation `cv` (shape `1 / cv^2`, scale
    /// `mean cv^2`).
    pub fn from_mean_cv(mean: f64, cv: f64) -> Result<Gamma, DistributionError> {
        check(mean.is_finite() && mean > 0.0, || {
            format!("mean must be finite and positive, got {mean}")
        })?;
        check(cv.is_finite() && cv > 0.0, || {
            format!("cv must be finite and positive, got {cv}")
        })?;
        let shape = 1.0 / (cv * cv);
        let scale = mean * cv * cv;
        let inner = rand_distr::Gamma::new(shape, scale)
            .map_err(|e| DistributionError(format!("gamma(mean {mean}, cv {cv}): {e}")))?;
        Ok(Gamma {
            shape,
            scale,
            inner,
        })
    }

    pub fn shape(&self) -> f64 {
        self.shape
    }

    pub fn scale(&self) -> f64 {
        self.scale
    }

    pub fn sample(&self, rng: &mut SimRng) -> f64 {
        self.inner.sample(rng)
    }
}

/// Uniform on the closed interval `[low, high]` (`rand`'s `random_range(low..=high)`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Uniform {
    low: f64,
    high: f64,
}

impl Uniform {
    pub fn new(low: f64, high: f64) -> Result<Uniform, DistributionError> {
        check(low.is_finite() && high.is_finite() && low <= high, || {
            format!("uniform needs finite low <= high, got [{low}, {high}]")
        })?;
        Ok(Uniform { low, high })
    }

    pub fn sample(&self, rng: &mut SimRng) -> f64 {
        rng.random_range(self.low..=self.high)
    }

    /// The upper end of the range.
    pub fn high(&self) -> f64 {
        self.high
    }
}

/// Always `value`; draws nothing from the stream.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fixed(pub f64);

impl Fixed {
    pub fn sample(&self, _rng: &mut SimRng) -> f64 {
        self.0
    }
}

/// Zipf over `n` ranks with exponent `s`: rank `k` (0-based, 0 the most popular) has probability
/// `(k + 1)^-s / H` with `H = sum_j (j + 1)^-s`. Drawn by inversion of the tabulated CDF (one
/// uniform draw and a binary search per sample).
#[derive(Clone, Debug, PartialEq)]
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    pub fn new(n: usize, s: f64) -> Result<Zipf, DistributionError> {
        check(n >= 1, || "zipf needs at least one rank, got 0".into())?;
        check(s.is_finite() && s >= 0.0, || {
            format!("zipf exponent must be finite and >= 0, got {s}")
        })?;
        let weights: Vec<f64> = (1..=n).map(|k| (k as f64).powf(-s)).collect();
        let total: f64 = weights.iter().sum();
        let mut running = 0.0;
        let mut cdf: Vec<f64> = weights
            .iter()
            .map(|w| {
                running += w;
                running / total
            })
            .collect();
        // Rounding may leave the last entry a hair below 1; a draw near 1 must still land.
        cdf[n - 1] = 1.0;
        Ok(Zipf { cdf })
    }

    /// Probability of rank `k` (0-based).
    pub fn probability(&self, k: usize) -> f64 {
        self.cdf[k] - if k == 0 { 0.0 } else { self.cdf[k - 1] }
    }

    /// A rank in `0..n`.
    pub fn sample(&self, rng: &mut SimRng) -> usize {
        let u: f64 = rng.random::<f64>();
        self.cdf
            .partition_point(|&c| c <= u)
            .min(self.cdf.len() - 1)
    }
}

/// An index in `0..weights.len()` drawn with probability `weights[i] / sum(weights)`, by
/// inversion of the cumulative weights (one uniform draw and a binary search per sample); an
/// index of weight 0 is never drawn.
#[derive(Clone, Debug, PartialEq)]
pub struct Categorical {
    cumulative: Vec<f64>,
    /// The last index of positive weight (where a draw rounding past the total lands).
    last: usize,
}

impl Categorical {
    pub fn new(weights: &[f64]) -> Result<Categorical, DistributionError> {
        check(weights.iter().all(|w| w.is_finite() && *w >= 0.0), || {
            format!("weights must be finite and >= 0, got {weights:?}")
        })?;
        let last = weights.iter().rposition(|&w| w > 0.0);
        let last = last.ok_or_else(|| {
            DistributionError(format!("weights need one positive entry, got {weights:?}"))
        })?;
        let mut running = 0.0;
        let cumulative = weights
            .iter()
            .map(|w| {
                running += w;
                running
            })
            .collect();
        Ok(Categorical { cumulative, last })
    }

    /// Probability of index `i`.
    pub fn probability(&self, i: usize) -> f64 {
        let below = if i == 0 { 0.0 } else { self.cumulative[i - 1] };
        (self.cumulative[i] - below) / self.cumulative[self.cumulative.len() - 1]
    }

    pub fn sample(&self, rng: &mut SimRng) -> usize {
        let total = self.cumulative[self.cumulative.len() - 1];
        let u = rng.random::<f64>() * total;
        self.cumulative.partition_point(|&c| c <= u).min(self.last)
    }
}

/// A token count: a log-normal draw rounded to the nearest integer and clamped to `[1, max]`
/// (a request has at least one token; `max` is the context limit the workload assumes).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenCount {
    log_normal: LogNormal,
    max: u32,
}

impl TokenCount {
    pub fn new(log_normal: LogNormal, max: u32) -> Result<TokenCount, DistributionError> {
        check(max >= 1, || "max must be at least 1, got 0".into())?;
        Ok(TokenCount { log_normal, max })
    }

    /// Log-normal with median `median` and log-space sigma `sigma`, clamped to `[1, max]`.
    pub fn from_median(median: f64, sigma: f64, max: u32) -> Result<TokenCount, DistributionError> {
        TokenCount::new(LogNormal::from_median(median, sigma)?, max)
    }

    /// Log-normal with mean `mean` (before rounding and clamping) and log-space sigma `sigma`.
    pub fn from_mean(mean: f64, sigma: f64, max: u32) -> Result<TokenCount, DistributionError> {
        TokenCount::new(LogNormal::from_mean(mean, sigma)?, max)
    }

    pub fn sample(&self, rng: &mut SimRng) -> u32 {
        // `as u32` saturates (an overflowing draw becomes u32::MAX, then `max`).
        (self.log_normal.sample(rng).round().max(1.0) as u32).min(self.max)
    }
}

/// A prompt or output length in tokens, from one of the length distributions a workload names:
/// always `value`; discrete uniform on `[low, high]`; Zipf over `[min, max]` (length `min + k`
/// has probability proportional to `(k + 1)^-exponent`, so the shortest is the most common); a
/// continuous uniform on `mean x [1 - spread, 1 + spread]` rounded to the nearest integer (the
/// end points half as likely as the lengths between: ExpertWeave's request lengths); or a
/// [`TokenCount`] log-normal. Every draw is at least 1.
#[derive(Clone, Debug, PartialEq)]
pub enum TokenLength {
    Fixed(u32),
    Uniform { low: u32, high: u32 },
    RoundedUniform(Uniform),
    Zipf { min: u32, ranks: Zipf },
    LogNormal(TokenCount),
}

impl TokenLength {
    /// Always `value` (at least 1).
    pub fn fixed(value: u32) -> Result<TokenLength, DistributionError> {
        check(value >= 1, || "a length must be at least 1, got 0".into())?;
        Ok(TokenLength::Fixed(value))
    }

    /// Each of `low..=high` equally likely (`1 <= low <= high`).
    pub fn uniform(low: u32, high: u32) -> Result<TokenLength, DistributionError> {
        check(low >= 1 && low <= high, || {
            format!("uniform lengths need 1 <= low <= high, got [{low}, {high}]")
        })?;
        Ok(TokenLength::Uniform { low, high })
    }

    /// A continuous uniform on `mean x [1 - spread, 1 + spread]`, rounded, at least 1
    /// (`mean >= 1`, `0 <= spread < 1`).
    pub fn rounded_uniform(mean: f64, spread: f64) -> Result<TokenLength, DistributionError> {
        check(mean.is_finite() && mean >= 1.0, || {
            format!("a rounded uniform length needs a mean of at least 1, got {mean}")
        })?;
        check(spread.is_finite() && (0.0..1.0).contains(&spread), || {
            format!("a rounded uniform length needs a spread in [0, 1), got {spread}")
        })?;
        Ok(TokenLength::RoundedUniform(Uniform::new(
            mean * (1.0 - spread),
            mean * (1.0 + spread),
        )?))
    }

    /// Zipf over the lengths `min..=max` with exponent `exponent` (`1 <= min <= max`).
    pub fn zipf(min: u32, max: u32, exponent: f64) -> Result<TokenLength, DistributionError> {
        check(min >= 1 && min <= max, || {
            format!("zipf lengths need 1 <= min <= max, got [{min}, {max}]")
        })?;
        Ok(TokenLength::Zipf {
            min,
            ranks: Zipf::new((max - min) as usize + 1, exponent)?,
        })
    }

    /// The longest length it can draw.
    pub fn max(&self) -> u32 {
        match self {
            TokenLength::Fixed(v) => *v,
            TokenLength::Uniform { high, .. } => *high,
            TokenLength::RoundedUniform(u) => (u.high().round() as u32).max(1),
            TokenLength::Zipf { min, ranks } => min + (ranks.cdf.len() as u32 - 1),
            TokenLength::LogNormal(count) => count.max,
        }
    }

    pub fn sample(&self, rng: &mut SimRng) -> u32 {
        match self {
            TokenLength::Fixed(v) => *v,
            TokenLength::Uniform { low, high } => rng.random_range(*low..=*high),
            TokenLength::RoundedUniform(u) => (u.sample(rng).round() as u32).max(1),
            TokenLength::Zipf { min, ranks } => min + ranks.sample(rng) as u32,
            TokenLength::LogNormal(count) => count.sample(rng),
        }
    }
}

/// E[max of `n` iid standard normals], by numerical integration. With F = Phi^n the CDF of
/// the maximum, E[M] = integral_0^inf (1 - F) - integral_-inf^0 F = L - integral_-L^L F
/// for a large L (12: the tails beyond are below 1e-30). Phi is accumulated from the normal
/// density and F integrated, both by the trapezoid rule with step 1e-3 (error below 1e-6).
pub fn expected_max_standard_normal(n: usize) -> f64 {
    assert!(n >= 1, "expected_max_standard_normal: n must be at least 1");
    *EXPECTED_MAXIMA.get_or_compute(&n, || integrate_expected_max(n))
}

/// The values `expected_max_standard_normal` integrated, by `n`: an integration is 24,000 steps,
/// and every cell of a run prices the same few expert counts and populations.
static EXPECTED_MAXIMA: crate::memo::Memo<usize, f64> = crate::memo::Memo::new(64);

/// `expected_max_standard_normal` integrated.
fn integrate_expected_max(n: usize) -> f64 {
    if n == 1 {
        return 0.0;
    }
    const LIMIT: f64 = 12.0;
    const STEP: f64 = 1e-3;
    let steps = (2.0 * LIMIT / STEP).round() as usize;
    let exponent = i32::try_from(n).unwrap_or(i32::MAX);
    let density = |x: f64| (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
    let mut cdf = 0.0f64;
    let mut previous_density = density(-LIMIT);
    let mut previous_power = 0.0f64;
    let mut integral = 0.0;
    for i in 1..=steps {
        let next_density = density(-LIMIT + i as f64 * STEP);
        cdf += 0.5 * (previous_density + next_density) * STEP;
        let next_power = cdf.min(1.0).powi(exponent);
        integral += 0.5 * (previous_power + next_power) * STEP;
        previous_density = next_density;
        previous_power = next_power;
    }
    LIMIT - integral
}

#[cfg(test)]
mod tests {
    //! Statistical tests at fixed seeds: Kolmogorov-Smirnov against the closed-form CDF (1%
    //! critical value 1.628 / sqrt(n)) and chi-square goodness of fit (critical values written
    //! beside each), each oracle the distribution's textbook formula.

    use super::*;
    use crate::rng::stream;
    use statrs::distribution::{ContinuousCDF, Normal};

    /// The one-sample KS statistic of `values` against `cdf`.
    fn ks_statistic(mut values: Vec<f64>, cdf: impl Fn(f64) -> f64) -> f64 {
        values.sort_by(f64::total_cmp);
        let n = values.len() as f64;
        values
            .iter()
            .enumerate()
            .map(|(i, &x)| {
                let f = cdf(x);
                (f - i as f64 / n).max((i + 1) as f64 / n - f)
            })
            .fold(0.0, f64::max)
    }

    fn ks_critical_1pct(n: usize) -> f64 {
        1.628 / (n as f64).sqrt()
    }

    fn draws(n: usize, seed: u64, mut draw: impl FnMut(&mut SimRng) -> f64) -> Vec<f64> {
        let mut rng = stream(seed, "distributions");
        (0..n).map(|_| draw(&mut rng)).collect()
    }

    #[test]
    fn log_normal_from_a_median_has_normal_logs() {
        let n = 50_000;
        let d = LogNormal::from_median(100.0, 0.8).unwrap();
        assert!((d.median() - 100.0).abs() < 1e-9);
        let logs: Vec<f64> = draws(n, 1, |r| d.sample(r))
            .iter()
            .map(|x| x.ln())
            .collect();
        let normal = Normal::new(100f64.ln(), 0.8).unwrap();
        let ks = ks_statistic(logs, |x| normal.cdf(x));
        assert!(ks < ks_critical_1pct(n), "KS {ks}");
    }

    #[test]
    fn log_normal_from_a_mean_has_that_mean() {
        // Standard error of the sample mean: mean x sqrt(e^(sigma^2) - 1) / sqrt(n)
        // = 300 x 0.947 / 223.6 = 1.27, 0.42 %; the test allows 2 % (4.7 standard errors).
        let n = 50_000;
        let d = LogNormal::from_mean(300.0, 0.8).unwrap();
        assert!((d.mean() - 300.0).abs() < 1e-9);
        assert!((d.median() - 300.0 * (-0.32f64).exp()).abs() < 1e-9);
        let xs = draws(n, 2, |r| d.sample(r));
        let mean = xs.iter().sum::<f64>() / n as f64;
        assert!((mean - 300.0).abs() < 0.02 * 300.0, "mean {mean}");
    }

    #[test]
    fn log_normal_is_rand_distr_s_sequence() {
        // The sampler GEM, CAPS and MOSAIC used before (rand_distr's, built per draw) gives the
        // same values from the same stream, so moving onto this one moves no number.
        let d = LogNormal::from_mean(161.31, 1.0).unwrap();
        let reference = rand_distr::LogNormal::new(161.31f64.ln() - 0.5, 1.0).unwrap();
        let (mut a, mut b) = (stream(9, "lengths"), stream(9, "lengths"));
        for _ in 0..1000 {
            assert_eq!(d.sample(&mut a), reference.sample(&mut b));
        }
    }

    #[test]
    fn exponential_matches_its_cdf() {
        let n = 50_000;
        let d = Exponential::new(4.0).unwrap();
        let xs = draws(n, 3, |r| d.sample(r));
        assert!(xs.iter().all(|x| x.is_finite() && *x >= 0.0));
        let ks = ks_statistic(xs, |x| 1.0 - (-4.0 * x).exp());
        assert!(ks < ks_critical_1pct(n), "KS {ks}");
    }

    #[test]
    fn gamma_matches_its_cdf_at_the_requested_mean_and_cv() {
        // Mean 0.01 s and CV 2 (shape 1/4, scale 0.04): KS against statrs' gamma CDF (shape,
        // rate = 1 / scale), and the sample mean within 3 % (its standard error is
        // 2 x 0.01 / sqrt(50,000) = 0.9 %).
        let n = 50_000;
        for (cv, seed) in [(2.0, 11), (0.5, 12)] {
            let d = Gamma::from_mean_cv(0.01, cv).unwrap();
            assert!((d.shape() - 1.0 / (cv * cv)).abs() < 1e-12);
            assert!((d.shape() * d.scale() - 0.01).abs() < 1e-15);
            let xs = draws(n, seed, |r| d.sample(r));
            let mean = xs.iter().sum::<f64>() / n as f64;
            assert!((mean - 0.01).abs() < 0.03 * 0.01, "cv {cv}: mean {mean}");
            let reference =
                statrs::distribution::Gamma::new(1.0 / (cv * cv), 1.0 / (0.01 * cv * cv)).unwrap();
            let ks = ks_statistic(xs, |x| reference.cdf(x));
            assert!(ks < ks_critical_1pct(n), "cv {cv}: KS {ks}");
        }
    }

    #[test]
    fn token_lengths_of_every_kind() {
        let mut rng = stream(13, "lengths");
        // Fixed draws nothing but its value.
        let fixed = TokenLength::fixed(512).unwrap();
        assert_eq!((fixed.sample(&mut rng), fixed.max()), (512, 512));
        // Discrete uniform on 10..=14: chi-square over the 5 values, 4 degrees of freedom, 1 %
        // critical value 13.277.
        let n = 50_000;
        let uniform = TokenLength::uniform(10, 14).unwrap();
        let mut counts = [0usize; 5];
        for _ in 0..n {
            counts[(uniform.sample(&mut rng) - 10) as usize] += 1;
        }
        let expected = n as f64 / 5.0;
        let chi2: f64 = counts
            .iter()
            .map(|&c| (c as f64 - expected).powi(2) / expected)
            .sum();
        assert!(chi2 < 13.277, "chi-square {chi2}, counts {counts:?}");
        assert_eq!(uniform.max(), 14);
        // Zipf over 100..=103 with exponent 1: P(100 + k) = (1 / (k + 1)) / (1 + 1/2 + 1/3 +
        // 1/4); chi-square, 3 degrees of freedom, 1 % critical value 11.345.
        let zipf = TokenLength::zipf(100, 103, 1.0).unwrap();
        assert_eq!(zipf.max(), 103);
        let h = 1.0 + 0.5 + 1.0 / 3.0 + 0.25;
        let mut counts = [0usize; 4];
        for _ in 0..n {
            counts[(zipf.sample(&mut rng) - 100) as usize] += 1;
        }
        let chi2: f64 = (0..4)
            .map(|k| {
                let expected = n as f64 / (k as f64 + 1.0) / h;
                (counts[k] as f64 - expected).powi(2) / expected
            })
            .sum();
        assert!(chi2 < 11.345, "chi-square {chi2}, counts {counts:?}");
        // Log-normal: the TokenCount's draws, clamped to its max.
        let count = TokenCount::from_mean(50.0, 1.0, 80).unwrap();
        let log_normal = TokenLength::LogNormal(count);
        assert_eq!(log_normal.max(), 80);
        let (mut a, mut b) = (stream(14, "l"), stream(14, "l"));
        for _ in 0..100 {
            assert_eq!(log_normal.sample(&mut a), count.sample(&mut b));
        }
        assert!(TokenLength::fixed(0).is_err());
        assert!(TokenLength::uniform(5, 4).is_err());
        assert!(TokenLength::zipf(0, 4, 1.0).is_err());
    }

    #[test]
    fn uniform_matches_its_cdf_and_stays_inside() {
        let n = 50_000;
        let d = Uniform::new(2.0, 5.0).unwrap();
        let xs = draws(n, 4, |r| d.sample(r));
        assert!(xs.iter().all(|x| (2.0..=5.0).contains(x)));
        let ks = ks_statistic(xs, |x| (x - 2.0) / 3.0);
        assert!(ks < ks_critical_1pct(n), "KS {ks}");
        assert_eq!(
            Uniform::new(1.0, 1.0).unwrap().sample(&mut stream(1, "u")),
            1.0
        );
    }

    #[test]
    fn fixed_draws_nothing() {
        let mut rng = stream(5, "fixed");
        assert_eq!(Fixed(7.5).sample(&mut rng), 7.5);
        let next: u64 = rng.random();
        let untouched: u64 = stream(5, "fixed").random();
        assert_eq!(next, untouched);
    }

    #[test]
    fn zipf_ranks_follow_the_power_law() {
        // Chi-square over 10 ranks (9 degrees of freedom): the 1 % critical value is 21.666.
        let n = 100_000;
        let d = Zipf::new(10, 1.1).unwrap();
        let h: f64 = (1..=10).map(|k| (k as f64).powf(-1.1)).sum();
        assert!((d.probability(0) - 1.0 / h).abs() < 1e-12);
        assert!((d.probability(9) - 10f64.powf(-1.1) / h).abs() < 1e-12);
        let mut counts = [0usize; 10];
        let mut rng = stream(6, "zipf");
        for _ in 0..n {
            counts[d.sample(&mut rng)] += 1;
        }
        let chi2: f64 = (0..10)
            .map(|k| {
                let expected = n as f64 * d.probability(k);
                (counts[k] as f64 - expected).powi(2) / expected
            })
            .sum();
        assert!(chi2 < 21.666, "chi-square {chi2}, counts {counts:?}");
        // Exponent 0 is uniform; one rank always gives rank 0.
        let flat = Zipf::new(4, 0.0).unwrap();
        assert!((0..4).all(|k| (flat.probability(k) - 0.25).abs() < 1e-12));
        assert_eq!(Zipf::new(1, 2.0).unwrap().sample(&mut rng), 0);
    }

    #[test]
    fn categorical_draws_follow_the_weights_and_skip_zero_weights() {
        // Weights 1, 0, 3, 6 (probabilities 0.1, 0, 0.3, 0.6): chi-square over the three drawn
        // indices (2 degrees of freedom), 1 % critical value 9.210; index 1 is never drawn.
        let n = 100_000;
        let d = Categorical::new(&[1.0, 0.0, 3.0, 6.0]).unwrap();
        let expected = [0.1, 0.0, 0.3, 0.6];
        for (i, p) in expected.iter().enumerate() {
            assert!((d.probability(i) - p).abs() < 1e-12);
        }
        let mut counts = [0usize; 4];
        let mut rng = stream(8, "categorical");
        for _ in 0..n {
            counts[d.sample(&mut rng)] += 1;
        }
        assert_eq!(counts[1], 0);
        let chi2: f64 = [0, 2, 3]
            .iter()
            .map(|&i| {
                let e = n as f64 * expected[i];
                (counts[i] as f64 - e).powi(2) / e
            })
            .sum();
        assert!(chi2 < 9.210, "chi-square {chi2}, counts {counts:?}");
        // A trailing zero weight is never drawn either, whatever the rounding.
        let tail = Categorical::new(&[2.0, 0.0]).unwrap();
        assert!((0..1000).all(|_| tail.sample(&mut rng) == 0));
    }

    #[test]
    fn token_counts_round_and_clamp() {
        // Median 50, sigma 2, max 200. P(count = 200) = P(X >= 199.5) = 1 - Phi((ln 199.5 -
        // ln 50) / 2) = 1 - Phi(0.6918) = 0.2445; P(count = 1) = P(X < 1.5) = Phi((ln 1.5 -
        // ln 50) / 2) = Phi(-1.7533) = 0.0398. Standard errors over 20,000 draws: 0.0030 and
        // 0.0014; the test allows 0.015 and 0.007 (5 standard errors).
        let n = 20_000;
        let d = TokenCount::from_median(50.0, 2.0, 200).unwrap();
        let mut rng = stream(7, "tokens");
        let xs: Vec<u32> = (0..n).map(|_| d.sample(&mut rng)).collect();
        assert!(xs.iter().all(|&x| (1..=200).contains(&x)));
        let share = |v: u32| xs.iter().filter(|&&x| x == v).count() as f64 / n as f64;
        assert!((share(200) - 0.2445).abs() < 0.015, "{}", share(200));
        assert!((share(1) - 0.0398).abs() < 0.007, "{}", share(1));
        // Sigma 0: always the mean, rounded.
        let exact = TokenCount::from_mean(12.4, 0.0, 100).unwrap();
        assert_eq!(exact.sample(&mut rng), 12);
    }

    #[test]
    fn rounded_uniform_lengths_halve_their_end_points() {
        // Mean 2, spread 0.5: a continuous uniform on [1, 3] rounded, so 1 takes [1, 1.5)
        // (1/4), 2 takes [1.5, 2.5) (1/2) and 3 takes [2.5, 3] (1/4). Standard errors over
        // 40,000 draws: 0.0022 and 0.0025; the test allows 0.011 and 0.0125 (5 of them).
        let n = 40_000;
        let d = TokenLength::rounded_uniform(2.0, 0.5).unwrap();
        assert_eq!(d.max(), 3);
        let mut rng = stream(5, "tokens");
        let xs: Vec<u32> = (0..n).map(|_| d.sample(&mut rng)).collect();
        let share = |v: u32| xs.iter().filter(|&&x| x == v).count() as f64 / n as f64;
        assert!((share(1) - 0.25).abs() < 0.011, "{}", share(1));
        assert!((share(2) - 0.5).abs() < 0.0125, "{}", share(2));
        assert!((share(3) - 0.25).abs() < 0.011, "{}", share(3));
        assert_eq!(share(1) + share(2) + share(3), 1.0);
        // Draw by draw the continuous uniform on mean x [1 - spread, 1 + spread], rounded (the
        // expertweave family's lengths): 256 x [0.5, 1.5] from the same stream.
        let (ours, theirs) = (
            TokenLength::rounded_uniform(256.0, 0.5).unwrap(),
            Uniform::new(128.0, 384.0).unwrap(),
        );
        let (mut a, mut b) = (stream(9, "lengths"), stream(9, "lengths"));
        for _ in 0..1000 {
            let x = ours.sample(&mut a);
            assert!((128..=384).contains(&x));
            assert_eq!(x, theirs.sample(&mut b).round() as u32);
        }
        // Spread 0: always the mean, rounded; a mean below 1 or a spread outside [0, 1) refused
        // naming the parameter.
        let exact = TokenLength::rounded_uniform(12.4, 0.0).unwrap();
        assert_eq!(exact.sample(&mut rng), 12);
        for (mean, spread, word) in [
            (0.5, 0.1, "mean"),
            (f64::NAN, 0.1, "mean"),
            (100.0, 1.0, "spread"),
            (100.0, -0.1, "spread"),
            (100.0, f64::INFINITY, "spread"),
        ] {
            let e = TokenLength::rounded_uniform(mean, spread).unwrap_err();
            assert!(e.to_string().contains(word), "{e}");
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_draws() {
        let d = TokenCount::from_mean(300.0, 0.8, 2048).unwrap();
        let run = |seed| -> Vec<u32> {
            let mut rng = stream(seed, "tokens");
            (0..100).map(|_| d.sample(&mut rng)).collect()
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
    }

    #[test]
    fn bad_parameters_are_refused_with_their_name() {
        let message = |e: DistributionError| e.to_string();
        assert!(message(LogNormal::from_median(0.0, 1.0).unwrap_err()).contains("median"));
        assert!(message(LogNormal::from_mean(f64::NAN, 1.0).unwrap_err()).contains("mean"));
        assert!(message(LogNormal::from_mean(5.0, -1.0).unwrap_err()).contains("sigma"));
        assert!(message(Exponential::new(0.0).unwrap_err()).contains("rate"));
        assert!(message(Uniform::new(3.0, 2.0).unwrap_err()).contains("low <= high"));
        assert!(message(Zipf::new(0, 1.0).unwrap_err()).contains("rank"));
        assert!(message(Zipf::new(3, -1.0).unwrap_err()).contains("exponent"));
        assert!(message(TokenCount::from_mean(5.0, 1.0, 0).unwrap_err()).contains("max"));
        assert!(message(Gamma::from_mean_cv(1.0, 0.0).unwrap_err()).contains("cv"));
        assert!(message(Gamma::from_mean_cv(-1.0, 1.0).unwrap_err()).contains("mean"));
        assert!(message(Categorical::new(&[0.0, 0.0]).unwrap_err()).contains("positive"));
        assert!(message(Categorical::new(&[1.0, -1.0]).unwrap_err()).contains("weights"));
    }

    #[test]
    fn expected_max_of_normals_matches_closed_forms() {
        assert_eq!(expected_max_standard_normal(1), 0.0);
        // n = 2: 1/sqrt(pi); n = 3: 3/(2 sqrt(pi)).
        let pi_sqrt = std::f64::consts::PI.sqrt();
        assert!((expected_max_standard_normal(2) - 1.0 / pi_sqrt).abs() < 1e-6);
        assert!((expected_max_standard_normal(3) - 1.5 / pi_sqrt).abs() < 1e-6);
        // Tabulated (Tippett 1925; Harter 1961): n = 10 -> 1.538753, n = 60 -> 2.319.
        assert!((expected_max_standard_normal(10) - 1.538753).abs() < 1e-5);
        let z60 = expected_max_standard_normal(60);
        assert!((z60 - 2.3193).abs() < 5e-4, "{z60}");
    }
}
