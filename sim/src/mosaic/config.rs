//! The MOSAIC scenario tables (`[serving]`, `[cluster]`, `[pool]`/`[[experts]]`,
//! `[aggregator]`, `[dataset]`, `[calibration]`, `[placement]`, `[gate]`, `[output]`),
//! mirrored one to one with `deny_unknown_fields`, and their validation into a runnable
//! `MosaicScenario` (every failure a `FieldError` naming the dotted field).

use super::profile_cost::{DenseDecodeProfile, MosaicDecodeProfile};
use super::session::{ModelServing, ServingParams};
use crate::cost::gpu::{GpuSpec, LinkSpec};
use crate::cost::load::LoadPath;
use crate::cost::measured_steps::MeasuredSet;
use crate::cost::shape::DenseModelShape;
use crate::load_cache::{LoadCache, measured_set};
use crate::policies::gate::GateConfig;
use crate::policies::placement::{PlacementConfig, PlacementProblem};
use crate::serving::questions::{self as presets, BUCKET_NAMES, DATASET_PRESETS};
pub use crate::serving::questions::{Bucket, BucketFile, LengthDist};
use crate::validate::{FieldError, measured_on, span};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// Experts recruited per question (k of the paper; its buckets 3:0, 2:1, 1:1:1 assume 3).
pub const EXPERTS_PER_QUESTION: u32 = presets::EXPERTS_PER_QUESTION as u32;

fn err(path: &str, message: impl Into<String>) -> FieldError {
    FieldError {
        path: path.to_string(),
        message: message.into(),
    }
}

fn positive(path: &str, value: f64) -> Result<f64, FieldError> {
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(err(path, format!("must be a positive number, got {value}")))
    }
}

fn fraction(path: &str, value: f64) -> Result<f64, FieldError> {
    if value.is_finite() && value > 0.0 && value <= 1.0 {
        Ok(value)
    } else {
        Err(err(path, format!("must be in (0, 1], got {value}")))
    }
}

fn non_negative(path: &str, value: f64) -> Result<f64, FieldError> {
    if value.is_finite() && value >= 0.0 {
        Ok(value)
    } else {
        Err(err(path, format!("must be finite and >= 0, got {value}")))
    }
}

/// The load path's default bandwidth, GB/s. mosaic.txt (appendix A.2) measures a session's
/// load at 38-47 s on an A100 80 GB, "dominated by weight transfer and KV-cache
/// pre-allocation": the smallest expert of its pool (Qwen2.5-7B, 15.2 GB of bf16 weights) at
/// 38 s is 0.40 GB/s, and at that rate GLM-4-9B's 18.8 GB take 47 s, the top of the range, so
/// one rate for the whole path (storage, host, PCIe, engine start-up) accounts for both ends.
pub const DEFAULT_LOAD_GBPS: f64 = 0.4;

/// Every MOSAIC-specific table of a scenario file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MosaicConfig {
    #[serde(default)]
    pub serving: ServingFile,
    #[serde(default)]
    pub cluster: ClusterFile,
    /// A named expert pool (`hybrid`, `all_reasoning`, `all_non_reasoning`) ...
    #[serde(default)]
    pub pool: Option<PoolFile>,
    /// ... or the experts listed one by one (exactly one of the two).
    #[serde(default)]
    pub experts: Vec<ExpertFile>,
    #[serde(default)]
    pub aggregator: AggregatorFile,
    pub dataset: DatasetFile,
    #[serde(default)]
    pub calibration: CalibrationFile,
    #[serde(default)]
    pub placement: PlacementConfig,
    #[serde(default)]
    pub gate: GateConfig,
    #[serde(default)]
    pub output: OutputFile,
}

/// `[serving]`: the GPU and the vLLM engine's cost knobs (docs/mosaic.md lists each source).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServingFile {
    pub gpu: String,
    pub step_overhead_ms: f64,
    pub gpu_memory_utilization: f64,
    pub max_num_seqs: u32,
    /// vLLM `block_size`: tokens per KV-cache block.
    pub block_size: u32,
    /// vLLM `watermark`: the share of the KV blocks an admission must leave free.
    pub watermark: f64,
    pub allreduce_latency_us: f64,
    pub interconnect_gbps: f64,
    /// The load path's bandwidth, GB/s: a model's load is its bf16 weight bytes over it,
    /// unless an expert gives `load_s`.
    pub load_gbps: f64,
    /// A measured dense-decode profile (path relative to the scenario file) to price the
    /// sessions' decode steps and loads from instead of the analytic model of `gpu`.
    pub profile: Option<String>,
    /// A set of measured per-operation profiles of `gpu` (`profiles/<name>/`, e.g.
    /// `"vidur/a100"`) to price every expert's and the aggregator's steps from instead of the
    /// roofline: each operation measured, scaled or analytic as the run's `pricing` record
    /// says. Excludes `profile`.
    pub measured: Option<String>,
}

