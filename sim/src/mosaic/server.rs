//! The MOSAIC run as one engine `Model`: N workers (one GPU each) run their placed sessions one
//! after another (load the model, then generate the session's prompts on a
//! `serving::Replica`, each step priced through `serving::StepCost`), workers meet at data
//! parallelism's per-round barriers, and when the last worker is done the aggregator's
//! tensor-parallel group loads its model and generates the prompts the gate did not skip.
//!
//! Events (`Event`): `LoadDone { unit }` (a unit's model is loaded: its session starts
//! generating), `StepEnd { unit }` (the step in execution on a unit ends) and
//! `Barrier { round }` (every worker has finished the rounds before `round`: they start it).
//! Units are the workers `0..N` and the aggregator's group `N`. The event queue is the only
//! clock: a timeline is read off the times the events happened at.

use super::pricing::SessionPricing;
use super::session::{GenerationRequest, ModelServing};
use crate::engine::{self, Model};
use crate::event_queue::EventQueue;
use crate::recorder::{RequestLatencies, RequestSummary};
use crate::serving::{AdmitHook, QueuePolicy, QueuedRequest, Replica, Seq, StepCost};
use crate::time::SimTime;
use serde::Serialize;

/// One session a unit runs: load `model` (unless `load` is false), then generate `prompts`.
#[derive(Clone, Copy)]
pub struct SessionPlan<'a> {
    /// The model, as the run's `SessionPricing` names it.
    pub model: usize,
    pub serving: &'a ModelServing,
    pub prompts: &'a [GenerationRequest],
    /// Whether the session loads its model first (a calibration session's model is resident).
    pub load: bool,
}

/// What one session did, in simulated time.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SessionRun {
    pub unit: usize,
    pub model: usize,
    /// Its position in its unit's plan (its round under barriers).
    pub round: usize,
    pub prompts: u32,
    pub load_start: SimTime,
    /// When generation started (the load's end).
    pub generate_start: SimTime,
    pub end: SimTime,
    pub steps: u64,
    pub output_tokens: u64,
    /// Mean sequences per step.
    pub mean_batch: f64,
    /// Sequences preempted by recompute because the KV cache ran full.
    pub preemptions: u64,
}

impl SessionRun {
    pub fn generate_s(&self) -> f64 {
        (self.end - self.generate_start).as_secs_f64()
    }

    pub fn tokens_per_s(&self) -> f64 {
        let seconds = self.generate_s();
        if seconds > 0.0 {
            self.output_tokens as f64 / seconds
        } else {
            0.0
        }
    }
}

/// What the whole run did.
#[derive(Clone, Debug, PartialEq)]
pub struct StagesRun {
    /// Per worker, its sessions in plan order.
    pub workers: Vec<Vec<SessionRun>>,
    /// When each worker finished its last session (or its last barrier).
    pub worker_end: Vec<SimTime>,
    /// Per barrier (round 1, 2, ... of a barrier plan), when it released the workers.
    pub barriers: Vec<SimTime>,
    /// When the last worker finished.
    pub expert_end: SimTime,
    /// The aggregator's session, when it ran.
    pub aggregator: Option<SessionRun>,
    /// The expert stage's prompts, as their sessions' replicas recorded them (each timed from
    /// its session's start of generation, when every prompt of the session is submitted).
    pub expert_requests: RequestSummary,
}

/// The events of a MOSAIC run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// `unit` has loaded its session's model.
    LoadDone { unit: usize },
    /// The step in execution on `unit` ends.
    StepEnd { unit: usize },
    /// Every worker has finished the rounds before `round`; each starts its session of it.
    Barrier { round: usize },
}

/// A session in progress.
struct Active<'s, 'c> {
    plan: SessionPlan<'s>,
    round: usize,
    load_start: SimTime,
    generate_start: SimTime,
    replica: Option<Replica>,
    steps: Option<Box<dyn StepCost + 'c>>,
}

/// The output length of each of a session's prompts (a prompt's request id is its index).
struct Outputs<'x>(&'x [GenerationRequest]);

