//! One replica's hardware as the cost model sees it: its GPUs, the tensor-parallel degree of the
//! dense part (repeated data-parallel over the replica's GPUs), the expert-parallel degree of
//! the routed experts (repeated likewise), the weights each GPU holds and the KV cache the rest
//! of its memory holds (`cost::gpu::GpuSpec::kv_capacity_tokens`), and the linear expert
//! placement. With `[adapters]` the adapter-memory manager's plan of the replica decides the
//! weights (base model and adapter experts) and the KV cache instead. A replica whose weights do
//! not fit is out of memory: the run fails with that reason.

use super::config::{SchedulerTable, ServedModel, ServingScenario};
use crate::expertweave::memory::InstancePlan;

/// Bytes per KV-cache element (a bf16 cache).
const KV_BYTES_PER_ELEMENT: f64 = 2.0;

/// The linear placement of an MoE model's experts over a replica: GPU `g` of the replica is GPU
/// `g % ep` of expert-parallel group `g / ep` and hosts experts `(g % ep) x m .. + m`
/// (`m = experts / ep`); each of the `copies = gpus / ep` groups holds every expert, and an
/// expert's tokens split over its copies as evenly as whole tokens allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinearPlacement {
    pub n_experts: usize,
    pub expert_parallel: usize,
    pub copies: usize,
    /// Experts each GPU hosts.
    pub experts_per_gpu: usize,
}

impl LinearPlacement {
    pub fn new(n_experts: usize, expert_parallel: usize, gpus: usize) -> LinearPlacement {
        LinearPlacement {
            n_experts,
            expert_parallel,
            copies: gpus / expert_parallel,
            experts_per_gpu: n_experts / expert_parallel,
        }
    }

    pub fn gpus(&self) -> usize {
        self.expert_parallel * self.copies
    }

    /// Tokens copy `copy` of an expert computes when the expert receives `count`: the floor or
    /// the ceiling of `count / copies`, the first copies taking the remainder.
    pub fn share(&self, count: u32, copy: usize) -> u32 {
        if self.copies == 1 {
            return count;
        }
        let copies = self.copies as u32;
        (count + copies - 1 - copy as u32) / copies
    }

    /// GPU `gpu`'s tokens per hosted expert, from one layer's tokens per expert, into `out`
    /// (`experts_per_gpu` long).
    pub fn gpu_tokens(&self, per_expert: &[u32], gpu: usize, out: &mut [u32]) {
        let (copy, slot) = (gpu / self.expert_parallel, gpu % self.expert_parallel);
        let first = slot * self.experts_per_gpu;
        for (o, &count) in out
            .iter_mut()
            .zip(&per_expert[first..first + self.experts_per_gpu])
        {
            *o = self.share(count, copy);
        }
    }
}

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
    pub placement: Option<LinearPlacement>,
}

impl Deployment {
    /// The replica of `scenario`, or why its weights do not fit; with adapters, `plan` is the
    /// memory manager's plan of the replica (its weights and KV capacity).
    pub fn new(
        scenario: &ServingScenario,
        plan: Option<&InstancePlan>,
    ) -> Result<Deployment, String> {
        let r = &scenario.replica;
        let (tp, ep) = (r.tensor_parallel, r.expert_parallel);
        let (weights_per_gpu_bytes, kv_per_token, kv_heads, placement) = match &scenario.model {
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
                (
                    rest / tp as f64 + experts / ep as f64,
                    shape.n_layers as f64
                        * shape.kv_cache_bytes_per_token_per_layer(KV_BYTES_PER_ELEMENT),
                    shape.n_kv_heads as f64,
                    Some(LinearPlacement::new(shape.n_experts, ep, r.gpus)),
                )
            }
            // MLA's latent cache is not split by heads: every tensor-parallel rank holds it
            // whole (one "KV head").
            ServedModel::Mla(shape) => (
                shape.non_routed_bytes() as f64 / tp as f64
                    + (shape.routed_params() * shape.bytes_per_param) as f64 / ep as f64,
                shape.kv_bytes_per_token() as f64,
                1.0,
                Some(LinearPlacement::new(
                    shape.n_routed_experts as usize,
                    ep,
                    r.gpus,
                )),
            ),
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
                placement,
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
                    if placement.is_some() {
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
        Ok(Deployment {
            gpus: r.gpus,
            tensor_parallel: tp,
            data_parallel,
            expert_parallel: ep,
            weights_per_gpu_bytes,
            kv_bytes_per_token_per_gpu,
            kv_tokens,
            kv_blocks: kv_tokens / u64::from(r.block_size),
            placement,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_placement_splits_each_expert_over_its_copies() {
        // 8 experts, EP 2 over 4 GPUs: GPUs 0 and 2 host experts 0-3, GPUs 1 and 3 experts 4-7;
        // copy 0 (GPUs 0, 1) takes the ceiling of an odd count.
        let p = LinearPlacement::new(8, 2, 4);
        assert_eq!((p.copies, p.experts_per_gpu, p.gpus()), (2, 4, 4));
        let per_expert = [5, 0, 2, 1, 3, 3, 0, 7];
        let mut out = [0u32; 4];
        let gpus: Vec<Vec<u32>> = (0..4)
            .map(|g| {
                p.gpu_tokens(&per_expert, g, &mut out);
                out.to_vec()
            })
            .collect();
        assert_eq!(gpus[0], vec![3, 0, 1, 1]);
        assert_eq!(gpus[2], vec![2, 0, 1, 0]);
        assert_eq!(gpus[1], vec![2, 2, 0, 4]);
        assert_eq!(gpus[3], vec![1, 1, 0, 3]);
        let total: u32 = gpus.iter().flatten().sum();
        assert_eq!(total, per_expert.iter().sum::<u32>());
    }
}