impl Default for ServingFile {
    fn default() -> Self {
        ServingFile {
            gpu: "A100-80GB".into(),
            step_overhead_ms: 4.0,
            gpu_memory_utilization: 0.9,
            max_num_seqs: 256,
            block_size: 16,
            watermark: 0.01,
            allreduce_latency_us: 10.0,
            interconnect_gbps: 300.0,
            load_gbps: DEFAULT_LOAD_GBPS,
            profile: None,
            measured: None,
        }
    }
}

/// `[cluster]`: the workers (one GPU each).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterFile {
    pub n_workers: u32,
}

impl Default for ClusterFile {
    fn default() -> Self {
        ClusterFile { n_workers: 4 }
    }
}

/// `[pool]`: a named expert pool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolFile {
    pub preset: String,
}

/// Instruction-tuned (short answers) or reasoning-tuned (long think traces).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExpertFamily {
    Reasoning,
    Instruction,
}

/// `[[experts]]`: one expert LLM.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpertFile {
    pub name: String,
    pub family: ExpertFamily,
    /// A dense-model preset (`sim::cost::shape::DENSE_PRESETS`).
    pub shape: String,
    /// Session load cost; default: the weights over `[serving] load_gbps`.
    pub load_s: Option<f64>,
    pub mean_output_tokens: f64,
    /// Lognormal shape of the output length; default 0.45 reasoning, 0.5 instruction.
    pub output_sigma: Option<f64>,
    #[serde(default = "default_max_output")]
    pub max_output_tokens: u32,
}

fn default_max_output() -> u32 {
    32_768
}

/// `[aggregator]`: the model that fuses the experts' answers, served tensor-parallel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AggregatorFile {
    pub name: String,
    pub shape: String,
    pub load_s: Option<f64>,
    pub mean_output_tokens: f64,
    pub output_sigma: f64,
    pub max_output_tokens: u32,
    /// Longest aggregator prompt (question + the experts' outputs are truncated to it).
    pub max_prompt_tokens: u32,
    /// Instruction tokens the aggregation template adds to every prompt.
    pub template_tokens: u32,
    /// GPUs of the tensor-parallel group; default: every worker.
    pub tensor_parallel: Option<u32>,
}

impl Default for AggregatorFile {
    fn default() -> Self {
        AggregatorFile {
            name: "QwenR1".into(),
            shape: "deepseek-r1-distill-qwen-7b".into(),
            load_s: None,
            mean_output_tokens: 1500.0,
            output_sigma: 0.6,
            max_output_tokens: 16_384,
            max_prompt_tokens: 16_384,
            template_tokens: 100,
            tensor_parallel: None,
        }
    }
}

/// `[dataset.buckets]`: 3:0, 2:1 and 1:1:1.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BucketsFile {
    pub unanimous: BucketFile,
    pub majority: BucketFile,
    pub split: BucketFile,
}

/// `[dataset]`: a benchmark preset, any field of which may be overridden.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetFile {
    pub preset: Option<String>,
    pub name: Option<String>,
    pub questions: Option<u32>,
    /// Prompt slots per expert (expert name -> count); they must sum to 3 x questions.
    pub slots: Option<BTreeMap<String, u32>>,
    pub calibration_questions: Option<u32>,
    pub prompt_tokens_mean: Option<f64>,
    #[serde(default = "default_prompt_sigma")]
    pub prompt_tokens_sigma: f64,
    pub buckets: Option<BucketsFile>,
    /// Multiplies the reasoning / instruction experts' output lengths on this benchmark.
    #[serde(default = "one")]
    pub reasoning_output_scale: f64,
    #[serde(default = "one")]
    pub instruction_output_scale: f64,
}

fn default_prompt_sigma() -> f64 {
    0.3
}
fn one() -> f64 {
    1.0
}

