//! The expected-routing execution models (CAPS's; the caps family's `[execution]` and the
//! serving family's `static` replica `pricing`), each a `serving::StepCost` that turns a static
//! batch (one
//! step of the replica: the prefill, then `decode_iterations` passes of the whole batch, with
//! the batch's expected routing) into a batch time: `grouped` (the physical one and the
//! default: each MoE layer's active experts run as one grouped GEMM priced by
//! `cost::moe_layer`), `cv` (caps.txt's own assumption: base time x (1 + CV(load) x
//! sensitivity)) and `straggler` (per MoE layer the experts run in lock step, each with the
//! whole GPU, so each layer waits for its most loaded expert on the expert cost curve). All
//! read the same calibration profile; docs/cost-model.md derives them. Beside them the two
//! queueing-theory references (`ConstantService`, `ExponentialService`: constant and
//! exponential service per batch, whatever it holds) that check the engine against the M/D/1
//! and M/M/1 closed forms.
//!
//! A step's `expected_routing.prefill` is the batch's summed prompt routing (layer-major, each
//! prompt token adds `top_k` per layer), `expected_routing.decode` the expected routed tokens
//! of one decode pass (the sum over the batch's requests of request load / prompt tokens).

use crate::cost::curve::CostCurve;
use crate::cost::gpu::GpuSpec;
use crate::cost::kernel::{LANES, Timing};
use crate::cost::measured_steps::{OpSources, PricingRecord};
use crate::cost::moe_layer::MoeLayerCost;
use crate::cost::profile::{ExpertExecution, ExpertFfnCurve, Profile, ProfileMismatch, SourceKind};
use crate::cost::shape::MoeModelShape;
use crate::distributions::expected_max_standard_normal;
use crate::recorder::expert_load::{coefficient_of_variation, max_of};
use crate::rng::SimRng;
use crate::serving::{CostSource, ExpectedRouting, StepBreakdown, StepCost, StepTime, StepWork};
use crate::time::SimDuration;
use rand::RngExt;
use std::sync::Arc;

/// The batch the default CV sensitivity is derived at: CAPS's `max_batch_size = 8`
/// (caps.txt), with 128-token prompts and 16 decode passes after the prefill (assumption: a
/// short chat prompt and answer; the derivation is insensitive to it within a factor of two,
/// see docs/cost-model.md).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReferenceBatch {
    pub n_requests: usize,
    pub prompt_tokens_per_request: u64,
    pub decode_iterations: u32,
}

pub const CAPS_REFERENCE_BATCH: ReferenceBatch = ReferenceBatch {
    n_requests: 8,
    prompt_tokens_per_request: 128,
    decode_iterations: 16,
};

/// Why an execution model cannot be built.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ExecutionModelError {
    #[error(transparent)]
    Profile(#[from] ProfileMismatch),
    #[error("the CV sensitivity must be finite and >= 0, got {0}")]
    InvalidSensitivity(f64),
}

/// The curves of one profile an execution model evaluates, with the routing shape.
#[derive(Clone, Debug)]
struct CostTables {
    source: SourceKind,
    n_layers: usize,
    n_experts: usize,
    top_k: usize,
    expert: CostCurve,
    /// The profile's expert entry (the curve and, when measured, the layer's split).
    expert_entry: ExpertFfnCurve,
    expert_execution: ExpertExecution,
    non_expert_prefill: CostCurve,
    non_expert_decode: CostCurve,
    head: CostCurve,
    decode_step: CostCurve,
    /// Where the curves were built from measured operations: how each operation was priced.
    pricing: Option<Arc<PricingRecord>>,
    /// The in-range sources of `pricing`, copied into every step.
    op_sources: Option<OpSources>,
}

