//! An ExpertWeave instance's steps priced through the serving layer's one step-cost seam
//! (`serving::StepCost`) from the cost model's one roofline: the non-expert part of the MLA-MoE
//! model (`cost::roofline::StepRoofline::mla_moe_non_expert`: weights, the latent KV cache the
//! decoding sequences read, attention and GEMM FLOPs on tile-padded rows, launches), each MoE
//! layer's expected expert reads as one grouped GEMM spread over the instance's devices
//! (`cost::moe_layer`, base experts and the adapters' copies as distinct weights to stream,
//! `Popularity`), and, where the instance reroutes, the batched-rerouting operator priced as the
//! bytes it moves (`cost::roofline::Roofline`).

use super::config::{ExpertWeaveScenario, Rerouting};
use super::memory::InstancePlan;
use super::popularity::Popularity;
use crate::cost::moe_layer::{MoeLayerCost, MoeLayerParams, SpeedFactors};
use crate::cost::roofline::{Roofline, StepRoofline, StepTokens};
use crate::cost::shape::WeightDtype;
use crate::serving::{CostSource, StepBreakdown, StepCost, StepTime, StepWork};
use crate::time::SimDuration;

/// Kernels per transformer layer outside the routed experts and rerouting (norms, projections,
/// attention, router, combine), each paying one launch per step; the routed experts' grouped
/// GEMM launches its own 3 (`cost::moe_layer`), 8 per MoE layer in all.
pub const NON_EXPERT_KERNELS_PER_LAYER: u32 = 5;

/// What a step asks of the model's dense part: its token rows, the sequences the head scores,
/// the KV the decoding sequences attend to, and the causal prefill's squared prompt lengths.
pub fn step_tokens(work: &StepWork<'_>) -> StepTokens {
    let (mut context, mut prefill_square) = (0u64, 0.0f64);
    for s in work.batch.iter().filter(|s| s.scheduled() > 0) {
        let prefill = s.step_prefill();
        if prefill > 0 {
            prefill_square += f64::from(prefill) * f64::from(prefill);
        } else {
            context += u64::from(s.step_context());
        }
    }
    StepTokens {
        rows: work.prefill_tokens + work.decode_tokens,
        sequences: work.requests,
        context_tokens: context,
        prefill_square,
    }
}

/// The analytic step cost of one instance.
pub struct RooflineStepCost<'a> {
    instance: &'a InstancePlan,
    popularity: &'a Popularity,
    top_k: u64,
    moe_layers: u64,
    experts: MoeLayerCost,
    non_expert: StepRoofline,
    /// Rerouting per MoE layer: operators, bytes per token, bytes per step (the expert map);
    /// `None` when the instance does not reroute.
    rerouting: Option<(f64, f64, f64)>,
    /// (probability read, routed rows) of every expert weight of one layer, reused.
    weights: Vec<(f64, f64)>,
}

impl<'a> RooflineStepCost<'a> {
    pub fn new(
        scenario: &ExpertWeaveScenario,
        instance: &'a InstancePlan,
        popularity: &'a Popularity,
    ) -> RooflineStepCost<'a> {
        let shape = &scenario.shape;
        let devices = instance.n_devices;
        let experts = MoeLayerCost::for_experts(
            &scenario.gpu,
            shape.hidden as usize,
            shape.expert_ffn as usize,
            WeightDtype::Bf16,
            MoeLayerParams::default(),
        );
        let non_expert = StepRoofline::mla_moe_non_expert(
            shape,
            Roofline::of(&scenario.gpu),
            scenario.tensor_parallel.min(devices),
            devices,
            NON_EXPERT_KERNELS_PER_LAYER,
        );
        // Per MoE layer and token: read its adapter id and its top-k ids, write the top-k ids
        // (int32); per step: the expert map's rows of the instance's adapters. The unfused chain
        // moves its intermediate arrays through memory once per operator.
        let rerouting = instance.reroutes.then(|| {
            let operators = match scenario.cost.rerouting {
                Rerouting::Fused => 1.0,
                Rerouting::Unfused => scenario.cost.unfused_ops as f64,
            };
            let per_token = (4 + 2 * 4 * shape.top_k) as f64;
            let per_step = (instance.adapters.len() as u64 * shape.n_routed_experts * 4) as f64;
            (operators, per_token, per_step)
        });
        RooflineStepCost {
            instance,
            popularity,
            top_k: shape.top_k,
            moe_layers: shape.n_moe_layers(),
            experts,
            non_expert,
            rerouting,
            weights: Vec::new(),
        }
    }
}

impl StepCost for RooflineStepCost<'_> {
    fn price(&mut self, work: &StepWork<'_>) -> StepTime {
        let tokens = step_tokens(work);
        let dense = self.non_expert.price(&tokens);
        let devices = self.instance.n_devices as f64;
        let use_adapters = self.instance.adapter_experts && self.instance.reroutes;
        let mut moe_ns = 0.0;
        for layer in 0..self.moe_layers as usize {
            self.popularity.expected_reads(
                layer,
                work.adapters,
                self.top_k,
                use_adapters,
                &mut self.weights,
            );
            moe_ns += self.experts.grouped_gemm_spread(
                self.weights
                    .iter()
                    .filter(|(read, _)| *read > 0.0)
                    .map(|&(read, rows)| (read, rows / read)),
                devices,
                SpeedFactors::NOMINAL,
            );
        }
        // Rerouting: per MoE layer its operators, each a launch plus the bytes it moves.
        let (mut reroute_ns, mut reroute_launch_ns) = (0.0, 0.0);
        if let Some((operators, per_token, per_step)) = self.rerouting {
            let roofline = &self.experts.roofline;
            let bytes = tokens.rows as f64 * per_token + per_step;
            let operators = self.moe_layers as f64 * operators;
            reroute_ns = operators * roofline.op(bytes / devices, 0.0).nanos();
            reroute_launch_ns = operators * roofline.launch_ns;
        }
        let nanos = dense.nanos + moe_ns + reroute_ns + reroute_launch_ns;
        StepTime {
            duration: SimDuration(nanos.round().max(1.0) as u64),
            breakdown: StepBreakdown {
                compute_ns: dense.compute_ns,
                memory_ns: dense.memory_ns + reroute_ns,
                communication_ns: dense.communication_ns,
                overhead_ns: dense.overhead_ns + reroute_launch_ns,
                moe_ns,
                per_gpu_busy_ns: Vec::new(),
            },
            source: CostSource::Analytic,
        }
    }
}
