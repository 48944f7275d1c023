//! One model served by a vLLM session (a dense model on one GPU, or tensor-parallel across
//! several): its steps and KV cache as the serving layer's `DenseServing` (its step roofline,
//! `cost::roofline::StepRoofline`, or with a measured set its step from measured operations,
//! `cost::measured_steps::MeasuredDenseStep`), and the
//! `serving::Replica` configuration its sessions run with: vLLM 0.7.1's V0 scheduler as
//! MOSAIC ran it, a paged cache of 16-token blocks with a 1 % watermark, admission of a
//! prompt's blocks, and preemption of the newest sequence by recompute when the cache runs full
//! (docs/serving.md, docs/mosaic.md).
//!
//! Small batches are memory-bound (the weights are streamed once per step whatever the batch
//! is: throughput grows with it); long-context reasoning sequences make the KV reads dominate
//! and saturate early.

use crate::cost::gpu::{GpuSpec, LinkSpec};
use crate::cost::measured_steps::MeasuredSet;
use crate::cost::roofline::{StepTokens, TensorParallel};
use crate::cost::shape::DenseModelShape;
use crate::serving::{Admission, Batching, DenseServing, KvConfig, Preemption, ReplicaConfig};
use serde::Serialize;

/// The serving engine's knobs; every default is documented in docs/mosaic.md.
#[derive(Clone, Debug, PartialEq)]
pub struct ServingParams {
    pub gpu: GpuSpec,
    /// Host-side time per engine step (scheduling, sampling, detokenization), seconds.
    pub step_overhead_s: f64,
    /// vLLM `gpu_memory_utilization`: share of GPU memory for weights + KV cache.
    pub gpu_memory_utilization: f64,
    /// vLLM `max_num_seqs`: sequences in flight at most.
    pub max_num_seqs: u32,
    /// vLLM `block_size`: tokens per KV-cache block.
    pub block_size: u32,
    /// vLLM `watermark`: the share of the blocks an admission must leave free.
    pub watermark: f64,
    /// The link between tensor-parallel ranks (all-reduce latency and per-direction bandwidth).
    pub interconnect: LinkSpec,
}

/// Why a model cannot be served as configured.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ServingError {
    #[error("the weights ({weights_gb:.1} GB per GPU) leave no KV cache within {usable_gb:.1} GB")]
    NoKvCache { weights_gb: f64, usable_gb: f64 },
}

/// One model served on `tensor_parallel` GPUs: its steps and KV cache (`serving::DenseServing`:
/// the roofline, or with `[serving] measured` that set's measured operations) and the replica
/// configuration of its sessions.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ModelServing {
    #[serde(flatten)]
    pub dense: DenseServing,
    pub max_num_seqs: u32,
    pub block_size: u32,
    pub watermark: f64,
}

impl ModelServing {
    /// `shape` served on `tensor_parallel` GPUs, its steps priced by the roofline or, with
    /// `measured`, from that set's operations (at the same degree, link and step overhead).
    pub fn new(
        shape: &DenseModelShape,
        params: &ServingParams,
        tensor_parallel: u32,
        measured: Option<&MeasuredSet>,
    ) -> Result<ModelServing, ServingError> {
        let parallel = TensorParallel {
            degree: tensor_parallel.max(1),
            link: params.interconnect,
        };
        let dense = DenseServing::new(
            shape,
            &params.gpu,
            params.gpu_memory_utilization,
            parallel,
            crate::cost::host::HostOverhead::flat(params.step_overhead_s * 1e9),
            measured,
        )
        .ok_or(ServingError::NoKvCache {
            weights_gb: shape.weight_bytes() / f64::from(parallel.degree) / 1e9,
            usable_gb: params.gpu.memory_gb * params.gpu_memory_utilization,
        })?;
        Ok(ModelServing {
            dense,
            max_num_seqs: params.max_num_seqs.max(1),
            block_size: params.block_size.max(1),
            watermark: params.watermark,
        })
    }

    /// Blocks of the KV cache (vLLM `num_gpu_blocks`: the tokens it holds in whole blocks).
    pub fn kv_blocks(&self) -> u64 {
        self.dense.kv_capacity_tokens / u64::from(self.block_size)
    }

    /// Whether one sequence of `tokens` tokens fits in the whole cache.
    pub fn holds(&self, tokens: u64) -> bool {
        tokens.div_ceil(u64::from(self.block_size)) <= self.kv_blocks()
    }

