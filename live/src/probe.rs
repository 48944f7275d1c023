//! Before a live run: does the scenario's measured profile describe the device the run is on?
//! A few of the profile's own measured points are timed again here, with the workloads the
//! calibration timed (`calibrate::bench`, at the profile's tile, decode context and warm-up,
//! repeated until the median is known to 2 % at 95 %), and each is compared with the profile's
//! median: error = (profile - here) / here, as the fidelity report's step errors (positive:
//! the profile predicts too long). When the median |error| exceeds the threshold, the profile
//! was measured on another device (or under other conditions) and the run's predictions
//! would inherit that error, so `expertsim live` warns with the command to recalibrate.
//!
//! The points: from each of the four series that price steps (`expert_ffn`,
//! `non_expert_prefill`, `non_expert_decode`, `head`), `points_per_series` samples at evenly
//! spaced ranks of that series' sampled counts (first and last included), so the probe spans
//! the profile's token and batch range.

use crate::LiveError;
use crate::device::Kernels;
use calibrate::adaptive::StoppingRule;
use calibrate::bench::{Bench, Series};
use expertsim_scenario::cost::profile::MeasuredProfile;
use expertsim_scenario::scenario::ScenarioPlan;
use kernels::BackendError;
use serde::Serialize;
use std::path::{Component, Path, PathBuf};
use std::time::Instant;

/// Points per series by default (3 x 4 series = 12 points).
pub const DEFAULT_POINTS_PER_SERIES: usize = 3;

/// The default threshold on the median |error|, percent (docs/fidelity.md says why).
pub const DEFAULT_THRESHOLD_PCT: f64 = 10.0;

/// The series that price steps, in probing order.
const STEP_SERIES: [Series; 4] = [
    Series::ExpertFfn,
    Series::NonExpertPrefill,
    Series::NonExpertDecode,
    Series::Head,
];

/// How to probe.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeOptions {
    pub points_per_series: usize,
    pub threshold_pct: f64,
    /// How long each point is repeated.
    pub rule: StoppingRule,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        ProbeOptions {
            points_per_series: DEFAULT_POINTS_PER_SERIES,
            threshold_pct: DEFAULT_THRESHOLD_PCT,
            rule: StoppingRule::default(),
        }
    }
}

/// One probed point.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProbePoint {
    pub series: String,
    pub x: usize,
    /// The profile's median, ns.
    pub profile_ns: f64,
    /// The median measured here, ns.
    pub measured_ns: f64,
    pub repetitions: usize,
    /// (profile - measured) / measured, percent.
    pub error_pct: f64,
}

/// Whether the profile describes this device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Median |error| at or under the threshold.
    Describes,
    /// Median |error| over the threshold.
    DoesNotDescribe,
}

/// A probe that ran.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Probe {
    /// The profile, as the scenario resolves it.
    pub profile: String,
    /// The device the profile says it was measured on, and the one probed.
    pub profile_device: String,
    pub device: String,
    pub points: Vec<ProbePoint>,
    pub median_abs_error_pct: f64,
    /// The median signed error (the profile's bias on this device).
    pub median_error_pct: f64,
    pub threshold_pct: f64,
    pub verdict: Verdict,
    /// How each point was repeated.
    pub repetitions: String,
    /// Wall-clock seconds the probe took.
    pub seconds: f64,
}

/// What `fidelity.json` records about the probe.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum ProbeOutcome {
    Ran(Probe),
    Skipped { reason: String },
}

/// Times one point of a profile on some device: the median in ns and the repetitions it took.
pub trait PointTimer {
    fn time(&mut self, series: &Series, x: usize) -> Result<(f64, usize), BackendError>;
}

/// The real timer: the calibration's workloads on the live run's backend.
struct DeviceTimer<'k> {
    kernels: &'k mut Kernels,
    bench: Bench,
    warmup: usize,
    rule: StoppingRule,
}

impl PointTimer for DeviceTimer<'_> {
    fn time(&mut self, series: &Series, x: usize) -> Result<(f64, usize), BackendError> {
        let timed = self.bench.time(
            self.kernels.backend_mut(),
            series,
            x,
            self.warmup,
            &self.rule,
        )?;
        Ok((timed.row[1], timed.repetitions))
    }
}

/// The probe points of `profile`: `(series, x, the profile's median)`.
pub fn choose_points(profile: &MeasuredProfile, per_series: usize) -> Vec<(Series, usize, f64)> {
    let mut chosen = Vec::new();
    for series in STEP_SERIES {
        let name = series.name();
        let Some(m) = profile
            .calibration
            .measurements
            .iter()
            .find(|m| m.name == name)
        else {
            continue;
        };
        let n = m.points.len();
        let k = per_series.min(n);
        let mut ranks: Vec<usize> = match k {
            0 => vec![],
            1 => vec![n / 2],
            _ => (0..k)
                .map(|i| ((i * (n - 1)) as f64 / (k - 1) as f64).round() as usize)
                .collect(),
        };
        ranks.dedup();
        for r in ranks {
            let row = m.points[r];
            chosen.push((series, row[0] as usize, row[1]));
        }
    }
    chosen
}

