//! The dense LLMs of the Chimera paper (shapes from their public configuration files), the RTX A6000
//! it runs them on, and each engine's cost model: one continuous-batching step over `b` running
//! sequences holding `ctx` cached tokens, `p` of the step's tokens being new prompt tokens, costs
//!
//! ```text
//! step = overhead + max((W + ctx x kv) / (BW x eta_mem), 2 x N x (b + p) / (FLOPS x eta_flop))
//! ```
//!
//! with `W` the weight bytes, `kv` the KV-cache bytes per token and `N` the matmul parameters: a
//! memory-bound floor (streaming the weights and the cache once per step) that makes decode cheap
//! per token at large batches, and a compute-bound part that makes long prefills expensive.

use crate::cost::gpu::{DEFAULT_COMPUTE_EFFICIENCY, DEFAULT_MEMORY_EFFICIENCY, GpuSpec};
use serde::Serialize;

/// Bytes per weight and per KV element (bf16 serving, as vLLM runs these models by default).
pub const BYTES_PER_ELEMENT: f64 = 2.0;

/// A dense decoder-only transformer's serving-relevant shape.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DenseModel {
    /// Short name used in scenarios ("qwen2.5-7b").
    pub name: &'static str,
    /// Total parameters (embeddings included), from the model card.
    pub params: f64,
    pub layers: u32,
    pub hidden: u32,
    pub kv_heads: u32,
    pub head_dim: u32,
    pub vocab: u32,
    /// Input embedding shared with the output head (counted once in `params`).
    pub tied_embeddings: bool,
}

/// Names accepted by [`DenseModel::by_name`].
pub const MODEL_NAMES: &[&str] = &[
    "qwen2.5-1.5b",
    "qwen2.5-3b",
    "qwen2.5-7b",
    "qwen2.5-14b",
    "llama3.2-3b",
    "ministral-8b",
];

impl DenseModel {
    /// The preset called `name`. Shapes are the `config.json` of each Hugging Face repository:
    /// - Qwen/Qwen2.5-1.5B-Instruct: 1.54 B, 28 layers, hidden 1536, 2 KV heads x 128, vocab
    ///   151936, tied embeddings.
    /// - Qwen/Qwen2.5-3B-Instruct: 3.09 B, 36 layers, hidden 2048, 2 KV heads x 128, tied.
    /// - Qwen/Qwen2.5-7B-Instruct: 7.61 B, 28 layers, hidden 3584, 4 KV heads x 128, vocab 152064.
    /// - Qwen/Qwen2.5-14B-Instruct: 14.7 B, 48 layers, hidden 5120, 8 KV heads x 128, vocab 152064.
    /// - meta-llama/Llama-3.2-3B-Instruct: 3.21 B, 28 layers, hidden 3072, 8 KV heads x 128,
    ///   vocab 128256, tied.
    /// - Ministral 8B: the paper serves Ministral-3-8B-Instruct-2512; we use the shape of
    ///   mistralai/Ministral-8B-Instruct-2410 (8.02 B, 36 layers, hidden 4096, 8 KV heads x 128,
    ///   vocab 131072), the text model of the same size class.
    pub fn by_name(name: &str) -> Option<DenseModel> {
        let m = |name, params: f64, layers, hidden, kv_heads, vocab, tied| DenseModel {
            name,
            params: params * 1e9,
            layers,
            hidden,
            kv_heads,
            head_dim: 128,
            vocab,
            tied_embeddings: tied,
        };
        Some(match name {
            "qwen2.5-1.5b" => m("qwen2.5-1.5b", 1.54, 28, 1536, 2, 151_936, true),
            "qwen2.5-3b" => m("qwen2.5-3b", 3.09, 36, 2048, 2, 151_936, true),
            "qwen2.5-7b" => m("qwen2.5-7b", 7.61, 28, 3584, 4, 152_064, false),
            "qwen2.5-14b" => m("qwen2.5-14b", 14.7, 48, 5120, 8, 152_064, false),
            "llama3.2-3b" => m("llama3.2-3b", 3.21, 28, 3072, 8, 128_256, true),
            "ministral-8b" => m("ministral-8b", 8.02, 36, 4096, 8, 131_072, false),
            _ => return None,
        })
    }

