//! The fidelity report: every step's predicted time (the simulator's cost model with the
//! profile in use) beside its measured time, the relative-error distribution, and the summary
//! metrics of the simulated run beside the live run's.

use serde::Serialize;

/// One executed step.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepRecord {
    pub index: usize,
    /// What the step was, e.g. "batch of 4 requests, 96 prompt tokens, 3 decode steps".
    pub what: String,
    pub predicted_ns: f64,
    pub measured_ns: f64,
}

impl StepRecord {
    /// (measured - predicted) / measured: how far the simulator was off, as a share of what
    /// really happened.
    pub fn relative_error(&self) -> f64 {
        if self.measured_ns > 0.0 {
            (self.predicted_ns - self.measured_ns) / self.measured_ns
        } else if self.predicted_ns > 0.0 {
            f64::INFINITY
        } else {
            0.0
        }
    }
}

/// The distribution of |relative error| over the steps.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ErrorSummary {
    pub steps: usize,
    /// Mean absolute percentage error, percent.
    pub mape_pct: f64,
    pub p50_pct: f64,
    pub p90_pct: f64,
    pub worst_pct: f64,
    /// Mean signed error, percent (positive: the simulator predicted too long).
    pub bias_pct: f64,
    /// Sum of predicted over sum of measured time.
    pub total_ratio: f64,
}

/// Nearest-rank quantile of sorted values.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

impl ErrorSummary {
    pub fn of(steps: &[StepRecord]) -> ErrorSummary {
        let mut abs: Vec<f64> = steps
            .iter()
            .map(|s| s.relative_error().abs() * 100.0)
            .collect();
        abs.sort_by(f64::total_cmp);
        let n = steps.len().max(1) as f64;
        let predicted: f64 = steps.iter().map(|s| s.predicted_ns).sum();
        let measured: f64 = steps.iter().map(|s| s.measured_ns).sum();
        ErrorSummary {
            steps: steps.len(),
            mape_pct: abs.iter().sum::<f64>() / n,
            p50_pct: quantile(&abs, 0.5),
            p90_pct: quantile(&abs, 0.9),
            worst_pct: abs.last().copied().unwrap_or(0.0),
            bias_pct: steps
                .iter()
                .map(|s| s.relative_error() * 100.0)
                .sum::<f64>()
                / n,
            total_ratio: if measured > 0.0 {
                predicted / measured
            } else {
                0.0
            },
        }
    }
}

/// One summary metric of the simulated and the live run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MetricPair {
    pub metric: String,
    pub simulated: f64,
    pub live: f64,
    /// (simulated - live) / live, percent (0 when both are 0).
    pub error_pct: f64,
}

/// The listed metrics of both runs, in the family's order; a metric neither run reports (NaN
/// in both: another experiment's, as GEM's profiling cost on a serving run) is left out.
pub fn metric_pairs(simulated: &[(String, f64)], live: &[(String, f64)]) -> Vec<MetricPair> {
    simulated
        .iter()
        .zip(live)
        .filter(|((_, s), (_, l))| !(s.is_nan() && l.is_nan()))
        .map(|((name, s), (_, l))| MetricPair {
            metric: name.clone(),
            simulated: *s,
            live: *l,
            error_pct: if *l != 0.0 {
                (s - l) / l.abs() * 100.0
            } else if *s == 0.0 {
                0.0
            } else {
                f64::INFINITY
            },
        })
        .collect()
}

/// The error CDF: sorted |relative error| in percent against the cumulative share of steps.
pub fn error_cdf(steps: &[StepRecord]) -> Vec<(f64, f64)> {
    let mut abs: Vec<f64> = steps
        .iter()
        .map(|s| s.relative_error().abs() * 100.0)
        .filter(|e| e.is_finite())
        .collect();
    abs.sort_by(f64::total_cmp);
    let n = abs.len() as f64;
    abs.into_iter()
        .enumerate()
        .map(|(i, e)| (e, (i + 1) as f64 / n))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(predicted: f64, measured: f64) -> StepRecord {
        StepRecord {
            index: 0,
            what: String::new(),
            predicted_ns: predicted,
            measured_ns: measured,
        }
    }

    #[test]
    fn error_summary_reads_the_distribution() {
        let steps = [
            step(110.0, 100.0),
            step(90.0, 100.0),
            step(100.0, 100.0),
            step(150.0, 100.0),
        ];
        let s = ErrorSummary::of(&steps);
        assert_eq!(s.steps, 4);
        assert!((s.mape_pct - 17.5).abs() < 1e-9);
        assert!((s.p50_pct - 10.0).abs() < 1e-9);
        assert!((s.worst_pct - 50.0).abs() < 1e-9);
        assert!((s.bias_pct - 12.5).abs() < 1e-9);
        assert!((s.total_ratio - 1.125).abs() < 1e-9);
        let cdf = error_cdf(&steps);
        assert_eq!(cdf.first(), Some(&(0.0, 0.25)));
        assert_eq!(cdf.last(), Some(&(50.0, 1.0)));
        let pairs = metric_pairs(&[("a".into(), 12.0)], &[("a".into(), 10.0)]);
        assert!((pairs[0].error_pct - 20.0).abs() < 1e-9);
        // A metric neither run reports is left out; one only the live run lacks is kept.
        let pairs = metric_pairs(
            &[("a".into(), f64::NAN), ("b".into(), 1.0)],
            &[("a".into(), f64::NAN), ("b".into(), f64::NAN)],
        );
        assert_eq!(pairs.len(), 1);
        assert_eq!(pairs[0].metric, "b");
    }
}
