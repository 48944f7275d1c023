//! The `[arrival]` table a family's scenario can carry (`pattern` = poisson, gamma, bursty,
//! offline or trace, with `rate_per_s`, `cv` (gamma), `[arrival.bursty]` and
//! `arrival.trace = { path, time_scale }`), its
//! validation into an [`ArrivalSpec`] with errors naming the field, and the streaming
//! [`ArrivalProcess`] a run draws from. The same table and the same processes for every family
//! that reads it (CAPS, GEM, Chimera, ExpertWeave, serving).

use super::{
    ArrivalProcess, Bursty, BurstyParams, GammaArrivals, Offline, Poisson, Trace, TraceReplay,
    TraceStats,
};
use crate::rng::SimRng;
use crate::validate::limits::MAX_SIM_SECONDS_CEILING;
use crate::validate::{FieldError, MAX_RATE_PER_S, duration, field_error, positive};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `[arrival]` as written in the scenario file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArrivalTable {
    pub pattern: ArrivalPattern,
    /// Long-run mean arrival rate (poisson, gamma and bursty).
    #[serde(default)]
    pub rate_per_s: Option<f64>,
    /// Coefficient of variation of the inter-arrival gaps (gamma only).
    #[serde(default)]
    pub cv: Option<f64>,
    /// Burst parameters (bursty only; defaults in `arrivals::bursty`).
    #[serde(default)]
    pub bursty: Option<BurstyParams>,
    /// The recorded trace (trace only).
    #[serde(default)]
    pub trace: Option<TraceReplayTable>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArrivalPattern {
    Poisson,
    Gamma,
    Bursty,
    Offline,
    Trace,
}

/// `arrival.trace`: a CSV trace (`expertsim_scenario::arrivals::Trace`'s columns) and its replay speed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceReplayTable {
    /// CSV path, relative to the scenario file.
    pub path: String,
    /// Multiplies every inter-arrival time (0.5 replays twice as fast).
    #[serde(default = "default_time_scale")]
    pub time_scale: f64,
}

fn default_time_scale() -> f64 {
    1.0
}

/// A validated arrival pattern.
#[derive(Clone, Debug)]
pub enum ArrivalSpec {
    Poisson {
        rate_per_s: f64,
    },
    /// A gamma renewal process: gaps of mean `1 / rate_per_s` and coefficient of variation `cv`.
    Gamma {
        rate_per_s: f64,
        cv: f64,
    },
    Bursty {
        rate_per_s: f64,
        params: BurstyParams,
    },
    /// Every request at t = 0.
    Offline,
    /// The trace's arrival times (shifted to start at 0, times `time_scale`) and token counts.
    Trace {
        trace: Arc<Trace>,
        time_scale: f64,
    },
}

