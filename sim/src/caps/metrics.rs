//! What one CAPS run reports (`RunMetrics`); `caps::METRIC_TABLE` reads its scalars from it.

use crate::recorder::Percentiles;
use serde::{Deserialize, Serialize};

/// Everything one simulation run reports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunMetrics {
    pub n_requests: u64,
    pub n_batches: u64,
    /// Arrival to completion (the recorder's end-to-end latency).
    pub latency: Percentiles,
    /// Arrival to the start of the request's batch (the recorder's queueing delay).
    pub queue_wait: Percentiles,
    /// Completed requests per second between the first arrival and the last completion.
    pub throughput_rps: f64,
    /// Time of the last completion, seconds.
    pub makespan_s: f64,
    pub mean_batch_size: f64,
    /// Mean over batches of the batch's expert-load imbalance (per layer max/mean, averaged over layers).
    pub imbalance: f64,
    /// Mean over batches of the coefficient of variation of the batch's load vector.
    pub load_cv: f64,
    /// caps.txt's imbalance factor, mean over batches of `1 + CV(load) x sensitivity` (the `cv`
    /// model's sensitivity; 1 for other execution models, which have none): the number the
    /// paper's `imbalance_mean` and `imbalance_reduction_pct` report.
    pub imbalance_factor: f64,
    /// Mean batch execution time, milliseconds.
    pub mean_batch_time_ms: f64,
    /// Fraction of the makespan the GPU was executing a batch.
    pub utilization: f64,
    /// Time-averaged number of requests waiting (not yet in a batch).
    pub queue_depth_mean: f64,
    pub queue_depth_max: u64,
    /// Queue depth sampled on the scenario's grid: (seconds, depth).
    pub queue_depth_series: Vec<(f64, u64)>,
}
