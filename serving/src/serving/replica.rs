//! One continuous-batching replica: the vLLM scheduler done once. Waiting requests sit in a
//! `QueuePolicy` (preempted ones ahead of them in the replica's own queues), running sequences in
//! the batch; `schedule` decides the next step under `max_num_seqs`, the token budget, chunked
//! prefill, the KV block manager and the admission rule, `complete_step` advances it. The replica
//! owns no clock and no event queue: a family's engine `Model` calls it when a step ends and
//! schedules the next step end with the duration its `StepCost` gives.
//!
//! A step runs, in order: the running sequences (a decode token each, or the next prefill chunk),
//! swapped-out sequences brought back, sequences preempted by recompute, then new requests in the
//! policy's order, while the limits allow (vLLM v1's order: running before waiting). A sequence
//! holds the KV of every token it has computed; a decode step computes the last emitted token, so
//! after `k` emitted tokens of a prompt `P` a step's context is `P + k`. A lone sequence is always
//! run, overcommitting the cache if it must, so a request larger than the cache cannot stall the
//! replica.
//!
//! With prefix caching (`with_prefix_caching`, vLLM V1's automatic prefix caching) a request's
//! prompt is described by the family's `AdmitHook::prefix`; at admission the prompt's leading
//! full blocks that are resident are shared instead of prefilled (the request starts with their
//! tokens computed, at most its prompt less one token, as vLLM recomputes the last), and each
//! full prompt block a sequence computes stays cached after it leaves (`prefix`).
//!
//! A static replica may instead take its batches from a `BatchFormer` (`schedule_static_batch`):
//! the former picks the whole batch when the replica is empty, and the batch runs as one step,
//! its prefill pass and then a decode pass per output token of its longest request, every
//! sequence padded along until the last finishes (docs/serving.md says why one step).

use super::config::{Admission, Batching, Preemption, ReplicaConfig, StepOrder};
use super::former::BatchFormer;
use super::kv::BlockManager;
use super::metrics::ReplicaStats;
use super::prefix::{BlockHash, PrefixSegment, Slot, block_hashes};
use super::queue::{QueuePolicy, QueuedRequest};
use super::step::{AdapterTokens, StepWork};
use crate::time::{SimDuration, SimTime};
use std::collections::VecDeque;

/// What the family decides when the replica admits a request.
pub trait AdmitHook {
    /// Output tokens the request will generate (at least 1; `ReserveFull` reserves them).
    fn output_tokens(&mut self, request: &QueuedRequest) -> u32;
    /// The request enters the batch for the first time at `now` (not called on resumption).
    fn admitted(&mut self, now: SimTime, request: &QueuedRequest, output: u32);
    /// The adapter (a LoRA or an ESFT expert set) the request runs with, if any; the steps it
    /// is in count its tokens under it (`StepWork::adapters`). Asked once, at admission.
    fn adapter(&mut self, _request: &QueuedRequest) -> Option<u32> {
        None
    }
    /// The segments the request's prompt begins with (`prefix::PrefixSegment`), asked once at
    /// its first admission by a replica that caches prefixes; none (the default) leaves the
    /// whole prompt the request's own.
    fn prefix(&mut self, _request: &QueuedRequest, _segments: &mut Vec<PrefixSegment>) {}
}

/// A sequence's prompt blocks under prefix caching.
#[derive(Clone, Debug, Default)]
struct SeqPrefix {
    /// The identities of the full prompt blocks its segments cover.
    hashes: Vec<BlockHash>,
    /// The cached blocks it holds a reference on (their slots in the prefix cache).
    held: Vec<Slot>,
    /// Blocks of `hashes` already hit or offered to the cache.
    registered: usize,
}

impl SeqPrefix {
    /// The context at which the next block of `hashes` is computed in full (`u32::MAX`: none
    /// left to offer).
    fn next_register_at(&self, block_size: u32) -> u32 {
        if self.registered < self.hashes.len() {
            (self.registered as u32 + 1) * block_size
        } else {
            u32::MAX
        }
    }
}

