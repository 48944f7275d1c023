//! The CAPS family (caps.txt): batch selection on one MoE GPU. Requests carry router-predicted
//! expert loads; the serving replica runs static batches that a pluggable `BatchSelector` forms,
//! priced through the serving layer's `StepCost` seam.

pub mod batch;
pub mod config;
pub mod execution;
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
use crate::metrics::{Better, MetricInfo, RunOutput};

/// The scalar metrics a CAPS run reports (defined in docs/metrics.md).
pub const METRICS: &[MetricInfo] = &[
    MetricInfo {
        name: "latency_mean_ms",
        description: "mean latency (ms)",
        better: Better::Lower,
    },
    MetricInfo {
        name: "latency_p50_ms",
        description: "P50 latency (ms)",
        better: Better::Lower,
    },
    MetricInfo {
        name: "latency_p90_ms",
        description: "P90 latency (ms)",
        better: Better::Lower,
    },
    MetricInfo {
        name: "latency_p99_ms",
        description: "P99 latency (ms)",
        better: Better::Lower,
    },
    MetricInfo {
        name: "queue_wait_mean_ms",
        description: "mean queue wait (ms)",
        better: Better::Lower,
    },
    MetricInfo {
        name: "throughput_rps",
        description: "throughput (req/s)",
        better: Better::Higher,
    },
    MetricInfo {
        name: "imbalance",
        description: "expert-load imbalance (max/mean)",
        better: Better::Lower,
    },
    MetricInfo {
        name: "imbalance_factor",
        description: "imbalance factor (1 + CV x sensitivity)",
        better: Better::Lower,
    },
    MetricInfo {
        name: "load_cv",
        description: "load CV (std/mean)",
        better: Better::Lower,
    },
    MetricInfo {
        name: "makespan_s",
        description: "makespan (s)",
        better: Better::Lower,
    },
    MetricInfo {
        name: "mean_batch_size",
        description: "mean batch size",
        better: Better::Higher,
    },
    MetricInfo {
        name: "mean_batch_time_ms",
        description: "mean batch time (ms)",
        better: Better::Lower,
    },
    MetricInfo {
        name: "utilization",
        description: "GPU utilization",
        better: Better::Higher,
    },
    MetricInfo {
        name: "queue_depth_mean",
        description: "mean queue depth",
        better: Better::Lower,
    },
];

/// The metrics `expertsim run` prints per cell, and those it prints as change vs the baseline.
pub const HEADLINE: &[&str] = &[
    "latency_p50_ms",
    "latency_p99_ms",
    "throughput_rps",
    "imbalance",
];
pub const HEADLINE_IMPROVEMENTS: &[&str] = &["latency_p99_ms", "throughput_rps"];

/// A CAPS run's metrics in the family-independent shape: the listed scalars, and every field
/// (including the queue-depth series) as detail.
pub fn run_output(metrics: &RunMetrics) -> RunOutput {
    RunOutput {
        scalars: METRICS
            .iter()
            .map(|m| {
                (
                    m.name.to_string(),
                    metrics.scalar(m.name).expect("every CAPS metric resolves"),
                )
            })
            .collect(),
        details: serde_json::to_value(metrics).expect("metrics serialize"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_metric_resolves_on_run_metrics() {
        let latency = crate::metrics::LatencySummary {
            mean_ms: 1.0,
            p50_ms: 1.0,
            p90_ms: 1.0,
            p99_ms: 9.0,
            max_ms: 1.0,
        };
        let metrics = RunMetrics {
            n_requests: 1,
            n_batches: 1,
            latency: latency.clone(),
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
