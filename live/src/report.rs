//! The fidelity report's outputs: `fidelity.json` (written atomically), the printed table, and
//! two figures (predicted vs measured step times, with the y = x line; the CDF of the absolute
//! relative error).

use crate::LiveReport;
use crate::probe::{Probe, ProbeOutcome, Verdict};
use figures::{Chart, ChartFigure, Panel, ScatterPanel, ScatterSeries, Series};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The printed summary: device and timing, the error distribution, the decisions check and
/// the summary metrics side by side.
pub fn table(report: &LiveReport) -> String {
    let mut out = String::new();
    let e = &report.errors;
    let _ = writeln!(
        out,
        "live {} ({}, seed {}) on {} [{}], {}; clock: {:?}",
        report.scenario,
        report.family,
        report.seed,
        report.device,
        report.backend,
        report.timing,
        report.clock
    );
    let _ = writeln!(
        out,
        "model: {}; predictions: {} profile",
        report.model, report.cost_model_source
    );
    match (&report.profile, &report.calibrated) {
        (Some(path), Some(c)) => {
            let _ = writeln!(
                out,
                "priced by: {path} (measured on this device by --calibrate: {} points, {} \
                 repetitions, {:.1} s)",
                c.points, c.repetitions, c.seconds
            );
        }
        (Some(path), None) => {
            let _ = writeln!(out, "priced by: {path} (the profile the scenario names)");
        }
        _ => {}
    }
    let _ = writeln!(out, "{}", probe_line(&report.probe));
    if let Some(e) = &report.execution {
        let _ = writeln!(out, "execution: {e}");
    }
    if let Some(v) = &report.variability {
        let _ = writeln!(out, "GPU variability: {v}");
    }
    let _ = writeln!(out, "{}", report.timing_noise.line());
    let _ = writeln!(
        out,
        "step time error over {} steps{}: MAPE {:.1} %, p50 {:.1} %, p90 {:.1} %, worst {:.1} %, bias {:+.1} %, predicted/measured total {:.3}",
        e.steps,
        if report.timing_noise.noisy {
            " (noisy timings: not the model's error alone)"
        } else {
            ""
        },
        e.mape_pct,
        e.p50_pct,
        e.p90_pct,
        e.worst_pct,
        e.bias_pct,
        e.total_ratio
    );
    let d = &report.decisions;
    let _ = writeln!(
        out,
        "decisions ({}): {}",
        d.compared,
        if d.identical {
            format!("identical ({} entries)", d.simulated_count)
        } else {
            let (s, l) = d.first_difference.clone().unwrap_or_default();
            format!("differ; first: simulated `{s}` vs live `{l}`")
        }
    );
    let _ = writeln!(
        out,
        "{:<22} {:>14} {:>14} {:>9}",
        "metric", "simulated", "live", "error %"
    );
    for m in &report.metrics {
        let _ = writeln!(
            out,
            "{:<22} {:>14.4} {:>14.4} {:>9.1}",
            m.metric, m.simulated, m.live, m.error_pct
        );
    }
    out
}

/// One line: the probe's verdict, or why it did not run.
pub fn probe_line(outcome: &ProbeOutcome) -> String {
    match outcome {
        ProbeOutcome::Ran(p) => format!(
            "probe: median |error| {:.1} % (signed {:+.1} %) over {} points, threshold {} %: {}",
            p.median_abs_error_pct,
            p.median_error_pct,
            p.points.len(),
            p.threshold_pct,
            match p.verdict {
                Verdict::Describes => "the profile describes this device",
                Verdict::DoesNotDescribe => "the profile does NOT describe this device",
            }
        ),
        ProbeOutcome::Skipped { reason } => format!("probe: not run ({reason})"),
    }
}

/// The probe, point by point, then its verdict line.
pub fn probe_table(probe: &Probe) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "probe of {} (measured on {}) on {}: {} points, {}",
        probe.profile,
        probe.profile_device,
        probe.device,
        probe.points.len(),
        probe.repetitions
    );
    let _ = writeln!(
        out,
        "  {:<20} {:>7} {:>14} {:>14} {:>9} {:>6}",
        "series", "x", "profile (us)", "here (us)", "error %", "reps"
    );
    for p in &probe.points {
        let _ = writeln!(
            out,
            "  {:<20} {:>7} {:>14.1} {:>14.1} {:>+9.1} {:>6}",
            p.series,
            p.x,
            p.profile_ns / 1e3,
            p.measured_ns / 1e3,
            p.error_pct,
            p.repetitions
        );
    }
    let _ = writeln!(
        out,
        "{} ({:.1} s)",
        probe_line(&ProbeOutcome::Ran(probe.clone())),
        probe.seconds
    );
    out
}

/// Writes `<dir>/fidelity.json` (through a temporary file, renamed into place).
pub fn write_json(report: &LiveReport, dir: &Path) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join("fidelity.json");
    let tmp = dir.join("fidelity.json.tmp");
    let text = serde_json::to_string_pretty(report).map_err(|e| e.to_string())?;
    std::fs::write(&tmp, text + "\n").map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, &path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// The two figures, as data.
pub fn figure(report: &LiveReport) -> ChartFigure {
    let points: Vec<(f64, f64)> = report
        .steps
        .iter()
        .map(|s| (s.predicted_ns / 1e6, s.measured_ns / 1e6))
        .collect();
    let max = points
        .iter()
        .map(|&(p, m)| p.max(m))
        .fold(0.0f64, f64::max)
        .max(1e-3);
    let scatter = ScatterPanel {
        title: "step time: predicted vs measured".into(),
        x_label: "predicted (ms)".into(),
        y_label: format!("measured on {} (ms)", report.backend),
        series: vec![ScatterSeries {
            label: "steps (line: measured = predicted)".into(),
            points,
            frontier: vec![(0.0, 0.0), (max, max)],
        }],
    };
    let cdf = Panel {
        title: "CDF of |relative error|".into(),
        x_label: "|predicted - measured| / measured (%)".into(),
        y_label: "share of steps".into(),
        series: vec![Series {
            label: "error CDF".into(),
            points: crate::fidelity::error_cdf(&report.steps),
            y_err: None,
        }],
        log_y: false,
    };
    ChartFigure::new(
        format!(
            "{}: simulator fidelity ({})",
            report.scenario, report.backend
        ),
        vec![Chart::Scatter(scatter), Chart::Line(cdf)],
        2,
    )
}

/// Renders the figures under `<dir>/figures/fidelity.{png,svg}`.
pub fn write_figures(report: &LiveReport, dir: &Path) -> Result<Vec<PathBuf>, String> {
    if report.steps.is_empty() {
        return Ok(Vec::new());
    }
    let stem = dir.join("figures").join("fidelity");
    if let Some(parent) = stem.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    figures::render(&figure(report), &stem).map_err(|e| format!("{}: {e}", stem.display()))
}
