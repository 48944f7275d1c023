//! The serving family's step cost, behind the serving layer's `StepCost` seam: the dense part
//! (a dense model's whole step, an MoE model's attention, shared experts, router and head) on
//! the cost model's roofline (`StepRoofline::dense` / `moe_non_expert_tensor_parallel`: weights
//! and KV streamed, GEMM FLOPs on tile-padded rows, attention, the tensor-parallel all-reduces,
//! the host's per-step overhead), each GPU at its own speed factors and the slowest setting the
//! pace; then each MoE layer as `cost::moe_layer` prices it: per expert-parallel group, the
//! slowest GPU's grouped GEMM over the tokens routed to its experts plus the all-to-all
//! dispatch and combine, the layer waiting for its slowest group. The step's rows, sequences
//! and context split evenly over the data-parallel copies of the dense part. An MLA model's
//! dense part is `StepRoofline::mla_moe_non_expert` (latent cache held whole by every rank).
//! With adapters (`super::adapters`), the adapters' expert copies a step routes tokens to are
//! more weights in the grouped GEMM of the GPU hosting their base expert, and the rerouting
//! operator of every MoE layer adds the bytes it moves (`ReroutingCost`).

use super::adapters::{CopyTokens, ReroutingCost};
use super::config::{ServedModel, ServingScenario};
use super::deployment::{Deployment, LinearPlacement};
use crate::cost::gpu::LinkSpec;
use crate::cost::moe_layer::{MoeLayerCost, MoeLayerParams, SpeedFactors};
use crate::cost::roofline::{Roofline, StepPrice, StepRoofline, StepTokens, TensorParallel};
use crate::expertweave::memory::InstancePlan;
use crate::serving::{CostSource, RoutedTokens, StepBreakdown, StepCost, StepTime, StepWork};
use crate::time::SimDuration;

/// The routed experts of an MoE replica.
struct MoePart {
    layer: MoeLayerCost,
    placement: LinearPlacement,
    speeds: Vec<SpeedFactors>,
    link: LinkSpec,
    n_layers: usize,
    top_k: usize,
    /// One GPU's tokens per hosted expert, then per hosted adapter copy (scratch).
    gpu_tokens: Vec<u32>,
    /// Per MoE layer, the adapter copies' tokens of the step being priced (`set_adapter_copies`).
    copies: Vec<Vec<CopyTokens>>,
    /// The rerouting operators, when the replica reroutes tokens to adapters.
    rerouting: Option<ReroutingCost>,
}

/// A replica's step cost.
pub struct ReplicaStepCost {
    /// The dense part at each distinct speed of the replica's GPUs (its roofline scaled by the
    /// speed factors), priced once per step each.
    dense: Vec<StepRoofline>,
    /// Which of `dense` each GPU runs at.
    dense_of_gpu: Vec<usize>,
    data_parallel: u64,
    moe: Option<MoePart>,
    /// FLOPs of one token in one routed expert.
    expert_flops_per_token: f64,
}

/// `value / parts`, rounded up.
fn share(value: u64, parts: u64) -> u64 {
    value.div_ceil(parts)
}

