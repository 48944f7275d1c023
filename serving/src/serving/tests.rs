//! Replica tests against schedules worked out by hand (each test writes its expected schedule
//! out), and Little's law on the replica's own metrics over a Poisson run driven by an engine
//! `Model`.

use super::*;
use crate::arrivals::{ArrivalProcess, Poisson};
use crate::engine::{self, Model};
use crate::event_queue::EventQueue;
use crate::rng::stream;
use crate::time::{SimDuration, SimTime};
use rand::RngExt;
use std::collections::{BTreeMap, VecDeque};

/// FCFS per replica (families' tests drive their replicas with it too).
#[derive(Default)]
pub(crate) struct Fifo(Vec<VecDeque<QueuedRequest>>);
impl QueuePolicy for Fifo {
    fn name(&self) -> &'static str {
        "fcfs"
    }
    fn reset(&mut self, n: usize) {
        self.0 = vec![VecDeque::new(); n];
    }
    fn push(&mut self, e: usize, r: QueuedRequest) {
        // Pushed back after a refused admission: it keeps its place at the head.
        let at = self.0[e].partition_point(|q| q.id < r.id);
        self.0[e].insert(at, r);
    }
    fn pop(&mut self, e: usize, _: u64) -> Option<QueuedRequest> {
        self.0[e].pop_front()
    }
    fn len(&self, e: usize) -> usize {
        self.0[e].len()
    }
}

/// Output lengths by request id; records admissions (time, id).
#[derive(Default)]
struct Outputs {
    output: BTreeMap<u64, u32>,
    admitted: Vec<(SimTime, u64)>,
}
impl AdmitHook for Outputs {
    fn output_tokens(&mut self, r: &QueuedRequest) -> u32 {
        self.output[&r.id]
    }
    fn admitted(&mut self, now: SimTime, r: &QueuedRequest, _: u32) {
        self.admitted.push((now, r.id));
    }
}

pub(crate) fn request(id: u64, prompt: u32, submitted: SimTime) -> QueuedRequest {
    QueuedRequest {
        id,
        workflow: id,
        stage: 0,
        submitted,
        workflow_arrival: submitted,
        enqueued_iteration: 0,
        prompt_tokens: prompt,
        predicted_stage_tokens: 0.0,
        predicted_total_tokens: 0.0,
        attained_service: 0,
        rank_noise: 0.0,
        topic: 0,
    }
}

fn config(max_num_seqs: usize, budget: Option<u64>, chunked: bool) -> ReplicaConfig {
    ReplicaConfig {
        max_num_seqs,
        max_num_batched_tokens: budget,
        chunked_prefill: chunked,
        kv: KvConfig {
            block_size: 1,
            blocks: 1_000_000,
            watermark_blocks: 0,
        },
        admission: Admission::PromptOnly,
        batching: Batching::Continuous,
    }
}

/// One step as scheduled: (prefill tokens, decode tokens, context tokens, ids in the step).
type Step = (u64, u64, u64, Vec<u64>);

/// Runs `requests` (id, prompt, output), all submitted at 0, to completion with 10 ns steps;
/// returns each step, the ids finished after each, the stats and the hook.
struct Trace {
    steps: Vec<Step>,
    finished: Vec<Vec<u64>>,
    /// (id, first admitted, first token) of each finished sequence, in finishing order.
    moments: Vec<(u64, SimTime, SimTime)>,
    swaps: Vec<(u64, u64)>,
    stats: ReplicaStats,
    peak_blocks: u64,
    hook: Outputs,
}

fn trace(config: ReplicaConfig, requests: &[(u64, u32, u32)]) -> Trace {
    trace_in_order(config, StepOrder::DecodeFirst, requests)
}

fn trace_in_order(config: ReplicaConfig, order: StepOrder, requests: &[(u64, u32, u32)]) -> Trace {
    config.validate().unwrap();
    let mut replica = Replica::new(config).with_step_order(order);
    let mut policy = Fifo::default();
    policy.reset(1);
    let mut hook = Outputs::default();
    for &(id, prompt, output) in requests {
        hook.output.insert(id, output);
        replica.submit(
            SimTime::ZERO,
            request(id, prompt, SimTime::ZERO),
            &mut policy,
            0,
        );
    }
    let (mut steps, mut finished, mut swaps, mut moments) = (vec![], vec![], vec![], vec![]);
    let mut now = SimTime::ZERO;
    while let Some(work) = replica.schedule(now, &mut policy, 0, &mut hook) {
        let step = (work.prefill_tokens, work.decode_tokens, work.context_tokens);
        swaps.push((work.swapped_out_tokens, work.swapped_in_tokens));
        // The hook names no adapter, so no step counts any.
        assert!(work.adapters.is_empty());
        let in_step = || work.batch.iter().filter(|s| s.scheduled() > 0);
        assert_eq!(
            in_step().map(|s| u64::from(s.step_context())).sum::<u64>(),
            step.2
        );
        assert_eq!(
            in_step().map(|s| u64::from(s.step_prefill())).sum::<u64>(),
            step.0
        );
        assert_eq!(in_step().count() as u64, work.requests);
        let mut ids: Vec<u64> = replica
            .running()
            .iter()
            .filter(|s| s.scheduled() > 0)
            .map(|s| s.request.id)
            .collect();
        ids.sort_unstable();
        steps.push((step.0, step.1, step.2, ids));
        replica.begin_step(SimDuration(10));
        now += SimDuration(10);
        let mut done = vec![];
        replica.complete_step(now, &mut done);
        let mut ids: Vec<u64> = done.iter().map(|s| s.request.id).collect();
        ids.sort_unstable();
        finished.push(ids);
        moments.extend(
            done.iter()
                .map(|s| (s.request.id, s.admitted(), s.first_token())),
        );
        assert!(steps.len() < 1000, "the schedule does not end");
    }
    assert_eq!(policy.len(0), 0);
    Trace {
        steps,
        finished,
        moments,
        swaps,
        stats: replica.stats().clone(),
        peak_blocks: replica.kv().peak(),
        hook,
    }
}

