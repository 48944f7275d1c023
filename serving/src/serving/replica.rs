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
use super::prefix::{LookupReads, PrefixSegment, PromptBlocks, SharedSegments, Slot};
use super::queue::{QueuePolicy, QueuedRequest};
use super::step::{AdapterTokens, StepWork};
use super::wheel::{FinishWheel, Finishing};
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
    /// its first admission by a replica that caches prefixes (a function of the request: a try
    /// that fails keeps them for the next); none (the default) leaves the whole prompt the
    /// request's own. Returns how many of them, from the first, other requests may share
    /// (`SharedSegments`: the blocks that end past those are in no other request's prompt).
    fn prefix(
        &mut self,
        _request: &QueuedRequest,
        _segments: &mut Vec<PrefixSegment>,
    ) -> SharedSegments {
        SharedSegments::default()
    }
}

/// A sequence's prompt blocks under prefix caching.
#[derive(Clone, Debug, Default)]
struct SeqPrefix {
    /// The full prompt blocks its segments cover, by run.
    blocks: PromptBlocks,
    /// The cached blocks it holds a reference on (their slots in the prefix cache).
    held: Vec<Slot>,
    /// Blocks of `blocks` already hit or offered to the cache.
    registered: usize,
    /// The first of `blocks` that no later request's prompt holds (`SharedSegments::later`).
    own: usize,
    /// The first of `blocks` that no request in flight beside it holds
    /// (`SharedSegments::beside`): no other sequence holds a reference on it or past it.
    solo: usize,
    /// From which of `blocks` the blocks computed are not registered (`usize::MAX`: none). Set
    /// at admission where the cache names none of the blocks from the first own one not hit
    /// on: only this sequence could then register or read them, and only once it has released
    /// them (a preemption), so they are registered then (`offer_deferred`), and never when it
    /// finishes. The cache's answers are the same as with every block registered when
    /// computed: those registrations would all have made new entries, held by this sequence
    /// alone and released last-registered first right after its plain blocks, so as plain
    /// blocks they take the same places in the free queue.
    deferred: usize,
    /// What its latest prefix lookup read, and, after a try that failed (`retry`), its hits:
    /// the next try asks the cache whether they still hold (`PrefixCache::lookup_again`)
    /// before reading its blocks again.
    reads: LookupReads,
    kept: Vec<Slot>,
    retry: bool,
}

impl SeqPrefix {
    /// Registers the blocks computed whose registration was put off (before the sequence
    /// releases its blocks while it may still read them again); from then on every block is
    /// registered when computed.
    fn offer_deferred(&mut self, kv: &mut BlockManager) {
        if self.deferred <= self.registered {
            kv.register_cached(&self.blocks, self.deferred, self.registered, &mut self.held);
        }
        self.deferred = usize::MAX;
    }

    /// The context at which the next block of `blocks` is computed in full (`u32::MAX`: none
    /// left to offer).
    fn next_register_at(&self, block_size: u32) -> u32 {
        if self.registered < self.blocks.len() {
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
    /// In the replica's decode group (`DecodeGroup`): its `kv`, `generated`, `last_token` and
    /// `blocks` are those of the step it joined at, `base` that step's `iteration`.
    lazy: bool,
    base: u64,
    /// (step, place) of its latest entry in the decode group's `finishing` (`NO_PENDING`: none
    /// that can still be due): a member settled and joining again with the same finishing step
    /// in the same place finds its entry still there, and pushes none.
    pending: (u64, u32),
}

/// No entry in `DecodeGroup::finishing`: every entry's step is 2 or later.
const NO_PENDING: (u64, u32) = (0, u32::MAX);

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
    emitting: u64,
    prefill_square: f64,
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
        self.emitting += u64::from(s.step_emits());
        self.prefill_square += f64::from(prefill).powi(2);
    }
}

/// The decode group (`with_decode_runs`): the sequences that decode one token in every step,
/// kept as counts. A sequence joins when a step it emitted in ends (its prompt computed and
/// registered, holding exactly its context's blocks, two tokens or more left); from then on
/// every step schedules it for one token, takes a block for it when its context crosses a block
/// boundary and emits its token, so none of that is written to it: its counters stay those of
/// the step it joined at (`Seq::base`), and each step adds the group's sums instead of passing
/// over it. It leaves (its counters written, `Replica::leave`) in the step it finishes in, when
/// a step cannot give it its token, when it is preempted (a step that preempts schedules the
/// batch in place, the other members kept: `Replica::schedule_in_place`), or when a
/// prefill-first step admits (`settle`). The other sequences, `Replica::eager`, are scheduled
/// and completed one by one in their places in the batch, as all were before.
#[derive(Default)]
struct DecodeGroup {
    /// The sequences in it, and the sums of their `kv` and `base`.
    members: u64,
    kv_sum: u64,
    base_sum: u64,
    /// The end of the latest step (each member's latest token).
    last: SimTime,
    /// By `(kv - base)` modulo the block size: the members that need a block in the step
    /// scheduled at `iteration` when `(kv - base + iteration)` is a multiple of it.
    due: Vec<u64>,
    /// (the `iteration` its last token's step ends at, its `order`, its place in `running`)
    /// of each member, by step (a timing wheel, not a heap: the engine's event queue is the
    /// only one); an entry whose sequence left the group since is stale
    /// (`Replica::complete_step` skips it), so leaving the group touches no entry.
    finishing: FinishWheel,
    /// The entries due in the step being completed, reused.
    ending: Vec<Finishing>,
}

