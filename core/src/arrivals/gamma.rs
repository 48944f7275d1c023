//! Gamma arrivals: a renewal process whose inter-arrival gaps are gamma-distributed with a given
//! mean rate and coefficient of variation (CV 1 is Poisson; above 1 burstier, below 1 more
//! regular, as Vidur's gamma request intervals); topics independent and uniform.

use super::{Arrival, ArrivalProcess, check_n_topics, check_rate, uniform_topic};
use crate::distributions::Gamma;
use crate::rng::SimRng;
use crate::time::SimTime;

/// `n_requests` arrivals whose gaps are gamma with mean `1 / rate_per_s` and CV `cv`.
///
/// As in [`super::Poisson`], the absolute time is accumulated in `f64` seconds and each arrival
/// rounded to the nanosecond on its own; per arrival the stream draws the gap, then the topic.
pub struct GammaArrivals {
    gaps: Gamma,
    n_topics: u32,
    remaining: usize,
    now_s: f64,
    rng: SimRng,
}

impl GammaArrivals {
    /// # Panics
    /// If `rate_per_s` or `cv` is not finite and positive, or `n_topics` is zero (the scenario
    /// validates them before building a process).
    pub fn new(
        rate_per_s: f64,
        cv: f64,
        n_requests: usize,
        n_topics: u32,
        rng: SimRng,
    ) -> GammaArrivals {
        check_rate("gamma arrivals", rate_per_s);
        check_n_topics("gamma arrivals", n_topics);
        GammaArrivals {
            gaps: Gamma::from_mean_cv(1.0 / rate_per_s, cv)
                .unwrap_or_else(|e| panic!("gamma arrivals: {e}")),
            n_topics,
            remaining: n_requests,
            now_s: 0.0,
            rng,
        }
    }
}

impl ArrivalProcess for GammaArrivals {
    fn next_arrival(&mut self) -> Option<Arrival> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        self.now_s += self.gaps.sample(&mut self.rng);
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
    use super::super::test_support::{assert_time_ordered, collect, gaps_s, mean_and_cv};
    use super::*;
    use crate::rng::stream;
    use statrs::distribution::{ContinuousCDF, Gamma as GammaCdf};

    #[test]
    fn gaps_are_gamma_with_the_requested_rate_and_cv() {
        // 100,000 gaps at 50 req/s. The sample mean's standard error is cv / sqrt(n) of the
        // mean (0.63 % at CV 2), the test allows 3 %; the sample CV within 5 % (its standard
        // error at CV 2 is about 1.2 % here); and a one-sample KS test against the gamma CDF of
        // shape 1 / cv^2 and rate 50 / cv^2 at the 1 % level (critical value 1.628 / sqrt(n)).
        // The gaps are read after rounding each arrival to the nanosecond, so a gap is within
        // 1 ns of the drawn one; at CV 2 (shape 1/4) about 1 % of the gaps are under 1 ns, so
        // the statistic compares each rounded gap's rank with the CDF 1 ns either side of it
        // (the true gap's empirical CDF lies between those).
        for (cv, seed) in [(2.0, 21), (0.5, 22), (1.0, 23)] {
            let rate = 50.0;
            let arrivals = collect(&mut GammaArrivals::new(
                rate,
                cv,
                100_001,
                4,
                stream(seed, "arrivals"),
            ));
            assert_time_ordered(&arrivals);
            assert!(arrivals.iter().all(|a| a.topic < 4));
            let mut gaps = gaps_s(&arrivals);
            let n = gaps.len();
            let (mean, sample_cv) = mean_and_cv(&gaps);
            assert!(
                (mean - 1.0 / rate).abs() < 0.03 / rate,
                "cv {cv}: mean {mean}"
            );
            assert!(
                (sample_cv - cv).abs() < 0.05 * cv,
                "cv {cv}: sample cv {sample_cv}"
            );
            let reference = GammaCdf::new(1.0 / (cv * cv), rate / (cv * cv)).unwrap();
            gaps.sort_by(f64::total_cmp);
            let ks = gaps
                .iter()
                .enumerate()
                .map(|(i, &g)| {
                    let below = reference.cdf((g - 1e-9).max(0.0));
                    let above = reference.cdf(g + 1e-9);
                    (below - i as f64 / n as f64).max((i + 1) as f64 / n as f64 - above)
                })
                .fold(0.0_f64, f64::max);
            assert!(ks < 1.628 / (n as f64).sqrt(), "cv {cv}: KS {ks}");
        }
    }

    #[test]
    fn same_seed_same_sequence_and_exhaustion() {
        let run = |seed| {
            collect(&mut GammaArrivals::new(
                10.0,
                1.5,
                500,
                1,
                stream(seed, "a"),
            ))
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
        assert_eq!(run(1).len(), 500);
        assert!(collect(&mut GammaArrivals::new(1.0, 1.0, 0, 1, stream(1, "a"))).is_empty());
    }
}