impl ReplicaStepCost {
    /// The step cost of `scenario`'s replica on `deployment` (with adapters, `plan` is the
    /// memory manager's plan of the replica: whether it reroutes).
    pub fn new(
        scenario: &ServingScenario,
        deployment: &Deployment,
        plan: Option<&InstancePlan>,
    ) -> ReplicaStepCost {
        let r = &scenario.replica;
        let parallel = TensorParallel {
            degree: r.tensor_parallel as u32,
            link: r.link,
        };
        let nominal = Roofline::of(&r.gpu);
        let mut distinct: Vec<SpeedFactors> = Vec::new();
        let dense_of_gpu = r
            .speeds
            .iter()
            .map(|speed| {
                distinct.iter().position(|s| s == speed).unwrap_or_else(|| {
                    distinct.push(*speed);
                    distinct.len() - 1
                })
            })
            .collect();
        let dense = distinct
            .iter()
            .map(|&speed| {
                let roofline = nominal.scaled(speed);
                match &scenario.model {
                    ServedModel::Dense(shape) => {
                        StepRoofline::dense(shape, roofline, parallel, r.step_overhead_ns)
                    }
                    ServedModel::Moe(shape) => StepRoofline::moe_non_expert_tensor_parallel(
                        shape,
                        roofline,
                        parallel,
                        2.0,
                        r.step_overhead_ns,
                    ),
                    // One tensor-parallel group (the rows split over the data-parallel copies
                    // as for the other models), its kernels in the step's CUDA graph.
                    ServedModel::Mla(shape) => StepRoofline {
                        kernels_head: 0,
                        host_overhead_ns: r.step_overhead_ns,
                        all_reduce: (parallel.degree > 1)
                            .then_some((shape.hidden as f64 * 2.0, parallel)),
                        ..StepRoofline::mla_moe_non_expert(
                            shape,
                            roofline,
                            parallel.degree.into(),
                            parallel.degree.into(),
                            0,
                        )
                    },
                }
            })
            .collect();
        let (moe, expert_flops_per_token) = match (scenario.model.experts(), deployment.placement) {
            (Some(shape), Some(placement)) => {
                // CUDA graphs capture the grouped MoE kernels with the rest of the step: no
                // launch of their own (the host overhead covers the graph replay).
                let params = MoeLayerParams {
                    launches_per_layer: 0,
                    ..MoeLayerParams::default()
                };
                let layer = MoeLayerCost::new(&r.gpu, &shape, params);
                let rerouting = match (&scenario.model, &scenario.adapters, plan) {
                    (ServedModel::Mla(mla), Some(adapters), Some(plan)) => {
                        ReroutingCost::new(mla, adapters, plan, r)
                    }
                    _ => None,
                };
                let flops = layer.expert_flops_per_token;
                (
                    Some(MoePart {
                        layer,
                        placement,
                        speeds: r.speeds.clone(),
                        link: r.link,
                        n_layers: shape.n_layers,
                        top_k: shape.top_k,
                        gpu_tokens: vec![0; placement.experts_per_gpu],
                        copies: vec![Vec::new(); shape.n_layers],
                        rerouting,
                    }),
                    flops,
                )
            }
            _ => (None, 0.0),
        };
        ReplicaStepCost {
            dense,
            dense_of_gpu,
            data_parallel: deployment.data_parallel as u64,
            moe,
            expert_flops_per_token,
        }
    }

    /// Hands over the adapter copies' tokens of the step about to be priced (per MoE layer,
    /// from `AdapterRouter::route`).
    pub fn set_adapter_copies(&mut self, copies: &[Vec<CopyTokens>]) {
        if let Some(moe) = &mut self.moe {
            for (mine, given) in moe.copies.iter_mut().zip(copies) {
                mine.clear();
                mine.extend_from_slice(given);
            }
        }
    }

    /// What one data-parallel copy of the dense part computes in `work`: its share of the rows,
    /// of the sequences the head scores (those emitting a token), of the context and of the
    /// prompts' causal attention.
    fn dense_tokens(&self, work: &StepWork<'_>) -> StepTokens {
        let mut emitting = 0u64;
        let mut prefill_square = 0.0;
        for s in work.batch.iter().filter(|s| s.scheduled() > 0) {
            emitting += u64::from(s.step_emits());
            prefill_square += f64::from(s.step_prefill()).powi(2);
        }
        let dp = self.data_parallel;
        StepTokens {
            rows: share(work.prefill_tokens + work.decode_tokens, dp),
            sequences: share(emitting, dp),
            context_tokens: share(work.context_tokens, dp),
            prefill_square: prefill_square / dp as f64,
        }
    }

    /// Each GPU's model FLOPs in `work` (the dense part's useful FLOPs, no tile padding, and
    /// its routed tokens' expert FLOPs), into `out` (one per GPU).
    pub fn model_flops(&self, work: &StepWork<'_>, out: &mut [f64]) {
        let dense = self.dense[0].model_flops(&self.dense_tokens(work));
        out.fill(dense);
        if let Some(routed) = work.routed {
            let gpus = out.len();
            for row in routed.per_gpu.chunks_exact(gpus) {
                for (o, &n) in out.iter_mut().zip(row) {
                    *o += f64::from(n) * self.expert_flops_per_token;
                }
            }
        }
    }

