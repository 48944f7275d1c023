//! Swap preemption's copies: the KV blocks a paged replica swaps out to host memory, or back,
//! before a step, priced as bytes over each GPU's host link (`cost::gpu::LinkSpec::host_of`).

use super::deployment::Deployment;
use crate::cost::gpu::{GpuSpec, LinkSpec};
use crate::serving::StepWork;

/// The time a step's swapped KV tokens add before its passes run.
///
/// vLLM's worker copies the blocks of the step's swap-outs and then of its swap-ins
/// (`CacheEngine.swap_out`, `swap_in`) on the step's stream before the forward pass, so the
/// step waits for both. Each GPU copies its own slice of a token's KV (its tensor-parallel
/// share, `Deployment::kv_bytes_per_token_per_gpu`) over its own host link, the replica's
/// data-parallel copies each a share of the tokens, all at once: the step waits for one GPU's
/// copies. Each direction pays the link's latency once. Not modelled: vLLM issues one copy per
/// block and layer, whose launch cost a step with many small blocks would add.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SwapTransfer {
    link: LinkSpec,
    /// KV bytes of one token on one GPU.
    bytes_per_token: f64,
    data_parallel: u64,
}

impl SwapTransfer {
    /// The copies of a replica of `gpu`s deployed as `deployment`.
    pub fn new(gpu: &GpuSpec, deployment: &Deployment) -> SwapTransfer {
        SwapTransfer {
            link: LinkSpec::host_of(gpu),
            bytes_per_token: deployment.kv_bytes_per_token_per_gpu,
            data_parallel: deployment.data_parallel.max(1) as u64,
        }
    }

    /// The copy time of `work`'s swapped tokens, ns (0 for a step that swaps nothing).
    pub fn nanos(&self, work: &StepWork<'_>) -> f64 {
        let bytes = |tokens: u64| tokens.div_ceil(self.data_parallel) as f64 * self.bytes_per_token;
        self.link.transfer_ns(bytes(work.swapped_out_tokens))
            + self.link.transfer_ns(bytes(work.swapped_in_tokens))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_swap_costs_its_bytes_over_the_host_link_and_no_swap_nothing() {
        // Llama-2-7B's KV: 32 layers x 2 x 4096 x 2 bytes = 512 KiB a token, TP 1, one copy.
        let deployment = Deployment {
            gpus: 1,
            tensor_parallel: 1,
            data_parallel: 1,
            expert_parallel: 1,
            weights_per_gpu_bytes: 13.5e9,
            kv_bytes_per_token_per_gpu: 524_288.0,
            kv_tokens: 100_000,
            kv_blocks: 6_250,
            expert_slots_per_gpu: None,
            expert_trace: None,
        };
        let swap = SwapTransfer::new(&GpuSpec::by_name("H100-SXM").unwrap(), &deployment);
        let mut work = StepWork::default();
        assert_eq!(swap.nanos(&work), 0.0);
        // 1,000 tokens out: 524.288 MB over PCIe 5's measured 54.25 GB/s, 9.66 ms, plus 3.4 us.
        work.swapped_out_tokens = 1_000;
        let out = swap.nanos(&work);
        assert!(
            (out - (524_288_000.0 / 54.25e9 * 1e9 + 3_403.0)).abs() < 1e-6,
            "{out}"
        );
        // Back in as well: both directions, each with its latency.
        work.swapped_in_tokens = 1_000;
        assert!((swap.nanos(&work) - 2.0 * out).abs() < 1e-6);
        // Over two data-parallel copies each GPU moves half the tokens; an A100 on PCIe 4
        // (25 GB/s, 10 us: assumptions) takes over twice as long per byte.
        let halves = SwapTransfer::new(
            &GpuSpec::by_name("A100-80GB").unwrap(),
            &Deployment {
                data_parallel: 2,
                gpus: 2,
                ..deployment
            },
        );
        let a100 = halves.nanos(&work);
        assert!((a100 - 2.0 * (262_144_000.0 / 25e9 * 1e9 + 10_000.0)).abs() < 1e-6);
    }
}
