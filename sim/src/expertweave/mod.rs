//! The ExpertWeave family (expertweave.txt): many ESFT expert adapters served over one shared MoE
//! base model. The routing popularity, the step costs and the serving run (each instance a
//! `serving::Replica`) live here; the adapter-memory extension point, with the device-memory
//! model and the adapters as data it sees, is `policies::memory`, and the memory managers
//! themselves are in `strategies::memory`.

pub use crate::cost::shape::MlaMoeShape;
pub mod config;
pub mod family;
pub mod profile_cost;
pub mod run;
pub mod step_cost;

pub use crate::serving_family::popularity::Popularity;
pub use config::{ExpertWeaveConfig, ExpertWeaveScenario};
pub use family::ExpertWeave;
pub use profile_cost::{EwProfile, ProfileStepCost};
pub use run::{plan, replica_config, run, run_recorded, serve, simulated_costs};
pub use step_cost::RooflineStepCost;

use crate::metrics::lower_is_better as lat;
use crate::metrics::{Better, Metric, MetricInfo, metric_infos};
use crate::recorder::RequestSummary;

/// One ExpertWeave run's scalar values, one field per metric of `METRIC_TABLE`
/// (docs/expertweave.md defines each).
#[derive(Clone, Debug, PartialEq)]
pub struct ExpertWeaveScalars {
    pub weights_gib: f64,
    pub adapter_memory_gib: f64,
    pub padding_waste_gib: f64,
    pub fragmentation_factor: f64,
    pub sparsity_factor: f64,
    pub kv_capacity_tokens: f64,
    pub out_of_memory: f64,
    /// The served requests' latencies, as the instances' replicas recorded them (all missing
    /// for a run that served nothing, e.g. out of memory).
    pub requests: RequestSummary,
    pub prefill_throughput_tps: f64,
    pub decode_throughput_tps: f64,
    /// Share of the run the instances spend in steps, mean over instances.
    pub utilization: f64,
    pub requests_completed: f64,
    pub requests_rejected: f64,
}

/// The scalar metrics an ExpertWeave run reports, in order (docs/expertweave.md defines each).
pub const METRIC_TABLE: [Metric<ExpertWeaveScalars>; 29] = [
    Metric::new(
        "weights_gib",
        "weights on device (GiB)",
        Better::Lower,
        |s| s.weights_gib,
    ),
    Metric::new(
        "adapter_memory_gib",
        "memory allocated for adapters (GiB)",
        Better::Lower,
        |s| s.adapter_memory_gib,
    ),
    Metric::new(
        "padding_waste_gib",
        "allocated adapter memory holding no expert (GiB)",
        Better::Lower,
        |s| s.padding_waste_gib,
    ),
    Metric::new(
        "fragmentation_factor",
        "allocated / needed adapter memory",
        Better::Lower,
        |s| s.fragmentation_factor,
    ),
    Metric::new(
        "sparsity_factor",
        "mean adapter sparsity factor",
        Better::Lower,
        |s| s.sparsity_factor,
    ),
    Metric::new(
        "kv_capacity_tokens",
        "KV cache capacity (tokens)",
        Better::Higher,
        |s| s.kv_capacity_tokens,
    ),
    Metric::new("out_of_memory", "out of memory (0/1)", Better::Lower, |s| {
        s.out_of_memory
    }),
    lat("ttft_mean_ms", "mean time to first token (ms)", |s| {
        s.requests.ttft.mean_ms
    }),
    lat("ttft_p50_ms", "P50 time to first token (ms)", |s| {
        s.requests.ttft.p50_ms
    }),
    lat("ttft_p90_ms", "P90 time to first token (ms)", |s| {
        s.requests.ttft.p90_ms
    }),
    lat("ttft_p99_ms", "P99 time to first token (ms)", |s| {
        s.requests.ttft.p99_ms
    }),
    lat("tpot_mean_ms", "mean time per output token (ms)", |s| {
        s.requests.tpot.mean_ms
    }),
    lat("tpot_p50_ms", "P50 time per output token (ms)", |s| {
        s.requests.tpot.p50_ms
    }),
    lat("tpot_p90_ms", "P90 time per output token (ms)", |s| {
        s.requests.tpot.p90_ms
    }),
    lat("tpot_p99_ms", "P99 time per output token (ms)", |s| {
        s.requests.tpot.p99_ms
    }),
    lat("e2e_mean_ms", "mean end-to-end latency (ms)", |s| {
        s.requests.e2e.mean_ms
    }),
    lat("e2e_p50_ms", "P50 end-to-end latency (ms)", |s| {
        s.requests.e2e.p50_ms
    }),
    lat("e2e_p90_ms", "P90 end-to-end latency (ms)", |s| {
        s.requests.e2e.p90_ms
    }),
    lat("e2e_p99_ms", "P99 end-to-end latency (ms)", |s| {
        s.requests.e2e.p99_ms
    }),
    lat("queueing_mean_ms", "mean queueing delay (ms)", |s| {
        s.requests.queueing.mean_ms
    }),
    lat("queueing_p50_ms", "P50 queueing delay (ms)", |s| {
        s.requests.queueing.p50_ms
    }),
    lat("queueing_p90_ms", "P90 queueing delay (ms)", |s| {
        s.requests.queueing.p90_ms
    }),
    lat("queueing_p99_ms", "P99 queueing delay (ms)", |s| {
        s.requests.queueing.p99_ms
    }),
    Metric::new(
        "throughput_rps",
        "throughput (requests/s)",
        Better::Higher,
        |s| s.requests.throughput_rps,
    ),
    Metric::new(
        "prefill_throughput_tps",
        "prefill throughput (tokens/s)",
        Better::Higher,
        |s| s.prefill_throughput_tps,
    ),
    Metric::new(
        "decode_throughput_tps",
        "decode throughput (tokens/s)",
        Better::Higher,
        |s| s.decode_throughput_tps,
    ),
    Metric::new(
        "utilization",
        "share of time instances run steps",
        Better::Higher,
        |s| s.utilization,
    ),
    Metric::new(
        "requests_completed",
        "requests completed",
        Better::Higher,
        |s| s.requests_completed,
    ),
    Metric::new(
        "requests_rejected",
        "requests longer than the KV capacity",
        Better::Lower,
        |s| s.requests_rejected,
    ),
];

/// The metric column of `METRIC_TABLE`.
pub const METRICS: &[MetricInfo] = &metric_infos(&METRIC_TABLE);

/// The metrics `expertsim run` prints per cell.
pub const HEADLINE: &[&str] = &[
    "kv_capacity_tokens",
    "adapter_memory_gib",
    "ttft_mean_ms",
    "tpot_mean_ms",
    "decode_throughput_tps",
];
/// The metrics `expertsim run` prints as change against the baseline.
pub const HEADLINE_IMPROVEMENTS: &[&str] = &["kv_capacity_tokens", "tpot_mean_ms"];
