//! The CAPS scenario tables (`[model]`, `[workload]`, `[arrival]`, `[scheduler]`,
//! `[execution]`, `[metrics]`, `[output]`), mirrored one to one with `deny_unknown_fields`, and
//! their validation into a runnable `CapsScenario`.

use super::workload::TokenDistribution;
use crate::arrivals::spec::{ArrivalSpec, ArrivalTable};
use crate::caps::server::SchedulerParams;
use crate::cost::measured_steps::PricingRecord;
use crate::cost::profile::Profile;
use crate::cost::shape::MoeModelShape;
use crate::load_cache::LoadCache;
use crate::policies::batch::BatchSelectorConfig;
use crate::serving_family::execution::{CvModel, ExecutionModel, GroupedModel, StragglerModel};
use crate::time::SimDuration;
use crate::validate::duration;
use crate::validate::limits::MAX_SIM_SECONDS_CEILING;
use crate::validate::{FieldError, at_least_one, field_error, positive};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapsConfig {
    #[serde(default)]
    pub model: ModelFile,
    pub workload: WorkloadFile,
    /// `[arrival]`: the shared table of `arrivals::spec`, as every family reads it.
    pub arrival: ArrivalTable,
    #[serde(default)]
    pub scheduler: SchedulerFile,
    #[serde(default)]
    pub execution: ExecutionFile,
    #[serde(default)]
    pub metrics: MetricsFile,
    #[serde(default)]
    pub output: OutputFile,
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
    /// The batch execution model; `grouped` (the physical one) unless named.
    #[serde(default = "default_execution_model")]
    pub model: ExecutionModelKind,
    /// GPU whose analytic roofline profile is used when no `profile` is given.
    #[serde(default = "default_gpu")]
    pub gpu: String,
    /// A calibration profile JSON (relative to the scenario file); overrides the analytic one.
    pub profile: Option<String>,
    /// A set of measured per-operation profiles of `gpu` (`profiles/<name>/`, e.g.
    /// `"vidur/a100"`) to build the curves from instead of the analytic roofline: each
    /// operation measured, scaled or analytic as the run's `pricing` record says.
    pub measured: Option<String>,
    /// `cv` only: the CV sensitivity; derived from the profile when absent.
    pub sensitivity: Option<f64>,
    /// `constant`: the service time; `exponential`: its mean.
    pub service_ms: Option<f64>,
}

fn default_gpu() -> String {
    "L4".into()
}

fn default_execution_model() -> ExecutionModelKind {
    ExecutionModelKind::Grouped
}

