//! The CAPS family (caps.txt): batch selection on one MoE GPU. Requests carry router-predicted
//! expert loads; the serving replica runs static batches that a pluggable `BatchSelector` forms,
//! priced through the serving layer's `StepCost` seam.

pub mod config;
pub mod family;
pub mod former;
pub mod metrics;
pub mod run;
pub mod server;
pub mod step_cost;
pub mod workload;

pub use config::{CapsConfig, CapsScenario};
pub use family::Caps;

use crate::caps::metrics::RunMetrics;
use crate::metrics::{Better, Metric, MetricInfo, RunOutput, metric_infos};

/// The scalar metrics a CAPS run reports (defined in docs/metrics.md). The latency and queue-wait
/// rows read the one recorder's end-to-end and queueing histograms (`RunMetrics::latency`,
/// `queue_wait`); a static batch emits every token of its requests at its end, so TTFT and TPOT
/// say nothing here and are not reported.
pub const METRIC_TABLE: [Metric<RunMetrics>; 17] = [
    Metric::new("latency_mean_ms", "mean latency (ms)", Better::Lower, |m| {
        m.latency.mean_ms
    }),
    Metric::new("latency_p50_ms", "P50 latency (ms)", Better::Lower, |m| {
        m.latency.p50_ms
    }),
    Metric::new("latency_p90_ms", "P90 latency (ms)", Better::Lower, |m| {
        m.latency.p90_ms
    }),
    Metric::new("latency_p99_ms", "P99 latency (ms)", Better::Lower, |m| {
        m.latency.p99_ms
    }),
    Metric::new(
        "queue_wait_mean_ms",
        "mean queue wait (ms)",
        Better::Lower,
        |m| m.queue_wait.mean_ms,
    ),
    Metric::new(
        "queue_wait_p50_ms",
        "P50 queue wait (ms)",
        Better::Lower,
        |m| m.queue_wait.p50_ms,
    ),
    Metric::new(
        "queue_wait_p90_ms",
        "P90 queue wait (ms)",
        Better::Lower,
        |m| m.queue_wait.p90_ms,
    ),
    Metric::new(
        "queue_wait_p99_ms",
        "P99 queue wait (ms)",
        Better::Lower,
        |m| m.queue_wait.p99_ms,
    ),
    Metric::new(
        "throughput_rps",
        "throughput (req/s)",
        Better::Higher,
        |m| m.throughput_rps,
    ),
    Metric::new(
        "imbalance",
        "expert-load imbalance (max/mean)",
        Better::Lower,
        |m| m.imbalance,
    ),
    Metric::new(
        "imbalance_factor",
        "imbalance factor (1 + CV x sensitivity)",
        Better::Lower,
        |m| m.imbalance_factor,
    ),
    Metric::new("load_cv", "load CV (std/mean)", Better::Lower, |m| {
        m.load_cv
    }),
    Metric::new("makespan_s", "makespan (s)", Better::Lower, |m| {
        m.makespan_s
    }),
    Metric::new("mean_batch_size", "mean batch size", Better::Higher, |m| {
        m.mean_batch_size
    }),
    Metric::new(
        "mean_batch_time_ms",
        "mean batch time (ms)",
        Better::Lower,
        |m| m.mean_batch_time_ms,
    ),
    Metric::new("utilization", "GPU utilization", Better::Higher, |m| {
        m.utilization
    }),
    Metric::new("queue_depth_mean", "mean queue depth", Better::Lower, |m| {
        m.queue_depth_mean
    }),
];

/// The metric column of `METRIC_TABLE`.
pub const METRICS: &[MetricInfo] = &metric_infos(&METRIC_TABLE);

/// The metrics `expertsim run` prints per cell, and those it prints as change vs the baseline.
pub const HEADLINE: &[&str] = &[
    "latency_p50_ms",
    "latency_p99_ms",
    "throughput_rps",
    "imbalance",
];
pub const HEADLINE_IMPROVEMENTS: &[&str] = &["latency_p99_ms", "throughput_rps"];

/// A CAPS run's metrics in the family-independent shape: the table's scalars, and every field
/// (including the queue-depth series) as detail.
pub fn run_output(metrics: &RunMetrics) -> RunOutput {
    crate::metrics::run_output(&METRIC_TABLE, metrics)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_reads_each_metric_from_its_own_field() {
        let latency = crate::recorder::Percentiles {
            mean_ms: 1.0,
            p50_ms: 1.0,
            p90_ms: 1.0,
            p95_ms: 1.0,
            p99_ms: 9.0,
            max_ms: 1.0,
        };
        let metrics = RunMetrics {
            n_requests: 1,
            n_batches: 1,
            latency,
            queue_wait: latency,
            throughput_rps: 1.0,
            makespan_s: 1.0,
            mean_batch_size: 1.0,
            imbalance: 1.0,
            load_cv: 0.0,
            imbalance_factor: 1.0,
            mean_batch_time_ms: 1.0,
            utilization: 1.0,
            queue_depth_mean: 0.0,
            queue_depth_max: 0,
            queue_depth_series: vec![],
        };
        let output = run_output(&metrics);
        assert_eq!(output.scalars.len(), METRICS.len());
        assert_eq!(output.scalar("latency_p99_ms"), Some(9.0));
        assert_eq!(output.details["n_requests"], 1);
        for name in HEADLINE.iter().chain(HEADLINE_IMPROVEMENTS) {
            assert!(METRICS.iter().any(|m| m.name == *name), "{name}");
        }
    }
}