/// `[calibration]`: the offline profiling sweep behind the per-model regression.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CalibrationFile {
    /// Every recruited expert is profiled on at least this many calibration prompts.
    pub min_prompts_per_model: u32,
    /// Sweep session sizes double from `sweep_min_prompts` up to `sweep_max_prompts`.
    pub sweep_min_prompts: u32,
    pub sweep_max_prompts: u32,
}

impl Default for CalibrationFile {
    fn default() -> Self {
        CalibrationFile {
            min_prompts_per_model: 8,
            sweep_min_prompts: 8,
            sweep_max_prompts: 2048,
        }
    }
}

/// `[output]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutputFile {
    /// Put the ILP's wall-clock solve time into `ilp_solve_time_s` (otherwise 0, so results
    /// stay byte-identical across runs).
    pub record_solve_time: bool,
}

/// A validated expert.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Expert {
    pub name: String,
    pub family: ExpertFamily,
    pub shape: DenseModelShape,
    pub load_s: f64,
    pub output: LengthDist,
    pub serving: ModelServing,
}

/// A validated aggregator.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Aggregator {
    pub name: String,
    pub shape: DenseModelShape,
    pub load_s: f64,
    pub output: LengthDist,
    pub max_prompt_tokens: u32,
    pub template_tokens: u32,
    pub tensor_parallel: u32,
    pub serving: ModelServing,
}

/// A validated benchmark.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Dataset {
    pub name: String,
    pub questions: u32,
    /// Slots per expert, aligned with `MosaicScenario::experts`.
    pub slots: Vec<u32>,
    pub calibration_questions: u32,
    pub prompt: LengthDist,
    pub buckets: [Bucket; 3],
    pub reasoning_output_scale: f64,
    pub instruction_output_scale: f64,
}

/// A validated, runnable MOSAIC scenario (one sweep cell).
#[derive(Clone, Debug, PartialEq)]
pub struct MosaicScenario {
    pub serving: ServingParams,
    /// The path model loads take (`[serving] load_gbps`).
    pub load_path: LoadPath,
    pub n_workers: u32,
    pub experts: Vec<Expert>,
    pub aggregator: Aggregator,
    pub dataset: Dataset,
    pub calibration: CalibrationFile,
    pub placement: PlacementConfig,
    pub gate: GateConfig,
    pub record_solve_time: bool,
    /// The measured profile `serving.profile` names, when it names one.
    pub decode_profile: Option<MosaicDecodeProfile>,
    /// The measured set the experts and the aggregator are priced from (`serving.measured`).
    pub measured: Option<String>,
}

/// Pool presets (names accepted by `[pool] preset`).
pub const POOL_PRESETS: &[&str] = &["hybrid", "all_reasoning", "all_non_reasoning"];

fn expert(name: &str, family: ExpertFamily, shape: &str, mean_output_tokens: f64) -> ExpertFile {
    ExpertFile {
        name: name.into(),
        family,
        shape: shape.into(),
        load_s: None,
        mean_output_tokens,
        output_sigma: None,
        max_output_tokens: default_max_output(),
    }
}

/// The experts of a pool preset. Hybrid: appendix A.2 (Table 2), with the reasoning experts'
/// MMLU-Pro means of section 3 (LlamaR1 3146, QwenR1 3734 tokens) and ~200 tokens for the
/// instruction-tuned ones. All-reasoning: section 3's means in that pool (LlamaR1 2302, QwenR1
/// 2522, Skywork 5339, Stratos 5822); DLER-R1 and OpenThinker are not published (assumptions:
/// 1500, length-penalised training; 4000). All-non-reasoning: ~200 tokens each (Table 2).
pub fn pool_preset(name: &str) -> Option<Vec<ExpertFile>> {
    use ExpertFamily::{Instruction as I, Reasoning as R};
    match name {
        "hybrid" => Some(vec![
            expert("LlamaR1", R, "deepseek-r1-distill-llama-8b", 3146.0),
            expert("QwenR1", R, "deepseek-r1-distill-qwen-7b", 3734.0),
            expert("Gemma", I, "gemma-2-9b-it", 200.0),
            expert("Exaone", I, "exaone-3.5-7.8b-instruct", 200.0),
            expert("GLM", I, "glm-4-9b", 200.0),
            expert("Qwen", I, "qwen2.5-7b-instruct", 200.0),
        ]),
        "all_reasoning" => Some(vec![
            expert("LlamaR1", R, "deepseek-r1-distill-llama-8b", 2302.0),
            expert("QwenR1", R, "deepseek-r1-distill-qwen-7b", 2522.0),
            expert("DLERR1", R, "deepseek-r1-distill-qwen-7b", 1500.0),
            expert("ThinkerR1", R, "qwen2.5-7b-instruct", 4000.0),
            expert("StratosR1", R, "qwen2.5-7b-instruct", 5822.0),
            expert("SkyworkR1", R, "deepseek-r1-distill-qwen-7b", 5339.0),
        ]),
        "all_non_reasoning" => Some(vec![
            expert("Gemma", I, "gemma-2-9b-it", 200.0),
            expert("Qwen", I, "qwen2.5-7b-instruct", 200.0),
            expert("Exaone", I, "exaone-3.5-7.8b-instruct", 200.0),
            expert("GLM", I, "glm-4-9b", 200.0),
            expert("Llama", I, "llama-3.1-8b-instruct", 200.0),
            expert("Granite", I, "granite-3.1-8b-instruct", 200.0),
        ]),
        _ => None,
    }
}

