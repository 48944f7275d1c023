//! Every model preset of the cost model, each dimension copied from the checkpoint's public
//! Hugging Face `config.json` and cited once, here: the dense models of MOSAIC and Chimera, the
//! MoE models of CAPS and GEM, the MLA-MoE base of ExpertWeave, and the scaled-down shapes live
//! mode runs on the CPU. A family keeps only the list of names it accepts. The tests hold each
//! derived parameter count to the published one within a stated tolerance.

use super::{DenseModelShape, MlaMoeShape, ModelShapeError, MoeModelShape, WeightDtype};

/// Names accepted by [`DenseModelShape::preset`].
pub const DENSE_PRESETS: &[&str] = &[
    "deepseek-r1-distill-llama-8b",
    "deepseek-r1-distill-qwen-7b",
    "qwen2.5-7b-instruct",
    "gemma-2-9b-it",
    "exaone-3.5-7.8b-instruct",
    "glm-4-9b",
    "llama-3.1-8b-instruct",
    "granite-3.1-8b-instruct",
    "qwen2.5-1.5b-instruct",
    "qwen2.5-3b-instruct",
    "qwen2.5-14b-instruct",
    "llama-3.2-3b-instruct",
    "ministral-8b-instruct-2410",
    "ministral-3-8b-instruct-2512",
    "llama-2-7b",
];

/// Names accepted by [`MoeModelShape::preset`]: CAPS's model (bf16 and as CAPS quantizes it),
/// GEM's Table 1 in the paper's order, and the scaled-down shape of live mode.
pub const MOE_PRESETS: &[&str] = &[
    "qwen1.5-moe-a2.7b",
    "qwen1.5-moe-a2.7b-nf4",
    "mixtral-8x7b",
    "mixtral-8x22b",
    "llama-4-scout",
    "hunyuan-a13b",
    "qwen3-30b-a3b",
    "live-tiny-moe",
];

/// Names accepted by [`MlaMoeShape::preset`].
pub const MLA_MOE_PRESETS: &[&str] = &["esft-vanilla-16b", "live-tiny-mla"];

/// The entry of `known` equal to `name` up to ASCII case.
fn canonical(known: &'static [&'static str], name: &str) -> Result<&'static str, ModelShapeError> {
    known
        .iter()
        .find(|k| k.eq_ignore_ascii_case(name))
        .copied()
        .ok_or_else(|| ModelShapeError::UnknownPreset {
            name: name.to_string(),
            known: known.to_vec(),
        })
}