impl DecodeGroup {
    /// The due bucket of a member whose `kv` and `base` are these.
    /// That is `(kv - base) mod block_size`: a mask of the wrapped difference when the block
    /// size is a power of two (it divides 2^64), three divisions otherwise.
    fn phase(kv: u32, base: u64, block_size: u32) -> usize {
        let bs = u64::from(block_size);
        if block_size.is_power_of_two() {
            (u64::from(kv).wrapping_sub(base) & (bs - 1)) as usize
        } else {
            ((u64::from(kv) % bs + bs - base % bs) % bs) as usize
        }
    }
}

/// Which members of the decode group need a block in the step scheduled at one iteration: those
/// whose `DecodeGroup::phase` is the step's due bucket, the block size's mask taken once for a
/// pass over the batch (when it is a power of two) rather than once per member.
#[derive(Clone, Copy)]
struct DueBlocks {
    /// The block size less one, when it is a power of two.
    mask: Option<u64>,
    block_size: u32,
    due: usize,
}

impl DueBlocks {
    fn of(iteration: u64, block_size: u32) -> Self {
        DueBlocks {
            mask: block_size
                .is_power_of_two()
                .then(|| u64::from(block_size) - 1),
            block_size,
            due: DecodeGroup::phase(0, iteration, block_size),
        }
    }

