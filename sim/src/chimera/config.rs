//! The Chimera scenario tables (`[cluster]`, `[workload]`, `[predictor]`, `[semantic_router]`,
//! `[queue]`, `[routing]`, and the shared `[arrival]` table), mirrored with `deny_unknown_fields`, and their validation into a
//! runnable `ChimeraScenario`.

use super::models::{DEFAULT_MAX_NUM_BATCHED_TOKENS, EngineCost};
use crate::arrivals::{ArrivalSpec, ArrivalTable, TraceStats};
use crate::cost::gpu::GpuSpec;
use crate::cost::host::HostOverhead;
use crate::load_cache::{LoadCache, measured_set};
use crate::mosaic::profile_cost::DenseDecodeProfile;
use crate::serving::agent_workflows::{
    Dataset, ModelWorkload, WorkflowGenerator, model_names, model_shape,
};
use crate::serving::predictors::{
    PredictorConfig, SemanticRouterConfig, default_predictor, default_semantic_router,
};
use crate::serving::{QueuePolicyConfig, RouterConfig};
use crate::validate::{FieldError, at_least_one, field_error, measured_on, non_negative, positive};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Everything of a Chimera scenario file except the common keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChimeraConfig {
    pub cluster: ClusterFile,
    pub workload: WorkloadFile,
    #[serde(default = "default_predictor")]
    pub predictor: PredictorConfig,
    #[serde(default = "default_semantic_router")]
    pub semantic_router: SemanticRouterConfig,
    pub queue: QueuePolicyConfig,
    pub routing: RouterConfig,
    /// Workflow arrivals other than Poisson at `workload.rps`: the shared `[arrival]` table
    /// (poisson, bursty or trace; `workload.rps` is then left out).
    #[serde(default)]
    pub arrival: Option<ArrivalTable>,
}

/// `[cluster]`: one engine per entry of `models`, all on the same GPU type.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterFile {
    #[serde(default = "default_gpu")]
    pub gpu: String,
    /// One engine per entry (a model may appear more than once).
    pub models: Vec<String>,
    /// vLLM `max_num_seqs` (its default, 256).
    #[serde(default = "default_max_batch_size")]
    pub max_batch_size: usize,
    /// vLLM `gpu_memory_utilization` (its default, 0.9).
    #[serde(default = "default_gpu_memory_utilization")]
    pub gpu_memory_utilization: f64,
    /// Host time per engine step, flat, ms. Absent: vLLM's engine loop as measured on an RTX
    /// A6000 (`cost::host::HostOverhead::vllm_v0`: 6.32 ms + 35.1 us per sequence in the step).
    #[serde(default)]
    pub step_overhead_ms: Option<f64>,
    /// vLLM `max_num_batched_tokens` with chunked prefill (the paper's vLLM runs chunked
    /// prefill; 2048 is vLLM V1's default for its OpenAI-compatible server on a GPU under
    /// 70 GiB, `models::DEFAULT_MAX_NUM_BATCHED_TOKENS`). 0: no budget and no chunking.
    #[serde(default = "default_max_num_batched_tokens")]
    pub max_num_batched_tokens: u64,
    /// vLLM V1's automatic prefix caching, on by default as in V1 (the paper's vLLM is a V1
    /// engine): an engine keeps the KV blocks of prompts it computed and a later prompt that
    /// begins with them skips their prefill (`serving::prefix`; blocks of
    /// `models::PREFIX_BLOCK_TOKENS`). `false` turns it off.
    #[serde(default = "default_prefix_caching")]
    pub prefix_caching: bool,
    /// A set of measured per-operation profiles of `gpu` (`profiles/<name>/`, e.g.
    /// `"vidur/a100"`) to price the engines' steps from instead of the roofline: each operation
    /// measured, scaled or analytic as the run's `pricing` record says.
    #[serde(default)]
    pub measured: Option<String>,
    /// A measured dense-decode profile (`expertsim-calibrate --dense-models`, path relative to
    /// the scenario) to price the engines' steps from instead: each engine's model at the
    /// profile's scaling, a step's rows and cached tokens looked up in its sampled grid
    /// (`mosaic::profile_cost`, as live mode executes the step).
    #[serde(default)]
    pub profile: Option<String>,
}

fn default_gpu() -> String {
    "RTX-A6000".into()
}
fn default_max_batch_size() -> usize {
    256
}
fn default_gpu_memory_utilization() -> f64 {
    0.9
}
fn default_prefix_caching() -> bool {
    true
}
fn default_max_num_batched_tokens() -> u64 {
    DEFAULT_MAX_NUM_BATCHED_TOKENS
}

/// `[workload]`: the dataset and the workflow arrival window (Poisson at `rps` unless the
/// scenario has an `[arrival]` table).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadFile {
    pub dataset: Dataset,
    /// Workflow arrivals per second (Poisson); absent when `[arrival]` says how workflows arrive.
    #[serde(default)]
    pub rps: Option<f64>,
    /// Workflows arrive during this many seconds; the run continues until all complete.
    pub duration_s: f64,
}