impl DenseModelShape {
    /// The preset called `name` (case-insensitive; see [`DENSE_PRESETS`]).
    ///
    /// Sources: the `config.json` of each repository on huggingface.co
    /// (`https://huggingface.co/<repository>/blob/main/config.json`):
    /// - deepseek-ai/DeepSeek-R1-Distill-Llama-8B and meta-llama/Llama-3.1-8B-Instruct
    ///   (Llama-3.1-8B): 32 layers, hidden 4096, intermediate 14336, 32 heads, 8 KV heads,
    ///   vocab 128256, untied.
    /// - deepseek-ai/DeepSeek-R1-Distill-Qwen-7B and Qwen/Qwen2.5-7B-Instruct (Qwen2 7B; also the
    ///   base of Bespoke-Stratos-7B, OpenThinker-7B, DLER-R1-7B, Skywork-OR1-7B): 28 layers,
    ///   hidden 3584, intermediate 18944, 28 heads, 4 KV heads, vocab 152064, untied.
    /// - google/gemma-2-9b-it: 42 layers, hidden 3584, intermediate 14336, 16 heads of 256,
    ///   8 KV heads, vocab 256000, tied.
    /// - LGAI-EXAONE/EXAONE-3.5-7.8B-Instruct: 32 layers, hidden 4096, intermediate 14336,
    ///   32 heads, 8 KV heads, vocab 102400, untied.
    /// - THUDM/glm-4-9b: 40 layers, hidden 4096, ffn_hidden 13696, 32 heads, 2 KV groups,
    ///   padded vocab 151552, untied.
    /// - ibm-granite/granite-3.1-8b-instruct: 40 layers, hidden 4096, intermediate 12800,
    ///   32 heads, 8 KV heads, vocab 49155, tied.
    /// - Qwen/Qwen2.5-1.5B-Instruct: 28 layers, hidden 1536, intermediate 8960, 12 heads,
    ///   2 KV heads, vocab 151936, tied.
    /// - Qwen/Qwen2.5-3B-Instruct: 36 layers, hidden 2048, intermediate 11008, 16 heads,
    ///   2 KV heads, vocab 151936, tied.
    /// - Qwen/Qwen2.5-14B-Instruct: 48 layers, hidden 5120, intermediate 13824, 40 heads,
    ///   8 KV heads, vocab 152064, untied.
    /// - meta-llama/Llama-3.2-3B-Instruct: 28 layers, hidden 3072, intermediate 8192, 24 heads,
    ///   8 KV heads, head_dim 128, vocab 128256, tied.
    /// - mistralai/Ministral-8B-Instruct-2410: 36 layers, hidden 4096, intermediate 12288,
    ///   32 heads, 8 KV heads, head_dim 128, vocab 131072, untied.
    /// - mistralai/Ministral-3-8B-Instruct-2512 (its text model; Chimera's "Minis8B"): 34
    ///   layers, hidden 4096, 32 heads, 8 KV heads, head_dim 128 (the checkpoint's
    ///   `text_config`); intermediate 14336, vocab 131072, untied (transformers'
    ///   `Ministral3Config`, whose defaults are documented as this checkpoint's). Its 0.4B vision
    ///   encoder is not part of the shape.
    /// - meta-llama/Llama-2-7b-hf: 32 layers, hidden 4096, intermediate 11008, 32 heads,
    ///   32 KV heads (no GQA), head_dim 128, vocab 32000, untied (the shape Vidur's GPU profiles
    ///   measured, `profiles/vidur/`; the serving family's reference dense replica).
    ///
    /// Every head is 128 wide (`head_dim`, or `hidden_size / num_attention_heads`) except
    /// Gemma 2's 256. The parameter counts these give are held to the model cards by the test
    /// `published_parameter_counts`.
    pub fn preset(name: &str) -> Result<DenseModelShape, ModelShapeError> {
        #[allow(clippy::too_many_arguments)]
        fn shape(
            name: &str,
            n_layers: u64,
            hidden: u64,
            intermediate: u64,
            n_heads: u64,
            n_kv_heads: u64,
            head_dim: u64,
            vocab: u64,
            tied_embeddings: bool,
        ) -> DenseModelShape {
            DenseModelShape {
                name: name.to_string(),
                n_layers,
                hidden,
                intermediate,
                n_heads,
                n_kv_heads,
                head_dim,
                vocab,
                tied_embeddings,
            }
        }
        let llama_3_1_8b = |name| shape(name, 32, 4096, 14336, 32, 8, 128, 128_256, false);
        let qwen2_5_7b = |name| shape(name, 28, 3584, 18944, 28, 4, 128, 152_064, false);
        Ok(match canonical(DENSE_PRESETS, name)? {
            "deepseek-r1-distill-llama-8b" => {
                llama_3_1_8b("deepseek-ai/DeepSeek-R1-Distill-Llama-8B")
            }
            "llama-3.1-8b-instruct" => llama_3_1_8b("meta-llama/Llama-3.1-8B-Instruct"),
            "deepseek-r1-distill-qwen-7b" => qwen2_5_7b("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B"),
            "qwen2.5-7b-instruct" => qwen2_5_7b("Qwen/Qwen2.5-7B-Instruct"),
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
            "granite-3.1-8b-instruct" => shape(
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
            "qwen2.5-1.5b-instruct" => shape(
                "Qwen/Qwen2.5-1.5B-Instruct",
                28,
                1536,
                8960,
                12,
                2,
                128,
                151_936,
                true,
            ),
            "qwen2.5-3b-instruct" => shape(
                "Qwen/Qwen2.5-3B-Instruct",
                36,
                2048,
                11008,
                16,
                2,
                128,
                151_936,
                true,
            ),
            "qwen2.5-14b-instruct" => shape(
                "Qwen/Qwen2.5-14B-Instruct",
                48,
                5120,
                13824,
                40,
                8,
                128,
                152_064,
                false,
            ),
            "llama-2-7b" => shape(
                "meta-llama/Llama-2-7b-hf",
                32,
                4096,
                11008,
                32,
                32,
                128,
                32_000,
                false,
            ),
            "llama-3.2-3b-instruct" => shape(
                "meta-llama/Llama-3.2-3B-Instruct",
                28,
                3072,
                8192,
                24,
                8,
                128,
                128_256,
                true,
            ),
            "ministral-3-8b-instruct-2512" => shape(
                "mistralai/Ministral-3-8B-Instruct-2512",
                34,
                4096,
                14336,
                32,
                8,
                128,
                131_072,
                false,
            ),
            _ => shape(
                "mistralai/Ministral-8B-Instruct-2410",
                36,
                4096,
                12288,
                32,
                8,
                128,
                131_072,
                false,
            ),
        })
    }
}

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

