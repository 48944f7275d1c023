//! The shape of a decoder-only MoE transformer with multi-head latent attention (MLA, as
//! DeepSeek-V2 defines it: dense first layers, then MoE layers with shared and routed experts)
//! and the parameter, byte, FLOP and KV-cache counts the cost model derives from it. Presets:
//! `super::catalogue`.

use super::{MoeModelShape, WeightDtype};
use serde::{Deserialize, Serialize};

/// A decoder-only MoE transformer with multi-head latent attention (MLA), as DeepSeek-V2 defines
/// it: `first_k_dense` dense FFN layers, then MoE layers of `n_shared_experts` always-active
/// experts plus `n_routed_experts` routed experts of which each token uses `top_k`. Every
/// projection is bias-free; every expert is a SwiGLU FFN (gate, up, down).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MlaMoeShape {
    /// Human-readable name.
    pub name: String,
    /// `vocab_size`.
    pub vocab: u64,
    /// `hidden_size`.
    pub hidden: u64,
    /// `num_hidden_layers`.
    pub n_layers: u64,
    /// `first_k_dense_replace`: the first layers keep a dense FFN.
    pub first_k_dense: u64,
    /// `intermediate_size` of the dense FFN layers.
    pub dense_ffn: u64,
    /// `n_routed_experts`.
    pub n_routed_experts: u64,
    /// `n_shared_experts` (each of width `expert_ffn`; DeepSeek-V2 fuses them into one FFN of
    /// width `n_shared_experts * moe_intermediate_size`).
    pub n_shared_experts: u64,
    /// `moe_intermediate_size`.
    pub expert_ffn: u64,
    /// `num_experts_per_tok`.
    pub top_k: u64,
    /// `num_attention_heads`.
    pub n_heads: u64,
    /// `q_lora_rank`; `None` (`null`) projects queries directly from the hidden state.
    pub q_lora_rank: Option<u64>,
    /// `kv_lora_rank`: width of the compressed latent KV that the cache stores.
    pub kv_lora_rank: u64,
    /// `qk_nope_head_dim`.
    pub qk_nope_head_dim: u64,
    /// `qk_rope_head_dim`: the decoupled rotary key, also cached per token.
    pub qk_rope_head_dim: u64,
    /// `v_head_dim`.
    pub v_head_dim: u64,
    /// `tie_word_embeddings`.
    pub tied_embeddings: bool,
    /// Bytes per stored parameter and per cached KV element (`torch_dtype = "bfloat16"`: 2).
    pub bytes_per_param: u64,
}

impl MlaMoeShape {
    pub fn validate(&self) -> Result<(), String> {
        for (field, value) in [
            ("vocab", self.vocab),
            ("hidden", self.hidden),
            ("n_layers", self.n_layers),
            ("n_routed_experts", self.n_routed_experts),
            ("expert_ffn", self.expert_ffn),
            ("top_k", self.top_k),
            ("n_heads", self.n_heads),
            ("kv_lora_rank", self.kv_lora_rank),
            ("bytes_per_param", self.bytes_per_param),
        ] {
            if value == 0 {
                return Err(format!("{field} must be at least 1, got 0"));
            }
        }
        if self.first_k_dense >= self.n_layers {
            return Err(format!(
                "first_k_dense ({}) must be below n_layers ({}): no MoE layer is left",
                self.first_k_dense, self.n_layers
            ));
        }
        if self.top_k > self.n_routed_experts {
            return Err(format!(
                "top_k ({}) exceeds n_routed_experts ({})",
                self.top_k, self.n_routed_experts
            ));
        }
        Ok(())
    }

    /// MoE layers (the ones ESFT fine-tunes experts in): `n_layers - first_k_dense` = 26.
    pub fn n_moe_layers(&self) -> u64 {
        self.n_layers - self.first_k_dense
    }

    /// Parameters of one routed expert: gate, up (hidden x ffn each) and down (ffn x hidden).
    pub fn expert_params(&self) -> u64 {
        3 * self.hidden * self.expert_ffn
    }

    /// Bytes of one routed expert: 3 x 2048 x 1408 x 2 = 17,301,504 (16.5 MiB) for the base.
    pub fn expert_bytes(&self) -> u64 {
        self.expert_params() * self.bytes_per_param
    }

    /// MLA attention parameters of one layer, as `DeepseekV2Attention` builds them: the query
    /// projection (direct, or low-rank with its norm), `kv_a_proj_with_mqa` (hidden ->
    /// kv_lora_rank + rope), `kv_a_layernorm`, `kv_b_proj` (kv_lora_rank -> heads x (nope + v))
    /// and `o_proj` (heads x v -> hidden).
    pub fn attention_params(&self) -> u64 {
        let q_head = self.qk_nope_head_dim + self.qk_rope_head_dim;
        let q = match self.q_lora_rank {
            None => self.hidden * self.n_heads * q_head,
            Some(rank) => self.hidden * rank + rank + rank * self.n_heads * q_head,
        };
        let kv_a = self.hidden * (self.kv_lora_rank + self.qk_rope_head_dim);
        let kv_norm = self.kv_lora_rank;
        let kv_b = self.kv_lora_rank * self.n_heads * (self.qk_nope_head_dim + self.v_head_dim);
        let o = self.n_heads * self.v_head_dim * self.hidden;
        q + kv_a + kv_norm + kv_b + o
    }

