//! The dense LLMs of the Chimera paper (the names a scenario gives, each a preset of the cost
//! model's shape catalogue), the default step overhead, and each engine's cost: its model on its
//! GPU as the serving layer's `DenseServing` (priced by the cost model's one roofline,
//! `cost::roofline::StepRoofline`: every block's weights and the KV cache read once per step,
//! GEMM FLOPs on the step's rows, attention over the cached context and the prompts' causal
//! prefill, the head over the sequences; or from measured operations), and the KV capacity the
//! memory left by the weights holds.

use crate::cost::gpu::{GpuSpec, LinkSpec};
use crate::cost::host::HostOverhead;
use crate::cost::measured_steps::MeasuredSet;
use crate::cost::roofline::{StepPrice, StepTokens, TensorParallel};
use crate::cost::shape::DenseModelShape;
use crate::serving::DenseServing;
use crate::serving::router::PROFILE_CONTEXT_TOKENS;
use serde::Serialize;
use std::sync::Arc;

/// vLLM's token budget per step with chunked prefill (`max_num_batched_tokens`): the V1
/// engine's default for its OpenAI-compatible server on a GPU under 70 GiB (the RTX A6000).
/// The paper's vLLM is a V1 engine: its balancer's weighted sum of waiting and running
/// requests is V1's data-parallel balancer, and it serves Ministral-3-8B-Instruct-2512
/// (December 2025), which only V1 releases run (docs/chimera.md, "The engine's speed").
pub const DEFAULT_MAX_NUM_BATCHED_TOKENS: u64 = 2048;

/// Tokens per KV block when an engine caches prefixes: vLLM's default `block_size` (16 on
/// CUDA), the granularity at which V1 hashes and reuses a prompt's blocks.
pub const PREFIX_BLOCK_TOKENS: u32 = 16;

/// The serving engine of one model on one GPU.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EngineCost {
    /// The scenario's name of the model (one of `serving::agent_workflows::MODELS`).
    pub model: String,
    pub shape: DenseModelShape,
    pub gpu: String,
    /// Its steps (the roofline, or with `cluster.measured` the measured operations) and the
    /// tokens its KV cache holds (GPU memory x utilization - weights).
    #[serde(flatten)]
    pub dense: DenseServing,
    /// vLLM `max_num_seqs`.
    pub max_batch_size: usize,
    /// vLLM `max_num_batched_tokens` with chunked prefill (0: no budget, no chunking).
    pub max_num_batched_tokens: u64,
    /// vLLM V1's automatic prefix caching (`cluster.prefix_caching`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub prefix_caching: bool,
    /// Step time at the full batch, each sequence holding `PROFILE_CONTEXT_TOKENS`, in ms: the
    /// per-token decode cost Chimera's load estimate divides by the batch size.
    pub decode_ms_per_token: f64,
    /// With `cluster.profile`: the step priced from a measured dense-decode profile of the
    /// model at the profile's scaling.
    #[serde(skip)]
    pub profile: Option<Arc<EngineProfile>>,
}

/// An engine's steps as a measured dense-decode profile prices them.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineProfile {
    /// The profile's device, as it names itself.
    pub device: String,
    /// How the profile's model is scaled from the engine's (live mode runs it so).
    pub scaling: crate::mosaic::live_scale::Scaling,
    pub cost: crate::mosaic::profile_cost::ModelDecodeCost,
}

impl EngineCost {
    /// This engine with its steps priced from `cost`, a measured dense-decode profile's
    /// pricing of its model (`device` measured it, at `scaling`).
    pub fn with_profile(
        mut self,
        cost: crate::mosaic::profile_cost::ModelDecodeCost,
        device: &str,
        scaling: crate::mosaic::live_scale::Scaling,
    ) -> EngineCost {
        self.profile = Some(Arc::new(EngineProfile {
            device: device.to_string(),
            scaling,
            cost,
        }));
        self
    }

    /// This engine with automatic prefix caching on or off.
    pub fn with_prefix_caching(mut self, on: bool) -> EngineCost {
        self.prefix_caching = on;
        self
    }

