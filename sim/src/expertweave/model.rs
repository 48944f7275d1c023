//! The ESFT base model's shape (DeepSeek-V2-Lite: MLA attention, one dense layer, then MoE layers
//! with shared and routed experts) and the device-memory accounting: weight bytes per part, KV
//! bytes per token, and the KV capacity in tokens that what is left of a device budget holds.

use serde::{Deserialize, Serialize};

/// One gibibyte (2^30 bytes); the paper's "GB" figures are GiB (two copies of the 15.7 B
/// parameter bf16 model are 58.5 GiB, its "58.6GB").
pub const GIB: u64 = 1 << 30;

/// One mebibyte (2^20 bytes).
pub const MIB: u64 = 1 << 20;

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

    /// Checks that the sizes describe a model; the message names the first bad field.
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

    /// Bytes of the base model's routed experts in one MoE layer.
    pub fn routed_bytes_per_layer(&self) -> u64 {
        self.n_routed_experts * self.expert_bytes()
    }

    /// KV-cache bytes per token: MLA caches the compressed latent (`kv_lora_rank`) and the
    /// decoupled rotary key (`qk_rope_head_dim`) per layer, (512 + 64) x 27 x 2 = 31,104 bytes,
    /// as vLLM's MLA backends do.
    pub fn kv_bytes_per_token(&self) -> u64 {
        (self.kv_lora_rank + self.qk_rope_head_dim) * self.n_layers * self.bytes_per_param
    }
}

/// The memory a serving instance may use: `n_devices` accelerators of `capacity_bytes`, of which
/// the engine claims `utilization` (vLLM's `gpu_memory_utilization`), minus a per-device
/// `runtime_reserve_bytes` for what is neither weights nor KV cache (activations of the
/// profiling pass, workspaces, communication buffers, the runtime itself).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceMemory {
    /// Bytes of one device.
    pub capacity_bytes: u64,
    /// Fraction of the device the engine may use, in (0, 1].
    pub utilization: f64,
    /// Bytes per device that are neither weights nor KV cache.
    pub runtime_reserve_bytes: u64,
    /// Devices of the instance (weights are sharded across them, tensor + expert parallel).
    pub n_devices: u64,
    /// Tokens per KV block (vLLM allocates whole blocks; 128 on Ascend).
    pub kv_block_tokens: u64,
    /// How many devices hold a copy of each token's KV: MLA's latent cache is not split by
    /// heads, so under tensor parallelism every rank stores all of it (= the TP degree).
    pub kv_replication: u64,
}

/// How a budget's bytes are spent after the weights are placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvCapacity {
    /// Bytes left for the KV cache (0 when the weights do not fit).
    pub kv_bytes: u64,
    /// Whole KV blocks' worth of tokens those bytes hold.
    pub kv_tokens: u64,
    /// The weights (plus reserve) exceed the budget, or not one KV block is left: the engine
    /// would fail at start-up.
    pub out_of_memory: bool,
}

impl DeviceMemory {
    /// One device of `capacity_bytes` at `utilization`, with `runtime_reserve_bytes`, 128-token
    /// blocks and no KV replication.
    pub fn single(capacity_bytes: u64, utilization: f64, runtime_reserve_bytes: u64) -> Self {
        DeviceMemory {
            capacity_bytes,
            utilization,
            runtime_reserve_bytes,
            n_devices: 1,
            kv_block_tokens: 128,
            kv_replication: 1,
        }
    }

    /// Checks the fields; the message names the first bad one.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.utilization.is_finite() && self.utilization > 0.0 && self.utilization <= 1.0) {
            return Err(format!(
                "utilization must be in (0, 1], got {}",
                self.utilization
            ));
        }
        for (field, value) in [
            ("capacity_bytes", self.capacity_bytes),
            ("n_devices", self.n_devices),
            ("kv_block_tokens", self.kv_block_tokens),
            ("kv_replication", self.kv_replication),
        ] {
            if value == 0 {
                return Err(format!("{field} must be at least 1, got 0"));
            }
        }
        if self.kv_replication > self.n_devices {
            return Err(format!(
                "kv_replication ({}) exceeds n_devices ({})",
                self.kv_replication, self.n_devices
            ));
        }
        Ok(())
    }

    /// Bytes the engine may place weights and KV cache in: floor(capacity x utilization) minus
    /// the reserve, per device, summed over devices (0 when the reserve exceeds the share).
    pub fn usable_bytes(&self) -> u64 {
        let per_device = (self.capacity_bytes as f64 * self.utilization).floor() as u64;
        per_device.saturating_sub(self.runtime_reserve_bytes) * self.n_devices
    }

    /// What is left for KV cache once `weight_bytes` are placed.
    pub fn kv_capacity(&self, weight_bytes: u64, kv_bytes_per_token: u64) -> KvCapacity {
        let usable = self.usable_bytes();
        let block_bytes = kv_bytes_per_token * self.kv_block_tokens * self.kv_replication;
        match usable.checked_sub(weight_bytes) {
            Some(kv_bytes) if block_bytes > 0 && kv_bytes >= block_bytes => KvCapacity {
                kv_bytes,
                kv_tokens: kv_bytes / block_bytes * self.kv_block_tokens,
                out_of_memory: false,
            },
            Some(kv_bytes) => KvCapacity {
                kv_bytes,
                kv_tokens: 0,
                out_of_memory: true,
            },
            None => KvCapacity {
                kv_bytes: 0,
                kv_tokens: 0,
                out_of_memory: true,
            },
        }
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
        assert_eq!(shape.expert_bytes(), 33 * MIB / 2);
        assert_eq!(shape.attention_params(), 13_763_072);
        assert_eq!(shape.total_params(), 15_706_484_224);
        // the model card says 15.7B total parameters
        assert!((shape.total_params() as f64 / 1e9 - 15.7).abs() < 0.05);
        assert_eq!(shape.kv_bytes_per_token(), 31_104);
        // two copies: the paper's 58.6 GB (GiB)
        let two = 2.0 * shape.weight_bytes() as f64 / GIB as f64;
        assert!((two - 58.6).abs() < 0.2, "{two}");
    }

    #[test]
    fn kv_capacity_blocks_and_out_of_memory() {
        let device = DeviceMemory::single(1000 * 128 * 10 + 500, 1.0, 0);
        let cap = device.kv_capacity(0, 10);
        assert_eq!(cap.kv_tokens, 128 * 1000);
        assert!(!cap.out_of_memory);
        let cap = device.kv_capacity(1000 * 128 * 10, 10);
        assert!(cap.out_of_memory, "500 bytes hold no 1280-byte block");
        let cap = device.kv_capacity(u64::MAX, 10);
        assert!(cap.out_of_memory);
        assert_eq!(cap.kv_bytes, 0);
        let mut bad = device.clone();
        bad.utilization = 1.5;
        assert!(bad.validate().is_err());
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