    /// A decode step of `sequences` sequences holding `context` tokens each, their routed
    /// tokens spread over the experts as evenly as whole tokens allow (every layer alike):
    /// the profile whose duration is Chimera's `decode_ms_per_token` (`serving_family::activity`).
    pub fn decode_profile(&mut self, sequences: u64, context: u64) -> StepTime {
        let dp = self.data_parallel;
        let tokens = StepTokens {
            rows: share(sequences, dp),
            sequences: share(sequences, dp),
            context_tokens: share(sequences * context, dp),
            prefill_square: 0.0,
        };
        let Some(moe) = &self.moe else {
            return self.price_tokens(&tokens, None, sequences);
        };
        let (experts, gpus) = (moe.placement.n_experts, moe.placement.gpus());
        let assignments = sequences * moe.top_k as u64;
        let layer: Vec<u32> = (0..experts as u64)
            .map(|e| {
                (assignments / experts as u64 + u64::from(e < assignments % experts as u64)) as u32
            })
            .collect();
        let mut gpu_tokens = vec![0u32; moe.placement.experts_per_gpu];
        let per_gpu_layer: Vec<u32> = (0..gpus)
            .map(|g| {
                moe.placement.gpu_tokens(&layer, g, &mut gpu_tokens);
                gpu_tokens.iter().sum()
            })
            .collect();
        let layers = moe.n_layers;
        let per_expert = layer.repeat(layers);
        let per_gpu = per_gpu_layer.repeat(layers);
        self.price_tokens(
            &tokens,
            Some(RoutedTokens {
                layers,
                per_expert: &per_expert,
                per_gpu: &per_gpu,
            }),
            sequences,
        )
    }

    /// The step of one data-parallel copy's `tokens` with `routed` MoE tokens, the whole
    /// replica's step computing `step_rows` rows (what a rerouting operator reads).
    fn price_tokens(
        &mut self,
        tokens: &StepTokens,
        routed: Option<RoutedTokens<'_>>,
        step_rows: u64,
    ) -> StepTime {
        let prices: Vec<StepPrice> = self.dense.iter().map(|d| d.price(tokens)).collect();
        let busy: Vec<f64> = self
            .dense_of_gpu
            .iter()
            .map(|&d| prices[d].nanos - prices[d].overhead_ns - prices[d].communication_ns)
            .collect();
        let pace = prices
            .iter()
            .copied()
            .reduce(|a, b| if b.nanos > a.nanos { b } else { a })
            .expect("a replica has at least one GPU");
        let mut busy = busy;
        let mut moe_ns = 0.0;
        let mut communication_ns = pace.communication_ns;
        if let Some(moe) = &mut self.moe {
            let routed = routed.expect("an MoE step carries its routed tokens per expert and GPU");
            let (experts, gpus) = (moe.placement.n_experts, moe.placement.gpus());
            let ep = moe.placement.expert_parallel;
            let per_gpu_hosted = moe.placement.experts_per_gpu;
            for layer in 0..moe.n_layers {
                let per_expert = &routed.per_expert[layer * experts..][..experts];
                let copies = &moe.copies[layer];
                let per_gpu = &routed.per_gpu[layer * gpus..][..gpus];
                let mut layer_ns = 0.0f64;
                let mut layer_a2a = 0.0f64;
                for copy in 0..moe.placement.copies {
                    let mut slowest = 0.0f64;
                    let mut max_rows = 0u64;
                    for g in copy * ep..(copy + 1) * ep {
                        moe.gpu_tokens.resize(per_gpu_hosted, 0);
                        moe.placement.gpu_tokens(per_expert, g, &mut moe.gpu_tokens);
                        let hosted = (g % ep) * per_gpu_hosted..(g % ep + 1) * per_gpu_hosted;
                        for c in copies
                            .iter()
                            .filter(|c| hosted.contains(&(c.expert as usize)))
                        {
                            moe.gpu_tokens.push(moe.placement.share(c.tokens, copy));
                        }
                        let c = moe.layer.grouped_gemm(&moe.gpu_tokens, moe.speeds[g]).nanos;
                        busy[g] += c;
                        slowest = slowest.max(c);
                        max_rows = max_rows.max(u64::from(per_gpu[g]));
                    }
                    let a2a = moe.layer.all_to_all_ns(max_rows, ep, moe.link);
                    if slowest + a2a > layer_ns {
                        layer_ns = slowest + a2a;
                        layer_a2a = a2a;
                    }
                }
                moe_ns += layer_ns;
                communication_ns += layer_a2a;
            }
            if let Some(rerouting) = &moe.rerouting {
                moe_ns += rerouting.nanos(step_rows);
            }
        }
        StepTime {
            duration: SimDuration((pace.nanos + moe_ns).round().max(1.0) as u64),
            breakdown: StepBreakdown {
                compute_ns: pace.compute_ns,
                memory_ns: pace.memory_ns,
                communication_ns,
                overhead_ns: pace.overhead_ns,
                moe_ns,
                per_gpu_busy_ns: busy,
                op_sources: None,
            },
            source: CostSource::Analytic,
        }
    }
}

impl StepCost for ReplicaStepCost {
    fn price(&mut self, work: &StepWork<'_>) -> StepTime {
        let tokens = self.dense_tokens(work);
        self.price_tokens(
            &tokens,
            work.routed,
            work.prefill_tokens + work.decode_tokens,
        )
    }
}
