//! Named operations of catalogue models, priced through the very entry points the simulator
//! uses (`expertsim price`, the H200 fidelity check, docs/fidelity.md's H200 section): a dense
//! op (`op` + `tokens`: a GEMM of the model, its decode or prefill attention) through
//! `cost::kernel`, one GPU's MoE layer (its experts' rows) through `cost::moe_layer`.

use crate::cost::gpu::GpuSpec;
use crate::cost::kernel::{KernelRates, KernelTime, Timing};
use crate::cost::moe_layer::{ExpertRows, MoeLayerCost, SpeedFactors};
use crate::cost::shape::{DenseModelShape, MlaMoeShape, MoeModelShape};
use serde::Serialize;

/// A model of the shape catalogue, whichever table holds it.
#[derive(Clone, Debug, PartialEq)]
pub enum CatalogueModel {
    Dense(DenseModelShape),
    Moe(MoeModelShape),
    Mla(MlaMoeShape),
}

impl CatalogueModel {
    /// The preset called `name` from any of the three tables.
    pub fn by_name(name: &str) -> Result<CatalogueModel, String> {
        if let Ok(shape) = MoeModelShape::preset(name) {
            return Ok(CatalogueModel::Moe(shape));
        }
        if let Ok(shape) = DenseModelShape::preset(name) {
            return Ok(CatalogueModel::Dense(shape));
        }
        if let Ok(shape) = MlaMoeShape::preset(name) {
            return Ok(CatalogueModel::Mla(shape));
        }
        Err(format!(
            "unknown model {name:?}; known: {}",
            crate::cost::shape::MOE_PRESETS
                .iter()
                .chain(crate::cost::shape::DENSE_PRESETS)
                .chain(crate::cost::shape::MLA_MOE_PRESETS)
                .copied()
                .collect::<Vec<_>>()
                .join(", ")
        ))
    }

    /// The routed experts' geometry (MoE and MLA-MoE models).
    pub fn experts(&self) -> Option<MoeModelShape> {
        match self {
            CatalogueModel::Dense(_) => None,
            CatalogueModel::Moe(shape) => Some(shape.clone()),
            CatalogueModel::Mla(shape) => Some(shape.moe_geometry()),
        }
    }

    /// (hidden, query heads, KV heads, head width, intermediate of a dense MLP or shared
    /// expert, vocabulary, bytes per weight).
    fn dims(&self) -> (u64, u64, u64, u64, u64, u64, f64) {
        match self {
            CatalogueModel::Dense(s) => (
                s.hidden,
                s.n_heads,
                s.n_kv_heads,
                s.head_dim,
                s.intermediate,
                s.vocab,
                2.0,
            ),
            CatalogueModel::Moe(s) => (
                s.hidden as u64,
                s.n_attention_heads as u64,
                s.n_kv_heads as u64,
                s.head_dim as u64,
                (s.shared_expert_ffn * s.n_shared_experts) as u64,
                s.vocab as u64,
                s.weight_dtype.bytes_per_param(),
            ),
            CatalogueModel::Mla(s) => {
                let g = s.moe_geometry();
                (
                    g.hidden as u64,
                    g.n_attention_heads as u64,
                    g.n_kv_heads as u64,
                    g.head_dim as u64,
                    (g.shared_expert_ffn * g.n_shared_experts) as u64,
                    g.vocab as u64,
                    s.bytes_per_param as f64,
                )
            }
        }
    }
}

/// A named operation of a model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// One routed expert's gate and up projections (`hidden -> 2 x expert_ffn`).
    ExpertUp,
    /// One routed expert's down projection (`expert_ffn -> hidden`).
    ExpertDown,
    /// A dense model's (or the shared experts') gate and up projections.
    MlpUp,
    /// A dense model's (or the shared experts') down projection.
    MlpDown,
    /// The fused query, key and value projection.
    QkvProj,
    /// The attention output projection.
    OProj,
    /// The output head (`hidden -> vocab`).
    LmHead,
    /// Decode attention: `tokens` sequences of `context` cached tokens.
    DecodeAttention,
    /// Causal prefill attention of one `tokens`-long sequence.
    PrefillAttention,
}

/// Every op name `Op::parse` takes.
pub const OP_NAMES: &[&str] = &[
    "expert_up",
    "expert_down",
    "mlp_up",
    "mlp_down",
    "qkv_proj",
    "o_proj",
    "lm_head",
    "decode_attention",
    "prefill_attention",
];

impl Op {
    pub fn parse(name: &str) -> Result<Op, String> {
        Ok(match name {
            "expert_up" => Op::ExpertUp,
            "expert_down" => Op::ExpertDown,
            "mlp_up" => Op::MlpUp,
            "mlp_down" => Op::MlpDown,
            "qkv_proj" => Op::QkvProj,
            "o_proj" => Op::OProj,
            "lm_head" => Op::LmHead,
            "decode_attention" => Op::DecodeAttention,
            "prefill_attention" => Op::PrefillAttention,
            other => {
                return Err(format!(
                    "unknown op {other:?}; known: {}",
                    OP_NAMES.join(", ")
                ));
            }
        })
    }
}