    /// Bytes of weights streamed per step.
    pub fn weight_bytes(&self) -> f64 {
        self.params * BYTES_PER_ELEMENT
    }

    /// KV-cache bytes per cached token: K and V, every layer, every KV head.
    pub fn kv_bytes_per_token(&self) -> f64 {
        2.0 * f64::from(self.layers)
            * f64::from(self.kv_heads)
            * f64::from(self.head_dim)
            * BYTES_PER_ELEMENT
    }

    /// Matmul FLOPs per token: 2 per multiplied parameter. An untied input embedding is a lookup,
    /// not a matmul.
    pub fn flops_per_token(&self) -> f64 {
        let lookup = if self.tied_embeddings {
            0.0
        } else {
            f64::from(self.vocab) * f64::from(self.hidden)
        };
        2.0 * (self.params - lookup)
    }
}

/// NVIDIA RTX A6000, the paper's GPU (not in the shared catalogue). NVIDIA RTX A6000 datasheet:
/// 48 GB GDDR6 at 768 GB/s, 10,752 CUDA cores (84 SMs), tensor BF16 309.7 TFLOPS with sparsity
/// -> 154.8 dense.
pub fn rtx_a6000() -> GpuSpec {
    GpuSpec {
        name: "RTX-A6000".into(),
        dense_bf16_tflops: 154.8,
        memory_bandwidth_gbps: 768.0,
        sm_count: 84,
        memory_gb: 48.0,
        kernel_launch_overhead_ns: crate::cost::gpu::DEFAULT_KERNEL_LAUNCH_OVERHEAD_NS,
    }
}

/// `RTX-A6000` or any name of the shared catalogue.
pub fn gpu_by_name(name: &str) -> Result<GpuSpec, String> {
    if name.eq_ignore_ascii_case("RTX-A6000") || name.eq_ignore_ascii_case("A6000") {
        return Ok(rtx_a6000());
    }
    GpuSpec::by_name(name).map_err(|e| format!("{e}, RTX-A6000"))
}

/// Host-side time of one engine step (scheduling, sampling, detokenization), ms. Assumption, not
/// calibrated: vLLM's CPU overhead per step is commonly profiled at 1-3 ms for small models.
pub const DEFAULT_STEP_OVERHEAD_MS: f64 = 2.0;

/// Context per sequence at which `decode_ms_per_token` is profiled (the paper profiles it offline;
/// 1024 tokens is the order of an agent stage's prompt plus output here).
pub const PROFILE_CONTEXT_TOKENS: f64 = 1024.0;

/// The serving engine of one model on one GPU.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EngineCost {
    pub model: DenseModel,
    pub gpu: String,
    /// Weight bytes and achievable bytes/s, FLOPs per token and achievable FLOP/s.
    pub weight_bytes: f64,
    pub kv_bytes_per_token: f64,
    pub flops_per_token: f64,
    pub bandwidth: f64,
    pub compute: f64,
    pub overhead_ns: f64,
    /// Tokens the KV cache holds (GPU memory x utilization - weights).
    pub kv_capacity_tokens: u64,
    /// vLLM `max_num_seqs`.
    pub max_batch_size: usize,
    /// Step time at the full batch, each sequence holding `PROFILE_CONTEXT_TOKENS`, in ms: the
    /// per-token decode cost Chimera's load estimate divides by the batch size.
    pub decode_ms_per_token: f64,
}

