//! The GEM family's scenario tables (`GemConfig`, everything of a scenario file except the
//! common top-level keys) and their validation into a runnable `GemScenario`.

use crate::arrivals::{ArrivalSpec, ArrivalTable};
use crate::cost::gpu::GpuSpec;
use crate::cost::kernel::Timing;
use crate::cost::measured_steps::PricingRecord;
use crate::cost::profile::Profile;
use crate::cost::roofline::{RooflineParams, analytic_profile_with};
use crate::cost::shape::MoeModelShape;
use crate::gem::trace::TraceParams;
use crate::load_cache::LoadCache;
use crate::policies::mapping::MapperConfig;
pub use crate::serving::datasets::{Dataset, LengthDistribution};
pub use crate::serving::variability::FactorKind;
use crate::serving::variability::{ThroughputDistribution, VariabilitySetup, VariabilityTable};
use crate::validate::FieldError;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;

fn field(path: &str, message: impl Into<String>) -> FieldError {
    FieldError {
        path: path.to_string(),
        message: message.into(),
    }
}

/// Every family-specific table of a GEM scenario file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GemConfig {
    /// What a run computes.
    #[serde(default)]
    pub experiment: Experiment,
    pub model: ModelTable,
    #[serde(default)]
    pub cluster: ClusterTable,
    #[serde(default)]
    pub workload: WorkloadTable,
    /// When requests arrive; absent: all at t = 0 (offline, the paper's benchmark).
    #[serde(default)]
    pub arrival: Option<ArrivalTable>,
    #[serde(default)]
    pub serving: ServingTable,
    #[serde(default)]
    pub trace: TraceTable,
    #[serde(default = "default_mapper")]
    pub mapper: MapperConfig,
    #[serde(default)]
    pub scale: ScaleTable,
    #[serde(default)]
    pub profiling: ProfilingTable,
}

fn default_mapper() -> MapperConfig {
    MapperConfig::Linear
}

/// `experiment = "serving"` (default) simulates expert-parallel serving under a mapping;
/// `"variability_at_scale"` runs the Monte-Carlo gap experiment of section 6 for
/// `cluster.n_gpus` GPUs; `"profiling_cost"` computes the kernel time of building one GPU's
/// variability profile (section 5.4, `gem::profiling`). Neither serves requests: their serving
/// metrics are null.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Experiment {
    #[default]
    Serving,
    VariabilityAtScale,
    ProfilingCost,
}

/// `[model]`: one of the five models of the evaluation (or a `model_shape` preset such as the
/// live-mode `live-tiny-moe`), with an optional measured profile.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelTable {
    /// `mixtral-8x7b`, `mixtral-8x22b`, `llama-4-scout`, `hunyuan-a13b` or `qwen3-30b-a3b`.
    pub name: String,
    /// A measured profile of the model (path relative to the scenario file) used instead of
    /// the analytic roofline of `cluster.gpu`.
    #[serde(default)]
    pub profile: Option<String>,
    /// A set of measured per-operation profiles of `cluster.gpu` (`profiles/<name>/`, e.g.
    /// `"vidur/a100"`) to build the curves from instead of the analytic roofline: each
    /// operation measured, scaled or analytic as the run's `pricing` record says.
    #[serde(default)]
    pub measured: Option<String>,
    /// Keep only the model's first `n_layers` layers (as live mode runs a real shape on one
    /// device); absent: every layer of the preset.
    #[serde(default)]
    pub n_layers: Option<usize>,
}

fn d_n_gpus() -> usize {
    4
}
fn d_gpu() -> String {
    "H200".into()
}
fn d_straggler() -> f64 {
    0.12
}
fn d_draws() -> usize {
    1000
}