/// The `k x n` weights of a GEMM op of `model` (an error for the attention ops and for an op
/// the model does not have).
pub fn gemm_dims(model: &CatalogueModel, op: Op) -> Result<(u64, u64), String> {
    let (hidden, heads, kv_heads, head_dim, mlp, vocab, _) = model.dims();
    let experts = model.experts();
    let expert_ffn = || {
        experts
            .as_ref()
            .map(|e| e.expert_ffn as u64)
            .ok_or_else(|| "a dense model has no routed experts".to_string())
    };
    let mlp_width = || {
        if mlp > 0 {
            Ok(mlp)
        } else {
            Err("the model has no dense MLP or shared expert".to_string())
        }
    };
    Ok(match op {
        Op::ExpertUp => (hidden, 2 * expert_ffn()?),
        Op::ExpertDown => (expert_ffn()?, hidden),
        Op::MlpUp => (hidden, 2 * mlp_width()?),
        Op::MlpDown => (mlp_width()?, hidden),
        Op::QkvProj => (hidden, (heads + 2 * kv_heads) * head_dim),
        Op::OProj => (heads * head_dim, hidden),
        Op::LmHead => (hidden, vocab),
        Op::DecodeAttention | Op::PrefillAttention => {
            return Err("an attention op is not a GEMM".into());
        }
    })
}

/// The attention geometry of `model`: (query heads, KV heads, head width).
pub fn attention_dims(model: &CatalogueModel) -> (u64, u64, u64) {
    let (_, heads, kv_heads, head_dim, ..) = model.dims();
    (heads, kv_heads, head_dim)
}

/// What one priced row costs, ns: the time under the row's timing and the terms behind it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Priced {
    pub predicted_ns: f64,
    pub memory_ns: f64,
    pub compute_ns: f64,
    /// Kernel floors and reduction latency (GPU side).
    pub floor_ns: f64,
    /// What the host's launches add under eager timing (0 in a CUDA graph).
    pub host_ns: f64,
}

impl Priced {
    fn of(kernels: &[KernelTime], timing: Timing, host_launch_ns: f64) -> Priced {
        let mut p = Priced::default();
        for k in kernels {
            let wall = k.wall(timing, host_launch_ns);
            p.memory_ns += k.memory_ns;
            p.compute_ns += k.compute_ns;
            p.floor_ns += k.floor_ns;
            p.host_ns += wall - k.nanos;
            p.predicted_ns += wall;
        }
        p
    }
}

/// A dense op of `model` on `gpu`: `tokens` rows through a GEMM, `tokens` sequences of
/// `context` cached tokens through decode attention, or one `tokens`-long prompt through
/// causal prefill attention.
pub fn price_op(
    gpu: &GpuSpec,
    model: &CatalogueModel,
    op: Op,
    tokens: u64,
    context: u64,
    timing: Timing,
) -> Result<Priced, String> {
    let rates = KernelRates::of(gpu);
    let (_, heads, kv_heads, head_dim, _, _, bytes_per_param) = model.dims();
    let kernel = match op {
        Op::DecodeAttention => {
            if context == 0 {
                return Err("decode_attention needs a positive context".into());
            }
            let kv_bytes = (tokens * context * kv_heads * head_dim) as f64 * 2.0 * 2.0;
            rates.decode_attention(
                tokens,
                heads,
                head_dim,
                kv_bytes,
                (tokens * context * heads) as f64,
            )
        }
        Op::PrefillAttention => rates.prefill_attention(tokens, heads, head_dim),
        Op::LmHead => {
            let (k, n) = gemm_dims(model, op)?;
            rates.gemm(tokens, k, n, 2.0)
        }
        _ => {
            let (k, n) = gemm_dims(model, op)?;
            rates.gemm(tokens, k, n, bytes_per_param)
        }
    };
    Ok(Priced::of(&[kernel], timing, rates.host_launch_ns))
}

/// Which part of one GPU's MoE layer to price.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MoePart {
    /// The two grouped GEMMs alone (what `moe_grouped.csv` measures).
    ExpertGemms,
    /// The whole expert part: the grouped GEMMs and the activation between them.
    Layer,
}

/// One GPU's MoE layer of `model` on `gpu` with `rows` rows per expert it holds, through the
/// simulator's entry point (`MoeLayerCost::gpu`); with `measured`, scaled to the measured
/// grouped GEMMs of this GPU and expert shape where there are any (as GEM's runs price them).
pub fn price_moe(
    gpu: &GpuSpec,
    model: &CatalogueModel,
    rows: ExpertRows<'_>,
    part: MoePart,
    timing: Timing,
    measured: bool,
) -> Result<Priced, String> {
    let shape = model
        .experts()
        .ok_or_else(|| "a dense model has no routed experts".to_string())?;
    let mut layer = MoeLayerCost::new(gpu, &shape, timing);
    if measured {
        layer = layer.with_measured_grouped(gpu).0;
    }
    let cost = layer.gpu(rows, SpeedFactors::NOMINAL);
    let kernels: &[KernelTime] = match part {
        MoePart::ExpertGemms => &[cost.kernels[0], cost.kernels[2]],
        MoePart::Layer => &cost.kernels,
    };
    let mut priced = Priced::of(kernels, timing, layer.rates.host_launch_ns);
    // The time itself is the entry point's (the measured scaling included).
    priced.predicted_ns = match part {
        MoePart::ExpertGemms => cost.gemms_ns,
        MoePart::Layer => cost.nanos,
    };
    Ok(priced)
}
