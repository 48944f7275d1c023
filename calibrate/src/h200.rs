//! `import-h200`: converts a kernel-timing folder measured on one GPU (`gemm.csv`,
//! `moe_grouped.csv`, `attention_decode.csv`, `attention_prefill.csv`, `device.json`; the
//! layout of `../shared/data/h200/`) into one `expertsim_scenario::cost::kernel_timings::KernelTimings` file.
//! Every point is tied to the catalogue model and operation it measures and checked against
//! that model's shape, so a row of another shape is refused; every error names the file, the
//! 1-based line and the column.

use crate::import_table::{ImportError, Table, file_error};
use expertsim_scenario::cost::kernel::Timing;
use expertsim_scenario::cost::kernel_timings::{
    DecodeAttentionTiming, DeviceFacts, GemmTiming, GroupedTiming, KERNEL_TIMINGS_FORMAT_VERSION,
    KernelTimings, PrefillAttentionTiming, TimingSource,
};
use expertsim_scenario::cost::price::{CatalogueModel, Op, attention_dims, gemm_dims};
use std::path::Path;

/// The folder's GEMM shape labels: (label, catalogue model, operation).
pub const GEMM_SHAPES: &[(&str, &str, &str)] = &[
    ("mixtral_w13", "mixtral-8x7b", "expert_up"),
    ("mixtral_w2", "mixtral-8x7b", "expert_down"),
    ("qwenmoe_w13", "qwen1.5-moe-a2.7b", "expert_up"),
    ("qwenmoe_w2", "qwen1.5-moe-a2.7b", "expert_down"),
    ("llama2_w13", "llama-2-7b", "mlp_up"),
    ("llama2_w2", "llama-2-7b", "mlp_down"),
    ("llama2_qkv", "llama-2-7b", "qkv_proj"),
    ("llama2_o", "llama-2-7b", "o_proj"),
];

/// The folder's MoE model labels.
pub const MOE_MODELS: &[(&str, &str)] = &[
    ("mixtral", "mixtral-8x7b"),
    ("qwenmoe", "qwen1.5-moe-a2.7b"),
];

/// Catalogue models whose attention geometry names an attention row (the first that matches).
pub const ATTENTION_MODELS: &[&str] = &["llama-2-7b", "mixtral-8x7b"];

/// What the data say about themselves, recorded with them.
#[derive(Clone, Debug)]
pub struct Attribution {
    pub gpu: String,
    pub origin: String,
    pub measured: String,
    pub licence: String,
}

fn timing(table: &Table, row: usize, column: usize) -> Result<Timing, ImportError> {
    let text: String = table.cell(row, column, "eager or graph")?;
    match text.as_str() {
        "eager" => Ok(Timing::Eager),
        "graph" => Ok(Timing::Graph),
        other => Err(table.refuse(
            row,
            column,
            format!("expected eager or graph, got {other:?}"),
        )),
    }
}

/// (median, low, high) in microseconds from the three named columns.
fn times(table: &Table, row: usize, cols: [usize; 3]) -> Result<(f64, f64, f64), ImportError> {
    let median = table.positive(row, cols[0], "a time in microseconds")?;
    let low = table.positive(row, cols[1], "a time in microseconds")?;
    let high = table.positive(row, cols[2], "a time in microseconds")?;
    if !(low <= median && median <= high) {
        return Err(table.refuse(
            row,
            cols[0],
            format!("the median {median} lies outside its spread {low}..{high}"),
        ));
    }
    Ok((median, low, high))
}

fn columns<const N: usize>(table: &Table, names: [&str; N]) -> Result<[usize; N], ImportError> {
    let mut out = [0; N];
    for (o, name) in out.iter_mut().zip(names) {
        *o = table.column(name)?;
    }
    Ok(out)
}

fn model(
    table: &Table,
    row: usize,
    column: usize,
    name: &str,
) -> Result<CatalogueModel, ImportError> {
    CatalogueModel::by_name(name).map_err(|e| table.refuse(row, column, e))
}