/// One engine: its model (index into the scenario's model list) and cost model.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EngineSpec {
    pub model: usize,
    pub cost: EngineCost,
}

/// A validated, runnable Chimera scenario (one sweep cell).
#[derive(Clone, Debug)]
pub struct ChimeraScenario {
    pub engines: Vec<EngineSpec>,
    /// Draws workflows; its `models` are the distinct models of the cluster, in first-use order.
    pub generator: WorkflowGenerator,
    /// Mean workflow arrival rate: the Poisson or bursty rate, or the trace's workflows replayed
    /// within `duration_s` per second of it.
    pub rps: f64,
    pub duration_s: f64,
    /// How workflows arrive during `duration_s`. A trace's arrival times are replayed and its
    /// prompt lengths replace the dataset's user prompts; its output lengths are not used, because
    /// a Chimera stage's output length depends on the model that answers it (section 3.2) and a
    /// trace records one length per request from one unknown model.
    pub arrival: ArrivalSpec,
    pub predictor: PredictorConfig,
    pub semantic_router: SemanticRouterConfig,
    pub queue: QueuePolicyConfig,
    pub routing: RouterConfig,
    /// The measured set the engines are priced from (`cluster.measured`).
    pub measured: Option<String>,
}

impl ChimeraScenario {
    /// Where the engines' step costs come from, for the result document: the analytic dense
    /// model over the GPU's datasheet rates, or the measured set that priced them.
    pub fn source(&self) -> String {
        let gpu = self
            .engines
            .first()
            .map(|e| e.cost.gpu.as_str())
            .unwrap_or("none");
        if let Some(profile) = self.engines.first().and_then(|e| e.cost.profile.as_ref()) {
            return format!("measured ({})", profile.device);
        }
        match &self.measured {
            Some(name) => format!("measured-operations:{name}:{gpu}"),
            None => format!("analytic-dense-roofline:{gpu}"),
        }
    }

    /// With `cluster.measured`, how each model's operations were priced (one record per
    /// distinct model, by name).
    pub fn pricing(&self) -> Option<serde_json::Value> {
        self.measured.as_ref()?;
        let mut records = serde_json::Map::new();
        for engine in &self.engines {
            if let Some(measured) = &engine.cost.dense.measured {
                records.insert(
                    engine.cost.model.clone(),
                    serde_json::to_value(&measured.record).expect("records serialize"),
                );
            }
        }
        Some(serde_json::Value::Object(records))
    }

    /// The trace file and what replaying it within `duration_s` offers, for trace arrivals.
    pub fn trace_stats(&self) -> Option<(std::path::PathBuf, TraceStats)> {
        let ArrivalSpec::Trace { trace, time_scale } = &self.arrival else {
            return None;
        };
        self.arrival
            .trace_stats(trace_rows_within(trace, *time_scale, self.duration_s))
    }
}

/// How many of `trace`'s rows arrive within `duration_s` of its first, replayed at `time_scale`.
fn trace_rows_within(trace: &crate::arrivals::Trace, time_scale: f64, duration_s: f64) -> usize {
    let rows = trace.rows();
    let first = rows[0].timestamp_s;
    rows.partition_point(|r| (r.timestamp_s - first) * time_scale <= duration_s)
}

impl ChimeraConfig {
    /// The workflow arrivals and their mean rate: Poisson at `workload.rps`, or the `[arrival]`
    /// table (exactly one of the two).
    fn arrival_spec(
        &self,
        duration_s: f64,
        base_dir: &Path,
        cache: &mut LoadCache,
    ) -> Result<(ArrivalSpec, f64), FieldError> {
        match (&self.arrival, self.workload.rps) {
            (None, Some(rps)) => {
                let rps = crate::validate::rate("workload.rps", rps)?;
                Ok((ArrivalSpec::Poisson { rate_per_s: rps }, rps))
            }
            (None, None) => Err(field_error(
                "workload.rps",
                "is required (or an [arrival] table saying how workflows arrive)",
            )),
            (Some(_), Some(_)) => Err(field_error(
                "workload.rps",
                "does not apply with an [arrival] table: give the rate there (arrival.rate_per_s)",
            )),
            (Some(table), None) => {
                let spec = table.validate(usize::MAX, base_dir, &mut cache.traces)?;
                let rps = match &spec {
                    ArrivalSpec::Poisson { rate_per_s }
                    | ArrivalSpec::Gamma { rate_per_s, .. }
                    | ArrivalSpec::Bursty { rate_per_s, .. } => *rate_per_s,
                    ArrivalSpec::Trace { trace, time_scale } => {
                        trace_rows_within(trace, *time_scale, duration_s) as f64 / duration_s
                    }
                    ArrivalSpec::Offline => {
                        return Err(field_error(
                            "arrival.pattern",
                            "\"offline\" does not apply to Chimera: workflows arrive during \
                             workload.duration_s (use poisson, gamma, bursty or trace)",
                        ));
                    }
                };
                Ok((spec, rps))
            }
        }
    }

