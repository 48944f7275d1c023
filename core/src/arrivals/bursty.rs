//! Bursty arrivals: a two-state Markov-modulated Poisson process whose bursts raise the arrival
//! rate and make consecutive requests share one semantic topic.

use super::{
    Arrival, ArrivalProcess, check_n_topics, check_rate, exponential_gap_s, uniform_topic,
};
use crate::rng::SimRng;
use crate::time::SimTime;
use rand::RngExt;
use serde::{Deserialize, Serialize};

/// Shape of the bursty arrival process; the scenario embeds it as a table. Every field is
/// optional there and takes the default below when left out.
///
/// The process alternates between a *calm* and a *burst* state, with exponentially distributed
/// sojourn times of mean `mean_calm_s` and `mean_burst_s`. In each state requests arrive as a
/// Poisson process, `burst_rate_multiplier` times faster in a burst than in calm. The long-run
/// mean rate is the scenario's `rate_per_s` (the same number a Poisson run gets), so a bursty run
/// and a Poisson run at the same `rate_per_s` carry the same load on average. With
/// `λ̄ = rate_per_s`, `m = burst_rate_multiplier`, `T_b = mean_burst_s`, `T_c = mean_calm_s`,
/// the fractions of time spent in each state are `T_b / (T_b + T_c)` and `T_c / (T_b + T_c)`,
/// and requiring `λ̄ = (T_c λ_calm + T_b λ_burst) / (T_b + T_c)` with `λ_burst = m λ_calm` gives
///
/// ```text
/// λ_calm  = λ̄ (T_b + T_c) / (T_c + m T_b)
/// λ_burst = m λ_calm
/// ```
///
/// Each burst draws its own topic uniformly when it starts; a request arriving during the burst
/// carries that topic with probability `burst_topic_share` and a uniformly drawn topic otherwise.
/// Calm requests always get a uniform topic.
///
/// # Why these defaults
/// `m = 4`, `T_b = 1 s`, `T_c = 3 s`, share 0.8 give `λ_calm = 4/7 λ̄` and `λ_burst = 16/7 λ̄`:
/// bursts fill a quarter of the time but bring 4/7 ≈ 57% of the requests, and about 46% of all
/// requests (`4/7 · 0.8`, plus the uniform draws that happen to match) carry the topic of the
/// burst they arrive in. At the CAPS paper's rates (150-300 req/s) one burst holds roughly
/// 340-690 requests, far more than a scheduler's look-ahead window (32 there), so during a burst
/// the queue is dominated by one topic: the "stream of coding questions" that overloads a few
/// experts. The 3 s calm phases let the queue see ordinary mixed traffic in between. Where a
/// state holds many requests (`λ T ≫ 1`) the inter-arrival gaps are close to a mixture of two
/// exponentials, whose coefficient of variation is
/// `sqrt(2 (3/7 · (7/4)² + 4/7 · (7/16)²) - 1) = sqrt(59/32) ≈ 1.36`, against 1 for Poisson.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BurstyParams {
    /// Arrival rate in a burst divided by the arrival rate in calm; at least 1. Default 4.
    pub burst_rate_multiplier: f64,
    /// Mean duration of a burst in seconds (exponentially distributed); positive. Default 1.0.
    pub mean_burst_s: f64,
    /// Mean duration of a calm phase in seconds (exponentially distributed); positive.
    /// Default 3.0.
    pub mean_calm_s: f64,
    /// Probability that a request arriving during a burst carries the burst's topic rather than a
    /// uniformly drawn one; in `[0, 1]`. Default 0.8.
    pub burst_topic_share: f64,
}

impl Default for BurstyParams {
    fn default() -> BurstyParams {
        BurstyParams {
            burst_rate_multiplier: 4.0,
            mean_burst_s: 1.0,
            mean_calm_s: 3.0,
            burst_topic_share: 0.8,
        }
    }
}

/// A [`BurstyParams`] field outside its allowed range.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("bursty.{field} = {value}: must be {requirement}")]
pub struct InvalidBurstyParams {
    pub field: &'static str,
    pub value: f64,
    pub requirement: &'static str,
}