    /// The replica every session of this model runs on: vLLM 0.7.1's V0 scheduler as MOSAIC
    /// runs it (`max_num_seqs`, no token budget, whole prompts, a paged cache of `block_size`
    /// blocks whose admissions leave vLLM's watermark, `int(watermark x blocks)`, free, and
    /// preemption of the newest sequence by recompute).
    pub fn replica_config(&self) -> ReplicaConfig {
        let blocks = self.kv_blocks();
        ReplicaConfig {
            max_num_seqs: self.max_num_seqs as usize,
            max_num_batched_tokens: None,
            chunked_prefill: false,
            kv: KvConfig {
                block_size: self.block_size,
                blocks,
                watermark_blocks: (self.watermark * blocks as f64) as u64,
            },
            admission: Admission::Paged {
                preemption: Preemption::Recompute,
            },
            batching: Batching::Continuous,
        }
    }

    /// Steady-state decode throughput (tokens/s) of `batch` sequences of `context` tokens each,
    /// priced as the model's steps are (measured operations or the roofline).
    pub fn decode_tokens_per_s(&self, batch: u64, context: u64) -> f64 {
        let work = StepTokens {
            rows: batch,
            sequences: batch,
            context_tokens: batch * context,
            prefill_square: 0.0,
        };
        batch as f64 / (self.dense.price(&work).0.nanos * 1e-9)
    }
}

/// One generation request: its prompt length and the number of tokens it will generate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct GenerationRequest {
    pub prompt_tokens: u32,
    pub output_tokens: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn params() -> ServingParams {
        ServingParams {
            gpu: GpuSpec::by_name("A100-80GB").unwrap(),
            step_overhead_s: 0.0,
            gpu_memory_utilization: 0.9,
            max_num_seqs: 256,
            block_size: 16,
            watermark: 0.01,
            interconnect: LinkSpec {
                bandwidth_bytes_per_s: 300e9,
                latency_ns: 10_000.0,
            },
        }
    }

    fn serving(name: &str) -> ModelServing {
        ModelServing::new(&DenseModelShape::preset(name).unwrap(), &params(), 1, None).unwrap()
    }

    #[test]
    fn throughput_grows_with_prompts_in_flight_then_saturates() {
        let serving = serving("deepseek-r1-distill-llama-8b");
        let tps = |b| serving.decode_tokens_per_s(b, 2000);
        assert!(tps(8) > 5.0 * tps(1));
        // Long contexts make the KV reads dominate: going from 128 to 256 gains little.
        assert!(tps(256) < 1.5 * tps(128), "{} {}", tps(128), tps(256));
        let short = self::serving("gemma-2-9b-it");
        assert!(short.decode_tokens_per_s(256, 300) > 1.5 * short.decode_tokens_per_s(64, 300));
    }

    /// The KV cache of Llama-3.1-8B on an A100-80GB at 0.9 utilization: 72 GB less the
    /// weights, 2 bytes x 8,029,995,008 parameters (32 blocks of 218,103,808, embedding and
    /// head 128,256 x 4,096 each; norms left out), over 131,072 bytes per token (2 x 2 bytes x
    /// 8 KV heads x 128 x 32 layers) = 426,788 tokens = 26,674 blocks of 16; the watermark is
    /// int(0.01 x 26,674) = 266 blocks.
    #[test]
    fn the_replica_is_vllms_paged_cache_with_recompute() {
        let serving = serving("llama-3.1-8b-instruct");
        assert_eq!(serving.dense.kv_capacity_tokens, 426_788);
        let config = serving.replica_config();
        assert_eq!(
            config.kv,
            KvConfig {
                block_size: 16,
                blocks: 26_674,
                watermark_blocks: 266,
            }
        );
        assert_eq!(
            config.admission,
            Admission::Paged {
                preemption: Preemption::Recompute
            }
        );
        assert_eq!(config.validate(), Ok(()));
        assert!(serving.holds(26_674 * 16) && !serving.holds(26_674 * 16 + 1));
    }

    #[test]
    fn weights_larger_than_memory_are_an_error() {
        let mut p = params();
        p.gpu.memory_gb = 10.0;
        let shape = DenseModelShape::preset("glm-4-9b").unwrap();
        assert!(matches!(
            ModelServing::new(&shape, &p, 1, None),
            Err(ServingError::NoKvCache { .. })
        ));
        assert!(ModelServing::new(&shape, &p, 4, None).is_ok());
    }
}