impl CostTables {
    fn new(profile: &Profile, shape: &MoeModelShape) -> Result<CostTables, ProfileMismatch> {
        profile.check_shape(shape)?;
        let expert_entry = profile
            .expert_entry(shape.hidden, shape.expert_ffn, shape.weight_dtype)
            .expect("check_shape found the expert curve")
            .clone();
        let expert = expert_entry.curve.clone();
        Ok(CostTables {
            source: profile.source.kind,
            n_layers: shape.n_layers,
            n_experts: shape.n_experts,
            top_k: shape.top_k,
            expert,
            expert_entry,
            expert_execution: profile.expert_execution,
            non_expert_prefill: profile.non_expert_prefill.clone(),
            non_expert_decode: profile.non_expert_decode.clone(),
            head: profile.head.clone(),
            decode_step: profile.decode_step.clone(),
            pricing: None,
            op_sources: None,
        })
    }

    /// Routed tokens per expert per layer when `tokens` tokens spread evenly.
    fn even_load(&self, tokens: f64) -> f64 {
        tokens * self.top_k as f64 / self.n_experts as f64
    }

    /// Prefill of `prompt_tokens` through the whole model with evenly spread routing.
    fn even_prefill_nanos(&self, prompt_tokens: u64, n_requests: usize) -> f64 {
        let tokens = prompt_tokens as f64;
        self.n_layers as f64
            * (self.non_expert_prefill.at(tokens) + self.expert.at(self.even_load(tokens)))
            + self.head.at(n_requests as f64)
    }

    /// prefill + decode_iterations x decode step, both with evenly spread routing.
    fn base_nanos(&self, prompt_tokens: u64, n_requests: usize, decode_iterations: u32) -> f64 {
        self.even_prefill_nanos(prompt_tokens, n_requests)
            + f64::from(decode_iterations) * self.decode_step.at(n_requests as f64)
    }

    /// The routed-expert part of `base_nanos`.
    fn even_expert_nanos(
        &self,
        prompt_tokens: u64,
        n_requests: usize,
        decode_iterations: u32,
    ) -> f64 {
        let prefill = self.expert.at(self.even_load(prompt_tokens as f64));
        let decode = self.expert.at(self.even_load(n_requests as f64));
        self.n_layers as f64 * (prefill + f64::from(decode_iterations) * decode)
    }

    /// The step's expected routing, checked against the model's shape.
    fn routing<'w>(&self, work: &StepWork<'w>) -> ExpectedRouting<'w> {
        let dims = self.n_layers * self.n_experts;
        assert!(work.requests > 0, "StepWork: an empty batch was executed");
        let routing = work
            .expected_routing
            .expect("a CAPS execution model prices a step from its expected routing");
        for (name, load) in [("prefill", routing.prefill), ("decode", routing.decode)] {
            assert_eq!(
                load.len(),
                dims,
                "StepWork: the {name} routing has {} entries, the model has {} layers x {} experts",
                load.len(),
                self.n_layers,
                self.n_experts
            );
        }
        routing
    }

    /// The straggler-shaped batch: prefill = layers x non-expert(prefill tokens) + head +
    /// `moe(prefill routing)`; then `decode_iterations` x (layers x non-expert decode(requests) +
    /// head + `moe(decode routing)`).
    fn prefill_then_decode(
        &self,
        work: &StepWork<'_>,
        moe: impl Fn(&[f32]) -> f64,
        routing: ExpectedRouting<'_>,
    ) -> f64 {
        let layers = self.n_layers as f64;
        let batch = work.requests as f64;
        let prefill = layers * self.non_expert_prefill.at(work.prefill_tokens as f64)
            + self.head.at(batch)
            + moe(routing.prefill);
        let decode = if work.decode_iterations == 0 {
            0.0
        } else {
            let step = layers * self.non_expert_decode.at(batch)
                + self.head.at(batch)
                + moe(routing.decode);
            f64::from(work.decode_iterations) * step
        };
        prefill + decode
    }

    /// `nanos` as a step time from this profile.
    fn priced(&self, nanos: f64) -> StepTime {
        assert!(
            nanos.is_finite() && nanos >= 0.0,
            "batch time is {nanos} ns (a broken load vector?)"
        );
        StepTime {
            duration: SimDuration(nanos.round() as u64),
            breakdown: StepBreakdown {
                op_sources: self.op_sources,
                ..StepBreakdown::default()
            },
            source: match self.source {
                SourceKind::AnalyticRoofline => CostSource::Analytic,
                SourceKind::Measured => CostSource::Measured,
                SourceKind::MeasuredOperations => self
                    .op_sources
                    .map_or(CostSource::Analytic, |s| s.step_source()),
            },
        }
    }
}

