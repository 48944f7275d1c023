//! The one roofline of the cost model. Every family prices a step with it: one kernel group
//! (a layer's non-expert part, the output head, a grouped expert GEMM) costs
//!
//! ```text
//! kernels x launch + max(bytes / (bandwidth x eta_mem), FLOPs(ceil(rows / tile) x tile) / (peak x eta_cmp))
//! ```
//!
//! and a step is the sum of its groups plus the host's per-step overhead and the
//! tensor-parallel all-reduces. [`StepRoofline`] holds what a model's non-expert part streams
//! and computes per GPU (dense models, the non-expert part of MoE models, MLA attention);
//! routed experts go through `cost::moe_layer` on the same [`Roofline`]. The analytic profiles
//! (the curves a calibration run would measure) are this roofline sampled
//! ([`analytic_profile`]). Derivation and assumptions: docs/cost-model.md.
//!
//! Rounding a GEMM's rows up to whole tiles (GEMMs process rows in tiles of 64) is what makes
//! the curves staircases: flat within a tile once compute-bound, a jump at each tile boundary,
//! and a memory-bound floor (streaming the weights once) at small counts.

use crate::curve::CostCurve;
use crate::gpu::{GpuSpec, LinkSpec};
use crate::kernel::{KernelRates, Timing, dense_tile, padded};
use crate::moe_layer::{ExpertRows, MoeLayerCost, SpeedFactors};
use crate::profile::{
    ExpertExecution, ExpertFfnCurve, PROFILE_FORMAT_VERSION, Profile, ProfileError, ProfileSource,
    SourceKind, decode_step_nanos,
};
use crate::shape::{DenseModelShape, MlaMoeShape, MoeModelShape};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// One GPU as the roofline sees it: its achievable rates (`cost::kernel::KernelRates`, from
/// `profiles/rates.json`) and the host's launch cost of one eager kernel.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Roofline {
    pub rates: KernelRates,
    /// What each kernel a step counts costs beyond its streaming and math, ns: the host's launch
    /// (`KernelRates::host_launch_ns`) when launched eagerly, the GPU-side floor
    /// (`KernelRates::kernel_floor_ns`) in a CUDA graph (`Roofline::timed`).
    pub launch_ns: f64,
}

/// The memory and compute terms of one kernel group and its time, ns.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct OpTime {
    pub memory_ns: f64,
    pub compute_ns: f64,
    /// The two combined (`KernelRates::combine`).
    pub nanos: f64,
}

impl OpTime {
    /// The group's time: its memory and compute terms combined.
    pub fn nanos(&self) -> f64 {
        self.nanos
    }
}

impl Roofline {
    /// `gpu` at its achievable rates, its kernels launched eagerly (each charged the host's
    /// launch).
    pub fn of(gpu: &GpuSpec) -> Roofline {
        Roofline::timed(gpu, Timing::Eager)
    }

    /// `gpu` at its achievable rates, each kernel a step counts charged the host's launch when
    /// launched eagerly, its GPU-side floor when replayed in a CUDA graph.
    pub fn timed(gpu: &GpuSpec, timing: Timing) -> Roofline {
        let rates = KernelRates::of(gpu);
        Roofline {
            rates,
            launch_ns: match timing {
                Timing::Eager => rates.host_launch_ns,
                Timing::Graph => rates.kernel_floor_ns,
            },
        }
    }

    /// Achievable streaming bandwidth, bytes/s.
    pub fn bandwidth(&self) -> f64 {
        self.rates.stream_bytes_per_s
    }

    /// Achievable GEMM throughput, FLOP/s.
    pub fn compute(&self) -> f64 {
        self.rates.gemm_flops
    }

    /// The same GPU slowed by `speed`: its streaming rates times `speed.bandwidth`, its math
    /// times `speed.compute` (a power cap or a slower bin lowers the SM clock; see
    /// [`SpeedFactors`]).
    pub fn scaled(&self, speed: SpeedFactors) -> Roofline {
        Roofline {
            rates: self.rates.scaled(speed),
            ..*self
        }
    }

    /// `rows` rounded up to whole tiles of the tile a GEMM of that many rows runs with
    /// (`cost::kernel::dense_tile`).
    pub fn padded(&self, rows: u64) -> u64 {
        if rows == 0 {
            0
        } else {
            padded(rows, dense_tile(rows).rows)
        }
    }

    /// Streaming `bytes` and computing `flops`.
    pub fn op(&self, bytes: f64, flops: f64) -> OpTime {
        let memory_ns = bytes / self.rates.stream_bytes_per_s * 1e9;
        let compute_ns = flops / self.rates.gemm_flops * 1e9;
        OpTime {
            memory_ns,
            compute_ns,
            nanos: self.rates.combine(memory_ns, compute_ns),
        }
    }

    /// `kernels` launches plus streaming `bytes` and computing `flops`.
    pub fn group_nanos(&self, kernels: u32, bytes: f64, flops: f64) -> f64 {
        f64::from(kernels) * self.launch_ns + self.op(bytes, flops).nanos()
    }
}

/// What one step asks of a model: the rows its layers compute, the sequences whose next token
/// the head scores, and the attention it does.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepTokens {
    /// Token rows through every layer (prefill tokens plus decoding sequences).
    pub rows: u64,
    /// Sequences the output head scores one row of (vLLM computes logits only at each
    /// sequence's last position).
    pub sequences: u64,
    /// KV-cache tokens the step reads, summed over its sequences; each is attended by one
    /// query row.
    pub context_tokens: u64,
    /// Sum of the squared prompt lengths prefilled in the step: causal prefill attention
    /// scores `prefill_square / 2` (query, key) pairs.
    pub prefill_square: f64,
}

/// A priced step, ns: the memory and compute terms summed over its kernel groups, the
/// communication and the fixed overheads; `nanos` is the step's time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct StepPrice {
    pub memory_ns: f64,
    pub compute_ns: f64,
    pub communication_ns: f64,
    pub overhead_ns: f64,
    pub nanos: f64,
}

impl StepPrice {
    fn add(&mut self, op: OpTime, times: f64) {
        self.memory_ns += times * op.memory_ns;
        self.compute_ns += times * op.compute_ns;
        self.nanos += times * op.nanos;
    }
}

/// Tensor parallelism of a model over `degree` GPUs: weights, FLOPs and KV heads split, two
/// all-reduces of the hidden state per layer (after attention and after the MLP), ring
/// algorithm over `link`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct TensorParallel {
    pub degree: u32,
    pub link: LinkSpec,
}

/// Identical layers of a model's non-expert part, per GPU: their count, the weight bytes one
/// streams per step and the FLOPs one spends per row.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct LayerGroup {
    pub count: u64,
    pub weight_bytes: f64,
    pub flops_per_row: f64,
}

/// Attention of one layer, per GPU: the KV bytes a cached token holds, the FLOPs of one query
/// row against one cached token when decoding, and against one earlier prompt token when
/// prefilling (different for MLA, which decodes over its latent cache).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct AttentionCost {
    pub kv_bytes_per_token: f64,
    pub decode_flops_per_pair: f64,
    pub prefill_flops_per_pair: f64,
}