/// A sequence admitted to the replica.
#[derive(Clone, Debug)]
pub struct Seq {
    /// Boxed: the batch loops touch only the counters below, kept small and close together.
    pub request: Box<QueuedRequest>,
    /// Output tokens it generates in all.
    pub output: u32,
    /// Output tokens emitted so far.
    pub generated: u32,
    /// The adapter it runs with (`AdmitHook::adapter`).
    adapter: Option<u32>,
    /// Tokens to prefill before decoding: the prompt, plus the tokens generated before a
    /// recompute preemption.
    prefill_len: u32,
    /// Tokens whose KV the sequence holds.
    kv: u32,
    blocks: u64,
    /// Tokens it computes in the step being scheduled or run.
    scheduled: u32,
    /// Admission order (the preemption victim is the most recent).
    order: u64,
    /// When it emitted its first and its latest token (the submission time until then).
    first_token: SimTime,
    last_token: SimTime,
    /// When it was first admitted (scheduled for the first time).
    admitted: SimTime,
    /// Its prompt's blocks, when the replica caches prefixes.
    prefix: Option<Box<SeqPrefix>>,
    /// `prefix`'s `next_register_at`, kept here so a step's pass over the batch reads the boxed
    /// prefix only when a prompt block completes (`u32::MAX` without one).
    register_at: u32,
}

impl Seq {
    fn prefilling(&self) -> bool {
        self.kv < self.prefill_len
    }
    /// The adapter it runs with, if any.
    pub fn adapter(&self) -> Option<u32> {
        self.adapter
    }
    /// Tokens whose KV the sequence holds.
    pub fn context(&self) -> u32 {
        self.kv
    }
    /// Tokens it computes in the step scheduled last (0: left out of it).
    pub fn scheduled(&self) -> u32 {
        self.scheduled
    }
    /// Its context once the scheduled step runs.
    pub fn step_context(&self) -> u32 {
        self.kv + self.scheduled
    }
    /// Prompt tokens it prefills in the scheduled step (0 when it decodes).
    pub fn step_prefill(&self) -> u32 {
        if self.prefilling() {
            self.scheduled.min(self.prefill_len - self.kv)
        } else {
            0
        }
    }
    /// Whether the scheduled step emits a token for it (a decode, or the chunk that completes
    /// its prefill): the sequences the output head runs on.
    pub fn step_emits(&self) -> bool {
        self.scheduled > 0 && self.kv + self.scheduled >= self.prefill_len
    }
    /// When it emitted its first token (its submission time until it has).
    pub fn first_token(&self) -> SimTime {
        self.first_token
    }
    /// When it emitted its latest token (its submission time until it has).
    pub fn last_token(&self) -> SimTime {
        self.last_token
    }
    /// When it was first admitted: the end of its queueing delay (a resumption after a
    /// preemption does not move it).
    pub fn admitted(&self) -> SimTime {
        self.admitted
    }
}

/// A step's totals, counted as its sequences are scheduled.
#[derive(Default)]
struct Tally {
    requests: u64,
    prefill: u64,
    decode: u64,
    context: u64,
}

impl Tally {
    /// Counts `s` (scheduled for `s.scheduled` tokens) in the step: its prefill tokens, and
    /// the rest as decode tokens.
    fn add(&mut self, s: &Seq) {
        self.requests += 1;
        let prefill = s.step_prefill();
        self.prefill += u64::from(prefill);
        self.decode += u64::from(s.scheduled - prefill);
        self.context += u64::from(s.kv + s.scheduled);
    }
}

/// A run of pure decode steps kept as counts (the decode fast-forward, `with_decode_runs`):
/// while the batch cannot change (every sequence decodes one token a step, none finishes, none
/// waits to be admitted, every block it needs is free) each step adds one token to every
/// sequence's `kv` and `generated` and moves its `last_token`, so the steps are counted here and
/// written to the sequences only when the run ends (`settle`). The batch's fields read by the
/// step's pricing (`scheduled`, the prefill, the topic and adapter) do not change in the run.
#[derive(Default)]
struct DecodeRun {
    active: bool,
    /// Steps completed and scheduled in the run (completed is scheduled, or one more between
    /// a step's end and the next step's scheduling).
    completed: u32,
    scheduled: u32,
    /// The end of the step before the run's first (the latest token of every sequence then),
    /// then of the run's latest completed step.
    last: SimTime,
    /// The fewest output tokens any sequence had left when the run began: the run completes
    /// fewer steps than that (the step in which one finishes is completed one by one).
    room: u32,
    /// The run's first step's context (every sequence's `kv + 1`) and sequences.
    context: u64,
    sequences: u64,
    /// By the run's scheduled step `s` modulo the block size: the sequences that need a new
    /// block at `s` (their context then a multiple of the block size).
    due: Vec<u64>,
}