/// `[cluster]`: G GPUs of one kind and their speed factors (relative throughput; 1 = nominal).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterTable {
    /// GPUs of the expert-parallel group (gem.txt section 4.2: 4 H200s).
    #[serde(default = "d_n_gpus")]
    pub n_gpus: usize,
    /// GPU catalogue name (`sim::cost::gpu`), for the analytic roofline.
    #[serde(default = "d_gpu")]
    pub gpu: String,
    #[serde(default = "d_variability")]
    pub variability: VariabilitySetup,
    /// Per-GPU factors, only with `variability = "explicit"`.
    #[serde(default)]
    pub speed_factors: Option<Vec<f64>>,
    /// High variability: GPU 0 is this much slower (section 4.2: 12 %).
    #[serde(default = "d_straggler")]
    pub straggler_slowdown: f64,
    /// Moderate variability: Monte-Carlo draws (section 4.2: 1000).
    #[serde(default = "d_draws")]
    pub moderate_draws: usize,
    /// Moderate variability: seed of its draws (a property of the hardware, not of the run).
    #[serde(default)]
    pub moderate_seed: u64,
    #[serde(default)]
    pub distribution: ThroughputDistribution,
    /// Share of a GPU's clock slowdown that also reaches its memory bandwidth (0 to 1): a
    /// clock factor `c` comes with a bandwidth factor `1 - (1 - c) x bandwidth_share`.
    /// Default 0: power caps and slower bins lower the SM clock, not HBM (docs/cost-model.md,
    /// "GPU variability"); 1 is the uniform slowdown.
    #[serde(default)]
    pub bandwidth_share: f64,
    /// What a speed factor is: `"throughput"` (default; gem.txt section 4.2's definition, the
    /// share of the nominal throughput the GPU delivers on the workload, its clock solved for)
    /// or `"clock"` (the SM clock factor itself).
    #[serde(default)]
    pub factors: FactorKind,
}

fn d_variability() -> VariabilitySetup {
    VariabilitySetup::Low
}

impl Default for ClusterTable {
    fn default() -> Self {
        toml::from_str("").expect("every field has a default")
    }
}

fn d_requests() -> usize {
    4000
}

/// `[workload]`: the requests served (their arrival times: `[arrival]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadTable {
    #[serde(default)]
    pub dataset: Dataset,
    /// Requests (section 4.4: 4K); with a trace, at most this many of its rows.
    #[serde(default = "d_requests")]
    pub n_requests: usize,
    /// Overrides the dataset's prompt lengths (drawn where the arrivals carry none).
    #[serde(default)]
    pub prompt_tokens: Option<LengthDistribution>,
    /// Overrides the dataset's output lengths.
    #[serde(default)]
    pub output_tokens: Option<LengthDistribution>,
}

impl Default for WorkloadTable {
    fn default() -> Self {
        toml::from_str("").expect("every field has a default")
    }
}

fn d_seqs() -> usize {
    1024
}
fn d_batched() -> usize {
    8192
}
fn d_detail_steps() -> usize {
    25
}

/// `[serving]`: the continuous-batching scheduler. Defaults are vLLM V1's for GPUs with at
/// least 70 GiB (H100/H200) serving online: `max_num_seqs = 1024`,
/// `max_num_batched_tokens = 8192`, chunked prefill.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServingTable {
    #[serde(default = "d_seqs")]
    pub max_num_seqs: usize,
    #[serde(default = "d_batched")]
    pub max_num_batched_tokens: usize,
    /// The layer whose per-GPU expert loads the result details carry (Figure 17).
    #[serde(default)]
    pub detail_layer: usize,
    /// Unseen trace steps in that detail.
    #[serde(default = "d_detail_steps")]
    pub detail_steps: usize,
}

impl Default for ServingTable {
    fn default() -> Self {
        toml::from_str("").expect("every field has a default")
    }
}

/// `[trace]`: see [`TraceParams`].
pub type TraceTable = TraceParams;

fn d_scale_draws() -> usize {
    10_000
}

/// `[scale]`: the variability-at-scale experiment (section 6: 10,000 draws).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScaleTable {
    #[serde(default = "d_scale_draws")]
    pub draws: usize,
}

impl Default for ScaleTable {
    fn default() -> Self {
        ScaleTable {
            draws: d_scale_draws(),
        }
    }
}

pub use crate::serving::profiling::{ProfilingMethod, ProfilingTable};

pub use crate::serving::expert_trace::TraceSpec;