/// `gemm.csv`: `shape,k,n,tokens,timing,median_us,p10_us,p90_us`.
pub fn import_gemm(path: &Path) -> Result<Vec<GemmTiming>, ImportError> {
    let t = Table::read(path)?;
    let [shape, k, n, tokens, tm, median, p10, p90] = columns(
        &t,
        [
            "shape",
            "k",
            "n",
            "tokens",
            "timing",
            "median_us",
            "p10_us",
            "p90_us",
        ],
    )?;
    let mut out = Vec::new();
    for row in 0..t.rows.len() {
        let label: String = t.cell(row, shape, "a shape label")?;
        let &(_, model_name, op_name) =
            GEMM_SHAPES
                .iter()
                .find(|(l, ..)| *l == label)
                .ok_or_else(|| {
                    let known: Vec<&str> = GEMM_SHAPES.iter().map(|s| s.0).collect();
                    t.refuse(
                        row,
                        shape,
                        format!("unknown shape {label:?}; known: {}", known.join(", ")),
                    )
                })?;
        let m = model(&t, row, shape, model_name)?;
        let op = Op::parse(op_name).map_err(|e| t.refuse(row, shape, e))?;
        let (want_k, want_n) = gemm_dims(&m, op).map_err(|e| t.refuse(row, shape, e))?;
        let (got_k, got_n): (u64, u64) = (t.cell(row, k, "a width")?, t.cell(row, n, "a width")?);
        if (got_k, got_n) != (want_k, want_n) {
            return Err(t.refuse(
                row,
                if got_k != want_k { k } else { n },
                format!("{label} is {model_name}'s {op_name}, {want_k} -> {want_n}; the row says {got_k} -> {got_n}"),
            ));
        }
        let tokens_value: u64 = t.cell(row, tokens, "a token count")?;
        if tokens_value == 0 {
            return Err(t.refuse(row, tokens, "must be at least 1"));
        }
        let (median_us, low_us, high_us) = times(&t, row, [median, p10, p90])?;
        out.push(GemmTiming {
            model: model_name.into(),
            op: op_name.into(),
            k: got_k,
            n: got_n,
            tokens: tokens_value,
            timing: timing(&t, row, tm)?,
            median_us,
            low_us,
            high_us,
        });
    }
    Ok(out)
}