#[test]
fn chunked_prefill_splits_a_long_prompt_across_steps() {
    // Budget 8 tokens per step. A: prompt 20, output 2. B: prompt 3, output 1.
    // s1: A chunk 8 (ctx 8), budget spent, B waits.     s2: A chunk 8 (ctx 16).
    // s3: A last chunk 4 (ctx 20, emits 1); B fits in the 4 left: prefill 3 (ctx 3), emits, done.
    // s4: A decodes (ctx 21), emits 2, done.
    let t = trace(config(8, Some(8), true), &[(1, 20, 2), (2, 3, 1)]);
    assert_eq!(
        t.steps,
        vec![
            (8, 0, 8, vec![1]),
            (8, 0, 16, vec![1]),
            (7, 0, 23, vec![1, 2]),
            (0, 1, 21, vec![1]),
        ]
    );
    assert_eq!(t.finished, vec![vec![], vec![], vec![2], vec![1]]);
    assert_eq!(t.hook.admitted, vec![(SimTime(0), 1), (SimTime(20), 2)]);
    assert_eq!((t.stats.tokens, t.stats.prefill_tokens), (3, 23));
    // Each sequence knows when it was admitted and emitted its first token: B admitted at 20
    // (s3's start), first token at 30; A admitted at 0, first token at the end of s3.
    assert_eq!(
        t.moments,
        vec![(2, SimTime(20), SimTime(30)), (1, SimTime(0), SimTime(30))]
    );
    // Without chunking the whole prompt runs in the first step.
    let t = trace(config(8, None, false), &[(1, 20, 2), (2, 3, 1)]);
    assert_eq!(t.steps, vec![(23, 0, 23, vec![1, 2]), (0, 1, 21, vec![1])]);
}

#[test]
fn the_token_budget_and_max_num_seqs_limit_a_step() {
    // Budget 10, no chunking. A: prompt 6, out 3; B: prompt 6, out 1; C: prompt 2, out 1.
    // s1: A (6, 4 left); B's 6 > 4: B and C behind it wait.
    // s2: A decodes (1, 9 left), B (6, 3 left), C (2, 1 left): prefill 8, ctx 7 + 6 + 2.
    // s3: A decodes (ctx 8), done.
    let t = trace(
        config(8, Some(10), false),
        &[(1, 6, 3), (2, 6, 1), (3, 2, 1)],
    );
    assert_eq!(
        t.steps,
        vec![
            (6, 0, 6, vec![1]),
            (8, 1, 15, vec![1, 2, 3]),
            (0, 1, 8, vec![1])
        ]
    );
    assert_eq!(t.finished, vec![vec![], vec![2, 3], vec![1]]);
    // max_num_seqs 2, prompts of 4. A: out 2; B, C: out 1.
    // s1: A, B (ctx 8); B done.  s2: A decodes (ctx 5), C joins (ctx 4); both done.
    let t = trace(config(2, None, false), &[(1, 4, 2), (2, 4, 1), (3, 4, 1)]);
    assert_eq!(t.steps, vec![(8, 0, 8, vec![1, 2]), (4, 1, 9, vec![1, 3])]);
    assert_eq!(t.finished, vec![vec![2], vec![1, 3]]);
}

#[test]
fn static_batching_admits_only_into_an_empty_replica() {
    // max_num_seqs 2, prompts of 4. A: out 3; B, C: out 1.
    // s1: A, B.  s2: A alone (B left, C may not join a running batch).  s3: A, done.  s4: C.
    let mut c = config(2, None, false);
    c.batching = Batching::Static;
    let t = trace(c, &[(1, 4, 3), (2, 4, 1), (3, 4, 1)]);
    assert_eq!(
        t.steps,
        vec![
            (8, 0, 8, vec![1, 2]),
            (0, 1, 5, vec![1]),
            (0, 1, 6, vec![1]),
            (4, 0, 4, vec![3])
        ]
    );
    assert_eq!(
        t.hook.admitted,
        vec![(SimTime(0), 1), (SimTime(0), 2), (SimTime(30), 3)]
    );
    // Continuous: C joins at s2.
    let t = trace(config(2, None, false), &[(1, 4, 3), (2, 4, 1), (3, 4, 1)]);
    assert_eq!(t.steps[1], (4, 1, 9, vec![1, 3]));
}