/// A validated GEM scenario (one sweep cell).
#[derive(Clone, Debug)]
pub struct GemScenario {
    pub experiment: Experiment,
    pub model_name: String,
    pub shape: MoeModelShape,
    pub gpu: GpuSpec,
    /// The analytic roofline profile of the model on the GPU, a measured one, or one built
    /// from measured operations (the source is recorded).
    pub profile: Arc<Profile>,
    /// With `model.measured`: how each operation was priced. The profile's non-expert curves
    /// are then one GPU's share at tensor parallelism `n_gpus` (measured at that degree), not
    /// the whole layer's.
    pub pricing: Option<Arc<PricingRecord>>,
    pub n_gpus: usize,
    pub variability: VariabilitySetup,
    /// Relative throughput of each GPU; GPU 0 is the slowest unless given explicitly.
    pub speed_factors: Vec<f64>,
    /// See [`ClusterTable::bandwidth_share`].
    pub bandwidth_share: f64,
    /// See [`ClusterTable::factors`].
    pub factors: FactorKind,
    pub distribution: ThroughputDistribution,
    pub dataset: Dataset,
    /// Requests served: `workload.n_requests`, or the trace's rows if fewer.
    pub n_requests: usize,
    pub arrival: ArrivalSpec,
    pub prompt_tokens: LengthDistribution,
    pub output_tokens: LengthDistribution,
    pub serving: ServingTable,
    pub trace: TraceSpec,
    pub mapper: MapperConfig,
    pub scale: ScaleTable,
    pub profiling: ProfilingTable,
}

