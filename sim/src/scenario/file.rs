//! The scenario file schema: structs that mirror the TOML one to one, with
//! `deny_unknown_fields` everywhere so a misspelt key is an error, not a silent default.
//! Cross-field checks happen later, in `validate`.

use crate::arrivals::BurstyParams;
use crate::batch::BatchSelectorConfig;
use crate::workload::TokenDistribution;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub family: Family,
    /// One run per seed in every sweep cell.
    #[serde(default = "default_seeds")]
    pub seeds: Vec<u64>,
    #[serde(default)]
    pub model: ModelFile,
    pub workload: WorkloadFile,
    pub arrival: ArrivalFile,
    #[serde(default)]
    pub scheduler: SchedulerFile,
    pub execution: ExecutionFile,
    #[serde(default)]
    pub metrics: MetricsFile,
    #[serde(default)]
    pub output: OutputFile,
    pub report: Option<ReportFile>,
    #[serde(default, rename = "figure")]
    pub figures: Vec<FigureFile>,
}

fn default_seeds() -> Vec<u64> {
    vec![42]
}

/// Which family of serving system the scenario describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// CAPS batch selection on one MoE GPU (caps.txt).
    Caps,
}

/// `[model]`: a named preset, with optional overrides of its routing shape.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelFile {
    #[serde(default = "default_model_preset")]
    pub preset: String,
    pub n_layers: Option<usize>,
    pub n_experts: Option<usize>,
    pub top_k: Option<usize>,
}

fn default_model_preset() -> String {
    "qwen1.5-moe-a2.7b".into()
}

impl Default for ModelFile {
    fn default() -> Self {
        ModelFile {
            preset: default_model_preset(),
            n_layers: None,
            n_experts: None,
            top_k: None,
        }
    }
}

/// `[workload]`: how many requests, and the request model of `crate::workload`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadFile {
    pub n_requests: u64,
    #[serde(default = "default_n_topics")]
    pub n_topics: usize,
    /// Dirichlet concentration of each topic's per-layer expert distribution (smaller = hotter).
    #[serde(default = "default_affinity_concentration")]
    pub affinity_concentration: f64,
    /// Weight of a request's own topic; the rest goes to one random secondary topic.
    #[serde(default = "default_topic_purity")]
    pub topic_purity: f64,
    /// Relative standard deviation of the router dry-run's per-entry error (0 = exact).
    #[serde(default)]
    pub prediction_noise: f64,
    #[serde(default = "default_prompt_tokens")]
    pub prompt_tokens: TokenDistribution,
    #[serde(default = "default_output_tokens")]
    pub output_tokens: TokenDistribution,
}

fn default_n_topics() -> usize {
    16
}
fn default_affinity_concentration() -> f64 {
    0.3
}
fn default_topic_purity() -> f64 {
    0.8
}
fn default_prompt_tokens() -> TokenDistribution {
    TokenDistribution {
        median: 128.0,
        sigma: 0.6,
        max: 2048,
    }
}
fn default_output_tokens() -> TokenDistribution {
    TokenDistribution {
        median: 16.0,
        sigma: 0.6,
        max: 256,
    }
}

/// `[arrival]`: the arrival pattern and its parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArrivalFile {
    pub pattern: ArrivalPattern,
    /// Long-run mean arrival rate (poisson and bursty).
    pub rate_per_s: Option<f64>,
    /// Burst parameters (bursty only; defaults documented in `arrivals::bursty`).
    pub bursty: Option<BurstyParams>,
    /// The recorded trace (trace only).
    pub trace: Option<TraceFile>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArrivalPattern {
    Poisson,
    Bursty,
    Offline,
    Trace,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceFile {
    /// CSV path, relative to the scenario file.
    pub path: String,
    /// Multiplies every inter-arrival time (0.5 = replay twice as fast).
    #[serde(default = "default_time_scale")]
    pub time_scale: f64,
}

fn default_time_scale() -> f64 {
    1.0
}

/// `[scheduler]`: the CAPS scheduler loop (caps.txt defaults).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulerFile {
    #[serde(default = "default_max_batch_size")]
    pub max_batch_size: usize,
    #[serde(default = "default_window_size")]
    pub window_size: usize,
    #[serde(default = "default_min_batch_trigger")]
    pub min_batch_trigger: usize,
    #[serde(default = "default_scheduling_interval_ms")]
    pub scheduling_interval_ms: f64,
    #[serde(default = "default_true")]
    pub seed_with_oldest: bool,
    #[serde(default = "default_selector")]
    pub selector: BatchSelectorConfig,
}

