//! GPU performance variability (moved from the gem family, shared by any scenario): the
//! throughput distribution of GEM's 128 NVIDIA L40s (gem.txt section 2.4, Figure 5), the three
//! evaluation setups of section 4.2 (low, moderate, high) plus explicit factors, the setups'
//! keys (`VariabilityTable`: gem's `[cluster]`, the serving family's `replica.variability`) and
//! the variability-at-scale experiment of section 6.

use crate::distributions::expected_max_standard_normal;
use crate::rng::{SimRng, stream};
use crate::validate::{FieldError, field_error};
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};

fn d_fastest() -> f64 {
    0.108
}
fn d_slowest() -> f64 {
    0.1323
}
fn d_population() -> usize {
    128
}

/// Per-GPU relative throughput as a split (two-piece) normal with mode 1: the standard
/// deviations above and below are chosen so that the expected fastest and slowest of
/// `population` GPUs sit at the characterized extremes, i.e.
/// `sigma_above = fastest_above_mean / z_n` and `sigma_below = slowest_below_mean / z_n` with
/// `z_n` the expected maximum of n standard normals. Defaults: gem.txt section 2.4 — across
/// 128 L40s the best GPU is 10.8 % above the average and the worst 13.23 % below.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThroughputDistribution {
    #[serde(default = "d_fastest")]
    pub fastest_above_mean: f64,
    #[serde(default = "d_slowest")]
    pub slowest_below_mean: f64,
    #[serde(default = "d_population")]
    pub population: usize,
}

impl Default for ThroughputDistribution {
    fn default() -> Self {
        ThroughputDistribution {
            fastest_above_mean: d_fastest(),
            slowest_below_mean: d_slowest(),
            population: d_population(),
        }
    }
}

impl ThroughputDistribution {
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        for (name, v) in [
            ("fastest_above_mean", self.fastest_above_mean),
            ("slowest_below_mean", self.slowest_below_mean),
        ] {
            if !(v.is_finite() && (0.0..0.5).contains(&v)) {
                return Err((name, format!("must be in [0, 0.5), got {v}")));
            }
        }
        if self.population < 2 {
            return Err(("population", "must be at least 2".into()));
        }
        Ok(())
    }

    /// (sigma above the mode, sigma below).
    pub fn sigmas(&self) -> (f64, f64) {
        let z = expected_max_standard_normal(self.population);
        (self.fastest_above_mean / z, self.slowest_below_mean / z)
    }

    /// A sampler of one GPU's relative throughput (the sigmas computed once).
    pub fn sampler(&self) -> ThroughputSampler {
        let (above, below) = self.sigmas();
        ThroughputSampler { above, below }
    }
}

/// Draws relative throughputs from a [`ThroughputDistribution`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ThroughputSampler {
    above: f64,
    below: f64,
}

impl ThroughputSampler {
    pub fn sample(&self, rng: &mut SimRng) -> f64 {
        let u: f64 = StandardNormal.sample(rng);
        if u >= 0.0 {
            1.0 + self.above * u
        } else {
            1.0 + self.below * u
        }
    }
}

/// The variability setup of a cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VariabilitySetup {
    /// Every GPU at the mean performance (section 4.2).
    Low,
    /// The average over Monte-Carlo draws of the sorted throughputs of `n_gpus` GPUs.
    Moderate,
    /// One straggler GPU (GPU 0) slower than the rest by `straggler_slowdown`.
    High,
    /// The factors given in `speed_factors`.
    Explicit,
}

/// What speed factors mean (gem's `cluster.factors`, the serving family's
/// `replica.speed_factors_kind`; docs/cost-model.md, "GPU variability").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FactorKind {
    /// The GPU's throughput on the workload's MoE layer relative to a nominal GPU: gem.txt
    /// calibrates per-GPU power caps so each GPU delivers its factor (Figure 14, Table 2). The
    /// cap lowers the SM clock; the clock factor is solved so the layer takes `1 / s` as long
    /// (`policies::mapping::gpu_costs::throughput_speed`).
    #[default]
    Throughput,
    /// The SM clock factor itself (compute factor `s`).
    Clock,
}