impl ArrivalTable {
    /// Checks the table for a run of (at most) `n_requests` requests; a trace path resolves
    /// against `base_dir` and is loaded once per sweep through `traces` (the sweep's
    /// `LoadCache::traces`).
    pub fn validate(
        &self,
        n_requests: usize,
        base_dir: &Path,
        traces: &mut HashMap<PathBuf, Arc<Trace>>,
    ) -> Result<ArrivalSpec, FieldError> {
        let rate = |pattern: &str| -> Result<f64, FieldError> {
            let rate = self.rate_per_s.ok_or_else(|| {
                field_error(
                    "arrival.rate_per_s",
                    format!("is required for pattern \"{pattern}\""),
                )
            })?;
            crate::validate::rate("arrival.rate_per_s", rate)
        };
        let unused = |present: bool, field: &str, pattern: &str| -> Result<(), FieldError> {
            if present {
                Err(field_error(
                    &format!("arrival.{field}"),
                    format!("does not apply to pattern \"{pattern}\""),
                ))
            } else {
                Ok(())
            }
        };
        Ok(match self.pattern {
            ArrivalPattern::Poisson => {
                unused(self.bursty.is_some(), "bursty", "poisson")?;
                unused(self.trace.is_some(), "trace", "poisson")?;
                unused(self.cv.is_some(), "cv", "poisson")?;
                ArrivalSpec::Poisson {
                    rate_per_s: rate("poisson")?,
                }
            }
            ArrivalPattern::Gamma => {
                unused(self.bursty.is_some(), "bursty", "gamma")?;
                unused(self.trace.is_some(), "trace", "gamma")?;
                let cv = self.cv.ok_or_else(|| {
                    field_error("arrival.cv", "is required for pattern \"gamma\"")
                })?;
                let cv = positive("arrival.cv", cv)?;
                // The gamma's shape 1 / cv^2 must stay a usable number (rand_distr needs a
                // finite positive shape; below 1e-3 or above 1e3 a CV means nothing physical).
                if !(1e-3..=1e3).contains(&cv) {
                    return Err(field_error(
                        "arrival.cv",
                        format!("must lie in [0.001, 1000], got {cv}"),
                    ));
                }
                ArrivalSpec::Gamma {
                    rate_per_s: rate("gamma")?,
                    cv,
                }
            }
            ArrivalPattern::Bursty => {
                unused(self.trace.is_some(), "trace", "bursty")?;
                unused(self.cv.is_some(), "cv", "bursty")?;
                let params = self.bursty.unwrap_or_default();
                params.validate().map_err(|e| {
                    field_error(&format!("arrival.bursty.{}", e.field), e.to_string())
                })?;
                let rate_per_s = rate("bursty")?;
                check_bursty(&params, rate_per_s)?;
                let spec = ArrivalSpec::Bursty { rate_per_s, params };
                if n_requests != usize::MAX {
                    spec.check_span(n_requests as f64 / rate_per_s)?;
                }
                spec
            }
            ArrivalPattern::Offline => {
                unused(self.rate_per_s.is_some(), "rate_per_s", "offline")?;
                unused(self.cv.is_some(), "cv", "offline")?;
                unused(self.bursty.is_some(), "bursty", "offline")?;
                unused(self.trace.is_some(), "trace", "offline")?;
                ArrivalSpec::Offline
            }
            ArrivalPattern::Trace => {
                unused(self.rate_per_s.is_some(), "rate_per_s", "trace")?;
                unused(self.cv.is_some(), "cv", "trace")?;
                unused(self.bursty.is_some(), "bursty", "trace")?;
                let table = self.trace.as_ref().ok_or_else(|| {
                    field_error(
                        "arrival.trace",
                        "pattern \"trace\" needs arrival.trace = { path = \"...\" }",
                    )
                })?;
                let time_scale = positive("arrival.trace.time_scale", table.time_scale)?;
                let path = base_dir.join(&table.path);
                let trace = match traces.get(&path) {
                    Some(trace) => trace.clone(),
                    None => {
                        let trace = Arc::new(
                            Trace::load(&path)
                                .map_err(|e| field_error("arrival.trace.path", e.to_string()))?,
                        );
                        traces.insert(path, trace.clone());
                        trace
                    }
                };
                // What only the trace's contents can tell: its span in simulated time.
                TraceReplay::new(
                    trace.clone(),
                    Some(n_requests),
                    time_scale,
                    1,
                    crate::rng::stream(0, "validate"),
                )
                .map_err(|e| field_error("arrival.trace", e.to_string()))?;
                ArrivalSpec::Trace { trace, time_scale }
            }
        })
    }
}

/// What the bursty process derives from its parameters, checked against simulated time: each
/// phase's mean a duration and the rate in a burst at most `MAX_RATE_PER_S`.
fn check_bursty(params: &BurstyParams, rate_per_s: f64) -> Result<(), FieldError> {
    duration(
        "arrival.bursty.mean_burst_s",
        params.mean_burst_s,
        MAX_SIM_SECONDS_CEILING,
    )?;
    duration(
        "arrival.bursty.mean_calm_s",
        params.mean_calm_s,
        MAX_SIM_SECONDS_CEILING,
    )?;
    let burst_rate = params.burst_rate_per_s(rate_per_s);
    if burst_rate.is_nan() || burst_rate > MAX_RATE_PER_S {
        return Err(field_error(
            "arrival.bursty.burst_rate_multiplier",
            format!(
                "= {:e}: a burst's rate of {burst_rate:e} per second (arrival.rate_per_s = \
                 {rate_per_s} raised by it) puts arrivals less than 1 µs apart; at most \
                 {MAX_RATE_PER_S:e} (docs/limits.md)",
                params.burst_rate_multiplier
            ),
        ));
    }
    Ok(())
}

/// The most burst and calm phases a bursty run may step through (the process draws each).
pub const MAX_PHASES: f64 = 1e8;