impl AdmitHook for Outputs<'_> {
    fn output_tokens(&mut self, request: &QueuedRequest) -> u32 {
        self.0[request.id as usize].output_tokens
    }
    fn admitted(&mut self, _now: SimTime, _request: &QueuedRequest, _output: u32) {}
}

/// The run as an engine `Model`: sessions borrowed for `'s`, step costs living for `'c`.
pub struct StagesServer<'s, 'c> {
    /// Per unit (workers, then the aggregator's group), its sessions in order.
    plans: Vec<Vec<SessionPlan<'s>>>,
    n_workers: usize,
    barrier_per_round: bool,
    pricing: &'s mut dyn SessionPricing<'c>,
    queue: &'s mut dyn QueuePolicy,
    /// Per unit, the next session of its plan.
    next: Vec<usize>,
    active: Vec<Option<Active<'s, 'c>>>,
    runs: Vec<Vec<SessionRun>>,
    /// Workers waiting at the current barrier (barrier plans), or done (others).
    arrived: usize,
    /// Under barriers, the round the workers are in.
    round: usize,
    rounds: usize,
    worker_end: Vec<SimTime>,
    barriers: Vec<SimTime>,
    expert_end: Option<SimTime>,
    finished: Vec<Seq>,
    /// The expert sessions' requests, merged as each session ends.
    expert_requests: RequestLatencies,
}

impl<'s, 'c> StagesServer<'s, 'c> {
    /// Workers run `workers[w]`'s sessions (with a barrier before each round when
    /// `barrier_per_round`; otherwise a worker skips the sessions without prompts), then the
    /// aggregator's group runs `aggregator` when it has prompts. Prompts are admitted in their
    /// order by `queue` (FCFS in every run).
    pub fn new(
        workers: Vec<Vec<SessionPlan<'s>>>,
        barrier_per_round: bool,
        aggregator: Option<SessionPlan<'s>>,
        pricing: &'s mut dyn SessionPricing<'c>,
        queue: &'s mut dyn QueuePolicy,
    ) -> Self {
        let n_workers = workers.len();
        let rounds = workers.iter().map(Vec::len).max().unwrap_or(0);
        let mut plans = workers;
        plans.push(
            aggregator
                .filter(|a| !a.prompts.is_empty())
                .into_iter()
                .collect(),
        );
        let units = plans.len();
        queue.reset(units);
        StagesServer {
            plans,
            n_workers,
            barrier_per_round,
            pricing,
            queue,
            next: vec![0; units],
            active: (0..units).map(|_| None).collect(),
            runs: vec![Vec::new(); units],
            arrived: 0,
            round: 0,
            rounds,
            worker_end: vec![SimTime::ZERO; n_workers],
            barriers: Vec::new(),
            expert_end: None,
            finished: Vec::new(),
            expert_requests: RequestLatencies::default(),
        }
    }

    /// The run, once `engine::run` has emptied the queue.
    pub fn finish(mut self) -> StagesRun {
        assert!(
            self.active.iter().all(Option::is_none),
            "a session was still running when the events ran out"
        );
        let aggregator = self.runs.pop().and_then(|mut runs| runs.pop());
        StagesRun {
            workers: self.runs,
            worker_end: self.worker_end,
            barriers: self.barriers,
            expert_end: self.expert_end.unwrap_or(SimTime::ZERO),
            aggregator,
            expert_requests: self.expert_requests.summary(),
        }
    }

    /// `unit` is free at `now`: it starts its next session, or waits at the barrier, or is done.
    fn unit_free(&mut self, unit: usize, now: SimTime, events: &mut EventQueue<Event>) {
        if unit == self.n_workers {
            return; // The aggregator's one session is over: the run ends.
        }
        if self.barrier_per_round {
            self.worker_end[unit] = now;
            self.arrived += 1;
            if self.arrived == self.n_workers {
                self.arrived = 0;
                self.round += 1;
                if self.round < self.rounds {
                    events.schedule(now, Event::Barrier { round: self.round });
                } else {
                    self.workers_done(now, events);
                }
            }
            return;
        }
        let plan = &self.plans[unit];
        let mut next = self.next[unit];
        while next < plan.len() && plan[next].prompts.is_empty() {
            next += 1;
        }
        self.next[unit] = next;
        if next < plan.len() {
            self.start_session(unit, now, events);
        } else {
            self.worker_end[unit] = now;
            self.arrived += 1;
            if self.arrived == self.n_workers {
                self.workers_done(now, events);
            }
        }
    }