/// The roofline of a model's step except its routed experts, per GPU of its group: each layer
/// one kernel group (its weights plus the KV it reads, its GEMM FLOPs on tile-padded rows plus
/// its attention FLOPs), the output head another, plus launches, the host's per-step overhead
/// and the tensor-parallel all-reduces.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepRoofline {
    pub roofline: Roofline,
    pub layers: Vec<LayerGroup>,
    pub attention: AttentionCost,
    pub head_weight_bytes: f64,
    pub head_flops_per_row: f64,
    /// Kernels launched per layer and by the head (0 where the engine replays CUDA graphs and
    /// `host_overhead_ns` covers the launch).
    pub kernels_per_layer: u32,
    pub kernels_head: u32,
    /// Host time per step: scheduling, sampling, detokenization, graph replay.
    pub host_overhead_ns: f64,
    /// Bytes one row's hidden state puts on the wire per all-reduce, and the group, when the
    /// model is tensor-parallel over more than one GPU.
    pub all_reduce: Option<(f64, TensorParallel)>,
}

/// Bytes per element of activations on the wire and of bf16 weights.
const BF16_BYTES: f64 = 2.0;

/// The element-wise kernels of one layer on one GPU, each as the bytes it moves per token row
/// (read and written, bf16): what a step priced in parts (`StepRoofline::parts`) streams
/// through `cost::kernel::KernelRates::streaming`, each kernel with its floor.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ElementwiseKernels {
    pub bytes_per_row: Vec<f64>,
}

impl ElementwiseKernels {
    /// A transformer layer's, as Vidur's profiler runs them: the input and post-attention
    /// RMSNorms (each reads and writes the hidden row), the rotary embedding (reads and writes
    /// this GPU's query and key heads), the residual add (two hidden rows in, one out) and,
    /// with a gated MLP `ffn_per_gpu` wide on this GPU (0: none, e.g. an MoE layer whose
    /// experts run apart), SiLU-and-multiply (two rows of it in, one out).
    pub fn layer(hidden: u64, q_width: u64, k_width: u64, ffn_per_gpu: u64) -> Self {
        let (h, q, k, f) = (
            hidden as f64,
            q_width as f64,
            k_width as f64,
            ffn_per_gpu as f64,
        );
        let mut bytes_per_row = vec![
            2.0 * h * BF16_BYTES,
            2.0 * (q + k) * BF16_BYTES,
            2.0 * h * BF16_BYTES,
            3.0 * h * BF16_BYTES,
        ];
        if ffn_per_gpu > 0 {
            bytes_per_row.push(3.0 * f * BF16_BYTES);
        }
        ElementwiseKernels { bytes_per_row }
    }

    /// A dense model's layer on one of `tp` tensor-parallel GPUs.
    pub fn dense(shape: &DenseModelShape, tp: u32) -> Self {
        let tp = u64::from(tp.max(1));
        ElementwiseKernels::layer(
            shape.hidden,
            shape.n_heads * shape.head_dim / tp,
            (shape.n_kv_heads * shape.head_dim).div_ceil(tp),
            shape.intermediate / tp,
        )
    }

    /// An MoE model's non-expert layer on one of `tp` tensor-parallel GPUs (the shared
    /// experts' activation included; the routed experts' is `cost::moe_layer`'s).
    pub fn moe(shape: &MoeModelShape, tp: u32) -> Self {
        let tp = tp.max(1) as usize;
        ElementwiseKernels::layer(
            shape.hidden as u64,
            (shape.n_attention_heads * shape.head_dim / tp) as u64,
            (shape.n_kv_heads * shape.head_dim).div_ceil(tp) as u64,
            (shape.shared_expert_ffn * shape.n_shared_experts / tp) as u64,
        )
    }

    /// One layer's kernels over `rows` token rows, ns (each its floor plus its bytes streamed).
    pub fn nanos(&self, rates: &KernelRates, rows: u64) -> f64 {
        if rows == 0 {
            return 0.0;
        }
        self.bytes_per_row
            .iter()
            .map(|b| rates.streaming(b * rows as f64).nanos)
            .sum()
    }
}

/// A step priced kernel class by kernel class (`StepRoofline::parts`), ns: each class its
/// own kernels, so the step is their sum.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DenseParts {
    /// The layers' weight GEMMs (QKV, attention output, MLP or shared experts, router).
    pub linear: OpTime,
    /// Norms, rotary embedding, residual add, activation.
    pub elementwise_ns: f64,
    /// The attention kernels (KV read, score and value FLOPs).
    pub attention: OpTime,
    /// The output head.
    pub head: OpTime,
    /// The tensor-parallel all-reduces.
    pub communication_ns: f64,
}

/// The part of a step's `DenseParts` set by its rows alone (`StepRoofline::row_parts`): what
/// a step cost may keep by rows.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RowParts {
    pub linear: OpTime,
    pub elementwise_ns: f64,
}

impl DenseParts {
    /// The GPU's time: every class one after another.
    pub fn nanos(&self) -> f64 {
        self.linear.nanos
            + self.elementwise_ns
            + self.attention.nanos
            + self.head.nanos
            + self.communication_ns
    }
}

impl StepRoofline {
    /// A dense model served on `parallel.degree` GPUs (1: no all-reduce) through vLLM with CUDA
    /// graphs (no per-kernel launch; `host_overhead_ns` per step). Streamed per step: every
    /// block's weights and the output head (the embedding table is a lookup, not streamed);
    /// KV heads split over the GPUs as far as there are heads.
    pub fn dense(
        shape: &DenseModelShape,
        roofline: Roofline,
        parallel: TensorParallel,
        host_overhead_ns: f64,
    ) -> StepRoofline {
        let tp = f64::from(parallel.degree.max(1));
        let kv_split = tp.min(shape.n_kv_heads as f64);
        let pair = shape.attention_flops_per_pair_per_layer() / tp;
        StepRoofline {
            roofline,
            layers: vec![LayerGroup {
                count: shape.n_layers,
                weight_bytes: shape.block_weight_bytes() / tp,
                flops_per_row: 2.0 * shape.block_params() as f64 / tp,
            }],
            attention: AttentionCost {
                kv_bytes_per_token: shape.kv_bytes_per_token_per_layer() / kv_split,
                decode_flops_per_pair: pair,
                prefill_flops_per_pair: pair,
            },
            head_weight_bytes: shape.head_weight_bytes() / tp,
            head_flops_per_row: 2.0 * shape.head_params() as f64 / tp,
            kernels_per_layer: 0,
            kernels_head: 0,
            host_overhead_ns,
            all_reduce: (parallel.degree > 1)
                .then_some((shape.hidden as f64 * BF16_BYTES, parallel)),
        }
    }