/// How the default sensitivity came out: `sensitivity = moe_share x expected_max_normal`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SensitivityDerivation {
    pub reference: ReferenceBatch,
    /// Base time of the reference batch, ns.
    pub base_nanos: f64,
    /// Routed-expert time inside it (evenly loaded), ns.
    pub expert_nanos: f64,
    /// expert_nanos / base_nanos.
    pub moe_share: f64,
    /// E[max of n_experts iid standard normals].
    pub expected_max_normal: f64,
    pub sensitivity: f64,
}

/// caps.txt's model: base_time x (1 + CV(load) x sensitivity).
#[derive(Clone, Debug)]
pub struct CvModel {
    tables: CostTables,
    sensitivity: f64,
    derivation: SensitivityDerivation,
}

impl CvModel {
    /// The CV model on `profile`; `sensitivity: None` derives it (see [`SensitivityDerivation`]
    /// and docs/cost-model.md) at [`CAPS_REFERENCE_BATCH`].
    pub fn new(
        profile: &Profile,
        shape: &MoeModelShape,
        sensitivity: Option<f64>,
    ) -> Result<CvModel, ExecutionModelError> {
        let tables = CostTables::new(profile, shape)?;
        let derivation = derive_sensitivity(&tables, CAPS_REFERENCE_BATCH);
        let sensitivity = sensitivity.unwrap_or(derivation.sensitivity);
        if !(sensitivity.is_finite() && sensitivity >= 0.0) {
            return Err(ExecutionModelError::InvalidSensitivity(sensitivity));
        }
        Ok(CvModel {
            tables,
            sensitivity,
            derivation,
        })
    }

    /// The sensitivity in use (given, or the derived default).
    pub fn sensitivity(&self) -> f64 {
        self.sensitivity
    }

    /// How the default sensitivity is derived for this profile (also when one was given).
    pub fn derivation(&self) -> &SensitivityDerivation {
        &self.derivation
    }

    /// prefill_time + decode_time with evenly spread routing, ns.
    pub fn base_nanos(&self, work: &StepWork<'_>) -> f64 {
        self.tables.base_nanos(
            work.prefill_tokens,
            work.requests as usize,
            work.decode_iterations,
        )
    }

    pub fn batch_nanos(&self, work: &StepWork<'_>) -> f64 {
        let routing = self.tables.routing(work);
        self.base_nanos(work) * (1.0 + coefficient_of_variation(routing.prefill) * self.sensitivity)
    }
}

/// Lock-step experts: each MoE layer takes as long as its most loaded expert (on a device whose
/// profile says it runs experts one after another, as long as its experts together).
#[derive(Clone, Debug)]
pub struct StragglerModel {
    tables: CostTables,
}

impl StragglerModel {
    pub fn new(
        profile: &Profile,
        shape: &MoeModelShape,
    ) -> Result<StragglerModel, ExecutionModelError> {
        Ok(StragglerModel {
            tables: CostTables::new(profile, shape)?,
        })
    }

    /// Sum over layers of the layer's expert cost, ns: its most loaded expert's curve cost
    /// when the device runs experts concurrently; with serial execution the layer launch of
    /// `ExpertFfnCurve::serial_layer_ns` (with a measured split, the fixed part once plus each
    /// expert's GEMM pair), an expert expecting `l < 1` routed tokens counted as running one
    /// token with probability `l` (the expected cost of a layer whose loads are expectations).
    /// Allocation-free.
    fn max_expert_nanos(&self, load: &[f32]) -> f64 {
        let t = &self.tables;
        load.chunks_exact(t.n_experts)
            .map(|layer| match t.expert_execution {
                ExpertExecution::Concurrent => t.expert.at(f64::from(max_of(layer))),
                ExpertExecution::Serial => t.expert_entry.serial_layer_ns(
                    layer.iter().map(|&l| f64::from(l.max(0.0))).sum(),
                    layer.iter().map(|&l| {
                        let l = f64::from(l);
                        (l.min(1.0), l.max(1.0))
                    }),
                ),
            })
            .sum()
    }