    /// The expert stage is over at `now`: the aggregator's session starts, if it has one.
    fn workers_done(&mut self, now: SimTime, events: &mut EventQueue<Event>) {
        self.expert_end = Some(now);
        if !self.plans[self.n_workers].is_empty() {
            self.start_session(self.n_workers, now, events);
        }
    }

    /// Starts `unit`'s next session at `now`: its load, or its generation when it loads nothing.
    fn start_session(&mut self, unit: usize, now: SimTime, events: &mut EventQueue<Event>) {
        let round = self.next[unit];
        let plan = self.plans[unit][round];
        self.next[unit] += 1;
        self.active[unit] = Some(Active {
            plan,
            round,
            load_start: now,
            generate_start: now,
            replica: None,
            steps: None,
        });
        if plan.load {
            let load = self.pricing.load(unit, plan.model);
            events.schedule(now + load, Event::LoadDone { unit });
        } else {
            self.start_generation(unit, now, events);
        }
    }

    /// `unit`'s model is ready at `now`: every prompt of the session is queued, and the first
    /// step starts.
    fn start_generation(&mut self, unit: usize, now: SimTime, events: &mut EventQueue<Event>) {
        let active = self.active[unit].as_mut().expect("a session is active");
        let plan = active.plan;
        let mut replica = Replica::new(plan.serving.replica_config());
        for (id, prompt) in plan.prompts.iter().enumerate() {
            let request = QueuedRequest {
                id: id as u64,
                workflow: id as u64,
                stage: 0,
                submitted: now,
                workflow_arrival: now,
                enqueued_iteration: 0,
                prompt_tokens: prompt.prompt_tokens,
                predicted_stage_tokens: 0.0,
                predicted_total_tokens: 0.0,
                attained_service: 0,
                rank_noise: 0.0,
                topic: 0,
            };
            replica.submit(now, request, &mut *self.queue, unit);
        }
        active.generate_start = now;
        active.replica = Some(replica);
        active.steps = Some(self.pricing.steps(unit, plan.model));
        self.start_step(unit, now, events);
    }

    /// Schedules `unit`'s next step and prices it, or ends the session when nothing is left.
    fn start_step(&mut self, unit: usize, now: SimTime, events: &mut EventQueue<Event>) {
        let active = self.active[unit].as_mut().expect("a session is active");
        let replica = active.replica.as_mut().expect("the model is loaded");
        let mut outputs = Outputs(active.plan.prompts);
        if let Some(work) = replica.schedule(now, &mut *self.queue, unit, &mut outputs) {
            let steps = active.steps.as_mut().expect("the model is loaded");
            let duration = steps.price(&work).duration;
            replica.begin_step(duration);
            events.schedule(now + duration, Event::StepEnd { unit });
            return;
        }
        let active = self.active[unit].take().expect("a session is active");
        let stats = active
            .replica
            .as_ref()
            .expect("the model is loaded")
            .stats();
        if unit < self.n_workers {
            self.expert_requests.merge(&stats.latencies);
        }
        self.runs[unit].push(SessionRun {
            unit,
            model: active.plan.model,
            round: active.round,
            prompts: active.plan.prompts.len() as u32,
            load_start: active.load_start,
            generate_start: active.generate_start,
            end: now,
            steps: stats.steps,
            output_tokens: stats.tokens,
            mean_batch: if stats.steps > 0 {
                stats.batch_sum as f64 / stats.steps as f64
            } else {
                0.0
            },
            preemptions: stats.preempted_recompute,
        });
        self.unit_free(unit, now, events);
    }
}