/// Output lengths and adapters by request id (no entry: no adapter).
#[derive(Default)]
struct WithAdapters {
    output: BTreeMap<u64, u32>,
    adapter: BTreeMap<u64, u32>,
}
impl AdmitHook for WithAdapters {
    fn output_tokens(&mut self, r: &QueuedRequest) -> u32 {
        self.output[&r.id]
    }
    fn admitted(&mut self, _: SimTime, _: &QueuedRequest, _: u32) {}
    fn adapter(&mut self, r: &QueuedRequest) -> Option<u32> {
        self.adapter.get(&r.id).copied()
    }
}

#[test]
fn a_step_counts_its_tokens_per_adapter() {
    // Budget 10, no chunking. (prompt, output, adapter): A (4, 2, 2), B (3, 3, 0), C (5, 1, 2),
    // D (2, 1, none).
    // s1: A prefills 4, B 3 (3 left); C's 5 > 3 waits, D behind it.  Adapter 0: 3, 2: 4.
    // s2: A, B decode 1 each; C prefills 5, D 2.  Adapter 0: 1 (B), 2: 1 + 5 (A, C); D none.
    //     A, C, D finish.
    // s3: B decodes.  Adapter 0: 1.
    let mut replica = Replica::new(config(8, Some(10), false));
    let mut policy = Fifo::default();
    policy.reset(1);
    let mut hook = WithAdapters::default();
    for (id, prompt, output, adapter) in [
        (1, 4, 2, Some(2)),
        (2, 3, 3, Some(0)),
        (3, 5, 1, Some(2)),
        (4, 2, 1, None),
    ] {
        hook.output.insert(id, output);
        if let Some(a) = adapter {
            hook.adapter.insert(id, a);
        }
        replica.submit(
            SimTime::ZERO,
            request(id, prompt, SimTime::ZERO),
            &mut policy,
            0,
        );
    }
    let tokens = |pairs: &[(u32, u64)]| -> Vec<AdapterTokens> {
        pairs
            .iter()
            .map(|&(adapter, tokens)| AdapterTokens { adapter, tokens })
            .collect()
    };
    let expected = [
        tokens(&[(0, 3), (2, 4)]),
        tokens(&[(0, 1), (2, 6)]),
        tokens(&[(0, 1)]),
    ];
    let mut now = SimTime::ZERO;
    let mut finished = vec![];
    for (step, want) in expected.iter().enumerate() {
        let work = replica
            .schedule(now, &mut policy, 0, &mut hook)
            .expect("a step runs");
        assert_eq!(work.adapters, &want[..], "step {}", step + 1);
        replica.begin_step(SimDuration(10));
        now += SimDuration(10);
        replica.complete_step(now, &mut finished);
    }
    assert!(replica.schedule(now, &mut policy, 0, &mut hook).is_none());
    let mut adapters: Vec<(u64, Option<u32>)> = finished
        .iter()
        .map(|s| (s.request.id, s.adapter()))
        .collect();
    adapters.sort_unstable();
    assert_eq!(
        adapters,
        vec![(1, Some(2)), (2, Some(0)), (3, Some(2)), (4, None)]
    );
}

#[test]
fn prefill_first_runs_admissions_alone_and_pauses_decodes() {
    // vLLM v0's order, budget 10, no chunking. A: prompt 6, out 3; B: prompt 6, out 1;
    // C: prompt 2, out 1.
    // s1: A admitted (6, 4 left), B's 6 > 4 waits: a prefill-only step.
    // s2: B (6) and C (2) admitted, A paused: prefill 8, ctx 8; B and C emit and finish.
    // s3: nothing to admit: A decodes (ctx 7).  s4: A decodes (ctx 8), done.
    let requests = &[(1, 6, 3), (2, 6, 1), (3, 2, 1)];
    let t = trace_in_order(
        config(8, Some(10), false),
        StepOrder::PrefillFirst,
        requests,
    );
    assert_eq!(
        t.steps,
        vec![
            (6, 0, 6, vec![1]),
            (8, 0, 8, vec![2, 3]),
            (0, 1, 7, vec![1]),
            (0, 1, 8, vec![1]),
        ]
    );
    assert_eq!(t.finished, vec![vec![], vec![2, 3], vec![], vec![1]]);
    // Decode-first mixes them instead (the budget test above): A decodes in s2.
    let mixed = trace(config(8, Some(10), false), requests);
    assert_eq!(mixed.steps[1], (8, 1, 15, vec![1, 2, 3]));
}