    /// Whether the member whose `kv` and `base` are these needs a block in the step.
    fn needs_block(&self, kv: u32, base: u64) -> bool {
        match self.mask {
            Some(mask) => (u64::from(kv).wrapping_sub(base) & mask) as usize == self.due,
            None => DecodeGroup::phase(kv, base, self.block_size) == self.due,
        }
    }
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
    /// The prompt blocks of finished sequences, reused (cleared) by the next admissions, boxes
    /// and all (no allocation per stage): the boxes are what is reused, as `Seq::prefix` holds one.
    #[allow(clippy::vec_box)]
    spare_prefixes: Vec<Box<SeqPrefix>>,
    /// The prompt blocks of the latest new request that could not be admitted (pushed back to
    /// its queue), by its id: the next try, most often of the same request while the cache is
    /// full, reads them instead of asking `AdmitHook::prefix` and hashing the prompt again.
    retry_prefix: Option<(u64, Box<SeqPrefix>)>,
    /// Prefix lookups made (a test checks that `fewest_blocks` spares some), and those
    /// answered by a failed try's kept hits.
    #[cfg(test)]
    lookups: u64,
    #[cfg(test)]
    lookups_kept: u64,
    /// Whether decoding sequences may join the decode group (`with_decode_runs`), the group,
    /// the places in `running` of the sequences outside it, ascending (kept while the group has
    /// members; rebuilt by `complete_step` when it has none), and the steps completed with
    /// members.
    decode_runs: bool,
    group: DecodeGroup,
    eager: Vec<u32>,
    run_steps: u64,
    /// Preemptions while the decode group had members (the group kept: `schedule_in_place`).
    group_preemptions: u64,
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
        kv.release_cached(&p.held);
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
            retry_prefix: None,
            #[cfg(test)]
            lookups: 0,
            #[cfg(test)]
            lookups_kept: 0,
            decode_runs: false,
            group: DecodeGroup::default(),
            eager: Vec::new(),
            run_steps: 0,
            group_preemptions: 0,
        }
    }

    /// The replica keeping its decoding sequences in a decode group (`DecodeGroup`) when `on`,
    /// on a continuous replica that grows a sequence's blocks as it decodes (not `ReserveFull`,
    /// which holds them whole from admission):
    /// every result as step by step, the passes over the group skipped. Between steps the
    /// group's sequences then hold stale counters (`running` is for its length and each
    /// sequence's `scheduled`, prefill, topic and adapter); the replica's own methods settle
    /// them first.
    pub fn with_decode_runs(mut self, on: bool) -> Self {
        self.decode_runs = on
            && self.config.batching == Batching::Continuous
            && self.config.admission != Admission::ReserveFull;
        self.group.due = vec![0; self.kv.block_size() as usize];
        self
    }

    /// The steps completed while the decode group had members (their tokens counted, not
    /// passed over).
    pub fn decode_run_steps(&self) -> u64 {
        self.run_steps
    }

    /// The preemptions made while the decode group had members, which stayed in it.
    pub fn group_preemptions(&self) -> u64 {
        self.group_preemptions
    }

    /// Sequence `i` (out of the group) joins the decode group after the step ending now.
    fn join(&mut self, i: usize) {
        let block_size = self.kv.block_size();
        let iteration = self.iteration;
        let g = &mut self.group;
        let s = &mut self.running[i];
        s.lazy = true;
        s.base = iteration;
        s.scheduled = 1;
        g.members += 1;
        g.kv_sum += u64::from(s.kv);
        g.base_sum += iteration;
        g.due[DecodeGroup::phase(s.kv, iteration, block_size)] += 1;
        let at = iteration + u64::from(s.output - s.generated);
        if s.pending != (at, i as u32) {
            s.pending = (at, i as u32);
            g.finishing.push(Finishing {
                at,
                order: s.order,
                place: i as u32,
            });
        }
    }

    /// Member `i` leaves the decode group, its counters written: those of the step being
    /// completed, as scheduled for it, when `in_step`, else those after the latest step (its
    /// entry in `group.finishing` goes stale).
    fn leave(&mut self, i: usize, in_step: bool) {
        let block_size = self.kv.block_size();
        let steps = self.iteration - u64::from(in_step);
        let g = &mut self.group;
        let s = &mut self.running[i];
        debug_assert!(s.lazy);
        g.members -= 1;
        g.kv_sum -= u64::from(s.kv);
        g.base_sum -= s.base;
        g.due[DecodeGroup::phase(s.kv, s.base, block_size)] -= 1;
        s.lazy = false;
        let d = u32::try_from(steps - s.base).expect("a member's steps fit its counters");
        s.kv += d;
        s.generated += d;
        if d > 0 {
            s.last_token = g.last;
        }
        s.scheduled = u32::from(in_step);
        s.blocks = self.kv.blocks_for(u64::from(s.kv + s.scheduled));
    }

    /// Writes every member's counters (after the latest step) and empties the decode group.
    fn settle(&mut self) {
        if self.group.members == 0 {
            return;
        }
        let (iteration, last) = (self.iteration, self.group.last);
        for s in self.running.iter_mut().filter(|s| s.lazy) {
            s.lazy = false;
            let d = u32::try_from(iteration - s.base).expect("a member's steps fit its counters");
            s.kv += d;
            s.generated += d;
            if d > 0 {
                s.last_token = last;
            }
            s.scheduled = 0;
            s.blocks = self.kv.blocks_for(u64::from(s.kv));
        }
        let g = &mut self.group;
        g.members = 0;
        g.kv_sum = 0;
        g.base_sum = 0;
        g.due.fill(0);
    }

    /// Whether sequence `i`, just completed at `now` and not finished, may join the decode
    /// group: it decoded or finished its prefill in the step (its token emitted now), its
    /// prompt blocks are all offered to the cache, it holds exactly its context's blocks, and
    /// it has two tokens or more left.
    fn may_join(&self, i: usize, now: SimTime) -> bool {
        let s = &self.running[i];
        self.decode_runs
            && s.kv >= s.prefill_len
            && s.generated > 0
            && s.last_token == now
            && s.register_at == u32::MAX
            && s.output - s.generated >= 2
            && s.blocks == self.kv.blocks_for(u64::from(s.kv))
    }

    /// Schedules the running sequences with the decode group's members in it: each sequence
    /// out of it in its place, the members a token each in bulk. Budget: in order, each takes
    /// its tokens while any is left; the members after the place where it runs out leave the
    /// group unscheduled. Returns false (nothing changed) when it cannot be done that way: the
    /// budget runs out among members, or the blocks the step takes might not fit (a preemption
    /// then, under the paged rule).
    fn schedule_with_group(&mut self, budget: &mut u64, tally: &mut Tally) -> bool {
        let block_size = self.kv.block_size();
        let due = self.group.due[DecodeGroup::phase(0, self.iteration, block_size)];
        // First the plan: each sequence's tokens and blocks, and where the budget runs out.
        let (mut used, mut blocks) = (0u64, due);
        let mut cut = None;
        for (k, &p) in self.eager.iter().enumerate() {
            // The members before place `p` took a token each.
            let Some(avail) = budget.checked_sub(used + (p as u64 - k as u64)) else {
                return false;
            };
            if avail == 0 {
                return false;
            }
            let s = &self.running[p as usize];
            let tokens = self.next_tokens(s, avail);
            used += u64::from(tokens);
            blocks += self
                .kv
                .blocks_for(u64::from(s.kv + tokens))
                .saturating_sub(s.blocks);
            if u64::from(tokens) == avail {
                cut = Some(k);
                break;
            }
        }
        let starved = match cut {
            // Members after the cut get no token: they are not in the step.
            Some(k) => {
                let p = self.eager[k] as usize;
                let before = p as u64 - k as u64;
                self.group.members - before
            }
            None => {
                if used + self.group.members > *budget {
                    return false;
                }
                0
            }
        };
        if starved > 0 {
            // The due blocks counted members that are not in the step; plan again without them
            // (rare: their blocks are counted one by one below).
            blocks = blocks.saturating_sub(due);
        }
        let paged = matches!(self.config.admission, Admission::Paged { .. });
        if paged && starved == 0 && !self.kv.can_grow(blocks) {
            return false;
        }
        if let Some(k) = cut.filter(|_| starved > 0) {
            // The members after the cut leave the group unscheduled, as the places after it do.
            let p = self.eager[k] as usize;
            for i in p + 1..self.running.len() {
                if self.running[i].lazy {
                    self.leave(i, false);
                }
            }
            // Their due blocks, now that the members left are known.
            let due = self.group.due[DecodeGroup::phase(0, self.iteration, block_size)];
            if paged && !self.kv.can_grow(blocks + due) {
                // Cannot happen without a preemption: undo nothing, settle all instead.
                self.settle();
                self.eager.clear();
                return false;
            }
            self.eager.truncate(k + 1);
            self.eager.extend(p as u32 + 1..self.running.len() as u32);
        }
        // Then the step: the sequences out of the group in order, the members in bulk.
        let due = self.group.due[DecodeGroup::phase(0, self.iteration, block_size)];
        for k in 0..self.eager.len() {
            let i = self.eager[k] as usize;
            // What the members before place `i` left of the budget (none after a cut).
            let avail = budget.saturating_sub(i as u64 - k as u64);
            if avail == 0 {
                self.running[i].scheduled = 0;
                continue;
            }
            let s = &self.running[i];
            let tokens = self.next_tokens(s, avail);
            let need = self
                .kv
                .blocks_for(u64::from(s.kv + tokens))
                .saturating_sub(s.blocks);
            if need > 0 {
                self.kv.allocate(need);
            }
            let s = &mut self.running[i];
            s.blocks += need;
            s.scheduled = tokens;
            *budget -= u64::from(tokens);
            tally.add(s);
        }
        // The members' blocks at once: the free queue hands out `due` blocks in one take as it
        // would one at a time (the same items popped and evicted, the same peak).
        if due > 0 {
            self.kv.allocate(due);
        }
        let g = &self.group;
        tally.requests += g.members;
        tally.decode += g.members;
        tally.emitting += g.members;
        tally.context += g.kv_sum + g.members * (self.iteration + 1) - g.base_sum;
        *budget -= g.members;
        true
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
        if let Some(p) = s.prefix.as_deref_mut() {
            p.offer_deferred(&mut self.kv);
        }
        free_blocks(&mut self.kv, &mut s);
        s.scheduled = 0;
        s.pending = NO_PENDING;
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

        let mut tally = Tally::default();
        // 0. Prefill-first: a step of admissions alone while any can be admitted.
        if self.order == StepOrder::PrefillFirst && self.swapped.is_empty() {
            if policy.len(index) > 0 || !self.resumable.is_empty() {
                // An admission makes a step of its own: the group's members are not in it.
                self.settle();
            }
            self.admit(now, policy, index, hook, &mut budget, &mut tally);
            if tally.requests > 0 {
                return Some(self.step_work(tally));
            }
        }
        let preemption = match cfg.admission {
            Admission::Paged { preemption } => Some(preemption),
            _ => None,
        };

        // 1. The running sequences, growing their KV (preempting under the paged rule): with
        // the decode group's members in bulk when that can be done, else one by one in their
        // places, the members kept in the group (`schedule_in_place`).
        let grouped = self.group.members > 0 && self.schedule_with_group(&mut budget, &mut tally);
        if !grouped {
            self.schedule_in_place(&mut budget, &mut tally, preemption);
        }
        let scheduled_running = self.running.len();

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

        // 4. The step's work (the sequences that joined the batch are out of the group).
        if self.group.members > 0 {
            self.eager
                .extend(scheduled_running as u32..self.running.len() as u32);
        }
        if tally.requests == 0 {
            self.step_requests = 0;
            self.step_prefill = 0;
            self.busy = false;
            return None;
        }
        Some(self.step_work(tally))
    }

    /// Schedules the running sequences one by one in their places (vLLM's pass): each takes its
    /// tokens while budget is left, and a sequence whose blocks do not fit under the paged rule
    /// preempts the latest admitted one first (`preempt_latest`). The decode group's members
    /// stay in it: each takes its token and, when its context reaches a block boundary, its
    /// block in its place (what the pass would give it), and is counted in bulk at the end; one
    /// left without budget leaves the group unscheduled. So a step that preempts costs a pass
    /// that reads the members, not a settlement of the group and its rebuilding a step later.
    fn schedule_in_place(
        &mut self,
        budget: &mut u64,
        tally: &mut Tally,
        preemption: Option<Preemption>,
    ) {
        // A member needs a block when its context is a multiple of the block size.
        let due = DueBlocks::of(self.iteration, self.kv.block_size());
        let mut preempted = false;
        let mut i = 0;
        while i < self.running.len() {
            if *budget == 0 {
                if self.running[i].lazy {
                    self.leave(i, false);
                }
                self.running[i].scheduled = 0;
                i += 1;
                continue;
            }
            if self.running[i].lazy && self.kv.can_grow(0) {
                // A run of members that need no block, within the budget, while the blocks in
                // use fit: each takes its token and nothing else happens (no allocation, and no
                // preemption, which `can_grow(0)` rules out), as the pass below would do for each.
                let start = i;
                let budget_end = usize::try_from(*budget).map_or(usize::MAX, |b| start + b);
                let end = self.running.len().min(budget_end);
                while i < end && {
                    let s = &self.running[i];
                    s.lazy && !due.needs_block(s.kv, s.base)
                } {
                    i += 1;
                }
                *budget -= (i - start) as u64;
                if i > start {
                    continue;
                }
            }
            let s = &self.running[i];
            let (tokens, need) = if s.lazy {
                (1, u64::from(due.needs_block(s.kv, s.base)))
            } else {
                let tokens = self.next_tokens(s, *budget);
                let need = self
                    .kv
                    .blocks_for(u64::from(s.kv + tokens))
                    .saturating_sub(s.blocks);
                (tokens, need)
            };
            if let Some(mode) =
                preemption.filter(|_| !self.kv.can_grow(need) && self.running.len() > 1)
            {
                if self.preempt_latest(i, mode, budget) {
                    i -= 1;
                }
                preempted = true;
                continue;
            }
            if need > 0 {
                self.kv.allocate(need);
            }
            *budget -= u64::from(tokens);
            let s = &mut self.running[i];
            if !s.lazy {
                s.blocks += need;
                s.scheduled = tokens;
                if !preempted {
                    tally.add(s);
                }
            }
            i += 1;
        }
        // One pass over the batch for both: a victim may have been counted before it was
        // preempted, so the batch is counted again; and the places out of the group, for
        // `complete_step` (preemptions moved them).
        let grouped = self.group.members > 0;
        if preempted {
            *tally = Tally::default();
        }
        if grouped {
            self.eager.clear();
        }
        if preempted || grouped {
            for (i, s) in self.running.iter().enumerate().filter(|(_, s)| !s.lazy) {
                if preempted && s.scheduled > 0 {
                    tally.add(s);
                }
                if grouped {
                    self.eager.push(i as u32);
                }
            }
        }
        let g = &self.group;
        if grouped {
            tally.requests += g.members;
            tally.decode += g.members;
            tally.emitting += g.members;
            tally.context += g.kv_sum + g.members * (self.iteration + 1) - g.base_sum;
        }
    }

    /// Preempts the latest admitted sequence while place `i` is scheduled (`schedule_in_place`);
    /// returns whether the victim was before `i`, its tokens given back to `budget`. A member
    /// victim leaves the group first (with this step's token and block when before `i`); the
    /// members after it move down a place, and their finishing entries with them.
    fn preempt_latest(&mut self, i: usize, mode: Preemption, budget: &mut u64) -> bool {
        // The latest admitted: the orders are distinct, so a plain scan for the largest finds it.
        let mut victim = 0;
        let mut latest = self.running[0].order;
        for (j, s) in self.running.iter().enumerate().skip(1) {
            if s.order > latest {
                (victim, latest) = (j, s.order);
            }
        }
        if self.running[victim].lazy {
            self.leave(victim, false);
            if victim < i {
                let s = &mut self.running[victim];
                s.scheduled = 1;
                s.blocks = self.kv.blocks_for(u64::from(s.kv + 1));
            }
        }
        self.group_preemptions += u64::from(self.group.members > 0);
        let before = victim < i;
        if before {
            *budget += u64::from(self.running[victim].scheduled);
        }
        self.preempt(victim, mode);
        if self.group.members > 0 {
            for j in victim..self.running.len() {
                let s = &mut self.running[j];
                if s.lazy {
                    let at = s.base + u64::from(s.output - s.generated);
                    s.pending = (at, j as u32);
                    self.group.finishing.moved(at, s.order, j as u32);
                }
            }
        }
        before
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
            emitting: tally.emitting,
            prefill_square: tally.prefill_square,
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
            if !self.running.is_empty() && !self.kv.can_admit(1) {
                // Every admission takes a block at least (its first tokens past its cached
                // blocks, a prompt's last token never cached): with none to give, none is
                // tried (the try would pop the policy's head and push it back unchanged).
                break;
            }
            // A new request is read where the policy can (`QueuePolicy::peek`) and popped once
            // admitted; else popped now, and pushed back if it cannot be admitted.
            let mut popped = false;
            let (mut s, fresh) = if let Some(s) = self.resumable.pop_front() {
                (s, false)
            } else if let Some(request) = policy.peek(index, self.iteration).or_else(|| {
                popped = true;
                policy.pop(index, self.iteration)
            }) {
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
                    prefix: self
                        .retry_prefix
                        .take_if(|(id, _)| *id == request.id)
                        .map(|(_, prefix)| prefix),
                    register_at: u32::MAX,
                    lazy: false,
                    base: 0,
                    pending: NO_PENDING,
                };
                (s, true)
            } else {
                break;
            };
            // Its prompt's resident blocks (a cache's, for a sequence that holds nothing):
            // `hit` of them, `free_hits` of those free now; not looked up (none counted) when
            // it cannot fit whatever they are.
            let caching = s.kv == 0 && self.kv.prefix_cache().is_some();
            if caching {
                self.prompt_blocks(&mut s, hook);
            }
            let fewest = caching.then(|| self.fewest_blocks(&s, *budget));
            let cannot_fit =
                !self.running.is_empty() && fewest.is_some_and(|n| !self.kv.can_admit(n));
            let (hit, free_hits) = if caching && !cannot_fit {
                self.lookup_prefix(&mut s)
            } else {
                self.hits.clear();
                (0, 0)
            };
            let cached = hit as u32 * self.kv.block_size();
            s.kv += cached;
            let tokens = self.next_tokens(&s, *budget);
            let reserve = self.blocks_to_hold(&s, s.kv + tokens) - hit as u64;
            debug_assert!(
                cannot_fit || fewest.is_none_or(|n| reserve + free_hits >= n),
                "an admission needs the fewest blocks it could at least"
            );
            let over_budget = u64::from(tokens) > *budget && *budget < full_budget;
            if cannot_fit
                || over_budget
                || (!self.running.is_empty() && !self.kv.can_admit(reserve + free_hits))
            {
                s.kv -= cached;
                if let Some(p) = s.prefix.as_deref_mut().filter(|_| caching && !cannot_fit) {
                    // Its hits, for the next try to check rather than look up again.
                    p.kept.clear();
                    p.kept.extend_from_slice(&self.hits);
                    p.retry = true;
                }
                if fresh {
                    // Its prompt's blocks are kept for the next try, most often its own.
                    if let Some(prefix) = s.prefix.take() {
                        let old = self.retry_prefix.replace((s.request.id, prefix));
                        self.spare_prefixes.extend(old.map(|(_, prefix)| prefix));
                    }
                    if popped {
                        policy.push(index, *s.request);
                    }
                } else {
                    self.resumable.push_front(s);
                }
                break;
            }
            if let Some(p) = s.prefix.as_deref_mut() {
                p.retry = false;
                self.kv.acquire_cached(&self.hits);
                p.held.extend_from_slice(&self.hits);
                p.registered = hit;
                let from = hit.max(p.own);
                p.deferred = if from < p.blocks.len()
                    && self
                        .kv
                        .prefix_cache()
                        .is_some_and(|cache| cache.names_none(&p.blocks, from))
                {
                    from
                } else {
                    usize::MAX
                };
                s.register_at = p.next_register_at(self.kv.block_size());
                if fresh {
                    self.stats.prefix_lookup_tokens += u64::from(s.request.prompt_tokens);
                    self.stats.prefix_hit_tokens += u64::from(cached);
                } else {
                    self.stats.prefix_rehit_tokens += u64::from(cached);
                }
            }
            if fresh && !popped {
                let taken = policy.pop(index, self.iteration);
                debug_assert_eq!(taken.map(|r| r.id), Some(s.request.id), "peek is pop's");
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

    /// The blocks the admission rule has `s` hold (its cached ones included) once it holds the
    /// KV of `kv` tokens.
    fn blocks_to_hold(&self, s: &Seq, kv: u32) -> u64 {
        match self.config.admission {
            Admission::PromptOnly => self.kv.blocks_for(u64::from(s.prefill_len)),
            Admission::ReserveFull => self
                .kv
                .blocks_for(u64::from(s.prefill_len) + u64::from(s.output - s.generated)),
            Admission::Paged { .. } => self.kv.blocks_for(u64::from(kv)),
        }
    }

    /// The fewest blocks the admission of `s` (holding nothing, its prompt's blocks known)
    /// could need within `budget`, whatever the cache holds: as many as with its first `m`
    /// prompt blocks hit and held by other sequences, `m` the fewer of `SeqPrefix::solo` and
    /// the most `lookup_prefix` may hit. Why: with `h` hits, `k` of them held by others, it
    /// needs `hold(h) - k` (`hold`: the blocks the rule has it hold, hits included; a free hit
    /// leaves the free blocks); `hold(h)` never shrinks as `h` grows and `hold(h) - h` never
    /// grows, and `k` is at most `h` and at most `solo` (no other sequence holds a block past
    /// it), so no `h` needs fewer than `hold(m) - m`. When those do not fit, neither does the
    /// admission, and its lookup is skipped.
    fn fewest_blocks(&self, s: &Seq, budget: u64) -> u64 {
        let p = s.prefix.as_deref().expect("a prompt's blocks");
        let block_size = self.kv.block_size();
        // The blocks `lookup_prefix` may hit are at most its prefill less one token.
        let max = ((s.prefill_len - 1) / block_size) as usize;
        let held = p.solo.min(max) as u32;
        let kv = held * block_size;
        // As `next_tokens` counts the prefill from there (`kv` < `prefill_len`).
        let rest = s.prefill_len - kv;
        let tokens = if self.config.chunked_prefill {
            rest.min(u32::try_from(budget).unwrap_or(u32::MAX))
        } else {
            rest
        };
        self.blocks_to_hold(s, kv + tokens) - u64::from(held)
    }

    /// Fills `s`'s prompt blocks (`Seq::prefix`) if it has none yet, asking `hook` for its
    /// prompt's segments (the replica caches prefixes).
    fn prompt_blocks(&mut self, s: &mut Seq, hook: &mut dyn AdmitHook) {
        let block_size = self.kv.block_size();
        s.prefix.get_or_insert_with(|| {
            self.segments.clear();
            let shared = hook.prefix(&s.request, &mut self.segments);
            let mut p = self.spare_prefixes.pop().unwrap_or_default();
            debug_assert!(p.held.is_empty(), "a finished sequence holds no block");
            p.registered = 0;
            p.deferred = usize::MAX;
            p.retry = false;
            p.blocks.describe(&self.segments, block_size);
            // The blocks that end in the segments past the first `n`: from the one holding
            // their first token.
            let segments = &self.segments;
            let blocks = p.blocks.len();
            let first_past = |n: usize| {
                if n >= segments.len() {
                    return blocks;
                }
                let start: u64 = segments[..n]
                    .iter()
                    .map(|segment| u64::from(segment.tokens))
                    .sum();
                usize::try_from(start / u64::from(block_size))
                    .map_or(blocks, |first| first.min(blocks))
            };
            p.own = first_past(shared.later);
            p.solo = first_past(shared.beside);
            p
        });
    }

    /// How many of the leading full blocks of `s`'s prompt (`prompt_blocks`) are resident in
    /// the prefix cache (at most its prefill less one token), and how many of those are free;
    /// their slots into `hits`. After a failed try, the hits it kept when they still hold.
    fn lookup_prefix(&mut self, s: &mut Seq) -> (usize, u64) {
        let cache = self.kv.prefix_cache().expect("a prefix cache");
        let prefix = s.prefix.as_deref_mut().expect("a prompt's blocks");
        let max = ((s.prefill_len - 1) / self.kv.block_size()) as usize;
        if prefix.retry {
            let len = max.min(prefix.blocks.len());
            if let Some(answer) =
                cache.lookup_again(len, &prefix.reads, &prefix.kept, &mut self.hits)
            {
                #[cfg(debug_assertions)]
                {
                    let mut fresh = Vec::new();
                    let reads = &mut LookupReads::default();
                    let again = cache.lookup(&prefix.blocks, max, &mut fresh, reads);
                    assert_eq!((again, &fresh), (answer, &self.hits), "a kept lookup holds");
                }
                #[cfg(test)]
                {
                    self.lookups_kept += 1;
                }
                return answer;
            }
        }
        #[cfg(test)]
        {
            self.lookups += 1;
        }
        cache.lookup(&prefix.blocks, max, &mut self.hits, &mut prefix.reads)
    }

    /// Prefix lookups made so far.
    #[cfg(test)]
    pub(crate) fn lookups(&self) -> u64 {
        self.lookups
    }

    /// Prefix lookups answered by the hits a failed try kept.
    #[cfg(test)]
    pub(crate) fn lookups_kept(&self) -> u64 {
        self.lookups_kept
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
                lazy: false,
                base: 0,
                pending: NO_PENDING,
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
            emitting: tally.emitting,
            prefill_square: tally.prefill_square,
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
        let mut eager = std::mem::take(&mut self.eager);
        if self.group.members == 0 {
            eager.clear();
            eager.extend(0..self.running.len() as u32);
        }
        // The members whose last token this step emits leave the group, completed one by one
        // in their places below; the others each emit a token (one run of equal gaps, as the
        // pass records them).
        let mut ending = std::mem::take(&mut self.group.ending);
        self.group.finishing.take(self.iteration, &mut ending);
        for entry in ending.drain(..) {
            let i = entry.place as usize;
            let Some(s) = self.running.get(i) else {
                continue;
            };
            if !s.lazy
                || s.order != entry.order
                || entry.at != self.iteration
                || s.base + u64::from(s.output - s.generated) != entry.at
            {
                // Stale: it left the group since (and may have joined again).
                continue;
            }
            self.leave(i, true);
            let k = eager.partition_point(|&p| p < i as u32);
            eager.insert(k, i as u32);
        }
        self.group.ending = ending;
        let g = &mut self.group;
        if g.members > 0 {
            self.stats.latencies.token_gaps((now - g.last).0, g.members);
            self.stats.tokens += g.members;
            self.run_steps += 1;
        }
        g.last = now;
        // The sequences out of the group, in their places. Token gaps are recorded as runs of
        // equal gaps (most of a step's sequences emitted their previous token at the previous
        // step's end): one histogram update per run.
        let (mut gap_ns, mut gaps) = (0u64, 0u64);
        let (mut read, mut write) = (0, 0);
        while read < eager.len() {
            let i = eager[read] as usize;
            let s = &mut self.running[i];
            if s.scheduled == 0 {
                eager[write] = i as u32;
                (read, write) = (read + 1, write + 1);
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
                // Those before `deferred` (`SeqPrefix::deferred`).
                let full = p.blocks.len().min((s.kv / block_size) as usize);
                let from = p.registered;
                let to = full.min(p.deferred).max(from);
                self.kv.register_cached(&p.blocks, from, to, &mut p.held);
                p.registered = full.max(from);
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
                // It leaves; the batch's last sequence takes its place (and is completed next
                // there, unless it is a member of the group).
                let last = self.running.len() - 1;
                let mut done = self.running.swap_remove(i);
                free_blocks(&mut self.kv, &mut done);
                if let Some(prefix) = done.prefix.take() {
                    self.spare_prefixes.push(prefix);
                }
                self.stats.completed += 1;
                self.stats.sojourn_ns += u128::from((now - done.request.submitted).0);
                self.stats.latencies.finished(now, &done);
                self.stats.population(now, -1);
                finished.push(done);
                if i == last {
                    read += 1;
                } else if self.running[i].lazy {
                    let s = &mut self.running[i];
                    let at = s.base + u64::from(s.output - s.generated);
                    s.pending = (at, i as u32);
                    self.group.finishing.moved(at, s.order, i as u32);
                    read += 1;
                } else {
                    // Out of the group, so the last of `eager`: now at `i`, completed next.
                    debug_assert_eq!(eager.last(), Some(&(last as u32)));
                    eager.pop();
                }
            } else {
                if self.may_join(i, now) {
                    self.join(i);
                } else {
                    eager[write] = i as u32;
                    write += 1;
                }
                read += 1;
            }
        }
        eager.truncate(write);
        self.eager = eager;
        self.stats.latencies.token_gaps(gap_ns, gaps);
    }
}

#[cfg(test)]
mod tests {
    use super::DecodeGroup;
    use rand::RngExt;

    #[test]
    fn the_phase_is_the_difference_modulo_the_block_size() {
        let mut rng = crate::rng::stream(5, "decode-group-phase");
        for block_size in [1u32, 2, 3, 7, 16, 32, 48, 64, 128] {
            let bs = i128::from(block_size);
            for _ in 0..2_000 {
                let kv: u32 = rng.random();
                // Bases beyond u32 too: the wrapped difference must still give the residue.
                let base: u64 = if rng.random::<bool>() {
                    rng.random_range(0..1 << 20)
                } else {
                    rng.random()
                };
                let expected = (i128::from(kv) - i128::from(base)).rem_euclid(bs) as usize;
                assert_eq!(
                    DecodeGroup::phase(kv, base, block_size),
                    expected,
                    "kv {kv} base {base} block size {block_size}"
                );
            }
        }
    }
}