fn d_straggler() -> f64 {
    0.12
}
fn d_draws() -> usize {
    1000
}

/// A variability setup and its parameters (gem's `[cluster]` keys, the serving family's
/// `replica.variability` table): the per-GPU speed factors it stands for (`factors`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VariabilityTable {
    pub setup: VariabilitySetup,
    /// High variability: GPU 0 is this much slower (section 4.2: 12 %).
    #[serde(default = "d_straggler")]
    pub straggler_slowdown: f64,
    /// Moderate variability: Monte-Carlo draws (section 4.2: 1000).
    #[serde(default = "d_draws")]
    pub moderate_draws: usize,
    /// Moderate variability: seed of its draws (a property of the hardware, not of the run).
    #[serde(default)]
    pub moderate_seed: u64,
    #[serde(default)]
    pub distribution: ThroughputDistribution,
}

impl VariabilityTable {
    /// The speed factors of `n_gpus` GPUs under this setup (GPU 0 the slowest), or the field
    /// (`prefix.<key>`) that is wrong. `explicit` is the setup's own factors, if it has any.
    pub fn factors(&self, n_gpus: usize, prefix: &str) -> Result<Vec<f64>, FieldError> {
        let key = |k: &str| format!("{prefix}.{k}");
        self.distribution
            .check()
            .map_err(|(f, m)| field_error(&key(&format!("distribution.{f}")), m))?;
        Ok(match self.setup {
            VariabilitySetup::Low => vec![1.0; n_gpus],
            VariabilitySetup::High => {
                let s = self.straggler_slowdown;
                if !(s.is_finite() && (0.0..1.0).contains(&s)) {
                    return Err(field_error(
                        &key("straggler_slowdown"),
                        format!("must be in [0, 1), got {s}"),
                    ));
                }
                let mut f = vec![1.0; n_gpus];
                f[0] = 1.0 - s;
                f
            }
            VariabilitySetup::Moderate => {
                if self.moderate_draws == 0 {
                    return Err(field_error(&key("moderate_draws"), "must be at least 1"));
                }
                // Drawn while validating: bounded before the draws run.
                let samples = self.moderate_draws as f64 * n_gpus as f64;
                if samples > crate::validate::limits::MAX_VALIDATION_SAMPLES {
                    return Err(field_error(
                        &key("moderate_draws"),
                        format!(
                            "{} draws x {n_gpus} GPUs = {samples:e} samples, above the {:e} \
                             drawn while validating (docs/limits.md)",
                            self.moderate_draws,
                            crate::validate::limits::MAX_VALIDATION_SAMPLES
                        ),
                    ));
                }
                moderate_factors(
                    &self.distribution,
                    n_gpus,
                    self.moderate_draws,
                    &mut stream(self.moderate_seed, "gem/moderate-variability"),
                )
            }
            VariabilitySetup::Explicit => {
                return Err(field_error(
                    &key("setup"),
                    "\"explicit\" has no drawn factors: give the factors themselves",
                ));
            }
        })
    }
}

/// Speed factors for the moderate setup: `draws` Monte-Carlo samples of `n_gpus` throughputs,
/// each sorted ascending, averaged position by position and normalized so the fastest is 1
/// (GPU 0 is the slowest, as in Table 2).
pub fn moderate_factors(
    distribution: &ThroughputDistribution,
    n_gpus: usize,
    draws: usize,
    rng: &mut SimRng,
) -> Vec<f64> {
    let sampler = distribution.sampler();
    let mut mean = vec![0.0; n_gpus];
    let mut sample = vec![0.0; n_gpus];
    for _ in 0..draws.max(1) {
        for s in sample.iter_mut() {
            *s = sampler.sample(rng);
        }
        sample.sort_by(f64::total_cmp);
        for (m, s) in mean.iter_mut().zip(&sample) {
            *m += s;
        }
    }
    let fastest = mean.last().copied().unwrap_or(1.0);
    mean.iter().map(|m| m / fastest).collect()
}

