//! The shape of a Mixture-of-Experts transformer (layer count, expert count and sizes, attention
//! geometry, weight format) and the parameter, byte and FLOP counts the cost models derive from it.
//!
//! Every dimension of a preset is copied from the model's public Hugging Face `config.json`;
//! the weight formats and their bytes per parameter are documented on [`WeightDtype`].

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

/// The architecture of a decoder-only MoE transformer in which every layer is an MoE layer:
/// attention, then `n_experts` routed gated-FFN (SwiGLU) experts of which each token uses
/// `top_k`, plus `n_shared_experts` always-active gated FFNs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MoeModelShape {
    /// Human-readable model name (the Hugging Face repository name of the checkpoint).
    pub name: String,
    /// Transformer blocks (`num_hidden_layers`); each one has an MoE FFN.
    pub n_layers: usize,
    /// Routed experts per MoE layer (`num_experts`).
    pub n_experts: usize,
    /// Routed experts each token is sent to per layer (`num_experts_per_tok`).
    pub top_k: usize,
    /// Always-active shared experts per layer.
    pub n_shared_experts: usize,
    /// Intermediate size of each shared expert (`shared_expert_intermediate_size`); 0 when
    /// there is none.
    pub shared_expert_ffn: usize,
    /// Whether each layer scales the shared expert's output by a learned sigmoid gate
    /// (`shared_expert_gate`, a `hidden -> 1` projection).
    pub shared_expert_gate: bool,
    /// Model width (`hidden_size`).
    pub hidden: usize,
    /// Intermediate size of each routed expert (`moe_intermediate_size`).
    pub expert_ffn: usize,
    /// Query heads (`num_attention_heads`).
    pub n_attention_heads: usize,
    /// Key/value heads (`num_key_value_heads`); fewer than query heads means grouped-query attention.
    pub n_kv_heads: usize,
    /// Width of one attention head (`head_dim`, or `hidden_size / num_attention_heads`).
    pub head_dim: usize,
    /// Whether the q, k and v projections carry a bias (Qwen2 attention does).
    pub attention_qkv_bias: bool,
    /// Vocabulary size (`vocab_size`).
    pub vocab: usize,
    /// Whether the output projection shares the input embedding's weights (`tie_word_embeddings`).
    pub tied_embeddings: bool,
    /// Storage format of the transformer-block weights (attention, router, experts).
    pub weight_dtype: WeightDtype,
    /// Storage format of the output projection (bitsandbytes leaves `lm_head` unquantized).
    pub lm_head_dtype: WeightDtype,
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

/// Preset names accepted by [`MoeModelShape::preset`].
pub const PRESET_NAMES: &[&str] = &[
    "qwen1.5-moe-a2.7b",
    "qwen1.5-moe-a2.7b-nf4",
    "live-tiny-moe",
];

impl MoeModelShape {
    /// Qwen1.5-MoE-A2.7B with its checkpoint's bf16 weights.
    ///
    /// Source: <https://huggingface.co/Qwen/Qwen1.5-MoE-A2.7B/blob/main/config.json>
    /// (`model_type = "qwen2_moe"`, also the config of the `-Chat` variant CAPS serves):
    /// `num_hidden_layers = 24`, `num_experts = 60`, `num_experts_per_tok = 4`,
    /// `hidden_size = 2048`, `moe_intermediate_size = 1408`,
    /// `shared_expert_intermediate_size = 5632` (one shared expert with a sigmoid
    /// `shared_expert_gate`, per `Qwen2MoeSparseMoeBlock` in transformers),
    /// `num_attention_heads = 16`, `num_key_value_heads = 16` (no GQA), no `head_dim` key so
    /// head_dim = 2048 / 16 = 128, q/k/v biases (Qwen2 attention), `vocab_size = 151936`,
    /// `tie_word_embeddings = false`, `torch_dtype = "bfloat16"`, `decoder_sparse_step = 1`
    /// (every layer is MoE). These give 14.3 B parameters in total and 2.7 B active per token,
    /// the figures of the model card (a unit test checks both).
    pub fn qwen1_5_moe_a2_7b() -> MoeModelShape {
        MoeModelShape {
            name: "Qwen1.5-MoE-A2.7B".into(),
            n_layers: 24,
            n_experts: 60,
            top_k: 4,
            n_shared_experts: 1,
            shared_expert_ffn: 5632,
            shared_expert_gate: true,
            hidden: 2048,
            expert_ffn: 1408,
            n_attention_heads: 16,
            n_kv_heads: 16,
            head_dim: 128,
            attention_qkv_bias: true,
            vocab: 151_936,
            tied_embeddings: false,
            weight_dtype: WeightDtype::Bf16,
            lm_head_dtype: WeightDtype::Bf16,
        }
    }

