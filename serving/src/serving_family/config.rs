//! The serving family's scenario tables (`ServingConfig`: `[model]`, `[replica]`, `[experts]`,
//! `[routing]`, `[workload]`, `[predictor]`, `[arrival]`, `[output]`) and their validation into
//! a runnable `ServingScenario`. `[replica]` is one table (every replica alike) or an array of
//! `[[replica]]` tables, one per replica group (a heterogeneous cluster: each group its model,
//! GPUs and count). Combinations that cannot work are refused naming both keys. `[adapters]` (ExpertWeave's adapters on an MLA MoE model, one
//! replica group only) is read by `super::adapters`.

use super::adapters::{AdapterSpec, AdaptersTable};
use super::curve_pricing::CurvePricing;
use super::experiment::{Experiment, ExperimentTable};
use super::load::ModelLoad;
use super::static_pricing::{ProfileSource, StaticCost};
use crate::arrivals::{ArrivalSpec, ArrivalTable};
use crate::cost::gpu::{GpuSpec, LinkSpec};
use crate::cost::host::HostOverhead;
use crate::cost::kernel::Timing;
use crate::cost::measured_steps::MeasuredDenseStep;
use crate::cost::moe_layer::SpeedFactors;
use crate::cost::roofline::TensorParallel;
use crate::cost::shape::{DenseModelShape, MlaMoeShape, MoeModelShape};
use crate::distributions::{TokenCount, TokenLength};
use crate::load_cache::{LoadCache, measured_set};
use crate::policies::batch::BatchSelectorConfig;
use crate::policies::mapping::MapperConfig;
use crate::serving::CostSource;
use crate::serving::datasets::{Dataset, LengthDistribution};
use crate::serving::expert_trace::{TraceParams, TraceSpec};
use crate::serving::predictors::{PredictorConfig, SemanticRouterConfig};
use crate::serving::variability::{FactorKind, VariabilityTable};
use crate::serving::{Preemption, QueuePolicyConfig, RouterConfig};
use crate::time::SimTime;
use crate::validate::{FieldError, duration, field_error, measured_on, non_negative, positive};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;

/// Every family-specific table of a serving scenario file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServingConfig {
    /// The model of every replica group that does not name its own (`replica.model`).
    #[serde(default)]
    pub model: Option<ModelTable>,
    #[serde(default)]
    pub replica: ReplicaTables,
    /// How an MoE model's tokens reach its experts; only for a model with experts.
    #[serde(default)]
    pub experts: Option<ExpertsTable>,
    /// The router across replicas.
    #[serde(default)]
    pub routing: RoutingTable,
    pub workload: WorkloadTable,
    /// Chimera's length predictor (`serving::predictors::PredictorConfig`): how each request's
    /// predicted output tokens, which the length-aware queue policies and Chimera's activity
    /// monitor read, are drawn from its true output length (default: Chimera's, noisy 0.6).
    #[serde(default = "crate::serving::predictors::default_predictor")]
    pub predictor: PredictorConfig,
    pub arrival: ArrivalTable,
    #[serde(default)]
    pub output: OutputTable,
    /// ExpertWeave adapters served on the replicas (an MLA MoE model only).
    #[serde(default)]
    pub adapters: Option<AdaptersTable>,
    /// What a run computes instead of serving (`super::experiment`: GEM's variability at
    /// scale and profiling cost); absent: the run serves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experiment: Option<ExperimentTable>,
    /// MOSAIC's expert placement: workers running sessions one after another
    /// (`super::placement`); absent: every replica serves from time zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<super::placement::PlacementTable>,
}

/// `[model]`: a preset of the cost model's shape catalogue, dense or MoE.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelTable {
    pub name: String,
    /// An MoE preset's routing shape overridden (the first `n_layers` layers, `n_experts`
    /// routed experts per layer, `top_k` per token): a scaled-down model for live runs, or a
    /// slice of one on a single GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n_layers: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n_experts: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<usize>,
}

impl ModelTable {
    /// The served model, with the routing-shape overrides applied (an MoE preset only).
    fn served(&self) -> Result<ServedModel, FieldError> {
        let mut model = served_model("model.name", &self.name)?;
        let overrides = [
            ("model.n_layers", self.n_layers),
            ("model.n_experts", self.n_experts),
            ("model.top_k", self.top_k),
        ];
        let Some((first, _)) = overrides.iter().find(|(_, v)| v.is_some()) else {
            return Ok(model);
        };
        if let ServedModel::Mla(shape) = &mut model {
            // An MLA model keeps its first `n_layers` layers (its dense ones and at least one MoE
            // layer); its routing shape is the adapters' (their Table 1 counts), not overridden.
            if let Some((key, _)) = overrides[1..].iter().find(|(_, v)| v.is_some()) {
                return Err(field_error(
                    key,
                    format!(
                        "not for {}, an MLA model: its adapters fine-tune its experts as given \
                         (model.n_layers cuts its layers)",
                        self.name
                    ),
                ));
            }
            let layers = self.n_layers.expect("the only override left") as u64;
            if layers <= shape.first_k_dense || layers > shape.n_layers {
                return Err(field_error(
                    "model.n_layers",
                    format!(
                        "{layers}: must keep at least one MoE layer after the {} dense one(s) \
                         and at most the preset's {} layers",
                        shape.first_k_dense, shape.n_layers
                    ),
                ));
            }
            if layers < shape.n_layers {
                shape.name = format!(
                    "{} (first {layers} of {} layers)",
                    shape.name, shape.n_layers
                );
                shape.n_layers = layers;
            }
            return Ok(model);
        }
        let ServedModel::Moe(shape) = &mut model else {
            return Err(field_error(
                first,
                format!(
                    "overrides an MoE preset's routing shape; {} is not one",
                    self.name
                ),
            ));
        };
        if let Some(n) = self.n_layers {
            shape.n_layers = crate::validate::at_least_one("model.n_layers", n)?;
        }
        if let Some(n) = self.n_experts {
            shape.n_experts = crate::validate::at_least_one("model.n_experts", n)?;
        }
        if let Some(k) = self.top_k {
            shape.top_k = crate::validate::at_least_one("model.top_k", k)?;
        }
        if shape.top_k > shape.n_experts {
            return Err(field_error(
                if self.top_k.is_some() {
                    "model.top_k"
                } else {
                    "model.n_experts"
                },
                format!(
                    "top_k = {} exceeds the number of routed experts ({})",
                    shape.top_k, shape.n_experts
                ),
            ));
        }
        Ok(model)
    }
}

fn d_gpu() -> String {
    "H100-SXM".into()
}
fn d_one() -> usize {
    1
}
fn d_interconnect() -> Interconnect {
    Interconnect::Nvlink4
}
fn d_memory_utilization() -> f64 {
    0.9
}
fn d_max_num_seqs() -> usize {
    256
}
fn d_watermark() -> f64 {
    0.01
}
fn d_queue() -> QueuePolicyConfig {
    QueuePolicyConfig::Fcfs
}

/// `[replica]` (every replica alike) or `[[replica]]` (one table per replica group).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ReplicaTables {
    One(Box<ReplicaTable>),
    Groups(Vec<ReplicaTable>),
}

impl Default for ReplicaTables {
    fn default() -> Self {
        ReplicaTables::One(Box::default())
    }
}

/// A table is one group, an array of tables the groups; the errors inside either keep their
/// field paths (an untagged enum would lose them).
impl<'de> Deserialize<'de> for ReplicaTables {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Tables;
        impl<'de> serde::de::Visitor<'de> for Tables {
            type Value = ReplicaTables;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a [replica] table or an array of [[replica]] tables")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Self::Value, A::Error> {
                ReplicaTable::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(|table| ReplicaTables::One(Box::new(table)))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                seq: A,
            ) -> Result<Self::Value, A::Error> {
                Vec::<ReplicaTable>::deserialize(serde::de::value::SeqAccessDeserializer::new(seq))
                    .map(ReplicaTables::Groups)
            }
        }
        deserializer.deserialize_any(Tables)
    }
}

/// `[replica]`: one replica group's model, GPUs, parallelism, memory and scheduler (every
/// replica of the group alike).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicaTable {
    /// The group's model (a preset name, as `model.name`); default `[model]`'s.
    #[serde(default)]
    pub model: Option<String>,
    /// The cluster's models from this one table (a `[replica]` table only, without `model` or
    /// `count`): one group per distinct model, in the order first named, each this table with
    /// its `model`, as many replicas as the list names it (`models_groups`). One key, so a
    /// sweep can range over model combinations and a claim can key on one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub models: Option<Vec<String>>,
    /// Replicas of the group.
    #[serde(default = "d_one")]
    pub count: usize,
    /// GPU catalogue name (`expertsim_scenario::cost::gpu`).
    #[serde(default = "d_gpu")]
    pub gpu: String,
    /// GPUs per replica (default: the larger of the two parallel degrees).
    #[serde(default)]
    pub gpus: Option<usize>,
    /// Tensor-parallel degree of the dense part (a dense model's whole model): it must divide
    /// `gpus`; an MoE replica runs `gpus / tensor_parallel` data-parallel copies of it.
    #[serde(default = "d_one")]
    pub tensor_parallel: usize,
    /// Expert-parallel degree (MoE only): the routed experts spread over this many GPUs, the
    /// group repeated `gpus / expert_parallel` times.
    #[serde(default = "d_one")]
    pub expert_parallel: usize,
    /// Each GPU's speed relative to its datasheet (1 = nominal), one per GPU; default all 1.
    #[serde(default)]
    pub speed_factors: Option<Vec<f64>>,
    /// What `speed_factors` (or `variability`'s) are: `clock` (default; the SM clock factor) or
    /// `throughput` (the share of the nominal throughput the GPU delivers on the workload's
    /// mean MoE layer, its clock solved per seed on `experts.trace`, as the gem family's
    /// `cluster.factors = "throughput"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speed_factors_kind: Option<FactorKind>,
    /// A variability setup standing for `speed_factors` (`serving::variability`: low, high,
    /// moderate; gem.txt section 4.2), with its parameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variability: Option<VariabilityTable>,
    /// Share of a GPU's slowdown that also reaches its memory bandwidth (0: a clock effect
    /// only, 1: uniformly slower; `cost::moe_layer::SpeedFactors::split`).
    #[serde(default)]
    pub bandwidth_share: f64,
    /// The link of the tensor-parallel all-reduces and the expert-parallel all-to-all.
    #[serde(default = "d_interconnect")]
    pub interconnect: Interconnect,
    /// Each GPU's memory in GiB where the deployment's differs from the catalogue's (the
    /// catalogue counts decimal GB; ExpertWeave's NPUs have 64 GiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory_gib: Option<f64>,
    /// vLLM `gpu_memory_utilization`: the share of each GPU's memory for weights and KV cache.
    #[serde(default = "d_memory_utilization")]
    pub gpu_memory_utilization: f64,
    /// Host time per step (scheduling, input preparation, sampling, detokenization), ms, flat
    /// whatever the batch; default: the scheduler kind's measured term (`cost::host`,
    /// docs/cost-model.md "The host's time per step").
    #[serde(default)]
    pub step_overhead_ms: Option<f64>,
    /// How the step's kernels are launched: `graph` (default: replayed in a CUDA graph, each
    /// kernel its GPU-side time) or `eager` (launched one by one from the host, each kernel
    /// the longer of the host's launch and its GPU-side time; the host time per step kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<Timing>,
    /// Whose measured host time per step the replica pays (`vllm` or `sarathi-serve`); default:
    /// the scheduler kind's own engine (`scheduler::host_overhead`).
    #[serde(default)]
    pub host_time: Option<HostTime>,
    /// A set of measured per-operation profiles of `gpu` (`profiles/<name>/`, e.g.
    /// `vidur/h100`) the group's steps are priced from (a dense model only), each operation
    /// measured, scaled or analytic as the run's `pricing` record says.
    #[serde(default)]
    pub measured: Option<String>,
    /// The replica scheduler.
    #[serde(default)]
    pub scheduler: SchedulerTable,
    /// vLLM `max_num_seqs`.
    #[serde(default = "d_max_num_seqs")]
    pub max_num_seqs: usize,
    /// Tokens per KV block (vllm and sarathi; 16 by default, vLLM's); for orca, which does not
    /// page, the KV pool's allocation block (1 by default).
    #[serde(default)]
    pub block_size: Option<u32>,
    /// vLLM `max_model_len`: the longest sequence (prompt + output) a replica takes; a request
    /// whose prompt leaves no room for an output token is refused at admission, an output that
    /// would pass it stops there. Default (and at most): what the replica's KV cache holds.
    #[serde(default)]
    pub max_model_len: Option<u32>,
    /// Share of the blocks an admission leaves free (vllm and sarathi; vLLM's 1 %).
    #[serde(default = "d_watermark")]
    pub watermark: f64,
    /// The queue policy ordering each replica's waiting requests (`strategies::queue`: fcfs,
    /// sjf, stjf, mlfq, ltr). One policy serves the whole cluster: a `[[replica]]` group that
    /// names one must name the same as every other.
    #[serde(default = "d_queue")]
    pub queue: QueuePolicyConfig,
    /// The model's standalone task score, in % (Chimera's `s_m`): the capability Chimera's
    /// semantic router compares with each request's difficulty (`routing.kind = "chimera"`).
    #[serde(default)]
    pub task_score_pct: Option<f64>,
    /// The CAPS batch selector forming each batch of a `static` replica (fcfs unless given);
    /// refused on the continuous kinds.
    #[serde(default)]
    pub batch_former: Option<BatchSelectorConfig>,
    /// The model's load onto the replica's GPUs before it serves (`super::load`); none by
    /// default (the model is resident).
    #[serde(default)]
    pub load: Option<LoadTable>,
    /// vLLM V1's automatic prefix caching (`serving::prefix`): a prompt's leading full blocks
    /// that an earlier request on the replica computed and that are still resident are not
    /// prefilled again (which prompts share tokens: `workload.shared_prefix_tokens`); `vllm`
    /// and `sarathi` only. Off by default.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub prefix_caching: bool,
}