/// `moe_grouped.csv`: `model,n_experts,hidden,expert_ffn,top_k,tokens,rows,distinct_experts,
/// kind,rows_per_expert,median_us,min_us,max_us` (CUDA-graph timed).
pub fn import_grouped(path: &Path) -> Result<Vec<GroupedTiming>, ImportError> {
    let t = Table::read(path)?;
    let [
        label,
        n_experts,
        hidden,
        ffn,
        top_k,
        tokens,
        rows,
        distinct,
        kind,
        per_expert,
        median,
        min,
        max,
    ] = columns(
        &t,
        [
            "model",
            "n_experts",
            "hidden",
            "expert_ffn",
            "top_k",
            "tokens",
            "rows",
            "distinct_experts",
            "kind",
            "rows_per_expert",
            "median_us",
            "min_us",
            "max_us",
        ],
    )?;
    let mut out = Vec::new();
    for row in 0..t.rows.len() {
        let name: String = t.cell(row, label, "a model label")?;
        let &(_, model_name) = MOE_MODELS.iter().find(|(l, _)| *l == name).ok_or_else(|| {
            let known: Vec<&str> = MOE_MODELS.iter().map(|m| m.0).collect();
            t.refuse(
                row,
                label,
                format!("unknown model {name:?}; known: {}", known.join(", ")),
            )
        })?;
        let shape = model(&t, row, label, model_name)?
            .experts()
            .expect("the MoE labels name MoE models");
        for (column, want, what) in [
            (n_experts, shape.n_experts, "routed experts"),
            (hidden, shape.hidden, "hidden width"),
            (ffn, shape.expert_ffn, "expert FFN width"),
            (top_k, shape.top_k, "top-k"),
        ] {
            let got: usize = t.cell(row, column, "a count")?;
            if got != want {
                return Err(t.refuse(
                    row,
                    column,
                    format!("{model_name} has {what} {want}; the row says {got}"),
                ));
            }
        }
        let text: String = t.cell(row, per_expert, "rows per group, separated by ';'")?;
        let groups: Vec<u32> = text
            .split(';')
            .map(|g| g.trim().parse::<u32>().ok().filter(|&r| r > 0))
            .collect::<Option<_>>()
            .ok_or_else(|| {
                t.refuse(
                    row,
                    per_expert,
                    format!("expected positive row counts separated by ';', got {text:?}"),
                )
            })?;
        let tokens_value: u64 = t.cell(row, tokens, "a token count")?;
        let rows_value: u64 = t.cell(row, rows, "a row count")?;
        let distinct_value: usize = t.cell(row, distinct, "a group count")?;
        let sum: u64 = groups.iter().map(|&g| u64::from(g)).sum();
        if sum != rows_value || rows_value != tokens_value * shape.top_k as u64 {
            return Err(t.refuse(
                row,
                per_expert,
                format!(
                    "the groups hold {sum} rows; the row says {rows_value} rows for {tokens_value} tokens at top-{}",
                    shape.top_k
                ),
            ));
        }
        if groups.len() != distinct_value || distinct_value > shape.n_experts {
            return Err(t.refuse(
                row,
                distinct,
                format!(
                    "{} groups listed, {distinct_value} distinct experts said",
                    groups.len()
                ),
            ));
        }
        let (median_us, low_us, high_us) = times(&t, row, [median, min, max])?;
        out.push(GroupedTiming {
            model: model_name.into(),
            hidden: shape.hidden as u64,
            expert_ffn: shape.expert_ffn as u64,
            tokens: tokens_value,
            kind: t.cell(row, kind, "a kind")?,
            rows_per_expert: groups,
            timing: Timing::Graph,
            median_us,
            low_us,
            high_us,
        });
    }
    Ok(out)
}

/// The first of `ATTENTION_MODELS` with these heads (`kv_heads` None: any).
fn attention_model(heads: u64, kv_heads: Option<u64>, head_dim: u64) -> Option<&'static str> {
    ATTENTION_MODELS.iter().copied().find(|name| {
        let m = CatalogueModel::by_name(name).expect("listed models exist");
        let (h, kv, d) = attention_dims(&m);
        h == heads && d == head_dim && kv_heads.is_none_or(|k| k == kv)
    })
}

/// `attention_decode.csv`: `batch,context,heads,kv_heads,head_dim,kv_bytes,median_us,p10_us,
/// p90_us` (eager).
pub fn import_decode(path: &Path) -> Result<Vec<DecodeAttentionTiming>, ImportError> {
    let t = Table::read(path)?;
    let [
        batch,
        context,
        heads,
        kv_heads,
        head_dim,
        kv_bytes,
        median,
        p10,
        p90,
    ] = columns(
        &t,
        [
            "batch",
            "context",
            "heads",
            "kv_heads",
            "head_dim",
            "kv_bytes",
            "median_us",
            "p10_us",
            "p90_us",
        ],
    )?;
    let mut out = Vec::new();
    for row in 0..t.rows.len() {
        let v: Vec<u64> = [batch, context, heads, kv_heads, head_dim, kv_bytes]
            .iter()
            .map(|&c| {
                let x: u64 = t.cell(row, c, "a count")?;
                if x == 0 {
                    return Err(t.refuse(row, c, "must be at least 1"));
                }
                Ok(x)
            })
            .collect::<Result<_, _>>()?;
        let model = attention_model(v[2], Some(v[3]), v[4]).ok_or_else(|| {
            t.refuse(
                row,
                heads,
                format!(
                    "no catalogue model of {ATTENTION_MODELS:?} has {} query, {} KV heads of {}",
                    v[2], v[3], v[4]
                ),
            )
        })?;
        if v[5] != v[0] * v[1] * v[3] * v[4] * 4 {
            return Err(t.refuse(
                row,
                kv_bytes,
                format!(
                    "K and V of {} x {} tokens, {} heads of {} in bf16 are {} bytes",
                    v[0],
                    v[1],
                    v[3],
                    v[4],
                    v[0] * v[1] * v[3] * v[4] * 4
                ),
            ));
        }
        let (median_us, low_us, high_us) = times(&t, row, [median, p10, p90])?;
        out.push(DecodeAttentionTiming {
            model: model.into(),
            batch: v[0],
            context: v[1],
            heads: v[2],
            kv_heads: v[3],
            head_dim: v[4],
            kv_bytes: v[5],
            timing: Timing::Eager,
            median_us,
            low_us,
            high_us,
        });
    }
    Ok(out)
}