#[test]
fn prefill_first_pauses_running_decodes_for_a_late_arrival() {
    // A (prompt 4, out 3) alone; B (prompt 4, out 1) arrives after A's prefill step.
    // s1 [0, 10): A prefills, emits 1.  s2 [10, 20): B admitted, prefill only (A paused); B
    // emits and finishes at 20.  s3, s4: A decodes (ctx 5, 6), finishes at 40.
    let mut replica = Replica::new(config(8, None, false)).with_step_order(StepOrder::PrefillFirst);
    assert_eq!(replica.step_order(), StepOrder::PrefillFirst);
    let mut policy = Fifo::default();
    policy.reset(1);
    let mut hook = Outputs::default();
    hook.output.insert(1, 3);
    hook.output.insert(2, 1);
    replica.submit(SimTime(0), request(1, 4, SimTime(0)), &mut policy, 0);
    let mut steps = vec![];
    let mut now = SimTime(0);
    let mut done = vec![];
    while let Some(work) = replica.schedule(now, &mut policy, 0, &mut hook) {
        steps.push((work.prefill_tokens, work.decode_tokens, work.context_tokens));
        replica.begin_step(SimDuration(10));
        now += SimDuration(10);
        replica.complete_step(now, &mut done);
        if now == SimTime(10) {
            hook.output.insert(2, 1);
            replica.submit(now, request(2, 4, now), &mut policy, 0);
        }
    }
    assert_eq!(steps, vec![(4, 0, 4), (4, 0, 4), (0, 1, 5), (0, 1, 6)]);
    let finish: Vec<(u64, SimTime)> = done
        .iter()
        .map(|s| (s.request.id, s.last_token()))
        .collect();
    assert_eq!(finish, vec![(2, SimTime(20)), (1, SimTime(40))]);
}

/// Block size 4, 5 blocks (20 tokens), no watermark.
fn small_cache(admission: Admission) -> ReplicaConfig {
    let mut c = config(8, None, false);
    c.kv = KvConfig {
        block_size: 4,
        blocks: 5,
        watermark_blocks: 0,
    };
    c.admission = admission;
    c
}

/// A and B: prompt 6, output 4 each.
const PAIR: &[(u64, u32, u32)] = &[(1, 6, 4), (2, 6, 4)];

#[test]
fn prompt_only_admission_counts_the_prompt_and_overcommits_growth() {
    // A, B reserve ceil(6/4) = 2 blocks each (4 of 5). Contexts 12, 14, 16, 18: at s4 each holds
    // 9 tokens = 3 blocks, 6 in use of 5, and nobody is preempted.
    let t = trace(small_cache(Admission::PromptOnly), PAIR);
    let ctx: Vec<u64> = t.steps.iter().map(|s| s.2).collect();
    assert_eq!(ctx, vec![12, 14, 16, 18]);
    assert_eq!(t.peak_blocks, 6);
    assert_eq!(t.stats.preempted_recompute + t.stats.preempted_swap, 0);
    // A watermark of 2 blocks refuses B at first (2 + 2 + 2 > 5): B runs after A.
    let mut c = small_cache(Admission::PromptOnly);
    c.kv.watermark_blocks = 2;
    let t = trace(c, PAIR);
    assert_eq!(t.hook.admitted, vec![(SimTime(0), 1), (SimTime(40), 2)]);
}

#[test]
fn reserve_full_admission_waits_for_prompt_plus_output() {
    // Each needs ceil((6 + 4)/4) = 3 blocks; 3 + 3 > 5, so B is admitted when A finishes (s5).
    let t = trace(small_cache(Admission::ReserveFull), PAIR);
    assert_eq!(t.hook.admitted, vec![(SimTime(0), 1), (SimTime(40), 2)]);
    assert_eq!(t.steps.len(), 8);
    assert_eq!(t.peak_blocks, 3);
}

#[test]
fn kv_exhaustion_preempts_the_newest_and_recomputes_it() {
    // s1: A, B admitted, 2 blocks each (ctx 12).  s2: ctx 14, s3: ctx 16, same blocks.
    // s4: each needs a 3rd block (9 tokens): A takes the last free one; B finds none and, being
    //     the most recently admitted, is preempted (its 2 blocks freed; 3 tokens generated).
    //     Resuming B needs ceil(9/4) = 3 blocks, 3 used + 3 > 5: A runs alone (ctx 9), finishes.
    // s5: B prefills its prompt and its 3 tokens again (9), emits its 4th token, finishes.
    let t = trace(
        small_cache(Admission::Paged {
            preemption: Preemption::Recompute,
        }),
        PAIR,
    );
    assert_eq!(
        t.steps,
        vec![
            (12, 0, 12, vec![1, 2]),
            (0, 2, 14, vec![1, 2]),
            (0, 2, 16, vec![1, 2]),
            (0, 1, 9, vec![1]),
            (9, 0, 9, vec![2]),
        ]
    );
    assert_eq!(t.finished, vec![vec![], vec![], vec![], vec![1], vec![2]]);
    assert_eq!(t.stats.preempted_recompute, 1);
    assert_eq!(t.stats.tokens, 8, "no output token is emitted twice");
    // B's lost prefill (6) and its 3 generated tokens are prefilled again: 12 + 9.
    assert_eq!(t.stats.recomputed_tokens, 9);
    assert_eq!(t.stats.prefill_tokens, 12 + t.stats.recomputed_tokens);
    // Resumption moves neither B's admission nor its first token.
    assert_eq!(t.moments[1], (2, SimTime(0), SimTime(10)));
    assert_eq!(
        t.stats.admitted, 2,
        "a resumed sequence is not a new admission"
    );
    assert!(t.peak_blocks <= 5);
}