/// One point of the variability-at-scale curve (Figure 19).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScalePoint {
    pub n_gpus: usize,
    /// E[1 - slowest / fastest]: the gap as a fraction of the fastest GPU's throughput.
    pub gap_vs_fastest: f64,
    /// E[fastest / slowest - 1]: how much more the fastest delivers than the slowest.
    pub gap_vs_slowest: f64,
    /// Expected sorted throughputs normalized to the expected fastest (slowest first).
    pub expected_normalized: Vec<f64>,
}

/// The expected slowest-to-fastest gap for each GPU count, from `draws` Monte-Carlo samples.
pub fn variability_at_scale(
    distribution: &ThroughputDistribution,
    sizes: &[usize],
    draws: usize,
    rng: &mut SimRng,
) -> Vec<ScalePoint> {
    let sampler = distribution.sampler();
    sizes
        .iter()
        .map(|&n| {
            let mut gap_fast = 0.0;
            let mut gap_slow = 0.0;
            let mut sorted_sum = vec![0.0; n];
            let mut sample = vec![0.0; n];
            for _ in 0..draws.max(1) {
                for s in sample.iter_mut() {
                    *s = sampler.sample(rng);
                }
                sample.sort_by(f64::total_cmp);
                let (slow, fast) = (sample[0], sample[n - 1]);
                gap_fast += 1.0 - slow / fast;
                gap_slow += fast / slow - 1.0;
                for (acc, s) in sorted_sum.iter_mut().zip(&sample) {
                    *acc += s;
                }
            }
            let d = draws.max(1) as f64;
            let fastest = sorted_sum[n - 1];
            ScalePoint {
                n_gpus: n,
                gap_vs_fastest: gap_fast / d,
                gap_vs_slowest: gap_slow / d,
                expected_normalized: sorted_sum.iter().map(|s| s / fastest).collect(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::stream;

    #[test]
    fn distribution_reproduces_its_inputs() {
        // Expected extremes of 128 draws land on the characterized +10.8 % / -13.23 %.
        let d = ThroughputDistribution::default().sampler();
        let mut rng = stream(1, "variability");
        let (mut lo, mut hi) = (0.0, 0.0);
        let draws = 2000;
        for _ in 0..draws {
            let s: Vec<f64> = (0..128).map(|_| d.sample(&mut rng)).collect();
            lo += s.iter().copied().fold(f64::INFINITY, f64::min);
            hi += s.iter().copied().fold(0.0, f64::max);
        }
        let (lo, hi) = (lo / draws as f64, hi / draws as f64);
        assert!((hi - 1.108).abs() < 0.004, "{hi}");
        assert!((lo - (1.0 - 0.1323)).abs() < 0.004, "{lo}");
    }

    #[test]
    fn gap_grows_with_the_gpu_count_and_moderate_is_sorted() {
        let d = ThroughputDistribution::default();
        let points = variability_at_scale(&d, &[4, 8, 16, 32, 64], 2000, &mut stream(3, "scale"));
        for w in points.windows(2) {
            assert!(w[1].gap_vs_fastest > w[0].gap_vs_fastest);
        }
        assert!(points[0].gap_vs_fastest > 0.05 && points[4].gap_vs_fastest < 0.3);
        let moderate = moderate_factors(&d, 4, 1000, &mut stream(0, "variability"));
        assert_eq!(moderate[3], 1.0);
        assert!(moderate.windows(2).all(|w| w[0] < w[1]));
        assert!(moderate[0] > 0.8 && moderate[0] < 0.95, "{moderate:?}");
        assert!(d.check().is_ok());
        let bad = ThroughputDistribution { population: 1, ..d };
        assert_eq!(bad.check().unwrap_err().0, "population");
    }
}