    /// The non-expert part of an MoE model (attention, shared experts, router and norms per
    /// layer; the output head) tensor-parallel over `parallel.degree` GPUs and served as
    /// [`Self::dense`] serves a dense model: CUDA graphs (no per-kernel launch,
    /// `host_overhead_ns` per step), weights, FLOPs and attention heads split over the GPUs, KV
    /// heads as far as there are heads, two all-reduces of the hidden state per layer. The
    /// routed experts are priced apart (`cost::moe_layer`).
    pub fn moe_non_expert_tensor_parallel(
        shape: &MoeModelShape,
        roofline: Roofline,
        parallel: TensorParallel,
        kv_bytes_per_element: f64,
        host_overhead_ns: f64,
    ) -> StepRoofline {
        let tp = f64::from(parallel.degree.max(1));
        let kv_split = tp.min(shape.n_kv_heads as f64);
        let pair = 4.0 * (shape.n_attention_heads * shape.head_dim) as f64 / tp;
        StepRoofline {
            roofline,
            layers: vec![LayerGroup {
                count: shape.n_layers as u64,
                weight_bytes: shape.dense_weight_bytes_per_layer() / tp,
                flops_per_row: 2.0 * shape.dense_matmul_params_per_layer() as f64 / tp,
            }],
            attention: AttentionCost {
                kv_bytes_per_token: shape.kv_cache_bytes_per_token_per_layer(kv_bytes_per_element)
                    / kv_split,
                decode_flops_per_pair: pair,
                prefill_flops_per_pair: pair,
            },
            head_weight_bytes: shape.lm_head_weight_bytes() / tp,
            head_flops_per_row: 2.0 * shape.lm_head_params() as f64 / tp,
            kernels_per_layer: 0,
            kernels_head: 0,
            host_overhead_ns,
            all_reduce: (parallel.degree > 1)
                .then_some((shape.hidden as f64 * BF16_BYTES, parallel)),
        }
    }

    /// The non-expert part of an MoE model on one GPU (attention, shared experts, router and
    /// norms per layer; the output head), with the profile's kernel counts and KV element
    /// size. What `analytic_profile` samples for CAPS and GEM.
    pub fn moe_non_expert(
        shape: &MoeModelShape,
        roofline: Roofline,
        params: &RooflineParams,
    ) -> StepRoofline {
        let pair = 4.0 * (shape.n_attention_heads * shape.head_dim) as f64;
        StepRoofline {
            roofline,
            layers: vec![LayerGroup {
                count: shape.n_layers as u64,
                weight_bytes: shape.dense_weight_bytes_per_layer(),
                flops_per_row: 2.0 * shape.dense_matmul_params_per_layer() as f64,
            }],
            attention: AttentionCost {
                kv_bytes_per_token: shape
                    .kv_cache_bytes_per_token_per_layer(params.kv_cache_bytes_per_element),
                decode_flops_per_pair: pair,
                prefill_flops_per_pair: pair,
            },
            head_weight_bytes: shape.lm_head_weight_bytes(),
            head_flops_per_row: 2.0 * shape.lm_head_params() as f64,
            kernels_per_layer: params.kernels_per_non_expert_layer,
            kernels_head: params.kernels_per_head,
            host_overhead_ns: 0.0,
            all_reduce: None,
        }
    }

    /// The non-expert part of an MLA-MoE model (ExpertWeave's base) on an instance of
    /// `devices` devices with tensor parallelism `tensor_parallel` (the rest data-parallel),
    /// per device: the first dense layers and the MoE layers' attention, shared experts,
    /// router and norms, and the head, weights split over the tensor-parallel ranks and rows
    /// over all devices; MLA's latent KV cache is not split by heads, so every
    /// tensor-parallel rank reads all of it for its sequences (split over the data-parallel
    /// ranks only). `kernels_per_layer` launches per layer, 3 for the head (final norm,
    /// `lm_head` GEMM, sampling); no all-reduce is modelled.
    pub fn mla_moe_non_expert(
        shape: &MlaMoeShape,
        roofline: Roofline,
        tensor_parallel: u64,
        devices: u64,
        kernels_per_layer: u32,
    ) -> StepRoofline {
        let tp = tensor_parallel.max(1) as f64;
        let devices = (devices as f64).max(tp);
        let data_parallel = devices / tp;
        let bytes = shape.bytes_per_param as f64;
        let group = |count: u64, layer: u64| {
            let params = shape.layer_non_routed_params(layer) as f64;
            LayerGroup {
                count,
                weight_bytes: params * bytes / tp,
                flops_per_row: 2.0 * params / devices,
            }
        };
        let mut layers = Vec::new();
        if shape.first_k_dense > 0 {
            layers.push(group(shape.first_k_dense, 0));
        }
        layers.push(group(shape.n_moe_layers(), shape.first_k_dense));
        let head_params = (shape.vocab * shape.hidden) as f64;
        StepRoofline {
            roofline,
            layers,
            attention: AttentionCost {
                kv_bytes_per_token: shape.kv_bytes_per_token_per_layer() as f64 / data_parallel,
                decode_flops_per_pair: shape.decode_attention_flops_per_pair_per_layer() / devices,
                prefill_flops_per_pair: shape.prefill_attention_flops_per_pair_per_layer()
                    / devices,
            },
            head_weight_bytes: head_params * bytes / tp,
            head_flops_per_row: 2.0 * head_params / devices,
            kernels_per_layer,
            kernels_head: 3,
            host_overhead_ns: 0.0,
            all_reduce: None,
        }
    }

    /// One layer of group `group` (without launches) over `work`.
    pub fn layer(&self, group: usize, work: &StepTokens) -> OpTime {
        let g = &self.layers[group];
        let a = &self.attention;
        let context = work.context_tokens as f64;
        self.roofline.op(
            g.weight_bytes + context * a.kv_bytes_per_token,
            g.flops_per_row * self.roofline.padded(work.rows) as f64
                + a.decode_flops_per_pair * context
                + a.prefill_flops_per_pair * 0.5 * work.prefill_square,
        )
    }

    /// The attention of one layer over `work` without the layer's weights (without launches):
    /// the KV it reads and its score/value FLOPs, as a kernel group of its own (how a step
    /// priced from measured operations adds the attention the measurements do not hold).
    pub fn attention(&self, work: &StepTokens) -> OpTime {
        let a = &self.attention;
        let context = work.context_tokens as f64;
        self.roofline.op(
            context * a.kv_bytes_per_token,
            a.decode_flops_per_pair * context
                + a.prefill_flops_per_pair * 0.5 * work.prefill_square,
        )
    }

    /// The output head (without launches) scoring `sequences` rows.
    pub fn head(&self, sequences: u64) -> OpTime {
        self.roofline.op(
            self.head_weight_bytes,
            self.head_flops_per_row * self.roofline.padded(sequences) as f64,
        )
    }