/// One replica's scheduler state.
pub struct Replica {
    config: ReplicaConfig,
    kv: BlockManager,
    running: Vec<Seq>,
    /// Preempted by recompute, oldest victim first; resumed before new requests.
    resumable: VecDeque<Seq>,
    /// Preempted by swap; resumed first, and while any wait no new request is admitted (vLLM v0).
    swapped: VecDeque<Seq>,
    iteration: u64,
    busy: bool,
    next_order: u64,
    stats: ReplicaStats,
    step_requests: u64,
    /// Prompt tokens the scheduled step prefills (its `Tally::prefill`).
    step_prefill: u64,
    swapped_out: u64,
    swapped_in: u64,
    /// The batch a `BatchFormer` hands over, reused.
    formed: Vec<QueuedRequest>,
    /// Whether a sequence with an adapter was ever admitted (else no step has adapters to count).
    adapters_seen: bool,
    /// The scheduled step's tokens per adapter, by adapter id.
    step_adapters: Vec<AdapterTokens>,
    order: StepOrder,
    /// The prompt segments `AdmitHook::prefix` fills, reused.
    segments: Vec<PrefixSegment>,
    /// The slots of the cached blocks the latest prefix lookup hit, reused.
    hits: Vec<Slot>,
    /// The prompt blocks of finished sequences, reused (cleared) by the next admissions.
    spare_prefixes: Vec<SeqPrefix>,
    /// Whether pure decode steps may run as counts (`with_decode_runs`), the run if one is,
    /// and the steps completed in runs.
    decode_runs: bool,
    run: DecodeRun,
    run_steps: u64,
}

/// Frees the blocks of `s`: its own, and its references on cached blocks (the last one
/// first, as vLLM frees a request's blocks tail first).
fn free_blocks(kv: &mut BlockManager, s: &mut Seq) {
    let held = s.prefix.as_deref().map_or(0, |p| p.held.len() as u64);
    kv.release(s.blocks - held);
    if let Some(p) = s.prefix.as_deref_mut() {
        if p.held.len() > 1 {
            kv.warm_slots(&p.held);
        }
        for &slot in p.held.iter().rev() {
            kv.release_cached(slot);
        }
        p.held.clear();
    }
    s.blocks = 0;
}

impl Replica {
    /// A replica; `config` must pass `validate`.
    pub fn new(config: ReplicaConfig) -> Self {
        debug_assert_eq!(config.validate(), Ok(()));
        Replica {
            kv: BlockManager::new(config.kv),
            config,
            running: Vec::new(),
            resumable: VecDeque::new(),
            swapped: VecDeque::new(),
            iteration: 0,
            busy: false,
            next_order: 0,
            stats: ReplicaStats::default(),
            step_requests: 0,
            step_prefill: 0,
            swapped_out: 0,
            swapped_in: 0,
            formed: Vec::new(),
            adapters_seen: false,
            step_adapters: Vec::new(),
            order: StepOrder::DecodeFirst,
            segments: Vec::new(),
            hits: Vec::new(),
            spare_prefixes: Vec::new(),
            decode_runs: false,
            run: DecodeRun::default(),
            run_steps: 0,
        }
    }

    /// The replica running its pure decode steps as counts (`DecodeRun`) when `on`, on a
    /// continuous replica: every result as step by step, the two passes over the batch a step
    /// skipped while the run lasts. Between steps the batch's sequences then hold stale
    /// counters (`running` is for its length); the replica's own methods settle them first.
    pub fn with_decode_runs(mut self, on: bool) -> Self {
        self.decode_runs = on && self.config.batching == Batching::Continuous;
        self
    }

    /// The steps completed in decode runs (as counts) so far.
    pub fn decode_run_steps(&self) -> u64 {
        self.run_steps
    }

    /// Writes the decode run's steps to its sequences and ends it.
    fn settle(&mut self) {
        if !self.run.active {
            return;
        }
        self.run.active = false;
        let (completed, scheduled, last) = (self.run.completed, self.run.scheduled, self.run.last);
        for s in &mut self.running {
            // Its blocks: those its last scheduled step's context needs (it held exactly those
            // of the run's first step's when the run began).
            s.blocks = self.kv.blocks_for(u64::from(s.kv + scheduled + 1));
            s.kv += completed;
            s.generated += completed;
            if completed > 0 {
                s.last_token = last;
            }
            if completed > scheduled {
                s.scheduled = 0;
            }
        }
    }