/// `attention_prefill.csv`: `length,heads,head_dim,flops_causal,median_us,p10_us,p90_us`
/// (eager).
pub fn import_prefill(path: &Path) -> Result<Vec<PrefillAttentionTiming>, ImportError> {
    let t = Table::read(path)?;
    let [length, heads, head_dim, flops, median, p10, p90] = columns(
        &t,
        [
            "length",
            "heads",
            "head_dim",
            "flops_causal",
            "median_us",
            "p10_us",
            "p90_us",
        ],
    )?;
    let mut out = Vec::new();
    for row in 0..t.rows.len() {
        let l: u64 = t.cell(row, length, "a length")?;
        let h: u64 = t.cell(row, heads, "a head count")?;
        let d: u64 = t.cell(row, head_dim, "a head width")?;
        if l == 0 {
            return Err(t.refuse(row, length, "must be at least 1"));
        }
        let model = attention_model(h, None, d).ok_or_else(|| {
            t.refuse(
                row,
                heads,
                format!("no catalogue model of {ATTENTION_MODELS:?} has {h} heads of {d}"),
            )
        })?;
        let (median_us, low_us, high_us) = times(&t, row, [median, p10, p90])?;
        out.push(PrefillAttentionTiming {
            model: model.into(),
            length: l,
            heads: h,
            head_dim: d,
            flops: t.positive(row, flops, "a FLOP count")?,
            timing: Timing::Eager,
            median_us,
            low_us,
            high_us,
        });
    }
    Ok(out)
}

/// `device.json`: the device's name, SMs, versions, nvidia-smi line and the source's own
/// peaks.
pub fn import_device(path: &Path) -> Result<DeviceFacts, ImportError> {
    let text =
        std::fs::read_to_string(path).map_err(|e| file_error(path, format!("cannot read: {e}")))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| file_error(path, format!("line {}: {e}", e.line())))?;
    let field = |key: &str| {
        value
            .get(key)
            .ok_or_else(|| file_error(path, format!("field {key}: missing")))
    };
    let string = |key: &str| {
        field(key)?
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| file_error(path, format!("field {key}: expected a string")))
    };
    let number = |key: &str| {
        field(key)?
            .as_f64()
            .filter(|x| x.is_finite() && *x > 0.0)
            .ok_or_else(|| file_error(path, format!("field {key}: expected a positive number")))
    };
    Ok(DeviceFacts {
        name: string("device")?,
        sms: number("sms")? as u32,
        software: format!("torch {}, CUDA {}", string("torch")?, string("cuda")?),
        nvidia_smi: string("nvidia_smi_after")?,
        gemm_8192_tflops: number("bf16_gemm_8192_tflops")?,
        copy_gbps: number("copy_read_plus_write_gbps")?,
    })
}

/// The method paragraph recorded with the data (the source README's, in our words).
pub const METHOD: &str = "dense GEMMs through torch.nn.functional.linear (cuBLAS), grouped \
expert GEMMs through torch._grouped_mm (CUTLASS, weights column-major), attention through \
scaled_dot_product_attention (FlashAttention), all bf16; weights rotate over copies exceeding \
twice the 60 MB L2 so every call streams from HBM; eager: CUDA events around each call of an \
eager loop (the host's launch included when the kernel is shorter); graph: the calls captured \
in one CUDA graph and replayed, time per call = replay time / calls; medians of 5-25 \
repetitions after warm-up, p10/p90 (eager) or min/max (graph) beside them";