    /// Parameters of one layer except its routed experts: attention, the two RMSNorms, and the
    /// dense FFN (dense layers) or the router and shared experts (MoE layers).
    pub fn layer_non_routed_params(&self, layer: u64) -> u64 {
        let common = self.attention_params() + 2 * self.hidden;
        if layer < self.first_k_dense {
            common + 3 * self.hidden * self.dense_ffn
        } else {
            let router = self.n_routed_experts * self.hidden;
            let shared = self.n_shared_experts * self.expert_params();
            common + router + shared
        }
    }

    /// Embedding, output projection (unless tied) and final norm.
    pub fn embedding_params(&self) -> u64 {
        let lm_head = if self.tied_embeddings {
            0
        } else {
            self.vocab * self.hidden
        };
        self.vocab * self.hidden + lm_head + self.hidden
    }

    /// Every parameter that is not a routed expert.
    pub fn non_routed_params(&self) -> u64 {
        self.embedding_params()
            + (0..self.n_layers)
                .map(|layer| self.layer_non_routed_params(layer))
                .sum::<u64>()
    }

    /// Routed-expert parameters of the whole model.
    pub fn routed_params(&self) -> u64 {
        self.n_moe_layers() * self.n_routed_experts * self.expert_params()
    }

    /// All parameters (15,706,484,224 for the base).
    pub fn total_params(&self) -> u64 {
        self.non_routed_params() + self.routed_params()
    }

    /// Bytes of one full model copy (what a merged model costs).
    pub fn weight_bytes(&self) -> u64 {
        self.total_params() * self.bytes_per_param
    }

    /// Bytes of everything but the routed experts.
    pub fn non_routed_bytes(&self) -> u64 {
        self.non_routed_params() * self.bytes_per_param
    }

    /// KV-cache bytes per token: MLA caches the compressed latent (`kv_lora_rank`) and the
    /// decoupled rotary key (`qk_rope_head_dim`) per layer, (512 + 64) x 27 x 2 = 31,104 bytes,
    /// as vLLM's MLA backends do.
    pub fn kv_bytes_per_token(&self) -> u64 {
        (self.kv_lora_rank + self.qk_rope_head_dim) * self.n_layers * self.bytes_per_param
    }

    /// The routed-expert geometry as an MoE shape, as the kernels of live mode take it (its
    /// MoE layers, experts and widths; the attention geometry is not used, its dense parts run
    /// as GEMMs without attention).
    pub fn moe_geometry(&self) -> MoeModelShape {
        MoeModelShape {
            name: self.name.clone(),
            n_layers: self.n_moe_layers() as usize,
            n_experts: self.n_routed_experts as usize,
            top_k: self.top_k as usize,
            n_shared_experts: self.n_shared_experts as usize,
            shared_expert_ffn: if self.n_shared_experts > 0 {
                self.expert_ffn as usize
            } else {
                0
            },
            shared_expert_gate: false,
            hidden: self.hidden as usize,
            expert_ffn: self.expert_ffn as usize,
            n_attention_heads: self.n_heads as usize,
            n_kv_heads: self.n_heads as usize,
            head_dim: self.v_head_dim as usize,
            attention_qkv_bias: false,
            vocab: self.vocab as usize,
            tied_embeddings: self.tied_embeddings,
            weight_dtype: WeightDtype::Bf16,
            lm_head_dtype: WeightDtype::Bf16,
        }
    }

    /// KV-cache bytes per token in one layer: the latent and the rotary key.
    pub fn kv_bytes_per_token_per_layer(&self) -> u64 {
        (self.kv_lora_rank + self.qk_rope_head_dim) * self.bytes_per_param
    }

    /// Attention FLOPs of one decoding query row against one cached token in one layer, with
    /// `kv_b_proj` absorbed into the query and output projections (what vLLM's MLA decode
    /// kernels do, so the cache is never decompressed): per head a dot product over the latent
    /// and the rotary key, 2 x (kv_lora_rank + qk_rope_head_dim), and the weighted sum of the
    /// latent, 2 x kv_lora_rank.
    pub fn decode_attention_flops_per_pair_per_layer(&self) -> f64 {
        (self.n_heads * (2 * (self.kv_lora_rank + self.qk_rope_head_dim) + 2 * self.kv_lora_rank))
            as f64
    }

    /// Attention FLOPs of one prefill query row against one earlier token of its prompt in one
    /// layer: prefill decompresses keys and values per head (vLLM's MLA prefill path), so per
    /// head 2 x (qk_nope_head_dim + qk_rope_head_dim) for q.k and 2 x v_head_dim for the values.
    pub fn prefill_attention_flops_per_pair_per_layer(&self) -> f64 {
        (self.n_heads * (2 * (self.qk_nope_head_dim + self.qk_rope_head_dim) + 2 * self.v_head_dim))
            as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_counts_match_the_model_card() {
        let shape = MlaMoeShape::esft_vanilla_16b();
        shape.validate().unwrap();
        assert_eq!(shape.n_moe_layers(), 26);
        assert_eq!(shape.expert_bytes(), 17_301_504);
        assert_eq!(shape.attention_params(), 13_763_072);
        assert_eq!(shape.total_params(), 15_706_484_224);
        assert_eq!(shape.kv_bytes_per_token(), 31_104);
    }

    #[test]
    fn invalid_shapes_are_errors() {
        let mut shape = MlaMoeShape::esft_vanilla_16b();
        shape.first_k_dense = 27;
        assert!(shape.validate().is_err());
        let mut shape = MlaMoeShape::esft_vanilla_16b();
        shape.top_k = 65;
        assert!(shape.validate().is_err());
    }
}