    /// The prefill (the sum over layers of non-expert(prefill tokens) plus curve(max_e prefill
    /// routing), and the head), then decode_iterations times the decode pass (the sum over
    /// layers of non-expert decode(requests) plus curve(max_e decode routing), and the head).
    /// O(layers x experts), no allocation.
    pub fn batch_nanos(&self, work: &StepWork<'_>) -> f64 {
        let routing = self.tables.routing(work);
        self.tables
            .prefill_then_decode(work, |load| self.max_expert_nanos(load), routing)
    }
}

/// The physical model: on the one GPU that holds every expert, each MoE layer's active experts
/// run as the grouped expert GEMMs of `cost::moe_layer` (the one entry point), launched eagerly
/// (HF transformers, caps.txt's stack).
#[derive(Clone, Debug)]
pub struct GroupedModel {
    tables: CostTables,
    layer: MoeLayerCost,
}

impl GroupedModel {
    pub fn new(
        profile: &Profile,
        shape: &MoeModelShape,
        gpu: &GpuSpec,
    ) -> Result<GroupedModel, ExecutionModelError> {
        let tables = CostTables::new(profile, shape)?;
        let layer = MoeLayerCost::new(gpu, shape, Timing::Eager);
        let layer = if tables.source != SourceKind::AnalyticRoofline {
            layer.with_profile(&tables.expert_entry)
        } else {
            layer
        };
        Ok(GroupedModel { tables, layer })
    }

    /// The routed experts of every layer of `load` (layer-major), ns: the layers priced
    /// `LANES` at a time (`MoeLayerCost::expected_lanes`, each the bits of its own `gpu`
    /// call), summed in layer order.
    pub fn moe_nanos(&self, load: &[f32]) -> f64 {
        let n = self.tables.n_experts;
        load.chunks(n * LANES)
            .flat_map(|group| {
                let mut layers: [&[f32]; LANES] = [&[]; LANES];
                let mut count = 0;
                for (slot, layer) in layers.iter_mut().zip(group.chunks_exact(n)) {
                    *slot = layer;
                    count += 1;
                }
                let priced = self.layer.expected_lanes(&layers[..count]);
                priced.into_iter().take(count).map(|cost| cost.nanos)
            })
            .sum()
    }

    /// As [`StragglerModel::batch_nanos`] with each layer's experts priced as one grouped GEMM.
    pub fn batch_nanos(&self, work: &StepWork<'_>) -> f64 {
        let routing = self.tables.routing(work);
        self.tables
            .prefill_then_decode(work, |load| self.moe_nanos(load), routing)
    }
}

/// The batch execution model of a scenario.
#[derive(Clone, Debug)]
pub enum ExecutionModel {
    Grouped(Box<GroupedModel>),
    Cv(CvModel),
    Straggler(StragglerModel),
}

impl ExecutionModel {
    /// How long the static batch `work` keeps the GPU busy, and where the price comes from.
    pub fn step_time(&self, work: &StepWork<'_>) -> StepTime {
        let (nanos, tables) = match self {
            ExecutionModel::Grouped(model) => (model.batch_nanos(work), &model.tables),
            ExecutionModel::Cv(model) => (model.batch_nanos(work), &model.tables),
            ExecutionModel::Straggler(model) => (model.batch_nanos(work), &model.tables),
        };
        tables.priced(nanos)
    }

    fn tables(&self) -> &CostTables {
        match self {
            ExecutionModel::Grouped(model) => &model.tables,
            ExecutionModel::Cv(model) => &model.tables,
            ExecutionModel::Straggler(model) => &model.tables,
        }
    }

