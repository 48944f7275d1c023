//! The ExpertWeave family (expertweave.txt): many ESFT expert adapters served over one shared MoE
//! base model. The device-memory model, the adapters as data, and the adapter-memory extension
//! point live here; the managers themselves are in `strategies::memory`.

pub mod adapters;
pub mod memory;
pub mod model;

pub use crate::cost::shape::MlaMoeShape;
pub use adapters::{EsftAdapter, esft_adapter, esft_adapters};
pub use memory::{AdapterMemory, AdapterMemoryError, MemoryConfig, MemoryPlan, MemoryReport};
pub use model::DeviceMemory;
pub mod config;
pub mod family;
pub mod profile_cost;
pub mod run;

pub use config::{ExpertWeaveConfig, ExpertWeaveScenario};
pub use family::ExpertWeave;
pub use profile_cost::{EwProfile, ProfileStepCost};
pub use run::{EwStepCost, EwStepWork, Popularity, RooflineStepCost, run, run_on, run_recorded};

use crate::metrics::{Better, MetricInfo};

const fn metric(name: &'static str, description: &'static str, better: Better) -> MetricInfo {
    MetricInfo {
        name,
        description,
        better,
    }
}

/// The scalar metrics an ExpertWeave run reports, in order (docs/expertweave.md defines each).
pub const METRICS: &[MetricInfo] = &[
    metric("weights_gib", "weights on device (GiB)", Better::Lower),
    metric(
        "adapter_memory_gib",
        "memory allocated for adapters (GiB)",
        Better::Lower,
    ),
    metric(
        "padding_waste_gib",
        "allocated adapter memory holding no expert (GiB)",
        Better::Lower,
    ),
    metric(
        "fragmentation_factor",
        "allocated / needed adapter memory",
        Better::Lower,
    ),
    metric(
        "sparsity_factor",
        "mean adapter sparsity factor",
        Better::Lower,
    ),
    metric(
        "kv_capacity_tokens",
        "KV cache capacity (tokens)",
        Better::Higher,
    ),
    metric("out_of_memory", "out of memory (0/1)", Better::Lower),
    metric("ttft_mean_ms", "mean TTFT (ms)", Better::Lower),
    metric("ttft_p99_ms", "P99 TTFT (ms)", Better::Lower),
    metric("tpot_mean_ms", "mean TPOT (ms)", Better::Lower),
    metric(
        "prefill_throughput_tps",
        "prefill throughput (tokens/s)",
        Better::Higher,
    ),
    metric(
        "decode_throughput_tps",
        "decode throughput (tokens/s)",
        Better::Higher,
    ),
    metric("requests_completed", "requests completed", Better::Higher),
    metric(
        "requests_rejected",
        "requests longer than the KV capacity",
        Better::Lower,
    ),
];

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