impl GemConfig {
    /// Cross-field checks; relative trace paths resolve against `base_dir`, and files a sweep's
    /// cells share are loaded once through `cache`.
    pub fn validate(
        &self,
        base_dir: &Path,
        cache: &mut LoadCache,
    ) -> Result<GemScenario, FieldError> {
        let mut shape = MoeModelShape::preset(&self.model.name)
            .map_err(|e| field("model.name", e.to_string()))?;
        if let Some(n) = self.model.n_layers {
            if n == 0 || n > shape.n_layers {
                return Err(field(
                    "model.n_layers",
                    format!("{n}: must be between 1 and the preset's {}", shape.n_layers),
                ));
            }
            shape.n_layers = n;
        }
        let gpu =
            GpuSpec::by_name(&self.cluster.gpu).map_err(|e| field("cluster.gpu", e.to_string()))?;
        let c = &self.cluster;
        let n_gpus = c.n_gpus;
        if n_gpus == 0 {
            return Err(field("cluster.n_gpus", "must be at least 1, got 0"));
        }
        // The count sizes the speed factors built below: held to its ceiling first.
        cache.limits.check(&[crate::validate::limits::Demand::new(
            crate::validate::limits::Quantity::Gpus,
            n_gpus as f64,
            "cluster.n_gpus",
        )])?;
        let serving = self.experiment == Experiment::Serving;
        if serving && shape.n_experts % n_gpus != 0 {
            return Err(field(
                "cluster.n_gpus",
                format!(
                    "= {n_gpus} does not divide the {} experts per layer of {}; every GPU must host the same number of experts",
                    shape.n_experts, shape.name
                ),
            ));
        }
        if !(0.0..=1.0).contains(&c.bandwidth_share) {
            return Err(field(
                "cluster.bandwidth_share",
                format!("{} must be between 0 and 1", c.bandwidth_share),
            ));
        }
        if c.speed_factors.is_some() && c.variability != VariabilitySetup::Explicit {
            return Err(field(
                "cluster.speed_factors",
                "is only read with variability = \"explicit\"",
            ));
        }
        let setup = VariabilityTable {
            setup: c.variability,
            straggler_slowdown: c.straggler_slowdown,
            moderate_draws: c.moderate_draws,
            moderate_seed: c.moderate_seed,
            distribution: c.distribution.clone(),
        };
        let speed_factors = match c.variability {
            VariabilitySetup::Low | VariabilitySetup::High | VariabilitySetup::Moderate => {
                setup.factors(n_gpus, "cluster")?
            }
            VariabilitySetup::Explicit => {
                let Some(factors) = &c.speed_factors else {
                    return Err(field(
                        "cluster.speed_factors",
                        format!("variability = \"explicit\" needs {n_gpus} speed factors"),
                    ));
                };
                if factors.len() != n_gpus {
                    return Err(field(
                        "cluster.speed_factors",
                        format!("has {} factors for {n_gpus} GPUs", factors.len()),
                    ));
                }
                for (i, &v) in factors.iter().enumerate() {
                    crate::validate::speed_factor(&format!("cluster.speed_factors[{i}]"), v, 1e3)?;
                }
                factors.clone()
            }
        };

        let w = &self.workload;
        let (default_prompt, default_output) = w.dataset.lengths().unzip();
        let prompt_tokens = w.prompt_tokens.clone().or(default_prompt).ok_or_else(|| {
            field(
                "workload.prompt_tokens",
                "dataset = \"custom\" needs prompt_tokens = { mean, sigma, max }",
            )
        })?;
        let output_tokens = w.output_tokens.clone().or(default_output).ok_or_else(|| {
            field(
                "workload.output_tokens",
                "dataset = \"custom\" needs output_tokens = { mean, sigma, max }",
            )
        })?;
        prompt_tokens.check("workload.prompt_tokens")?;
        output_tokens.check("workload.output_tokens")?;
        if w.n_requests == 0 {
            return Err(field("workload.n_requests", "must be at least 1, got 0"));
        }
        let arrival = match &self.arrival {
            None => ArrivalSpec::Offline,
            Some(table) => table.validate(w.n_requests, base_dir, &mut cache.traces)?,
        };
        let s = &self.serving;
        if s.max_num_seqs == 0 {
            return Err(field("serving.max_num_seqs", "must be at least 1, got 0"));
        }
        if s.max_num_batched_tokens < s.max_num_seqs {
            return Err(field(
                "serving.max_num_batched_tokens",
                format!(
                    "= {} is below max_num_seqs = {}: a full decode step would not fit",
                    s.max_num_batched_tokens, s.max_num_seqs
                ),
            ));
        }
        if s.detail_layer >= shape.n_layers {
            return Err(field(
                "serving.detail_layer",
                format!(
                    "= {} but {} has {} layers",
                    s.detail_layer, shape.name, shape.n_layers
                ),
            ));
        }

        let params = &self.trace;
        let trace = TraceSpec::resolve(
            params,
            shape.n_layers,
            shape.n_experts,
            shape.top_k,
            base_dir,
        )
        .map_err(|(f, m)| field(&format!("trace.{f}"), m))?;
        if serving {
            self.mapper
                .check(shape.n_experts, n_gpus, params.observed_steps)
                .map_err(|(f, m)| field(&format!("mapper.{f}"), m))?;
        }
        if self.scale.draws == 0 {
            return Err(field("scale.draws", "must be at least 1"));
        }
        self.profiling.check("profiling")?;
        let mut pricing = None;
        let profile = Arc::new(match (&self.model.profile, &self.model.measured) {
            (Some(_), Some(_)) => {
                return Err(field(
                    "model.measured",
                    "names a second cost source beside model.profile; keep one",
                ));
            }
            // vLLM V1 replays its steps as CUDA graphs: each kernel its GPU-side floor.
            (None, None) => analytic_profile_with(
                &gpu,
                &shape,
                &RooflineParams {
                    timing: Timing::Graph,
                    ..RooflineParams::default()
                },
            ),
            (None, Some(name)) => {
                let set = crate::load_cache::measured_set("model.measured", name, base_dir, cache)?;
                crate::validate::measured_on("model.measured", &set, "cluster.gpu", &gpu)?;
                // The non-expert part is tensor-parallel over the group's GPUs.
                let built = crate::cost::measured_steps::moe(&set, &shape, n_gpus as u32);
                pricing = Some(Arc::new(built.record));
                built.profile
            }
            (Some(relative), None) => {
                let path = crate::validate::resolve_profile("model.profile", relative, base_dir)?;
                let profile =
                    Profile::load(&path).map_err(|e| field("model.profile", e.to_string()))?;
                profile
                    .check_shape(&shape)
                    .map_err(|e| field("model.profile", format!("{}: {e}", path.display())))?;
                let tp = profile.tensor_parallel as usize;
                if tp != 1 && tp != n_gpus {
                    return Err(field(
                        "model.profile",
                        format!(
                            "{}: its non-expert curves are one GPU's shard at tensor \
                             parallelism {tp}, but the scenario shards over {n_gpus} GPUs \
                             (calibrate with --tensor-parallel {n_gpus}, or 1 for the whole layer)",
                            path.display()
                        ),
                    ));
                }
                profile
            }
        });
        Ok(GemScenario {
            experiment: self.experiment,
            model_name: self.model.name.to_ascii_lowercase(),
            shape,
            gpu,
            profile,
            pricing,
            n_gpus,
            variability: c.variability,
            speed_factors,
            bandwidth_share: c.bandwidth_share,
            factors: c.factors,
            distribution: c.distribution.clone(),
            dataset: w.dataset,
            n_requests: arrival.requests(w.n_requests),
            arrival,
            prompt_tokens,
            output_tokens,
            serving: s.clone(),
            trace,
            mapper: self.mapper.clone(),
            scale: self.scale.clone(),
            profiling: self.profiling.clone(),
        })
    }
}