    /// "analytic-roofline", "measured" or "measured-operations": where the profile's numbers
    /// come from.
    pub fn source(&self) -> &'static str {
        self.tables().source.as_str()
    }

    /// How each operation was priced, when the profile was built from measured operations.
    pub fn pricing(&self) -> Option<&PricingRecord> {
        self.tables().pricing.as_deref()
    }

    /// The same model, its profile built from measured operations as `record` says (every
    /// step then names what priced each operation class).
    pub fn with_pricing(mut self, record: Arc<PricingRecord>) -> ExecutionModel {
        let tables = match &mut self {
            ExecutionModel::Grouped(model) => &mut model.tables,
            ExecutionModel::Cv(model) => &mut model.tables,
            ExecutionModel::Straggler(model) => &mut model.tables,
        };
        tables.op_sources = Some(record.sources());
        tables.pricing = Some(record);
        self
    }
}

/// The execution models are the CAPS family's `StepCost`s (immutable: `price` reads only).
impl StepCost for ExecutionModel {
    fn price(&mut self, work: &StepWork<'_>) -> StepTime {
        self.step_time(work)
    }
}

/// Every batch takes the same time.
pub struct ConstantService(pub SimDuration);

impl StepCost for ConstantService {
    fn price(&mut self, _: &StepWork<'_>) -> StepTime {
        reference(self.0)
    }
}

/// Batch times drawn from an exponential distribution with the given mean (inverse CDF).
pub struct ExponentialService {
    pub mean: SimDuration,
    pub rng: SimRng,
}

impl StepCost for ExponentialService {
    fn price(&mut self, _: &StepWork<'_>) -> StepTime {
        let u: f64 = self.rng.random();
        reference(SimDuration::from_secs_f64(
            -(-u).ln_1p() * self.mean.as_secs_f64(),
        ))
    }
}

fn reference(duration: SimDuration) -> StepTime {
    StepTime {
        duration,
        breakdown: StepBreakdown::default(),
        source: CostSource::Reference,
    }
}