    /// Begins a decode run after `schedule` set up a step at `now` counted in `tally`, if the
    /// step is a pure decode step of the whole batch, each sequence emitted its latest token at
    /// `now` and holds the blocks of its context, none registers a prompt block, and nothing
    /// waits to be admitted.
    fn begin_decode_run(&mut self, now: SimTime, tally: &Tally, waiting: usize) {
        if !self.decode_runs
            || waiting > 0
            || !self.resumable.is_empty()
            || !self.swapped.is_empty()
            || tally.prefill > 0
            || tally.requests != self.running.len() as u64
            || self.swapped_in > 0
        {
            return;
        }
        let block_size = self.kv.block_size();
        let mut room = u32::MAX;
        self.run.due.clear();
        self.run.due.resize(block_size as usize, 0);
        for s in &self.running {
            if s.scheduled != 1
                || s.kv < s.prefill_len
                || s.generated == 0
                || s.last_token != now
                || s.register_at != u32::MAX
                || s.blocks != self.kv.blocks_for(u64::from(s.kv + 1))
            {
                return;
            }
            room = room.min(s.output - s.generated);
            // It needs a block at the run's scheduled step `k` where `kv + k` is a multiple of
            // the block size.
            self.run.due[((block_size - s.kv % block_size) % block_size) as usize] += 1;
        }
        if room < 2 {
            return;
        }
        self.run.active = true;
        self.run.completed = 0;
        self.run.scheduled = 0;
        self.run.last = now;
        self.run.room = room;
        self.run.context = tally.context;
        self.run.sequences = tally.requests;
    }

    /// The replica caching prompt prefixes (vLLM V1's automatic prefix caching) in blocks of
    /// its `kv.block_size`; continuous batching only.
    pub fn with_prefix_caching(mut self) -> Self {
        assert_eq!(
            self.config.batching,
            Batching::Continuous,
            "prefix caching runs on a continuous replica"
        );
        self.kv = BlockManager::new(self.config.kv).with_prefix_cache();
        self
    }

    /// The replica scheduling its steps in `order` (`DecodeFirst` by default).
    pub fn with_step_order(mut self, order: StepOrder) -> Self {
        self.order = order;
        self
    }

    pub fn step_order(&self) -> StepOrder {
        self.order
    }

    pub fn config(&self) -> &ReplicaConfig {
        &self.config
    }
    /// Whether a step is in execution (set by `begin_step`, cleared by a `schedule` that finds
    /// nothing to run).
    pub fn is_busy(&self) -> bool {
        self.busy
    }
    /// Steps completed (vLLM scheduling iterations); queue policies age requests by it.
    pub fn iteration(&self) -> u64 {
        self.iteration
    }
    pub fn running(&self) -> &[Seq] {
        &self.running
    }
    /// Requests waiting here: the policy's queue and the preempted ones.
    pub fn waiting(&self, policy: &dyn QueuePolicy, index: usize) -> usize {
        policy.len(index) + self.resumable.len() + self.swapped.len()
    }
    pub fn kv(&self) -> &BlockManager {
        &self.kv
    }
    pub fn stats(&self) -> &ReplicaStats {
        &self.stats
    }

    /// Queues `request` (its `submitted` time is `now`) in `policy`'s queue `index`.
    pub fn submit(
        &mut self,
        now: SimTime,
        request: QueuedRequest,
        policy: &mut dyn QueuePolicy,
        index: usize,
    ) {
        self.stats.population(now, 1);
        policy.push(index, request);
    }

    /// A request joined the ones a `BatchFormer` holds for this replica at `now` (counted in the
    /// population, as `submit` counts a request it queues in a policy).
    pub fn submitted(&mut self, now: SimTime) {
        self.stats.population(now, 1);
    }

    /// Tokens a sequence computes next within `budget`.
    fn next_tokens(&self, s: &Seq, budget: u64) -> u32 {
        if !s.prefilling() {
            return 1;
        }
        let rest = s.prefill_len - s.kv;
        if self.config.chunked_prefill {
            rest.min(u32::try_from(budget).unwrap_or(u32::MAX))
        } else {
            rest
        }
    }

    fn preempt(&mut self, victim: usize, mode: Preemption) {
        let mut s = self.running.remove(victim);
        free_blocks(&mut self.kv, &mut s);
        s.scheduled = 0;
        match mode {
            Preemption::Recompute => {
                // Prefill beyond the prompt: the prefill computed so far is lost, and the
                // tokens generated since the last prefill join the next one.
                let before = s.prefill_len;
                s.prefill_len = s.request.prompt_tokens.max(1) + s.generated;
                self.stats.recomputed_tokens +=
                    u64::from(s.kv.min(before)) + u64::from(s.prefill_len - before);
                s.kv = 0;
                if let Some(p) = s.prefix.as_deref_mut() {
                    p.registered = 0;
                    s.register_at = p.next_register_at(self.kv.block_size());
                }
                self.stats.preempted_recompute += 1;
                self.resumable.push_front(s);
            }
            Preemption::Swap => {
                self.swapped_out += u64::from(s.kv);
                self.stats.preempted_swap += 1;
                self.swapped.push_front(s);
            }
        }
    }

