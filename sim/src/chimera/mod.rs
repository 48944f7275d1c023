//! The Chimera family (chimera.txt): multi-agent workflows served on heterogeneous LLM engines.
//! A `Router` picks each request's engine (Chimera: the most confident model within a latency
//! slack of the fastest), each engine orders its queue with a `QueuePolicy` (Chimera: shortest
//! total job first with aging) and runs continuous batching on its own GPU cost model.

pub mod config;
pub mod family;
pub mod models;
pub mod policy;
pub mod run;
pub mod server;
pub mod stats;
pub mod workload;

pub use config::{ChimeraConfig, ChimeraScenario};
pub use family::Chimera;
pub use policy::{
    EngineState, QueuePolicy, QueuePolicyConfig, QueuedRequest, RouteRequest, Router, RouterConfig,
};
pub use server::ChimeraMetrics;

use crate::metrics::{Better, MetricInfo, RunOutput};

/// The scalar metrics a Chimera run reports (defined in docs/chimera.md).
pub const METRICS: &[MetricInfo] = &[
    MetricInfo {
        name: "latency_per_token_ms",
        description: "E2E latency per token (ms/token)",
        better: Better::Lower,
    },
    MetricInfo {
        name: "workflow_latency_mean_ms",
        description: "mean workflow E2E latency (ms)",
        better: Better::Lower,
    },
    MetricInfo {
        name: "workflow_latency_p50_ms",
        description: "P50 workflow E2E latency (ms)",
        better: Better::Lower,
    },
    MetricInfo {
        name: "workflow_latency_p99_ms",
        description: "P99 workflow E2E latency (ms)",
        better: Better::Lower,
    },
    MetricInfo {
        name: "queue_time_mean_ms",
        description: "mean request queueing time (ms)",
        better: Better::Lower,
    },
    MetricInfo {
        name: "queue_time_p99_ms",
        description: "P99 request queueing time (ms)",
        better: Better::Lower,
    },
    MetricInfo {
        name: "workflow_queue_time_mean_ms",
        description: "mean queueing time per workflow (ms)",
        better: Better::Lower,
    },
    MetricInfo {
        name: "score_pct",
        description: "task score (%)",
        better: Better::Higher,
    },
    MetricInfo {
        name: "throughput_wps",
        description: "throughput (workflows/s)",
        better: Better::Higher,
    },
    MetricInfo {
        name: "engine_utilization_mean",
        description: "mean engine utilization",
        better: Better::Higher,
    },
    MetricInfo {
        name: "engine_token_imbalance",
        description: "engine load imbalance (max/mean tokens)",
        better: Better::Lower,
    },
    MetricInfo {
        name: "router_map",
        description: "semantic router mean average precision",
        better: Better::Higher,
    },
    MetricInfo {
        name: "predictor_kendall_distance",
        description: "length predictor Kendall tau distance",
        better: Better::Lower,
    },
];

/// The metrics `expertsim run` prints per cell, and those it prints as change vs the baseline.
pub const HEADLINE: &[&str] = &[
    "latency_per_token_ms",
    "workflow_latency_mean_ms",
    "queue_time_mean_ms",
    "score_pct",
];
pub const HEADLINE_IMPROVEMENTS: &[&str] = &["latency_per_token_ms", "score_pct"];

impl ChimeraMetrics {
    /// The value of scalar metric `name` (one of `METRICS`).
    pub fn scalar(&self, name: &str) -> Option<f64> {
        Some(match name {
            "latency_per_token_ms" => self.latency_per_token_ms,
            "workflow_latency_mean_ms" => self.workflow_latency.mean_ms,
            "workflow_latency_p50_ms" => self.workflow_latency.p50_ms,
            "workflow_latency_p99_ms" => self.workflow_latency.p99_ms,
            "queue_time_mean_ms" => self.queue_time.mean_ms,
            "queue_time_p99_ms" => self.queue_time.p99_ms,
            "workflow_queue_time_mean_ms" => self.workflow_queue_time.mean_ms,
            "score_pct" => self.score_pct,
            "throughput_wps" => self.throughput_wps,
            "engine_utilization_mean" => self.engine_utilization_mean,
            "engine_token_imbalance" => self.engine_token_imbalance,
            "router_map" => self.router_map,
            "predictor_kendall_distance" => self.predictor_kendall_distance,
            _ => return None,
        })
    }
}

/// A run's metrics in the family-independent shape.
pub fn run_output(metrics: &ChimeraMetrics) -> RunOutput {
    RunOutput {
        scalars: METRICS
            .iter()
            .map(|m| {
                (
                    m.name.to_string(),
                    metrics
                        .scalar(m.name)
                        .expect("every Chimera metric resolves"),
                )
            })
            .collect(),
        details: serde_json::to_value(metrics).expect("metrics serialize"),
    }
}

#[cfg(test)]
mod tests;
