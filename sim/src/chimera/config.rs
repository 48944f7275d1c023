//! The Chimera scenario tables (`[cluster]`, `[workload]`, `[predictor]`, `[semantic_router]`,
//! `[queue]`, `[routing]`), mirrored with `deny_unknown_fields`, and their validation into a
//! runnable `ChimeraScenario`.

use super::models::{DEFAULT_STEP_OVERHEAD_MS, EngineCost, model_names, model_shape};
use super::policy::{QueuePolicyConfig, RouterConfig};
use super::workload::{
    Dataset, ModelWorkload, PredictorConfig, SemanticRouterConfig, WorkflowGenerator,
};
use crate::cost::gpu::GpuSpec;
use crate::scenario::validate::{
    FieldError, LoadCache, at_least_one, field_error, measured_on, measured_set, positive,
};
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
}

/// The length predictor's default log-normal noise: the level whose Kendall tau distance on this
/// workload lands in the range of the paper's QRF (0.12-0.27, Table 3); the run reports the
/// distance it achieves.
pub fn default_predictor() -> PredictorConfig {
    PredictorConfig::Noisy { noise: 0.6 }
}

/// The semantic router's default difficulty-estimate noise (the run reports the mean average
/// precision it achieves; the paper's ModernBERT-large reaches 0.52 on APPS, 0.74 on MATH).
pub fn default_semantic_router() -> SemanticRouterConfig {
    SemanticRouterConfig::Noisy { noise: 1.0 }
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
    #[serde(default = "default_step_overhead_ms")]
    pub step_overhead_ms: f64,
    /// A set of measured per-operation profiles of `gpu` (`profiles/<name>/`, e.g.
    /// `"vidur/a100"`) to price the engines' steps from instead of the roofline: each operation
    /// measured, scaled or analytic as the run's `pricing` record says.
    #[serde(default)]
    pub measured: Option<String>,
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
fn default_step_overhead_ms() -> f64 {
    DEFAULT_STEP_OVERHEAD_MS
}

/// `[workload]`: the dataset and the Poisson workflow arrivals.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadFile {
    pub dataset: Dataset,
    /// Workflow arrivals per second.
    pub rps: f64,
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
    pub rps: f64,
    pub duration_s: f64,
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
            if let Some(measured) = &engine.cost.measured {
                records.insert(
                    engine.cost.model.clone(),
                    serde_json::to_value(&measured.record).expect("records serialize"),
                );
            }
        }
        Some(serde_json::Value::Object(records))
    }
}

fn non_negative(path: &str, value: f64) -> Result<f64, FieldError> {
    if value.is_finite() && value >= 0.0 {
        Ok(value)
    } else {
        Err(field_error(
            path,
            format!("must be finite and >= 0, got {value}"),
        ))
    }
}

impl ChimeraConfig {
    /// Validates the Chimera tables (`base_dir`, the scenario's folder, is where a measured
    /// set is looked for besides the working directory; it is loaded through `cache`).
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
        let overhead = non_negative("cluster.step_overhead_ms", c.step_overhead_ms)?;
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
                overhead,
                measured.as_deref(),
            )
            .map_err(|e| field_error(&path, e))?;
            engines.push(EngineSpec { model, cost });
        }
        let rps = positive("workload.rps", self.workload.rps)?;
        let duration_s = positive("workload.duration_s", self.workload.duration_s)?;
        if let PredictorConfig::Noisy { noise } = &self.predictor {
            non_negative("predictor.noise", *noise)?;
        }
        if let SemanticRouterConfig::Noisy { noise } = &self.semantic_router {
            non_negative("semantic_router.noise", *noise)?;
        }
        match &self.queue {
            QueuePolicyConfig::Mlfq {
                levels,
                base_quantum_tokens,
            } => {
                at_least_one("queue.levels", *levels as usize)?;
                at_least_one("queue.base_quantum_tokens", *base_quantum_tokens as usize)?;
            }
            QueuePolicyConfig::Ltr { noise } => {
                non_negative("queue.noise", *noise)?;
            }
            QueuePolicyConfig::Stjf { quantum, .. } => {
                at_least_one("queue.quantum", *quantum as usize)?;
            }
            QueuePolicyConfig::Fcfs | QueuePolicyConfig::Sjf => {}
        }
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
            predictor: self.predictor.clone(),
            semantic_router: self.semantic_router.clone(),
            queue: self.queue.clone(),
            routing: self.routing.clone(),
            measured: c.measured.clone(),
        })
    }
}