/// The median of `values` (mean of the middle two for an even count; 0 when empty).
fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    calibrate::adaptive::median_of_sorted(&values)
}

/// Probes `profile` (named `path`) with `timer` on `device`.
pub fn probe_with(
    profile: &MeasuredProfile,
    path: &str,
    device: &str,
    options: &ProbeOptions,
    timer: &mut dyn PointTimer,
) -> Result<Probe, BackendError> {
    let started = Instant::now();
    let mut points = Vec::new();
    for (series, x, profile_ns) in choose_points(profile, options.points_per_series) {
        let (measured_ns, repetitions) = timer.time(&series, x)?;
        points.push(ProbePoint {
            series: series.name(),
            x,
            profile_ns,
            measured_ns,
            repetitions,
            error_pct: (profile_ns - measured_ns) / measured_ns * 100.0,
        });
    }
    let median_abs_error_pct = median(points.iter().map(|p| p.error_pct.abs()).collect());
    let median_error_pct = median(points.iter().map(|p| p.error_pct).collect());
    Ok(Probe {
        profile: path.to_string(),
        profile_device: profile.calibration.device_name.clone(),
        device: device.to_string(),
        median_abs_error_pct,
        median_error_pct,
        threshold_pct: options.threshold_pct,
        verdict: if median_abs_error_pct <= options.threshold_pct {
            Verdict::Describes
        } else {
            Verdict::DoesNotDescribe
        },
        points,
        repetitions: options.rule.describe(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// `path` without `.` and with each `dir/..` folded (lexically), for messages.
pub fn tidy(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir
                if matches!(out.components().next_back(), Some(Component::Normal(_))) =>
            {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// The profile the single cell of `plan` names, resolved as the scenario loader resolves it:
/// `Ok(None)` when it names none.
pub fn scenario_profile(plan: &ScenarioPlan) -> Result<Option<PathBuf>, LiveError> {
    let Some(field) = plan.family.profile_field() else {
        return Ok(None);
    };
    let from_cell = plan.cells[0]
        .coords
        .iter()
        .find(|(key, _)| key == field)
        .map(|(_, value)| value.clone());
    let value = from_cell.or_else(|| {
        let mut keys = field.split('.');
        let top = plan.document.get(keys.next()?)?;
        // Through an array of replica groups, the first group's (`--set` sets every group's).
        keys.try_fold(top, |table, key| {
            let table = table.as_array().and_then(|a| a.first()).unwrap_or(table);
            table.get(key)
        })
        .cloned()
    });
    let Some(value) = value else {
        return Ok(None);
    };
    let Some(text) = value.as_str() else {
        return Err(LiveError::Unsupported(format!("{field} is not a string")));
    };
    let base = plan.path.parent().unwrap_or(Path::new("."));
    expertsim_scenario::validate::resolve_profile(field, text, base)
        .map(|p| Some(tidy(&p)))
        .map_err(|e| LiveError::Unsupported(format!("{}: {}", e.path, e.message)))
}

/// Probes the profile `plan` names on `kernels` (skipped, with the reason, when there is
/// nothing measured to probe).
pub fn run(
    kernels: &mut Kernels,
    plan: &ScenarioPlan,
    options: &ProbeOptions,
) -> Result<ProbeOutcome, LiveError> {
    let skipped = |reason: String| Ok(ProbeOutcome::Skipped { reason });
    let Some(path) = scenario_profile(plan)? else {
        return skipped(match plan.family.profile_field() {
            Some(field) => format!("the scenario names no measured profile ({field})"),
            None => "this family's steps are not priced by a MoE profile".into(),
        });
    };
    let profile = match MeasuredProfile::load(&path) {
        Ok(p) => p,
        Err(e) => return skipped(format!("nothing measured to probe: {e}")),
    };
    let c = &profile.calibration;
    let device = kernels.device_name().to_string();
    let mut timer = DeviceTimer {
        bench: Bench::new(
            &profile.profile.model,
            c.tile_tokens as usize,
            profile.profile.decode_context_tokens as usize,
            calibrate::pipeline::Plan::full().seed,
        )
        .with_tensor_parallel(profile.profile.tensor_parallel as usize),
        warmup: c.warmup as usize,
        rule: options.rule,
        kernels,
    };
    let probe = probe_with(
        &profile,
        &path.display().to_string(),
        &device,
        options,
        &mut timer,
    )?;
    Ok(ProbeOutcome::Ran(probe))
}

#[cfg(test)]
mod tests {
    use super::*;
    use expertsim_scenario::cost::profile::{Calibration, Measurement};

    /// A profile whose four step series hold `n` points each, median `ns(x)`.
    fn profile(n: usize, ns: impl Fn(f64) -> f64) -> MeasuredProfile {
        let shape = expertsim_scenario::cost::shape::MoeModelShape::live_tiny_moe();
        let gpu = expertsim_scenario::cost::GpuSpec::by_name("H200").unwrap();
        let measurements = STEP_SERIES
            .iter()
            .map(|s| Measurement {
                name: s.name(),
                x: s.x_label().into(),
                points: (1..=n)
                    .map(|i| {
                        let (x, y) = (i as f64 * 10.0, ns(i as f64 * 10.0));
                        [x, y, y, y, y, y]
                    })
                    .collect(),
                repetitions: None,
            })
            .collect();
        MeasuredProfile {
            profile: expertsim_scenario::cost::roofline::analytic_profile(&gpu, &shape),
            calibration: Calibration {
                backend: "cpu".into(),
                device_name: "the machine the profile was measured on".into(),
                compute_capability: None,
                driver: None,
                kernel_source_hash: "0".into(),
                tile_tokens: 64,
                timing: "wall clock".into(),
                warmup: 0,
                repetitions: 1,
                stopping: None,
                profiling_seconds: 0.0,
                measurements,
            },
        }
    }

    /// A device whose every point takes `ns(x)` (no clock involved).
    struct FakeDevice<F: Fn(f64) -> f64>(F);

    impl<F: Fn(f64) -> f64> PointTimer for FakeDevice<F> {
        fn time(&mut self, _: &Series, x: usize) -> Result<(f64, usize), BackendError> {
            Ok(((self.0)(x as f64), 10))
        }
    }

    #[test]
    fn points_spread_over_each_series_range() {
        let p = profile(16, |x| 1000.0 + x);
        let points = choose_points(&p, 3);
        assert_eq!(points.len(), 12);
        let xs: Vec<usize> = points.iter().take(3).map(|&(_, x, _)| x).collect();
        // Ranks 0, 7.5 -> 8, 15 of x = 10, 20, ..., 160.
        assert_eq!(xs, vec![10, 90, 160]);
        assert_eq!(points[0].2, 1010.0);
        assert_eq!(choose_points(&p, 1)[0].1, 90);
        assert_eq!(choose_points(&profile(2, |x| x), 3).len(), 8);
    }

    /// A profile measured on a device 1.6x slower than this one (every median 1.6x what this
    /// device takes) is off by +60 % at every point: flagged against the 10 % threshold. The
    /// same profile against a device that matches it passes.
    #[test]
    fn a_profile_scaled_by_1_6_is_flagged() {
        let here = |x: f64| 50_000.0 + 300.0 * x;
        let slow = profile(16, |x| 1.6 * here(x));
        let options = ProbeOptions::default();
        let probe =
            probe_with(&slow, "slow.json", "here", &options, &mut FakeDevice(here)).unwrap();
        assert_eq!(probe.points.len(), 12);
        assert!(
            probe
                .points
                .iter()
                .all(|p| (p.error_pct - 60.0).abs() < 1e-9)
        );
        assert!((probe.median_abs_error_pct - 60.0).abs() < 1e-9);
        assert!((probe.median_error_pct - 60.0).abs() < 1e-9);
        assert_eq!(probe.verdict, Verdict::DoesNotDescribe);
        let matching = profile(16, here);
        let probe = probe_with(
            &matching,
            "ok.json",
            "here",
            &options,
            &mut FakeDevice(here),
        )
        .unwrap();
        assert_eq!(probe.median_abs_error_pct, 0.0);
        assert_eq!(probe.verdict, Verdict::Describes);
    }

    /// The verdict reads the median |error|: a few wild points do not flag a profile whose
    /// other points agree, and the threshold is inclusive.
    #[test]
    fn the_verdict_is_the_median_against_the_threshold() {
        let here = |x: f64| 1000.0 + x;
        // Points with x >= 150 (the last of each series) are 3x off; the rest exact.
        let p = profile(16, |x| if x >= 150.0 { 3.0 * here(x) } else { here(x) });
        let probe = probe_with(
            &p,
            "p",
            "d",
            &ProbeOptions::default(),
            &mut FakeDevice(here),
        )
        .unwrap();
        assert_eq!(probe.median_abs_error_pct, 0.0);
        assert_eq!(probe.verdict, Verdict::Describes);
        let tenth = profile(16, |x| 1.1 * here(x));
        let options = ProbeOptions {
            threshold_pct: 10.000_001,
            ..ProbeOptions::default()
        };
        let probe = probe_with(&tenth, "p", "d", &options, &mut FakeDevice(here)).unwrap();
        assert_eq!(probe.verdict, Verdict::Describes);
    }

    #[test]
    fn tidy_folds_parent_directories() {
        assert_eq!(
            tidy(Path::new("scenarios/live/../../profiles/measured/a.json")),
            PathBuf::from("profiles/measured/a.json")
        );
        assert_eq!(tidy(Path::new("../a/./b")), PathBuf::from("../a/b"));
    }
}