impl Model for StagesServer<'_, '_> {
    type Event = Event;

    fn start(&mut self, events: &mut EventQueue<Event>) {
        if self.n_workers == 0 || (self.barrier_per_round && self.rounds == 0) {
            self.workers_done(SimTime::ZERO, events);
            return;
        }
        for unit in 0..self.n_workers {
            if self.barrier_per_round {
                self.start_round(unit, SimTime::ZERO, events);
            } else {
                self.unit_free(unit, SimTime::ZERO, events);
            }
        }
    }

    fn handle(&mut self, now: SimTime, event: Event, events: &mut EventQueue<Event>) {
        match event {
            Event::LoadDone { unit } => self.start_generation(unit, now, events),
            Event::StepEnd { unit } => {
                let active = self.active[unit].as_mut().expect("a session is active");
                let replica = active.replica.as_mut().expect("the model is loaded");
                replica.complete_step(now, &mut self.finished);
                self.finished.clear();
                self.start_step(unit, now, events);
            }
            Event::Barrier { round } => {
                self.barriers.push(now);
                debug_assert_eq!(round, self.round);
                for unit in 0..self.n_workers {
                    self.start_round(unit, now, events);
                }
            }
        }
    }
}

impl StagesServer<'_, '_> {
    /// Under barriers, `unit` starts its session of the current round at `now`, or (with none)
    /// goes straight to the next barrier.
    fn start_round(&mut self, unit: usize, now: SimTime, events: &mut EventQueue<Event>) {
        if self.next[unit] < self.plans[unit].len() {
            self.start_session(unit, now, events);
        } else {
            self.unit_free(unit, now, events);
        }
    }
}

/// Runs `workers`' sessions and then the aggregator's through `engine::run`.
pub fn run_stages<'s, 'c>(
    workers: Vec<Vec<SessionPlan<'s>>>,
    barrier_per_round: bool,
    aggregator: Option<SessionPlan<'s>>,
    pricing: &'s mut dyn SessionPricing<'c>,
    queue: &'s mut dyn QueuePolicy,
) -> StagesRun {
    let mut server = StagesServer::new(workers, barrier_per_round, aggregator, pricing, queue);
    engine::run(&mut server);
    server.finish()
}

/// One session of `model` (resident, no load) generating `prompts` on one worker: what the
/// offline calibration profiles.
pub fn run_session<'s, 'c>(
    model: usize,
    serving: &'s ModelServing,
    prompts: &'s [GenerationRequest],
    pricing: &'s mut dyn SessionPricing<'c>,
    queue: &'s mut dyn QueuePolicy,
) -> SessionRun {
    let plan = SessionPlan {
        model,
        serving,
        prompts,
        load: false,
    };
    let mut run = run_stages(vec![vec![plan]], false, None, pricing, queue);
    run.workers[0].pop().unwrap_or(SessionRun {
        unit: 0,
        model,
        round: 0,
        prompts: 0,
        load_start: SimTime::ZERO,
        generate_start: SimTime::ZERO,
        end: SimTime::ZERO,
        steps: 0,
        output_tokens: 0,
        mean_batch: 0.0,
        preemptions: 0,
    })
}

#[cfg(test)]
mod tests {
    //! Sessions, worker timelines and barriers against schedules worked out by hand, priced by
    //! fixed step and load times so that every expected time is a count of steps and loads.

    use super::*;
    use crate::cost::gpu::{GpuSpec, LinkSpec};
    use crate::cost::shape::DenseModelShape;
    use crate::mosaic::session::ServingParams;
    use crate::mosaic::tests::Fifo;
    use crate::serving::{CostSource, StepBreakdown, StepTime, StepWork};
    use crate::time::SimDuration;
    use std::cell::RefCell;
    use std::rc::Rc;

    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;

    /// What a step did: (sequences, prefill tokens, decode tokens, ids finishing in it).
    type StepLog = Rc<RefCell<Vec<(u64, u64, u64, Vec<u64>)>>>;

