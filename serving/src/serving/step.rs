//! The one step-cost seam: what a step does (requests, prefill and decode tokens, context
//! lengths, the decode iterations of a static batch run as one step, optionally the tokens
//! routed to each expert and GPU per layer, counted or expected, the adapters touched, swapped
//! tokens) in, its duration with a breakdown and the source of the price out. Families
//! implement `StepCost` over the cost model (`RooflineStepCost` prices a dense model's steps by
//! the one roofline, `MeasuredStepCost` from a measured set's operations); live mode wraps any
//! `StepCost` (predict, measure, record, pick the clock).

use super::replica::Seq;
use crate::cost::measured_steps::MeasuredDenseStep;
use crate::cost::roofline::{StepRoofline, StepTokens};
pub use crate::cost::source::CostSource;
use crate::time::SimDuration;
use serde::Serialize;

/// Tokens routed in one step of an MoE model, row-major per layer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RoutedTokens<'a> {
    pub layers: usize,
    /// `layers x experts`: tokens routed to each expert.
    pub per_expert: &'a [u32],
    /// `layers x gpus`: tokens each GPU computes (after the expert-to-GPU mapping).
    pub per_gpu: &'a [u32],
    /// `layers x gpus x slots per GPU`: tokens each expert slot of each GPU computes, where the
    /// router gives them (the serving family's trace replay on a plain layout, each layer's
    /// slots summing to its assignments below 2^30); empty where the step cost splits
    /// `per_expert` over its own layout.
    pub per_slot: &'a [u32],
    /// Per MoE layer, the tokens of the adapters' fine-tuned expert copies (already counted in
    /// `per_gpu`, not in `per_expert`); empty without adapters.
    pub copies: &'a [Vec<CopyTokens>],
}

/// Tokens an adapter's fine-tuned copy of an expert computes in one MoE layer of a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyTokens {
    /// The base expert it is a copy of (its GPU hosts the copy).
    pub expert: u32,
    pub tokens: u32,
}

/// The routing of a step as expected tokens per layer per expert, where a family models routing
/// by its expectation rather than by counted tokens (CAPS: a request's load vector is the
/// expected routing of its prompt). Fractions matter: an expert expecting 0.3 tokens in a decode
/// iteration is read in 30% of them. Both slices are `layers x experts`, layer-major.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ExpectedRouting<'a> {
    pub layers: usize,
    /// Over the step's prefill tokens.
    pub prefill: &'a [f32],
    /// In each of the step's decode iterations (`StepWork::decode_iterations`).
    pub decode: &'a [f32],
}

/// The tokens one adapter's sequences compute in a step (prefill and decode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdapterTokens {
    pub adapter: u32,
    pub tokens: u64,
}

/// One step's work, as the replica scheduled it.
#[derive(Clone, Copy, Debug, Default)]
pub struct StepWork<'a> {
    /// Sequences in the step.
    pub requests: u64,
    /// Prompt tokens prefilled in the step (whole prompts, chunks, recomputed tokens).
    pub prefill_tokens: u64,
    /// Decode tokens computed in the step: one per decoding sequence in a continuous-batching
    /// step; `requests x decode_iterations` in a static batch run as one step.
    pub decode_tokens: u64,
    /// Forward passes of the whole batch after its prefill pass, each decoding one token of every
    /// sequence: 0 in a continuous-batching step (one pass: prefill chunks and one token per
    /// decoding sequence); in a static batch run as one step, its longest output minus one (the
    /// prefill pass emits each sequence's first token; a sequence that has emitted its output is
    /// padded along until the longest finishes).
    pub decode_iterations: u32,
    /// KV tokens the step's sequences hold once it runs (the attention context), summed.
    pub context_tokens: u64,
    /// Sequences in the step that emit a token (`Seq::step_emits`: a decode, or the chunk that
    /// completes a prompt), and the squares of the prompt tokens each prefills in it
    /// (`Seq::step_prefill`) summed: the batch's, counted as the replica scheduled it (0 for a
    /// step built without a batch).
    pub emitting: u64,
    pub prefill_square: f64,
    /// The replica's running sequences; those with `scheduled() > 0` are in the step, each with
    /// its context once the step runs (`step_context`) and the prompt tokens it prefills in it
    /// (`step_prefill`). A slice of the batch rather than copied lengths: a cost model that
    /// needs no per-sequence term pays nothing for them.
    pub batch: &'a [Seq],
    /// MoE routing of the step in counted tokens, where the family models it so.
    pub routed: Option<RoutedTokens<'a>>,
    /// MoE routing of the step as expectations, where the family models it so.
    pub expected_routing: Option<ExpectedRouting<'a>>,
    /// Adapters (LoRA, ESFT expert sets) the step's sequences run with, distinct and by id,
    /// each with the tokens its sequences compute in the step (`AdmitHook::adapter`; empty when
    /// no sequence has one).
    pub adapters: &'a [AdapterTokens],
    /// KV tokens moved to host memory before the step (swap preemption).
    pub swapped_out_tokens: u64,
    /// KV tokens moved back to the GPU before the step.
    pub swapped_in_tokens: u64,
}

/// A step cost that notes, in a cell shared by all the step costs of a run, the least measured
/// source its steps report: what results name as the run's cost model (`cells[].cost_model`).
pub struct NotingSource<'a> {
    steps: Box<dyn StepCost + 'a>,
    least_measured: std::rc::Rc<std::cell::Cell<Option<CostSource>>>,
}

impl<'a> NotingSource<'a> {
    /// `steps`, noting into `least_measured` (none until a step is priced).
    pub fn new(
        steps: Box<dyn StepCost + 'a>,
        least_measured: &std::rc::Rc<std::cell::Cell<Option<CostSource>>>,
    ) -> Self {
        NotingSource {
            steps,
            least_measured: std::rc::Rc::clone(least_measured),
        }
    }
}