    /// Mixtral-8x7B. Source: <https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json>:
    /// `num_hidden_layers = 32`, `num_local_experts = 8`, `num_experts_per_tok = 2`,
    /// `hidden_size = 4096`, `intermediate_size = 14336` (per expert), `num_attention_heads = 32`,
    /// `num_key_value_heads = 8`, head_dim 4096 / 32 = 128, `vocab_size = 32000`,
    /// `tie_word_embeddings = false`, `torch_dtype = "bfloat16"`; no shared expert. 46.7 B
    /// parameters (Table 1: 47B).
    pub fn mixtral_8x7b() -> MoeModelShape {
        gated_moe(
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
        gated_moe(
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
        gated_moe(
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
        gated_moe(
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
        gated_moe(
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

    /// The preset called `name` (case-insensitive; see [`MOE_PRESETS`]).
    pub fn preset(name: &str) -> Result<MoeModelShape, ModelShapeError> {
        Ok(match canonical(MOE_PRESETS, name)? {
            "qwen1.5-moe-a2.7b" => MoeModelShape::qwen1_5_moe_a2_7b(),
            "qwen1.5-moe-a2.7b-nf4" => MoeModelShape::qwen1_5_moe_a2_7b_nf4(),
            "mixtral-8x7b" => MoeModelShape::mixtral_8x7b(),
            "mixtral-8x22b" => MoeModelShape::mixtral_8x22b(),
            "llama-4-scout" => MoeModelShape::llama_4_scout(),
            "hunyuan-a13b" => MoeModelShape::hunyuan_a13b(),
            "qwen3-30b-a3b" => MoeModelShape::qwen3_30b_a3b(),
            _ => MoeModelShape::live_tiny_moe(),
        })
    }
}

#[allow(clippy::too_many_arguments)]
fn gated_moe(
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

impl MlaMoeShape {
    /// The ESFT vanilla 16B base model (`deepseek-ai/ESFT-vanilla-lite`), which shares the
    /// architecture of DeepSeek-V2-Lite. Source:
    /// <https://huggingface.co/deepseek-ai/DeepSeek-V2-Lite/blob/main/config.json>:
    /// `vocab_size = 102400`, `hidden_size = 2048`, `num_hidden_layers = 27`,
    /// `first_k_dense_replace = 1`, `intermediate_size = 10944`, `n_routed_experts = 64`,
    /// `n_shared_experts = 2`, `moe_intermediate_size = 1408`, `num_experts_per_tok = 6`,
    /// `num_attention_heads = 16`, `q_lora_rank = null`, `kv_lora_rank = 512`,
    /// `qk_nope_head_dim = 128`, `qk_rope_head_dim = 64`, `v_head_dim = 128`,
    /// `tie_word_embeddings = false`, `torch_dtype = "bfloat16"`. These give 15.71 B parameters
    /// (the model card's "15.7B"; a unit test checks it).
    pub fn esft_vanilla_16b() -> MlaMoeShape {
        MlaMoeShape {
            name: "ESFT-vanilla-lite (DeepSeek-V2-Lite shape)".into(),
            vocab: 102_400,
            hidden: 2048,
            n_layers: 27,
            first_k_dense: 1,
            dense_ffn: 10_944,
            n_routed_experts: 64,
            n_shared_experts: 2,
            expert_ffn: 1408,
            top_k: 6,
            n_heads: 16,
            q_lora_rank: None,
            kv_lora_rank: 512,
            qk_nope_head_dim: 128,
            qk_rope_head_dim: 64,
            v_head_dim: 128,
            tied_embeddings: false,
            bytes_per_param: 2,
        }
    }

    /// A deliberately tiny MLA MoE shape for live mode on the CPU backend (`expertsim live`):
    /// not a published model, but the ESFT-vanilla-lite layout scaled down (3 layers of which
    /// the first is dense, 64 routed experts so the ESFT adapters' expert sets still fit, top-6,
    /// hidden 64, expert FFN 32, 4 heads, a 512-token vocabulary) so the reference kernels run a
    /// whole scenario in seconds.
    pub fn live_tiny_mla() -> MlaMoeShape {
        MlaMoeShape {
            name: "live-tiny-mla (scaled down for the CPU backend)".into(),
            vocab: 512,
            hidden: 64,
            n_layers: 3,
            first_k_dense: 1,
            dense_ffn: 128,
            n_routed_experts: 64,
            n_shared_experts: 1,
            expert_ffn: 32,
            top_k: 6,
            n_heads: 4,
            q_lora_rank: None,
            kv_lora_rank: 32,
            qk_nope_head_dim: 16,
            qk_rope_head_dim: 8,
            v_head_dim: 16,
            tied_embeddings: false,
            bytes_per_param: 2,
        }
    }

    /// The preset called `name` (case-insensitive; see [`MLA_MOE_PRESETS`]).
    pub fn preset(name: &str) -> Result<MlaMoeShape, ModelShapeError> {
        Ok(match canonical(MLA_MOE_PRESETS, name)? {
            "esft-vanilla-16b" => MlaMoeShape::esft_vanilla_16b(),
            _ => MlaMoeShape::live_tiny_mla(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Published total parameter counts (billions). Dense models: the model cards' "Number of
    /// Parameters" (Qwen2.5, EXAONE) or the size Hugging Face lists for the checkpoint; held
    /// within 1 %, since the dense count leaves out biases and norms (< 0.1 %). MoE models: the
    /// model cards (Qwen1.5-MoE 14.3B, Qwen3-30B-A3B 30.5B, DeepSeek-V2-Lite 15.7B) and gem.txt
    /// Table 1 (47, 141, 109, 80B), held within 2 %: Table 1 rounds to whole billions, and
    /// Llama-4-Scout's 109B counts the vision encoder its text shape leaves out (107.7B).
    const PUBLISHED: &[(&str, f64)] = &[
        ("deepseek-r1-distill-llama-8b", 8.03),
        ("llama-3.1-8b-instruct", 8.03),
        ("deepseek-r1-distill-qwen-7b", 7.62),
        ("qwen2.5-7b-instruct", 7.61),
        ("gemma-2-9b-it", 9.24),
        ("exaone-3.5-7.8b-instruct", 7.82),
        ("glm-4-9b", 9.40),
        ("granite-3.1-8b-instruct", 8.17),
        ("qwen2.5-1.5b-instruct", 1.54),
        ("qwen2.5-3b-instruct", 3.09),
        ("qwen2.5-14b-instruct", 14.7),
        ("llama-3.2-3b-instruct", 3.21),
        ("ministral-8b-instruct-2410", 8.02),
        ("llama-2-7b", 6.74),
        ("qwen1.5-moe-a2.7b", 14.3),
        ("mixtral-8x7b", 47.0),
        ("mixtral-8x22b", 141.0),
        ("llama-4-scout", 109.0),
        ("hunyuan-a13b", 80.0),
        ("qwen3-30b-a3b", 30.5),
        ("esft-vanilla-16b", 15.7),
    ];

    /// (derived billions, tolerance) of a preset.
    fn derived_billions(name: &str) -> (f64, f64) {
        if let Ok(dense) = DenseModelShape::preset(name) {
            dense.check().unwrap();
            (dense.params() as f64 / 1e9, 0.01)
        } else if let Ok(moe) = MoeModelShape::preset(name) {
            moe.validate().unwrap();
            (moe.total_params() as f64 / 1e9, 0.02)
        } else {
            let mla = MlaMoeShape::preset(name).unwrap();
            mla.validate().unwrap();
            (mla.total_params() as f64 / 1e9, 0.02)
        }
    }

    #[test]
    fn published_parameter_counts() {
        for &(name, published) in PUBLISHED {
            let (derived, tolerance) = derived_billions(name);
            assert!(
                (derived - published).abs() / published < tolerance,
                "{name}: {derived:.3}B derived vs {published}B published"
            );
        }
        // Every published preset is checked (the live-mode shapes are not published models,
        // the nf4 variant is the bf16 checkpoint quantized).
        for name in DENSE_PRESETS
            .iter()
            .chain(MOE_PRESETS)
            .chain(MLA_MOE_PRESETS)
        {
            let checked = PUBLISHED.iter().any(|(p, _)| p == name);
            assert!(
                checked
                    || name.starts_with("live-")
                    || name.ends_with("-nf4")
                    || *name == "ministral-3-8b-instruct-2512",
                "{name}"
            );
        }
        // Ministral-3-8B's card prints its language model as "8.4B" (one decimal, not rounded
        // to the nearest: the shape's count is 8.49B); a wrong layer count or MLP width (36 x
        // 12288 is the 2410 model's 8.02B) leaves [8.4, 8.5).
        let (ministral3, _) = derived_billions("ministral-3-8b-instruct-2512");
        assert!((8.4..8.5).contains(&ministral3), "{ministral3}");
        // One count per model, exact where the card prints more digits.
        assert_eq!(
            MoeModelShape::qwen1_5_moe_a2_7b().total_params(),
            14_315_784_192
        );
        assert_eq!(
            MlaMoeShape::esft_vanilla_16b().total_params(),
            15_706_484_224
        );
    }

    #[test]
    fn gem_table_1_layers_and_experts() {
        // gem.txt Table 1: layers and experts per layer.
        for (name, layers, experts) in [
            ("mixtral-8x7b", 32, 8),
            ("mixtral-8x22b", 56, 8),
            ("llama-4-scout", 48, 16),
            ("hunyuan-a13b", 32, 64),
            ("qwen3-30b-a3b", 48, 128),
        ] {
            let shape = MoeModelShape::preset(name).unwrap();
            assert_eq!(
                (shape.n_layers, shape.n_experts),
                (layers, experts),
                "{name}"
            );
        }
        let scout = MoeModelShape::llama_4_scout();
        let active = scout.active_params_per_token() as f64 / 1e9;
        assert!((active - 17.0).abs() < 0.5, "Scout active {active}");
    }

    #[test]
    fn lookups_ignore_case_and_list_the_known_names() {
        assert_eq!(
            MoeModelShape::preset("Qwen3-30B-A3B").unwrap(),
            MoeModelShape::qwen3_30b_a3b()
        );
        assert_eq!(
            MoeModelShape::preset("qwen1.5-moe-a2.7b-nf4").unwrap(),
            MoeModelShape::qwen1_5_moe_a2_7b_nf4()
        );
        let message = MoeModelShape::preset("deepseek-v3")
            .unwrap_err()
            .to_string();
        assert!(message.contains("\"deepseek-v3\""), "{message}");
        for name in MOE_PRESETS {
            assert!(message.contains(name), "{message}");
        }
        let message = DenseModelShape::preset("gpt-5").unwrap_err().to_string();
        assert!(message.contains("glm-4-9b"), "{message}");
        assert!(MlaMoeShape::preset("ESFT-vanilla-16b").is_ok());
        for name in DENSE_PRESETS {
            assert!(DenseModelShape::preset(name).is_ok(), "{name}");
        }
    }

    #[test]
    fn moe_validation_names_the_field() {
        let mut shape = MoeModelShape::qwen1_5_moe_a2_7b();
        shape.top_k = 61;
        let message = shape.validate().unwrap_err().to_string();
        assert!(
            message.contains("top_k") && message.contains("60"),
            "{message}"
        );
    }
}
