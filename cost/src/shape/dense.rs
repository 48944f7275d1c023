//! The shape of a dense decoder-only transformer with a gated (SwiGLU/GeGLU) MLP and the
//! parameter, byte and KV-cache counts the roofline derives from it. Presets:
//! `super::catalogue`.

use super::ModelShapeError;
use serde::{Deserialize, Serialize};

/// Bytes per weight and per KV-cache element: bf16, as vLLM serves these checkpoints.
const BYTES_PER_ELEMENT: f64 = 2.0;

/// The architecture of a dense decoder-only transformer with a gated (SwiGLU/GeGLU) MLP.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DenseModelShape {
    /// Hugging Face repository of the checkpoint.
    pub name: String,
    /// `num_hidden_layers`.
    pub n_layers: u64,
    /// `hidden_size`.
    pub hidden: u64,
    /// `intermediate_size` (GLM: `ffn_hidden_size`).
    pub intermediate: u64,
    /// `num_attention_heads`.
    pub n_heads: u64,
    /// `num_key_value_heads` (GLM: `multi_query_group_num`).
    pub n_kv_heads: u64,
    /// `head_dim` (or `hidden_size / num_attention_heads`).
    pub head_dim: u64,
    /// `vocab_size` (GLM: `padded_vocab_size`).
    pub vocab: u64,
    /// `tie_word_embeddings`.
    pub tied_embeddings: bool,
}

impl DenseModelShape {
    /// Parameters of one transformer block: q, k, v, o projections and the gated MLP
    /// (norms and biases, < 0.1 %, left out).
    pub fn block_params(&self) -> u64 {
        let q = self.n_heads * self.head_dim;
        let kv = self.n_kv_heads * self.head_dim;
        self.hidden * q
            + 2 * self.hidden * kv
            + q * self.hidden
            + 3 * self.hidden * self.intermediate
    }

    /// Parameters of the output projection (`vocab x hidden`; the embedding table itself when
    /// tied).
    pub fn head_params(&self) -> u64 {
        self.vocab * self.hidden
    }

    /// Every parameter: embedding, blocks and (when untied) the output head. The one parameter
    /// count of the model (the catalogue's tests hold it to the model card).
    pub fn params(&self) -> u64 {
        let embedding = self.vocab * self.hidden;
        let head = if self.tied_embeddings {
            0
        } else {
            self.head_params()
        };
        embedding + head + self.n_layers * self.block_params()
    }

    /// Bytes of bf16 weights the model occupies in memory.
    pub fn weight_bytes(&self) -> f64 {
        BYTES_PER_ELEMENT * self.params() as f64
    }

    /// Bytes of one block's bf16 weights.
    pub fn block_weight_bytes(&self) -> f64 {
        BYTES_PER_ELEMENT * self.block_params() as f64
    }

    /// Bytes of the output projection's bf16 weights.
    pub fn head_weight_bytes(&self) -> f64 {
        BYTES_PER_ELEMENT * self.head_params() as f64
    }

    /// Bytes of bf16 KV cache per token in one layer (K and V of every KV head).
    pub fn kv_bytes_per_token_per_layer(&self) -> f64 {
        2.0 * BYTES_PER_ELEMENT * (self.n_kv_heads * self.head_dim) as f64
    }

    /// Bytes of bf16 KV cache per token (K and V of every layer).
    pub fn kv_bytes_per_token(&self) -> f64 {
        self.n_layers as f64 * self.kv_bytes_per_token_per_layer()
    }

    /// Attention FLOPs one query row spends on one cached token in one layer: q.k and the
    /// weighted sum of v, 2 x head_dim each, for every query head.
    pub fn attention_flops_per_pair_per_layer(&self) -> f64 {
        4.0 * (self.n_heads * self.head_dim) as f64
    }

    /// The model at 1/`widths` of its hidden, intermediate, head and vocabulary widths and
    /// 1/`layers` of its layers (at least one of each), its heads kept: how live mode runs it.
    pub fn scaled_down(&self, widths: u64, layers: u64) -> DenseModelShape {
        let width = |v: u64| (v / widths.max(1)).max(1);
        DenseModelShape {
            name: format!("{} (scaled down)", self.name),
            n_layers: (self.n_layers / layers.max(1)).max(1),
            hidden: width(self.hidden),
            intermediate: width(self.intermediate),
            n_heads: self.n_heads,
            n_kv_heads: self.n_kv_heads,
            head_dim: width(self.head_dim),
            vocab: width(self.vocab),
            tied_embeddings: self.tied_embeddings,
        }
    }

    /// Checks the dimensions; the error names the first bad field.
    pub fn check(&self) -> Result<(), ModelShapeError> {
        let invalid = |field: &'static str, problem: String| ModelShapeError::Invalid {
            model: self.name.clone(),
            field,
            problem,
        };
        for (field, value) in [
            ("n_layers", self.n_layers),
            ("hidden", self.hidden),
            ("intermediate", self.intermediate),
            ("n_heads", self.n_heads),
            ("n_kv_heads", self.n_kv_heads),
            ("head_dim", self.head_dim),
            ("vocab", self.vocab),
        ] {
            if value == 0 {
                return Err(invalid(field, "must be at least 1, got 0".into()));
            }
        }
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return Err(invalid(
                "n_kv_heads",
                format!(
                    "= {} does not divide n_heads = {}",
                    self.n_kv_heads, self.n_heads
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_cache_bytes_follow_grouped_query_attention() {
        let llama = DenseModelShape::preset("deepseek-r1-distill-llama-8b").unwrap();
        // 2 (K, V) x 2 bytes x 32 layers x 8 heads x 128 = 128 KiB per token.
        assert_eq!(llama.kv_bytes_per_token(), 131_072.0);
        let qwen = DenseModelShape::preset("deepseek-r1-distill-qwen-7b").unwrap();
        // 2 x 2 bytes x 28 layers x 4 heads x 128 = 57,344 bytes.
        assert_eq!(qwen.kv_bytes_per_token(), 57_344.0);
    }

    #[test]
    fn scaled_down_keeps_heads_and_floors_at_one() {
        let llama = DenseModelShape::preset("llama-3.1-8b-instruct").unwrap();
        let small = llama.scaled_down(64, 8);
        assert_eq!(
            (
                small.n_layers,
                small.hidden,
                small.intermediate,
                small.head_dim
            ),
            (4, 64, 224, 2)
        );
        assert_eq!((small.n_heads, small.n_kv_heads), (32, 8));
        assert_eq!(small.vocab, 128_256 / 64);
        let tiny = llama.scaled_down(1 << 20, 1 << 10);
        assert_eq!((tiny.n_layers, tiny.hidden), (1, 1));
    }
}