impl EngineCost {
    /// The engine of `model` on `gpu`; `Err` when the weights leave no KV cache.
    pub fn new(
        model: DenseModel,
        gpu: &GpuSpec,
        max_batch_size: usize,
        gpu_memory_utilization: f64,
        step_overhead_ms: f64,
    ) -> Result<EngineCost, String> {
        let usable = gpu.memory_gb * 1e9 * gpu_memory_utilization;
        let weight_bytes = model.weight_bytes();
        if weight_bytes >= usable {
            return Err(format!(
                "{} needs {:.1} GB of weights; {} leaves {:.1} GB at this memory utilization",
                model.name,
                weight_bytes * 1e-9,
                gpu.name,
                usable * 1e-9
            ));
        }
        let kv_bytes_per_token = model.kv_bytes_per_token();
        let mut cost = EngineCost {
            flops_per_token: model.flops_per_token(),
            kv_capacity_tokens: ((usable - weight_bytes) / kv_bytes_per_token) as u64,
            model,
            gpu: gpu.name.clone(),
            weight_bytes,
            kv_bytes_per_token,
            bandwidth: gpu.peak_bandwidth() * DEFAULT_MEMORY_EFFICIENCY,
            compute: gpu.peak_flops() * DEFAULT_COMPUTE_EFFICIENCY,
            overhead_ns: step_overhead_ms * 1e6,
            max_batch_size,
            decode_ms_per_token: 0.0,
        };
        let batch = (max_batch_size as f64)
            .min(cost.kv_capacity_tokens as f64 / PROFILE_CONTEXT_TOKENS)
            .max(1.0);
        cost.decode_ms_per_token =
            cost.step_ns(batch as u64, 0, (batch * PROFILE_CONTEXT_TOKENS) as u64) * 1e-6;
        Ok(cost)
    }

    /// One step over `batch` running sequences holding `context_tokens` cached tokens, with
    /// `prefill_tokens` new prompt tokens processed in the same step, in nanoseconds.
    pub fn step_ns(&self, batch: u64, prefill_tokens: u64, context_tokens: u64) -> f64 {
        let memory =
            (self.weight_bytes + context_tokens as f64 * self.kv_bytes_per_token) / self.bandwidth;
        let compute = self.flops_per_token * (batch + prefill_tokens) as f64 / self.compute;
        self.overhead_ns + memory.max(compute) * 1e9
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_have_the_published_kv_sizes() {
        // Qwen2.5-7B: 2 x 28 layers x 4 KV heads x 128 x 2 bytes = 57,344 bytes per token.
        let q7 = DenseModel::by_name("qwen2.5-7b").unwrap();
        assert_eq!(q7.kv_bytes_per_token(), 57_344.0);
        for name in MODEL_NAMES {
            let m = DenseModel::by_name(name).unwrap();
            assert_eq!(m.name, *name);
            assert!(m.flops_per_token() > 0.0 && m.flops_per_token() <= 2.0 * m.params);
        }
        assert!(DenseModel::by_name("gpt-5").is_none());
    }

    #[test]
    fn decode_is_memory_bound_small_and_compute_bound_large() {
        let gpu = rtx_a6000();
        let e = EngineCost::new(
            DenseModel::by_name("qwen2.5-7b").unwrap(),
            &gpu,
            256,
            0.9,
            DEFAULT_STEP_OVERHEAD_MS,
        )
        .unwrap();
        // Batch 1 and batch 8 cost the same (weights streamed once), per token 8x cheaper.
        let one = e.step_ns(1, 0, 512);
        let eight = e.step_ns(8, 0, 512);
        assert!((eight - one).abs() / one < 0.01, "{one} {eight}");
        // A 4096-token prefill is compute-bound and slower than a decode step.
        assert!(e.step_ns(1, 4096, 512) > 3.0 * one);
        // Bigger model, slower step.
        let big = EngineCost::new(
            DenseModel::by_name("qwen2.5-14b").unwrap(),
            &gpu,
            256,
            0.9,
            DEFAULT_STEP_OVERHEAD_MS,
        )
        .unwrap();
        assert!(big.decode_ms_per_token > e.decode_ms_per_token);
        assert!(big.kv_capacity_tokens < e.kv_capacity_tokens);
    }

    #[test]
    fn a_model_too_large_for_the_gpu_is_an_error() {
        let gpu = GpuSpec::by_name("L4").unwrap();
        let err = EngineCost::new(
            DenseModel::by_name("qwen2.5-14b").unwrap(),
            &gpu,
            256,
            0.9,
            2.0,
        )
        .unwrap_err();
        assert!(err.contains("qwen2.5-14b"), "{err}");
    }
}