/// How a replica's model load is priced (`replica.load`, `super::load::ModelLoad`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum LoadTable {
    /// Each GPU's weights over its host link (`cost::gpu::LinkSpec::host_of`).
    HostLink,
    /// Each GPU's weights over an effective load path of `gbps` GB/s (`cost::load::LoadPath`).
    Path { gbps: f64 },
    /// A given load time, seconds.
    Fixed { seconds: f64 },
}

impl Default for ReplicaTable {
    fn default() -> Self {
        toml::from_str("").expect("every field has a default")
    }
}

/// The groups `replica.models` names on `template` (the `[replica]` table carrying it): one per
/// distinct model in the order first named, its `count` the times the list names it.
pub fn models_groups(template: &ReplicaTable) -> Result<Vec<ReplicaTable>, FieldError> {
    let Some(models) = &template.models else {
        return Ok(vec![template.clone()]);
    };
    if models.is_empty() {
        return Err(field_error("replica.models", "needs at least one model"));
    }
    if template.model.is_some() {
        return Err(field_error(
            "replica.model",
            "not beside replica.models, which names every group's model",
        ));
    }
    if template.count != 1 {
        return Err(field_error(
            "replica.count",
            "not beside replica.models: name a model as many times as it has replicas",
        ));
    }
    let mut groups: Vec<ReplicaTable> = Vec::new();
    for name in models {
        match groups.iter_mut().find(|g| g.model.as_ref() == Some(name)) {
            Some(group) => group.count += 1,
            None => groups.push(ReplicaTable {
                model: Some(name.clone()),
                models: None,
                ..template.clone()
            }),
        }
    }
    Ok(groups)
}

/// A measured host time per step to pay whatever the scheduler kind (`replica.host_time`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostTime {
    /// vLLM 0.5.4's engine loop (`HostOverhead::vllm_v0`).
    Vllm,
    /// Sarathi-Serve's engine loop as Vidur profiled it (`HostOverhead::sarathi_serve`).
    SarathiServe,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Interconnect {
    /// NVLink 4 through NVSwitch (`cost::gpu::LinkSpec::NVLINK4`).
    Nvlink4,
    /// PCIe 4.0 x16 (`cost::gpu::LinkSpec::PCIE4_X16`).
    Pcie4X16,
}

impl Interconnect {
    pub fn link(self) -> LinkSpec {
        match self {
            Interconnect::Nvlink4 => LinkSpec::NVLINK4,
            Interconnect::Pcie4X16 => LinkSpec::PCIE4_X16,
        }
    }
}

/// The largest KV block a replica may page in: vLLM's block sizes are 8 to 32 tokens and
/// Ascend's 128; a block past the cache would leave no block at all.
const MAX_BLOCK_SIZE: u32 = 1024;

fn d_batched_tokens() -> u64 {
    4096
}
fn d_chunk_size() -> u64 {
    512
}

/// `[replica] scheduler`: the replica scheduler as a named kind (docs/serving-family.md says
/// what each sets on `serving::Replica` and which system it follows).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum SchedulerTable {
    /// vLLM v0's default scheduler: chunked prefill off, prefill-first steps, paged KV cache
    /// with recompute preemption (or swap, `preemption`); `max_num_batched_tokens` (default 4096: vLLM's
    /// `max(max_model_len, 2048)` at Llama-2's 4096-token context) bounds a prefill step.
    Vllm {
        #[serde(default = "d_batched_tokens")]
        max_num_batched_tokens: u64,
        /// Left out of a written scenario when the default.
        #[serde(default, skip_serializing_if = "Preemption::is_recompute")]
        preemption: Preemption,
        /// An MoE model: a calibration profile JSON (relative to the scenario file) whose
        /// curves price the dense part and head (`serving_family::curve_pricing`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        profile: Option<String>,
    },
    /// Sarathi-Serve: chunked prefill within a `chunk_size` token budget per step, decodes
    /// first (stall-free batching), paged KV cache with recompute preemption (or swap,
    /// `preemption`).
    ///
    /// With `kv = "unbounded"` it is vLLM V1's scheduler as GEM runs it (the gem family's
    /// replica): the same decode-first, one-budget schedule with no KV limit (one-token blocks,
    /// unbounded, no watermark, a request admitted on its prompt, never preempted).
    Sarathi {
        #[serde(default = "d_chunk_size")]
        chunk_size: u64,
        /// Left out of a written scenario when the default.
        #[serde(default, skip_serializing_if = "Preemption::is_recompute")]
        preemption: Preemption,
        /// The KV cache's limit: `paged` (default) or `unbounded`.
        #[serde(default, skip_serializing_if = "KvLimit::is_paged")]
        kv: KvLimit,
        /// An MoE model: a calibration profile JSON (relative to the scenario file) whose
        /// curves price the dense part and head (`serving_family::curve_pricing`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        profile: Option<String>,
    },
    /// Orca: iteration-level batching of whole prompts with running decodes, no paging: each
    /// request's prompt + output reserved at admission; no token budget unless
    /// `max_num_batched_tokens` gives one (ExpertWeave's vLLM-Ascend instance: 8192).
    Orca {
        #[serde(default)]
        max_num_batched_tokens: Option<u64>,
        /// An MoE model: a calibration profile JSON (relative to the scenario file) whose
        /// curves price the dense part and head (`serving_family::curve_pricing`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        profile: Option<String>,
    },
    /// Static batches (CAPS, FasterTransformer-style serving): when the replica is empty and
    /// `min_batch_trigger` requests wait (or a tick of the `scheduling_interval_ms` grid finds
    /// any), `replica.batch_former` picks at most `max_num_seqs` of the `window_size` oldest
    /// (the oldest first when `seed_with_oldest`), and the batch runs to its longest output.
    /// The selector sees each candidate's expected load per GPU or per expert (`loads`).
    Static {
        #[serde(default = "d_window_size")]
        window_size: usize,
        #[serde(default = "d_min_batch_trigger")]
        min_batch_trigger: usize,
        #[serde(default = "d_scheduling_interval_ms")]
        scheduling_interval_ms: f64,
        #[serde(default = "d_true")]
        seed_with_oldest: bool,
        #[serde(default)]
        loads: StaticLoads,
        /// How a batch is priced (`StaticPricing`; left out of a written scenario when the
        /// default).
        #[serde(default, skip_serializing_if = "StaticPricing::is_passes")]
        pricing: StaticPricing,
        /// `pricing = "cv"` only: the CV sensitivity; derived from the profile when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sensitivity: Option<f64>,
        /// `pricing = "constant"`: every batch's time; `"exponential"`: its mean, ms.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        service_ms: Option<f64>,
        /// `expected_routing`, `cv`, `straggler`: a calibration profile JSON (relative to the
        /// scenario file) the model's curves come from instead of the GPU's analytic profile.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        profile: Option<String>,
        /// The names of the replica's own random streams (`StaticStreams`; left out of a
        /// written scenario when the default).
        #[serde(default, skip_serializing_if = "StaticStreams::is_per_replica")]
        streams: StaticStreams,
    },
}

/// How a `static` replica prices a batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StaticPricing {
    /// Pass by pass on whole routed tokens through the replica's step cost
    /// (`ReplicaStepCost::price_static`).
    #[default]
    Passes,
    /// From the batch's expected routing (`serving_family::static_pricing`, CAPS's `grouped`
    /// execution model): the prefill's summed per-expert load vectors and each decode pass's
    /// load / prompt tokens, each layer one grouped GEMM through the one MoE entry point
    /// (`cost::moe_layer`) on the GPU's analytic profile. Needs `loads = "experts"`, an MoE
    /// model and one GPU per replica.
    ExpectedRouting,
    /// caps.txt's own model on the same expected routing (`serving_family::execution::CvModel`):
    /// base time x (1 + CV(prefill load) x `sensitivity`), the sensitivity derived from the
    /// profile unless given. Same needs as `expected_routing`.
    Cv,
    /// Per layer the most loaded expert on the expert cost curve
    /// (`serving_family::execution::StragglerModel`). Same needs as `expected_routing`.
    Straggler,
    /// Every batch takes `service_ms` (queueing-theory reference: M/D/1).
    Constant,
    /// Batch times exponential with mean `service_ms` (queueing-theory reference: M/M/1).
    Exponential,
}

impl StaticPricing {
    fn is_passes(&self) -> bool {
        *self == StaticPricing::Passes
    }

    /// The pricings from the batch's expected routing (they need per-expert loads).
    pub fn reads_expected_routing(self) -> bool {
        matches!(
            self,
            StaticPricing::ExpectedRouting | StaticPricing::Cv | StaticPricing::Straggler
        )
    }

    /// The name a scenario gives it.
    pub fn name(self) -> &'static str {
        match self {
            StaticPricing::Passes => "passes",
            StaticPricing::ExpectedRouting => "expected_routing",
            StaticPricing::Cv => "cv",
            StaticPricing::Straggler => "straggler",
            StaticPricing::Constant => "constant",
            StaticPricing::Exponential => "exponential",
        }
    }
}

/// The names of a `static` replica's own random streams: its batch selector's, its dry-run's
/// prediction noise and its exponential service times.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StaticStreams {
    /// `selector_<r>`, `prediction_<r>`, `service_<r>` (replica `r`).
    #[default]
    PerReplica,
    /// `selector`, `prediction`, `service`: the caps family's names, so that a selector that
    /// draws (random, power-of-d) draws what it draws there. One replica only.
    Shared,
}

impl StaticStreams {
    fn is_per_replica(&self) -> bool {
        *self == StaticStreams::PerReplica
    }

    /// The name of stream `name` of replica `r`.
    pub fn name(self, name: &str, r: usize) -> String {
        match self {
            StaticStreams::PerReplica => format!("{name}_{r}"),
            StaticStreams::Shared => name.to_string(),
        }
    }
}

/// What a `static` replica's router dry-run predicts per candidate (`serving_family::batch_former`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StaticLoads {
    /// Per layer and GPU: the prompt's expected tokens on each GPU of the layout.
    #[default]
    Gpus,
    /// Per layer and expert: the prompt's expected tokens at each expert (CAPS's load vector,
    /// whatever the layout).
    Experts,
}

fn d_window_size() -> usize {
    32
}
fn d_min_batch_trigger() -> usize {
    16
}
fn d_scheduling_interval_ms() -> f64 {
    100.0
}
fn d_true() -> bool {
    true
}

