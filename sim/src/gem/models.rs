//! The five MoE models of the GEM evaluation (gem.txt Table 1) as data: `MoeModelShape`s whose
//! every dimension is copied from the checkpoint's public Hugging Face `config.json`.

use crate::model_shape::{MoeModelShape, WeightDtype};

/// Names accepted by [`model_by_name`], in the paper's Table 1 order.
pub const GEM_MODEL_NAMES: &[&str] = &[
    "mixtral-8x7b",
    "mixtral-8x22b",
    "llama-4-scout",
    "hunyuan-a13b",
    "qwen3-30b-a3b",
];

/// A model name that is not one of [`GEM_MODEL_NAMES`].
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("unknown model {name:?}; known models: {}", GEM_MODEL_NAMES.join(", "))]
pub struct UnknownModel {
    pub name: String,
}

/// The model called `name` (case-insensitive).
pub fn model_by_name(name: &str) -> Result<MoeModelShape, UnknownModel> {
    match name.to_ascii_lowercase().as_str() {
        "mixtral-8x7b" => Ok(mixtral_8x7b()),
        "mixtral-8x22b" => Ok(mixtral_8x22b()),
        "llama-4-scout" => Ok(llama_4_scout()),
        "hunyuan-a13b" => Ok(hunyuan_a13b()),
        "qwen3-30b-a3b" => Ok(qwen3_30b_a3b()),
        _ => Err(UnknownModel {
            name: name.to_string(),
        }),
    }
}