impl BurstyParams {
    /// Checks every field's range; the scenario calls this while validating.
    pub fn validate(&self) -> Result<(), InvalidBurstyParams> {
        let checks = [
            (
                "burst_rate_multiplier",
                self.burst_rate_multiplier,
                self.burst_rate_multiplier.is_finite() && self.burst_rate_multiplier >= 1.0,
                "finite and at least 1",
            ),
            (
                "mean_burst_s",
                self.mean_burst_s,
                self.mean_burst_s.is_finite() && self.mean_burst_s > 0.0,
                "finite and positive",
            ),
            (
                "mean_calm_s",
                self.mean_calm_s,
                self.mean_calm_s.is_finite() && self.mean_calm_s > 0.0,
                "finite and positive",
            ),
            (
                "burst_topic_share",
                self.burst_topic_share,
                (0.0..=1.0).contains(&self.burst_topic_share),
                "between 0 and 1",
            ),
        ];
        for (field, value, ok, requirement) in checks {
            if !ok {
                return Err(InvalidBurstyParams {
                    field,
                    value,
                    requirement,
                });
            }
        }
        Ok(())
    }

    /// Long-run fraction of time spent in bursts: `T_b / (T_b + T_c)`.
    pub fn burst_time_fraction(&self) -> f64 {
        self.mean_burst_s / (self.mean_burst_s + self.mean_calm_s)
    }

    /// Arrival rate in calm, `λ̄ (T_b + T_c) / (T_c + m T_b)`, for long-run mean rate `rate_per_s`.
    pub fn calm_rate_per_s(&self, rate_per_s: f64) -> f64 {
        rate_per_s * (self.mean_burst_s + self.mean_calm_s)
            / (self.mean_calm_s + self.burst_rate_multiplier * self.mean_burst_s)
    }

    /// Arrival rate in a burst, `m λ_calm`, for long-run mean rate `rate_per_s`.
    pub fn burst_rate_per_s(&self, rate_per_s: f64) -> f64 {
        self.burst_rate_multiplier * self.calm_rate_per_s(rate_per_s)
    }
}

/// The two-state Markov-modulated Poisson process described at [`BurstyParams`], producing
/// `n_requests` arrivals.
///
/// It is simulated exactly: in the current state it draws the exponential gap to the next
/// arrival and compares it with the time left in the state. If the arrival falls inside the
/// state it is emitted; otherwise time advances to the state's end, the state switches (a new
/// burst draws its topic), and the gap is drawn afresh at the new state's rate, which
/// memorylessness makes exact. The initial state is drawn from the stationary distribution, so
/// the process is stationary from `t = 0` and the mean rate holds from the first request.
///
/// Draw order on the single stream: initial state, then on entering each state its sojourn time
/// (and, for a burst, its topic); per candidate arrival the gap; per emitted burst arrival a
/// uniform deciding between the burst topic and a uniform topic (then that topic if needed); per
/// calm arrival its topic.
pub struct Bursty {
    params: BurstyParams,
    calm_rate_per_s: f64,
    burst_rate_per_s: f64,
    n_topics: u32,
    remaining: usize,
    now_s: f64,
    in_burst: bool,
    state_end_s: f64,
    burst_topic: u32,
    rng: SimRng,
}

impl Bursty {
    /// # Panics
    /// If `rate_per_s` is not finite and positive, `n_topics` is zero, or `params` fails
    /// [`BurstyParams::validate`] (the scenario validates all of these first).
    pub fn new(
        rate_per_s: f64,
        params: BurstyParams,
        n_requests: usize,
        n_topics: u32,
        mut rng: SimRng,
    ) -> Bursty {
        check_rate("Bursty", rate_per_s);
        check_n_topics("Bursty", n_topics);
        if let Err(error) = params.validate() {
            panic!("Bursty: {error}");
        }
        let start_in_burst = rng.random::<f64>() < params.burst_time_fraction();
        let mut bursty = Bursty {
            params,
            calm_rate_per_s: params.calm_rate_per_s(rate_per_s),
            burst_rate_per_s: params.burst_rate_per_s(rate_per_s),
            n_topics,
            remaining: n_requests,
            now_s: 0.0,
            in_burst: false,
            state_end_s: 0.0,
            burst_topic: 0,
            rng,
        };
        bursty.enter_state(start_in_burst);
        bursty
    }