    /// Counts the scheduled step's tokens per adapter into `step_adapters`, by adapter id.
    fn count_adapter_tokens(&mut self) {
        self.step_adapters.clear();
        if !self.adapters_seen {
            return;
        }
        for s in &self.running {
            let Some(adapter) = s.adapter.filter(|_| s.scheduled > 0) else {
                continue;
            };
            match self.step_adapters.iter_mut().find(|a| a.adapter == adapter) {
                Some(entry) => entry.tokens += u64::from(s.scheduled),
                None => self.step_adapters.push(AdapterTokens {
                    adapter,
                    tokens: u64::from(s.scheduled),
                }),
            }
        }
        self.step_adapters.sort_unstable_by_key(|a| a.adapter);
    }

    /// Decides the next step at `now`: returns its work, or `None` (and the replica goes idle)
    /// when nothing can run. New requests come from `policy`'s queue `index`; `hook` learns
    /// their output lengths and admissions.
    pub fn schedule(
        &mut self,
        now: SimTime,
        policy: &mut dyn QueuePolicy,
        index: usize,
        hook: &mut dyn AdmitHook,
    ) -> Option<StepWork<'_>> {
        let cfg = self.config;
        let mut budget = cfg.max_num_batched_tokens.unwrap_or(u64::MAX);
        self.swapped_out = 0;
        self.swapped_in = 0;

        if self.run.active {
            // The decode run's next step, while nothing could join the batch, every sequence
            // gets its token and the blocks due now are free (else step by step from here).
            let run = &self.run;
            let step = run.scheduled + 1;
            let due = run.due[(step % self.kv.block_size()) as usize];
            if run.completed == step
                && policy.len(index) == 0
                && self.resumable.is_empty()
                && self.swapped.is_empty()
                && budget >= run.sequences
                && self.kv.can_grow(due)
            {
                let tally = Tally {
                    requests: run.sequences,
                    prefill: 0,
                    decode: run.sequences,
                    context: run.context + u64::from(step) * run.sequences,
                };
                // One block at a time, each sequence's, as the pass below allocates them.
                for _ in 0..due {
                    self.kv.allocate(1);
                }
                self.run.scheduled = step;
                return Some(self.step_work(tally));
            }
            self.settle();
        }

        let mut tally = Tally::default();
        // 0. Prefill-first: a step of admissions alone while any can be admitted.
        if self.order == StepOrder::PrefillFirst && self.swapped.is_empty() {
            self.admit(now, policy, index, hook, &mut budget, &mut tally);
            if tally.requests > 0 {
                return Some(self.step_work(tally));
            }
        }
        let preemption = match cfg.admission {
            Admission::Paged { preemption } => Some(preemption),
            _ => None,
        };
        let mut preempted = false;

        // 1. The running sequences, growing their KV (preempting under the paged rule).
        let mut i = 0;
        while i < self.running.len() {
            if budget == 0 {
                self.running[i].scheduled = 0;
                i += 1;
                continue;
            }
            let tokens = self.next_tokens(&self.running[i], budget);
            let s = &self.running[i];
            let need = self
                .kv
                .blocks_for(u64::from(s.kv + tokens))
                .saturating_sub(s.blocks);
            if let Some(preemption) =
                preemption.filter(|_| !self.kv.can_grow(need) && self.running.len() > 1)
            {
                let victim = (0..self.running.len())
                    .max_by_key(|&j| self.running[j].order)
                    .expect("running is not empty");
                if victim < i {
                    budget += u64::from(self.running[victim].scheduled);
                    i -= 1;
                }
                self.preempt(victim, preemption);
                preempted = true;
                continue;
            }
            if need > 0 {
                self.kv.allocate(need);
            }
            let s = &mut self.running[i];
            s.blocks += need;
            s.scheduled = tokens;
            budget -= u64::from(tokens);
            tally.add(s);
            i += 1;
        }
        if preempted {
            // A victim may have been counted before it was preempted: count the batch again.
            tally = Tally::default();
            for s in self.running.iter().filter(|s| s.scheduled > 0) {
                tally.add(s);
            }
        }

        // 2. Swapped-out sequences come back while they fit.
        while let Some(s) = self.swapped.front() {
            if self.running.len() >= cfg.max_num_seqs || budget == 0 {
                break;
            }
            let tokens = self.next_tokens(s, budget);
            let blocks = self.kv.blocks_for(u64::from(s.kv + tokens));
            if !self.running.is_empty() && !self.kv.can_admit(blocks) {
                break;
            }
            let mut s = self.swapped.pop_front().expect("front exists");
            self.kv.allocate(blocks);
            self.swapped_in += u64::from(s.kv);
            s.blocks = blocks;
            s.scheduled = tokens;
            budget -= u64::from(tokens);
            tally.add(&s);
            self.running.push(s);
        }

