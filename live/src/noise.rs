//! How noisy this run's timings were, measured by the run itself: the spread of each kernel
//! launch's repetitions (interquartile range over their median, the median over every launch)
//! and, on the CPU backend, the machine's load average against its cores. Past either
//! threshold the step errors describe the machine's load as much as the cost model, and the
//! report says so beside the MAPE instead of presenting it as the model's error.

use serde::Serialize;

/// A launch's repetitions spreading over more than this share of their median (percent) make
/// the run noisy: the fidelity goal is a step MAPE under 5 %, which timings this unsteady
/// cannot resolve.
pub const SPREAD_THRESHOLD_PCT: f64 = 5.0;

/// The run's own measure of its timing noise (`fidelity.json`'s `timing_noise`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TimingNoise {
    /// Median over the timed launches of (interquartile range / median) of each launch's
    /// repetitions, percent; `None` with fewer than 3 repetitions or `--realtime`.
    pub spread_pct: Option<f64>,
    /// Timed launches the spread is the median of.
    pub launches: usize,
    /// The 1-minute load average before and after the run (Linux `/proc/loadavg`), CPU backend
    /// only: the CPU kernels share the cores with every other process.
    pub load_average: Option<(f64, f64)>,
    /// The cores this process may run on.
    pub cores: usize,
    /// Whether the timings are too noisy to read the step errors as the model's.
    pub noisy: bool,
    /// Why it is noisy, in words (`None` when it is not).
    pub why: Option<String>,
}

/// The 1-minute load average, where the system reports one.
pub fn load_average() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// The cores this process may run on.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl TimingNoise {
    /// Judges the `spreads` of a run's launches (fractions) and, for a CPU run, the load
    /// averages before and after it.
    pub fn assess(spreads: &[f64], load_average: Option<(f64, f64)>, cores: usize) -> Self {
        let spread_pct = (!spreads.is_empty()).then(|| {
            let mut sorted = spreads.to_vec();
            sorted.sort_by(f64::total_cmp);
            sorted[sorted.len() / 2] * 100.0
        });
        let mut why = Vec::new();
        if let Some(spread) = spread_pct.filter(|s| *s > SPREAD_THRESHOLD_PCT) {
            why.push(format!(
                "a launch's repetitions spread over {spread:.1} % of their median (the middle \
                 half, median over {} launches; threshold {SPREAD_THRESHOLD_PCT} %)",
                spreads.len()
            ));
        }
        if let Some((before, after)) = load_average {
            let peak = before.max(after);
            if peak >= cores as f64 {
                why.push(format!(
                    "load average {peak:.1} on {cores} cores: other processes share the cores \
                     the CPU kernels run on"
                ));
            }
        }
        TimingNoise {
            spread_pct,
            launches: spreads.len(),
            load_average,
            cores,
            noisy: !why.is_empty(),
            why: (!why.is_empty()).then(|| why.join("; ")),
        }
    }

    /// One line for the printed report.
    pub fn line(&self) -> String {
        let spread = match self.spread_pct {
            Some(s) => format!(
                "repetitions spread {s:.1} % of their median (middle half, median of {} \
                 launches)",
                self.launches
            ),
            None => "spread not measured (fewer than 3 repetitions per launch)".to_string(),
        };
        let load = match self.load_average {
            Some((before, after)) => format!(
                ", load average {before:.1} -> {after:.1} on {} cores",
                self.cores
            ),
            None => String::new(),
        };
        let verdict = if self.noisy {
            "NOISY: the step errors below measure this machine's load as much as the model"
        } else {
            "steady"
        };
        format!("timing noise: {spread}{load}: {verdict}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steady_timings_on_an_idle_machine_are_not_noisy() {
        let noise = TimingNoise::assess(&[0.01, 0.02, 0.03], Some((0.9, 1.1)), 2);
        assert_eq!(noise.spread_pct, Some(2.0));
        assert!(!noise.noisy && noise.why.is_none(), "{noise:?}");
        assert!(noise.line().ends_with("steady"), "{}", noise.line());
    }

    #[test]
    fn a_wide_spread_or_a_loaded_machine_is_noisy_and_says_why() {
        let spread = TimingNoise::assess(&[0.02, 0.08, 0.12], None, 2);
        assert!(spread.noisy);
        assert!(
            spread.why.as_deref().unwrap().contains("8.0 %"),
            "{spread:?}"
        );
        let loaded = TimingNoise::assess(&[0.01, 0.01, 0.01], Some((1.2, 2.3)), 2);
        assert!(loaded.noisy);
        assert!(
            loaded
                .why
                .as_deref()
                .unwrap()
                .contains("load average 2.3 on 2 cores"),
            "{loaded:?}"
        );
        assert!(loaded.line().contains("NOISY"), "{}", loaded.line());
    }

    #[test]
    fn one_repetition_per_launch_measures_no_spread() {
        let noise = TimingNoise::assess(&[], None, 4);
        assert_eq!((noise.spread_pct, noise.noisy), (None, false));
        assert!(noise.line().contains("not measured"), "{}", noise.line());
    }
}