/// Every model of the evaluation as (name, shape).
pub fn all_models() -> Vec<(&'static str, MoeModelShape)> {
    GEM_MODEL_NAMES
        .iter()
        .map(|&name| (name, model_by_name(name).expect("listed name")))
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn shape(
    name: &str,
    n_layers: usize,
    n_experts: usize,
    top_k: usize,
    shared_expert_ffn: usize,
    hidden: usize,
    expert_ffn: usize,
    heads: (usize, usize, usize),
    vocab: usize,
    tied_embeddings: bool,
) -> MoeModelShape {
    MoeModelShape {
        name: name.into(),
        n_layers,
        n_experts,
        top_k,
        n_shared_experts: usize::from(shared_expert_ffn > 0),
        shared_expert_ffn,
        shared_expert_gate: false,
        hidden,
        expert_ffn,
        n_attention_heads: heads.0,
        n_kv_heads: heads.1,
        head_dim: heads.2,
        attention_qkv_bias: false,
        vocab,
        tied_embeddings,
        weight_dtype: WeightDtype::Bf16,
        lm_head_dtype: WeightDtype::Bf16,
    }
}

/// Mixtral-8x7B. Source: <https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json>:
/// `num_hidden_layers = 32`, `num_local_experts = 8`, `num_experts_per_tok = 2`,
/// `hidden_size = 4096`, `intermediate_size = 14336` (per expert), `num_attention_heads = 32`,
/// `num_key_value_heads = 8`, head_dim 4096 / 32 = 128, `vocab_size = 32000`,
/// `tie_word_embeddings = false`, `torch_dtype = "bfloat16"`; no shared expert. 46.7 B
/// parameters (Table 1: 47B).
pub fn mixtral_8x7b() -> MoeModelShape {
    shape(
        "Mixtral-8x7B-v0.1",
        32,
        8,
        2,
        0,
        4096,
        14336,
        (32, 8, 128),
        32000,
        false,
    )
}

/// Mixtral-8x22B. Source: <https://huggingface.co/mistral-community/Mixtral-8x22B-v0.1/blob/main/config.json>:
/// `num_hidden_layers = 56`, `num_local_experts = 8`, `num_experts_per_tok = 2`,
/// `hidden_size = 6144`, `intermediate_size = 16384`, `num_attention_heads = 48`,
/// `num_key_value_heads = 8`, head_dim 128, `vocab_size = 32000`, untied, bf16. 140.6 B
/// parameters (Table 1: 141B).
pub fn mixtral_8x22b() -> MoeModelShape {
    shape(
        "Mixtral-8x22B-v0.1",
        56,
        8,
        2,
        0,
        6144,
        16384,
        (48, 8, 128),
        32000,
        false,
    )
}

/// Llama-4-Scout-17B-16E (text part). Source:
/// <https://huggingface.co/meta-llama/Llama-4-Scout-17B-16E/blob/main/config.json>,
/// `text_config`: `num_hidden_layers = 48`, `num_local_experts = 16`,
/// `num_experts_per_tok = 1`, `hidden_size = 5120`, `intermediate_size = 8192` (each routed
/// expert and the one shared expert of every `Llama4TextMoe` layer; `interleave_moe_layer_step
/// = 1`, so every layer is MoE), `num_attention_heads = 40`, `num_key_value_heads = 8`,
/// `head_dim = 128`, `vocab_size = 202048`, `tie_word_embeddings = false`, bf16. 107.7 B text
/// parameters (Table 1: 109B with the vision encoder), 17.2 B active.
pub fn llama_4_scout() -> MoeModelShape {
    shape(
        "Llama-4-Scout-17B-16E",
        48,
        16,
        1,
        8192,
        5120,
        8192,
        (40, 8, 128),
        202_048,
        false,
    )
}

/// Hunyuan-A13B. Source: <https://huggingface.co/tencent/Hunyuan-A13B-Instruct/blob/main/config.json>
/// (`model_type = "hunyuan_v1_moe"`): `num_hidden_layers = 32`, `num_experts = 64`,
/// `moe_topk = 8`, `num_shared_expert = 1`, `hidden_size = 4096`, `moe_intermediate_size =
/// 3072` (routed), `intermediate_size = 3072` (shared), `num_attention_heads = 32`,
/// `num_key_value_heads = 8`, `head_dim = 128`, `vocab_size = 128167`,
/// `tie_word_embeddings = true`, bf16. 80.4 B parameters (Table 1: 80B).
pub fn hunyuan_a13b() -> MoeModelShape {
    shape(
        "Hunyuan-A13B-Instruct",
        32,
        64,
        8,
        3072,
        4096,
        3072,
        (32, 8, 128),
        128_167,
        true,
    )
}

/// Qwen3-30B-A3B. Source: <https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json>:
/// `num_hidden_layers = 48`, `num_experts = 128`, `num_experts_per_tok = 8`,
/// `hidden_size = 2048`, `moe_intermediate_size = 768`, no shared expert,
/// `num_attention_heads = 32`, `num_key_value_heads = 4`, `head_dim = 128`,
/// `vocab_size = 151936`, `tie_word_embeddings = false`, bf16. 30.5 B parameters (Table 1: 30B).
pub fn qwen3_30b_a3b() -> MoeModelShape {
    shape(
        "Qwen3-30B-A3B",
        48,
        128,
        8,
        0,
        2048,
        768,
        (32, 4, 128),
        151_936,
        false,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Table 1 of gem.txt: layers, experts per layer, total parameters (billions).
    const TABLE_1: &[(&str, usize, usize, f64)] = &[
        ("mixtral-8x7b", 32, 8, 47.0),
        ("mixtral-8x22b", 56, 8, 141.0),
        ("llama-4-scout", 48, 16, 109.0),
        ("hunyuan-a13b", 32, 64, 80.0),
        ("qwen3-30b-a3b", 48, 128, 30.0),
    ];

    #[test]
    fn shapes_match_table_1() {
        for &(name, layers, experts, params_b) in TABLE_1 {
            let shape = model_by_name(name).unwrap();
            shape.validate().unwrap();
            assert_eq!(
                (shape.n_layers, shape.n_experts),
                (layers, experts),
                "{name}"
            );
            let total = shape.total_params() as f64 / 1e9;
            // Table 1 rounds to whole billions; Scout's 109B counts the vision encoder, which
            // the text shape leaves out.
            assert!(
                (total - params_b).abs() / params_b < 0.02,
                "{name}: {total:.2}B vs {params_b}B"
            );
        }
        let scout = llama_4_scout();
        let active = scout.active_params_per_token() as f64 / 1e9;
        assert!((active - 17.0).abs() < 0.5, "Scout active {active}");
    }

    #[test]
    fn unknown_model_lists_known_names() {
        let message = model_by_name("deepseek-v3").unwrap_err().to_string();
        assert!(message.contains("deepseek-v3"));
        for name in GEM_MODEL_NAMES {
            assert!(message.contains(name), "{message}");
        }
        assert_eq!(model_by_name("Qwen3-30B-A3B").unwrap(), qwen3_30b_a3b());
        assert_eq!(all_models().len(), 5);
    }
}