#[test]
fn kv_exhaustion_preempts_by_swap_and_swaps_back() {
    // As with recompute up to s4, but B's 8 cached tokens go to host memory (s4 carries them)
    // and come back at s5 (3 blocks, B alone), where B decodes its 4th token (ctx 9).
    let t = trace(
        small_cache(Admission::Paged {
            preemption: Preemption::Swap,
        }),
        PAIR,
    );
    assert_eq!(
        t.steps,
        vec![
            (12, 0, 12, vec![1, 2]),
            (0, 2, 14, vec![1, 2]),
            (0, 2, 16, vec![1, 2]),
            (0, 1, 9, vec![1]),
            (0, 1, 9, vec![2]),
        ]
    );
    assert_eq!(t.swaps, vec![(0, 0), (0, 0), (0, 0), (8, 0), (0, 8)]);
    assert_eq!(t.stats.preempted_swap, 1);
    assert_eq!(t.stats.tokens, 8);
}

#[test]
fn a_lone_request_larger_than_the_cache_still_runs() {
    // 30 tokens of prompt in a 20-token cache: admitted alone, overcommitting, never preempted.
    for admission in [
        Admission::PromptOnly,
        Admission::ReserveFull,
        Admission::Paged {
            preemption: Preemption::Recompute,
        },
    ] {
        let t = trace(small_cache(admission), &[(1, 30, 2)]);
        assert_eq!(t.steps.len(), 2, "{admission:?}");
    }
}

/// A batch former over a window of the `window` oldest waiting requests that takes the longest
/// prompts first (ties: the older), so its batches are not arrival order; outputs by id.
struct LongestPromptFirst {
    waiting: VecDeque<QueuedRequest>,
    window: usize,
    outputs: Outputs,
}

impl AdmitHook for LongestPromptFirst {
    fn output_tokens(&mut self, r: &QueuedRequest) -> u32 {
        self.outputs.output_tokens(r)
    }
    fn admitted(&mut self, now: SimTime, r: &QueuedRequest, output: u32) {
        self.outputs.admitted(now, r, output);
    }
}

impl BatchFormer for LongestPromptFirst {
    fn form(&mut self, capacity: usize, batch: &mut Vec<QueuedRequest>) {
        let window = self.window.min(self.waiting.len());
        let mut picks: Vec<usize> = (0..window).collect();
        picks.sort_by_key(|&i| std::cmp::Reverse(self.waiting[i].prompt_tokens));
        picks.truncate(capacity);
        picks.sort_unstable();
        for &i in picks.iter().rev() {
            batch.push(self.waiting.remove(i).expect("inside the window"));
        }
        batch.reverse();
    }
    fn put_back(&mut self, requests: Vec<QueuedRequest>) {
        for request in requests.into_iter().rev() {
            self.waiting.push_front(request);
        }
    }
}

#[test]
fn a_formed_static_batch_runs_as_one_padded_step() {
    // max_num_seqs 2, block size 4, window 3. (id, prompt, output): 1 (4, 3), 2 (5, 1),
    // 3 (6, 2), 4 (2, 1), all waiting at 0. Each step lasts 10 ns.
    // s1 at 0: window {1, 2, 3}, longest prompts 3 and 2, in arrival order [2, 3]. Longest output
    //    2: 1 decode iteration; prefill 5 + 6 = 11, decode 2 x 1 = 2, context (5 + 1) + (6 + 1)
    //    = 13; blocks ceil(6/4) + ceil(7/4) = 4. Both finish at 10: 3 emits 2 tokens, 2 emits 1
    //    (its second pass is padding).
    // s2 at 10: window {1, 4}: [1, 4]. Longest output 3: 2 decode iterations; prefill 4 + 2 = 6,
    //    decode 2 x 2 = 4, context (4 + 2) + (2 + 2) = 10; blocks 2 + 1. Emits 3 + 1.
    // Then nothing waits: `None`, the replica idle.
    let mut c = config(2, None, false);
    c.batching = Batching::Static;
    c.kv.block_size = 4;
    let mut replica = Replica::new(c);
    let mut former = LongestPromptFirst {
        waiting: VecDeque::new(),
        window: 3,
        outputs: Outputs::default(),
    };
    for (id, prompt, output) in [(1, 4, 3), (2, 5, 1), (3, 6, 2), (4, 2, 1)] {
        former.outputs.output.insert(id, output);
        former.waiting.push_back(request(id, prompt, SimTime::ZERO));
        replica.submitted(SimTime::ZERO);
    }
    let mut now = SimTime::ZERO;
    let mut steps = vec![];
    let mut finished = vec![];
    while let Some(work) = replica.schedule_static_batch(now, &mut former) {
        let ids: Vec<u64> = work.batch.iter().map(|s| s.request.id).collect();
        steps.push((
            ids,
            work.prefill_tokens,
            work.decode_tokens,
            work.decode_iterations,
            work.context_tokens,
        ));
        assert_eq!(work.requests, steps.last().unwrap().0.len() as u64);
        replica.begin_step(SimDuration(10));
        now += SimDuration(10);
        let mut done = vec![];
        replica.complete_step(now, &mut done);
        assert!(replica.running().is_empty(), "a static batch leaves whole");
        let mut ids: Vec<(u64, u32)> = done.iter().map(|s| (s.request.id, s.generated)).collect();
        ids.sort_unstable();
        finished.push(ids);
    }
    assert_eq!(
        steps,
        vec![(vec![2, 3], 11, 2, 1, 13), (vec![1, 4], 6, 4, 2, 10)]
    );
    assert_eq!(finished, vec![vec![(2, 1), (3, 2)], vec![(1, 3), (4, 1)]]);
    assert_eq!(
        former.outputs.admitted,
        vec![
            (SimTime(0), 2),
            (SimTime(0), 3),
            (SimTime(10), 1),
            (SimTime(10), 4)
        ]
    );
    assert!(!replica.is_busy());
    assert_eq!(replica.kv().peak(), 4);
    assert_eq!(replica.kv().used(), 0);
    let stats = replica.stats();
    assert_eq!((stats.steps, stats.batch_sum, stats.busy_ns), (2, 4, 20));
    assert_eq!(
        (stats.admitted, stats.completed, stats.in_system),
        (4, 4, 0)
    );
    assert_eq!((stats.prefill_tokens, stats.tokens), (17, 7));
    // Sojourns: 2 and 3 leave at 10, 1 and 4 at 20.
    assert_eq!(stats.sojourn_ns, 60);
    assert_eq!(stats.mean_in_system(now), 3.0);
}