    /// The model FLOPs of `work` on one GPU of the group: every layer's GEMMs on the step's
    /// rows (not padded to tiles), its attention, and the head on the sequences it scores.
    /// What model-FLOPs utilization counts as useful work.
    pub fn model_flops(&self, work: &StepTokens) -> f64 {
        let a = &self.attention;
        let context = work.context_tokens as f64;
        let per_layer = |g: &LayerGroup| {
            g.flops_per_row * work.rows as f64
                + a.decode_flops_per_pair * context
                + a.prefill_flops_per_pair * 0.5 * work.prefill_square
        };
        let layers: f64 = self
            .layers
            .iter()
            .map(|g| g.count as f64 * per_layer(g))
            .sum();
        layers + self.head_flops_per_row * work.sequences as f64
    }

    /// The tensor-parallel all-reduces of `work` (0 on one GPU): two per layer, ring algorithm,
    /// `2 (tp - 1) / tp` of the rows' bytes across each GPU's link.
    pub fn all_reduce_ns(&self, work: &StepTokens) -> f64 {
        let Some((bytes_per_row, parallel)) = self.all_reduce else {
            return 0.0;
        };
        let layers: u64 = self.layers.iter().map(|g| g.count).sum();
        let tp = f64::from(parallel.degree);
        let wire = work.rows as f64 * bytes_per_row * 2.0 * (tp - 1.0) / tp;
        2.0 * layers as f64
            * (parallel.link.latency_ns + wire / parallel.link.bandwidth_bytes_per_s * 1e9)
    }

    /// `work` kernel class by kernel class, each its own kernel group as the GPU runs them (no
    /// launches, no host time: CUDA graphs, the host's time is `cost::host`'s): per layer its
    /// weight GEMMs on tile-padded rows, its `elementwise` kernels, its attention; the head;
    /// the all-reduces.
    pub fn parts(&self, work: &StepTokens, elementwise: &ElementwiseKernels) -> DenseParts {
        self.parts_with(
            work,
            &self.row_parts(work.rows, elementwise),
            self.head_of(work.sequences),
        )
    }

    /// The part of `parts` that depends on the step's rows alone: every layer's weight GEMMs on
    /// `rows` tile-padded and its `elementwise` kernels, summed over the layers.
    pub fn row_parts(&self, rows: u64, elementwise: &ElementwiseKernels) -> RowParts {
        let padded = self.roofline.padded(rows) as f64;
        let elementwise_layer = elementwise.nanos(&self.roofline.rates, rows);
        let mut parts = RowParts::default();
        for g in &self.layers {
            let count = g.count as f64;
            let linear = self.roofline.op(g.weight_bytes, g.flops_per_row * padded);
            parts.linear.memory_ns += count * linear.memory_ns;
            parts.linear.compute_ns += count * linear.compute_ns;
            parts.linear.nanos += count * linear.nanos;
            parts.elementwise_ns += count * elementwise_layer;
        }
        parts
    }

    /// The head's part of `parts` for `sequences` scored (none for none).
    pub fn head_of(&self, sequences: u64) -> OpTime {
        if sequences > 0 {
            self.head(sequences)
        } else {
            OpTime::default()
        }
    }

    /// `parts` with its rows' part `rows` (`row_parts` of `work.rows`) and head `head`
    /// (`head_of` of `work.sequences`) given: the same sums in the same order, so the same
    /// bits, whoever kept them.
    pub fn parts_with(&self, work: &StepTokens, rows: &RowParts, head: OpTime) -> DenseParts {
        let attention = self.attention(work);
        let mut parts = DenseParts {
            linear: rows.linear,
            elementwise_ns: rows.elementwise_ns,
            head,
            ..DenseParts::default()
        };
        for g in &self.layers {
            let count = g.count as f64;
            parts.attention.memory_ns += count * attention.memory_ns;
            parts.attention.compute_ns += count * attention.compute_ns;
            parts.attention.nanos += count * attention.nanos;
        }
        parts.communication_ns = self.all_reduce_ns(work);
        parts
    }

    /// What launching `work`'s kernels one by one from the host (`Timing::Eager`) adds to
    /// `parts`' GPU time, with `host_launch_ns` a launch: a layer's `kernels_per_layer` launches
    /// follow one another, so the layer takes the longer of those launches and its kernels' GPU
    /// time (`KernelTime::wall`'s `max(host_launch, t_gpu)` taken over the layer, whose kernel
    /// classes are priced together); the head likewise with `kernels_head`.
    pub fn eager_wait_ns(
        &self,
        work: &StepTokens,
        elementwise: &ElementwiseKernels,
        host_launch_ns: f64,
    ) -> f64 {
        let padded = self.roofline.padded(work.rows) as f64;
        let attention = self.attention(work).nanos;
        let elementwise_layer = elementwise.nanos(&self.roofline.rates, work.rows);
        let launches = f64::from(self.kernels_per_layer) * host_launch_ns;
        let mut wait = 0.0;
        for g in &self.layers {
            let gpu = self
                .roofline
                .op(g.weight_bytes, g.flops_per_row * padded)
                .nanos
                + attention
                + elementwise_layer;
            wait += g.count as f64 * (launches - gpu).max(0.0);
        }
        if work.sequences > 0 {
            let head = self.head(work.sequences).nanos;
            wait += (f64::from(self.kernels_head) * host_launch_ns - head).max(0.0);
        }
        wait
    }

    /// Every layer, the head, launches, host overhead and all-reduces for `work`.
    pub fn price(&self, work: &StepTokens) -> StepPrice {
        let mut price = StepPrice::default();
        let mut launches = u64::from(self.kernels_head);
        for (g, group) in self.layers.iter().enumerate() {
            price.add(self.layer(g, work), group.count as f64);
            launches += group.count * u64::from(self.kernels_per_layer);
        }
        if work.sequences > 0 {
            price.add(self.head(work.sequences), 1.0);
        }
        price.overhead_ns = self.host_overhead_ns + launches as f64 * self.roofline.launch_ns;
        price.communication_ns = self.all_reduce_ns(work);
        price.nanos += price.overhead_ns + price.communication_ns;
        price
    }
}

/// The roofline's knobs for the analytic profiles. Every default is an assumption that
/// calibration replaces; each is listed with its reasoning in docs/cost-model.md.
#[derive(Clone, Debug, PartialEq)]
pub struct RooflineParams {
    /// The sampling grid of the token curves (both sides of every multiple of it): 64, the
    /// smallest GEMM tile (`cost::kernel::dense_tile`), so every step of the staircase lies
    /// between two samples.
    pub tile_tokens: u32,
    /// How the profiled kernels are launched: eagerly (what a calibration run times, the
    /// default; CAPS's HF transformers) or in a CUDA graph (GEM's vLLM V1).
    pub timing: Timing,
    /// Kernels per layer outside the routed experts: 2 RMSNorms, QKV GEMM, RoPE, attention,
    /// O GEMM, router GEMM, top-k, shared gate+up GEMM, SwiGLU, shared down GEMM, shared-gate
    /// scale + residual add = 12.
    pub kernels_per_non_expert_layer: u32,
    /// Kernels of the output head: final RMSNorm, `lm_head` GEMM, sampling.
    pub kernels_per_head: u32,
    /// Bytes per KV-cache element (bf16 cache: 2).
    pub kv_cache_bytes_per_element: f64,
    /// Context length per sequence at which decode steps read the KV cache (prompt + output
    /// tokens so far; 256 covers a CAPS-sized 128-token prompt with its output).
    pub decode_context_tokens: u32,
    /// Token curves are sampled at both sides of every tile boundary up to here ...
    pub dense_sample_limit: u32,
    /// ... then every `sparse_sample_step` tokens ...
    pub sparse_sample_step: u32,
    /// ... up to here, and extrapolated linearly beyond.
    pub sparse_sample_limit: u32,
    /// Batch-size curves are sampled at every size up to one tile, then at both sides of each
    /// tile boundary up to here.
    pub max_decode_batch: u32,
}

