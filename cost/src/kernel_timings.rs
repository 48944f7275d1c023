//! Measured kernel timings of one GPU (vendor GEMMs, grouped expert GEMMs, attention), as
//! `expertsim-calibrate import-h200` converts a kernel-timing folder (`../shared/data/h200/`):
//! every point names the catalogue model and operation it measures, its timing method (eager
//! or CUDA graph) and its median with the spread beside it. The cost model's rates on that GPU
//! are fitted from these points (`cost::fit`), and docs/fidelity.md holds the kernel model
//! against every one of them. Read back with errors that name the file and the field.

use crate::kernel::Timing;
use crate::op_profile::{OpProfileError, layout, parse, write_atomically};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The kernel-timing format this build reads and writes.
pub const KERNEL_TIMINGS_FORMAT_VERSION: u32 = 1;

/// The committed H200 set, embedded so that every build prices the H200 from it.
pub const H200_KERNEL_TIMINGS: &str = include_str!("../../profiles/h200/kernels.json");

/// Where the measurements come from and how they were taken.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimingSource {
    /// Who measured, where the raw files are.
    pub origin: String,
    /// Date of the measurement (ISO 8601).
    pub measured: String,
    /// Licence or terms of the data.
    pub licence: String,
    /// How each point was timed (the source's method, in one paragraph).
    pub method: String,
    /// The source files converted, relative to the source folder.
    pub files: Vec<String>,
}

/// Facts about the measured device, as the source's `device.json` records them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceFacts {
    /// The driver's device name.
    pub name: String,
    pub sms: u32,
    /// Software versions (framework, CUDA).
    pub software: String,
    /// `nvidia-smi` after the run: driver, clocks, power.
    pub nvidia_smi: String,
    /// The source's own bf16 GEMM of 8192^3, TFLOP/s.
    pub gemm_8192_tflops: f64,
    /// The source's device-to-device copy, GB/s counting read and write.
    pub copy_gbps: f64,
}

/// One dense GEMM, `tokens x k -> n` with `k x n` bf16 weights.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GemmTiming {
    /// Catalogue model whose weights these are.
    pub model: String,
    /// The operation of that model (`expert_up`, `expert_down`, `mlp_up`, `mlp_down`,
    /// `qkv_proj`, `o_proj`).
    pub op: String,
    pub k: u64,
    pub n: u64,
    pub tokens: u64,
    pub timing: Timing,
    pub median_us: f64,
    /// p10 (eager) or minimum (graph).
    pub low_us: f64,
    /// p90 (eager) or maximum (graph).
    pub high_us: f64,
}

/// One MoE layer's expert part: the gate+up grouped GEMM then the down grouped GEMM over the
/// groups of `rows_per_expert` (no activation, routing or combine).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupedTiming {
    pub model: String,
    pub hidden: u64,
    pub expert_ffn: u64,
    /// Tokens of the step (each routed to `top_k` experts).
    pub tokens: u64,
    /// `even` or `one_hot_half` (one expert gets half the rows).
    pub kind: String,
    /// Rows of each group (expert touched).
    pub rows_per_expert: Vec<u32>,
    pub timing: Timing,
    pub median_us: f64,
    pub low_us: f64,
    pub high_us: f64,
}

/// Decode attention: `batch` sequences of `context` cached tokens, one query each.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecodeAttentionTiming {
    /// A catalogue model with these heads.
    pub model: String,
    pub batch: u64,
    pub context: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    /// K and V bytes read.
    pub kv_bytes: u64,
    pub timing: Timing,
    pub median_us: f64,
    pub low_us: f64,
    pub high_us: f64,
}

/// Causal prefill attention over one sequence of `length` tokens.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrefillAttentionTiming {
    pub model: String,
    pub length: u64,
    pub heads: u64,
    pub head_dim: u64,
    /// The source's causal FLOP count (half the square).
    pub flops: f64,
    pub timing: Timing,
    pub median_us: f64,
    pub low_us: f64,
    pub high_us: f64,
}

/// The measured kernel timings of one GPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelTimings {
    pub format_version: u32,
    /// GPU catalogue name (`cost::gpu`).
    pub gpu: String,
    pub device: DeviceFacts,
    pub source: TimingSource,
    pub gemm: Vec<GemmTiming>,
    pub grouped: Vec<GroupedTiming>,
    pub decode_attention: Vec<DecodeAttentionTiming>,
    pub prefill_attention: Vec<PrefillAttentionTiming>,
}