#[test]
fn invalid_configurations_are_refused() {
    let mut c = config(8, None, true);
    assert!(c.validate().unwrap_err().contains("chunked_prefill"));
    c.chunked_prefill = false;
    c.max_num_seqs = 0;
    assert!(c.validate().unwrap_err().contains("max_num_seqs"));
    let mut c = config(8, None, false);
    c.kv.block_size = 0;
    assert!(c.validate().unwrap_err().contains("block_size"));
}

/// A Poisson stream into one replica on the engine loop: each step costs 2 ms plus 20 us per
/// prompt token and 5 us per sequence.
struct PoissonReplica {
    arrivals: Poisson,
    rng: crate::rng::SimRng,
    replica: Replica,
    policy: Fifo,
    hook: Outputs,
    next_id: u64,
    done: Vec<Seq>,
    end: SimTime,
}

enum Ev {
    Arrival,
    StepEnd,
}

impl PoissonReplica {
    fn start_step(&mut self, now: SimTime, events: &mut EventQueue<Ev>) {
        if let Some(work) = self
            .replica
            .schedule(now, &mut self.policy, 0, &mut self.hook)
        {
            let ns = 2_000_000 + 20_000 * work.prefill_tokens + 5_000 * work.requests;
            self.replica.begin_step(SimDuration(ns));
            events.schedule(now + SimDuration(ns), Ev::StepEnd);
        }
    }
}

impl Model for PoissonReplica {
    type Event = Ev;
    fn start(&mut self, events: &mut EventQueue<Ev>) {
        if let Some(a) = self.arrivals.next_arrival() {
            events.schedule(a.time, Ev::Arrival);
        }
    }
    fn handle(&mut self, now: SimTime, event: Ev, events: &mut EventQueue<Ev>) {
        match event {
            Ev::Arrival => {
                let id = self.next_id;
                self.next_id += 1;
                self.hook.output.insert(id, self.rng.random_range(1..=64));
                let r = request(id, self.rng.random_range(16..=256), now);
                self.replica.submit(now, r, &mut self.policy, 0);
                if let Some(a) = self.arrivals.next_arrival() {
                    events.schedule(a.time, Ev::Arrival);
                }
                if !self.replica.is_busy() {
                    self.start_step(now, events);
                }
            }
            Ev::StepEnd => {
                self.replica.complete_step(now, &mut self.done);
                self.end = now;
                self.start_step(now, events);
            }
        }
    }
}

#[test]
fn littles_law_holds_on_the_replica_metrics() {
    let mut c = config(16, Some(512), true);
    c.kv = KvConfig {
        block_size: 16,
        blocks: 96,
        watermark_blocks: 2,
    };
    c.admission = Admission::Paged {
        preemption: Preemption::Recompute,
    };
    let n = 20_000;
    let mut model = PoissonReplica {
        arrivals: Poisson::new(40.0, n, 1, stream(7, "arrivals")),
        rng: stream(7, "lengths"),
        replica: Replica::new(c),
        policy: Fifo::default(),
        hook: Outputs::default(),
        next_id: 0,
        done: vec![],
        end: SimTime::ZERO,
    };
    model.policy.reset(1);
    engine::run(&mut model);
    let stats = model.replica.stats();
    assert_eq!(stats.completed, n as u64);
    assert_eq!(stats.in_system, 0);
    assert!(stats.preempted_recompute > 0, "the cache was never full");
    // L = lambda W over [0, end], the system empty at both ends: the time integral of the
    // population equals the sum of the sojourns, and so L = (completed / T) x mean sojourn.
    let end = model.end;
    let l = stats.mean_in_system(end);
    let lambda = stats.completed as f64 / end.0 as f64;
    let w = stats.mean_sojourn_ns();
    assert!(
        (l - lambda * w).abs() <= 1e-9 * l,
        "L {l} vs lambda W {}",
        lambda * w
    );
    assert!(
        l > 1.0,
        "a loaded replica holds more than one request on average: {l}"
    );
    // Every output token was emitted once.
    let outputs: u64 = model.hook.output.values().map(|&o| u64::from(o)).sum();
    assert_eq!(stats.tokens, outputs);
}