fn default_max_batch_size() -> usize {
    8
}
fn default_window_size() -> usize {
    32
}
fn default_min_batch_trigger() -> usize {
    16
}
fn default_scheduling_interval_ms() -> f64 {
    100.0
}
fn default_true() -> bool {
    true
}
fn default_selector() -> BatchSelectorConfig {
    BatchSelectorConfig::GreedyVariance
}

impl Default for SchedulerFile {
    fn default() -> Self {
        SchedulerFile {
            max_batch_size: default_max_batch_size(),
            window_size: default_window_size(),
            min_batch_trigger: default_min_batch_trigger(),
            scheduling_interval_ms: default_scheduling_interval_ms(),
            seed_with_oldest: true,
            selector: default_selector(),
        }
    }
}

/// `[execution]`: how long a batch takes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecutionFile {
    pub model: ExecutionModelKind,
    /// GPU whose analytic roofline profile is used when no `profile` is given.
    #[serde(default = "default_gpu")]
    pub gpu: String,
    /// A calibration profile JSON (relative to the scenario file); overrides the analytic one.
    pub profile: Option<String>,
    /// `cv` only: the CV sensitivity; derived from the profile when absent.
    pub sensitivity: Option<f64>,
    /// `constant`: the service time; `exponential`: its mean.
    pub service_ms: Option<f64>,
}

fn default_gpu() -> String {
    "L4".into()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionModelKind {
    /// caps.txt: base time x (1 + CV(load) x sensitivity).
    Cv,
    /// Per MoE layer, the most loaded expert on the token-vs-latency staircase.
    Straggler,
    /// Every batch takes `service_ms` (queueing-theory reference: M/D/1).
    Constant,
    /// Batch times are exponential with mean `service_ms` (queueing-theory reference: M/M/1).
    Exponential,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsFile {
    /// Queue depth is sampled on this grid for the time series (0 = no series).
    #[serde(default = "default_queue_sample_interval_ms")]
    pub queue_sample_interval_ms: f64,
}

fn default_queue_sample_interval_ms() -> f64 {
    100.0
}

impl Default for MetricsFile {
    fn default() -> Self {
        MetricsFile {
            queue_sample_interval_ms: default_queue_sample_interval_ms(),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputFile {
    /// Also write one CSV row per served request (one file per run).
    #[serde(default)]
    pub per_request_csv: bool,
}

/// `[report]`: compare every value of one sweep key against a baseline value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportFile {
    /// The sweep key whose values are compared (e.g. `scheduler.selector.kind`).
    pub compare: String,
    /// The baseline value of that key (e.g. `fcfs`).
    pub baseline: toml::Value,
}

/// `[[figure]]`: one figure of scalar metrics against a sweep key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FigureFile {
    /// File stem of the PNG and SVG.
    pub name: String,
    #[serde(default)]
    pub title: String,
    /// One row of panels per metric (names from `metrics::SCALAR_METRICS`).
    pub metrics: Vec<String>,
    /// Sweep key on the x axis.
    pub x: String,
    /// Sweep key whose values become the lines.
    pub series: String,
    /// Sweep key whose values become side-by-side panels.
    pub panels: Option<String>,
    #[serde(default)]
    pub log_y: bool,
}