fn check_time(field: String, median: f64, low: f64, high: f64) -> Result<(), (String, String)> {
    if !(median.is_finite() && median > 0.0) {
        return Err((
            field,
            format!("median must be finite and positive, got {median}"),
        ));
    }
    if !(low <= median && median <= high) {
        return Err((
            field,
            format!("the median {median} lies outside its spread {low}..{high}"),
        ));
    }
    Ok(())
}

impl KernelTimings {
    /// Reads and checks the set at `path`.
    pub fn load(path: &Path) -> Result<KernelTimings, OpProfileError> {
        let text = std::fs::read_to_string(path).map_err(|source| OpProfileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        KernelTimings::from_json(&text, path)
    }

    /// The committed H200 set (`profiles/h200/kernels.json`).
    pub fn h200() -> KernelTimings {
        KernelTimings::from_json(H200_KERNEL_TIMINGS, Path::new("profiles/h200/kernels.json"))
            .expect("the committed H200 kernel timings are valid")
    }

    /// Parses and checks a set; `path` names it in errors.
    pub fn from_json(text: &str, path: &Path) -> Result<KernelTimings, OpProfileError> {
        let set: KernelTimings = parse(text, path)?;
        if set.format_version != KERNEL_TIMINGS_FORMAT_VERSION {
            return Err(OpProfileError::Invalid {
                path: path.to_path_buf(),
                field: "format_version".into(),
                message: format!(
                    "this build reads version {KERNEL_TIMINGS_FORMAT_VERSION}, the file is version {}",
                    set.format_version
                ),
            });
        }
        set.check()
            .map_err(|(field, message)| OpProfileError::Invalid {
                path: path.to_path_buf(),
                field,
                message,
            })?;
        Ok(set)
    }

    /// Every time positive with its median inside its spread, every size positive, every group
    /// of a grouped point non-empty.
    pub fn check(&self) -> Result<(), (String, String)> {
        for (i, p) in self.gemm.iter().enumerate() {
            if p.k == 0 || p.n == 0 || p.tokens == 0 {
                return Err((
                    format!("gemm[{i}]"),
                    "k, n and tokens must be positive".into(),
                ));
            }
            check_time(
                format!("gemm[{i}].median_us"),
                p.median_us,
                p.low_us,
                p.high_us,
            )?;
        }
        for (i, p) in self.grouped.iter().enumerate() {
            if p.rows_per_expert.is_empty() || p.rows_per_expert.contains(&0) {
                return Err((
                    format!("grouped[{i}].rows_per_expert"),
                    "every group needs at least one row".into(),
                ));
            }
            check_time(
                format!("grouped[{i}].median_us"),
                p.median_us,
                p.low_us,
                p.high_us,
            )?;
        }
        for (i, p) in self.decode_attention.iter().enumerate() {
            if p.batch == 0 || p.context == 0 || p.heads == 0 || p.kv_heads == 0 {
                return Err((
                    format!("decode_attention[{i}]"),
                    "batch, context and heads must be positive".into(),
                ));
            }
            check_time(
                format!("decode_attention[{i}].median_us"),
                p.median_us,
                p.low_us,
                p.high_us,
            )?;
        }
        for (i, p) in self.prefill_attention.iter().enumerate() {
            if p.length == 0 || p.heads == 0 {
                return Err((
                    format!("prefill_attention[{i}]"),
                    "length and heads must be positive".into(),
                ));
            }
            check_time(
                format!("prefill_attention[{i}].median_us"),
                p.median_us,
                p.low_us,
                p.high_us,
            )?;
        }
        Ok(())
    }

    /// The set as indented JSON, one line per measured point.
    pub fn to_json(&self) -> String {
        let value = serde_json::to_value(self).expect("kernel timings serialize");
        let map = value.as_object().expect("an object");
        let mut out = String::from("{\n");
        for (i, (key, v)) in map.iter().enumerate() {
            out.push_str(&format!(
                "  {}: ",
                serde_json::to_string(key).expect("a key")
            ));
            match v.as_array() {
                Some(points) if points.iter().all(serde_json::Value::is_object) => {
                    out.push_str("[\n");
                    for (j, point) in points.iter().enumerate() {
                        out.push_str("    ");
                        out.push_str(&serde_json::to_string(point).expect("a point"));
                        out.push_str(if j + 1 < points.len() { ",\n" } else { "\n" });
                    }
                    out.push_str("  ]");
                }
                _ => out.push_str(layout(v).trim_end().replace('\n', "\n  ").as_str()),
            }
            out.push_str(if i + 1 < map.len() { ",\n" } else { "\n" });
        }
        out.push_str("}\n");
        out
    }

    /// Writes the set atomically (temporary file + rename).
    pub fn save(&self, path: &Path) -> Result<(), OpProfileError> {
        write_atomically(path, &self.to_json())
    }
}
