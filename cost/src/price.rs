//! Named operations of catalogue models, priced through the very entry points the simulator
//! uses (`expertsim price`, the H200 fidelity check, docs/fidelity.md's H200 section): a dense
//! op (`op` + `tokens`: a GEMM of the model, its decode or prefill attention) through
//! `cost::kernel`, one GPU's MoE layer (its experts' rows) through `cost::moe_layer`, a dense
//! model's whole decode or prefill step by kernel class as the serving family prices it.

use crate::gpu::GpuSpec;
use crate::host::HostOverhead;
use crate::kernel::{KernelRates, KernelTime, Timing};
use crate::moe_layer::{ExpertRows, MoeLayerCost, SpeedFactors};
use crate::roofline::{ElementwiseKernels, Roofline, StepRoofline, StepTokens, TensorParallel};
use crate::shape::{DenseModelShape, MlaMoeShape, MoeModelShape};
use serde::Serialize;
use std::path::Path;

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
            crate::shape::MOE_PRESETS
                .iter()
                .chain(crate::shape::DENSE_PRESETS)
                .chain(crate::shape::MLA_MOE_PRESETS)
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
    /// A dense model's whole decode step on one GPU as the serving family prices it: `tokens`
    /// sequences of `context` cached tokens, by kernel class, with the host's time.
    DecodeStep,
    /// A dense model's whole prefill step of one `tokens`-long prompt, likewise.
    PrefillStep,
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
    "decode_step",
    "prefill_step",
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
            "decode_step" => Op::DecodeStep,
            "prefill_step" => Op::PrefillStep,
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
        Op::DecodeStep | Op::PrefillStep => return Err("a step is not a GEMM".into()),
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
    if matches!(op, Op::DecodeStep | Op::PrefillStep) {
        return price_step(gpu, model, op, tokens, context, HostOverhead::vllm_v0())
            .map(|(priced, _)| priced);
    }
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
        Op::DecodeStep | Op::PrefillStep => unreachable!("priced by price_step above"),
        _ => {
            let (k, n) = gemm_dims(model, op)?;
            rates.gemm(tokens, k, n, bytes_per_param)
        }
    };
    Ok(Priced::of(&[kernel], timing, rates.host_launch_ns))
}

/// A step's time by kernel class, ns (`StepRoofline::parts` and the host's time).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct StepColumns {
    pub linear_ns: f64,
    pub elementwise_ns: f64,
    pub attention_ns: f64,
    pub head_ns: f64,
}