    /// Qwen1.5-MoE-A2.7B as CAPS runs it on an L4 (caps.txt, `configs/l4_config.json`:
    /// `"quantization": "nf4"`): bitsandbytes NF4 weights in the transformer blocks, `lm_head`
    /// left in bf16 (transformers keeps the output embedding out of 4-bit conversion).
    pub fn qwen1_5_moe_a2_7b_nf4() -> MoeModelShape {
        MoeModelShape {
            weight_dtype: WeightDtype::Nf4,
            ..MoeModelShape::qwen1_5_moe_a2_7b()
        }
    }

    /// A deliberately tiny MoE shape for live mode on the CPU backend (`expertsim live`): not a
    /// published model, but the Qwen-MoE layout scaled down (2 layers, 8 routed experts of which
    /// each token uses 2, hidden 64, expert FFN 64, 4 heads of 16, a 512-token vocabulary, no
    /// shared expert) so that the reference kernels run a whole scenario in seconds.
    pub fn live_tiny_moe() -> MoeModelShape {
        MoeModelShape {
            name: "live-tiny-moe (scaled down for the CPU backend)".into(),
            n_layers: 2,
            n_experts: 8,
            top_k: 2,
            n_shared_experts: 0,
            shared_expert_ffn: 0,
            shared_expert_gate: false,
            hidden: 64,
            expert_ffn: 64,
            n_attention_heads: 4,
            n_kv_heads: 4,
            head_dim: 16,
            attention_qkv_bias: false,
            vocab: 512,
            tied_embeddings: false,
            weight_dtype: WeightDtype::Bf16,
            lm_head_dtype: WeightDtype::Bf16,
        }
    }

    /// The preset called `name` (see [`PRESET_NAMES`]).
    pub fn preset(name: &str) -> Result<MoeModelShape, ModelShapeError> {
        match name {
            "qwen1.5-moe-a2.7b" => Ok(MoeModelShape::qwen1_5_moe_a2_7b()),
            "qwen1.5-moe-a2.7b-nf4" => Ok(MoeModelShape::qwen1_5_moe_a2_7b_nf4()),
            "live-tiny-moe" => Ok(MoeModelShape::live_tiny_moe()),
            _ => Err(ModelShapeError::UnknownPreset {
                name: name.to_string(),
                known: PRESET_NAMES.to_vec(),
            }),
        }
    }