impl Default for RooflineParams {
    fn default() -> Self {
        RooflineParams {
            tile_tokens: 64,
            timing: Timing::Eager,
            kernels_per_non_expert_layer: 12,
            kernels_per_head: 3,
            kv_cache_bytes_per_element: 2.0,
            decode_context_tokens: 256,
            dense_sample_limit: 4096,
            sparse_sample_step: 1024,
            sparse_sample_limit: 16_384,
            max_decode_batch: 256,
        }
    }
}

/// The curves of an analytic profile: one MoE model's kernel groups on one GPU, priced by the
/// roofline (the routed expert through `cost::moe_layer`, the rest through [`StepRoofline`]).
#[derive(Clone, Debug)]
pub struct ProfileCurves<'a> {
    pub params: &'a RooflineParams,
    non_expert: StepRoofline,
    expert: MoeLayerCost,
}

impl<'a> ProfileCurves<'a> {
    pub fn new(gpu: &GpuSpec, shape: &MoeModelShape, params: &'a RooflineParams) -> Self {
        let roofline = Roofline::timed(gpu, params.timing);
        let expert = MoeLayerCost::new(gpu, shape, params.timing);
        ProfileCurves {
            params,
            non_expert: StepRoofline::moe_non_expert(shape, roofline, params),
            expert,
        }
    }

    fn launches(&self, kernels: u32) -> f64 {
        f64::from(kernels) * self.non_expert.roofline.launch_ns
    }

    /// One routed expert's gated FFN on `tokens` tokens (a grouped GEMM of one expert); 0
    /// when it receives none.
    pub fn expert_ffn_nanos(&self, tokens: u64) -> f64 {
        let tokens = u32::try_from(tokens).unwrap_or(u32::MAX);
        self.expert
            .gpu(ExpertRows::Counted(&[tokens]), SpeedFactors::NOMINAL)
            .nanos
    }

    /// One layer's non-expert part in a prefill pass over `tokens` tokens (all sequences of
    /// the batch together). The prefill attention's score/value products are left out (a
    /// curve over tokens does not know the prompts' lengths): at 128-token prompts they are
    /// 0.5 % of the layer's FLOPs.
    pub fn non_expert_prefill_nanos(&self, tokens: u64) -> f64 {
        if tokens == 0 {
            return 0.0;
        }
        let work = StepTokens {
            rows: tokens,
            ..StepTokens::default()
        };
        self.launches(self.non_expert.kernels_per_layer) + self.non_expert.layer(0, &work).nanos()
    }

    /// One layer's non-expert part in one decode step of `batch` sequences, each reading
    /// `decode_context_tokens` of KV cache.
    pub fn non_expert_decode_nanos(&self, batch: u64) -> f64 {
        if batch == 0 {
            return 0.0;
        }
        let work = StepTokens {
            rows: batch,
            sequences: batch,
            context_tokens: batch * u64::from(self.params.decode_context_tokens),
            prefill_square: 0.0,
        };
        self.launches(self.non_expert.kernels_per_layer) + self.non_expert.layer(0, &work).nanos()
    }

    /// The output head for `rows` sequences (one next-token row each; prefill computes
    /// logits for the last prompt position only).
    pub fn head_nanos(&self, rows: u64) -> f64 {
        if rows == 0 {
            return 0.0;
        }
        self.launches(self.non_expert.kernels_head) + self.non_expert.head(rows).nanos()
    }

    /// Token counts at which token curves are sampled: 1, both sides of each tile boundary
    /// up to `dense_sample_limit`, then every `sparse_sample_step` up to `sparse_sample_limit`.
    pub fn token_sample_points(&self) -> Vec<u64> {
        let p = &self.params;
        super::sampling::token_points(
            p.tile_tokens as usize,
            p.dense_sample_limit as usize,
            p.sparse_sample_step.max(1) as usize,
            p.sparse_sample_limit as usize,
        )
        .into_iter()
        .map(|n| n as u64)
        .collect()
    }

    /// Batch sizes at which batch curves are sampled: every size up to one tile, then both
    /// sides of each tile boundary up to `max_decode_batch`.
    pub fn batch_sample_points(&self) -> Vec<u64> {
        let p = &self.params;
        super::sampling::batch_points(p.tile_tokens as usize, p.max_decode_batch as usize)
            .into_iter()
            .map(|n| n as u64)
            .collect()
    }
}

fn sampled(points: &[u64], cost: impl Fn(u64) -> f64) -> CostCurve {
    // Rounded to 0.1 ns so the committed JSON stays readable.
    let samples = points
        .iter()
        .map(|&n| (n as f64, (cost(n) * 10.0).round() / 10.0))
        .collect();
    CostCurve::new(samples).expect("roofline samples are positive, increasing and finite")
}

/// The analytic profile of `shape` on `gpu` with the default [`RooflineParams`].
pub fn analytic_profile(gpu: &GpuSpec, shape: &MoeModelShape) -> Profile {
    analytic_profile_with(gpu, shape, &RooflineParams::default())
}

