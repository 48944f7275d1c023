//! The shape of a Mixture-of-Experts transformer in which every layer is an MoE layer (layer
//! count, expert count and sizes, attention geometry, weight format) and the parameter, byte and
//! FLOP counts the cost model derives from it. Presets: `super::catalogue`.

use super::{ModelShapeError, WeightDtype};
use serde::{Deserialize, Serialize};

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

impl MoeModelShape {
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
        if !self.n_attention_heads.is_multiple_of(self.n_kv_heads) {
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
    fn shape_json_rejects_unknown_fields() {
        let shape = MoeModelShape::qwen1_5_moe_a2_7b_nf4();
        let json = serde_json::to_string(&shape).unwrap();
        assert!(json.contains("\"weight_dtype\":\"nf4\""));
        assert_eq!(serde_json::from_str::<MoeModelShape>(&json).unwrap(), shape);
        let extra = json.replacen('{', "{\"n_gpus\":2,", 1);
        assert!(serde_json::from_str::<MoeModelShape>(&extra).is_err());
    }
}