fn shape_of(path: &str, name: &str) -> Result<DenseModelShape, FieldError> {
    DenseModelShape::preset(name).map_err(|e| err(path, e.to_string()))
}

impl MosaicConfig {
    /// Cross-field checks; `base_dir` is the scenario file's folder (`serving.profile` is
    /// relative to it, and a measured set is looked for from it besides the working directory,
    /// loaded once per sweep through `cache`).
    pub fn validate(
        &self,
        base_dir: &Path,
        cache: &mut LoadCache,
    ) -> Result<MosaicScenario, FieldError> {
        let s = &self.serving;
        let gpu = GpuSpec::by_name(&s.gpu).map_err(|e| err("serving.gpu", e.to_string()))?;
        let measured = match &s.measured {
            Some(_) if s.profile.is_some() => {
                return Err(err(
                    "serving.measured",
                    "names a second cost source beside serving.profile; keep one",
                ));
            }
            Some(name) => {
                let set = measured_set("serving.measured", name, base_dir, cache)?;
                measured_on("serving.measured", &set, "serving.gpu", &gpu)?;
                Some(set)
            }
            None => None,
        };
        let measured: Option<&MeasuredSet> = measured.as_deref();
        let serving = ServingParams {
            gpu,
            step_overhead_s: span("serving.step_overhead_ms", s.step_overhead_ms / 1e3)?,
            gpu_memory_utilization: fraction(
                "serving.gpu_memory_utilization",
                s.gpu_memory_utilization,
            )?,
            max_num_seqs: s.max_num_seqs,
            block_size: s.block_size,
            watermark: s.watermark,
            interconnect: LinkSpec {
                latency_ns: span("serving.allreduce_latency_us", s.allreduce_latency_us / 1e6)?
                    * 1e9,
                bandwidth_bytes_per_s: positive("serving.interconnect_gbps", s.interconnect_gbps)?
                    * 1e9,
            },
        };
        if s.max_num_seqs == 0 {
            return Err(err("serving.max_num_seqs", "must be at least 1, got 0"));
        }
        if s.block_size == 0 {
            return Err(err("serving.block_size", "must be at least 1, got 0"));
        }
        if !(s.watermark.is_finite() && (0.0..1.0).contains(&s.watermark)) {
            return Err(err(
                "serving.watermark",
                format!("must be in [0, 1), got {}", s.watermark),
            ));
        }
        let load_path = LoadPath {
            bandwidth_bytes_per_s: positive("serving.load_gbps", s.load_gbps)? * 1e9,
        };
        let n_workers = self.cluster.n_workers;
        if n_workers == 0 {
            return Err(err("cluster.n_workers", "must be at least 1, got 0"));
        }

        // The pool.
        let (files, prefix) = match (&self.pool, self.experts.is_empty()) {
            (Some(_), false) => {
                return Err(err(
                    "pool",
                    "give either [pool] preset or [[experts]], not both",
                ));
            }
            (None, true) => {
                return Err(err(
                    "experts",
                    "no experts: give [pool] preset or [[experts]]",
                ));
            }
            (Some(pool), true) => (
                pool_preset(&pool.preset).ok_or_else(|| {
                    err(
                        "pool.preset",
                        format!(
                            "unknown pool {:?}; known pools: {}",
                            pool.preset,
                            POOL_PRESETS.join(", ")
                        ),
                    )
                })?,
                "pool",
            ),
            (None, false) => (self.experts.clone(), "experts"),
        };
        let mut shapes = Vec::new();
        for (i, e) in files.iter().enumerate() {
            let at = |f: &str| format!("{prefix}[{i}].{f}");
            if e.name.is_empty() {
                return Err(err(&at("name"), "must not be empty"));
            }
            if files[..i].iter().any(|o| o.name == e.name) {
                return Err(err(&at("name"), format!("duplicate expert {:?}", e.name)));
            }
            let shape = shape_of(&at("shape"), &e.shape)?;
            shape
                .check()
                .map_err(|m| err(&at("shape"), m.to_string()))?;
            shapes.push(shape);
        }
        let mut experts = Vec::new();
        for (i, (e, shape)) in files.iter().zip(shapes).enumerate() {
            let at = |f: &str| format!("{prefix}[{i}].{f}");
            let load_s = match e.load_s {
                Some(v) => span(&at("load_s"), v)?,
                None => load_path.seconds(shape.weight_bytes()),
            };
            let sigma = e.output_sigma.unwrap_or(match e.family {
                ExpertFamily::Reasoning => 0.45,
                ExpertFamily::Instruction => 0.5,
            });
            non_negative(&at("output_sigma"), sigma)?;
            positive(&at("mean_output_tokens"), e.mean_output_tokens)?;
            if e.max_output_tokens == 0 {
                return Err(err(&at("max_output_tokens"), "must be at least 1, got 0"));
            }
            let model_serving = ModelServing::new(&shape, &serving, 1, measured)
                .map_err(|m| err(&at("shape"), m.to_string()))?;
            experts.push(Expert {
                name: e.name.clone(),
                family: e.family,
                shape,
                load_s,
                output: LengthDist {
                    mean: e.mean_output_tokens,
                    sigma,
                    max: e.max_output_tokens,
                },
                serving: model_serving,
            });
        }

        // The aggregator.
        let a = &self.aggregator;
        let shape = shape_of("aggregator.shape", &a.shape)?;
        let tensor_parallel = a.tensor_parallel.unwrap_or(n_workers);
        if tensor_parallel == 0 || tensor_parallel > n_workers {
            return Err(err(
                "aggregator.tensor_parallel",
                format!("must be in 1..={n_workers} (the workers), got {tensor_parallel}"),
            ));
        }
        let aggregator = Aggregator {
            name: a.name.clone(),
            load_s: match a.load_s {
                Some(v) => span("aggregator.load_s", v)?,
                None => load_path.seconds(shape.weight_bytes()),
            },
            output: LengthDist {
                mean: positive("aggregator.mean_output_tokens", a.mean_output_tokens)?,
                sigma: non_negative("aggregator.output_sigma", a.output_sigma)?,
                max: a.max_output_tokens.max(1),
            },
            max_prompt_tokens: a.max_prompt_tokens.max(1),
            template_tokens: a.template_tokens,
            tensor_parallel,
            serving: ModelServing::new(&shape, &serving, tensor_parallel, measured)
                .map_err(|m| err("aggregator.shape", m.to_string()))?,
            shape,
        };
        let longest = u64::from(aggregator.max_prompt_tokens) + u64::from(aggregator.output.max);
        if !aggregator.serving.holds(longest) {
            return Err(err(
                "aggregator.max_prompt_tokens",
                format!(
                    "max_prompt_tokens + max_output_tokens = {longest} exceeds the KV cache ({} \
                     blocks of {} tokens)",
                    aggregator.serving.kv_blocks(),
                    aggregator.serving.block_size
                ),
            ));
        }

        let dataset = self.validate_dataset(&experts)?;
        let prompt_cap = (dataset.prompt.max as u64).max(1);
        for (i, e) in experts.iter().enumerate() {
            if !e.serving.holds(prompt_cap + u64::from(e.output.max)) {
                return Err(err(
                    &format!("{prefix}[{i}].max_output_tokens"),
                    format!(
                        "a {prompt_cap}-token prompt plus {} output tokens exceeds the KV cache \
                         of {} blocks of {} tokens",
                        e.output.max,
                        e.serving.kv_blocks(),
                        e.serving.block_size
                    ),
                ));
            }
        }

        let c = &self.calibration;
        if c.sweep_min_prompts == 0 || c.sweep_max_prompts < c.sweep_min_prompts {
            return Err(err(
                "calibration.sweep_max_prompts",
                format!(
                    "need 1 <= sweep_min_prompts <= sweep_max_prompts, got {} and {}",
                    c.sweep_min_prompts, c.sweep_max_prompts
                ),
            ));
        }
        if c.min_prompts_per_model == 0 {
            return Err(err(
                "calibration.min_prompts_per_model",
                "must be at least 1, got 0",
            ));
        }

        match &self.placement {
            PlacementConfig::Ilp {
                time_limit_s,
                max_models_per_worker,
                ..
            } => {
                positive("placement.time_limit_s", *time_limit_s)?;
                self.check_k(&dataset, n_workers, *max_models_per_worker)?;
            }
            PlacementConfig::Lpt {
                max_models_per_worker,
            } => self.check_k(&dataset, n_workers, *max_models_per_worker)?,
            _ => {}
        }
        if let GateConfig::Threshold { tau } = self.gate
            && !(tau.is_finite() && (0.0..=1.0).contains(&tau))
        {
            return Err(err("gate.tau", format!("must be in [0, 1], got {tau}")));
        }

        let decode_profile = match &s.profile {
            None => None,
            Some(file) => {
                let path = crate::validate::resolve_profile("serving.profile", file, base_dir)?;
                let profile =
                    DenseDecodeProfile::load(&path).map_err(|e| err("serving.profile", e))?;
                let costs = experts
                    .iter()
                    .map(|e| profile.model_cost(&e.shape))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| err("serving.profile", format!("{}: {e}", path.display())))?;
                Some(MosaicDecodeProfile {
                    device: profile.device,
                    path: file.clone(),
                    scaling: profile.scaling,
                    experts: costs,
                })
            }
        };