    /// The engine of `model` (shape `shape`) on `gpu`, its steps priced by the roofline or,
    /// with `measured`, from that set's measured operations; `Err` when the weights leave no KV
    /// cache.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        model: &str,
        shape: &DenseModelShape,
        gpu: &GpuSpec,
        max_batch_size: usize,
        gpu_memory_utilization: f64,
        host: HostOverhead,
        max_num_batched_tokens: u64,
        measured: Option<&MeasuredSet>,
    ) -> Result<EngineCost, String> {
        let parallel = TensorParallel {
            degree: 1,
            link: LinkSpec::PCIE4_X16,
        };
        let dense = DenseServing::new(shape, gpu, gpu_memory_utilization, parallel, host, measured)
            .ok_or_else(|| {
                format!(
                    "{model} needs {:.1} GB of weights; {} leaves {:.1} GB at this memory \
                 utilization",
                    shape.weight_bytes() * 1e-9,
                    gpu.name,
                    gpu.memory_gb * gpu_memory_utilization
                )
            })?;
        let mut cost = EngineCost {
            model: model.to_string(),
            shape: shape.clone(),
            gpu: gpu.name.clone(),
            dense,
            max_batch_size,
            max_num_batched_tokens,
            decode_ms_per_token: 0.0,
            profile: None,
            prefix_caching: false,
        };
        let batch = (max_batch_size as f64)
            .min(cost.dense.kv_capacity_tokens as f64 / PROFILE_CONTEXT_TOKENS)
            .max(1.0) as u64;
        cost.decode_ms_per_token = cost
            .step(&StepTokens {
                rows: batch,
                sequences: batch,
                context_tokens: batch * PROFILE_CONTEXT_TOKENS as u64,
                prefill_square: 0.0,
            })
            .nanos
            * 1e-6;
        Ok(cost)
    }

    /// One step's price.
    pub fn step(&self, work: &StepTokens) -> StepPrice {
        self.dense.price(work).0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serving::agent_workflows::{MODELS, model_shape};

    fn engine(model: &str, gpu: &GpuSpec) -> Result<EngineCost, String> {
        EngineCost::new(
            model,
            &model_shape(model).unwrap(),
            gpu,
            256,
            0.9,
            HostOverhead::vllm_v0(),
            DEFAULT_MAX_NUM_BATCHED_TOKENS,
            None,
        )
    }

    fn decode(batch: u64, context: u64) -> StepTokens {
        StepTokens {
            rows: batch,
            sequences: batch,
            context_tokens: context,
            prefill_square: 0.0,
        }
    }

    #[test]
    fn every_model_is_a_catalogue_preset() {
        for (name, _) in MODELS {
            let shape = model_shape(name).unwrap();
            assert!(shape.params() > 1_000_000_000, "{name}");
        }
        assert!(model_shape("gpt-5").is_none());
        // Qwen2.5-7B: 2 x 28 layers x 4 KV heads x 128 x 2 bytes = 57,344 bytes per token.
        assert_eq!(
            model_shape("qwen2.5-7b").unwrap().kv_bytes_per_token(),
            57_344.0
        );
    }

    #[test]
    fn decode_is_memory_bound_small_and_compute_bound_large() {
        let gpu = GpuSpec::by_name("RTX-A6000").unwrap();
        let e = engine("qwen2.5-7b", &gpu).unwrap();
        // Batch 1 and batch 8 cost the same (weights streamed once), per token 8x cheaper.
        let one = e.step(&decode(1, 512)).nanos;
        let eight = e.step(&decode(8, 512)).nanos;
        assert!((eight - one).abs() / one < 0.01, "{one} {eight}");
        // A 4096-token prefill is compute-bound and slower than a decode step.
        let prefill = StepTokens {
            rows: 4096,
            sequences: 1,
            context_tokens: 4096,
            prefill_square: 4096.0 * 4096.0,
        };
        assert!(e.step(&prefill).nanos > 3.0 * one);
        // Bigger model, slower step.
        let big = engine("qwen2.5-14b", &gpu).unwrap();
        assert!(big.decode_ms_per_token > e.decode_ms_per_token);
        assert!(big.dense.kv_capacity_tokens < e.dense.kv_capacity_tokens);
    }

    #[test]
    fn a_model_too_large_for_the_gpu_is_an_error() {
        let gpu = GpuSpec::by_name("L4").unwrap();
        let err = engine("qwen2.5-14b", &gpu).unwrap_err();
        assert!(err.contains("qwen2.5-14b"), "{err}");
    }
}
