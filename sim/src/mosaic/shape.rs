//! Dense decoder-only transformer shapes of the MoA expert LLMs (presets copied from each
//! checkpoint's public Hugging Face `config.json`) and the parameter, byte and KV-cache counts
//! the decode-cost model derives from them.

use serde::{Deserialize, Serialize};

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

/// Preset names accepted by [`DenseModelShape::preset`].
pub const DENSE_PRESETS: &[&str] = &[
    "deepseek-r1-distill-llama-8b",
    "deepseek-r1-distill-qwen-7b",
    "qwen2.5-7b-instruct",
    "gemma-2-9b-it",
    "exaone-3.5-7.8b-instruct",
    "glm-4-9b",
    "llama-3.1-8b-instruct",
    "granite-3.1-8b-instruct",
];

impl DenseModelShape {
    /// The preset called `name`, or `None`.
    ///
    /// Sources (`config.json` of each repository on huggingface.co):
    /// - deepseek-ai/DeepSeek-R1-Distill-Llama-8B and meta-llama/Llama-3.1-8B-Instruct
    ///   (Llama-3.1-8B): 32 layers, hidden 4096, intermediate 14336, 32 heads, 8 KV heads,
    ///   vocab 128256, untied -> 8.03 B parameters.
    /// - deepseek-ai/DeepSeek-R1-Distill-Qwen-7B and Qwen/Qwen2.5-7B-Instruct (Qwen2 7B; also the
    ///   base of Bespoke-Stratos-7B, OpenThinker-7B, DLER-R1-7B, Skywork-OR1-7B): 28 layers,
    ///   hidden 3584, intermediate 18944, 28 heads, 4 KV heads, vocab 152064, untied -> 7.6 B.
    /// - google/gemma-2-9b-it: 42 layers, hidden 3584, intermediate 14336, 16 heads of 256,
    ///   8 KV heads, vocab 256000, tied -> 9.24 B.
    /// - LGAI-EXAONE/EXAONE-3.5-7.8B-Instruct: 32 layers, hidden 4096, intermediate 14336,
    ///   32 heads, 8 KV heads, vocab 102400, untied -> 7.8 B.
    /// - THUDM/glm-4-9b: 40 layers, hidden 4096, ffn_hidden 13696, 32 heads, 2 KV groups,
    ///   padded vocab 151552, untied -> 9.4 B.
    /// - ibm-granite/granite-3.1-8b-instruct: 40 layers, hidden 4096, intermediate 12800,
    ///   32 heads, 8 KV heads, vocab 49155, tied -> 8.2 B.
    pub fn preset(name: &str) -> Option<DenseModelShape> {
        let shape = |name: &str, l, h, i, nh, nkv, hd, v, tied| DenseModelShape {
            name: name.to_string(),
            n_layers: l,
            hidden: h,
            intermediate: i,
            n_heads: nh,
            n_kv_heads: nkv,
            head_dim: hd,
            vocab: v,
            tied_embeddings: tied,
        };
        let canonical = DENSE_PRESETS
            .iter()
            .find(|p| p.eq_ignore_ascii_case(name))?;
        Some(match *canonical {
            "deepseek-r1-distill-llama-8b" => shape(
                "deepseek-ai/DeepSeek-R1-Distill-Llama-8B",
                32,
                4096,
                14336,
                32,
                8,
                128,
                128_256,
                false,
            ),
            "llama-3.1-8b-instruct" => shape(
                "meta-llama/Llama-3.1-8B-Instruct",
                32,
                4096,
                14336,
                32,
                8,
                128,
                128_256,
                false,
            ),
            "deepseek-r1-distill-qwen-7b" => shape(
                "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
                28,
                3584,
                18944,
                28,
                4,
                128,
                152_064,
                false,
            ),
            "qwen2.5-7b-instruct" => shape(
                "Qwen/Qwen2.5-7B-Instruct",
                28,
                3584,
                18944,
                28,
                4,
                128,
                152_064,
                false,
            ),
            "gemma-2-9b-it" => shape(
                "google/gemma-2-9b-it",
                42,
                3584,
                14336,
                16,
                8,
                256,
                256_000,
                true,
            ),
            "exaone-3.5-7.8b-instruct" => shape(
                "LGAI-EXAONE/EXAONE-3.5-7.8B-Instruct",
                32,
                4096,
                14336,
                32,
                8,
                128,
                102_400,
                false,
            ),
            "glm-4-9b" => shape(
                "THUDM/glm-4-9b",
                40,
                4096,
                13696,
                32,
                2,
                128,
                151_552,
                false,
            ),
            _ => shape(
                "ibm-granite/granite-3.1-8b-instruct",
                40,
                4096,
                12800,
                32,
                8,
                128,
                49_155,
                true,
            ),
        })
    }

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