    /// Starts a sojourn in burst (`true`) or calm (`false`) at the current time.
    fn enter_state(&mut self, burst: bool) {
        let mean_s = if burst {
            self.params.mean_burst_s
        } else {
            self.params.mean_calm_s
        };
        self.in_burst = burst;
        self.state_end_s = self.now_s + exponential_gap_s(&mut self.rng, 1.0 / mean_s);
        if burst {
            self.burst_topic = uniform_topic(&mut self.rng, self.n_topics);
        }
    }
}

impl ArrivalProcess for Bursty {
    fn next_arrival(&mut self) -> Option<Arrival> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        loop {
            let rate_per_s = if self.in_burst {
                self.burst_rate_per_s
            } else {
                self.calm_rate_per_s
            };
            let candidate_s = self.now_s + exponential_gap_s(&mut self.rng, rate_per_s);
            if candidate_s < self.state_end_s {
                self.now_s = candidate_s;
                break;
            }
            self.now_s = self.state_end_s;
            self.enter_state(!self.in_burst);
        }
        let topic = if self.in_burst && self.rng.random::<f64>() < self.params.burst_topic_share {
            self.burst_topic
        } else {
            uniform_topic(&mut self.rng, self.n_topics)
        };
        Some(Arrival {
            time: SimTime::from_secs_f64(self.now_s),
            topic,
            prompt_tokens: None,
            output_tokens: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::Poisson;
    use super::super::test_support::{
        assert_time_ordered, collect, consecutive_topic_agreement, gaps_s, mean_and_cv,
    };
    use super::*;
    use crate::rng::stream;

    const N_TOPICS: u32 = 10;

    fn arrivals(rate_per_s: f64, params: BurstyParams, seed: u64, n: usize) -> Vec<Arrival> {
        collect(&mut Bursty::new(
            rate_per_s,
            params,
            n,
            N_TOPICS,
            stream(seed, "arrivals"),
        ))
    }

    #[test]
    fn derived_rates_average_to_the_requested_rate() {
        let cases = [
            BurstyParams::default(),
            BurstyParams {
                burst_rate_multiplier: 1.0,
                ..BurstyParams::default()
            },
            BurstyParams {
                burst_rate_multiplier: 10.0,
                mean_burst_s: 0.25,
                mean_calm_s: 7.0,
                burst_topic_share: 0.0,
            },
        ];
        for params in cases {
            let rate_per_s = 250.0;
            let calm = params.calm_rate_per_s(rate_per_s);
            let burst = params.burst_rate_per_s(rate_per_s);
            let p_burst = params.burst_time_fraction();
            let mean = (1.0 - p_burst) * calm + p_burst * burst;
            assert!(
                (mean - rate_per_s).abs() < 1e-9,
                "{params:?}: mean rate {mean}"
            );
            assert!((burst / calm - params.burst_rate_multiplier).abs() < 1e-12);
        }
        // The defaults' closed form: calm 4/7, burst 16/7 of the mean rate.
        let params = BurstyParams::default();
        assert!((params.calm_rate_per_s(7.0) - 4.0).abs() < 1e-12);
        assert!((params.burst_rate_per_s(7.0) - 16.0).abs() < 1e-12);
    }

    #[test]
    fn long_run_mean_rate_matches_rate_per_s() {
        // The count of a two-state MMPP over a horizon T has variance about
        // T (λ̄ + 2 (λ_b - λ_c)² π_b π_c T_b T_c / (T_b + T_c)), so for the defaults the measured
        // rate has relative standard error sqrt((0.83 s + 1/λ̄) / T). 200_000 arrivals at 5 req/s
        // span T = 40_000 s (10_000 burst/calm cycles): a standard error of 0.5% (0.57% measured
        // over 64 seeds, mean error +0.08%), so the 2% tolerance is about 4 standard errors. At
        // 200 req/s the same count spans only 250 cycles and the rate itself wanders by about 3%.
        let rate_per_s = 5.0;
        let n = 200_000;
        let arrivals = arrivals(rate_per_s, BurstyParams::default(), 42, n);
        assert_eq!(arrivals.len(), n);
        assert_time_ordered(&arrivals);
        let measured = n as f64 / arrivals[n - 1].time.as_secs_f64();
        assert!(
            (measured - rate_per_s).abs() < 0.02 * rate_per_s,
            "long-run rate {measured} req/s, expected {rate_per_s}"
        );
    }

    #[test]
    fn defaults_are_bursty_and_topic_clustered() {
        let rate_per_s = 200.0;
        let n = 200_000;
        let bursty = arrivals(rate_per_s, BurstyParams::default(), 42, n);
        let poisson = collect(&mut Poisson::new(
            rate_per_s,
            n,
            N_TOPICS,
            stream(42, "arrivals"),
        ));

        // Burstiness: the gap CV is clearly above Poisson's 1 (the slow-switching mixture value
        // for the defaults is 1.36).
        let (_, bursty_cv) = mean_and_cv(&gaps_s(&bursty));
        let (_, poisson_cv) = mean_and_cv(&gaps_s(&poisson));
        assert!(bursty_cv > 1.2, "bursty gap CV {bursty_cv}");
        assert!(
            (bursty_cv - 1.358).abs() < 0.05,
            "bursty gap CV {bursty_cv}"
        );
        assert!(
            (poisson_cv - 1.0).abs() < 0.02,
            "Poisson gap CV {poisson_cv}"
        );

        // Semantic clustering: consecutive requests share a topic far more often than the
        // 1/n_topics of independent uniform topics. Expected for the defaults: about
        // 4/7 · (0.82² + 9 · 0.02²) + 3/7 · 0.1 ≈ 0.43.
        let bursty_agreement = consecutive_topic_agreement(&bursty);
        let poisson_agreement = consecutive_topic_agreement(&poisson);
        let uniform = 1.0 / f64::from(N_TOPICS);
        assert!(
            (poisson_agreement - uniform).abs() < 0.005,
            "Poisson agreement {poisson_agreement}"
        );
        assert!(
            bursty_agreement > 3.0 * poisson_agreement,
            "bursty agreement {bursty_agreement} vs Poisson {poisson_agreement}"
        );
        assert!(
            (bursty_agreement - 0.43).abs() < 0.04,
            "bursty agreement {bursty_agreement}"
        );
    }

    #[test]
    fn without_modulation_or_clustering_it_is_poisson() {
        let params = BurstyParams {
            burst_rate_multiplier: 1.0,
            burst_topic_share: 0.0,
            ..BurstyParams::default()
        };
        let rate_per_s = 200.0;
        let arrivals = arrivals(rate_per_s, params, 9, 100_001);
        let (mean, cv) = mean_and_cv(&gaps_s(&arrivals));
        assert!((mean * rate_per_s - 1.0).abs() < 0.01, "mean gap {mean}");
        assert!((cv - 1.0).abs() < 0.02, "gap CV {cv}");
        let agreement = consecutive_topic_agreement(&arrivals);
        assert!((agreement - 0.1).abs() < 0.005, "agreement {agreement}");
    }

    #[test]
    fn same_seed_gives_the_same_sequence() {
        let params = BurstyParams::default();
        assert_eq!(
            arrivals(200.0, params, 3, 5_000),
            arrivals(200.0, params, 3, 5_000)
        );
        assert_ne!(
            arrivals(200.0, params, 3, 5_000),
            arrivals(200.0, params, 4, 5_000)
        );
    }

    #[test]
    fn params_deserialize_with_defaults_and_reject_unknown_fields() {
        let params: BurstyParams = toml::from_str("burst_rate_multiplier = 6.0").unwrap();
        assert_eq!(
            params,
            BurstyParams {
                burst_rate_multiplier: 6.0,
                ..BurstyParams::default()
            }
        );
        let error = toml::from_str::<BurstyParams>("burst_multiplier = 6.0").unwrap_err();
        assert!(error.to_string().contains("unknown field"), "{error}");
    }

    #[test]
    fn validate_names_the_bad_field() {
        assert_eq!(BurstyParams::default().validate(), Ok(()));
        let error = BurstyParams {
            burst_topic_share: 1.5,
            ..BurstyParams::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "bursty.burst_topic_share = 1.5: must be between 0 and 1"
        );
        let error = BurstyParams {
            mean_calm_s: 0.0,
            ..BurstyParams::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(error.field, "mean_calm_s");
        let error = BurstyParams {
            burst_rate_multiplier: 0.5,
            ..BurstyParams::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(error.field, "burst_rate_multiplier");
    }
}