/// A step as a dense model's roofline reads it (`StepWork::dense_tokens`), worked by hand:
/// request 0 (prompt 6) prefills alone: 6 rows, 1 sequence, 6 cached, 6^2 = 36; then request 1
/// (prompt 4) prefills beside request 0's first decode: 4 + 1 = 5 rows, 2 sequences, 7 + 4 = 11
/// cached, only the prefilling prompt squared (16); then both decode: 2 rows, 8 + 5 = 13 cached,
/// no prefill term.
#[test]
fn a_step_reads_as_rows_sequences_context_and_squared_prefills() {
    let mut replica = Replica::new(config(4, None, false));
    let mut policy = Fifo::default();
    policy.reset(1);
    let mut hook = Outputs::default();
    hook.output.insert(0, 3);
    hook.output.insert(1, 2);
    let mut now = SimTime::ZERO;
    replica.submit(now, request(0, 6, now), &mut policy, 0);
    let mut read = Vec::new();
    for step in 0..3 {
        if step == 1 {
            replica.submit(now, request(1, 4, now), &mut policy, 0);
        }
        let work = replica.schedule(now, &mut policy, 0, &mut hook).unwrap();
        let tokens = work.dense_tokens();
        read.push((
            tokens.rows,
            tokens.sequences,
            tokens.context_tokens,
            tokens.prefill_square,
        ));
        replica.begin_step(SimDuration(10));
        now += SimDuration(10);
        replica.complete_step(now, &mut Vec::new());
    }
    assert_eq!(
        read,
        vec![(6, 1, 6, 36.0), (5, 2, 11, 16.0), (2, 2, 13, 0.0)]
    );
}

#[test]
fn the_less_measured_of_two_sources_follows_measured_scaled_analytic_reference() {
    use CostSource::*;
    // The order, written out: a measurement of this device, a measurement carried to another
    // shape, the datasheet roofline, a queueing reference with no cost model.
    let order = [Measured, Scaled, Analytic, Reference];
    for (i, &a) in order.iter().enumerate() {
        for (j, &b) in order.iter().enumerate() {
            let expected = order[i.max(j)];
            assert_eq!(a.less_measured(b), expected, "{a:?} vs {b:?}");
        }
    }
    assert_eq!(Measured.cost_model_name(), "measured");
    assert_eq!(Analytic.cost_model_name(), "analytic-roofline");
}

#[test]
fn the_replica_records_each_finished_request_and_every_token_gap() {
    // One sequence at a time, 10 ns steps, both submitted at 0. Request 0 (prompt 4, output 3):
    // prefill 0-10 (first token at 10), decodes at 20 and 30, finishes at 30. Request 1
    // (prompt 2, output 2) is admitted at 30: first token at 40, finishes at 50.
    // TTFT 10 and 40; TPOT (30 - 10) / 2 = 10 and (50 - 40) / 1 = 10; end to end 30 and 50;
    // queueing 0 and 30; token gaps 10, 10 (request 0) and 10 (request 1).
    let t = trace(config(1, None, false), &[(0, 4, 3), (1, 2, 2)]);
    let l = &t.stats.latencies;
    assert_eq!(
        (l.ttft.count(), l.tpot.count(), l.itl.count(), l.e2e.count()),
        (2, 2, 3, 2)
    );
    let ns = |ms: f64| ms * 1e6;
    let s = l.summary();
    assert_eq!(s.completed, 2);
    assert!((ns(s.ttft.mean_ms) - 25.0).abs() < 1e-9);
    assert!((ns(s.ttft.max_ms) - 40.0).abs() < 1e-9);
    assert!((ns(s.tpot.mean_ms) - 10.0).abs() < 1e-9);
    assert!((ns(s.itl.p99_ms) - 10.0).abs() < 1e-9);
    assert!((ns(s.e2e.mean_ms) - 40.0).abs() < 1e-9);
    assert!((ns(s.queueing.mean_ms) - 15.0).abs() < 1e-9);
    assert!((ns(s.queueing.max_ms) - 30.0).abs() < 1e-9);
    // Two requests over 50 ns.
    assert!((s.throughput_rps - 2.0 / 50e-9).abs() < 1e-3);
    // Nothing finished: no latency and no throughput, not 0.
    let none = super::RequestLatencies::default().summary();
    for value in [
        none.ttft.mean_ms,
        none.tpot.p50_ms,
        none.itl.p99_ms,
        none.e2e.p90_ms,
        none.queueing.max_ms,
        none.throughput_rps,
    ] {
        assert!(value.is_nan());
    }
}

/// One replica's step as the caller sees it: (requests, prefill, decode, context, the ids in
/// the step sorted, the batch's ids in its order, blocks in use).
type Seen = (u64, u64, u64, u64, Vec<u64>, Vec<u64>, u64);

