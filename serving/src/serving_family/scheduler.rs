//! The replica scheduler kinds as configurations of `serving::Replica` (docs/serving-family.md
//! has the table): what `vllm`, `sarathi`, `orca` and `static` set (`ReplicaConfig` and `StepOrder`) and
//! the system behaviour each follows, and each kind's host time per step (`host_overhead`).

use super::config::{KvLimit, ReplicaSpec, SchedulerTable};
use super::deployment::Deployment;
use crate::cost::host::HostOverhead;
use crate::serving::{
    Admission, Batching, KvConfig, Preemption, Replica, ReplicaConfig, StepOrder,
};

/// The host's time per forward pass of `scheduler` (docs/cost-model.md, "The host's time per
/// step"), a fixed part plus a part per sequence in the pass: `vllm` runs vLLM's engine loop
/// as published (`HostOverhead::vllm_v0`), `sarathi` Sarathi-Serve's as Vidur profiled it
/// (`HostOverhead::sarathi_serve`). Orca and the static batches of CAPS have no measured
/// per-iteration host time of their own, so vLLM's stands in (a static batch pays it on each of
/// its passes).
pub fn host_overhead(scheduler: &SchedulerTable) -> HostOverhead {
    match scheduler {
        SchedulerTable::Sarathi { .. } => HostOverhead::sarathi_serve(),
        SchedulerTable::Vllm { .. }
        | SchedulerTable::Orca { .. }
        | SchedulerTable::Static { .. } => HostOverhead::vllm_v0(),
    }
}

/// The blocks the KV-use metrics of a replica of `spec` on `deployment` count against: its
/// paged cache's, or with `kv = "unbounded"` (one-token blocks) the tokens its memory would hold,
/// so `kv_used_*` still read as the share of that memory the run's KV takes (above 1: more than
/// it holds).
pub fn reported_kv_blocks(spec: &ReplicaSpec, deployment: &Deployment) -> u64 {
    match spec.scheduler {
        SchedulerTable::Sarathi {
            kv: KvLimit::Unbounded,
            ..
        } => deployment.kv_tokens,
        _ => deployment.kv_blocks,
    }
}

/// The replica `spec`'s scheduler over a KV cache of `kv_blocks` blocks.
///
/// - `vllm`: vLLM v0's default scheduler (`Scheduler._schedule_default`, chunked prefill off):
///   prefill-first steps (`StepOrder::PrefillFirst`), whole prompts within
///   `max_num_batched_tokens`, `max_num_seqs`, a paged cache of `block_size`-token blocks with
///   vLLM's watermark (`floor(watermark x blocks)` left free at admission) and preemption of
///   the newest sequence, by recompute or (`preemption = "swap"`) by swapping its blocks out.
/// - `sarathi`: Sarathi-Serve's stall-free batching: decodes first (`StepOrder::DecodeFirst`),
///   then prefill chunks within a `chunk_size` token budget (chunked prefill on), the same
///   paged cache and preemption; with `kv = "unbounded"`, vLLM V1 as GEM runs it (the gem
///   family's `replica_config`): no KV limit (one-token blocks, unbounded, no watermark, each
///   request admitted on its prompt, `Admission::PromptOnly`), never preempted.
/// - `orca`: Orca's iteration-level scheduling: running sequences first, then whole prompts in
///   the same iteration, no token budget unless `max_num_batched_tokens` gives one, no paging
///   (the cache counted in tokens) and each request's prompt and output reserved at admission
///   (`Admission::ReserveFull`, the vLLM paper's "Orca (Oracle)"), so nothing is preempted.
///   With `max_num_batched_tokens` it is the ExpertWeave preset's replica (scenarios/expertweave/).
/// - with `replica.prefix_caching` (vllm, sarathi): vLLM V1's automatic prefix caching in
///   blocks of the cache's block size (`Replica::with_prefix_caching`).
/// - `static`: static batches (`Batching::Static`): the batch former's whole batch when the
///   replica is empty, run as one step to its longest output (CAPS); each sequence holds the
///   blocks of its final length (`ReserveFull`), never preempted.
pub fn replica(spec: &ReplicaSpec, kv_blocks: u64) -> Replica {
    let paged = KvConfig {
        block_size: spec.block_size,
        blocks: kv_blocks,
        watermark_blocks: (spec.watermark * kv_blocks as f64).floor() as u64,
    };
    let paged_admission = |preemption: &Preemption| Admission::Paged {
        preemption: *preemption,
    };
    let (config, order) = match &spec.scheduler {
        SchedulerTable::Vllm {
            max_num_batched_tokens,
            preemption,
            ..
        } => (
            ReplicaConfig {
                max_num_seqs: spec.max_num_seqs,
                max_num_batched_tokens: Some(*max_num_batched_tokens),
                chunked_prefill: false,
                kv: paged,
                admission: paged_admission(preemption),
                batching: Batching::Continuous,
            },
            StepOrder::PrefillFirst,
        ),
        SchedulerTable::Sarathi {
            chunk_size,
            preemption,
            kv,
            ..
        } => (
            ReplicaConfig {
                max_num_seqs: spec.max_num_seqs,
                max_num_batched_tokens: Some(*chunk_size),
                chunked_prefill: true,
                kv: match kv {
                    KvLimit::Paged => paged,
                    KvLimit::Unbounded => KvConfig {
                        block_size: 1,
                        blocks: u64::MAX,
                        watermark_blocks: 0,
                    },
                },
                admission: match kv {
                    KvLimit::Paged => paged_admission(preemption),
                    KvLimit::Unbounded => Admission::PromptOnly,
                },
                batching: Batching::Continuous,
            },
            StepOrder::DecodeFirst,
        ),
        SchedulerTable::Orca {
            max_num_batched_tokens,
            ..
        } => (
            ReplicaConfig {
                max_num_seqs: spec.max_num_seqs,
                max_num_batched_tokens: *max_num_batched_tokens,
                chunked_prefill: false,
                kv: KvConfig {
                    block_size: 1,
                    blocks: kv_blocks,
                    watermark_blocks: 0,
                },
                admission: Admission::ReserveFull,
                batching: Batching::Continuous,
            },
            StepOrder::DecodeFirst,
        ),
        SchedulerTable::Static { .. } => (
            ReplicaConfig {
                max_num_seqs: spec.max_num_seqs,
                max_num_batched_tokens: None,
                chunked_prefill: false,
                kv: KvConfig {
                    watermark_blocks: 0,
                    ..paged
                },
                admission: Admission::ReserveFull,
                batching: Batching::Static,
            },
            StepOrder::DecodeFirst,
        ),
    };
    let replica = Replica::new(config).with_step_order(order);
    if spec.prefix_caching {
        replica.with_prefix_caching()
    } else {
        replica
    }
}
