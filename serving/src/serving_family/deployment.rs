//! One replica's hardware as the cost model sees it: its GPUs, the tensor-parallel degree of the
//! dense part (repeated data-parallel over the replica's GPUs), the expert-parallel degree of
//! the routed experts (repeated likewise), the weights each GPU holds and the KV cache the rest
//! of its memory holds (`cost::gpu::GpuSpec::kv_capacity_tokens`), and the expert slots each
//! GPU holds (the experts over EP, plus EPLB's redundant slots over EP). With `[adapters]` the
//! adapter-memory manager's plan of the replica decides the weights (base model and adapter
//! experts) and the KV cache instead. A replica whose weights do not fit is out of memory: the
//! run fails with that reason.

use super::config::{SchedulerTable, ServedModel, ServingScenario};
use crate::policies::memory::InstancePlan;
use crate::serving::expert_trace::ExpertTrace;
use std::sync::Arc;

/// Bytes per KV-cache element (a bf16 cache).
const KV_BYTES_PER_ELEMENT: f64 = 2.0;

/// A replica's GPUs, memory and KV cache.
#[derive(Clone, Debug, PartialEq)]
pub struct Deployment {
    pub gpus: usize,
    pub tensor_parallel: usize,
    /// Copies of the tensor-parallel dense part (`gpus / tensor_parallel`).
    pub data_parallel: usize,
    pub expert_parallel: usize,
    /// Bytes of weights on each GPU.
    pub weights_per_gpu_bytes: f64,
    /// KV bytes one token of a sequence takes on each GPU of its tensor-parallel group.
    pub kv_bytes_per_token_per_gpu: f64,
    /// Tokens the replica's KV cache holds (all its data-parallel groups).
    pub kv_tokens: u64,
    /// KV blocks of `scenario.replica.block_size` tokens.
    pub kv_blocks: u64,
    /// MoE only: expert slots on each GPU (`experts.mapping`'s redundant copies included).
    pub expert_slots_per_gpu: Option<usize>,
    /// MoE with `experts.trace` only: the run's utilization trace and its observed steps
    /// (`serving::expert_trace::TraceSpec::build` for the run's seed; set by `serving_family::serve`).
    pub expert_trace: Option<(Arc<ExpertTrace>, usize)>,
}

impl Deployment {
    /// The decode batch a replica's profile is priced at: `max_num_seqs` sequences, or as many
    /// of `PROFILE_CONTEXT_TOKENS` cached tokens each as its KV cache holds, whichever is
    /// smaller (at least one). The server's activity monitor and `details.decode_curves`' cap.
    pub fn profile_batch(&self, max_num_seqs: usize) -> u64 {
        (max_num_seqs as u64)
            .min(self.kv_tokens / crate::serving::router::PROFILE_CONTEXT_TOKENS as u64)
            .max(1)
    }