impl Default for SchedulerTable {
    fn default() -> Self {
        SchedulerTable::Vllm {
            max_num_batched_tokens: d_batched_tokens(),
            preemption: Preemption::Recompute,
            profile: None,
        }
    }
}

impl SchedulerTable {
    pub fn kind(&self) -> &'static str {
        match self {
            SchedulerTable::Vllm { .. } => "vllm",
            SchedulerTable::Sarathi { .. } => "sarathi",
            SchedulerTable::Orca { .. } => "orca",
            SchedulerTable::Static { .. } => "static",
        }
    }

    /// A continuous kind's `profile` (a static replica's is its pricing's).
    pub fn continuous_profile(&self) -> Option<&str> {
        match self {
            SchedulerTable::Vllm { profile, .. }
            | SchedulerTable::Sarathi { profile, .. }
            | SchedulerTable::Orca { profile, .. } => profile.as_deref(),
            SchedulerTable::Static { .. } => None,
        }
    }
}

/// `[experts]`: how an MoE step's tokens reach the experts and the experts the GPUs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpertsTable {
    #[serde(default)]
    pub routing: ExpertRoutingTable,
    /// The per-layer expert-to-GPU mapping of each expert-parallel group (`policies::mapping::MapperConfig`:
    /// linear, round_robin, eplb, gem; `serving_family::mapping`).
    #[serde(default)]
    pub mapping: Option<MapperConfig>,
    /// An expert-utilization trace (gem's `[trace]` table: the synthetic generator's
    /// parameters or a recorded file's `path`): each step routes by the trace's next unseen
    /// step, and a mapper's window is the prefix of its observed steps
    /// (`serving::expert_trace`; docs/serving-family.md, "Expert traces").
    #[serde(default)]
    pub trace: Option<TraceParams>,
    /// The mapper's random streams (`MappingStreams`).
    #[serde(default)]
    pub streams: MappingStreams,
}

/// Where layer `l`'s mapper draws from (`experts.streams`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MappingStreams {
    /// `expert_mapping/replica<r>/copy<c>/layer<l>`: each replica and EP copy its own.
    #[default]
    PerReplica,
    /// `gem/mapper/layer<l>`: the gem family's names, so that a mapper that draws (GEM's
    /// restarts and noise) draws what it draws there. One MoE replica of one EP copy only.
    Shared,
}

/// The routing model of an MoE step (docs/serving-family.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ExpertRoutingTable {
    /// Every expert of every layer equally likely.
    #[default]
    Uniform,
    /// Expert popularity Zipf with `exponent`, the ranking a random permutation per layer and
    /// per topic (topic affinities: requests of one topic favour the same experts).
    Zipf { exponent: f64 },
    /// CAPS's request model (`serving::topic_affinity`): per topic and layer a
    /// Dirichlet(`concentration`) distribution over the experts, each request's own topic mixed
    /// with a secondary one drawn per request (weight `1 - purity`); a static replica's
    /// `loads = "experts"` dry-run sees the expected `min(n, n x top_k x p)` per (layer,
    /// expert), times `1 + prediction_noise x z` when noisy. Continuous batching routes each
    /// step's tokens by their own topic's distribution (capped at `1 / top_k`).
    Affinity {
        concentration: f64,
        purity: f64,
        #[serde(default)]
        prediction_noise: f64,
    },
}

/// `replica.scheduler.kv` (sarathi): whether the KV cache limits the schedule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KvLimit {
    /// The paged cache sized from memory (`replica.gpu_memory_utilization`), vLLM's watermark
    /// and preemption.
    #[default]
    Paged,
    /// No KV limit (vLLM V1 as the GEM paper's runs treat it: the cache never binds).
    Unbounded,
}

impl KvLimit {
    fn is_paged(&self) -> bool {
        *self == KvLimit::Paged
    }
}

/// `[routing]`: which replica a request goes to.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum RoutingTable {
    /// Replicas in turn.
    #[default]
    RoundRobin,
    /// The replica with the fewest requests waiting or running.
    LeastOutstanding,
    /// vLLM's data-parallel balancer: lowest `waiting_weight x waiting + running_weight x
    /// running` (defaults 4 and 1).
    LeastLoaded {
        #[serde(default)]
        waiting_weight: Option<f64>,
        #[serde(default)]
        running_weight: Option<f64>,
    },
    /// Chimera's dispatcher (`strategies::routing::chimera`, Algorithm 1): the most confident
    /// replica within `(1 + slack)` of the fastest estimated delay, leaving the fastest only for
    /// a confidence gain of at least `margin`; the confidences from `semantic_router`.
    Chimera {
        slack: f64,
        #[serde(default)]
        margin: Option<f64>,
        #[serde(default)]
        semantic_router: Option<SemanticRouterConfig>,
    },
}

fn d_topics() -> u32 {
    1
}

/// `[workload]`: how many requests and how long their prompts and outputs are.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadTable {
    /// The most requests the run serves; may be left out beside `horizon_s` (unbounded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n_requests: Option<usize>,
    /// Requests arriving at or after this many seconds are not served (the run lasts until
    /// every earlier one finishes), as the expertweave family's runs end their arrivals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub horizon_s: Option<f64>,
    /// Topics the arrival process draws (bursty traffic concentrates on one); with Zipf expert
    /// routing each topic favours its own experts.
    #[serde(default = "d_topics")]
    pub n_topics: u32,
    /// Default: `dataset`'s prompt lengths (or, with `calls`, each class's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<LengthTable>,
    /// Default: `dataset`'s output lengths.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<LengthTable>,
    /// A length preset by mean (`serving::datasets`: `sharegpt`, `codecontests`, GEM's
    /// section 4.4) for whichever of `prompt_tokens` and `output_tokens` is not given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<Dataset>,
    /// Draw each request's prompt and output lengths, in that order, from one stream
    /// (`tokens`, as the caps family draws them) instead of one stream each.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub one_token_stream: bool,
    /// Calls addressed to one replica group's model each (`[[workload.calls]]`, MOSAIC's
    /// agent calls): the requests in arrival order, class by class in file order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<CallsTable>,
    /// Whose stream names the arrivals and lengths draw from: `own` (default: `arrivals`,
    /// `prompt_tokens` / `output_tokens` or `tokens`), `gem` (`gem/arrivals`, and prompt
    /// then output from one `gem/lengths` stream, as the gem family draws them) or
    /// `expertweave` (`expertweave/arrivals` and `expertweave/lengths`, likewise).
    #[serde(default, skip_serializing_if = "WorkloadStreams::is_own")]
    pub streams: WorkloadStreams,
    /// Tokens every request's prompt begins with, the same for all (a shared system prompt, as
    /// Chimera's agents' role prompts): what `replica.prefix_caching` finds cached. A prompt
    /// shorter than it is that prefix alone. 0 (default): every prompt is its own.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub shared_prefix_tokens: u32,
    /// Each arrival a multi-stage agent workflow (`[workload.workflow]`, Chimera's), its
    /// stages' prompts and outputs drawn by the dataset's workflow model
    /// (`serving_family::workflows`) instead of `prompt_tokens` / `output_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<WorkflowTable>,
    /// Each arrival a benchmark question whose three calls go to its experts' groups, then
    /// (gated) one to the aggregator's (`[workload.questions]`, MOSAIC's;
    /// `serving_family::questions`) instead of `prompt_tokens` / `output_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub questions: Option<super::questions::QuestionsTable>,
}

/// `[workload.workflow]`: every arrival is a workflow of agent stages.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkflowTable {
    /// The task suite (`apps`, `math`): the stage mix, user prompts, each model's output
    /// lengths and standalone task score (`serving::agent_workflows`).
    pub dataset: crate::serving::agent_workflows::Dataset,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One class of calls addressed to a model (`[[workload.calls]]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallsTable {
    /// The model the calls are addressed to: one replica group's.
    pub model: String,
    pub n_requests: usize,
    pub prompt_tokens: LengthTable,
    pub output_tokens: LengthTable,
}

/// A validated class of addressed calls: the replicas it may be routed to (its group's, a
/// contiguous range: replicas are numbered group by group), how many, how long.
#[derive(Clone, Debug, PartialEq)]
pub struct CallClass {
    pub replicas: std::ops::Range<usize>,
    pub n_requests: usize,
    pub prompt_tokens: LengthSpec,
    pub output_tokens: LengthSpec,
}

/// `workload.streams`: the random streams a request's arrival and lengths are drawn from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkloadStreams {
    #[default]
    Own,
    Gem,
    Expertweave,
}

impl WorkloadStreams {
    fn is_own(&self) -> bool {
        *self == WorkloadStreams::Own
    }

    /// The family whose stream names these are (`gem/arrivals`, ...); none for `own`.
    pub fn family(self) -> Option<&'static str> {
        match self {
            WorkloadStreams::Own => None,
            WorkloadStreams::Gem => Some("gem"),
            WorkloadStreams::Expertweave => Some("expertweave"),
        }
    }
}

/// A length distribution (`distributions::TokenLength`), or the replayed trace's lengths.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum LengthTable {
    Fixed {
        value: u32,
    },
    Uniform {
        low: u32,
        high: u32,
    },
    /// A continuous uniform on `mean x [1 - spread, 1 + spread]`, rounded, at least 1
    /// (ExpertWeave's request lengths).
    RoundedUniform {
        mean: f64,
        spread: f64,
    },
    Zipf {
        min: u32,
        max: u32,
        exponent: f64,
    },
    /// Log-normal with the given `mean` or `median` (one of them) and log-space `sigma`,
    /// rounded and clamped to `[1, max]`.
    LogNormal {
        #[serde(default)]
        mean: Option<f64>,
        #[serde(default)]
        median: Option<f64>,
        sigma: f64,
        max: u32,
    },
    /// The lengths of the replayed trace (`arrival.pattern = "trace"`).
    Trace,
}

fn d_kv_interval_ms() -> f64 {
    100.0
}

/// `[output]`: what a run writes besides `results.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputTable {
    /// One CSV row per finished request (as `--per-request-csv`).
    #[serde(default)]
    pub per_request_csv: bool,
    /// A Chrome trace-event file of every replica's steps (as `--trace-events`).
    #[serde(default)]
    pub trace_events: bool,
    /// Grid of the KV-use series in the details, ms (0: none).
    #[serde(default = "d_kv_interval_ms")]
    pub kv_sample_interval_ms: f64,
    /// The run's timeline in the details (`details.timeline`, the `timeline` figure).
    #[serde(default)]
    pub timeline: bool,
    /// Each GPU's planning curve in a traced MoE group's expert detail
    /// (`details.deployment[].experts.staircase`, the `gem_staircase` figure).
    #[serde(default)]
    pub staircase: bool,
    /// Each group's decode step against its batch in the details (`details.decode_curves`, the
    /// `decode_curve` figure).
    #[serde(default)]
    pub decode_curves: bool,
}

impl Default for OutputTable {
    fn default() -> Self {
        toml::from_str("").expect("every field has a default")
    }
}

/// The model a replica serves.
#[derive(Clone, Debug, PartialEq)]
pub enum ServedModel {
    Dense(DenseModelShape),
    Moe(MoeModelShape),
    /// An MoE model with multi-head latent attention (DeepSeek-V2's; ExpertWeave's base).
    Mla(MlaMoeShape),
}

impl ServedModel {
    pub fn name(&self) -> &str {
        match self {
            ServedModel::Dense(s) => &s.name,
            ServedModel::Moe(s) => &s.name,
            ServedModel::Mla(s) => &s.name,
        }
    }

    /// The routed-expert geometry of an MoE model (an MLA model's MoE layers), `None` for a
    /// dense one.
    pub fn experts(&self) -> Option<MoeModelShape> {
        match self {
            ServedModel::Dense(_) => None,
            ServedModel::Moe(s) => Some(s.clone()),
            ServedModel::Mla(s) => Some(s.moe_geometry()),
        }
    }
}

/// A validated length: a sampler, or the trace's own lengths.
#[derive(Clone, Debug, PartialEq)]
pub enum LengthSpec {
    Distribution(TokenLength),
    Trace,
}

/// The validated replica.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaSpec {
    pub count: usize,
    pub gpu: GpuSpec,
    pub gpus: usize,
    pub tensor_parallel: usize,
    pub expert_parallel: usize,
    /// Each GPU's speed factor as given (or drawn by `replica.variability`), and its compute
    /// and bandwidth factors (for throughput factors, solved per seed: `with_seed_speeds`).
    pub speed_factors: Vec<f64>,
    pub speeds: Vec<SpeedFactors>,
    /// What `speed_factors` are (`replica.speed_factors_kind`).
    pub speed_factors_kind: FactorKind,
    pub bandwidth_share: f64,
    pub link: LinkSpec,
    pub gpu_memory_utilization: f64,
    /// The host's time per step (`replica.step_overhead_ms`, or the scheduler kind's).
    pub host: HostOverhead,
    /// How the step's kernels are launched (`replica.timing`).
    pub timing: Timing,
    /// With `replica.measured`, the dense step priced from that set's operations.
    pub measured: Option<Arc<MeasuredDenseStep>>,
    /// A continuous MoE replica priced from a profile's curves (`replica.scheduler.profile`
    /// or `replica.measured`), built once per cell.
    pub curves: Option<Arc<CurvePricing>>,
    /// A dense replica priced from a measured dense-decode profile
    /// (`replica.scheduler.profile` on a dense model), built once per cell.
    pub dense_profile: Option<Arc<super::dense_profile::DenseProfile>>,
    pub scheduler: SchedulerTable,
    pub max_num_seqs: usize,
    /// Tokens per KV block of the replica's cache (1 for orca, which does not page).
    pub block_size: u32,
    /// Tokens per block the KV pool is allocated in: `block_size`, or for orca the
    /// `replica.block_size` given (default 1): its capacity is whole blocks, each request still
    /// reserving exactly its tokens.
    pub kv_pool_block: u32,
    /// The longest sequence a replica takes (`replica.max_model_len`); the KV cache caps it too.
    pub max_model_len: Option<u32>,
    pub watermark: f64,
    /// The model's standalone task score, % (`replica.task_score_pct`).
    pub task_score_pct: Option<f64>,
    /// The batch former of a `static` replica (fcfs unless `replica.batch_former` names one).
    pub batch_former: BatchSelectorConfig,
    /// A `static` replica's pricing other than `passes`, built once per cell.
    pub static_cost: Option<StaticCost>,
    /// The model's load before the replica serves (`replica.load`).
    pub load: Option<ModelLoad>,
    /// vLLM V1's automatic prefix caching (`replica.prefix_caching`).
    pub prefix_caching: bool,
}