    /// Every step takes `step`; logs what the replica put into it and who finishes in it (a
    /// sequence that emits its last token).
    struct FixedStep {
        step: SimDuration,
        log: StepLog,
    }

    impl StepCost for FixedStep {
        fn price(&mut self, work: &StepWork<'_>) -> StepTime {
            let finishing = work
                .batch
                .iter()
                .filter(|s| s.step_emits() && s.generated + 1 == s.output)
                .map(|s| s.request.id)
                .collect();
            self.log.borrow_mut().push((
                work.requests,
                work.prefill_tokens,
                work.decode_tokens,
                finishing,
            ));
            StepTime {
                duration: self.step,
                breakdown: StepBreakdown::default(),
                source: CostSource::Reference,
            }
        }
    }

    /// Model `m` loads in `loads[m]`; every step takes `step`.
    struct FixedPricing {
        loads: Vec<SimDuration>,
        step: SimDuration,
        log: StepLog,
    }

    impl FixedPricing {
        fn new(loads: &[u64], step: u64) -> Self {
            FixedPricing {
                loads: loads.iter().map(|&ns| SimDuration(ns)).collect(),
                step: SimDuration(step),
                log: StepLog::default(),
            }
        }
    }

    impl<'c> SessionPricing<'c> for FixedPricing {
        fn load(&mut self, _unit: usize, model: usize) -> SimDuration {
            self.loads[model]
        }
        fn steps(&mut self, _unit: usize, _model: usize) -> Box<dyn StepCost + 'c> {
            Box::new(FixedStep {
                step: self.step,
                log: self.log.clone(),
            })
        }
    }

    fn params() -> ServingParams {
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

    fn requests(lengths: &[(u32, u32)]) -> Vec<GenerationRequest> {
        lengths
            .iter()
            .map(|&(prompt_tokens, output_tokens)| GenerationRequest {
                prompt_tokens,
                output_tokens,
            })
            .collect()
    }

    /// A cache of 5 blocks of 4 tokens (no watermark), three prompts: A (6 tokens, 5 out),
    /// B (6, 5), C (3, 2), every step 1 ms.
    ///
    /// step 1: A, B, C admitted (2 + 2 + 1 blocks: full), 15 prefill tokens; each emits its
    ///         first token.
    /// step 2: 3 decodes (A and B grow to 7 tokens, C to 4: no new block); C emits its 2nd
    ///         and last token: C finishes (2 ms), its block freed (4 used).
    /// step 3: A, B decode (8 tokens each, still 2 blocks).
    /// step 4: A needs a 3rd block (5 used, the cache is full); B needs one too: B, the newest,
    ///         is preempted (its 2 blocks freed, its 3 tokens kept for recompute); B's
    ///         recompute needs 3 blocks for 6 + 3 tokens, 3 + 3 > 5: it waits. A alone.
    /// step 5: A decodes its 5th token and finishes (5 ms); B still does not fit beside it.
    /// step 6: B alone, re-prefilling 9 tokens (its prompt and its 3 tokens); the pass over
    ///         the last one emits its 4th token.
    /// step 7: B decodes its 5th token and finishes (7 ms).
    #[test]
    fn a_session_preempts_the_newest_and_recomputes_it_as_worked_by_hand() {
        let mut tiny = serving("qwen2.5-7b-instruct");
        tiny.dense.kv_capacity_tokens = 20;
        tiny.block_size = 4;
        tiny.watermark = 0.0;
        let prompts = requests(&[(6, 5), (6, 5), (3, 2)]);
        let mut pricing = FixedPricing::new(&[0], MS);
        let log = pricing.log.clone();
        let run = run_session(0, &tiny, &prompts, &mut pricing, &mut Fifo::default());
        assert_eq!(
            *log.borrow(),
            vec![
                (3, 15, 0, vec![]),
                (3, 0, 3, vec![2]),
                (2, 0, 2, vec![]),
                (1, 0, 1, vec![]),
                (1, 0, 1, vec![0]),
                (1, 9, 0, vec![]),
                (1, 0, 1, vec![1]),
            ]
        );
        assert_eq!((run.steps, run.output_tokens, run.preemptions), (7, 12, 1));
        assert_eq!(run.end, SimTime(7 * MS));
        assert!((run.mean_batch - 12.0 / 7.0).abs() < 1e-12);
    }

    /// Worker 0 runs model 0 (2 prompts of 3 tokens) then model 1 (1 prompt of 2), worker 1
    /// model 1 (1 prompt of 5) and a session of model 0 without prompts, which it skips;
    /// loads take 10 s (model 0) and 4 s (model 1), steps 1 s. Worker 0: load [0, 10],
    /// generate [10, 13] (3 steps: the prefill emits the first token), load [13, 17],
    /// generate [17, 19]. Worker 1: load [0, 4], generate [4, 9], idle to the makespan, 19 s.
    #[test]
    fn a_worker_runs_its_sessions_back_to_back_as_worked_by_hand() {
        let model = serving("qwen2.5-7b-instruct");
        let (two, one, five) = (
            requests(&[(10, 3), (10, 3)]),
            requests(&[(10, 2)]),
            requests(&[(10, 5)]),
        );
        let plan = |model_index, prompts| SessionPlan {
            model: model_index,
            serving: &model,
            prompts,
            load: true,
        };
        let workers = vec![
            vec![plan(0, &two[..]), plan(1, &one[..])],
            vec![plan(1, &five[..]), plan(0, &[][..])],
        ];
        let mut pricing = FixedPricing::new(&[10 * S, 4 * S], S);
        let run = run_stages(workers, false, None, &mut pricing, &mut Fifo::default());
        let times = |w: usize| -> Vec<(u64, u64, u64)> {
            run.workers[w]
                .iter()
                .map(|s| (s.load_start.0 / S, s.generate_start.0 / S, s.end.0 / S))
                .collect()
        };
        assert_eq!(times(0), vec![(0, 10, 13), (13, 17, 19)]);
        assert_eq!(times(1), vec![(0, 4, 9)]);
        assert_eq!(run.worker_end, vec![SimTime(19 * S), SimTime(9 * S)]);
        assert_eq!(run.expert_end, SimTime(19 * S));
        assert!(run.barriers.is_empty() && run.aggregator.is_none());
        assert_eq!(
            run.workers[0]
                .iter()
                .map(|s| s.output_tokens)
                .collect::<Vec<_>>(),
            vec![6, 2]
        );
    }

    /// Data parallelism: model 0 then model 1 on both workers, a barrier between. Round 0:
    /// worker 0 loads model 0 [0, 10] and generates 2 prompts of 3 tokens [10, 13]; worker 1
    /// loads it [0, 10] and generates 1 prompt of 6 tokens [10, 16]: the barrier releases at
    /// 16 (worker 0 idle 13-16). Round 1: both load model 1 [16, 20]; worker 0 generates 1
    /// token [20, 21], worker 1 has no prompt of it (a load and no generation) and idles
    /// 20-21. The aggregator's group then loads (7 s) [21, 28] and generates 2 tokens
    /// [28, 30].
    #[test]
    fn a_data_parallel_barrier_waits_for_the_slowest_worker_as_worked_by_hand() {
        let model = serving("qwen2.5-7b-instruct");
        let (two, six, one, agg) = (
            requests(&[(10, 3), (10, 3)]),
            requests(&[(10, 6)]),
            requests(&[(10, 1)]),
            requests(&[(50, 2)]),
        );
        let plan = |model_index, prompts| SessionPlan {
            model: model_index,
            serving: &model,
            prompts,
            load: true,
        };
        let workers = vec![
            vec![plan(0, &two[..]), plan(1, &one[..])],
            vec![plan(0, &six[..]), plan(1, &[][..])],
        ];
        let mut pricing = FixedPricing::new(&[10 * S, 4 * S, 7 * S], S);
        let run = run_stages(
            workers,
            true,
            Some(plan(2, &agg[..])),
            &mut pricing,
            &mut Fifo::default(),
        );
        let times = |w: usize| -> Vec<(u64, u64, u64)> {
            run.workers[w]
                .iter()
                .map(|s| (s.load_start.0 / S, s.generate_start.0 / S, s.end.0 / S))
                .collect()
        };
        assert_eq!(times(0), vec![(0, 10, 13), (16, 20, 21)]);
        assert_eq!(times(1), vec![(0, 10, 16), (16, 20, 20)]);
        assert_eq!(run.barriers, vec![SimTime(16 * S)]);
        assert_eq!(run.expert_end, SimTime(21 * S));
        let agg = run.aggregator.as_ref().unwrap();
        assert_eq!(
            (agg.load_start, agg.generate_start, agg.end),
            (SimTime(21 * S), SimTime(28 * S), SimTime(30 * S))
        );
    }

    /// Every step priced by the roofline of `0` (loads never asked for).
    struct Roofline<'m>(&'m ModelServing);
    impl<'m> SessionPricing<'m> for Roofline<'m> {
        fn load(&mut self, _unit: usize, _model: usize) -> SimDuration {
            unreachable!("a resident session loads nothing")
        }
        fn steps(&mut self, _unit: usize, _model: usize) -> Box<dyn StepCost + 'm> {
            Box::new(crate::serving::RooflineStepCost(&self.0.dense.roofline))
        }
    }

    #[test]
    fn one_request_takes_one_step_per_token_at_the_weight_streaming_floor() {
        let model = serving("qwen2.5-7b-instruct");
        let prompt = requests(&[(1, 100)]);
        let run = run_session(
            0,
            &model,
            &prompt,
            &mut Roofline(&model),
            &mut Fifo::default(),
        );
        assert_eq!((run.steps, run.output_tokens), (100, 100));
        // Every block and the head streamed once per step (the embedding table is a lookup).
        let shape = DenseModelShape::preset("qwen2.5-7b-instruct").unwrap();
        let streamed = 28.0 * shape.block_weight_bytes() + shape.head_weight_bytes();
        let rates = crate::cost::kernel::KernelRates::of(&params().gpu);
        let floor = streamed / rates.stream_bytes_per_s;
        let per_step = run.generate_s() / 100.0;
        assert!(
            per_step >= floor && per_step < floor * 1.02,
            "{per_step} {floor}"
        );
    }

    #[test]
    fn batching_beats_serial_generation() {
        let model = serving("gemma-2-9b-it");
        let prompts = requests(&[(200, 200); 64]);
        let run = |p: &[GenerationRequest]| {
            run_session(0, &model, p, &mut Roofline(&model), &mut Fifo::default()).end
        };
        let (together, one) = (run(&prompts), run(&prompts[..1]));
        assert!(together.0 < 64 * one.0 / 10);
        assert!(together.0 > one.0);
    }

    #[test]
    fn every_token_is_generated_once_even_under_preemption() {
        let mut tight = serving("deepseek-r1-distill-llama-8b");
        tight.dense.kv_capacity_tokens = 5_000;
        let prompts: Vec<_> = (0..20)
            .map(|i| GenerationRequest {
                prompt_tokens: 100,
                output_tokens: 500 + 37 * i,
            })
            .collect();
        let mut pricing = FixedPricing::new(&[0], MS);
        let log = pricing.log.clone();
        let run = run_session(0, &tight, &prompts, &mut pricing, &mut Fifo::default());
        let expected: u64 = prompts.iter().map(|r| u64::from(r.output_tokens)).sum();
        assert_eq!(run.output_tokens, expected);
        assert!(run.preemptions > 0);
        // Admission needs the prompt's 7 blocks and the watermark (int(0.01 x 312) = 3 blocks)
        // free: at most 312 / 7 = 44 sequences fit, in fact far fewer once they grow.
        let widest = log.borrow().iter().map(|s| s.0).max().unwrap();
        assert!(widest <= 44, "{widest}");
    }
}