        Ok(MosaicScenario {
            serving,
            load_path,
            n_workers,
            experts,
            aggregator,
            dataset,
            calibration: c.clone(),
            placement: self.placement.clone(),
            gate: self.gate.clone(),
            record_solve_time: self.output.record_solve_time,
            decode_profile,
            measured: s.measured.clone(),
        })
    }

    fn check_k(&self, dataset: &Dataset, n_workers: u32, k: u32) -> Result<(), FieldError> {
        let recruited = dataset.slots.iter().filter(|&&s| s > 0).count() as u32;
        if u64::from(k) * u64::from(n_workers) < u64::from(recruited) {
            return Err(err(
                "placement.max_models_per_worker",
                format!(
                    "infeasible: {recruited} recruited models on {n_workers} workers need K >= ceil({recruited}/{n_workers}) = {}, got {k}",
                    recruited.div_ceil(n_workers)
                ),
            ));
        }
        Ok(())
    }

    fn validate_dataset(&self, experts: &[Expert]) -> Result<Dataset, FieldError> {
        let d = &self.dataset;
        let preset = match &d.preset {
            Some(name) => Some(presets::dataset(name).ok_or_else(|| {
                err(
                    "dataset.preset",
                    format!(
                        "unknown dataset {name:?}; known datasets: {}",
                        DATASET_PRESETS.join(", ")
                    ),
                )
            })?),
            None => None,
        };
        let missing = |f: &str| err(&format!("dataset.{f}"), "required when no preset is given");
        let name = d
            .name
            .clone()
            .or_else(|| preset.as_ref().map(|p| p.name.to_string()))
            .ok_or_else(|| missing("name"))?;
        let questions = d
            .questions
            .or(preset.as_ref().map(|p| p.questions))
            .ok_or_else(|| missing("questions"))?;
        if questions == 0 {
            return Err(err("dataset.questions", "must be at least 1, got 0"));
        }
        let slot_table: BTreeMap<String, u32> = match (&d.slots, &preset) {
            (Some(table), _) => table.clone(),
            (None, Some(p)) => p.slots.iter().map(|(n, c)| (n.to_string(), *c)).collect(),
            (None, None) => return Err(missing("slots")),
        };
        for (expert, count) in &slot_table {
            if *count > 0 && !experts.iter().any(|e| &e.name == expert) {
                return Err(err(
                    &format!("dataset.slots.{expert}"),
                    format!(
                        "no expert called {expert:?} in the pool ({})",
                        experts
                            .iter()
                            .map(|e| e.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
        }
        let slots: Vec<u32> = experts
            .iter()
            .map(|e| slot_table.get(&e.name).copied().unwrap_or(0))
            .collect();
        let total: u64 = slots.iter().map(|&s| u64::from(s)).sum();
        if total != u64::from(EXPERTS_PER_QUESTION) * u64::from(questions) {
            return Err(err(
                "dataset.slots",
                format!(
                    "slots sum to {total}, but {questions} questions x {EXPERTS_PER_QUESTION} experts = {}",
                    u64::from(EXPERTS_PER_QUESTION) * u64::from(questions)
                ),
            ));
        }
        let calibration_questions = d
            .calibration_questions
            .or(preset.as_ref().map(|p| p.calibration_questions))
            .ok_or_else(|| missing("calibration_questions"))?;
        let prompt_mean = positive(
            "dataset.prompt_tokens_mean",
            d.prompt_tokens_mean
                .or(preset.as_ref().map(|p| p.prompt_tokens_mean))
                .ok_or_else(|| missing("prompt_tokens_mean"))?,
        )?;
        let prompt_sigma = non_negative("dataset.prompt_tokens_sigma", d.prompt_tokens_sigma)?;
        let files: [BucketFile; 3] = match (&d.buckets, &preset) {
            (Some(b), _) => [b.unanimous.clone(), b.majority.clone(), b.split.clone()],
            (None, Some(p)) => p.bucket_files(),
            (None, None) => return Err(missing("buckets")),
        };
        for (i, b) in files.iter().enumerate() {
            let at = |f: &str| format!("dataset.buckets.{}.{f}", BUCKET_NAMES[i]);
            non_negative(&at("share_pct"), b.share_pct)?;
            positive(&at("length_weight"), b.length_weight)?;
            for (f, v) in [
                ("majority_accuracy_pct", b.majority_accuracy_pct),
                ("aggregator_accuracy_pct", b.aggregator_accuracy_pct),
            ] {
                if !(v.is_finite() && (0.0..=100.0).contains(&v)) {
                    return Err(err(
                        &at(f),
                        format!("must be a percentage in [0, 100], got {v}"),
                    ));
                }
            }
        }
        let share_sum: f64 = files.iter().map(|b| b.share_pct).sum();
        if (share_sum - 100.0).abs() > 0.5 {
            return Err(err(
                "dataset.buckets",
                format!("bucket shares sum to {share_sum} %, expected 100"),
            ));
        }
        let buckets = presets::buckets(questions, &files);
        Ok(Dataset {
            name,
            questions,
            slots,
            calibration_questions,
            prompt: presets::prompt_lengths(prompt_mean, prompt_sigma),
            buckets,
            reasoning_output_scale: positive(
                "dataset.reasoning_output_scale",
                d.reasoning_output_scale,
            )?,
            instruction_output_scale: positive(
                "dataset.instruction_output_scale",
                d.instruction_output_scale,
            )?,
        })
    }
}

impl MosaicScenario {
    /// What priced the run's expert sessions: the roofline of `serving.gpu`, the measured
    /// dense-decode profile `serving.profile` names (the aggregator is the roofline's then), or
    /// the measured set `serving.measured` names (the aggregator's too).
    pub fn cost_source(&self) -> String {
        match (&self.decode_profile, &self.measured) {
            (Some(p), _) => format!("measured ({}, {})", p.device, p.path),
            (None, Some(name)) => {
                format!("measured-operations:{name}:{}", self.serving.gpu.name)
            }
            (None, None) => "analytic-roofline".into(),
        }
    }

    /// With `serving.measured`, how each expert's and the aggregator's operations were priced
    /// (`experts`: one record per expert, by name; `aggregator`: the aggregator's, at its
    /// tensor-parallel degree).
    pub fn pricing(&self) -> Option<serde_json::Value> {
        self.measured.as_ref()?;
        let record = |serving: &ModelServing| {
            serving
                .dense
                .measured
                .as_ref()
                .map(|m| serde_json::to_value(&m.record).expect("records serialize"))
        };
        let experts: serde_json::Map<String, serde_json::Value> = self
            .experts
            .iter()
            .filter_map(|e| Some((e.name.clone(), record(&e.serving)?)))
            .collect();
        Some(serde_json::json!({
            "experts": experts,
            "aggregator": record(&self.aggregator.serving),
        }))
    }

    /// The replica cap of an expert with predicted session time `predicted_s`.
    pub fn replica_cap(&self, expert: usize, predicted_s: f64) -> u32 {
        PlacementProblem::replica_cap(predicted_s, self.experts[expert].load_s, self.n_workers)
    }
}