/// One group of alike replicas of a heterogeneous cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaGroup {
    pub model: ServedModel,
    pub replica: ReplicaSpec,
}

/// One runnable cell of a serving scenario. `model` and `replica` are the first replica group
/// (the only one of a `[replica]` table); `other_groups` the rest of a `[[replica]]` array, in
/// file order. Replicas are numbered group by group.
#[derive(Clone, Debug)]
pub struct ServingScenario {
    pub model: ServedModel,
    pub replica: ReplicaSpec,
    pub other_groups: Vec<ReplicaGroup>,
    pub expert_routing: ExpertRoutingTable,
    /// The expert mapping of each replica's expert-parallel groups (linear unless given).
    pub expert_mapping: MapperConfig,
    /// `experts.trace`: the utilization trace every MoE replica routes by, its observed steps
    /// the mappers' window (instead of an observation pass).
    pub expert_trace: Option<TraceSpec>,
    /// `experts.streams`: the mapper's random streams.
    pub expert_streams: MappingStreams,
    /// The router across replicas, as the `Policies` registry builds it.
    pub router: RouterConfig,
    pub router_kind: &'static str,
    /// Chimera's semantic router (with `routing.kind = "chimera"` only).
    pub semantic_router: Option<SemanticRouterConfig>,
    pub queue: QueuePolicyConfig,
    pub predictor: PredictorConfig,
    /// The most requests served (`usize::MAX`: unbounded, beside a horizon).
    pub n_requests: usize,
    /// Arrivals at or after it are not served (`workload.horizon_s`).
    pub horizon: Option<SimTime>,
    pub n_topics: u32,
    /// Every request's lengths; with `calls`, the first class's (each class draws its own).
    pub prompt_tokens: LengthSpec,
    pub output_tokens: LengthSpec,
    /// Prompt and output lengths from one stream (`workload.one_token_stream`).
    pub one_token_stream: bool,
    /// `[[workload.calls]]`: requests addressed to one group each, class by class in arrival
    /// order (none: every request may go to any replica).
    pub calls: Vec<CallClass>,
    /// The stream names of the arrivals and lengths (`workload.streams`).
    pub workload_streams: WorkloadStreams,
    pub arrival: ArrivalSpec,
    pub per_request_csv: bool,
    pub trace_events: bool,
    pub kv_sample_interval_ns: u64,
    /// `[output] timeline`: each replica's (placed, each worker's) loads, steps and idle time in
    /// `details.timeline`.
    pub timeline: bool,
    /// `[output] staircase`: each GPU's planning curve, point by point, in a traced MoE group's
    /// expert detail (`details.deployment[].experts.staircase`).
    pub staircase: bool,
    /// `[output] decode_curves`: each replica group's decode step priced at batch sizes up to
    /// its cap in `details.decode_curves` (`decode_curves`).
    pub decode_curves: bool,
    /// ExpertWeave adapters served on the replicas (`[adapters]`).
    pub adapters: Option<AdapterSpec>,
    /// Tokens every prompt begins with, shared by all requests (`workload.shared_prefix_tokens`).
    pub shared_prefix_tokens: u32,
    /// `[workload.workflow]`: the workflows' draws, one `ModelWorkload` per replica group in
    /// group order.
    pub workflow: Option<crate::serving::agent_workflows::WorkflowGenerator>,
    /// `[workload.questions]`: the question workload, validated.
    pub questions: Option<super::questions::QuestionSpec>,
    /// `[experiment]`: what a run computes instead of serving.
    pub experiment: Option<Experiment>,
    /// `[placement]`: the policy that plans the workers' sessions before the run.
    pub placement: Option<super::placement::PlacementSpec>,
    /// The sessions `placement` planned (`super::placement::planned`, set per run before it
    /// serves): each replica is one session of a worker.
    pub sessions: Option<Arc<super::sessions::WorkerSessions>>,
}

impl ServingScenario {
    /// Requests a run serves: `n_requests`, or the trace's rows if fewer.
    pub fn requests(&self) -> usize {
        self.arrival.requests(self.n_requests)
    }

    /// Requests the run is expected to serve, for its demands: `requests`, or with a horizon
    /// and a rate, at most the rate times the horizon.
    pub fn expected_requests(&self) -> usize {
        let n = self.requests();
        match (self.horizon, &self.arrival) {
            (
                Some(horizon),
                ArrivalSpec::Poisson { rate_per_s }
                | ArrivalSpec::Gamma { rate_per_s, .. }
                | ArrivalSpec::Bursty { rate_per_s, .. },
            ) => n.min((rate_per_s * horizon.as_secs_f64()).ceil() as usize),
            _ => n,
        }
    }

    /// Every replica group, the first one first.
    pub fn groups(&self) -> impl Iterator<Item = (&ServedModel, &ReplicaSpec)> {
        std::iter::once((&self.model, &self.replica))
            .chain(self.other_groups.iter().map(|g| (&g.model, &g.replica)))
    }

    /// What priced the run's steps, as results name it (`cells[].cost_model`): the least
    /// measured of the groups' sources (a group priced from measured operations: its pricing
    /// record's step source; a static replica's pricing: its own source; else the analytic
    /// roofline).
    pub fn cost_model(&self) -> &'static str {
        // One static replica group priced by an execution model: its profile's source, as the
        // caps family named it (`measured-operations` for a measured set).
        if let (true, Some(model)) = (
            self.other_groups.is_empty(),
            self.replica.static_cost.as_ref().and_then(|c| c.model()),
        ) {
            return model.source();
        }
        // One continuous MoE replica group priced from a profile: its source kind, as the gem
        // family named it (`measured-operations` for a measured set).
        if let (true, Some(curves)) = (self.other_groups.is_empty(), &self.replica.curves) {
            return curves.profile.source.kind.as_str();
        }
        self.groups()
            .map(|(_, r)| match (&r.static_cost, &r.measured, &r.curves) {
                _ if r.dense_profile.is_some() => CostSource::Measured,
                (Some(cost), _, _) => cost.cost_source(),
                (None, Some(m), _) => m.record.sources().step_source(),
                (None, None, Some(c)) => c.source(),
                (None, None, None) => CostSource::Analytic,
            })
            .reduce(CostSource::less_measured)
            .unwrap_or(CostSource::Analytic)
            .cost_model_name()
    }

    /// Replicas of the whole cluster.
    pub fn replica_count(&self) -> usize {
        self.groups().map(|(_, r)| r.count).sum()
    }

    /// GPUs of the whole cluster.
    pub fn gpu_count(&self) -> usize {
        self.groups().map(|(_, r)| r.count * r.gpus).sum()
    }

    /// The scenario of group `g` alone (its `model` and `replica`, no other group): what the
    /// per-replica pieces (`Deployment`, `ReplicaStepCost`) are built from.
    pub fn group(&self, g: usize) -> ServingScenario {
        let mut one = self.clone();
        if g > 0 {
            let group = &self.other_groups[g - 1];
            one.model = group.model.clone();
            one.replica = group.replica.clone();
        }
        one.other_groups.clear();
        // The calls address the whole cluster's replicas.
        one.calls.clear();
        one
    }

    /// The class of addressed calls request `id` (the `id`-th arrival) belongs to, if any.
    pub fn call_class(&self, id: u64) -> Option<&CallClass> {
        let mut end = 0;
        self.calls.iter().find(|c| {
            end += c.n_requests as u64;
            id < end
        })
    }

    /// One batch selector per replica of a `static` group, in replica order (none for the
    /// continuous kinds), built by `policies`.
    pub fn batch_selectors(
        &self,
        policies: &dyn crate::policies::Policies,
    ) -> Vec<Box<dyn crate::policies::batch::BatchSelector>> {
        self.groups()
            .filter(|(_, r)| matches!(r.scheduler, SchedulerTable::Static { .. }))
            .flat_map(|(_, r)| (0..r.count).map(|_| policies.batch_selector(&r.batch_former)))
            .collect()
    }

    /// Extra expert slots per expert-parallel group (EPLB's `redundant_slots`; 0 otherwise).
    pub fn redundant_expert_slots(&self) -> usize {
        match self.expert_mapping {
            MapperConfig::Eplb {
                redundant_slots, ..
            } => redundant_slots,
            _ => 0,
        }
    }
}

/// The keys beside `{p}.scheduler.pricing`: `sensitivity` (cv only, finite and >= 0) and
/// `service_ms` (constant and exponential only, and required there).
fn static_pricing_keys(
    p: &str,
    pricing: StaticPricing,
    sensitivity: Option<f64>,
    service_ms: Option<f64>,
) -> Result<(), FieldError> {
    let not_for = |key: &str| {
        Err(field_error(
            &format!("{p}.scheduler.{key}"),
            format!("does not apply to pricing = \"{}\"", pricing.name()),
        ))
    };
    let reference = matches!(
        pricing,
        StaticPricing::Constant | StaticPricing::Exponential
    );
    match (sensitivity, pricing) {
        (Some(_), StaticPricing::Cv) | (None, _) => {}
        (Some(_), _) => return not_for("sensitivity"),
    }
    if let Some(value) = sensitivity
        && !(value.is_finite() && value >= 0.0)
    {
        return Err(field_error(
            &format!("{p}.scheduler.sensitivity"),
            format!("must be finite and >= 0, got {value}"),
        ));
    }
    match (service_ms, reference) {
        (Some(ms), true) => {
            duration(
                &format!("{p}.scheduler.service_ms"),
                ms * 1e-3,
                crate::validate::limits::MAX_SIM_SECONDS_CEILING,
            )?;
        }
        (None, true) => {
            return Err(field_error(
                &format!("{p}.scheduler.service_ms"),
                format!("is required for pricing = \"{}\"", pricing.name()),
            ));
        }
        (Some(_), false) => return not_for("service_ms"),
        (None, false) => {}
    }
    Ok(())
}