    /// The replica of `scenario`, or why its weights do not fit; with adapters, `plan` is the
    /// memory manager's plan of the replica (its weights and KV capacity).
    pub fn new(
        scenario: &ServingScenario,
        plan: Option<&InstancePlan>,
    ) -> Result<Deployment, String> {
        let r = &scenario.replica;
        let (tp, ep) = (r.tensor_parallel, r.expert_parallel);
        let (weights_per_gpu_bytes, kv_per_token, kv_heads, slots) = match &scenario.model {
            ServedModel::Dense(shape) => (
                shape.weight_bytes() / tp as f64,
                shape.kv_bytes_per_token(),
                shape.n_kv_heads as f64,
                None,
            ),
            ServedModel::Moe(shape) => {
                let experts =
                    (shape.n_layers * shape.n_experts) as f64 * shape.expert_weight_bytes();
                let rest = shape.total_weight_bytes() - experts;
                let slots = (shape.n_experts + scenario.redundant_expert_slots()) / ep;
                let hosted = (shape.n_layers * slots) as f64 * shape.expert_weight_bytes();
                (
                    rest / tp as f64 + hosted,
                    shape.n_layers as f64
                        * shape.kv_cache_bytes_per_token_per_layer(KV_BYTES_PER_ELEMENT),
                    shape.n_kv_heads as f64,
                    Some(slots),
                )
            }
            // MLA's latent cache is not split by heads: every tensor-parallel rank holds it
            // whole (one "KV head").
            ServedModel::Mla(shape) => {
                let n_experts = shape.n_routed_experts as usize;
                let slots = (n_experts + scenario.redundant_expert_slots()) / ep;
                let routed = (shape.routed_params() * shape.bytes_per_param) as f64;
                (
                    shape.non_routed_bytes() as f64 / tp as f64
                        + routed * slots as f64 / n_experts as f64,
                    shape.kv_bytes_per_token() as f64,
                    1.0,
                    Some(slots),
                )
            }
        };
        let data_parallel = r.gpus / tp;
        if let Some(plan) = plan {
            if plan.kv.out_of_memory {
                return Err(format!(
                    "out of memory: {} with its adapters takes {:.1} GB of weights on {} {}s \
                     (adapters.memory, adapters.runtime_reserve_gib, replica.gpus), and the \
                     KV cache gets {} tokens",
                    scenario.model.name(),
                    plan.weight_bytes as f64 * 1e-9,
                    r.gpus,
                    r.gpu.name,
                    plan.kv.kv_tokens
                ));
            }
            return Ok(Deployment {
                gpus: r.gpus,
                tensor_parallel: tp,
                data_parallel,
                expert_parallel: ep,
                weights_per_gpu_bytes: plan.weight_bytes as f64 / r.gpus as f64,
                kv_bytes_per_token_per_gpu: kv_per_token / (tp as f64).min(kv_heads),
                kv_tokens: plan.kv.kv_tokens,
                kv_blocks: plan.kv.kv_tokens / u64::from(r.block_size),
                expert_slots_per_gpu: slots,
                expert_trace: None,
            });
        }
        let kv_bytes_per_token_per_gpu = kv_per_token / (tp as f64).min(kv_heads);
        let group_tokens = r
            .gpu
            .kv_capacity_tokens(
                r.gpu_memory_utilization,
                weights_per_gpu_bytes,
                kv_bytes_per_token_per_gpu,
            )
            .ok_or_else(|| {
                format!(
                    "out of memory: {} takes {:.1} GB of weights per GPU ({tp}-way tensor \
                     parallel{}), and a {} leaves {:.1} GB at gpu_memory_utilization {} \
                     (replica.gpus, replica.tensor_parallel, replica.expert_parallel)",
                    scenario.model.name(),
                    weights_per_gpu_bytes * 1e-9,
                    if slots.is_some() {
                        format!(", {ep}-way expert parallel")
                    } else {
                        String::new()
                    },
                    r.gpu.name,
                    r.gpu.memory_gb * r.gpu_memory_utilization,
                    r.gpu_memory_utilization
                )
            })?;
        let mut kv_tokens = group_tokens * data_parallel as u64;
        if let SchedulerTable::Orca { .. } = r.scheduler {
            // The pool is allocated in whole blocks of `kv_pool_block` tokens.
            kv_tokens -= kv_tokens % u64::from(r.kv_pool_block);
        }
        if kv_tokens < u64::from(r.block_size.max(r.kv_pool_block)) {
            return Err(format!(
                "out of memory: {}'s weights leave room for {kv_tokens} KV tokens on a {}, not \
                 one block of {} (replica.block_size, replica.gpu_memory_utilization)",
                scenario.model.name(),
                r.gpu.name,
                r.block_size.max(r.kv_pool_block)
            ));
        }
        Ok(Deployment {
            gpus: r.gpus,
            tensor_parallel: tp,
            data_parallel,
            expert_parallel: ep,
            weights_per_gpu_bytes,
            kv_bytes_per_token_per_gpu,
            kv_tokens,
            kv_blocks: kv_tokens / u64::from(r.block_size),
            expert_slots_per_gpu: slots,
            expert_trace: None,
        })
    }
}