/// A dense model's decode step (`tokens` sequences of `context` cached tokens) or prefill step
/// (one `tokens`-long prompt) on one GPU, as the serving family prices a one-GPU replica's
/// step: kernel class by kernel class (`StepRoofline::parts`, its element-wise kernels by
/// their bytes) plus `host`'s measured time for its sequences (`cost::host`); `host_ns` is
/// that time, `memory_ns` and `compute_ns` the GEMM, attention and head terms.
pub fn price_step(
    gpu: &GpuSpec,
    model: &CatalogueModel,
    op: Op,
    tokens: u64,
    context: u64,
    host: HostOverhead,
) -> Result<(Priced, StepColumns), String> {
    let CatalogueModel::Dense(shape) = model else {
        return Err("decode_step and prefill_step price a dense model's step".into());
    };
    let parallel = TensorParallel {
        degree: 1,
        link: crate::gpu::LinkSpec::NVLINK4,
    };
    let roofline = StepRoofline::dense(shape, Roofline::of(gpu), parallel, 0.0);
    let (work, sequences) = match op {
        Op::DecodeStep => {
            if context == 0 {
                return Err("decode_step needs a positive context".into());
            }
            (
                StepTokens {
                    rows: tokens,
                    sequences: tokens,
                    context_tokens: tokens * context,
                    prefill_square: 0.0,
                },
                tokens,
            )
        }
        _ => (
            StepTokens {
                rows: tokens,
                sequences: 1,
                context_tokens: tokens,
                prefill_square: (tokens as f64).powi(2),
            },
            1,
        ),
    };
    let parts = roofline.parts(&work, &ElementwiseKernels::dense(shape, 1));
    let host_ns = host.nanos(sequences);
    let priced = Priced {
        predicted_ns: parts.nanos() + host_ns,
        memory_ns: parts.linear.memory_ns + parts.attention.memory_ns + parts.head.memory_ns,
        compute_ns: parts.linear.compute_ns + parts.attention.compute_ns + parts.head.compute_ns,
        floor_ns: 0.0,
        host_ns,
    };
    let columns = StepColumns {
        linear_ns: parts.linear.nanos,
        elementwise_ns: parts.elementwise_ns,
        attention_ns: parts.attention.nanos,
        head_ns: parts.head.nanos,
    };
    Ok((priced, columns))
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

/// A price input that cannot be priced: the file, and where there is one the 1-based line and
/// the column.
#[derive(Debug, thiserror::Error)]
pub enum PriceError {
    #[error("{}: {message}", path.display())]
    File {
        path: std::path::PathBuf,
        message: String,
    },
    #[error("{}:{line}: column {column:?}: {message}", path.display())]
    Cell {
        path: std::path::PathBuf,
        line: u64,
        column: String,
        message: String,
    },
}

/// How `price_csv` prices its rows.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PriceOptions {
    pub timing: Timing,
    /// Scale MoE rows to the GPU's measured grouped GEMMs where its expert shape was measured
    /// (as GEM's runs do); the kernel model alone otherwise.
    pub measured_curves: bool,
}

/// The columns `price_csv` appends.
pub const PRICE_COLUMNS: [&str; 9] = [
    "predicted_us",
    "memory_us",
    "compute_us",
    "floor_us",
    "host_us",
    "linear_us",
    "elementwise_us",
    "attention_us",
    "head_us",
];

