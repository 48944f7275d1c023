//! A replica's scheduler configuration: vLLM's `max_num_seqs`, `max_num_batched_tokens` and
//! chunked prefill, the paged KV cache (block size, blocks, watermark), the admission rule and
//! whether batches are continuous or static.

/// How a replica admits requests and what it does when the KV cache runs full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// A request is admitted when the cache holds its prompt; decode growth is never refused and
    /// may overcommit the cache (no preemption). Orca-style iteration-level scheduling without
    /// paging, as Chimera runs it.
    PromptOnly,
    /// Prompt + output tokens are reserved at admission, so a running request never needs more
    /// (static reservation, as ExpertWeave runs it; pre-vLLM systems reserved the maximum length).
    ReserveFull,
    /// vLLM's paged cache: blocks for the prompt (or the chunk) at admission, one more block
    /// whenever a sequence crosses a block boundary; when none is free the most recently
    /// admitted running sequence is preempted.
    Paged { preemption: Preemption },
}

/// What happens to a preempted sequence (vLLM `PreemptionMode`); a scenario names it as
/// `replica.scheduler.preemption` (`"recompute"` or `"swap"`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Preemption {
    /// Its blocks are freed; it waits at the head of the queue and, when resumed, prefills its
    /// prompt and the tokens generated so far again (vLLM's default for single sequences).
    #[default]
    Recompute,
    /// Its blocks move to host memory (unbounded swap space) and back when resumed; the step that
    /// moves them carries the swapped tokens for the cost model to price the transfer (the
    /// serving family: `serving_family::swap`).
    Swap,
}

impl Preemption {
    /// Whether this is the default, recompute (a written scenario leaves it out).
    pub fn is_recompute(&self) -> bool {
        *self == Preemption::Recompute
    }
}

/// Continuous (iteration-level) or static batching.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Batching {
    /// Requests join and leave the batch at every step boundary.
    Continuous,
    /// A batch is formed only when the replica is empty and runs until its last request finishes
    /// (CAPS; FasterTransformer-style serving).
    Static,
}

/// Which of a step's candidates a continuous replica schedules first (set with
/// `Replica::with_step_order`; `DecodeFirst` unless a family says otherwise).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StepOrder {
    /// The running sequences first (a decode token each, or the next prefill chunk), then
    /// admissions into what the limits leave: mixed prefill-and-decode steps (vLLM v1,
    /// Sarathi-Serve's stall-free batching, Orca's iteration-level batching).
    #[default]
    DecodeFirst,
    /// vLLM v0's default scheduler (`Scheduler._schedule_default`, chunked prefill off): while
    /// no sequence is swapped out, a step admits waiting requests alone (prefills only, the
    /// running sequences paused for it); only when none can be admitted does it run the running
    /// sequences' decodes (and bring swapped ones back), with no admission in that step.
    PrefillFirst,
}

/// The paged KV cache of one replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvConfig {
    /// Tokens per block (vLLM `block_size`, 16 by default; 1 counts tokens exactly).
    pub block_size: u32,
    /// Blocks the cache holds (GPU memory left after weights / bytes per block).
    pub blocks: u64,
    /// Blocks an admission must leave free (vLLM's watermark, 1% of the blocks by default); decode
    /// growth may use them.
    pub watermark_blocks: u64,
}

/// One replica's scheduler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaConfig {
    /// vLLM `max_num_seqs`: sequences in a step.
    pub max_num_seqs: usize,
    /// vLLM `max_num_batched_tokens`: tokens (prefill + decode) in a step; `None` is unbounded.
    pub max_num_batched_tokens: Option<u64>,
    /// Split prompts across steps within the token budget (vLLM `enable_chunked_prefill`).
    pub chunked_prefill: bool,
    pub kv: KvConfig,
    pub admission: Admission,
    pub batching: Batching,
}

impl ReplicaConfig {
    /// The configuration's own consistency; `Err` names the field.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_num_seqs == 0 {
            return Err("max_num_seqs must be at least 1".into());
        }
        if self.max_num_batched_tokens == Some(0) {
            return Err("max_num_batched_tokens must be at least 1".into());
        }
        if self.chunked_prefill && self.max_num_batched_tokens.is_none() {
            return Err("chunked_prefill needs max_num_batched_tokens (the chunk budget)".into());
        }
        if self.kv.block_size == 0 {
            return Err("kv.block_size must be at least 1".into());
        }
        if self.kv.watermark_blocks > self.kv.blocks {
            return Err("kv.watermark_blocks exceeds kv.blocks".into());
        }
        Ok(())
    }
}
