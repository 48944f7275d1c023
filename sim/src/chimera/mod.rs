//! The Chimera family (chimera.txt): multi-agent workflows served on heterogeneous LLM engines.
//! A `Router` picks each request's engine (Chimera: the most confident model within a latency
//! slack of the fastest), each engine orders its queue with a `QueuePolicy` (Chimera: shortest
//! total job first with aging) and runs continuous batching on its own GPU cost model.

pub mod config;
pub mod family;
pub mod models;
pub mod run;
pub mod server;

pub use config::{ChimeraConfig, ChimeraScenario};
pub use family::Chimera;
pub use server::ChimeraMetrics;

use crate::metrics::lower_is_better as lat;
use crate::metrics::{Better, Metric, MetricInfo, RunOutput, metric_infos};

/// The scalar metrics a Chimera run reports (defined in docs/chimera.md). The per-request rows
/// (a request is one stage of a workflow) are the one recorder's (docs/metrics.md); the workflow
/// rows are Chimera's own quantities (a workflow spans several requests).
pub const METRIC_TABLE: [Metric<ChimeraMetrics>; 27] = [
    Metric::new(
        "latency_per_token_ms",
        "E2E latency per token (ms/token)",
        Better::Lower,
        |m| m.latency_per_token_ms,
    ),
    Metric::new(
        "workflow_latency_mean_ms",
        "mean workflow E2E latency (ms)",
        Better::Lower,
        |m| m.workflow_latency.mean_ms,
    ),
    Metric::new(
        "workflow_latency_p50_ms",
        "P50 workflow E2E latency (ms)",
        Better::Lower,
        |m| m.workflow_latency.p50_ms,
    ),
    Metric::new(
        "workflow_latency_p99_ms",
        "P99 workflow E2E latency (ms)",
        Better::Lower,
        |m| m.workflow_latency.p99_ms,
    ),
    lat(
        "queue_time_mean_ms",
        "mean request queueing time (ms)",
        |s| s.requests.queueing.mean_ms,
    ),
    lat("queue_time_p50_ms", "P50 request queueing time (ms)", |s| {
        s.requests.queueing.p50_ms
    }),
    lat("queue_time_p90_ms", "P90 request queueing time (ms)", |s| {
        s.requests.queueing.p90_ms
    }),
    lat("queue_time_p99_ms", "P99 request queueing time (ms)", |s| {
        s.requests.queueing.p99_ms
    }),
    lat(
        "ttft_mean_ms",
        "mean request time to first token (ms)",
        |s| s.requests.ttft.mean_ms,
    ),
    lat("ttft_p50_ms", "P50 request time to first token (ms)", |s| {
        s.requests.ttft.p50_ms
    }),
    lat("ttft_p90_ms", "P90 request time to first token (ms)", |s| {
        s.requests.ttft.p90_ms
    }),
    lat("ttft_p99_ms", "P99 request time to first token (ms)", |s| {
        s.requests.ttft.p99_ms
    }),
    lat(
        "tpot_mean_ms",
        "mean request time per output token (ms)",
        |s| s.requests.tpot.mean_ms,
    ),
    lat(
        "tpot_p50_ms",
        "P50 request time per output token (ms)",
        |s| s.requests.tpot.p50_ms,
    ),
    lat(
        "tpot_p90_ms",
        "P90 request time per output token (ms)",
        |s| s.requests.tpot.p90_ms,
    ),
    lat(
        "tpot_p99_ms",
        "P99 request time per output token (ms)",
        |s| s.requests.tpot.p99_ms,
    ),
    lat("e2e_mean_ms", "mean request end-to-end latency (ms)", |s| {
        s.requests.e2e.mean_ms
    }),
    lat("e2e_p50_ms", "P50 request end-to-end latency (ms)", |s| {
        s.requests.e2e.p50_ms
    }),
    lat("e2e_p90_ms", "P90 request end-to-end latency (ms)", |s| {
        s.requests.e2e.p90_ms
    }),
    lat("e2e_p99_ms", "P99 request end-to-end latency (ms)", |s| {
        s.requests.e2e.p99_ms
    }),
    Metric::new(
        "workflow_queue_time_mean_ms",
        "mean queueing time per workflow (ms)",
        Better::Lower,
        |m| m.workflow_queue_time.mean_ms,
    ),
    Metric::new("score_pct", "task score (%)", Better::Higher, |m| {
        m.score_pct
    }),
    Metric::new(
        "throughput_wps",
        "throughput (workflows/s)",
        Better::Higher,
        |m| m.throughput_wps,
    ),
    Metric::new(
        "engine_utilization_mean",
        "mean engine utilization",
        Better::Higher,
        |m| m.engine_utilization_mean,
    ),
    Metric::new(
        "engine_token_imbalance",
        "engine load imbalance (max/mean tokens)",
        Better::Lower,
        |m| m.engine_token_imbalance,
    ),
    Metric::new(
        "router_map",
        "semantic router mean average precision",
        Better::Higher,
        |m| m.router_map,
    ),
    Metric::new(
        "predictor_kendall_distance",
        "length predictor Kendall tau distance",
        Better::Lower,
        |m| m.predictor_kendall_distance,
    ),
];

/// The metric column of `METRIC_TABLE`.
pub const METRICS: &[MetricInfo] = &metric_infos(&METRIC_TABLE);

/// The metrics `expertsim run` prints per cell, and those it prints as change vs the baseline.
pub const HEADLINE: &[&str] = &[
    "latency_per_token_ms",
    "workflow_latency_mean_ms",
    "queue_time_mean_ms",
    "score_pct",
];
pub const HEADLINE_IMPROVEMENTS: &[&str] = &["latency_per_token_ms", "score_pct"];

/// A run's metrics in the family-independent shape: the table's scalars, every field as detail.
pub fn run_output(metrics: &ChimeraMetrics) -> RunOutput {
    crate::metrics::run_output(&METRIC_TABLE, metrics)
}

#[cfg(test)]
mod tests;