/// The default CV sensitivity. Under lock step a layer's MoE time is the cost of its most
/// loaded expert. With a layer's expert loads approximately normal with mean m and standard
/// deviation CV x m, the most loaded of E experts carries about m (1 + CV x z_E) tokens,
/// z_E = E[max of E iid standard normals]. Where the expert cost is proportional to its
/// tokens, the MoE part of the batch stretches by (1 + CV x z_E) and the rest does not, so
///
///   T = T_rest + T_moe (1 + CV z_E) = T_base (1 + CV x z_E x T_moe / T_base),
///
/// i.e. sensitivity = z_E x (routed-expert share of the evenly loaded base time), evaluated
/// at the reference batch.
fn derive_sensitivity(tables: &CostTables, reference: ReferenceBatch) -> SensitivityDerivation {
    let prompt_tokens = reference.prompt_tokens_per_request * reference.n_requests as u64;
    let base_nanos = tables.base_nanos(
        prompt_tokens,
        reference.n_requests,
        reference.decode_iterations,
    );
    let expert_nanos = tables.even_expert_nanos(
        prompt_tokens,
        reference.n_requests,
        reference.decode_iterations,
    );
    let moe_share = if base_nanos > 0.0 {
        expert_nanos / base_nanos
    } else {
        0.0
    };
    let expected_max_normal = expected_max_standard_normal(tables.n_experts);
    SensitivityDerivation {
        reference,
        base_nanos,
        expert_nanos,
        moe_share,
        expected_max_normal,
        sensitivity: moe_share * expected_max_normal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::gpu::GpuSpec;
    use crate::cost::roofline::analytic_profile;
    use crate::recorder::expert_load::imbalance;

    fn l4_qwen() -> (Profile, MoeModelShape) {
        let shape = MoeModelShape::qwen1_5_moe_a2_7b_nf4();
        (
            analytic_profile(&GpuSpec::by_name("L4").unwrap(), &shape),
            shape,
        )
    }

    /// `n_requests` requests of `tokens` prompt tokens; each layer routes `fraction_hot` of
    /// the routings onto experts 0..top_k and spreads the rest evenly.
    fn loads(
        shape: &MoeModelShape,
        n_requests: usize,
        tokens: u64,
        fraction_hot: f64,
    ) -> (Vec<f32>, Vec<f32>) {
        let routings = (n_requests as u64 * tokens * shape.top_k as u64) as f64;
        let mut load = vec![0.0f32; shape.n_layers * shape.n_experts];
        for layer in load.chunks_exact_mut(shape.n_experts) {
            for (e, value) in layer.iter_mut().enumerate() {
                let hot = if e < shape.top_k {
                    fraction_hot * routings / shape.top_k as f64
                } else {
                    0.0
                };
                *value = (hot + (1.0 - fraction_hot) * routings / shape.n_experts as f64) as f32;
            }
        }
        let decode = load.iter().map(|&x| x / tokens as f32).collect();
        (load, decode)
    }

    /// A static batch of `n_requests` prompts of `tokens` tokens and `iterations` decode passes.
    fn work<'a>(
        load: &'a [f32],
        decode: &'a [f32],
        n_requests: usize,
        tokens: u64,
        iterations: u32,
    ) -> StepWork<'a> {
        StepWork {
            requests: n_requests as u64,
            prefill_tokens: n_requests as u64 * tokens,
            decode_tokens: n_requests as u64 * u64::from(iterations),
            decode_iterations: iterations,
            expected_routing: Some(ExpectedRouting {
                layers: load.len() / 60, // Qwen1.5-MoE: 60 routed experts
                prefill: load,
                decode,
            }),
            ..StepWork::default()
        }
    }

    #[test]
    fn serial_experts_cost_their_sum_and_a_fractional_load_its_share() {
        let (mut profile, shape) = l4_qwen();
        let concurrent = StragglerModel::new(&profile, &shape).unwrap();
        profile.expert_execution = ExpertExecution::Serial;
        let serial = StragglerModel::new(&profile, &shape).unwrap();
        let expert = &serial.tables.expert;
        let n = shape.n_experts;
        let mut layer = vec![0.0f32; n];
        layer[0] = 40.0;
        // One active expert: both orders agree.
        assert_eq!(
            serial.max_expert_nanos(&layer),
            concurrent.max_expert_nanos(&layer)
        );
        layer[1] = 10.0;
        layer[2] = 0.25;
        let want = expert.at(40.0) + expert.at(10.0) + 0.25 * expert.at(1.0);
        assert!((serial.max_expert_nanos(&layer) - want).abs() < 1e-6);
        assert_eq!(concurrent.max_expert_nanos(&layer), expert.at(40.0));
    }

    #[test]
    fn straggler_grows_when_load_concentrates() {
        let (profile, shape) = l4_qwen();
        let model = ExecutionModel::Straggler(StragglerModel::new(&profile, &shape).unwrap());
        let (even, even_decode) = loads(&shape, 8, 128, 0.0);
        let (hot, hot_decode) = loads(&shape, 8, 128, 0.5);
        let (hotter, hotter_decode) = loads(&shape, 8, 128, 1.0);
        let total = |l: &[f32]| l.iter().map(|&x| f64::from(x)).sum::<f64>();
        assert!((total(&even) - total(&hotter)).abs() < 1.0);
        let time = |load, decode| model.step_time(&work(load, decode, 8, 128, 16)).duration;
        let t_even = time(&even, &even_decode);
        let t_hot = time(&hot, &hot_decode);
        let t_hotter = time(&hotter, &hotter_decode);
        assert!(
            t_even < t_hot && t_hot < t_hotter,
            "{t_even:?} {t_hot:?} {t_hotter:?}"
        );
        assert_eq!(model.source(), "analytic-roofline");
    }

    #[test]
    fn cv_equals_base_when_even_and_grows_with_cv() {
        let (profile, shape) = l4_qwen();
        let model = ExecutionModel::Cv(CvModel::new(&profile, &shape, Some(0.5)).unwrap());
        let ExecutionModel::Cv(cv) = &model else {
            unreachable!()
        };
        let (even, even_decode) = loads(&shape, 8, 128, 0.0);
        let w = work(&even, &even_decode, 8, 128, 16);
        assert_eq!(
            model.step_time(&w).duration,
            SimDuration(cv.base_nanos(&w).round() as u64)
        );
        let mut previous = model.step_time(&w).duration;
        for fraction in [0.1, 0.3, 0.6, 1.0] {
            let (load, decode) = loads(&shape, 8, 128, fraction);
            let w = work(&load, &decode, 8, 128, 16);
            let t = model.step_time(&w).duration;
            assert!(t > previous, "fraction {fraction}: {t:?} <= {previous:?}");
            let expected = cv.base_nanos(&w) * (1.0 + 0.5 * coefficient_of_variation(&load));
            assert!((t.0 as f64 - expected).abs() <= 1.0);
            previous = t;
        }
    }

    #[test]
    fn both_models_agree_on_an_even_load() {
        let (profile, shape) = l4_qwen();
        let cv = ExecutionModel::Cv(CvModel::new(&profile, &shape, None).unwrap());
        let straggler = ExecutionModel::Straggler(StragglerModel::new(&profile, &shape).unwrap());
        // 120 tokens x 4 / 60 = 8 routings per expert: exact in f32.
        let (even, even_decode) = loads(&shape, 15, 8, 0.0);
        let w = work(&even, &even_decode, 15, 8, 20);
        let (a, b) = (
            cv.step_time(&w).duration.0 as f64,
            straggler.step_time(&w).duration.0 as f64,
        );
        assert!((a - b).abs() <= 2.0, "cv {a} vs straggler {b}");
    }

    #[test]
    fn a_profile_built_from_measured_operations_names_each_source_in_every_step() {
        use crate::cost::measured_steps::{MeasuredSet, StepOperation, moe};
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles/vidur/a100");
        let set = MeasuredSet::load("vidur/a100", &dir).unwrap();
        let mut shape = MoeModelShape::mixtral_8x7b();
        shape.n_layers = 2;
        let built = moe(&set, &shape, 1);
        let model = ExecutionModel::Straggler(StragglerModel::new(&built.profile, &shape).unwrap())
            .with_pricing(Arc::new(built.record));
        assert_eq!(model.source(), "measured-operations");
        assert_eq!(model.pricing().unwrap().measured, "vidur/a100");
        // One 16-token prompt, both layers routing every token to experts 0 and 1 (top-2).
        let mut prefill = vec![0.0f32; 16];
        for layer in 0..2 {
            prefill[layer * 8] = 16.0;
            prefill[layer * 8 + 1] = 16.0;
        }
        let decode = vec![0.0f32; 16];
        let work = StepWork {
            requests: 1,
            prefill_tokens: 16,
            decode_tokens: 1,
            expected_routing: Some(ExpectedRouting {
                layers: 2,
                prefill: &prefill,
                decode: &decode,
            }),
            ..StepWork::default()
        };
        let step = model.step_time(&work);
        // Mixtral's expert and attention shapes are measured on the A100; attention kernel,
        // router and head are not in the data and do not make the step less than measured.
        assert_eq!(step.source, CostSource::Measured);
        let sources = step.breakdown.op_sources.unwrap();
        for (operation, source) in [
            (StepOperation::RoutedExperts, CostSource::Measured),
            (StepOperation::AttentionProjections, CostSource::Measured),
            (StepOperation::Elementwise, CostSource::Measured),
            (StepOperation::Router, CostSource::Analytic),
            (StepOperation::Attention, CostSource::Analytic),
        ] {
            assert_eq!(
                sources.get(operation),
                Some(source),
                "{}",
                operation.as_str()
            );
        }
        // The analytic twin names no per-operation source.
        let gpu = GpuSpec::by_name("A100-80GB").unwrap();
        let analytic = StragglerModel::new(&analytic_profile(&gpu, &shape), &shape).unwrap();
        let step = ExecutionModel::Straggler(analytic).step_time(&work);
        assert_eq!(step.source, CostSource::Analytic);
        assert!(step.breakdown.op_sources.is_none());
    }

    #[test]
    fn default_sensitivity_is_derived_from_the_profile() {
        let (profile, shape) = l4_qwen();
        let model = CvModel::new(&profile, &shape, None).unwrap();
        let d = *model.derivation();
        assert_eq!(model.sensitivity(), d.sensitivity);
        assert!(d.moe_share > 0.0 && d.moe_share < 1.0);
        assert!((d.sensitivity - d.moe_share * expected_max_standard_normal(60)).abs() < 1e-12);
        assert!(matches!(
            CvModel::new(&profile, &shape, Some(-1.0)),
            Err(ExecutionModelError::InvalidSensitivity(_))
        ));
        let mut other = shape.clone();
        other.n_experts = 64;
        assert!(matches!(
            CvModel::new(&profile, &other, None),
            Err(ExecutionModelError::Profile(_))
        ));
    }

    /// Prints the numbers docs/cost-model.md quotes:
    /// `cargo test -p expertsim-serving --lib reference_numbers -- --nocapture`.
    #[test]
    fn reference_numbers() {
        let (profile, shape) = l4_qwen();
        let curve = profile
            .expert_curve(shape.hidden, shape.expert_ffn, shape.weight_dtype)
            .unwrap();
        println!("expert FFN curve (L4, Qwen1.5-MoE-A2.7B nf4), tokens -> us:");
        for tokens in [
            1.0, 32.0, 64.0, 65.0, 128.0, 129.0, 192.0, 256.0, 512.0, 1024.0, 4096.0, 8192.0,
        ] {
            println!("  {tokens:>6} -> {:9.3}", curve.at(tokens) / 1e3);
        }
        for (name, c) in [
            (
                "non_expert_prefill (per layer, tokens)",
                &profile.non_expert_prefill,
            ),
            (
                "non_expert_decode (per layer, batch)",
                &profile.non_expert_decode,
            ),
            ("head (batch)", &profile.head),
            ("decode_step (batch)", &profile.decode_step),
        ] {
            let points: Vec<String> = [1.0, 8.0, 64.0, 1024.0]
                .iter()
                .map(|&n| format!("{n} -> {:.3} us", c.at(n) / 1e3))
                .collect();
            println!("{name}: {}", points.join(", "));
        }
        let cv = CvModel::new(&profile, &shape, None).unwrap();
        let d = cv.derivation();
        println!(
            "sensitivity: base {:.3} ms, routed-expert part {:.3} ms, share {:.5}, z_60 {:.5}, sensitivity {:.5}",
            d.base_nanos / 1e6,
            d.expert_nanos / 1e6,
            d.moe_share,
            d.expected_max_normal,
            d.sensitivity
        );
        let straggler = StragglerModel::new(&profile, &shape).unwrap();
        let grouped =
            GroupedModel::new(&profile, &shape, &GpuSpec::by_name("L4").unwrap()).unwrap();
        for iterations in [16, 0] {
            println!("8 requests x 128 prompt tokens, {iterations} decode passes:");
            for fraction in [0.0, 0.05, 0.1, 0.25, 0.5, 1.0] {
                let label = format!("{:.0} % on 4 hot experts", fraction * 100.0);
                let (load, decode) = loads(&shape, 8, 128, fraction);
                let w = work(&load, &decode, 8, 128, iterations);
                println!(
                    "  {label:<22} CV {:6.3}  imbalance {:6.3}  base {:8.3} ms  cv {:8.3} ms  straggler {:8.3} ms  grouped {:8.3} ms",
                    coefficient_of_variation(&load),
                    imbalance(&load, shape.n_experts),
                    cv.base_nanos(&w) / 1e6,
                    cv.batch_nanos(&w) / 1e6,
                    straggler.batch_nanos(&w) / 1e6,
                    grouped.batch_nanos(&w) / 1e6
                );
            }
        }
        assert!(d.sensitivity > 0.0);
    }
}