/// The batch former of `r`: a CAPS selector needs the `static` kind (the others batch
/// continuously: no batch is ever formed whole), whose parameters must fit `max_num_seqs`.
fn static_former(p: &str, r: &ReplicaTable) -> Result<BatchSelectorConfig, FieldError> {
    match (&r.scheduler, &r.batch_former) {
        (
            SchedulerTable::Static {
                window_size,
                min_batch_trigger,
                scheduling_interval_ms,
                ..
            },
            former,
        ) => {
            if *window_size < r.max_num_seqs {
                return Err(field_error(
                    &format!("{p}.scheduler.window_size"),
                    format!(
                        "= {window_size}: the candidate window must hold a whole batch \
                         ({p}.max_num_seqs = {})",
                        r.max_num_seqs
                    ),
                ));
            }
            crate::validate::at_least_one(
                &format!("{p}.scheduler.min_batch_trigger"),
                *min_batch_trigger,
            )?;
            duration(
                &format!("{p}.scheduler.scheduling_interval_ms"),
                scheduling_interval_ms / 1e3,
                3600.0,
            )?;
            let former = former.clone().unwrap_or(BatchSelectorConfig::Fcfs);
            if let BatchSelectorConfig::PowerOfD { samples }
            | BatchSelectorConfig::PowerOfDDot { samples } = former
                && samples == 0
            {
                return Err(field_error(
                    &format!("{p}.batch_former.samples"),
                    "must be at least 1",
                ));
            }
            Ok(former)
        }
        (kind, Some(former)) => Err(field_error(
            &format!("{p}.batch_former"),
            format!(
                "the CAPS selector {:?} forms whole static batches, and {p}.scheduler.kind = \
                 {:?} batches continuously (requests join and leave at every step, no batch is \
                 formed whole); use {p}.scheduler = {{ kind = \"static\" }}",
                former.kind(),
                kind.kind()
            ),
        )),
        (_, None) => Ok(BatchSelectorConfig::Fcfs),
    }
}