    /// Checks that every size is positive and that the routing is possible.
    pub fn validate(&self) -> Result<(), ModelShapeError> {
        let invalid = |field: &'static str, problem: String| ModelShapeError::Invalid {
            model: self.name.clone(),
            field,
            problem,
        };
        for (field, value) in [
            ("n_layers", self.n_layers),
            ("n_experts", self.n_experts),
            ("top_k", self.top_k),
            ("hidden", self.hidden),
            ("expert_ffn", self.expert_ffn),
            ("n_attention_heads", self.n_attention_heads),
            ("n_kv_heads", self.n_kv_heads),
            ("head_dim", self.head_dim),
            ("vocab", self.vocab),
        ] {
            if value == 0 {
                return Err(invalid(field, "must be at least 1, got 0".into()));
            }
        }
        if self.top_k > self.n_experts {
            return Err(invalid(
                "top_k",
                format!(
                    "= {} exceeds the number of routed experts ({})",
                    self.top_k, self.n_experts
                ),
            ));
        }
        if (self.n_shared_experts == 0) != (self.shared_expert_ffn == 0) {
            return Err(invalid(
                "shared_expert_ffn",
                format!(
                    "= {} does not fit n_shared_experts = {} (both zero or both positive)",
                    self.shared_expert_ffn, self.n_shared_experts
                ),
            ));
        }
        if self.n_attention_heads % self.n_kv_heads != 0 {
            return Err(invalid(
                "n_kv_heads",
                format!(
                    "= {} does not divide n_attention_heads = {}",
                    self.n_kv_heads, self.n_attention_heads
                ),
            ));
        }
        Ok(())
    }

    /// Parameters of one routed expert: gate, up and down projections of a SwiGLU FFN.
    pub fn expert_params(&self) -> u64 {
        3 * self.hidden as u64 * self.expert_ffn as u64
    }

    /// Bytes of one routed expert's weights in `weight_dtype`.
    pub fn expert_weight_bytes(&self) -> f64 {
        self.expert_params() as f64 * self.weight_dtype.bytes_per_param()
    }

    /// FLOPs one token spends in one routed expert (2 per multiply-add).
    pub fn expert_flops_per_token(&self) -> f64 {
        2.0 * self.expert_params() as f64
    }

    /// Parameters of the shared experts of one layer.
    pub fn shared_expert_params_per_layer(&self) -> u64 {
        self.n_shared_experts as u64 * 3 * self.hidden as u64 * self.shared_expert_ffn as u64
    }

    /// Parameters of one layer's attention: q, k, v, o projections (+ q/k/v biases).
    pub fn attention_params_per_layer(&self) -> u64 {
        let hidden = self.hidden as u64;
        let q_width = (self.n_attention_heads * self.head_dim) as u64;
        let kv_width = (self.n_kv_heads * self.head_dim) as u64;
        let weights = hidden * q_width + 2 * hidden * kv_width + q_width * hidden;
        let biases = if self.attention_qkv_bias {
            q_width + 2 * kv_width
        } else {
            0
        };
        weights + biases
    }

    /// Parameters of one layer's router (`hidden -> n_experts`) and shared-expert gate.
    pub fn router_params_per_layer(&self) -> u64 {
        let gate = if self.shared_expert_gate && self.n_shared_experts > 0 {
            self.hidden as u64
        } else {
            0
        };
        self.hidden as u64 * self.n_experts as u64 + gate
    }

    /// Parameters of one layer's two RMSNorms.
    pub fn norm_params_per_layer(&self) -> u64 {
        2 * self.hidden as u64
    }

    /// Dense (non-routed-expert) parameters of one layer: attention, shared experts, router,
    /// norms. Every token of a forward pass uses all of them.
    pub fn dense_params_per_layer(&self) -> u64 {
        self.attention_params_per_layer()
            + self.shared_expert_params_per_layer()
            + self.router_params_per_layer()
            + self.norm_params_per_layer()
    }

    /// Parameters a forward pass multiplies per token in one layer's dense part (norms are
    /// elementwise and left out).
    pub fn dense_matmul_params_per_layer(&self) -> u64 {
        self.dense_params_per_layer() - self.norm_params_per_layer()
    }

    /// Bytes of one layer's dense weights in `weight_dtype`.
    pub fn dense_weight_bytes_per_layer(&self) -> f64 {
        self.dense_params_per_layer() as f64 * self.weight_dtype.bytes_per_param()
    }

    /// Parameters of the input embedding table.
    pub fn embedding_params(&self) -> u64 {
        self.vocab as u64 * self.hidden as u64
    }

    /// Parameters the output projection multiplies (stored separately unless tied).
    pub fn lm_head_params(&self) -> u64 {
        self.vocab as u64 * self.hidden as u64
    }

    /// Bytes of the output projection's weights in `lm_head_dtype`.
    pub fn lm_head_weight_bytes(&self) -> f64 {
        self.lm_head_params() as f64 * self.lm_head_dtype.bytes_per_param()
    }

    /// All stored parameters: every layer with all its experts, embeddings, final norm.
    pub fn total_params(&self) -> u64 {
        let per_layer =
            self.dense_params_per_layer() + self.n_experts as u64 * self.expert_params();
        let head = if self.tied_embeddings {
            0
        } else {
            self.lm_head_params()
        };
        self.n_layers as u64 * per_layer + self.embedding_params() + head + self.hidden as u64
    }

    /// Bytes of all stored weights (the GPU-memory footprint before KV cache and activations):
    /// the layers in `weight_dtype`, the embedding table and `lm_head` in `lm_head_dtype`
    /// (bitsandbytes quantizes neither).
    pub fn total_weight_bytes(&self) -> f64 {
        let per_layer =
            self.dense_params_per_layer() + self.n_experts as u64 * self.expert_params();
        let blocks = (self.n_layers as u64 * per_layer + self.hidden as u64) as f64
            * self.weight_dtype.bytes_per_param();
        let head = if self.tied_embeddings {
            0.0
        } else {
            self.lm_head_weight_bytes()
        };
        blocks + self.embedding_params() as f64 * self.lm_head_dtype.bytes_per_param() + head
    }

    /// Parameters used per token: every layer's dense part and `top_k` routed experts, the
    /// embedding row, the output projection and the final norm. This is how the Qwen model
    /// card counts "2.7B activated parameters" (embeddings included).
    pub fn active_params_per_token(&self) -> u64 {
        let per_layer = self.dense_params_per_layer() + self.top_k as u64 * self.expert_params();
        self.n_layers as u64 * per_layer
            + self.embedding_params()
            + self.lm_head_params()
            + self.hidden as u64
    }

    /// FLOPs of one token's forward pass through the weight matrices: 2 x (every layer's dense
    /// matmul parameters + `top_k` experts' parameters + the output projection). Left out:
    /// the embedding lookup (no arithmetic), norms and activations (elementwise), and the
    /// attention score and value products, which grow with the context (2 x 2 x context x
    /// n_attention_heads x head_dim per token and layer).
    pub fn flops_per_token(&self) -> f64 {
        let per_layer =
            self.dense_matmul_params_per_layer() + self.top_k as u64 * self.expert_params();
        2.0 * (self.n_layers as u64 * per_layer + self.lm_head_params()) as f64
    }

    /// KV-cache bytes one token adds to one layer: keys and values of every KV head.
    pub fn kv_cache_bytes_per_token_per_layer(&self, bytes_per_element: f64) -> f64 {
        2.0 * (self.n_kv_heads * self.head_dim) as f64 * bytes_per_element
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qwen_preset_matches_model_card_parameter_counts() {
        let shape = MoeModelShape::qwen1_5_moe_a2_7b();
        shape.validate().unwrap();
        // Model card: "14.3B parameters in total and 2.7B activated parameters".
        assert_eq!(shape.total_params(), 14_315_784_192);
        assert_eq!(shape.active_params_per_token(), 2_689_173_504);
        assert_eq!(shape.expert_params(), 8_650_752);
        assert_eq!(shape.dense_params_per_layer(), 51_515_392);
        let flops = shape.flops_per_token();
        assert!((flops - 2.0 * 2_377_908_224.0).abs() < 1.0, "{flops}");
    }

    #[test]
    fn nf4_bytes_include_scale_overhead() {
        let nf4 = MoeModelShape::qwen1_5_moe_a2_7b_nf4();
        assert_eq!(WeightDtype::Nf4.bytes_per_param(), 0.515869140625);
        assert!((nf4.expert_weight_bytes() - 8_650_752.0 * 0.515869140625).abs() < 1e-6);
        // The nf4 model fits an L4's 24 GB; the bf16 checkpoint does not.
        assert!(
            nf4.total_weight_bytes() < 24e9,
            "{}",
            nf4.total_weight_bytes()
        );
        assert!(MoeModelShape::qwen1_5_moe_a2_7b().total_weight_bytes() > 24e9);
    }

    #[test]
    fn preset_lookup_and_validation_errors() {
        assert_eq!(
            MoeModelShape::preset("qwen1.5-moe-a2.7b-nf4").unwrap(),
            MoeModelShape::qwen1_5_moe_a2_7b_nf4()
        );
        let message = MoeModelShape::preset("mixtral").unwrap_err().to_string();
        assert!(message.contains("\"mixtral\"") && message.contains("qwen1.5-moe-a2.7b-nf4"));
        let mut shape = MoeModelShape::qwen1_5_moe_a2_7b();
        shape.top_k = 61;
        let message = shape.validate().unwrap_err().to_string();
        assert!(
            message.contains("top_k") && message.contains("60"),
            "{message}"
        );
    }

    #[test]
    fn shape_json_rejects_unknown_fields() {
        let shape = MoeModelShape::qwen1_5_moe_a2_7b_nf4();
        let json = serde_json::to_string(&shape).unwrap();
        assert!(json.contains("\"weight_dtype\":\"nf4\""));
        assert_eq!(serde_json::from_str::<MoeModelShape>(&json).unwrap(), shape);
        let extra = json.replacen('{', "{\"n_gpus\":2,", 1);
        assert!(serde_json::from_str::<MoeModelShape>(&extra).is_err());
    }
}