impl StepCost for NotingSource<'_> {
    fn price(&mut self, work: &StepWork<'_>) -> StepTime {
        let time = self.steps.price(work);
        let least = match self.least_measured.get() {
            Some(seen) => seen.less_measured(time.source),
            None => time.source,
        };
        self.least_measured.set(Some(least));
        time
    }
}

/// The parts of a step's time, in ns (a part may overlap others: the duration is not their sum
/// when compute and memory overlap). A cost model leaves at 0 (or empty) what it does not split.
#[derive(Clone, Debug, PartialEq, Default, Serialize)]
pub struct StepBreakdown {
    pub compute_ns: f64,
    pub memory_ns: f64,
    pub communication_ns: f64,
    pub overhead_ns: f64,
    /// Time in the MoE layers' routed experts, part of the duration (under expert parallelism
    /// each layer's slowest GPU).
    pub moe_ns: f64,
    /// Under expert parallelism, each GPU's own busy time in the step (its experts' work and its
    /// share of the rest; a GPU waiting at a layer barrier is not busy). Empty otherwise.
    pub per_gpu_busy_ns: Vec<f64>,
    /// Where the step is priced from measured operations (`cost::measured_steps`), which of
    /// measured, scaled or analytic priced each of its operation classes; `source` is then the
    /// least measured of those the data can hold.
    pub op_sources: Option<crate::cost::measured_steps::OpSources>,
    /// The step by kernel class, where the cost model prices it so (the serving family).
    pub parts: StepParts,
}

/// A step's time by what runs in it, ns; with `StepBreakdown::moe_ns` (routed experts) and
/// `communication_ns` these add up to the step's duration where a cost model fills them
/// (the serving family's `--trace-events` slices show them).
#[derive(Clone, Copy, Debug, PartialEq, Default, Serialize)]
pub struct StepParts {
    /// The layers' weight GEMMs (QKV, attention output, MLP or shared experts, router; from
    /// measured operations also the MLP's activation, which Vidur's MLP class holds).
    pub linear_ns: f64,
    /// Norms, rotary embedding, residual add (and, priced by the roofline, the activation).
    pub elementwise_ns: f64,
    /// The attention kernels over the KV cache.
    pub attention_ns: f64,
    /// The output head.
    pub head_ns: f64,
    /// The host's time (`cost::host`).
    pub host_ns: f64,
}

/// A priced step.
#[derive(Clone, Debug, PartialEq)]
pub struct StepTime {
    pub duration: SimDuration,
    pub breakdown: StepBreakdown,
    pub source: CostSource,
}

/// Prices a step. `&mut self` so that a live implementation can run and record it.
pub trait StepCost {
    fn price(&mut self, work: &StepWork<'_>) -> StepTime;
}

/// A boxed step cost prices as the cost it holds (so a wrapper can take a family's chosen cost).
impl<T: StepCost + ?Sized> StepCost for Box<T> {
    fn price(&mut self, work: &StepWork<'_>) -> StepTime {
        (**self).price(work)
    }
}

impl StepWork<'_> {
    /// The step as a dense model's roofline reads it: its prefill and decode tokens are the rows
    /// through every layer, its sequences the rows the output head scores, its context the
    /// attention's reads, and the squared prompt chunks of the sequences that prefill in it the
    /// causal prefill's (summed only when the step prefills).
    pub fn dense_tokens(&self) -> StepTokens {
        debug_assert_eq!(
            self.prefill_square,
            self.batch
                .iter()
                .map(|seq| f64::from(seq.step_prefill()).powi(2))
                .sum::<f64>()
        );
        StepTokens {
            rows: self.decode_tokens + self.prefill_tokens,
            sequences: self.requests,
            context_tokens: self.context_tokens,
            prefill_square: self.prefill_square,
        }
    }
}

/// A dense model's steps priced by the cost model's one roofline (`cost::roofline`) on
/// [`StepWork::dense_tokens`], with the roofline's split into compute, memory, communication
/// and overhead as the breakdown.
pub struct RooflineStepCost<'a>(pub &'a StepRoofline);

impl StepCost for RooflineStepCost<'_> {
    fn price(&mut self, work: &StepWork<'_>) -> StepTime {
        let price = self.0.price(&work.dense_tokens());
        StepTime {
            duration: SimDuration(price.nanos.round() as u64),
            breakdown: StepBreakdown {
                compute_ns: price.compute_ns,
                memory_ns: price.memory_ns,
                communication_ns: price.communication_ns,
                overhead_ns: price.overhead_ns,
                ..StepBreakdown::default()
            },
            source: CostSource::Analytic,
        }
    }
}

/// A dense model's steps priced from measured operations (`cost::measured_steps`) on
/// [`StepWork::dense_tokens`]: the duration is `MeasuredDenseStep::price`'s, the breakdown
/// carries the roofline-priced parts and which source priced each operation, and the step's
/// source is the least measured of the operations the data can hold.
pub struct MeasuredStepCost<'a>(pub &'a MeasuredDenseStep);

impl StepCost for MeasuredStepCost<'_> {
    fn price(&mut self, work: &StepWork<'_>) -> StepTime {
        let (price, op_sources) = self.0.price(&work.dense_tokens());
        StepTime {
            duration: SimDuration(price.nanos.round() as u64),
            breakdown: StepBreakdown {
                compute_ns: price.compute_ns,
                memory_ns: price.memory_ns,
                communication_ns: price.communication_ns,
                overhead_ns: price.overhead_ns,
                op_sources: Some(op_sources),
                ..StepBreakdown::default()
            },
            source: op_sources.step_source(),
        }
    }
}