/// Reads the CSV at `path` (columns `gpu`, `model`, then per row `op` + `tokens` (+ `context`
/// for `decode_attention`), or `experts_on_gpu` + `tokens_on_gpu`, or `rows_per_expert`, with
/// an optional `op` of `moe_layer` (the default) or `expert_gemms`; any other column is passed
/// through), prices every row through the simulator's entry points and returns the same rows
/// with `PRICE_COLUMNS` appended, as CSV text.
pub fn price_csv(path: &Path, options: PriceOptions) -> Result<String, PriceError> {
    let file_error = |message: String| PriceError::File {
        path: path.to_path_buf(),
        message,
    };
    let mut reader = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_path(path)
        .map_err(|e| file_error(format!("cannot read: {e}")))?;
    let header: Vec<String> = reader
        .headers()
        .map_err(|e| file_error(format!("cannot read the header: {e}")))?
        .iter()
        .map(str::to_string)
        .collect();
    let column = |name: &str| header.iter().position(|h| h == name);
    for required in ["gpu", "model"] {
        if column(required).is_none() {
            return Err(file_error(format!(
                "no column {required:?} (a price input has gpu, model, and op + tokens, experts_on_gpu + tokens_on_gpu, or rows_per_expert)"
            )));
        }
    }
    let mut out = csv::Writer::from_writer(Vec::new());
    let mut out_header = header.clone();
    out_header.extend(PRICE_COLUMNS.iter().map(|c| c.to_string()));
    out.write_record(&out_header)
        .map_err(|e| file_error(e.to_string()))?;
    let mut rows = 0usize;
    for record in reader.records() {
        let record = record.map_err(|e| file_error(format!("cannot read: {e}")))?;
        let line = record.position().map_or(0, csv::Position::line);
        let cell = |name: &str| {
            column(name)
                .and_then(|i| record.get(i))
                .filter(|v| !v.is_empty())
        };
        let refuse = |name: &str, message: String| PriceError::Cell {
            path: path.to_path_buf(),
            line,
            column: name.to_string(),
            message,
        };
        let count = |name: &str| -> Result<u64, PriceError> {
            let text = cell(name).ok_or_else(|| refuse(name, "missing".into()))?;
            let n: u64 = text
                .parse()
                .map_err(|_| refuse(name, format!("expected a whole number, got {text:?}")))?;
            if n == 0 {
                return Err(refuse(name, "must be at least 1".into()));
            }
            Ok(n)
        };
        let gpu = GpuSpec::by_name(cell("gpu").unwrap_or(""))
            .map_err(|e| refuse("gpu", e.to_string()))?;
        let model =
            CatalogueModel::by_name(cell("model").unwrap_or("")).map_err(|e| refuse("model", e))?;
        let op = cell("op");
        let moe_part = |op: Option<&str>| match op {
            None | Some("moe_layer") => Ok(MoePart::Layer),
            Some("expert_gemms") => Ok(MoePart::ExpertGemms),
            Some(other) => Err(refuse(
                "op",
                format!("an MoE row's op is moe_layer or expert_gemms, got {other:?}"),
            )),
        };
        let kinds = [
            cell("rows_per_expert").is_some(),
            cell("experts_on_gpu").is_some() || cell("tokens_on_gpu").is_some(),
            cell("tokens").is_some(),
        ];
        if kinds.iter().filter(|&&k| k).count() != 1 {
            return Err(refuse(
                "tokens",
                "give exactly one of: op + tokens, experts_on_gpu + tokens_on_gpu, rows_per_expert"
                    .into(),
            ));
        }
        let moe = |rows: ExpertRows<'_>, part| {
            price_moe(
                &gpu,
                &model,
                rows,
                part,
                options.timing,
                options.measured_curves,
            )
            .map_err(|e| refuse("model", e))
        };
        let mut step: Option<StepColumns> = None;
        let priced = if let Some(text) = cell("rows_per_expert") {
            let groups: Vec<u32> = text
                .split(';')
                .map(|g| g.trim().parse::<u32>().ok())
                .collect::<Option<_>>()
                .filter(|g: &Vec<u32>| g.iter().any(|&r| r > 0))
                .ok_or_else(|| {
                    refuse(
                        "rows_per_expert",
                        format!("expected rows per expert separated by ';', at least one positive, got {text:?}"),
                    )
                })?;
            check_experts(&model, groups.len() as u64).map_err(|e| refuse("rows_per_expert", e))?;
            moe(ExpertRows::Counted(&groups), moe_part(op)?)?
        } else if cell("experts_on_gpu").is_some() || cell("tokens_on_gpu").is_some() {
            let experts = count("experts_on_gpu")?;
            check_experts(&model, experts).map_err(|e| refuse("experts_on_gpu", e))?;
            let tokens = count("tokens_on_gpu")?;
            moe(
                ExpertRows::Even {
                    tokens,
                    experts: experts as usize,
                },
                moe_part(op)?,
            )?
        } else {
            let name =
                op.ok_or_else(|| refuse("op", "missing (a dense row names its op)".into()))?;
            let op = Op::parse(name).map_err(|e| refuse("op", e))?;
            let tokens = count("tokens")?;
            let context = if matches!(op, Op::DecodeAttention | Op::DecodeStep) {
                count("context")?
            } else {
                0
            };
            if matches!(op, Op::DecodeStep | Op::PrefillStep) {
                let host = match cell("host_time") {
                    None | Some("vllm") => HostOverhead::vllm_v0(),
                    Some("sarathi-serve") => HostOverhead::sarathi_serve(),
                    Some(other) => {
                        return Err(refuse(
                            "host_time",
                            format!("unknown engine {other:?} (vllm or sarathi-serve)"),
                        ));
                    }
                };
                let (priced, columns) = price_step(&gpu, &model, op, tokens, context, host)
                    .map_err(|e| refuse("op", e))?;
                step = Some(columns);
                priced
            } else {
                price_op(&gpu, &model, op, tokens, context, options.timing)
                    .map_err(|e| refuse("op", e))?
            }
        };
        let mut fields: Vec<String> = record.iter().map(str::to_string).collect();
        fields.resize(header.len(), String::new());
        for v in [
            priced.predicted_ns,
            priced.memory_ns,
            priced.compute_ns,
            priced.floor_ns,
            priced.host_ns,
        ] {
            fields.push(format!("{:.3}", v / 1e3));
        }
        match step {
            Some(c) => {
                for v in [c.linear_ns, c.elementwise_ns, c.attention_ns, c.head_ns] {
                    fields.push(format!("{:.3}", v / 1e3));
                }
            }
            None => fields.extend(std::iter::repeat_n(String::new(), 4)),
        }
        out.write_record(&fields)
            .map_err(|e| file_error(e.to_string()))?;
        rows += 1;
    }
    if rows == 0 {
        return Err(file_error("no rows after the header".into()));
    }
    let bytes = out.into_inner().map_err(|e| file_error(e.to_string()))?;
    Ok(String::from_utf8(bytes).expect("CSV of UTF-8 input is UTF-8"))
}