impl ArrivalSpec {
    /// Checks what a run over `span_s` seconds derives from the process: a bursty one steps
    /// through every burst and calm phase, at most `MAX_PHASES` of them.
    pub fn check_span(&self, span_s: f64) -> Result<(), FieldError> {
        if let ArrivalSpec::Bursty { params, .. } = self {
            let phases = 2.0 * span_s / (params.mean_burst_s + params.mean_calm_s);
            if phases > MAX_PHASES {
                return Err(field_error(
                    "arrival.bursty.mean_burst_s",
                    format!(
                        "bursts of {:e} s and calms of {:e} s switch {phases:e} times over the \
                         run's {span_s:e} s, above {MAX_PHASES:e}: lengthen the phases",
                        params.mean_burst_s, params.mean_calm_s
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The streaming process of at most `n_requests` arrivals, topics in `0..n_topics`, drawing
    /// from `rng`.
    pub fn process(
        &self,
        n_requests: usize,
        n_topics: u32,
        rng: SimRng,
    ) -> Box<dyn ArrivalProcess> {
        match self {
            ArrivalSpec::Poisson { rate_per_s } => {
                Box::new(Poisson::new(*rate_per_s, n_requests, n_topics, rng))
            }
            ArrivalSpec::Gamma { rate_per_s, cv } => Box::new(GammaArrivals::new(
                *rate_per_s,
                *cv,
                n_requests,
                n_topics,
                rng,
            )),
            ArrivalSpec::Bursty { rate_per_s, params } => {
                Box::new(Bursty::new(*rate_per_s, *params, n_requests, n_topics, rng))
            }
            ArrivalSpec::Offline => Box::new(Offline::new(n_requests, n_topics, rng)),
            ArrivalSpec::Trace { trace, time_scale } => Box::new(
                TraceReplay::new(trace.clone(), Some(n_requests), *time_scale, n_topics, rng)
                    .expect("trace replay parameters were checked when the scenario was validated"),
            ),
        }
    }

    /// Requests a run of `n_requests` serves: all of them, or the trace's rows if fewer.
    pub fn requests(&self, n_requests: usize) -> usize {
        match self {
            ArrivalSpec::Trace { trace, .. } => n_requests.min(trace.len()),
            _ => n_requests,
        }
    }

    /// Seconds over which `n_requests` arrive on average (the trace's replayed span; 0 offline).
    pub fn span_s(&self, n_requests: usize) -> f64 {
        match self {
            ArrivalSpec::Poisson { rate_per_s }
            | ArrivalSpec::Gamma { rate_per_s, .. }
            | ArrivalSpec::Bursty { rate_per_s, .. } => n_requests as f64 / rate_per_s,
            ArrivalSpec::Offline => 0.0,
            ArrivalSpec::Trace { trace, time_scale } => {
                trace.stats(Some(n_requests), *time_scale).span_s
            }
        }
    }

    /// The trace file and what replaying its first `n_requests` rows offers (`expertsim
    /// validate` prints it), when the pattern is a trace.
    pub fn trace_stats(&self, n_requests: usize) -> Option<(std::path::PathBuf, TraceStats)> {
        match self {
            ArrivalSpec::Trace { trace, time_scale } => Some((
                trace.path().to_path_buf(),
                trace.stats(Some(n_requests), *time_scale),
            )),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arrivals::test_support::collect;
    use crate::rng::stream;
    use crate::time::SimTime;

    fn table(text: &str) -> ArrivalTable {
        toml::from_str(text).unwrap()
    }

    fn validate(text: &str) -> Result<ArrivalSpec, FieldError> {
        let traces = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/traces");
        table(text).validate(100, &traces, &mut HashMap::new())
    }

    #[test]
    fn each_pattern_builds_its_process() {
        let offline = validate("pattern = \"offline\"").unwrap();
        let all = collect(offline.process(5, 1, stream(1, "a")).as_mut());
        assert_eq!(all.len(), 5);
        assert!(all.iter().all(|a| a.time == SimTime::ZERO));
        let poisson = validate("pattern = \"poisson\"\nrate_per_s = 10.0").unwrap();
        assert_eq!(poisson.span_s(50), 5.0);
        let gamma = validate("pattern = \"gamma\"\nrate_per_s = 10.0\ncv = 2.0").unwrap();
        assert_eq!(gamma.span_s(50), 5.0);
        assert_eq!(
            collect(gamma.process(9, 1, stream(1, "a")).as_mut()).len(),
            9
        );
        let bursty = validate("pattern = \"bursty\"\nrate_per_s = 10.0").unwrap();
        assert_eq!(
            collect(bursty.process(7, 1, stream(1, "a")).as_mut()).len(),
            7
        );
    }

    #[test]
    fn a_trace_replays_its_rows_and_is_loaded_once() {
        let traces = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/traces");
        let mut cache = HashMap::new();
        let t = table(
            "pattern = \"trace\"\ntrace = { path = \"azure_conv_2023.csv\", time_scale = 0.5 }",
        );
        let spec = t.validate(3, &traces, &mut cache).unwrap();
        t.validate(3, &traces, &mut cache).unwrap();
        assert_eq!(cache.len(), 1);
        // The file's first rows: 0.0,374,44 / 4.314579,396,109 / 4.541877,879,55.
        let rows = collect(spec.process(3, 1, stream(1, "a")).as_mut());
        let got: Vec<(SimTime, Option<u32>, Option<u32>)> = rows
            .iter()
            .map(|a| (a.time, a.prompt_tokens, a.output_tokens))
            .collect();
        assert_eq!(
            got,
            vec![
                (SimTime::ZERO, Some(374), Some(44)),
                (SimTime::from_secs_f64(4.314579 * 0.5), Some(396), Some(109)),
                (SimTime::from_secs_f64(4.541877 * 0.5), Some(879), Some(55)),
            ]
        );
        assert_eq!(spec.requests(3), 3);
        assert_eq!(spec.requests(1_000_000), 19_366);
        let (path, stats) = spec.trace_stats(3).unwrap();
        assert!(path.ends_with("azure_conv_2023.csv"));
        assert_eq!(stats.requests, 3);
    }

    #[test]
    fn errors_name_the_field() {
        let path = |text: &str| validate(text).unwrap_err().path;
        assert_eq!(path("pattern = \"poisson\""), "arrival.rate_per_s");
        assert_eq!(
            path("pattern = \"poisson\"\nrate_per_s = -1.0"),
            "arrival.rate_per_s"
        );
        assert_eq!(
            path("pattern = \"offline\"\nrate_per_s = 1.0"),
            "arrival.rate_per_s"
        );
        assert_eq!(path("pattern = \"trace\""), "arrival.trace");
        assert_eq!(path("pattern = \"gamma\"\nrate_per_s = 1.0"), "arrival.cv");
        assert_eq!(
            path("pattern = \"gamma\"\nrate_per_s = 1.0\ncv = 0.0"),
            "arrival.cv"
        );
        assert_eq!(
            path("pattern = \"poisson\"\nrate_per_s = 1.0\ncv = 2.0"),
            "arrival.cv"
        );
        assert_eq!(
            path("pattern = \"trace\"\ntrace = { path = \"missing.csv\" }"),
            "arrival.trace.path"
        );
        assert_eq!(
            path(
                "pattern = \"trace\"\ntrace = { path = \"azure_conv_2023.csv\", time_scale = 0.0 }"
            ),
            "arrival.trace.time_scale"
        );
        assert_eq!(
            path(
                "pattern = \"bursty\"\nrate_per_s = 1.0\nbursty = { burst_rate_multiplier = 0.5 }"
            ),
            "arrival.bursty.burst_rate_multiplier"
        );
        assert!(toml::from_str::<ArrivalTable>("pattern = \"offline\"\nrate = 1.0").is_err());
    }

    #[test]
    fn derived_rates_and_phases_are_checked_against_simulated_time() {
        let path = |text: &str| validate(text).unwrap_err().path;
        // The rate: `validate` passed, `run` panicked building the process.
        assert_eq!(
            path("pattern = \"poisson\"\nrate_per_s = 1e308"),
            "arrival.rate_per_s"
        );
        assert_eq!(
            path("pattern = \"gamma\"\nrate_per_s = 1e9\ncv = 2.0"),
            "arrival.rate_per_s"
        );
        assert_eq!(
            path(
                "pattern = \"bursty\"\nrate_per_s = 5e5\nbursty = { burst_rate_multiplier = 1e300 }"
            ),
            "arrival.bursty.burst_rate_multiplier"
        );
        assert_eq!(
            path("pattern = \"bursty\"\nrate_per_s = 1.0\nbursty = { mean_burst_s = 1e-300 }"),
            "arrival.bursty.mean_burst_s"
        );
        // 100 requests at 0.001/s span 1e5 s: 1e12 phases of 1e-7 s.
        assert_eq!(
            path(
                "pattern = \"bursty\"\nrate_per_s = 0.001\nbursty = { mean_burst_s = 1e-7, mean_calm_s = 1e-7 }"
            ),
            "arrival.bursty.mean_burst_s"
        );
        assert_eq!(
            path("pattern = \"bursty\"\nrate_per_s = 1.0\nbursty = { mean_calm_s = 1e9 }"),
            "arrival.bursty.mean_calm_s"
        );
    }
}