/// The decode group (`Replica::with_decode_runs`) changes nothing a caller sees: a replica with
/// it and one without, fed the same random arrivals (prompts of 1-70 tokens, outputs of 1-40)
/// and run with the same random step durations, agree after every step on the step's counts,
/// its sequences, the batch's order, the blocks in use and the finished sequences (in order,
/// with their times), and at the end on every statistic; under a token budget small enough to
/// cut the batch, with a cache small enough to preempt (recompute and swap), and in vLLM v0's
/// prefill-first order; blocks of 4 tokens, and of 3 (not a power of two: the members' block
/// test then divides, `DueBlocks`).
#[test]
fn the_decode_group_schedules_and_completes_as_the_pass_does() {
    use StepOrder::{DecodeFirst, PrefillFirst};
    for (case, preemption, budget, blocks, order, block_size) in [
        (0, Preemption::Recompute, Some(256), 100_000, DecodeFirst, 4),
        (1, Preemption::Recompute, Some(48), 100_000, DecodeFirst, 4),
        (2, Preemption::Recompute, Some(96), 120, DecodeFirst, 4),
        (3, Preemption::Swap, Some(96), 120, DecodeFirst, 4),
        (4, Preemption::Recompute, None, 160, DecodeFirst, 4),
        (5, Preemption::Recompute, Some(256), 160, PrefillFirst, 4),
        (6, Preemption::Recompute, Some(96), 160, DecodeFirst, 3),
    ] {
        let config = ReplicaConfig {
            max_num_seqs: 24,
            max_num_batched_tokens: budget,
            chunked_prefill: budget.is_some(),
            kv: KvConfig {
                block_size,
                blocks,
                watermark_blocks: 0,
            },
            admission: Admission::Paged { preemption },
            batching: Batching::Continuous,
        };
        let mut replicas = [
            Replica::new(config)
                .with_step_order(order)
                .with_decode_runs(true),
            Replica::new(config).with_step_order(order),
        ];
        let mut policies = [Fifo::default(), Fifo::default()];
        policies.iter_mut().for_each(|p| p.reset(1));
        let mut hooks = [Outputs::default(), Outputs::default()];
        let mut rng = stream(case, "decode group");
        let (mut now, mut next_id) = (SimTime::ZERO, 0u64);
        let mut finished_any = 0;
        while next_id < 400 || replicas[1].is_busy() || policies[1].len(0) > 0 {
            // Arrivals: none, one or a few at this step's start.
            let arriving = if next_id < 400 {
                rng.random_range(0..3u64)
            } else {
                0
            };
            for _ in 0..arriving.min(400 - next_id) {
                let (prompt, output) = (rng.random_range(1..=70u32), rng.random_range(1..=40u32));
                for k in 0..2 {
                    hooks[k].output.insert(next_id, output);
                    replicas[k].submit(now, request(next_id, prompt, now), &mut policies[k], 0);
                }
                next_id += 1;
            }
            let mut seen: Vec<Option<Seen>> = Vec::new();
            for k in 0..2 {
                let work = replicas[k].schedule(now, &mut policies[k], 0, &mut hooks[k]);
                seen.push(work.map(|w| {
                    let mut ids: Vec<u64> = w
                        .batch
                        .iter()
                        .filter(|s| s.scheduled() > 0)
                        .map(|s| s.request.id)
                        .collect();
                    ids.sort_unstable();
                    let order = w.batch.iter().map(|s| s.request.id).collect();
                    let steps = (w.requests, w.prefill_tokens, w.decode_tokens);
                    (steps.0, steps.1, steps.2, w.context_tokens, ids, order, 0)
                }));
                if let Some(step) = seen[k].as_mut() {
                    step.6 = replicas[k].kv().used();
                }
            }
            assert_eq!(seen[0], seen[1], "case {case}: the step at {now:?}");
            let duration = SimDuration(rng.random_range(5..15u64));
            if seen[0].is_none() {
                now += duration;
                continue;
            }
            now += duration;
            let mut done = [Vec::new(), Vec::new()];
            for k in 0..2 {
                replicas[k].begin_step(duration);
                replicas[k].complete_step(now, &mut done[k]);
            }
            let moments = |d: &[Seq]| -> Vec<_> {
                d.iter()
                    .map(|s| (s.request.id, s.generated, s.first_token(), s.last_token()))
                    .collect()
            };
            assert_eq!(
                moments(&done[0]),
                moments(&done[1]),
                "case {case}: finished at {now:?}"
            );
            finished_any += done[0].len();
        }
        assert_eq!(finished_any, 400, "case {case}");
        assert_eq!(
            format!("{:?}", replicas[0].stats()),
            format!("{:?}", replicas[1].stats()),
            "case {case}"
        );
        let preempted =
            replicas[1].stats().preempted_recompute + replicas[1].stats().preempted_swap;
        assert_eq!(
            preempted > 0,
            blocks < 1000,
            "case {case}: {preempted} preemptions"
        );
        assert!(
            replicas[0].decode_run_steps() > 0,
            "case {case}: the group never ran"
        );
        assert_eq!(replicas[1].decode_run_steps(), 0);
        // The steps that preempt keep the group (`schedule_in_place`) under decode-first order.
        let in_group = replicas[0].group_preemptions();
        assert!(
            in_group > 0 || blocks >= 1000 || order == PrefillFirst,
            "case {case}: no preemption kept the group"
        );
    }
}