/// A GPU of `model` holds at most its routed experts.
fn check_experts(model: &CatalogueModel, experts: u64) -> Result<(), String> {
    let shape = model
        .experts()
        .ok_or_else(|| "a dense model has no routed experts".to_string())?;
    if experts > shape.n_experts as u64 {
        return Err(format!(
            "{experts} experts on one GPU; the model has {}",
            shape.n_experts
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn priced(text: &str, options: PriceOptions) -> Result<String, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.csv");
        std::fs::write(&path, text).unwrap();
        price_csv(&path, options).map_err(|e| e.to_string())
    }

    #[test]
    fn a_step_row_pays_the_host_time_of_the_engine_it_names() {
        let out = priced(
            "gpu,model,op,tokens,context,host_time\n\
             H100-SXM,llama-2-7b,decode_step,8,512,\n\
             H100-SXM,llama-2-7b,decode_step,8,512,sarathi-serve\n",
            PriceOptions::default(),
        )
        .unwrap();
        let rows: Vec<Vec<&str>> = out.lines().map(|l| l.split(',').collect()).collect();
        let at = |row: usize, name: &str| -> f64 {
            let i = rows[0].iter().position(|h| *h == name).unwrap();
            rows[row][i].parse().unwrap()
        };
        for (row, host) in [
            (1, HostOverhead::vllm_v0()),
            (2, HostOverhead::sarathi_serve()),
        ] {
            assert!((at(row, "host_us") - host.nanos(8) / 1e3).abs() < 0.01);
        }
        // The same kernels: the rows differ by the host's time alone.
        let gap = at(1, "predicted_us") - at(2, "predicted_us");
        assert!(
            (gap - (at(1, "host_us") - at(2, "host_us"))).abs() < 0.01,
            "{gap}"
        );
        assert_eq!(at(1, "linear_us"), at(2, "linear_us"));
    }

    #[test]
    fn rows_are_priced_through_the_entry_points() {
        let out = priced(
            "gpu,model,op,tokens,context,experts_on_gpu,tokens_on_gpu,rows_per_expert,note\n\
             H200,mixtral-8x7b,expert_up,16,,,,,a\n\
             H200,mixtral-8x7b,decode_attention,4,1024,,,,b\n\
             H200,mixtral-8x7b,,,,2,64,,c\n\
             H200,mixtral-8x7b,expert_gemms,,,,,32;32,d\n",
            PriceOptions::default(),
        )
        .unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[0].ends_with(
            "note,predicted_us,memory_us,compute_us,floor_us,host_us,linear_us,elementwise_us,\
             attention_us,head_us"
        ));
        let gpu = GpuSpec::by_name("H200").unwrap();
        let model = CatalogueModel::by_name("mixtral-8x7b").unwrap();
        let us = |ns: f64| format!("{:.3}", ns / 1e3);
        let up = price_op(&gpu, &model, Op::ExpertUp, 16, 0, Timing::Graph).unwrap();
        assert!(
            lines[1].starts_with("H200,mixtral-8x7b,expert_up,16,,,,,a,")
                && lines[1].contains(&us(up.predicted_ns))
        );
        let even = price_moe(
            &gpu,
            &model,
            ExpertRows::Even {
                tokens: 64,
                experts: 2,
            },
            MoePart::Layer,
            Timing::Graph,
            false,
        )
        .unwrap();
        assert!(lines[3].contains(&us(even.predicted_ns)));
        let gemms = price_moe(
            &gpu,
            &model,
            ExpertRows::Counted(&[32, 32]),
            MoePart::ExpertGemms,
            Timing::Graph,
            false,
        )
        .unwrap();
        assert!(lines[4].contains(&us(gemms.predicted_ns)));
        // The same 64 rows: the layer adds the SwiGLU to the two GEMMs.
        assert!(even.predicted_ns > gemms.predicted_ns);
        // Eager: the host's launch where a kernel is shorter.
        let eager = priced(
            "gpu,model,op,tokens\nH200,qwen1.5-moe-a2.7b,expert_down,1\n",
            PriceOptions {
                timing: Timing::Eager,
                measured_curves: false,
            },
        )
        .unwrap();
        let host = KernelRates::of(&gpu).host_launch_ns;
        assert!(eager.lines().nth(1).unwrap().contains(&us(host)));
    }

    #[test]
    fn refused_rows_name_file_line_and_column() {
        let err = |text: &str| priced(text, PriceOptions::default()).unwrap_err();
        let e = err(
            "gpu,model,op,tokens,context,host_time\nH100-SXM,llama-2-7b,decode_step,8,512,tgi\n",
        );
        assert!(
            e.contains(":2: column \"host_time\"") && e.contains("unknown engine"),
            "{e}"
        );
        let e = err(
            "gpu,model,op,tokens\nH200,mixtral-8x7b,expert_up,16\nH201,mixtral-8x7b,expert_up,16\n",
        );
        assert!(
            e.contains("in.csv:3: column \"gpu\"") && e.contains("unknown GPU"),
            "{e}"
        );
        let e = err("gpu,model,op,tokens\nH200,gpt-5,expert_up,16\n");
        assert!(
            e.contains(":2: column \"model\"") && e.contains("unknown model"),
            "{e}"
        );
        let e = err("gpu,model,op,tokens\nH200,mixtral-8x7b,expert_sideways,16\n");
        assert!(
            e.contains(":2: column \"op\"") && e.contains("unknown op"),
            "{e}"
        );
        let e = err("gpu,model,op,tokens\nH200,mixtral-8x7b,expert_up,0\n");
        assert!(
            e.contains(":2: column \"tokens\"") && e.contains("at least 1"),
            "{e}"
        );
        let e = err("gpu,model,op,tokens\nH200,llama-2-7b,expert_up,4\n");
        assert!(
            e.contains(":2: column \"op\"") && e.contains("no routed experts"),
            "{e}"
        );
        let e = err("gpu,model,op,tokens,context\nH200,mixtral-8x7b,decode_attention,4,\n");
        assert!(
            e.contains(":2: column \"context\"") && e.contains("missing"),
            "{e}"
        );
        let e = err("gpu,model,experts_on_gpu,tokens_on_gpu\nH200,mixtral-8x7b,9,16\n");
        assert!(
            e.contains(":2: column \"experts_on_gpu\"") && e.contains("has 8"),
            "{e}"
        );
        let e = err("gpu,model,rows_per_expert\nH200,mixtral-8x7b,4;x\n");
        assert!(e.contains(":2: column \"rows_per_expert\""), "{e}");
        let e = err("gpu,model,op,tokens,rows_per_expert\nH200,mixtral-8x7b,expert_up,4,4;4\n");
        assert!(e.contains(":2:") && e.contains("exactly one"), "{e}");
        let e = err("gpu,op,tokens\nH200,expert_up,4\n");
        assert!(e.contains("no column \"model\""), "{e}");
        let e = err("gpu,model,op,tokens\n");
        assert!(e.contains("no rows"), "{e}");
    }
}