    /// Every parameter: embedding, blocks and (when untied) the output head.
    pub fn params(&self) -> u64 {
        let embedding = self.vocab * self.hidden;
        let head = if self.tied_embeddings { 0 } else { embedding };
        embedding + head + self.n_layers * self.block_params()
    }

    /// Parameters a forward pass multiplies per token: blocks and the output head (the
    /// embedding is a lookup).
    pub fn matmul_params(&self) -> u64 {
        self.n_layers * self.block_params() + self.vocab * self.hidden
    }

    /// Bytes of bf16 weights.
    pub fn weight_bytes(&self) -> f64 {
        2.0 * self.params() as f64
    }

    /// Bytes of bf16 KV cache per token (K and V of every layer).
    pub fn kv_bytes_per_token(&self) -> f64 {
        2.0 * 2.0 * (self.n_layers * self.n_kv_heads * self.head_dim) as f64
    }

    /// Checks the dimensions; `Err` names the first zero field.
    pub fn check(&self) -> Result<(), String> {
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
                return Err(format!("{field} must be at least 1"));
            }
        }
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return Err(format!(
                "n_heads {} is not a multiple of n_kv_heads {}",
                self.n_heads, self.n_kv_heads
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_match_the_model_cards_parameter_counts() {
        // Model-card sizes: Llama-3.1-8B 8.03 B, Qwen2.5-7B 7.62 B, Gemma-2-9B 9.24 B,
        // EXAONE-3.5-7.8B 7.82 B, GLM-4-9B 9.40 B, Granite-3.1-8B 8.17 B.
        let expected = [
            ("deepseek-r1-distill-llama-8b", 8.03),
            ("qwen2.5-7b-instruct", 7.62),
            ("gemma-2-9b-it", 9.24),
            ("exaone-3.5-7.8b-instruct", 7.82),
            ("glm-4-9b", 9.40),
            ("granite-3.1-8b-instruct", 8.17),
        ];
        for (name, billions) in expected {
            let shape = DenseModelShape::preset(name).unwrap();
            shape.check().unwrap();
            let got = shape.params() as f64 / 1e9;
            assert!((got - billions).abs() / billions < 0.02, "{name}: {got}");
        }
        assert!(DenseModelShape::preset("gpt-5").is_none());
        for name in DENSE_PRESETS {
            assert!(DenseModelShape::preset(name).is_some(), "{name}");
        }
    }

    #[test]
    fn kv_cache_bytes_follow_grouped_query_attention() {
        let llama = DenseModelShape::preset("deepseek-r1-distill-llama-8b").unwrap();
        // 2 (K, V) x 2 bytes x 32 layers x 8 heads x 128 = 128 KiB per token.
        assert_eq!(llama.kv_bytes_per_token(), 131_072.0);
        let qwen = DenseModelShape::preset("deepseek-r1-distill-qwen-7b").unwrap();
        assert_eq!(qwen.kv_bytes_per_token(), 57_344.0);
    }
}