        // 3. Preempted, then new requests, while the limits and the admission rule allow (a
        // prefill-first replica admitted before the running sequences, or not at all).
        if self.order == StepOrder::DecodeFirst {
            self.admit(now, policy, index, hook, &mut budget, &mut tally);
        }

        // 4. The step's work.
        if tally.requests == 0 {
            self.step_requests = 0;
            self.step_prefill = 0;
            self.busy = false;
            return None;
        }
        if !preempted {
            self.begin_decode_run(now, &tally, policy.len(index));
        }
        Some(self.step_work(tally))
    }

    /// The continuous step `tally` counted.
    fn step_work(&mut self, tally: Tally) -> StepWork<'_> {
        self.step_requests = tally.requests;
        self.step_prefill = tally.prefill;
        self.count_adapter_tokens();
        StepWork {
            requests: self.step_requests,
            prefill_tokens: tally.prefill,
            decode_tokens: tally.decode,
            context_tokens: tally.context,
            batch: &self.running,
            decode_iterations: 0,
            routed: None,
            expected_routing: None,
            adapters: &self.step_adapters,
            swapped_out_tokens: self.swapped_out,
            swapped_in_tokens: self.swapped_in,
        }
    }

    /// Admits resumable, then new requests (from `policy`'s queue `index`) into the step while
    /// `max_num_seqs`, the token `budget` and the admission rule allow, counting them in `tally`.
    fn admit(
        &mut self,
        now: SimTime,
        policy: &mut dyn QueuePolicy,
        index: usize,
        hook: &mut dyn AdmitHook,
        budget: &mut u64,
        tally: &mut Tally,
    ) {
        let cfg = self.config;
        let full_budget = cfg.max_num_batched_tokens.unwrap_or(u64::MAX);
        let may_admit = self.swapped.is_empty()
            && (cfg.batching == Batching::Continuous || self.running.is_empty());
        while may_admit && self.running.len() < cfg.max_num_seqs && *budget > 0 {
            let (mut s, fresh) = if let Some(s) = self.resumable.pop_front() {
                (s, false)
            } else if let Some(request) = policy.pop(index, self.iteration) {
                let output = hook.output_tokens(&request).max(1);
                let adapter = hook.adapter(&request);
                let s = Seq {
                    prefill_len: request.prompt_tokens.max(1),
                    request: Box::new(request),
                    output,
                    generated: 0,
                    adapter,
                    kv: 0,
                    blocks: 0,
                    scheduled: 0,
                    order: self.next_order,
                    first_token: request.submitted,
                    last_token: request.submitted,
                    admitted: now,
                    prefix: None,
                    register_at: u32::MAX,
                };
                (s, true)
            } else {
                break;
            };
            // Its prompt's resident blocks: `hit` of them, `free_hits` of those free now.
            let (hit, free_hits) = self.lookup_prefix(&mut s, hook);
            let cached = hit as u32 * self.kv.block_size();
            s.kv += cached;
            let tokens = self.next_tokens(&s, *budget);
            let reserve = match cfg.admission {
                Admission::PromptOnly => self.kv.blocks_for(u64::from(s.prefill_len)),
                Admission::ReserveFull => self
                    .kv
                    .blocks_for(u64::from(s.prefill_len) + u64::from(s.output - s.generated)),
                Admission::Paged { .. } => self.kv.blocks_for(u64::from(s.kv + tokens)),
            } - hit as u64;
            let over_budget = u64::from(tokens) > *budget && *budget < full_budget;
            if over_budget || (!self.running.is_empty() && !self.kv.can_admit(reserve + free_hits))
            {
                s.kv -= cached;
                if fresh {
                    policy.push(index, *s.request);
                } else {
                    self.resumable.push_front(s);
                }
                break;
            }
            if let Some(p) = s.prefix.as_deref_mut() {
                for &slot in &self.hits {
                    self.kv.acquire_cached(slot);
                    p.held.push(slot);
                }
                p.registered = hit;
                s.register_at = p.next_register_at(self.kv.block_size());
                if fresh {
                    self.stats.prefix_lookup_tokens += u64::from(s.request.prompt_tokens);
                    self.stats.prefix_hit_tokens += u64::from(cached);
                } else {
                    self.stats.prefix_rehit_tokens += u64::from(cached);
                }
            }
            self.kv.allocate(reserve);
            s.blocks = reserve + hit as u64;
            s.scheduled = tokens;
            *budget = budget.saturating_sub(u64::from(tokens));
            if fresh {
                self.next_order += 1;
                self.stats.admitted += 1;
                self.adapters_seen |= s.adapter.is_some();
                hook.admitted(now, &s.request, s.output);
            } else {
                s.order = self.next_order;
                self.next_order += 1;
            }
            tally.add(&s);
            self.running.push(s);
        }
    }

    /// How many of the leading full blocks of `s`'s prompt are resident in the prefix cache (at
    /// most its prefill less one token), and how many of those are free; (0, 0) without a
    /// cache or for a sequence that holds computed tokens. Asks `hook` for the prompt's
    /// segments the first time.
    fn lookup_prefix(&mut self, s: &mut Seq, hook: &mut dyn AdmitHook) -> (usize, u64) {
        let Some(cache) = self.kv.prefix_cache() else {
            return (0, 0);
        };
        if s.kv > 0 {
            self.hits.clear();
            return (0, 0);
        }
        let block_size = self.kv.block_size();
        let prefix = s.prefix.get_or_insert_with(|| {
            self.segments.clear();
            hook.prefix(&s.request, &mut self.segments);
            let mut p = self.spare_prefixes.pop().unwrap_or_default();
            debug_assert!(p.held.is_empty(), "a finished sequence holds no block");
            p.registered = 0;
            block_hashes(&self.segments, block_size, &mut p.hashes);
            Box::new(p)
        });
        let max = ((s.prefill_len - 1) / block_size) as usize;
        cache.lookup(&prefix.hashes, max, &mut self.hits)
    }

    /// Decides the next step of a static replica whose batches `former` forms: when the replica
    /// is empty, the former's batch (at most `max_num_seqs` requests), run as one step: every
    /// sequence prefills its prompt, then `decode_iterations` = the longest output - 1 decode
    /// passes run the whole batch (a sequence that has emitted its output is padded along), and
    /// all finish at the step's end. The batch is admitted whole (the former, not the cache,
    /// sizes it): each sequence takes the blocks of the tokens it holds at the end, whatever the
    /// admission rule, so `kv().peak()` says whether a finite cache would have held it. Returns
    /// `None` (the replica idle) when the former hands over nothing.
    pub fn schedule_static_batch(
        &mut self,
        now: SimTime,
        former: &mut dyn BatchFormer,
    ) -> Option<StepWork<'_>> {
        self.settle();
        assert_eq!(
            self.config.batching,
            Batching::Static,
            "a batch former serves a static replica"
        );
        assert!(
            self.running.is_empty(),
            "a static batch forms only in an empty replica"
        );
        self.swapped_out = 0;
        self.swapped_in = 0;
        let mut formed = std::mem::take(&mut self.formed);
        former.form(self.config.max_num_seqs, &mut formed);
        assert!(
            formed.len() <= self.config.max_num_seqs,
            "the batch former handed over {} requests, max_num_seqs is {}",
            formed.len(),
            self.config.max_num_seqs
        );
        // A finite cache holds the batch at its end (each sequence padded to the longest
        // output): the formed batch's longest prefix that fits, one request at least, runs;
        // the rest go back to the former.
        let (mut fit, mut longest_fit) = (0, 0u32);
        for (i, request) in formed.iter().enumerate() {
            let longest = longest_fit.max(former.output_tokens(request).max(1));
            let blocks: u64 = formed[..=i]
                .iter()
                .map(|r| {
                    self.kv
                        .blocks_for(u64::from(r.prompt_tokens.max(1)) + u64::from(longest - 1))
                })
                .sum();
            if i > 0 && !self.kv.can_grow(blocks) {
                break;
            }
            fit = i + 1;
            longest_fit = longest;
        }
        if fit < formed.len() {
            former.put_back(formed.split_off(fit));
        }
        let mut longest = 0;
        for request in formed.drain(..) {
            let output = former.output_tokens(&request).max(1);
            let adapter = former.adapter(&request);
            self.adapters_seen |= adapter.is_some();
            longest = longest.max(output);
            self.stats.admitted += 1;
            former.admitted(now, &request, output);
            let request_submitted = request.submitted;
            self.running.push(Seq {
                prefill_len: request.prompt_tokens.max(1),
                request: Box::new(request),
                output,
                generated: 0,
                adapter,
                kv: 0,
                blocks: 0,
                scheduled: 0,
                order: self.next_order,
                first_token: request_submitted,
                last_token: request_submitted,
                admitted: now,
                prefix: None,
                register_at: u32::MAX,
            });
            self.next_order += 1;
        }
        self.formed = formed;
        let decode_iterations = longest.saturating_sub(1);
        let mut tally = Tally::default();
        for s in &mut self.running {
            s.scheduled = s.prefill_len + decode_iterations;
            s.blocks = self.kv.blocks_for(u64::from(s.scheduled));
            self.kv.allocate(s.blocks);
            tally.add(s);
        }
        self.step_requests = tally.requests;
        self.step_prefill = tally.prefill;
        if self.step_requests == 0 {
            self.busy = false;
            return None;
        }
        self.count_adapter_tokens();
        Some(StepWork {
            requests: tally.requests,
            prefill_tokens: tally.prefill,
            decode_tokens: tally.decode,
            context_tokens: tally.context,
            decode_iterations,
            batch: &self.running,
            routed: None,
            expected_routing: None,
            adapters: &self.step_adapters,
            swapped_out_tokens: 0,
            swapped_in_tokens: 0,
        })
    }

    /// The scheduled step runs for `duration`.
    pub fn begin_step(&mut self, duration: SimDuration) {
        self.busy = true;
        self.stats.busy_ns += duration.0;
        self.stats.steps += 1;
        self.stats.batch_sum += self.step_requests;
    }

    /// The step ends at `now`: every scheduled sequence computes its tokens and emits one for
    /// each it computed from its last prefill token on (one per step in continuous batching, its
    /// whole output in a static batch run as one step), and leaves (its blocks freed) once it
    /// has emitted its output. Finished sequences are appended to `finished` in the order found
    /// (the batch is compacted by swapping the last sequence into the gap).
    pub fn complete_step(&mut self, now: SimTime, finished: &mut Vec<Seq>) {
        self.iteration += 1;
        // The step's prompt tokens, as `schedule` counted them over the same sequences.
        self.stats.prefill_tokens += std::mem::take(&mut self.step_prefill);
        if self.run.active {
            let run = &mut self.run;
            if run.completed == run.scheduled && run.completed + 1 < run.room {
                // A step of the decode run: every sequence emits a token, its gap the step's
                // (one run of equal gaps, as the pass below records them), and none finishes.
                run.completed += 1;
                self.run_steps += 1;
                let gap = (now - run.last).0;
                run.last = now;
                self.stats.latencies.token_gaps(gap, run.sequences);
                self.stats.tokens += run.sequences;
                return;
            }
            self.settle();
        }
        // Token gaps are recorded as runs of equal gaps (most of a step's sequences emitted
        // their previous token at the previous step's end): one histogram update per run.
        let (mut gap_ns, mut gaps) = (0u64, 0u64);
        let mut i = 0;
        while i < self.running.len() {
            let s = &mut self.running[i];
            if s.scheduled == 0 {
                i += 1;
                continue;
            }
            let before = s.kv;
            s.kv += s.scheduled;
            s.scheduled = 0;
            if s.kv >= s.register_at {
                // Its prompt blocks computed in full are cached.
                let p = s
                    .prefix
                    .as_deref_mut()
                    .expect("a block to register has a prefix");
                let block_size = self.kv.block_size();
                while p.hashes.get(p.registered).is_some()
                    && (p.registered as u32 + 1) * block_size <= s.kv
                {
                    let hash = p.hashes[p.registered];
                    if let Some(slot) = self.kv.register_cached(hash) {
                        p.held.push(slot);
                    }
                    p.registered += 1;
                }
                s.register_at = p.next_register_at(block_size);
            }
            if s.kv >= s.prefill_len {
                // The pass over the last prompt token emits the first output token.
                let computed = s.kv - before.max(s.prefill_len - 1);
                let emitted = computed.min(s.output - s.generated);
                if emitted > 0 {
                    if s.generated == 0 {
                        s.first_token = now;
                    } else {
                        let gap = (now - s.last_token).0;
                        if gap != gap_ns {
                            self.stats.latencies.token_gaps(gap_ns, gaps);
                            (gap_ns, gaps) = (gap, 0);
                        }
                        gaps += 1;
                    }
                    s.last_token = now;
                }
                s.generated += emitted;
                self.stats.tokens += u64::from(emitted);
            }
            if s.generated >= s.output {
                let mut done = self.running.swap_remove(i);
                free_blocks(&mut self.kv, &mut done);
                if let Some(prefix) = done.prefix.take() {
                    self.spare_prefixes.push(*prefix);
                }
                self.stats.completed += 1;
                self.stats.sojourn_ns += u128::from((now - done.request.submitted).0);
                self.stats.latencies.finished(now, &done);
                self.stats.population(now, -1);
                finished.push(done);
            } else {
                i += 1;
            }
        }
        self.stats.latencies.token_gaps(gap_ns, gaps);
    }
}