impl Default for ExecutionFile {
    fn default() -> Self {
        ExecutionFile {
            model: default_execution_model(),
            gpu: default_gpu(),
            profile: None,
            measured: None,
            sensitivity: None,
            service_ms: None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionModelKind {
    /// The physical model and the default: each MoE layer's active experts as one grouped GEMM
    /// (`cost::moe_layer`, docs/cost-model.md).
    Grouped,
    /// The paper's own model (caps.txt): base time x (1 + CV(load) x sensitivity).
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

/// A validated, runnable CAPS scenario (one sweep cell).
#[derive(Clone, Debug)]
pub struct CapsScenario {
    pub shape: MoeModelShape,
    pub workload: WorkloadSpec,
    pub arrival: ArrivalSpec,
    pub scheduler: SchedulerParams,
    pub selector: BatchSelectorConfig,
    pub execution: ExecutionSpec,
    pub queue_sample_interval: SimDuration,
    pub per_request_csv: bool,
}

#[derive(Clone, Debug)]
pub struct WorkloadSpec {
    pub n_requests: u64,
    pub n_topics: usize,
    pub affinity_concentration: f64,
    pub topic_purity: f64,
    pub prediction_noise: f64,
    pub prompt_tokens: TokenDistribution,
    pub output_tokens: TokenDistribution,
}

#[derive(Clone, Debug)]
pub enum ExecutionSpec {
    /// The `grouped`, `cv` or `straggler` model, built once per cell from its profile and shared
    /// by the runs.
    CostModel(Arc<ExecutionModel>),
    Constant {
        service: SimDuration,
    },
    Exponential {
        mean: SimDuration,
    },
}

fn token_distribution(
    path: &str,
    dist: &TokenDistribution,
) -> Result<TokenDistribution, FieldError> {
    positive(&format!("{path}.median"), dist.median)?;
    if !(dist.sigma.is_finite() && dist.sigma >= 0.0) {
        return Err(field_error(
            &format!("{path}.sigma"),
            format!("must be finite and >= 0, got {}", dist.sigma),
        ));
    }
    at_least_one(&format!("{path}.max"), dist.max as usize)?;
    Ok(dist.clone())
}

impl CapsConfig {
    /// Validates the CAPS tables; relative paths are resolved against `base_dir`.
    pub fn validate(
        &self,
        base_dir: &Path,
        cache: &mut LoadCache,
    ) -> Result<CapsScenario, FieldError> {
        validate(self, base_dir, cache)
    }
}

fn validate(
    file: &CapsConfig,
    base_dir: &Path,
    cache: &mut LoadCache,
) -> Result<CapsScenario, FieldError> {
    let mut shape = MoeModelShape::preset(&file.model.preset)
        .map_err(|e| field_error("model.preset", e.to_string()))?;
    if let Some(n) = file.model.n_layers {
        shape.n_layers = at_least_one("model.n_layers", n)?;
    }
    if let Some(n) = file.model.n_experts {
        shape.n_experts = at_least_one("model.n_experts", n)?;
    }
    if let Some(k) = file.model.top_k {
        shape.top_k = at_least_one("model.top_k", k)?;
    }
    if shape.top_k > shape.n_experts {
        let path = if file.model.top_k.is_some() {
            "model.top_k"
        } else {
            "model.n_experts"
        };
        return Err(field_error(
            path,
            format!(
                "top_k = {} exceeds the number of routed experts ({})",
                shape.top_k, shape.n_experts
            ),
        ));
    }

    let w = &file.workload;
    let workload = WorkloadSpec {
        n_requests: {
            at_least_one(
                "workload.n_requests",
                w.n_requests.min(usize::MAX as u64) as usize,
            )?;
            w.n_requests
        },
        n_topics: at_least_one("workload.n_topics", w.n_topics)?,
        affinity_concentration: positive(
            "workload.affinity_concentration",
            w.affinity_concentration,
        )?,
        topic_purity: if (0.0..=1.0).contains(&w.topic_purity) {
            w.topic_purity
        } else {
            return Err(field_error(
                "workload.topic_purity",
                format!("must lie in [0, 1], got {}", w.topic_purity),
            ));
        },
        prediction_noise: if w.prediction_noise.is_finite() && w.prediction_noise >= 0.0 {
            w.prediction_noise
        } else {
            return Err(field_error(
                "workload.prediction_noise",
                format!("must be finite and >= 0, got {}", w.prediction_noise),
            ));
        },
        prompt_tokens: token_distribution("workload.prompt_tokens", &w.prompt_tokens)?,
        output_tokens: token_distribution("workload.output_tokens", &w.output_tokens)?,
    };

    let n = usize::try_from(w.n_requests).unwrap_or(usize::MAX);
    let arrival = file.arrival.validate(n, base_dir, &mut cache.traces)?;

    let s = &file.scheduler;
    let max_batch_size = at_least_one("scheduler.max_batch_size", s.max_batch_size)?;
    if s.window_size < max_batch_size {
        return Err(field_error(
            "scheduler.window_size",
            format!(
                "must be at least max_batch_size ({max_batch_size}), got {}",
                s.window_size
            ),
        ));
    }
    let scheduler = SchedulerParams {
        max_batch_size,
        window_size: s.window_size,
        min_batch_trigger: at_least_one("scheduler.min_batch_trigger", s.min_batch_trigger)?,
        scheduling_interval: duration(
            "scheduler.scheduling_interval_ms",
            s.scheduling_interval_ms * 1e-3,
            MAX_SIM_SECONDS_CEILING,
        )?,
        seed_with_oldest: s.seed_with_oldest,
    };
    if let BatchSelectorConfig::PowerOfD { samples }
    | BatchSelectorConfig::PowerOfDDot { samples } = &s.selector
    {
        at_least_one("scheduler.selector.samples", *samples)?;
    }

    let execution = validate_execution(file, &shape, base_dir, cache)?;

    let interval = file.metrics.queue_sample_interval_ms;
    if !(interval.is_finite() && interval >= 0.0) {
        return Err(field_error(
            "metrics.queue_sample_interval_ms",
            format!("must be finite and >= 0, got {interval}"),
        ));
    }

    Ok(CapsScenario {
        shape,
        workload,
        arrival,
        scheduler,
        selector: s.selector.clone(),
        execution,
        // 0 turns the series off; anything else is a real duration of at least 1 ns.
        queue_sample_interval: if interval == 0.0 {
            SimDuration::ZERO
        } else {
            duration(
                "metrics.queue_sample_interval_ms",
                interval * 1e-3,
                MAX_SIM_SECONDS_CEILING,
            )?
        },
        per_request_csv: file.output.per_request_csv,
    })
}

fn validate_execution(
    file: &CapsConfig,
    shape: &MoeModelShape,
    base_dir: &Path,
    cache: &mut LoadCache,
) -> Result<ExecutionSpec, FieldError> {
    let e = &file.execution;
    let not_for = |present: bool, field: &str| -> Result<(), FieldError> {
        if present {
            Err(field_error(
                &format!("execution.{field}"),
                format!("does not apply to model \"{}\"", kind_name(e.model)),
            ))
        } else {
            Ok(())
        }
    };
    let service = || -> Result<SimDuration, FieldError> {
        let ms = e.service_ms.ok_or_else(|| {
            field_error(
                "execution.service_ms",
                format!("is required for model \"{}\"", kind_name(e.model)),
            )
        })?;
        duration("execution.service_ms", ms * 1e-3, MAX_SIM_SECONDS_CEILING)
    };
    match e.model {
        ExecutionModelKind::Constant | ExecutionModelKind::Exponential => {
            not_for(e.profile.is_some(), "profile")?;
            not_for(e.measured.is_some(), "measured")?;
            not_for(e.sensitivity.is_some(), "sensitivity")?;
            let duration = service()?;
            Ok(if e.model == ExecutionModelKind::Constant {
                ExecutionSpec::Constant { service: duration }
            } else {
                ExecutionSpec::Exponential { mean: duration }
            })
        }
        ExecutionModelKind::Grouped | ExecutionModelKind::Cv | ExecutionModelKind::Straggler => {
            not_for(e.service_ms.is_some(), "service_ms")?;
            if e.model != ExecutionModelKind::Cv {
                not_for(e.sensitivity.is_some(), "sensitivity")?;
            }
            if let Some(sensitivity) = e.sensitivity
                && !(sensitivity.is_finite() && sensitivity >= 0.0)
            {
                return Err(field_error(
                    "execution.sensitivity",
                    format!("must be finite and >= 0, got {sensitivity}"),
                ));
            }
            let (profile, pricing) = match &e.measured {
                None => (
                    load_profile(e.profile.as_deref(), &e.gpu, shape, base_dir, cache)?,
                    None,
                ),
                Some(name) => {
                    if e.profile.is_some() {
                        return Err(field_error(
                            "execution.measured",
                            "names a second cost source beside execution.profile; keep one",
                        ));
                    }
                    let (profile, record) = measured_profile(name, &e.gpu, shape, base_dir, cache)?;
                    (profile, Some(record))
                }
            };
            let model = match e.model {
                ExecutionModelKind::Cv => {
                    CvModel::new(&profile, shape, e.sensitivity).map(ExecutionModel::Cv)
                }
                ExecutionModelKind::Grouped => {
                    let gpu = crate::cost::GpuSpec::by_name(&profile.gpu)
                        .map_err(|err| field_error("execution.gpu", err.to_string()))?;
                    GroupedModel::new(&profile, shape, &gpu)
                        .map(|m| ExecutionModel::Grouped(Box::new(m)))
                }
                _ => StragglerModel::new(&profile, shape).map(ExecutionModel::Straggler),
            };
            let mut model = model.map_err(|err| field_error("execution", err.to_string()))?;
            if let Some(record) = pricing {
                model = model.with_pricing(record);
            }
            Ok(ExecutionSpec::CostModel(Arc::new(model)))
        }
    }
}

fn kind_name(kind: ExecutionModelKind) -> &'static str {
    match kind {
        ExecutionModelKind::Grouped => "grouped",
        ExecutionModelKind::Cv => "cv",
        ExecutionModelKind::Straggler => "straggler",
        ExecutionModelKind::Constant => "constant",
        ExecutionModelKind::Exponential => "exponential",
    }
}

/// The curves of `shape` on `gpu` built from the measured set `name`
/// (`cost::measured_steps::moe`, one GPU: tensor parallelism 1), with their pricing record.
fn measured_profile(
    name: &str,
    gpu: &str,
    shape: &MoeModelShape,
    base_dir: &Path,
    cache: &mut LoadCache,
) -> Result<(Arc<Profile>, Arc<PricingRecord>), FieldError> {
    let spec = crate::cost::gpu::GpuSpec::by_name(gpu)
        .map_err(|e| field_error("execution.gpu", e.to_string()))?;
    let set = crate::load_cache::measured_set("execution.measured", name, base_dir, cache)?;
    crate::validate::measured_on("execution.measured", &set, "execution.gpu", &spec)?;
    let built = crate::cost::measured_steps::moe(&set, shape, 1);
    Ok((Arc::new(built.profile), Arc::new(built.record)))
}

fn load_profile(
    path: Option<&str>,
    gpu: &str,
    shape: &MoeModelShape,
    base_dir: &Path,
    cache: &mut LoadCache,
) -> Result<Arc<Profile>, FieldError> {
    // The whole shape is part of the key: a sweep over layers, experts or dtype needs its own profile.
    let shape_key = serde_json::to_string(shape).expect("shapes serialize");
    let resolved = path
        .map(|p| crate::validate::resolve_profile("execution.profile", p, base_dir))
        .transpose()?;
    let key = match &resolved {
        Some(p) => format!("file:{}:{shape_key}", p.display()),
        None => format!("analytic:{gpu}:{shape_key}"),
    };
    if let Some(profile) = cache.profiles.get(&key) {
        return Ok(profile.clone());
    }
    let profile = match &resolved {
        Some(p) => {
            let profile =
                Profile::load(p).map_err(|e| field_error("execution.profile", e.to_string()))?;
            profile
                .check_shape(shape)
                .map_err(|e| field_error("execution.profile", format!("{}: {e}", p.display())))?;
            profile
        }
        None => {
            let spec = crate::cost::gpu::GpuSpec::by_name(gpu)
                .map_err(|e| field_error("execution.gpu", e.to_string()))?;
            crate::cost::roofline::analytic_profile(&spec, shape)
        }
    };
    let profile = Arc::new(profile);
    cache.profiles.insert(key, profile.clone());
    Ok(profile)
}
