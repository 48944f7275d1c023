//! The one model-shape catalogue of the cost model: dense, MoE and MLA-MoE transformer shapes
//! (`dense`, `moe`, `mla`), the parameter, byte, FLOP and KV-cache counts the roofline derives
//! from them, and every preset (`catalogue`, each dimension copied from the checkpoint's public
//! Hugging Face `config.json` and cited once there). A family keeps only the list of preset
//! names it accepts.

mod catalogue;
mod dense;
mod mla;
mod moe;

pub use catalogue::{DENSE_PRESETS, MLA_MOE_PRESETS, MOE_PRESETS};
pub use dense::DenseModelShape;
pub use mla::MlaMoeShape;
pub use moe::MoeModelShape;

use serde::{Deserialize, Serialize};
use std::fmt;

/// How the weights of the transformer blocks are stored, which sets how many bytes a kernel
/// must stream from memory per parameter. Arithmetic always runs at the bf16/fp16 tensor-core
/// rate (quantized weights are dequantized to 16 bits inside the kernel).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WeightDtype {
    /// bfloat16: 2 bytes per parameter.
    Bf16,
    /// float16: 2 bytes per parameter.
    Fp16,
    /// 8-bit floating point (E4M3) with per-tensor scales: 1 byte per parameter (the scales
    /// are one float per matrix, negligible).
    Fp8,
    /// bitsandbytes NormalFloat4 with double quantization (the QLoRA setting, as CAPS loads
    /// the model with `bnb_4bit_quant_type = "nf4"`): 4 bits per parameter, plus one 8-bit
    /// absmax per block of 64 parameters, plus one fp32 scale per 256 of those blocks:
    /// 0.5 + 1/64 + 4/(64 x 256) = 0.515869140625 bytes per parameter. Without double
    /// quantization the absmax is fp32 and the figure is 0.5 + 4/64 = 0.5625.
    Nf4,
}

impl WeightDtype {
    /// Bytes a kernel reads per stored parameter, scale overhead included.
    pub fn bytes_per_param(self) -> f64 {
        match self {
            WeightDtype::Bf16 | WeightDtype::Fp16 => 2.0,
            WeightDtype::Fp8 => 1.0,
            WeightDtype::Nf4 => 0.5 + 1.0 / 64.0 + 4.0 / (64.0 * 256.0),
        }
    }

    /// The lowercase name used in profiles and scenario files.
    pub fn as_str(self) -> &'static str {
        match self {
            WeightDtype::Bf16 => "bf16",
            WeightDtype::Fp16 => "fp16",
            WeightDtype::Fp8 => "fp8",
            WeightDtype::Nf4 => "nf4",
        }
    }
}

impl fmt::Display for WeightDtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A preset name that is not in the catalogue, or a shape that cannot describe a model.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ModelShapeError {
    #[error("unknown model preset {name:?}; known presets: {}", known.join(", "))]
    UnknownPreset {
        name: String,
        known: Vec<&'static str>,
    },
    #[error("model shape {model:?}: {field} {problem}")]
    Invalid {
        model: String,
        field: &'static str,
        problem: String,
    },
}