/// `[[workload.calls]]` validated over the replica `groups`: each class names the model of
/// exactly one group, at least one request, its lengths; the classes' requests add up to
/// `workload.n_requests`; no trace replay (its rows carry no model) and no Chimera router (it
/// chooses among every model by capability).
fn calls(
    w: &WorkloadTable,
    groups: &[ReplicaGroup],
    n_requests: usize,
    arrival: &ArrivalSpec,
    router_kind: &str,
) -> Result<Vec<CallClass>, FieldError> {
    if w.calls.is_empty() {
        return Ok(Vec::new());
    }
    if matches!(arrival, ArrivalSpec::Trace { .. }) {
        return Err(field_error(
            "workload.calls",
            "not with arrival.pattern = \"trace\": a trace's rows name no model",
        ));
    }
    if router_kind == "chimera" {
        return Err(field_error(
            "workload.calls",
            "not with routing.kind = \"chimera\": addressed calls go to their model's group",
        ));
    }
    let mut ranges = Vec::with_capacity(groups.len());
    let mut first = 0;
    for g in groups {
        ranges.push((g.model.name(), first..first + g.replica.count));
        first += g.replica.count;
    }
    let mut classes = Vec::with_capacity(w.calls.len());
    for (i, c) in w.calls.iter().enumerate() {
        let at = |field: &str| format!("workload.calls[{i}].{field}");
        // The catalogue's name of the preset the class names, as each group's model gives it.
        let model = served_model(&at("model"), &c.model)?;
        let serving: Vec<_> = ranges.iter().filter(|(m, _)| *m == model.name()).collect();
        let replicas = match serving.as_slice() {
            [(_, range)] => range.clone(),
            [] => {
                return Err(field_error(
                    &at("model"),
                    format!(
                        "no replica group serves {} ({}); the groups serve {}",
                        c.model,
                        model.name(),
                        ranges
                            .iter()
                            .map(|(m, _)| *m)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
            _ => {
                return Err(field_error(
                    &at("model"),
                    format!(
                        "{} replica groups serve {}: a class of calls is addressed to one group",
                        serving.len(),
                        c.model
                    ),
                ));
            }
        };
        classes.push(CallClass {
            replicas,
            n_requests: crate::validate::at_least_one(&at("n_requests"), c.n_requests)?,
            prompt_tokens: length(&at("prompt_tokens"), &c.prompt_tokens, arrival)?,
            output_tokens: length(&at("output_tokens"), &c.output_tokens, arrival)?,
        });
    }
    let total: usize = classes.iter().map(|c| c.n_requests).sum();
    if total != n_requests {
        return Err(field_error(
            "workload.calls",
            format!(
                "the classes' n_requests add up to {total}; workload.n_requests is {n_requests}"
            ),
        ));
    }
    Ok(classes)
}

fn length(
    path: &str,
    table: &LengthTable,
    arrival: &ArrivalSpec,
) -> Result<LengthSpec, FieldError> {
    let err = |field: &str, e: crate::distributions::DistributionError| {
        field_error(&format!("{path}.{field}"), e.to_string())
    };
    Ok(LengthSpec::Distribution(match table {
        LengthTable::Fixed { value } => TokenLength::fixed(*value).map_err(|e| err("value", e))?,
        LengthTable::Uniform { low, high } => {
            TokenLength::uniform(*low, *high).map_err(|e| err("low", e))?
        }
        LengthTable::RoundedUniform { mean, spread } => {
            let field = if mean.is_finite() && *mean >= 1.0 {
                "spread"
            } else {
                "mean"
            };
            TokenLength::rounded_uniform(*mean, *spread).map_err(|e| err(field, e))?
        }
        LengthTable::Zipf { min, max, exponent } => {
            TokenLength::zipf(*min, *max, *exponent).map_err(|e| err("exponent", e))?
        }
        LengthTable::LogNormal {
            mean,
            median,
            sigma,
            max,
        } => {
            let count = match (mean, median) {
                (Some(mean), None) => {
                    TokenCount::from_mean(*mean, *sigma, *max).map_err(|e| err("mean", e))?
                }
                (None, Some(median)) => {
                    TokenCount::from_median(*median, *sigma, *max).map_err(|e| err("median", e))?
                }
                _ => {
                    return Err(field_error(
                        path,
                        "a log_normal length needs exactly one of `mean` and `median`",
                    ));
                }
            };
            TokenLength::LogNormal(count)
        }
        LengthTable::Trace => {
            let ArrivalSpec::Trace { trace, .. } = arrival else {
                return Err(field_error(
                    &format!("{path}.kind"),
                    "\"trace\" lengths need arrival.pattern = \"trace\"",
                ));
            };
            let column = if path.ends_with("prompt_tokens") {
                "prompt"
            } else {
                "output"
            };
            let missing = trace.rows().iter().position(|r| {
                let v = if column == "prompt" {
                    r.prompt_tokens
                } else {
                    r.output_tokens
                };
                !matches!(v, Some(n) if n >= 1)
            });
            if let Some(row) = missing {
                return Err(field_error(
                    &format!("{path}.kind"),
                    format!(
                        "\"trace\" lengths: row {} of {} has no {column} token count of at \
                         least 1",
                        row + 1,
                        trace.path().display()
                    ),
                ));
            }
            return Ok(LengthSpec::Trace);
        }
    }))
}

/// The served model called `name` (a dense, MoE or MLA MoE preset), its error at `path`.
pub(super) fn served_model(path: &str, name: &str) -> Result<ServedModel, FieldError> {
    if let Ok(shape) = DenseModelShape::preset(name) {
        Ok(ServedModel::Dense(shape))
    } else if let Ok(shape) = MoeModelShape::preset(name) {
        Ok(ServedModel::Moe(shape))
    } else if let Ok(shape) = MlaMoeShape::preset(name) {
        Ok(ServedModel::Mla(shape))
    } else {
        let mut known: Vec<&str> = crate::cost::shape::DENSE_PRESETS.to_vec();
        known.extend(crate::cost::shape::MOE_PRESETS);
        known.extend(crate::cost::shape::MLA_MOE_PRESETS);
        Err(field_error(
            path,
            format!(
                "unknown model {name:?}; the serving family serves the dense and MoE presets: {}",
                known.join(", ")
            ),
        ))
    }
}

impl ServingConfig {
    /// Checks every table and every combination; errors name the field (and, for a bad
    /// combination, the other key involved).
    pub fn validate(
        &self,
        base_dir: &Path,
        cache: &mut LoadCache,
    ) -> Result<ServingScenario, FieldError> {
        let ReplicaTables::One(template) = &self.replica else {
            return self.validate_groups(base_dir, cache);
        };
        if template.models.is_none() {
            return self.validate_groups(base_dir, cache);
        }
        // `replica.models` stands for an array of groups; a group's `replica.model`, which is
        // not written, is reported at the list that named it.
        let expanded = ServingConfig {
            replica: ReplicaTables::Groups(models_groups(template)?),
            ..self.clone()
        };
        expanded.validate_groups(base_dir, cache).map_err(|mut e| {
            if let Some(rest) = e.path.strip_prefix("replica[") {
                let field = rest.split_once("].").map_or("", |(_, f)| f);
                e.path = if field == "model" {
                    "replica.models".to_string()
                } else {
                    format!("replica.{field}").trim_end_matches('.').to_string()
                };
            }
            e
        })
    }

    /// `validate` on the replica tables as written (`replica.models` expanded).
    fn validate_groups(
        &self,
        base_dir: &Path,
        cache: &mut LoadCache,
    ) -> Result<ServingScenario, FieldError> {
        let tables: Vec<(String, &ReplicaTable)> = match &self.replica {
            ReplicaTables::One(table) => vec![("replica".to_string(), &**table)],
            ReplicaTables::Groups(tables) if tables.is_empty() => {
                return Err(field_error(
                    "replica",
                    "needs at least one [[replica]] group",
                ));
            }
            ReplicaTables::Groups(tables) => {
                if let Some(i) = tables.iter().position(|t| t.models.is_some()) {
                    return Err(field_error(
                        &format!("replica[{i}].models"),
                        "only on a single [replica] table, the template of every group",
                    ));
                }
                tables
                    .iter()
                    .enumerate()
                    .map(|(i, t)| (format!("replica[{i}]"), t))
                    .collect()
            }
        };
        if self.model.is_some() && tables.iter().all(|(_, t)| t.model.is_some()) {
            return Err(field_error(
                "model",
                "serves no replica group: every [[replica]] names its own model (drop [model], \
                 or a group's `model`)",
            ));
        }
        let mut groups = Vec::with_capacity(tables.len());
        for (path, table) in &tables {
            groups.push(self.group(path, table, base_dir, cache)?);
        }
        let workflow = match &self.workload.workflow {
            Some(table) => Some(self.workflow(table, &tables, &mut groups)?),
            None => None,
        };
        let queue = self.cluster_queue(&tables)?;
        let mut scenario = self.rest(groups, queue, base_dir, cache)?;
        if workflow.is_some() {
            self.check_workflow(&tables, &scenario)?;
        }
        scenario.workflow = workflow;
        if let Some(table) = &self.workload.questions {
            let questions = super::questions::validate(table, &self.workload, &tables, &scenario)?;
            if let Some(placement) = &self.placement {
                let paths: Vec<String> = tables.iter().map(|(path, _)| path.clone()).collect();
                let names: Vec<String> = table.experts.iter().map(|e| e.model.clone()).collect();
                scenario.placement =
                    Some(placement.validate_questions(&scenario, &paths, &questions, &names)?);
            }
            scenario.questions = Some(questions);
        }
        for (path, table) in &tables {
            if let SchedulerTable::Static {
                streams: StaticStreams::Shared,
                ..
            } = table.scheduler
                && scenario.replica_count() > 1
            {
                return Err(field_error(
                    &format!("{path}.scheduler.streams"),
                    format!(
                        "= \"shared\" names one replica's streams, the cluster has {}",
                        scenario.replica_count()
                    ),
                ));
            }
        }
        // Weights that do not fit are known before any run: refused here rather than failing
        // every run. With adapters the memory manager's plan decides, at run time.
        for (g, (path, _)) in tables.iter().enumerate() {
            if g == 0 && scenario.adapters.is_some() {
                continue;
            }
            if let Err(reason) = super::deployment::Deployment::new(&scenario.group(g), None) {
                return Err(field_error(&format!("{path}.gpus"), reason));
            }
        }
        Ok(scenario)
    }

    /// The workflows' draws (`[workload.workflow]`): each group's model must be one the
    /// dataset's workflow model knows; its standalone task score becomes the group's
    /// `task_score_pct` (what the semantic router and the outcomes read).
    fn workflow(
        &self,
        table: &WorkflowTable,
        tables: &[(String, &ReplicaTable)],
        groups: &mut [ReplicaGroup],
    ) -> Result<crate::serving::agent_workflows::WorkflowGenerator, FieldError> {
        use crate::serving::agent_workflows::{MODELS, ModelWorkload};
        let mut models = Vec::with_capacity(groups.len());
        for ((path, t), group) in tables.iter().zip(groups.iter_mut()) {
            let (key, name) = match (&t.model, &self.model) {
                (Some(name), _) => (format!("{path}.model"), name.as_str()),
                (None, Some(m)) => ("model.name".to_string(), m.name.as_str()),
                (None, None) => unreachable!("a group without a model was refused"),
            };
            let workload = MODELS
                .iter()
                .find(|(_, preset)| *preset == name)
                .and_then(|(chimera_name, _)| ModelWorkload::new(table.dataset, chimera_name))
                .ok_or_else(|| {
                    field_error(
                        &key,
                        format!(
                            "\"{name}\" has no workflow lengths or task score for \
                             workload.workflow.dataset (Chimera's models: {})",
                            MODELS
                                .iter()
                                .map(|(_, preset)| *preset)
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    )
                })?;
            if group.replica.task_score_pct.is_some() {
                return Err(field_error(
                    &format!("{path}.task_score_pct"),
                    "is the model's standalone score on workload.workflow.dataset with \
                     workflows: leave it out",
                ));
            }
            group.replica.task_score_pct = Some(workload.standalone_score);
            models.push(workload);
        }
        Ok(crate::serving::agent_workflows::WorkflowGenerator {
            dataset: table.dataset,
            models,
        })
    }

    /// What a workflow workload does not combine with, refused naming the key.
    fn check_workflow(
        &self,
        tables: &[(String, &ReplicaTable)],
        scenario: &ServingScenario,
    ) -> Result<(), FieldError> {
        let w = &self.workload;
        let drawn = "is drawn by workload.workflow (the dataset's user prompts and the \
                     stages' outputs and history): leave it out";
        if w.prompt_tokens.is_some() {
            return Err(field_error("workload.prompt_tokens", drawn));
        }
        if w.output_tokens.is_some() {
            return Err(field_error("workload.output_tokens", drawn));
        }
        if w.dataset.is_some() {
            return Err(field_error("workload.dataset", drawn));
        }
        if w.one_token_stream {
            return Err(field_error("workload.one_token_stream", drawn));
        }
        if !w.calls.is_empty() {
            return Err(field_error(
                "workload.calls",
                "not with workload.workflow: a workflow's stages go where the router sends them",
            ));
        }
        if w.shared_prefix_tokens > 0 {
            return Err(field_error(
                "workload.shared_prefix_tokens",
                "not with workload.workflow: each stage's prompt begins with its role's \
                 system prompt, the workflows' shared prefix",
            ));
        }
        if scenario.adapters.is_some() {
            return Err(field_error(
                "adapters",
                "not with workload.workflow (the workflow model draws no adapter)",
            ));
        }
        for ((path, _), (_, r)) in tables.iter().zip(scenario.groups()) {
            if matches!(r.scheduler, SchedulerTable::Static { .. }) {
                return Err(field_error(
                    &format!("{path}.scheduler"),
                    "the static kind forms batches from requests present at once; a \
                     workflow's stages need a continuous kind (vllm, sarathi, orca)",
                ));
            }
        }
        Ok(())
    }

    /// The one queue policy of the cluster: the groups' `queue`, which must agree.
    fn cluster_queue(
        &self,
        tables: &[(String, &ReplicaTable)],
    ) -> Result<QueuePolicyConfig, FieldError> {
        let (first_path, first) = &tables[0];
        for (path, table) in &tables[1..] {
            if table.queue != first.queue {
                return Err(field_error(
                    &format!("{path}.queue"),
                    format!(
                        "one queue policy serves the cluster: {path}.queue ({}) differs from \
                         {first_path}.queue ({})",
                        table.queue.kind(),
                        first.queue.kind()
                    ),
                ));
            }
        }
        first.queue.validate(&format!("{first_path}.queue"))?;
        Ok(first.queue.clone())
    }

    /// One replica group, its keys under `p` (`replica` or `replica[i]`).
    fn group(
        &self,
        p: &str,
        r: &ReplicaTable,
        base_dir: &Path,
        cache: &mut LoadCache,
    ) -> Result<ReplicaGroup, FieldError> {
        let model = match (&r.model, &self.model) {
            (Some(name), _) => served_model(&format!("{p}.model"), name)?,
            (None, Some(table)) => table.served()?,
            (None, None) => {
                return Err(field_error(
                    "model.name",
                    format!("is required: a [model] table, or {p}.model naming the group's"),
                ));
            }
        };
        let count = crate::validate::at_least_one(&format!("{p}.count"), r.count)?;
        let mut gpu = GpuSpec::by_name(&r.gpu)
            .map_err(|e| field_error(&format!("{p}.gpu"), e.to_string()))?;
        if let Some(gib) = r.gpu_memory_gib {
            if !(gib.is_finite() && gib > 0.0 && gib <= 1e4) {
                return Err(field_error(
                    &format!("{p}.gpu_memory_gib"),
                    format!("must be a number of GiB in (0, 10000], got {gib}"),
                ));
            }
            gpu.memory_gb = gib * crate::policies::memory::device::GIB as f64 / 1e9;
        }
        let tp = crate::validate::at_least_one(&format!("{p}.tensor_parallel"), r.tensor_parallel)?;
        let ep = crate::validate::at_least_one(&format!("{p}.expert_parallel"), r.expert_parallel)?;
        let gpus = match r.gpus {
            Some(g) => crate::validate::at_least_one(&format!("{p}.gpus"), g)?,
            None => tp.max(ep),
        };
        if gpus % tp != 0 {
            return Err(field_error(
                &format!("{p}.tensor_parallel"),
                format!("{tp} does not divide the replica's {gpus} GPUs ({p}.gpus)"),
            ));
        }
        // The routed experts an expert-parallel group spreads, and the heads TP splits.
        let (experts, heads) = match &model {
            ServedModel::Dense(shape) => {
                if ep != 1 {
                    return Err(field_error(
                        &format!("{p}.expert_parallel"),
                        format!("{} has no experts to spread (a dense model)", shape.name),
                    ));
                }
                if tp != gpus {
                    return Err(field_error(
                        &format!("{p}.gpus"),
                        format!(
                            "a dense replica runs tensor-parallel over all its GPUs: {gpus} GPUs \
                             with replica.tensor_parallel = {tp} (more data-parallel copies are \
                             more replicas: replica.count)"
                        ),
                    ));
                }
                (None, shape.n_heads)
            }
            ServedModel::Moe(shape) => (
                Some((shape.n_experts as u64, "experts")),
                shape.n_attention_heads as u64,
            ),
            ServedModel::Mla(shape) => (
                Some((shape.n_routed_experts, "routed experts")),
                shape.n_heads,
            ),
        };
        if let Some((n_experts, what)) = experts {
            if gpus % ep != 0 {
                return Err(field_error(
                    &format!("{p}.expert_parallel"),
                    format!("{ep} does not divide the replica's {gpus} GPUs ({p}.gpus)"),
                ));
            }
            if n_experts % ep as u64 != 0 {
                return Err(field_error(
                    &format!("{p}.expert_parallel"),
                    format!(
                        "{ep} does not divide {}'s {n_experts} {what} per layer (the linear \
                         mapping puts as many on every GPU)",
                        model.name()
                    ),
                ));
            }
        }
        if heads % tp as u64 != 0 {
            return Err(field_error(
                &format!("{p}.tensor_parallel"),
                format!(
                    "{tp} does not divide {}'s {heads} attention heads",
                    model.name()
                ),
            ));
        }
        let batch_former = static_former(p, r)?;
        if let SchedulerTable::Static {
            pricing,
            sensitivity,
            service_ms,
            ..
        } = &r.scheduler
        {
            static_pricing_keys(p, *pricing, *sensitivity, *service_ms)?;
        }
        if let SchedulerTable::Static { pricing, loads, .. } = &r.scheduler
            && pricing.reads_expected_routing()
        {
            let refuse = |why: &str| {
                Err(field_error(
                    &format!("{p}.scheduler.pricing"),
                    format!("= \"{}\" {why}", pricing.name()),
                ))
            };
            if !matches!(model, ServedModel::Moe(_)) {
                return refuse("prices a batch's routed experts: it needs an MoE model");
            }
            if gpus != 1 {
                return refuse(&format!(
                    "runs every expert on one GPU: it needs {p}.gpus = 1, got {gpus}"
                ));
            }
            if *loads != StaticLoads::Experts {
                return refuse(&format!(
                    "sums the candidates' per-expert loads: it needs {p}.scheduler.loads = \"experts\""
                ));
            }
        }
        let speed_factors = match (&r.speed_factors, &r.variability) {
            (Some(_), Some(_)) => {
                return Err(field_error(
                    &format!("{p}.variability"),
                    "stands for the speed factors: give it or `speed_factors`, not both",
                ));
            }
            (None, Some(setup)) => setup.factors(gpus, &format!("{p}.variability"))?,
            (Some(factors), None) => {
                if factors.len() != gpus {
                    return Err(field_error(
                        &format!("{p}.speed_factors"),
                        format!(
                            "needs one factor per GPU: {} given, {gpus} GPUs",
                            factors.len()
                        ),
                    ));
                }
                for (i, &f) in factors.iter().enumerate() {
                    crate::validate::speed_factor(&format!("{p}.speed_factors[{i}]"), f, 10.0)?;
                }
                factors.clone()
            }
            (None, None) => vec![1.0; gpus],
        };
        let speed_factors_kind = r.speed_factors_kind.unwrap_or(FactorKind::Clock);
        if speed_factors_kind == FactorKind::Throughput
            && (model.experts().is_none()
                || self.experts.as_ref().is_none_or(|e| e.trace.is_none()))
        {
            return Err(field_error(
                &format!("{p}.speed_factors_kind"),
                "\"throughput\" solves each GPU's clock on the workload's mean MoE layer: it \
                 needs an MoE model and `experts.trace`",
            ));
        }
        if !(0.0..=1.0).contains(&r.bandwidth_share) {
            return Err(field_error(
                &format!("{p}.bandwidth_share"),
                format!("must lie in [0, 1], got {}", r.bandwidth_share),
            ));
        }
        if !(r.gpu_memory_utilization > 0.0 && r.gpu_memory_utilization <= 1.0) {
            return Err(field_error(
                &format!("{p}.gpu_memory_utilization"),
                format!("must lie in (0, 1], got {}", r.gpu_memory_utilization),
            ));
        }
        let host = match r.step_overhead_ms {
            // 0 is allowed: no host time (a duration must be positive).
            Some(ms) => HostOverhead::flat(if ms == 0.0 {
                0.0
            } else {
                duration(&format!("{p}.step_overhead_ms"), ms / 1e3, 3600.0)?.0 as f64
            }),
            None => match r.host_time {
                Some(HostTime::Vllm) => HostOverhead::vllm_v0(),
                Some(HostTime::SarathiServe) => HostOverhead::sarathi_serve(),
                None => super::scheduler::host_overhead(&r.scheduler),
            },
        };
        if r.step_overhead_ms.is_some() && r.host_time.is_some() {
            return Err(field_error(
                &format!("{p}.host_time"),
                "give either `step_overhead_ms` (a flat host time) or `host_time` (a measured \
                 engine loop), not both"
                    .to_string(),
            ));
        }
        let max_num_seqs =
            crate::validate::at_least_one(&format!("{p}.max_num_seqs"), r.max_num_seqs)?;
        let budget = match &r.scheduler {
            SchedulerTable::Vllm {
                max_num_batched_tokens: n,
                ..
            }
            | SchedulerTable::Orca {
                max_num_batched_tokens: Some(n),
                ..
            } => Some(("max_num_batched_tokens", *n)),
            SchedulerTable::Sarathi { chunk_size, .. } => Some(("chunk_size", *chunk_size)),
            _ => None,
        };
        if let Some((key, 0)) = budget {
            return Err(field_error(
                &format!("{p}.scheduler.{key}"),
                "must be at least 1",
            ));
        }
        let (block_size, kv_pool_block) = match (&r.scheduler, r.block_size) {
            (_, Some(b)) if !(1..=MAX_BLOCK_SIZE).contains(&b) => {
                return Err(field_error(
                    &format!("{p}.block_size"),
                    format!("must be from 1 to {MAX_BLOCK_SIZE} tokens, got {b}"),
                ));
            }
            // Orca does not page: a block size is the pool's allocation granularity only.
            (SchedulerTable::Orca { .. }, Some(b)) => (1, b),
            (SchedulerTable::Orca { .. }, None) => (1, 1),
            (_, Some(b)) => (b, b),
            (_, None) => (16, 16),
        };
        if r.max_model_len == Some(0) {
            return Err(field_error(
                &format!("{p}.max_model_len"),
                "must be at least 2 (a prompt token and an output token), got 0",
            ));
        }
        if !(0.0..1.0).contains(&r.watermark) {
            return Err(field_error(
                &format!("{p}.watermark"),
                format!("must lie in [0, 1), got {}", r.watermark),
            ));
        }
        // A paged cache only: its blocks are what a prompt finds cached, and an unbounded one
        // would keep every prompt's blocks resident for the whole run.
        if r.prefix_caching
            && !matches!(
                r.scheduler,
                SchedulerTable::Vllm { .. }
                    | SchedulerTable::Sarathi {
                        kv: KvLimit::Paged,
                        ..
                    }
            )
        {
            return Err(field_error(
                &format!("{p}.prefix_caching"),
                format!(
                    "needs a paged KV cache: replica.scheduler.kind = \"vllm\" or \"sarathi\" \
                     (kv = \"paged\"), not {:?}",
                    r.scheduler.kind()
                ),
            ));
        }
        if let Some(score) = r.task_score_pct
            && !(score.is_finite() && score > 0.0 && score < 100.0)
        {
            return Err(field_error(
                &format!("{p}.task_score_pct"),
                format!("must lie in (0, 100), got {score}"),
            ));
        }
        let speeds = speed_factors
            .iter()
            .map(|&s| SpeedFactors::split(s, r.bandwidth_share))
            .collect();
        let expected_routing = matches!(
            &r.scheduler,
            SchedulerTable::Static { pricing, .. } if pricing.reads_expected_routing()
        );
        let continuous = !matches!(r.scheduler, SchedulerTable::Static { .. });
        let measured = match (&r.measured, &model) {
            (None, _) => None,
            (Some(name), ServedModel::Dense(shape)) => {
                let field = format!("{p}.measured");
                let set = measured_set(&field, name, base_dir, cache)?;
                measured_on(&field, &set, &format!("{p}.gpu"), &gpu)?;
                if speed_factors.iter().any(|&f| f != 1.0) {
                    return Err(field_error(
                        &format!("{p}.speed_factors"),
                        "not yet with `measured`: measured operations are priced at the \
                         measured GPU's speed",
                    ));
                }
                let parallel = TensorParallel {
                    degree: tp as u32,
                    link: r.interconnect.link(),
                };
                // The host's time is the serving family's own term (`host`), added per step.
                Some(Arc::new(MeasuredDenseStep::new(&set, shape, parallel, 0.0)))
            }
            // A static replica priced from its expected routing builds its curves from the
            // set (`StaticCost::validate`), a continuous one its profile (`CurvePricing`).
            (Some(_), ServedModel::Moe(_)) if expected_routing || continuous => None,
            (Some(_), ServedModel::Mla(_)) if continuous => None,
            (Some(_), _) => {
                return Err(field_error(
                    &format!("{p}.measured"),
                    format!(
                        "not yet for an MoE model ({}) on a static replica priced pass by \
                         pass: a dense model, a continuous MoE replica, or a static replica \
                         priced from its expected routing, only",
                        model.name()
                    ),
                ));
            }
        };
        // A dense model's `scheduler.profile` is a measured dense-decode profile of it.
        let dense_profile = match (&model, r.scheduler.continuous_profile()) {
            (ServedModel::Dense(shape), Some(file)) => {
                if r.measured.is_some() {
                    return Err(field_error(
                        &format!("{p}.measured"),
                        format!(
                            "names a second cost source beside {p}.scheduler.profile; keep one"
                        ),
                    ));
                }
                let profile =
                    super::dense_profile::DenseProfile::validate(p, file, shape, base_dir)?;
                if gpus != 1 {
                    return Err(field_error(
                        &format!("{p}.gpus"),
                        "must be 1 beside scheduler.profile on a dense model: a dense-decode \
                         profile times one device's whole step",
                    ));
                }
                Some(Arc::new(profile))
            }
            _ => None,
        };
        let curves = CurvePricing::validate(
            p,
            &model,
            &r.scheduler,
            r.measured.as_deref(),
            &gpu,
            tp,
            base_dir,
            cache,
        )?
        .map(Arc::new);
        let timing = r.timing.unwrap_or_default();
        if timing == Timing::Eager {
            let refusal = if matches!(model, ServedModel::Dense(_)) {
                Some("not for a dense model: no kernel count per layer of one is stated")
            } else if measured.is_some() {
                Some("not beside `measured`: measured operations carry their own launches")
            } else if curves.is_some() {
                Some("not beside a profile's curves: measured kernels carry their own launches")
            } else if matches!(r.scheduler, SchedulerTable::Static { .. }) {
                Some("not for a `static` replica: its batches are priced as a whole")
            } else {
                None
            };
            if let Some(why) = refusal {
                return Err(field_error(&format!("{p}.timing"), why.to_string()));
            }
        }
        let load = r
            .load
            .as_ref()
            .map(|table| ModelLoad::validate(p, table, &gpu))
            .transpose()?;
        let static_cost = match &r.scheduler {
            SchedulerTable::Static {
                pricing,
                sensitivity,
                service_ms,
                profile,
                ..
            } => {
                if profile.is_some() && !expected_routing {
                    return Err(field_error(
                        &format!("{p}.scheduler.profile"),
                        format!("does not apply to pricing = \"{}\"", pricing.name()),
                    ));
                }
                StaticCost::validate(
                    p,
                    *pricing,
                    *sensitivity,
                    *service_ms,
                    model.experts().as_ref(),
                    &gpu,
                    ProfileSource {
                        file: profile.as_deref(),
                        measured: r.measured.as_deref(),
                    },
                    base_dir,
                    cache,
                )?
            }
            _ => None,
        };
        Ok(ReplicaGroup {
            model,
            replica: ReplicaSpec {
                count,
                gpu,
                gpus,
                tensor_parallel: tp,
                expert_parallel: ep,
                speed_factors,
                speed_factors_kind,
                bandwidth_share: r.bandwidth_share,
                speeds,
                link: r.interconnect.link(),
                gpu_memory_utilization: r.gpu_memory_utilization,
                host,
                timing,
                measured,
                curves,
                dense_profile,
                scheduler: r.scheduler.clone(),
                max_num_seqs,
                block_size,
                kv_pool_block,
                max_model_len: r.max_model_len,
                watermark: r.watermark,
                task_score_pct: r.task_score_pct,
                batch_former,
                static_cost,
                load,
                prefix_caching: r.prefix_caching,
            },
        })
    }

    /// The cluster-wide tables over the validated `groups`.
    /// `experts.trace` validated against the MoE groups: every one of them has the same layers
    /// and experts (one trace routes them all), continuous batching (a static replica's batch
    /// former dry-runs the routing table), no adapters, and `experts.routing` left out.
    fn expert_trace(
        &self,
        params: &TraceParams,
        groups: &[ReplicaGroup],
        base_dir: &Path,
    ) -> Result<TraceSpec, FieldError> {
        if self
            .experts
            .as_ref()
            .is_some_and(|e| e.routing != ExpertRoutingTable::Uniform)
        {
            return Err(field_error(
                "experts.routing",
                "is replaced by experts.trace (each step routes by the trace); leave one",
            ));
        }
        if self.adapters.is_some() {
            return Err(field_error(
                "experts.trace",
                "is not read with [adapters] (the adapters' router routes every step); leave one",
            ));
        }
        let mut shape: Option<MoeModelShape> = None;
        for (i, group) in groups.iter().enumerate() {
            let Some(s) = group.model.experts() else {
                continue;
            };
            if matches!(group.replica.scheduler, SchedulerTable::Static { .. }) {
                return Err(field_error(
                    "experts.trace",
                    format!(
                        "replica group {i} has the static scheduler kind, whose batch former \
                         dry-runs the routing table: a trace routes continuous batching only"
                    ),
                ));
            }
            if let Some(first) = &shape
                && (first.n_layers, first.n_experts) != (s.n_layers, s.n_experts)
            {
                return Err(field_error(
                    "experts.trace",
                    format!(
                        "one trace routes every MoE group, but {} has {} layers of {} experts \
                         and {} {} of {}",
                        first.name,
                        first.n_layers,
                        first.n_experts,
                        s.name,
                        s.n_layers,
                        s.n_experts
                    ),
                ));
            }
            shape.get_or_insert(s);
        }
        let shape = shape.expect("experts are only read on an MoE model");
        TraceSpec::resolve(
            params,
            shape.n_layers,
            shape.n_experts,
            shape.top_k,
            base_dir,
        )
        .map_err(|(f, m)| field_error(&format!("experts.trace.{f}"), m))
    }

    fn rest(
        &self,
        mut groups: Vec<ReplicaGroup>,
        queue: QueuePolicyConfig,
        base_dir: &Path,
        cache: &mut LoadCache,
    ) -> Result<ServingScenario, FieldError> {
        let any_moe = groups.iter().any(|g| g.model.experts().is_some());
        if self.experts.is_some() && !any_moe {
            return Err(field_error(
                "experts",
                format!(
                    "{} has no experts to route (a dense model)",
                    groups[0].model.name()
                ),
            ));
        }
        let adapters = match (&self.adapters, &groups[0].model) {
            (None, _) => None,
            (Some(_), _) if groups.len() > 1 => {
                return Err(field_error(
                    "adapters",
                    format!(
                        "serves one replica group (the memory manager plans one model's \
                         instance); the scenario has {} [[replica]] groups (replica)",
                        groups.len()
                    ),
                ));
            }
            (Some(_), ServedModel::Dense(shape)) => {
                return Err(field_error(
                    "adapters",
                    format!(
                        "ExpertWeave adapters are fine-tuned expert sets of an MoE model; {} \
                         has no experts (model.name)",
                        shape.name
                    ),
                ));
            }
            (Some(_), ServedModel::Moe(shape)) => {
                return Err(field_error(
                    "adapters",
                    format!(
                        "ESFT adapters (expertweave.txt, Table 1) fine-tune the experts of \
                         esft-vanilla-16b, an MLA MoE model; {} has none (model.name: \
                         esft-vanilla-16b or live-tiny-mla)",
                        shape.name
                    ),
                ));
            }
            (Some(table), ServedModel::Mla(shape)) => {
                if self.experts.is_some() {
                    return Err(field_error(
                        "experts",
                        "with [adapters], each request's tokens follow its adapter's domain \
                         popularity (adapters.expert_zipf_s); [experts] would route them twice",
                    ));
                }
                if let SchedulerTable::Static { .. } = groups[0].replica.scheduler {
                    return Err(field_error(
                        "replica.scheduler.kind",
                        "= \"static\" runs a batch as passes routed one by one, and adapters \
                         route a continuous replica's steps; not yet: adapters on a static \
                         replica",
                    ));
                }
                if self.workload.n_topics != 1 {
                    return Err(field_error(
                        "workload.n_topics",
                        "with [adapters], a request's adapter is its topic (its domain ranks \
                         the experts); leave n_topics at 1",
                    ));
                }
                let spec = table.validate(shape, &cache.limits)?;
                // A profile of the MLA model's widths prices the rerouting from its own series.
                let mla = groups[0]
                    .replica
                    .curves
                    .as_ref()
                    .and_then(|c| c.mla.as_ref());
                if let Some(mla) = mla
                    && mla.reroute(spec.rerouting, spec.adapters.len()).is_none()
                {
                    let variant = serde_json::to_value(spec.rerouting).expect("serializes");
                    return Err(field_error(
                        "replica.scheduler.profile",
                        format!(
                            "has no {} rerouting measurement for adapters.rerouting (calibrate \
                             with --for-scenario, which measures it)",
                            variant.as_str().unwrap_or("?")
                        ),
                    ));
                }
                Some(spec)
            }
        };
        // Merged copies on devices of their own are a replica each: a `replica.count` left at 1
        // becomes the number of copies (another count is refused when the plan is made).
        if let Some(spec) = &adapters
            && let crate::policies::memory::MemoryConfig::Merged {
                separate_devices: true,
                ..
            } = spec.memory
            && !spec.plan_only
            && groups[0].replica.count == 1
        {
            groups[0].replica.count = spec.adapters.len();
        }
        let expert_trace = match self.experts.as_ref().and_then(|e| e.trace.as_ref()) {
            None => None,
            Some(params) => Some(self.expert_trace(params, &groups, base_dir)?),
        };
        let observable = match &expert_trace {
            Some(TraceSpec::Synthetic(params)) => params.observed_steps,
            Some(TraceSpec::Recorded { observed_steps, .. }) => *observed_steps,
            None => usize::MAX,
        };
        let expert_streams = self
            .experts
            .as_ref()
            .map_or_else(Default::default, |e| e.streams);
        if expert_streams == MappingStreams::Shared {
            let moe: Vec<&ReplicaGroup> = groups
                .iter()
                .filter(|g| g.model.experts().is_some())
                .collect();
            if moe.len() != 1
                || moe[0].replica.count != 1
                || moe[0].replica.gpus != moe[0].replica.expert_parallel
            {
                return Err(field_error(
                    "experts.streams",
                    "\"shared\" names one stream per layer: one MoE replica of one expert-parallel \
                     copy only (replica.count = 1, replica.gpus = replica.expert_parallel)",
                ));
            }
        }
        let (expert_routing, expert_mapping) = match &self.experts {
            Some(experts) => {
                let mapping = experts.mapping.clone().unwrap_or(MapperConfig::Linear);
                // One mapping maps every MoE group's experts, each over its own EP degree.
                for group in &groups {
                    if let Some(shape) = group.model.experts() {
                        mapping
                            .check(shape.n_experts, group.replica.expert_parallel, observable)
                            .map_err(|(field, message)| {
                                field_error(&format!("experts.mapping.{field}"), message)
                            })?;
                    }
                }
                if let ExpertRoutingTable::Zipf { exponent } = experts.routing
                    && !(exponent.is_finite() && (0.0..=10.0).contains(&exponent))
                {
                    return Err(field_error(
                        "experts.routing.exponent",
                        format!("must lie in [0, 10], got {exponent}"),
                    ));
                }
                if let ExpertRoutingTable::Affinity {
                    concentration,
                    purity,
                    prediction_noise,
                } = experts.routing
                {
                    positive("experts.routing.concentration", concentration)?;
                    if !(0.0..=1.0).contains(&purity) {
                        return Err(field_error(
                            "experts.routing.purity",
                            format!("must lie in [0, 1], got {purity}"),
                        ));
                    }
                    non_negative("experts.routing.prediction_noise", prediction_noise)?;
                }
                (experts.routing, mapping)
            }
            None => (ExpertRoutingTable::Uniform, MapperConfig::Linear),
        };
        let (router, router_kind) = match &self.routing {
            RoutingTable::RoundRobin => (RouterConfig::RoundRobin, "round_robin"),
            RoutingTable::LeastOutstanding => (
                RouterConfig::LeastLoaded {
                    waiting_weight: 1.0,
                    running_weight: 1.0,
                },
                "least_outstanding",
            ),
            RoutingTable::LeastLoaded {
                waiting_weight,
                running_weight,
            } => {
                let w = positive("routing.waiting_weight", waiting_weight.unwrap_or(4.0))?;
                let r = positive("routing.running_weight", running_weight.unwrap_or(1.0))?;
                (
                    RouterConfig::LeastLoaded {
                        waiting_weight: w,
                        running_weight: r,
                    },
                    "least_loaded",
                )
            }
            RoutingTable::Chimera {
                slack,
                margin,
                semantic_router: _,
            } => {
                let slack = non_negative("routing.slack", *slack)?;
                let margin = non_negative(
                    "routing.margin",
                    margin.unwrap_or_else(crate::serving::policy::default_margin),
                )?;
                let models_differ = groups.iter().any(|g| g.model != groups[0].model);
                if models_differ
                    && let Some(i) = groups
                        .iter()
                        .position(|g| g.replica.task_score_pct.is_none())
                {
                    return Err(field_error(
                        &format!("replica[{i}].task_score_pct"),
                        "is required with routing.kind = \"chimera\" where the models \
                         differ: the semantic router's confidence in a group's model comes \
                         from its standalone task score",
                    ));
                }
                (RouterConfig::Chimera { slack, margin }, "chimera")
            }
        };
        let semantic_router = match &self.routing {
            RoutingTable::Chimera {
                semantic_router, ..
            } => {
                let router = semantic_router
                    .clone()
                    .unwrap_or_else(crate::serving::predictors::default_semantic_router);
                router.validate("routing.semantic_router")?;
                Some(router)
            }
            _ => None,
        };
        self.predictor.validate("predictor")?;
        let w = &self.workload;
        let n_requests = match (w.n_requests, w.horizon_s) {
            (Some(n), _) => crate::validate::at_least_one("workload.n_requests", n)?,
            // Unbounded: the horizon ends the arrivals.
            (None, Some(_)) => usize::MAX,
            // A question workload: its question count, or its benchmark's (an unknown
            // benchmark and a count of 0 are reported at their keys by the questions' own
            // validation).
            (None, None) if w.questions.is_some() => w.questions.as_ref().map_or(1, |q| {
                let benchmark = crate::serving::questions::dataset(&q.dataset)
                    .map_or(1, |d| d.questions as usize);
                q.questions
                    .filter(|&n| n > 0)
                    .map_or(benchmark, |n| n as usize)
            }),
            (None, None) => {
                return Err(field_error(
                    "workload.n_requests",
                    "missing: give the requests to serve, or workload.horizon_s (the requests \
                     arriving before it)",
                ));
            }
        };
        let horizon = match w.horizon_s {
            None => None,
            Some(_) if self.arrival.pattern == crate::arrivals::ArrivalPattern::Offline => {
                return Err(field_error(
                    "workload.horizon_s",
                    "does not apply to arrival.pattern = \"offline\": every request is present \
                     at t = 0 (give workload.n_requests)",
                ));
            }
            Some(_) if !w.calls.is_empty() => {
                return Err(field_error(
                    "workload.horizon_s",
                    "does not apply beside [[workload.calls]] (the classes add up to \
                     workload.n_requests)",
                ));
            }
            Some(h) => {
                // Finite, positive and at least one nanosecond once rounded.
                crate::validate::duration(
                    "workload.horizon_s",
                    h,
                    crate::validate::limits::MAX_SIM_SECONDS_CEILING,
                )?;
                Some(SimTime::from_secs_f64(h))
            }
        };
        if w.n_topics == 0 {
            return Err(field_error(
                "workload.n_topics",
                "must be at least 1, got 0",
            ));
        }
        let arrival = self
            .arrival
            .validate(n_requests, base_dir, &mut cache.traces)?;
        let calls = calls(w, &groups, n_requests, &arrival, router_kind)?;
        let placement = match &self.placement {
            // Checked against the questions once they are (`validate`).
            None => None,
            Some(_) if w.questions.is_some() => None,
            Some(table) => {
                let paths: Vec<String> = match &self.replica {
                    ReplicaTables::One(_) => vec!["replica".to_string()],
                    ReplicaTables::Groups(tables) => {
                        (0..tables.len()).map(|i| format!("replica[{i}]")).collect()
                    }
                };
                let call_models: Vec<String> = w.calls.iter().map(|c| c.model.clone()).collect();
                Some(table.validate(
                    &groups,
                    &paths,
                    &calls,
                    &call_models,
                    &arrival,
                    adapters.is_some(),
                )?)
            }
        };
        if w.dataset.is_some() && !calls.is_empty() {
            return Err(field_error(
                "workload.dataset",
                "not with [[workload.calls]]: give each class of calls its lengths there",
            ));
        }
        let (preset_prompt, preset_output) = w.dataset.and_then(Dataset::lengths).unzip();
        let required = |key: &str,
                        given: &Option<LengthTable>,
                        preset: Option<LengthDistribution>,
                        of_class: fn(&CallClass) -> &LengthSpec| {
            match (given, preset, calls.first()) {
                (Some(_), _, Some(_)) => Err(field_error(
                    key,
                    "is given per class with [[workload.calls]]: give it there, not here",
                )),
                (Some(table), _, None) => length(key, table, &arrival),
                (None, Some(d), _) => length(
                    key,
                    &LengthTable::LogNormal {
                        mean: Some(d.mean),
                        median: None,
                        sigma: d.sigma,
                        max: d.max,
                    },
                    &arrival,
                ),
                (None, None, Some(first)) => Ok(of_class(first).clone()),
                // Not read: a workflow's stages and the questions' calls draw their own
                // (`workflows`, `questions`).
                (None, None, None) if w.workflow.is_some() || w.questions.is_some() => Ok(
                    LengthSpec::Distribution(TokenLength::fixed(1).expect("one token is a length")),
                ),
                (None, None, None) => Err(field_error(
                    key,
                    "missing: give a length distribution or workload.dataset (\"sharegpt\", \
                     \"codecontests\") (or each class of calls its lengths in [[workload.calls]])",
                )),
            }
        };
        if let (Some(family), true) = (w.streams.family(), w.one_token_stream) {
            return Err(field_error(
                "workload.one_token_stream",
                format!(
                    "streams = \"{family}\" already draws prompt then output from one stream \
                     ({family}/lengths)"
                ),
            ));
        }
        let prompt_tokens = required(
            "workload.prompt_tokens",
            &w.prompt_tokens,
            preset_prompt,
            |c| &c.prompt_tokens,
        )?;
        let output_tokens = required(
            "workload.output_tokens",
            &w.output_tokens,
            preset_output,
            |c| &c.output_tokens,
        )?;
        let o = &self.output;
        let kv_sample_interval_ns = if o.kv_sample_interval_ms == 0.0 {
            0
        } else {
            duration(
                "output.kv_sample_interval_ms",
                o.kv_sample_interval_ms / 1e3,
                1e7,
            )?
            .0
        };
        let caching = groups.iter().any(|g| g.replica.prefix_caching);
        let shared_prefix_tokens = w.shared_prefix_tokens;
        if shared_prefix_tokens > 0 && !caching {
            return Err(field_error(
                "workload.shared_prefix_tokens",
                "finds nothing cached without replica.prefix_caching = true on some replica group",
            ));
        }
        if caching && adapters.is_some() {
            return Err(field_error(
                "replica.prefix_caching",
                "not beside [adapters]: an adapter's requests hold KV of their own weights",
            ));
        }
        let mut groups = groups.into_iter();
        let first = groups.next().expect("at least one group was checked");
        let experiment = self
            .experiment
            .as_ref()
            .map(|e| e.validate(&first.model, &first.replica, expert_trace.as_ref()))
            .transpose()?;
        Ok(ServingScenario {
            model: first.model,
            replica: first.replica,
            other_groups: groups.collect(),
            expert_routing,
            expert_mapping,
            expert_trace,
            expert_streams,
            router,
            router_kind,
            semantic_router,
            queue,
            predictor: self.predictor.clone(),
            n_requests,
            horizon,
            n_topics: w.n_topics,
            one_token_stream: w.one_token_stream,
            workload_streams: w.streams,
            prompt_tokens,
            output_tokens,
            calls,
            arrival,
            per_request_csv: o.per_request_csv,
            trace_events: o.trace_events,
            timeline: o.timeline,
            staircase: o.staircase,
            decode_curves: o.decode_curves,
            kv_sample_interval_ns,
            adapters,
            shared_prefix_tokens,
            workflow: None,
            questions: None,
            experiment,
            placement,
            sessions: None,
        })
    }
}