/// The analytic profile of `shape` on `gpu`: every curve of a measured profile, computed by
/// the roofline. The whole-model decode step spreads each step's `batch x top_k` routed
/// tokens evenly over the experts and reads the expert cost off the expert curve, exactly as
/// the execution models do for an even load.
pub fn analytic_profile_with(
    gpu: &GpuSpec,
    shape: &MoeModelShape,
    params: &RooflineParams,
) -> Profile {
    let roofline = ProfileCurves::new(gpu, shape, params);
    let tokens = roofline.token_sample_points();
    let batches = roofline.batch_sample_points();
    let expert = sampled(&tokens, |n| roofline.expert_ffn_nanos(n));
    let non_expert_prefill = sampled(&tokens, |n| roofline.non_expert_prefill_nanos(n));
    let non_expert_decode = sampled(&batches, |b| roofline.non_expert_decode_nanos(b));
    let head = sampled(&batches, |b| roofline.head_nanos(b));
    let decode_step = sampled(&batches, |b| {
        decode_step_nanos(shape, b, &non_expert_decode, &head, |assignments| {
            expert.at(assignments as f64 / shape.n_experts as f64)
        })
    });
    let rates = roofline.non_expert.roofline.rates;
    let notes = format!(
        "the kernel model on {}'s rates (profiles/rates.json): streaming {:.0} GB/s, GEMM \
         {:.1} TFLOP/s, kernel floor {:.0} ns, host launch {:.0} ns, kernels launched {}, \
         kernels per non-expert layer {} / head {}, KV cache {} B per element, decode context \
         {} tokens, samples around every multiple of {} tokens (docs/cost-model.md)",
        gpu.name,
        rates.stream_bytes_per_s / 1e9,
        rates.gemm_flops / 1e12,
        rates.kernel_floor_ns,
        rates.host_launch_ns,
        match params.timing {
            Timing::Eager => "eagerly",
            Timing::Graph => "in a CUDA graph",
        },
        params.kernels_per_non_expert_layer,
        params.kernels_per_head,
        params.kv_cache_bytes_per_element,
        params.decode_context_tokens,
        params.tile_tokens,
    );
    Profile {
        format_version: PROFILE_FORMAT_VERSION,
        gpu: gpu.name.clone(),
        source: ProfileSource {
            kind: SourceKind::AnalyticRoofline,
            tool_version: crate::profile::TOOL_VERSION.to_string(),
            date: None,
            notes,
        },
        model: shape.clone(),
        decode_context_tokens: params.decode_context_tokens,
        expert_ffn: vec![ExpertFfnCurve {
            hidden: shape.hidden,
            expert_ffn: shape.expert_ffn,
            dtype: shape.weight_dtype,
            curve: expert,
            split: None,
        }],
        non_expert_prefill,
        non_expert_decode,
        head,
        decode_step,
        expert_execution: ExpertExecution::Concurrent,
        tensor_parallel: 1,
    }
}

/// The analytic profiles committed under `profiles/`, as (path relative to `profiles/`,
/// profile). Today: L4 + Qwen1.5-MoE-A2.7B with nf4 weights, as CAPS runs it.
pub fn reference_profiles() -> Vec<(&'static str, Profile)> {
    let l4 = GpuSpec::by_name("L4").expect("L4 is in the catalogue");
    vec![(
        "analytic/l4_qwen1.5-moe-a2.7b.json",
        analytic_profile(&l4, &MoeModelShape::qwen1_5_moe_a2_7b_nf4()),
    )]
}