/// Converts the folder `dir` into a `KernelTimings` of `attribution.gpu`.
pub fn import_dir(dir: &Path, attribution: &Attribution) -> Result<KernelTimings, ImportError> {
    if !dir.is_dir() {
        return Err(file_error(dir, "not a folder"));
    }
    expertsim_scenario::cost::gpu::GpuSpec::by_name(&attribution.gpu)
        .map_err(|e| file_error(dir, format!("--gpu: {e}")))?;
    let files = [
        "gemm.csv",
        "moe_grouped.csv",
        "attention_decode.csv",
        "attention_prefill.csv",
        "device.json",
    ];
    for f in files {
        if !dir.join(f).is_file() {
            return Err(file_error(
                &dir.join(f),
                "missing (a kernel-timing folder holds gemm.csv, moe_grouped.csv, attention_decode.csv, attention_prefill.csv and device.json)",
            ));
        }
    }
    let set = KernelTimings {
        format_version: KERNEL_TIMINGS_FORMAT_VERSION,
        gpu: attribution.gpu.clone(),
        device: import_device(&dir.join("device.json"))?,
        source: TimingSource {
            origin: attribution.origin.clone(),
            measured: attribution.measured.clone(),
            licence: attribution.licence.clone(),
            method: METHOD.into(),
            files: files.iter().map(|f| f.to_string()).collect(),
        },
        gemm: import_gemm(&dir.join("gemm.csv"))?,
        grouped: import_grouped(&dir.join("moe_grouped.csv"))?,
        decode_attention: import_decode(&dir.join("attention_decode.csv"))?,
        prefill_attention: import_prefill(&dir.join("attention_prefill.csv"))?,
    };
    set.check()
        .map_err(|(field, message)| file_error(dir, format!("{field}: {message}")))?;
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    const GEMM_HEADER: &str = "shape,k,n,tokens,timing,median_us,p10_us,p90_us";

    #[test]
    fn gemm_rows_name_their_model_and_op() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "gemm.csv",
            &format!(
                "{GEMM_HEADER}\nmixtral_w2,14336,4096,8,graph,32.88,32.459,33.456\nllama2_o,4096,4096,1,eager,38.72,37.0,40.0\n"
            ),
        );
        let rows = import_gemm(&path).unwrap();
        assert_eq!(rows[0].model, "mixtral-8x7b");
        assert_eq!(rows[0].op, "expert_down");
        assert_eq!((rows[0].k, rows[0].n, rows[0].tokens), (14336, 4096, 8));
        assert_eq!(rows[0].timing, Timing::Graph);
        assert_eq!(rows[1].op, "o_proj");
        assert_eq!(rows[1].timing, Timing::Eager);
    }

    #[test]
    fn refused_cells_name_file_line_and_column() {
        let dir = tempfile::tempdir().unwrap();
        let err = |name: &str, text: String, f: fn(&Path) -> Result<(), ImportError>| {
            let path = write(dir.path(), name, &text);
            f(&path).err().unwrap().to_string()
        };
        let gemm = |p: &Path| import_gemm(p).map(|_| ());
        let ok = "mixtral_w2,14336,4096,8,graph,32.88,32.459,33.456";
        let e = err(
            "gemm.csv",
            format!("{GEMM_HEADER}\n{ok}\nmixtral_w2,14336,4095,8,graph,1,1,1\n"),
            gemm,
        );
        assert!(
            e.contains("gemm.csv:3: column \"n\"") && e.contains("14336 -> 4096"),
            "{e}"
        );
        let e = err(
            "gemm.csv",
            format!("{GEMM_HEADER}\n{ok}\nfoo_w1,1,1,8,graph,1,1,1\n"),
            gemm,
        );
        assert!(
            e.contains(":3: column \"shape\"") && e.contains("unknown shape \"foo_w1\""),
            "{e}"
        );
        let e = err(
            "gemm.csv",
            format!("{GEMM_HEADER}\n{ok}\nmixtral_w2,14336,4096,8,lazy,1,1,1\n"),
            gemm,
        );
        assert!(e.contains(":3: column \"timing\""), "{e}");
        let e = err(
            "gemm.csv",
            format!("{GEMM_HEADER}\n{ok}\nmixtral_w2,14336,4096,8,graph,5,6,7\n"),
            gemm,
        );
        assert!(
            e.contains(":3: column \"median_us\"") && e.contains("spread"),
            "{e}"
        );
        let e = err(
            "gemm.csv",
            format!("{GEMM_HEADER}\nmixtral_w2,14336,4096,8,graph,-1,1,1\n"),
            gemm,
        );
        assert!(
            e.contains(":2: column \"median_us\"") && e.contains("positive"),
            "{e}"
        );
        let grouped = |p: &Path| import_grouped(p).map(|_| ());
        let header = "model,n_experts,hidden,expert_ffn,top_k,tokens,rows,distinct_experts,kind,rows_per_expert,median_us,min_us,max_us";
        let e = err(
            "moe_grouped.csv",
            format!("{header}\nmixtral,8,4096,14336,2,4,8,2,even,4;3,320.7,320.0,321.2\n"),
            grouped,
        );
        assert!(
            e.contains("moe_grouped.csv:2: column \"rows_per_expert\"") && e.contains("7 rows"),
            "{e}"
        );
        let e = err(
            "moe_grouped.csv",
            format!("{header}\nmixtral,8,4096,11008,2,4,8,2,even,4;4,320.7,320.0,321.2\n"),
            grouped,
        );
        assert!(
            e.contains(":2: column \"expert_ffn\"") && e.contains("14336"),
            "{e}"
        );
        let e = err(
            "moe_grouped.csv",
            format!("{header}\nmixtral,8,4096,14336,2,4,8,2,even,4;x,320.7,320.0,321.2\n"),
            grouped,
        );
        assert!(e.contains(":2: column \"rows_per_expert\""), "{e}");
        let decode = |p: &Path| import_decode(p).map(|_| ());
        let header = "batch,context,heads,kv_heads,head_dim,kv_bytes,median_us,p10_us,p90_us";
        let e = err(
            "attention_decode.csv",
            format!("{header}\n1,256,32,8,128,1048575,27.7,24.9,36.4\n"),
            decode,
        );
        assert!(e.contains(":2: column \"kv_bytes\""), "{e}");
        let e = err(
            "attention_decode.csv",
            format!("{header}\n1,256,7,8,128,1048576,27.7,24.9,36.4\n"),
            decode,
        );
        assert!(e.contains(":2: column \"heads\""), "{e}");
    }

    #[test]
    fn the_shared_h200_folder_imports_whole() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let dir = std::env::var_os("EXPERTSIM_H200_DIR")
            .map(std::path::PathBuf::from)
            .or_else(|| {
                ["../../shared/data/h200", "../../../shared/data/h200"]
                    .iter()
                    .map(|p| root.join(p))
                    .find(|p| p.is_dir())
            })
            .unwrap_or_default();
        if !dir.is_dir() {
            eprintln!("skipped: {} is not here", dir.display());
            return;
        }
        let set = import_dir(
            &dir,
            &Attribution {
                gpu: "H200".into(),
                origin: "o".into(),
                measured: "2026-11-25".into(),
                licence: "l".into(),
            },
        )
        .unwrap();
        assert_eq!(set.gemm.len(), 376);
        assert_eq!(set.grouped.len(), 75);
        assert_eq!(set.decode_attention.len(), 19);
        assert_eq!(set.prefill_attention.len(), 7);
        assert_eq!(set.device.sms, 132);
    }
}