    /// Validates the Chimera tables (`base_dir`, the scenario's folder, is where a measured
    /// set is looked for besides the working directory and a trace path resolves; both are
    /// loaded once per sweep through `cache`).
    pub fn validate(
        &self,
        base_dir: &Path,
        cache: &mut LoadCache,
    ) -> Result<ChimeraScenario, FieldError> {
        let c = &self.cluster;
        let gpu =
            GpuSpec::by_name(&c.gpu).map_err(|e| field_error("cluster.gpu", e.to_string()))?;
        let measured = match &c.measured {
            Some(name) => {
                let set = measured_set("cluster.measured", name, base_dir, cache)?;
                measured_on("cluster.measured", &set, "cluster.gpu", &gpu)?;
                Some(set)
            }
            None => None,
        };
        let profile = match &c.profile {
            Some(_) if measured.is_some() => {
                return Err(field_error(
                    "cluster.profile",
                    "names a second cost source beside cluster.measured; keep one",
                ));
            }
            Some(file) => {
                let path = crate::validate::resolve_profile("cluster.profile", file, base_dir)?;
                let profile = DenseDecodeProfile::load(&path)
                    .map_err(|e| field_error("cluster.profile", e))?;
                Some((path, profile))
            }
            None => None,
        };
        if c.models.is_empty() {
            return Err(field_error("cluster.models", "needs at least one model"));
        }
        at_least_one("cluster.max_batch_size", c.max_batch_size)?;
        let utilization = positive("cluster.gpu_memory_utilization", c.gpu_memory_utilization)?;
        if utilization > 1.0 {
            return Err(field_error(
                "cluster.gpu_memory_utilization",
                format!("must lie in (0, 1], got {utilization}"),
            ));
        }
        let host = match c.step_overhead_ms {
            Some(ms) => HostOverhead::flat(
                crate::validate::span("cluster.step_overhead_ms", ms / 1e3)? * 1e9,
            ),
            None => HostOverhead::vllm_v0(),
        };
        let dataset = self.workload.dataset;
        let mut models: Vec<ModelWorkload> = Vec::new();
        let mut engines = Vec::with_capacity(c.models.len());
        for (i, name) in c.models.iter().enumerate() {
            let path = format!("cluster.models[{i}]");
            let shape = model_shape(name).ok_or_else(|| {
                field_error(
                    &path,
                    format!("unknown model {name:?}; known: {}", model_names()),
                )
            })?;
            let model = match models.iter().position(|m| m.model == *name) {
                Some(m) => m,
                None => {
                    models.push(ModelWorkload::new(dataset, name).ok_or_else(|| {
                        field_error(&path, format!("no {dataset:?} workload for {name:?}"))
                    })?);
                    models.len() - 1
                }
            };
            let cost = EngineCost::new(
                name,
                &shape,
                &gpu,
                c.max_batch_size,
                utilization,
                host,
                c.max_num_batched_tokens,
                measured.as_deref(),
            )
            .map_err(|e| field_error(&path, e))?
            .with_prefix_caching(c.prefix_caching);
            let cost = match &profile {
                Some((file, profile)) => {
                    let priced = profile.model_cost(&shape).map_err(|e| {
                        field_error("cluster.profile", format!("{}: {e}", file.display()))
                    })?;
                    cost.with_profile(priced, &profile.device, profile.scaling)
                }
                None => cost,
            };
            engines.push(EngineSpec { model, cost });
        }
        let duration_s = self.workload.duration_s;
        crate::validate::duration(
            "workload.duration_s",
            duration_s,
            crate::validate::limits::MAX_SIM_SECONDS_CEILING,
        )?;
        let (arrival, rps) = self.arrival_spec(duration_s, base_dir, cache)?;
        arrival.check_span(duration_s)?;
        self.predictor.validate("predictor")?;
        self.semantic_router.validate("semantic_router")?;
        self.queue.validate("queue")?;
        match &self.routing {
            RouterConfig::LeastLoaded {
                waiting_weight,
                running_weight,
            } => {
                non_negative("routing.waiting_weight", *waiting_weight)?;
                non_negative("routing.running_weight", *running_weight)?;
            }
            RouterConfig::Chimera { slack, margin } => {
                non_negative("routing.slack", *slack)?;
                non_negative("routing.margin", *margin)?;
            }
            RouterConfig::RoundRobin => {}
        }
        Ok(ChimeraScenario {
            engines,
            generator: WorkflowGenerator { dataset, models },
            rps,
            duration_s,
            arrival,
            predictor: self.predictor.clone(),
            semantic_router: self.semantic_router.clone(),
            queue: self.queue.clone(),
            routing: self.routing.clone(),
            measured: c.measured.clone(),
        })
    }
}