/// Regenerates every reference profile under `profiles_dir`; returns the paths written.
pub fn write_reference_profiles(profiles_dir: &Path) -> Result<Vec<PathBuf>, ProfileError> {
    reference_profiles()
        .into_iter()
        .map(|(relative, profile)| {
            let path = profiles_dir.join(relative);
            profile.save(&path).map(|()| path)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::LinkSpec;

    fn l4_qwen() -> (GpuSpec, MoeModelShape, RooflineParams) {
        (
            GpuSpec::by_name("L4").unwrap(),
            MoeModelShape::qwen1_5_moe_a2_7b_nf4(),
            RooflineParams::default(),
        )
    }

    #[test]
    fn expert_curve_is_the_entry_points_staircase() {
        let (gpu, shape, _) = l4_qwen();
        let profile = analytic_profile(&gpu, &shape);
        let curve = profile
            .expert_curve(shape.hidden, shape.expert_ffn, shape.weight_dtype)
            .unwrap();
        // Every sample is one expert through the MoE entry point, launched eagerly.
        let layer = MoeLayerCost::new(&gpu, &shape, Timing::Eager);
        for (n, ns) in curve.samples() {
            let expected = layer
                .gpu(ExpertRows::Counted(&[n as u32]), SpeedFactors::NOMINAL)
                .nanos;
            assert!((ns - expected).abs() <= 0.05, "{n}: {ns} vs {expected}");
        }
        assert_eq!(curve.at(0.0), 0.0);
        // Compute-bound past a few tiles: within a 128-row tile only the activations grow (and
        // the SwiGLU between the GEMMs), at each boundary a jump of about one tile's FLOPs.
        let rates = KernelRates::of(&gpu);
        let tile_ns = shape.expert_flops_per_token() * 128.0 / rates.grouped_gemm_flops * 1e9;
        for k in 8..30u32 {
            let first = curve.at(f64::from((k - 1) * 128 + 1));
            let last = curve.at(f64::from(k * 128));
            let next = curve.at(f64::from(k * 128 + 1));
            assert!(
                last - first < 0.5 * tile_ns,
                "tile {k}: {} within",
                last - first
            );
            assert!(
                next - last > 0.8 * tile_ns,
                "tile {k}: jump {}",
                next - last
            );
        }
        // Sparse samples at high counts, extrapolated linearly past the last one.
        assert!(curve.len() < 150, "{}", curve.len());
        let slope = (curve.at(16_384.0) - curve.at(15_360.0)) / 1024.0;
        assert!((curve.at(20_000.0) - curve.at(16_384.0) - slope * 3616.0).abs() < 1e-6);
    }

    #[test]
    fn decode_curves_grow_with_batch() {
        let (gpu, shape, _) = l4_qwen();
        let profile = analytic_profile(&gpu, &shape);
        let mut previous = 0.0;
        for b in 1..=256 {
            let step = profile.decode_step.at(f64::from(b));
            assert!(step >= previous, "decode step falls at batch {b}");
            previous = step;
        }
        assert!(profile.non_expert_decode.at(8.0) > profile.non_expert_decode.at(1.0));
    }

    #[test]
    fn sample_points_follow_the_tile_grid() {
        let (gpu, shape, params) = l4_qwen();
        let roofline = ProfileCurves::new(&gpu, &shape, &params);
        let tokens = roofline.token_sample_points();
        assert_eq!(&tokens[..5], &[1, 64, 65, 128, 129]);
        assert!(tokens.contains(&4096) && !tokens.contains(&4097));
        assert_eq!(&tokens[tokens.len() - 2..], &[15_360, 16_384]);
        assert!(tokens.windows(2).all(|w| w[0] < w[1]));
        let batches = roofline.batch_sample_points();
        assert_eq!(&batches[..3], &[1, 2, 3]);
        assert_eq!(&batches[batches.len() - 3..], &[192, 193, 256]);
        assert_eq!(*batches.last().unwrap(), 256);
    }

    /// The profiles the roofline writes name the package that writes them, `expertsim-cost`,
    /// and its version; a committed profile from before the crate split, labelled
    /// `expertsim-sim`, still loads (the label is never read back).
    #[test]
    fn analytic_profiles_name_the_package_that_writes_them() {
        let (gpu, shape, _) = l4_qwen();
        let profile = analytic_profile(&gpu, &shape);
        assert_eq!(
            profile.source.tool_version,
            format!("expertsim-cost {}", env!("CARGO_PKG_VERSION"))
        );
        let current = format!("\"tool_version\": \"{}\"", crate::profile::TOOL_VERSION);
        let json = profile.to_json();
        assert!(json.contains(&current), "{json}");
        let old = json.replace(&current, "\"tool_version\": \"expertsim-sim 0.1.0\"");
        let loaded = Profile::from_json(&old, Path::new("old.json")).unwrap();
        assert_eq!(loaded.source.tool_version, "expertsim-sim 0.1.0");
        assert_eq!(loaded.expert_ffn, profile.expert_ffn);
    }

    /// The committed reference profiles are what the code generates now. Regenerate with
    /// `EXPERTSIM_UPDATE_PROFILES=1 cargo test -p expertsim-cost committed_reference_profiles`.
    #[test]
    fn committed_reference_profiles_match_the_generator() {
        let profiles_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles");
        if std::env::var_os("EXPERTSIM_UPDATE_PROFILES").is_some_and(|v| v == "1") {
            write_reference_profiles(&profiles_dir).unwrap();
        }
        for (relative, profile) in reference_profiles() {
            let path = profiles_dir.join(relative);
            let committed = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(
                committed == profile.to_json(),
                "{} differs from what the roofline generates; regenerate with \
                 EXPERTSIM_UPDATE_PROFILES=1 cargo test -p expertsim-cost committed_reference_profiles",
                path.display()
            );
            assert_eq!(Profile::load(&path).unwrap(), profile);
        }
    }

    /// Qwen2.5-7B-Instruct on one A100-80GB, by hand. One block: q and o 3584 x 3584 each,
    /// k and v 3584 x 512 each (4 KV heads of 128), gate/up/down 3 x 3584 x 18944:
    /// 25,690,112 + 3,670,016 + 203,685,888 = 233,046,016 parameters, 466,092,032 bf16 bytes;
    /// 28 blocks stream 13,050,576,896 bytes. The head: 152,064 x 3584 = 544,997,376
    /// parameters, 1,089,994,752 bytes (the embedding table is a lookup, not streamed). KV:
    /// 2 x 2 B x 4 x 128 = 2,048 bytes per token per layer. Achievable rates: the A100's of
    /// `profiles/rates.json` (fitted on Vidur's A100 kernels); each kernel group's memory and
    /// compute terms combine as `KernelRates::combine` (the p-norm).
    fn qwen7b_a100(tensor_parallel: u32) -> StepRoofline {
        StepRoofline::dense(
            &DenseModelShape::preset("qwen2.5-7b-instruct").unwrap(),
            Roofline::of(&GpuSpec::by_name("A100-80GB").unwrap()),
            TensorParallel {
                degree: tensor_parallel,
                link: LinkSpec {
                    bandwidth_bytes_per_s: 300e9,
                    latency_ns: 10_000.0,
                },
            },
            4e6,
        )
    }

    /// The A100's rates and one kernel group's time of `bytes` and `flops`, by hand.
    fn a100_group(bytes: f64, flops: f64) -> f64 {
        let r = KernelRates::of(&GpuSpec::by_name("A100-80GB").unwrap());
        r.combine(
            bytes / r.stream_bytes_per_s * 1e9,
            flops / r.gemm_flops * 1e9,
        )
    }

    #[test]
    fn dense_decode_step_matches_the_closed_form() {
        // 8 sequences of 1,000 cached tokens: 8,000 x 2,048 = 16,384,000 KV bytes per layer.
        // Each layer streams its 466,092,032 weight bytes and the KV and computes 64 padded
        // rows x 2 x 233,046,016 + 4 x 3584 x 8,000 FLOPs; the head streams 1,089,994,752
        // bytes and computes 2 x 544,997,376 x 64; plus the 4 ms host overhead.
        let price = qwen7b_a100(1).price(&StepTokens {
            rows: 8,
            sequences: 8,
            context_tokens: 8_000,
            prefill_square: 0.0,
        });
        let layer = a100_group(
            466_092_032.0 + 16_384_000.0,
            2.0 * 233_046_016.0 * 64.0 + 4.0 * 3584.0 * 8_000.0,
        );
        let head = a100_group(1_089_994_752.0, 2.0 * 544_997_376.0 * 64.0);
        let expected = 28.0 * layer + head + 4e6;
        assert!(
            (price.nanos - expected).abs() < 1.0,
            "{} vs {expected}",
            price.nanos
        );
        let bandwidth = KernelRates::of(&GpuSpec::by_name("A100-80GB").unwrap()).stream_bytes_per_s;
        let bytes = 13_050_576_896.0 + 458_752_000.0 + 1_089_994_752.0;
        assert!((price.memory_ns - bytes / bandwidth * 1e9).abs() < 1.0);
        // Memory-bound: within 3 % of streaming every byte once.
        assert!(price.nanos - 4e6 < 1.03 * price.memory_ns);
        assert_eq!(price.communication_ns, 0.0);
    }

    #[test]
    fn dense_prefill_step_is_compute_bound_with_causal_attention() {
        // One 2,048-token prompt: each layer computes 2 x 233,046,016 x 2,048 GEMM FLOPs (2,048
        // rows fill 128-row tiles) plus 4 x 3584 x (2,048 + 2,048^2 / 2) attention FLOPs (the
        // emitted row's and the causal prefill's); the head scores one row (64 padded).
        let price = qwen7b_a100(1).price(&StepTokens {
            rows: 2048,
            sequences: 1,
            context_tokens: 2048,
            prefill_square: 2048.0 * 2048.0,
        });
        let layer = a100_group(
            466_092_032.0 + 2048.0 * 2048.0,
            2.0 * 233_046_016.0 * 2048.0 + 4.0 * 3584.0 * (2048.0 + 2048.0 * 2048.0 / 2.0),
        );
        let head = a100_group(1_089_994_752.0, 2.0 * 544_997_376.0 * 64.0);
        let expected = 28.0 * layer + head + 4e6;
        assert!(
            (price.nanos - expected).abs() < 1.0,
            "{} vs {expected}",
            price.nanos
        );
        assert!(price.compute_ns > 10.0 * price.memory_ns, "compute-bound");
    }

    #[test]
    fn tensor_parallel_halves_the_streaming_and_adds_all_reduces() {
        // TP 2: each GPU streams half the weights and half the KV (4 KV heads split in two) and
        // computes half the FLOPs; two ring all-reduces per layer of 8 rows x 3584 x 2 B, of
        // which 2 (2 - 1) / 2 = 1 crosses the 300 GB/s link, plus 10 us each.
        let work = StepTokens {
            rows: 8,
            sequences: 8,
            context_tokens: 8_000,
            prefill_square: 0.0,
        };
        let price = qwen7b_a100(2).price(&work);
        let all_reduce = 2.0 * 28.0 * (10_000.0 + 8.0 * 3584.0 * 2.0 / 300e9 * 1e9);
        assert!((price.communication_ns - all_reduce).abs() < 1e-6);
        let layer = a100_group(
            (466_092_032.0 + 16_384_000.0) / 2.0,
            (2.0 * 233_046_016.0 * 64.0 + 4.0 * 3584.0 * 8_000.0) / 2.0,
        );
        let head = a100_group(1_089_994_752.0 / 2.0, 544_997_376.0 * 64.0);
        let expected = 28.0 * layer + head + 4e6 + all_reduce;
        assert!(
            (price.nanos - expected).abs() < 1.0,
            "{} vs {expected}",
            price.nanos
        );
    }

    #[test]
    fn model_flops_count_the_useful_work_without_padding() {
        // The decode step of `dense_decode_step_matches_the_closed_form`: 8 rows (not the 64
        // padded), 8,000 cached tokens, the head on 8 sequences:
        // 2 x 233,046,016 x 8 x 28 + 4 x 3584 x 8,000 x 28 + 2 x 544,997,376 x 8.
        let flops = qwen7b_a100(1).model_flops(&StepTokens {
            rows: 8,
            sequences: 8,
            context_tokens: 8_000,
            prefill_square: 0.0,
        });
        let expected = 2.0 * 233_046_016.0 * 8.0 * 28.0
            + 4.0 * 3584.0 * 8_000.0 * 28.0
            + 2.0 * 544_997_376.0 * 8.0;
        assert!((flops - expected).abs() < 1.0, "{flops} vs {expected}");
        // Tensor parallelism: each GPU does half.
        let half = qwen7b_a100(2).model_flops(&StepTokens {
            rows: 8,
            sequences: 8,
            context_tokens: 8_000,
            prefill_square: 0.0,
        });
        assert!((half - expected / 2.0).abs() < 1.0);
        // MFU: those FLOPs over 10 ms of an A100's 312 TFLOP/s.
        let a100 = GpuSpec::by_name("A100-80GB").unwrap();
        let mfu = a100.model_flops_utilization(expected, 0.01);
        assert!((mfu - expected / (312e12 * 0.01)).abs() < 1e-12);
    }

    #[test]
    fn a_slower_gpu_scales_its_own_terms() {
        // Compute factor 0.5 doubles the compute term only; bandwidth factor 0.8 stretches the
        // memory term by 1 / 0.8.
        let r = Roofline::of(&GpuSpec::by_name("H100-SXM").unwrap());
        let slow = r.scaled(SpeedFactors {
            compute: 0.5,
            bandwidth: 0.8,
        });
        let (fast_op, slow_op) = (r.op(1e9, 1e12), slow.op(1e9, 1e12));
        assert!((slow_op.compute_ns - 2.0 * fast_op.compute_ns).abs() < 1e-6);
        assert!((slow_op.memory_ns - fast_op.memory_ns / 0.8).abs() < 1e-6);
        assert_eq!(
            (slow.launch_ns, slow.rates.kernel_floor_ns),
            (r.launch_ns, r.rates.kernel_floor_ns)
        );
    }

    #[test]
    fn moe_non_expert_part_splits_over_tensor_parallel_gpus() {
        // Mixtral-8x7B's non-expert part per layer: attention 4096 x 4096 x 2 + 4096 x 1024 x 2
        // = 41,943,040 parameters, router 4096 x 8 = 32,768, norms 8,192 (streamed, not
        // multiplied). Over TP 4: a quarter of each, KV heads (8) split 4 ways, two
        // all-reduces of 4096 x 2 B per row and layer.
        let shape = MoeModelShape::mixtral_8x7b();
        let link = LinkSpec::NVLINK4;
        let h100 = Roofline::of(&GpuSpec::by_name("H100-SXM").unwrap());
        const HOST_NS: f64 = 2e6;
        let tp = |degree| {
            StepRoofline::moe_non_expert_tensor_parallel(
                &shape,
                h100,
                TensorParallel { degree, link },
                2.0,
                HOST_NS,
            )
        };
        let (one, four) = (tp(1), tp(4));
        let layer_params = 41_943_040.0 + 32_768.0;
        assert_eq!(one.layers[0].weight_bytes, (layer_params + 8192.0) * 2.0);
        assert_eq!(
            four.layers[0].weight_bytes,
            one.layers[0].weight_bytes / 4.0
        );
        assert_eq!(four.layers[0].flops_per_row, 2.0 * layer_params / 4.0);
        // K and V of 8 heads of 128, 2 bytes: 4,096 bytes per token and layer, 1,024 per GPU.
        assert_eq!(one.attention.kv_bytes_per_token, 4096.0);
        assert_eq!(four.attention.kv_bytes_per_token, 1024.0);
        assert!(one.all_reduce.is_none());
        let work = StepTokens {
            rows: 4,
            sequences: 4,
            context_tokens: 2_000,
            prefill_square: 0.0,
        };
        let wire = 4.0 * 4096.0 * 2.0 * 2.0 * 3.0 / 4.0;
        let all_reduce = 2.0 * 32.0 * (5_000.0 + wire / 360e9 * 1e9);
        assert!((four.price(&work).communication_ns - all_reduce).abs() < 1e-6);
        assert_eq!(four.price(&work).overhead_ns, HOST_NS);
    }

    #[test]
    fn mla_attention_decodes_over_the_latent_cache() {
        // ESFT-vanilla-lite (DeepSeek-V2-Lite) on one Ascend-910B: 512 + 64 latent and rotary
        // elements of 2 B per token and layer; a decoding row spends 16 heads x (2 x 576 +
        // 2 x 512) = 34,816 FLOPs per cached token and layer, a prefill row 16 x (2 x 192 +
        // 2 x 128) = 10,240 per earlier prompt token. One layer of 100 decoding rows over
        // 100,000 cached tokens: the weights plus 115,200,000 KV bytes against
        // 2 x params x 128 padded rows + 34,816 x 100,000 FLOPs.
        let shape = MlaMoeShape::esft_vanilla_16b();
        let gpu = GpuSpec::by_name("Ascend-910B").unwrap();
        let step = StepRoofline::mla_moe_non_expert(&shape, Roofline::of(&gpu), 1, 1, 5);
        assert_eq!(step.attention.kv_bytes_per_token, 1152.0);
        assert_eq!(step.attention.decode_flops_per_pair, 34_816.0);
        assert_eq!(step.attention.prefill_flops_per_pair, 10_240.0);
        let work = StepTokens {
            rows: 100,
            sequences: 100,
            context_tokens: 100_000,
            prefill_square: 0.0,
        };
        let params = shape.layer_non_routed_params(1) as f64;
        let layer = step.layer(1, &work);
        let rates = KernelRates::of(&gpu);
        let (bandwidth, compute) = (rates.stream_bytes_per_s, rates.gemm_flops);
        assert!((layer.memory_ns - (2.0 * params + 115_200_000.0) / bandwidth * 1e9).abs() < 1e-3);
        assert!(
            (layer.compute_ns - (2.0 * params * 128.0 + 34_816.0 * 100_000.0) / compute * 1e9)
                .abs()
                < 1e-3
        );
        // Tensor parallelism splits the weights but not the latent cache each rank reads.
        let tp8 = StepRoofline::mla_moe_non_expert(&shape, Roofline::of(&gpu), 8, 8, 5);
        assert_eq!(tp8.attention.kv_bytes_per_token, 1152.0);
        assert_eq!(
            tp8.layers[1].weight_bytes,
            step.layers[1].weight_bytes / 8.0
        );
        // 27 layers x 5 kernels + 3 for the head, 10 us each.
        let price = step.price(&work);
        assert_eq!(price.overhead_ns, (27.0 * 5.0 + 3.0) * 10_000.0);
    }
}
