//! The serving family's cluster as an engine `Model`: requests arrive from the shared arrival
//! process (`Event::Arrival`), a `Router` sends each to a replica, and each replica is a
//! `serving::Replica` configured by its scheduler kind whose steps end as `Event::StepEnd`.
//! Replicas are numbered group by group (`ServingScenario::groups`). Each request carries the
//! length predictor's and the semantic router's draws (`predictions`); the router sees each
//! replica's state with Chimera's activity monitor (the predicted tokens dispatched to it and
//! not finished, and its profiled `decode_ms_per_token`, `ChimeraProfile`). A
//! step is priced by the replica's `ReplicaStepCost` (an MoE step first routed by the
//! `ExpertRouter` onto the replica's expert layout), and its moments are recorded by the
//! replica's `recorder::ReplicaRecorder` (and, when asked, written as a trace-event slice).
//! `finish` checks conservation and Little's law on every run before it summarises. An
//! observation pass (`ServingServer::observing`) is the same cluster under the linear layout,
//! from its own random streams, that records the tokens per expert of each replica's first
//! steps and stops there: the window EPLB and GEM map from. With adapters each request draws
//! its adapter at arrival (ExpertWeave's draw, on its stream `expertweave/adapters`), the
//! replica counts each
//! step's tokens per adapter, and the `AdapterRouter` routes them (copies included) on the
//! linear layout.

use super::adapters::AdapterRouter;
use super::batch_former::{
    AffinityDryRun, BoxedDryRun, ExpertDryRun, LayoutDryRun, PromptDryRun, ServingCandidate,
};
use super::config::{
    ExpertRoutingTable, LengthSpec, SchedulerTable, ServedModel, ServingScenario, StaticLoads,
    StaticStreams,
};
use super::deployment::Deployment;
use super::expert_routing::ExpertRouter;
use super::mapping::ExpertLayout;
use super::predictions::Predictions;
use super::questions::{Call, Questions};
use super::scheduler;
use super::selector_former::SelectorFormer;
use super::sessions::{Sessions, SessionsSummary};
use super::step_cost::ReplicaStepCost;
use super::workflows::Workflows;
use crate::arrivals::{Arrival, ArrivalProcess};
use crate::engine::Model;
use crate::event_queue::EventQueue;
use crate::policies::batch::BatchSelector;
use crate::policies::gate::AggregationGate;
use crate::policies::memory::MemoryPlan;
use crate::recorder::{ReplicaRecorder, ServingSummary, StepCounts, TraceEvents};
use crate::records::RecordSink;
use crate::rng::{SimRng, stream};
use crate::serving::router::PROFILE_CONTEXT_TOKENS;
use crate::serving::topic_affinity::BatchRouting;
use crate::serving::{
    AdmitHook, EngineState, PrefixSegment, QueuePolicy, QueuedRequest, Replica, RouteRequest,
    Router, Seq, SharedSegments, StepCost, StepWork,
};
use crate::time::{SimDuration, SimTime};
use rand::RngExt;
use rustc_hash::FxHashMap;
use std::rc::Rc;

/// What happens to the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A request arrives.
    Arrival(Arrival),
    /// The step running on replica `replica` ends.
    StepEnd { replica: usize },
    /// A static replica's scheduler wakes up on its `scheduling_interval_ms` grid.
    SchedulerTick { replica: usize },
    /// Replica `replica`'s model is loaded (`replica.load`): it starts serving what waits.
    Loaded { replica: usize },
}

/// One replica and what runs beside it.
struct ReplicaRun<'a> {
    replica: Replica,
    /// Its replica group.
    group: usize,
    max_num_seqs: usize,
    /// Chimera's activity monitor: the predicted tokens of the requests routed here and not
    /// finished (`EngineState::in_flight_predicted_tokens`).
    in_flight_predicted: f64,
    /// The step time of a decode step at the full batch, each sequence holding
    /// `PROFILE_CONTEXT_TOKENS` (batch: `max_num_seqs`, or what the KV cache holds at that
    /// context if fewer), ms: Chimera's `decode_ms_per_token`.
    decode_ms_per_token: f64,
    /// A static replica's batch former (its waiting requests) and whether a tick is pending.
    former: Option<SelectorFormer<'a>>,
    tick_pending: bool,
    /// A static replica's batch trigger and tick grid (its group's `replica.scheduler`).
    min_batch_trigger: usize,
    scheduling_interval: SimDuration,
    recorder: ReplicaRecorder,
    step_cost: ReplicaStepCost,
    /// Prices the steps instead of `step_cost` when given: a static replica's
    /// `replica.scheduler.pricing` other than `passes` (`super::static_pricing`), or
    /// `ServingServer::with_step_costs` (`step_cost` still counts a continuous step's FLOPs).
    priced_by: Option<Box<dyn StepCost + 'a>>,
    /// A static replica whose batch former sees per-expert loads (`loads = "experts"`): each
    /// batch's expected routing, handed to `priced_by` in `StepWork::expected_routing`.
    expected: Option<BatchRouting>,
    /// MoE only: where each step's tokens go.
    expert_router: Option<ExpertRouter>,
    /// With adapters: where each step's tokens go, adapter copies included.
    adapter_router: Option<AdapterRouter>,
    /// Each GPU's model FLOPs in the step being set up (scratch).
    step_flops: Vec<f64>,
    /// Prompt and output tokens of the requests routed here (conservation).
    prompt_tokens_in: u64,
    output_tokens_asked: u64,
    arrived: u64,
    /// The longest sequence (prompt + output) the replica takes: `replica.max_model_len`, and
    /// never more than its KV cache holds, so a sequence alone always fits (vLLM refuses a
    /// `max_model_len` past the cache at start-up).
    max_len: u32,
    /// Requests refused at admission: a prompt of `max_len` tokens or more.
    refused: u64,
    /// When its model load ends (`replica.load`; time zero without one): no step starts before.
    /// A placed session's (`Sessions`): unknown (`SimTime::MAX`) until its load has ended.
    ready_at: SimTime,
    /// Its model load (`replica.load`; zero without one).
    load: SimDuration,
}

/// The longest sequence a replica of `spec` with `kv_blocks` cache blocks takes: its
/// `max_model_len` (unbounded when not given), at most what the cache holds.
fn max_sequence_len(spec: &super::config::ReplicaSpec, kv_blocks: u64) -> u32 {
    let cache = kv_blocks.saturating_mul(u64::from(spec.block_size));
    let cache = u32::try_from(cache).unwrap_or(u32::MAX);
    spec.max_model_len.map_or(cache, |len| len.min(cache))
}

/// Records the expert load of the step `router` routed (MoE only).
fn record_routed_load(router: &mut Option<ExpertRouter>, recorder: &mut ReplicaRecorder) {
    if let Some(router) = router {
        let experts = router.n_experts();
        router.take_step_load(|load| recorder.expert_load(load, experts));
    }
}

/// The replica learns a request's output length and adapter (drawn at arrival) when it admits
/// it.
struct Admit<'x, 'a> {
    outputs: &'x mut FxHashMap<u64, (u32, Option<u32>)>,
    /// `workload.shared_prefix_tokens`: the leading tokens every prompt shares.
    shared_prefix: u32,
    /// With a workflow workload: the workflows (a stage's prompt segments, its wait).
    workflows: Option<&'x mut Workflows<'a>>,
}

impl AdmitHook for Admit<'_, '_> {
    fn output_tokens(&mut self, request: &QueuedRequest) -> u32 {
        self.outputs
            .get(&request.id)
            .expect("an arriving request's output length is kept until admission")
            .0
    }
    fn adapter(&mut self, request: &QueuedRequest) -> Option<u32> {
        self.outputs
            .get(&request.id)
            .expect("an arriving request's adapter is kept until admission")
            .1
    }
    fn admitted(&mut self, now: SimTime, request: &QueuedRequest, _output: u32) {
        self.outputs.remove(&request.id);
        if let Some(workflows) = &mut self.workflows {
            workflows.admitted(now, request);
        }
    }
    /// A prompt is the shared prefix (one token stream, the same for every request), then
    /// tokens of its own; a workflow stage's is its role prompt, user message and history
    /// (`Workflows::prefix`).
    fn prefix(
        &mut self,
        request: &QueuedRequest,
        segments: &mut Vec<PrefixSegment>,
    ) -> SharedSegments {
        if let Some(workflows) = &self.workflows {
            return workflows.prefix(request, segments);
        }
        let tokens = self.shared_prefix.min(request.prompt_tokens);
        if tokens > 0 {
            segments.push(PrefixSegment { stream: 0, tokens });
        }
        SharedSegments::all(segments.len())
    }
}

/// Each replica's state as the router sees it (Chimera's activity monitor), into `out`.
fn engine_states(replicas: &[ReplicaRun<'_>], queue: &dyn QueuePolicy, out: &mut Vec<EngineState>) {
    out.clear();
    for (r, run) in replicas.iter().enumerate() {
        out.push(EngineState {
            model: run.group,
            waiting: match &run.former {
                Some(former) => former.waiting(),
                None => run.replica.waiting(queue, r),
            },
            running: run.replica.running().len(),
            in_flight_predicted_tokens: run.in_flight_predicted.max(0.0),
            decode_ms_per_token: run.decode_ms_per_token,
            max_batch_size: run.max_num_seqs,
        });
    }
}

/// The serving cluster of one run.
pub struct ServingServer<'a> {
    scenario: &'a ServingScenario,
    queue: &'a mut dyn QueuePolicy,
    router: &'a mut dyn Router,
    arrivals: Box<dyn ArrivalProcess>,
    rng_prompt: SimRng,
    /// `None` with `workload.one_token_stream`: output lengths come from `rng_prompt` too.
    rng_output: Option<SimRng>,
    /// Under affinity routing: each request's secondary topic.
    rng_mixing: Option<SimRng>,
    /// With adapters: each request's adapter draw.
    rng_adapter: SimRng,
    /// With a memory plan of one instance per replica: the replica serving each adapter (the
    /// router is not asked).
    replica_of_adapter: Option<Vec<usize>>,
    replicas: Vec<ReplicaRun<'a>>,
    /// Output length and adapter of each request waiting for its first admission.
    outputs: FxHashMap<u64, (u32, Option<u32>)>,
    engine_states: Vec<EngineState>,
    predictions: Predictions,
    /// The semantic router's confidence and the predicted tokens, per replica (scratch).
    confidence: Vec<f64>,
    predicted: Vec<f64>,
    /// Requests whose replica's model solves them, when every group has a task score.
    solved: Option<u64>,
    /// Replicas that received a request at the current instant (reused).
    woken: Vec<usize>,
    /// With `[workload.workflow]`: each arrival is a workflow, its stages submitted in turn.
    workflows: Option<Workflows<'a>>,
    /// Workflows whose next stage is submitted at the current step end (reused).
    next_stages: Vec<u64>,
    /// With `[workload.questions]`: each arrival a question, its calls addressed to groups.
    questions: Option<Questions<'a>>,
    /// The questions' aggregation gate (`with_gate`; a question workload has one).
    gate: Option<Box<dyn AggregationGate>>,
    next_id: u64,
    finished: Vec<Seq>,
    sink: &'a mut dyn RecordSink,
    trace: Option<TraceEvents>,
    last_finish: SimTime,
    /// The observation pass only: it stops once every replica's router observed its window.
    observing: bool,
    /// With `[placement]`: the workers' sessions (each replica one session).
    sessions: Option<Sessions>,
    /// Sessions whose load started, with its end, to be scheduled (reused).
    session_starts: Vec<(usize, SimTime)>,
    /// Whether a continuous replica's next step, ending strictly before every pending event,
    /// is handled at once instead of as its own `StepEnd` (the decode fast-forward; off only
    /// in tests, to compare with the step-by-step path).
    fast_forward: bool,
    /// The step ends handled that way (`inlined_steps`).
    inlined: u64,
}

#[cfg(test)]
thread_local! {
    /// Test-only: whether servers built on this thread handle every step end as an event.
    pub(crate) static STEP_BY_STEP: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Test-only: the `inlined_steps` read last on this thread, and the replicas' steps run as
    /// counts then (`Replica::decode_run_steps`).
    pub(crate) static INLINED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    pub(crate) static RUN_STEPS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Whether a new server fast-forwards its steps (always, outside the tests that compare).
fn fast_forward_on() -> bool {
    #[cfg(test)]
    let on = !STEP_BY_STEP.get();
    #[cfg(not(test))]
    let on = true;
    on
}

impl<'a> ServingServer<'a> {
    /// The cluster of `scenario` on `deployments` (one per replica group) for `seed`, replica
    /// `r`'s experts (MoE only) laid out as `layouts[r]` and the batches of its static replicas
    /// selected by `selectors`, one per static replica in replica order; one queue policy and
    /// one router instance serve every replica (both reset here). With adapters, `plan` is the
    /// memory manager's plan of the group adapters serve: one instance, which every replica
    /// is, or one instance per replica (replica `r` is instance `r`; a request goes to the
    /// replica whose instance serves its adapter).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        scenario: &'a ServingScenario,
        deployments: &[Deployment],
        plan: Option<&MemoryPlan>,
        seed: u64,
        layouts: &[Option<Rc<ExpertLayout>>],
        selectors: &'a mut [Box<dyn BatchSelector>],
        queue: &'a mut dyn QueuePolicy,
        router: &'a mut dyn Router,
        sink: &'a mut dyn RecordSink,
    ) -> ServingServer<'a> {
        Self::with_streams(
            scenario,
            deployments,
            plan,
            seed,
            seed,
            layouts,
            selectors,
            queue,
            router,
            sink,
        )
    }

    /// The observation pass of `scenario` for `seed`: the cluster under the linear layout,
    /// its arrivals, lengths and routing offsets drawn from streams of their own (the seed
    /// `stream(seed, "expert_observation")` draws), its experts' popularity the run's own; it
    /// records the tokens per expert of each replica's first `steps` steps and then stops
    /// (`observed`).
    #[allow(clippy::too_many_arguments)]
    pub fn observing(
        scenario: &'a ServingScenario,
        deployments: &[Deployment],
        seed: u64,
        steps: usize,
        selectors: &'a mut [Box<dyn BatchSelector>],
        queue: &'a mut dyn QueuePolicy,
        router: &'a mut dyn Router,
        sink: &'a mut dyn RecordSink,
    ) -> ServingServer<'a> {
        let layouts: Vec<Option<Rc<ExpertLayout>>> = scenario
            .groups()
            .flat_map(|(model, r)| {
                let linear = model.experts().map(|shape| {
                    Rc::new(ExpertLayout::linear(
                        shape.n_layers,
                        shape.n_experts,
                        r.expert_parallel,
                        r.gpus,
                    ))
                });
                std::iter::repeat_n(linear, r.count)
            })
            .collect();
        assert!(
            layouts.iter().any(Option::is_some),
            "only an MoE replica has experts to observe"
        );
        let streams: u64 = rand::RngExt::random(&mut stream(seed, "expert_observation"));
        let mut server = Self::with_streams(
            scenario,
            deployments,
            None,
            seed,
            streams,
            &layouts,
            selectors,
            queue,
            router,
            sink,
        );
        for router in server
            .replicas
            .iter_mut()
            .filter_map(|run| run.expert_router.as_mut())
        {
            router.observe(steps);
        }
        server.observing = true;
        server
    }

    /// Per replica and layer, the tokens per expert of each observed step (step-major).
    pub fn observed(mut self) -> Vec<Vec<Vec<f32>>> {
        self.replicas
            .iter_mut()
            .map(|run| {
                run.expert_router
                    .as_mut()
                    .map(ExpertRouter::take_observed)
                    .unwrap_or_default()
            })
            .collect()
    }

    /// Whether an observation pass has recorded all its steps.
    fn observed_enough(&self) -> bool {
        self.observing
            && self.replicas.iter().all(|run| {
                run.expert_router
                    .as_ref()
                    .is_none_or(|router| router.observed_steps().1)
            })
    }

    #[allow(clippy::too_many_arguments)]
    fn with_streams(
        scenario: &'a ServingScenario,
        deployments: &[Deployment],
        plan: Option<&MemoryPlan>,
        seed: u64,
        streams: u64,
        layouts: &[Option<Rc<ExpertLayout>>],
        selectors: &'a mut [Box<dyn BatchSelector>],
        queue: &'a mut dyn QueuePolicy,
        router: &'a mut dyn Router,
        sink: &'a mut dyn RecordSink,
    ) -> ServingServer<'a> {
        let count = scenario.replica_count();
        queue.reset(count);
        router.reset(count);
        let mut popularity = stream(seed, "expert_popularity");
        let mut selectors = selectors.iter_mut();
        let mut replicas = Vec::with_capacity(count);
        for (g, deployment) in deployments.iter().enumerate() {
            let group = scenario.group(g);
            // Adapters serve one replica group (config validation): the first.
            let instances = if g == 0 {
                plan.map_or(&[][..], |p| &p.instances[..])
            } else {
                &[]
            };
            let (
                min_batch_trigger,
                scheduling_interval,
                window_size,
                seed_with_oldest,
                loads,
                names,
            ) = match &group.replica.scheduler {
                SchedulerTable::Static {
                    window_size,
                    min_batch_trigger,
                    scheduling_interval_ms,
                    seed_with_oldest,
                    loads,
                    streams,
                    ..
                } => (
                    *min_batch_trigger,
                    SimDuration::from_secs_f64(scheduling_interval_ms / 1e3),
                    *window_size,
                    *seed_with_oldest,
                    *loads,
                    *streams,
                ),
                _ => (
                    0,
                    SimDuration(1),
                    0,
                    false,
                    StaticLoads::Gpus,
                    StaticStreams::PerReplica,
                ),
            };
            let profile_batch = deployment.profile_batch(group.replica.max_num_seqs);
            for i in 0..group.replica.count {
                let r = replicas.len();
                let plan = instances.get(i.min(instances.len().saturating_sub(1)));
                let layout = layouts.get(r).cloned().flatten();
                let mut step_cost = ReplicaStepCost::new(&group, deployment, layout.clone(), plan);
                let load = group.replica.load.map_or(SimDuration::ZERO, |load| {
                    load.duration(deployment.weights_per_gpu_bytes)
                });
                let decode_ms_per_token = step_cost
                    .decode_profile(profile_batch, PROFILE_CONTEXT_TOKENS as u64)
                    .duration
                    .0 as f64
                    * 1e-6;
                let adapter_router = match (&group.model, &group.adapters, plan, &layout) {
                    (ServedModel::Mla(shape), Some(adapters), Some(plan), Some(layout)) => {
                        Some(AdapterRouter::new(
                            shape,
                            adapters,
                            plan,
                            Rc::clone(layout),
                            stream(streams, &format!("expert_routing_{r}")),
                        ))
                    }
                    _ => None,
                };
                let expert_router = match (group.model.experts(), &layout) {
                    (Some(shape), Some(layout)) if adapter_router.is_none() => {
                        // The topics' affinities are the model's: every replica draws the
                        // same ones, from the stream the caps family draws them from.
                        let mut topics = stream(seed, "topics");
                        let popularity = match scenario.expert_routing {
                            ExpertRoutingTable::Affinity { .. } => &mut topics,
                            _ => &mut popularity,
                        };
                        let mut router = ExpertRouter::new(
                            &shape,
                            scenario.expert_routing,
                            scenario.n_topics,
                            Rc::clone(layout),
                            popularity,
                            stream(streams, &format!("expert_routing_{r}")),
                        );
                        if let Some((trace, observed)) = &deployment.expert_trace {
                            router.replay(trace, *observed);
                        }
                        Some(router)
                    }
                    _ => None,
                };
                let (priced_by, imbalance_sensitivity) = match &group.replica.static_cost {
                    Some(cost) => (
                        Some(cost.step_cost(stream(streams, &names.name("service", r)))),
                        cost.imbalance_sensitivity(),
                    ),
                    None => (None, 1.0),
                };
                let expected = match (group.model.experts(), loads) {
                    (Some(shape), StaticLoads::Experts) if window_size > 0 => {
                        Some(BatchRouting::new(shape.n_layers, shape.n_experts))
                    }
                    _ => None,
                };
                let former = (window_size > 0).then(|| {
                    let dry_run: BoxedDryRun<'a> = match (&expert_router, &layout, loads) {
                        (Some(router), _, StaticLoads::Experts) => {
                            let popularity = router.popularity();
                            match (&popularity.affinities, scenario.expert_routing) {
                                (
                                    Some(affinities),
                                    ExpertRoutingTable::Affinity {
                                        purity,
                                        prediction_noise,
                                        ..
                                    },
                                ) => Box::new(AffinityDryRun::new(
                                    Rc::clone(affinities),
                                    purity,
                                    prediction_noise,
                                    popularity.top_k(),
                                    stream(streams, &names.name("prediction", r)),
                                )),
                                _ => Box::new(ExpertDryRun::new(popularity)),
                            }
                        }
                        (Some(router), Some(layout), StaticLoads::Gpus) => {
                            Box::new(LayoutDryRun::new(router.popularity(), Rc::clone(layout)))
                        }
                        _ => Box::new(PromptDryRun),
                    };
                    let selector = selectors
                        .next()
                        .expect("a static replica has its batch selector");
                    SelectorFormer::new(
                        window_size,
                        seed_with_oldest,
                        selector.as_mut(),
                        stream(streams, &names.name("selector", r)),
                        dry_run,
                    )
                });
                replicas.push(ReplicaRun {
                    replica: scheduler::replica(&group.replica, deployment.kv_blocks)
                        .with_decode_runs(fast_forward_on()),
                    former,
                    tick_pending: false,
                    min_batch_trigger,
                    scheduling_interval,
                    group: g,
                    max_num_seqs: group.replica.max_num_seqs,
                    in_flight_predicted: 0.0,
                    decode_ms_per_token,
                    recorder: ReplicaRecorder::new(
                        deployment.gpus,
                        scheduler::reported_kv_blocks(&group.replica, deployment),
                        scenario.kv_sample_interval_ns,
                    )
                    .with_imbalance_sensitivity(imbalance_sensitivity)
                    .with_timeline(scenario.timeline),
                    step_cost,
                    priced_by,
                    expected,
                    expert_router,
                    adapter_router,
                    step_flops: vec![0.0; deployment.gpus],
                    prompt_tokens_in: 0,
                    output_tokens_asked: 0,
                    arrived: 0,
                    max_len: max_sequence_len(&group.replica, deployment.kv_blocks),
                    refused: 0,
                    ready_at: SimTime::ZERO + load,
                    load,
                });
            }
        }
        // Placed sessions start when their worker gets to them (`Sessions`).
        let sessions = scenario.sessions.as_ref().map(|plan| {
            for run in &mut replicas {
                run.ready_at = SimTime::MAX;
            }
            Sessions::new(
                std::sync::Arc::clone(plan),
                replicas.iter().map(|run| run.load).collect(),
            )
        });
        let predictions = Predictions::new(scenario, streams);
        // Another family's stream names (`workload.streams`): its arrivals, and prompt then
        // output from its one lengths stream.
        let family = scenario.workload_streams.family();
        ServingServer {
            scenario,
            queue,
            router,
            arrivals: scenario.arrival.process(
                scenario.requests(),
                scenario.n_topics,
                stream(
                    streams,
                    &family.map_or("arrivals".to_string(), |f| format!("{f}/arrivals")),
                ),
            ),
            rng_prompt: stream(
                streams,
                &match family {
                    Some(f) => format!("{f}/lengths"),
                    None if scenario.one_token_stream => "tokens".to_string(),
                    None => "prompt_tokens".to_string(),
                },
            ),
            rng_output: (!scenario.one_token_stream && family.is_none())
                .then(|| stream(streams, "output_tokens")),
            rng_mixing: matches!(scenario.expert_routing, ExpertRoutingTable::Affinity { .. })
                .then(|| stream(streams, "mixing")),
            rng_adapter: stream(seed, "expertweave/adapters"),
            replica_of_adapter: plan.filter(|p| p.instances.len() > 1).map(|p| {
                (0..scenario.adapters.as_ref().map_or(0, |a| a.adapters.len()))
                    .map(|a| {
                        p.instances
                            .iter()
                            .position(|i| i.adapters.contains(&a))
                            .expect("the memory plan serves every adapter")
                    })
                    .collect()
            }),
            replicas,
            outputs: FxHashMap::default(),
            engine_states: Vec::with_capacity(count),
            // A workflow is scored as a whole (`Workflows`), not request by request.
            solved: (predictions.scores_tasks() && scenario.workflow.is_none()).then_some(0),
            predictions,
            confidence: Vec::with_capacity(count),
            predicted: vec![0.0; count],
            woken: Vec::new(),
            workflows: scenario
                .workflow
                .as_ref()
                .map(|generator| Workflows::new(generator, stream(streams, "workflows"))),
            next_stages: Vec::new(),
            questions: scenario
                .questions
                .as_ref()
                .map(|spec| Questions::new(spec, streams)),
            gate: None,
            next_id: 0,
            finished: Vec::new(),
            sink,
            trace: None,
            last_finish: SimTime::ZERO,
            observing: false,
            sessions,
            session_starts: Vec::new(),
            fast_forward: fast_forward_on(),
            inlined: 0,
        }
    }

    /// The step ends handled without an event of their own: each is an event the engine did
    /// not pop, so a run's events are the engine's count plus these.
    pub fn inlined_steps(&self) -> u64 {
        #[cfg(test)]
        {
            INLINED.set(self.inlined);
            RUN_STEPS.set(
                self.replicas
                    .iter()
                    .map(|r| r.replica.decode_run_steps())
                    .sum(),
            );
        }
        self.inlined
    }

    /// With `[output] timeline`: `details.timeline`, per replica (placed, per worker) the
    /// intervals its model loaded, ran steps and idled up to the run's end
    /// (`recorder::timeline::rows`).
    pub fn timeline_detail(&self) -> Option<serde_json::Value> {
        use crate::recorder::timeline::{BusyIntervals, ReplicaTimeline, rows};
        if !self.scenario.timeline {
            return None;
        }
        let (labels, places) = match &self.sessions {
            Some(sessions) => sessions.timeline_places(),
            None => (
                (0..self.replicas.len())
                    .map(|r| format!("replica {r}"))
                    .collect(),
                self.replicas
                    .iter()
                    .enumerate()
                    .map(|(r, run)| (vec![r], Some((SimTime::ZERO, SimTime::ZERO + run.load))))
                    .collect(),
            ),
        };
        let models: Vec<&str> = self
            .scenario
            .groups()
            .flat_map(|(model, r)| std::iter::repeat_n(model.name(), r.count))
            .collect();
        let none = BusyIntervals::default();
        let replicas: Vec<ReplicaTimeline<'_>> = self
            .replicas
            .iter()
            .zip(places)
            .zip(models)
            .map(|((run, (rows, load)), model)| ReplicaTimeline {
                model,
                rows,
                load,
                busy: run.recorder.busy().unwrap_or(&none),
            })
            .collect();
        let resolution = replicas
            .iter()
            .map(|r| r.busy.resolution())
            .max()
            .unwrap_or_default();
        Some(serde_json::json!({
            "resolution_s": resolution.as_secs_f64(),
            "rows": rows(labels, &replicas, self.last_finish),
        }))
    }

    /// With `[placement]`: what the workers did (`details.sessions`).
    pub fn sessions_detail(&self) -> Option<serde_json::Value> {
        self.sessions.as_ref().map(|s| s.detail(self.scenario))
    }

    /// With `[placement]`: each worker's wall and idle time, the loads.
    pub fn sessions_summary(&self) -> Option<SessionsSummary> {
        self.sessions.as_ref().map(Sessions::summary)
    }

    /// Schedules the end of each load of a session that started (`Event::Loaded`), the
    /// aggregator's once the expert stage is over (after this event's submissions).
    fn schedule_session_starts(&mut self, events: &mut EventQueue<Event>) {
        if let Some(sessions) = &mut self.sessions {
            sessions.start_aggregator(&mut self.session_starts);
        }
        for (replica, loaded) in self.session_starts.drain(..) {
            events.schedule(loaded, Event::Loaded { replica });
        }
    }

    /// Replica `r`'s session's load ended at `now`: the calls held for it are submitted now
    /// (each timed from here), and it may step.
    fn release(&mut self, r: usize, now: SimTime) {
        let sessions = self.sessions.as_mut().expect("placed sessions");
        let held = sessions.released(r, now, &mut self.session_starts);
        let run = &mut self.replicas[r];
        run.ready_at = now;
        for mut request in held {
            request.submitted = now;
            request.workflow_arrival = now;
            request.enqueued_iteration = run.replica.iteration();
            run.replica.submit(now, request, &mut *self.queue, r);
        }
        run.recorder
            .queue_depth(now, run.replica.waiting(&*self.queue, r));
    }

    /// The share of requests whose replica's model solves them (Chimera's task score), %, when
    /// every replica group has a task score.
    pub fn task_score_pct(&self) -> Option<f64> {
        if let Some(workflows) = &self.workflows {
            return Some(workflows.score_pct());
        }
        self.solved
            .map(|solved| 100.0 * solved as f64 / self.next_id.max(1) as f64)
    }

    /// Prices replica `r`'s steps by `costs[r]` instead of its own `ReplicaStepCost` (the seam
    /// a live wrapper or a test prices through; one cost per replica).
    pub fn with_step_costs(mut self, costs: Vec<Box<dyn StepCost + 'a>>) -> Self {
        assert_eq!(
            costs.len(),
            self.replicas.len(),
            "one step cost per replica"
        );
        for (run, cost) in self.replicas.iter_mut().zip(costs) {
            run.priced_by = Some(cost);
        }
        self
    }

    /// Prices replica `r`'s steps by `wrap(r, a copy of its own ReplicaStepCost)`.
    pub fn with_wrapped_step_costs(
        mut self,
        mut wrap: Box<dyn FnMut(usize, ReplicaStepCost) -> Box<dyn StepCost + 'a> + 'a>,
    ) -> Self {
        for (r, run) in self.replicas.iter_mut().enumerate() {
            run.priced_by = Some(wrap(r, run.step_cost.clone()));
        }
        self
    }

    /// Gates the questions' aggregator calls by `gate` (`[workload.questions]`).
    pub fn with_gate(mut self, gate: Box<dyn AggregationGate>) -> Self {
        self.gate = Some(gate);
        self
    }

    /// Writes every step as a trace-event slice to `trace`.
    pub fn with_trace_events(mut self, trace: TraceEvents) -> Self {
        self.trace = Some(trace);
        self
    }

    /// The next arrival before the horizon (`workload.horizon_s`), if any.
    fn next_arrival(&mut self) -> Option<Arrival> {
        let horizon = self.scenario.horizon.unwrap_or(SimTime::MAX);
        self.arrivals
            .next_arrival()
            .filter(|arrival| arrival.time < horizon)
    }

    fn length(spec: &LengthSpec, given: Option<u32>, rng: &mut SimRng) -> u32 {
        match spec {
            LengthSpec::Distribution(d) => d.sample(rng),
            LengthSpec::Trace => given.expect("a trace with token counts was checked"),
        }
    }

    /// Routes and queues `arrival` (a static replica's former takes it); returns its replica.
    fn arrive(&mut self, now: SimTime, arrival: Arrival) -> usize {
        if let Some(workflows) = &mut self.workflows {
            // A workflow arrives: drawn, the semantic router's confidences drawn for it (as
            // the chimera family does, once per workflow), its first stage submitted.
            let id = workflows.arrive(now, arrival.prompt_tokens);
            let run = workflows.run_mut(id);
            let mut confidence = std::mem::take(&mut run.confidence);
            self.predictions.group_confidences(
                run.workflow.difficulty,
                run.workflow.outcome_draw,
                &mut confidence,
            );
            run.confidence = confidence;
            workflows.confidences_drawn(id);
            return self.submit_stage(id, now, arrival.topic);
        }
        let s = self.scenario;
        // An addressed call (`workload.calls`) draws its class's lengths and goes to its group.
        let class = s.call_class(self.next_id);
        let (prompt_spec, output_spec) = class.map_or((&s.prompt_tokens, &s.output_tokens), |c| {
            (&c.prompt_tokens, &c.output_tokens)
        });
        let prompt = Self::length(prompt_spec, arrival.prompt_tokens, &mut self.rng_prompt);
        let output = Self::length(
            output_spec,
            arrival.output_tokens,
            self.rng_output.as_mut().unwrap_or(&mut self.rng_prompt),
        )
        .max(1);
        let secondary_topic = self
            .rng_mixing
            .as_mut()
            .map_or(0, |rng| rng.random_range(0..s.n_topics as usize) as u32);
        let id = self.next_id;
        self.next_id += 1;
        let draws = self.observe_for_routing(id, prompt, output);
        // The adapter draws from its own stream: drawn before routing or after, the same.
        let adapter = s
            .adapters
            .as_ref()
            .map(|a| a.draw.sample(&mut self.rng_adapter) as u32);
        let eligible = class.map_or(0..self.replicas.len(), |c| c.replicas.clone());
        let r = match (&self.replica_of_adapter, adapter, &s.sessions, class) {
            (Some(replica_of), Some(a), _, _) => replica_of[a as usize],
            // A placed call goes to its model's sessions in order, each the plan's count.
            (_, _, Some(plan), Some(c)) => {
                let start: u64 = s
                    .calls
                    .iter()
                    .take_while(|other| !std::ptr::eq(*other, c))
                    .map(|other| other.n_requests as u64)
                    .sum();
                plan.replica_of(c.replicas.clone(), id - start)
            }
            _ => self.route_one_stage(id, eligible.clone()),
        };
        assert!(eligible.contains(&r), "router chose replica {r}");
        // Admission (vLLM's): a prompt that leaves no room for one output token within the
        // replica's longest sequence is refused; an output that would pass it stops there.
        let max_len = self.replicas[r].max_len;
        if prompt >= max_len {
            self.replicas[r].refused += 1;
            if let Some(sessions) = &mut self.sessions {
                sessions.call_done(r, now, &mut self.session_starts);
            }
            return r;
        }
        let output = output.min(max_len - prompt);
        if let Some(solved) = &mut self.solved {
            *solved += u64::from(self.predictions.solves(r, &draws) == Some(true));
        }
        let run = &mut self.replicas[r];
        // A static replica's batch former queues the request with its true output length
        // (`batch_former::ServingCandidate`), which its finish takes back out.
        run.in_flight_predicted += match run.former {
            Some(_) => f64::from(output),
            None => draws.predicted_tokens,
        };
        run.prompt_tokens_in += u64::from(prompt);
        run.output_tokens_asked += u64::from(output);
        run.arrived += 1;
        if let Some(former) = &mut run.former {
            former.push(ServingCandidate {
                id,
                arrival: now,
                topic: arrival.topic,
                secondary_topic,
                prompt_tokens: prompt,
                output_tokens: output,
                load: Vec::new(),
                prediction: None,
            });
            run.replica.submitted(now);
            run.recorder.queue_depth(now, former.waiting());
            return r;
        }
        self.outputs.insert(id, (output, adapter));
        let request = one_stage_request(
            id,
            now,
            run.replica.iteration(),
            prompt,
            &draws,
            arrival.topic,
        );
        // A placed session's calls wait until its load ends (`release`).
        if let Some(sessions) = &mut self.sessions
            && sessions.holds(r)
        {
            sessions.hold(r, request);
            return r;
        }
        run.replica.submit(now, request, &mut *self.queue, r);
        run.recorder
            .queue_depth(now, run.replica.waiting(&*self.queue, r));
        r
    }

    /// A question arrives at `now`: its three expert calls routed and queued, each to its
    /// expert's group (with the aggregator calls a refusal makes ready); the replicas they go
    /// to join `woken`.
    fn arrive_question(&mut self, now: SimTime, woken: &mut Vec<usize>) {
        let calls = self
            .questions
            .as_mut()
            .expect("a question workload")
            .arrive();
        for call in calls {
            let r = self.submit_call(now, call);
            if !woken.contains(&r) {
                woken.push(r);
            }
        }
        self.submit_ready(now, woken);
    }

    /// The questions' aggregator calls ready at `now`, each routed and queued; the replicas
    /// they go to join `woken`.
    fn submit_ready(&mut self, now: SimTime, woken: &mut Vec<usize>) {
        while let Some(call) = self.questions.as_mut().and_then(Questions::pop_ready) {
            let r = self.submit_call(now, call);
            if !woken.contains(&r) {
                woken.push(r);
            }
        }
    }

    /// The predictor's draws for one-stage request `id`, its confidences and predicted tokens
    /// set where the router reads them, and the engines' states now.
    fn observe_for_routing(
        &mut self,
        id: u64,
        prompt: u32,
        output: u32,
    ) -> super::predictions::RequestDraws {
        let draws = self.predictions.draw(id, prompt, output);
        self.predictions.confidences(&draws, &mut self.confidence);
        self.predicted.fill(draws.predicted_tokens);
        engine_states(&self.replicas, &*self.queue, &mut self.engine_states);
        draws
    }

    /// The router's replica for one-stage request `id` among `eligible` (after
    /// [`Self::observe_for_routing`]).
    fn route_one_stage(&mut self, id: u64, eligible: std::ops::Range<usize>) -> usize {
        eligible.start
            + self.router.route(
                &RouteRequest {
                    id,
                    workflow: id,
                    stage: 0,
                    confidence: &self.confidence,
                    predicted_total_tokens: &self.predicted,
                },
                &self.engine_states[eligible],
            )
    }

    /// Routes and queues a question's `call` at `now` among its group's replicas (the
    /// predictor's draws as an addressed call's; placed, to its model's sessions in order, and
    /// held until its session generates); a prompt past what the replica takes is refused, and
    /// the call counts as finished with no output. Returns the replica.
    fn submit_call(&mut self, now: SimTime, call: Call) -> usize {
        let id = self.next_id;
        self.next_id += 1;
        self.questions
            .as_mut()
            .expect("a question workload")
            .submitted(id, &call);
        let (prompt, output) = (call.prompt_tokens, call.output_tokens.max(1));
        let draws = self.observe_for_routing(id, prompt, output);
        let eligible = call.replicas;
        let r = match &mut self.sessions {
            Some(sessions) => sessions.route(eligible.clone()),
            None => self.route_one_stage(id, eligible.clone()),
        };
        assert!(eligible.contains(&r), "router chose replica {r}");
        let max_len = self.replicas[r].max_len;
        if prompt >= max_len {
            self.replicas[r].refused += 1;
            // A planned expert call counts as its session's (the aggregator's were not held).
            if let Some(sessions) = &mut self.sessions
                && !sessions.is_aggregator(r)
            {
                sessions.call_done(r, now, &mut self.session_starts);
            }
            let gate = self
                .gate
                .as_deref_mut()
                .expect("a question workload has its gate");
            let questions = self.questions.as_mut().expect("a question workload");
            questions.call_done(id, 0, now, gate);
            return r;
        }
        let output = output.min(max_len - prompt);
        let run = &mut self.replicas[r];
        run.in_flight_predicted += draws.predicted_tokens;
        run.prompt_tokens_in += u64::from(prompt);
        run.output_tokens_asked += u64::from(output);
        run.arrived += 1;
        self.outputs.insert(id, (output, None));
        let request = one_stage_request(id, now, run.replica.iteration(), prompt, &draws, 0);
        if let Some(sessions) = &mut self.sessions
            && sessions.holds(r)
        {
            sessions.hold(r, request);
            return r;
        }
        run.replica.submit(now, request, &mut *self.queue, r);
        run.recorder
            .queue_depth(now, run.replica.waiting(&*self.queue, r));
        r
    }

    /// Routes and queues the next stage of workflow `id` at `now` (Chimera's submission): the
    /// predictor's estimate of the workflow's remaining tokens on each replica's model (the
    /// truth on that model), the router's choice, then the estimate of the stage's own tokens
    /// on the chosen model, each from the predictor's stream; the stage's true output is the
    /// workflow's on that model. A prompt past what the replica takes ends the workflow there
    /// (abandoned). Returns the replica.
    fn submit_stage(&mut self, id: u64, now: SimTime, topic: u32) -> usize {
        let workflows = self.workflows.as_mut().expect("a workflow workload");
        let run = workflows.run(id);
        let stage = run.next_stage;
        let prompt = run.prompt_tokens();
        let request_id = self.next_id;
        self.next_id += 1;
        engine_states(&self.replicas, &*self.queue, &mut self.engine_states);
        self.confidence.clear();
        for (r, replica) in self.replicas.iter().enumerate() {
            if let Some(&c) = run.confidence.get(replica.group) {
                self.confidence.push(c);
            }
            let truth = run.workflow.remaining_total(replica.group, stage);
            self.predicted[r] = self.predictions.predict(truth, prompt, request_id);
        }
        let r = self.router.route(
            &RouteRequest {
                id: request_id,
                workflow: id,
                stage,
                confidence: &self.confidence,
                predicted_total_tokens: &self.predicted,
            },
            &self.engine_states,
        );
        assert!(r < self.replicas.len(), "router chose replica {r}");
        let group = self.replicas[r].group;
        let predicted_total = self.predicted[r];
        let truth_total = run.workflow.remaining_total(group, stage);
        let output = run.workflow.tokens(group, stage).max(1);
        let predicted_stage = self
            .predictions
            .predict(u64::from(output), prompt, request_id);
        let rank_noise = self.predictions.rank_noise();
        let (arrival, attained) = (run.arrival, run.generated);
        workflows.predicted(predicted_total, truth_total);
        let run = &mut self.replicas[r];
        if prompt >= run.max_len {
            run.refused += 1;
            workflows.abandon(id);
            self.router.workflow_done(id);
            return r;
        }
        let output = output.min(run.max_len - prompt);
        run.in_flight_predicted += predicted_total;
        run.prompt_tokens_in += u64::from(prompt);
        run.output_tokens_asked += u64::from(output);
        run.arrived += 1;
        self.outputs.insert(request_id, (output, None));
        let request = QueuedRequest {
            id: request_id,
            workflow: id,
            stage,
            submitted: now,
            workflow_arrival: arrival,
            enqueued_iteration: run.replica.iteration(),
            prompt_tokens: prompt,
            predicted_stage_tokens: predicted_stage,
            predicted_total_tokens: predicted_total,
            attained_service: attained,
            rank_noise,
            topic,
        };
        run.replica.submit(now, request, &mut *self.queue, r);
        run.recorder
            .queue_depth(now, run.replica.waiting(&*self.queue, r));
        r
    }

    /// A static replica `r` at `now` (on a tick of its grid, or not): when it is idle, it runs
    /// the former's batch if `min_batch_trigger` requests wait or this is a tick, else waits
    /// for the next tick (CAPS's scheduler loop).
    fn try_dispatch(&mut self, r: usize, now: SimTime, tick: bool, events: &mut EventQueue<Event>) {
        let run = &mut self.replicas[r];
        let waiting = run.former.as_ref().map_or(0, SelectorFormer::waiting);
        // A static batch is running while the replica holds sequences (all leave at its end);
        // a replica still loading its model waits for its `Loaded`.
        if !run.replica.running().is_empty() || waiting == 0 || now < run.ready_at {
            return;
        }
        if tick || waiting >= run.min_batch_trigger {
            if let Some(end) = self.start_step(r, now) {
                events.schedule(end, Event::StepEnd { replica: r });
            }
        } else if !run.tick_pending {
            let interval = run.scheduling_interval.0;
            events.schedule(
                SimTime((now.0 / interval + 1) * interval),
                Event::SchedulerTick { replica: r },
            );
            run.tick_pending = true;
        }
    }

    /// Schedules and prices replica `r`'s next step at `now`; returns its end, or `None` when
    /// the replica goes idle.
    fn start_step(&mut self, r: usize, now: SimTime) -> Option<SimTime> {
        let run = &mut self.replicas[r];
        // Each branch prices its `StepWork` where it was built and sets the step's counts and
        // time in place: neither the work nor the time is moved through a pair (two copies of
        // each a step).
        let (counts, time);
        if let Some(former) = &mut run.former {
            let work = run.replica.schedule_static_batch(now, former)?;
            time = match &mut run.priced_by {
                Some(cost) => {
                    let candidates = former.in_flight().iter();
                    let expected_routing = run.expected.as_mut().map(|routing| {
                        let loads = candidates.map(|c| (c.load.as_slice(), c.prompt_tokens));
                        routing.of(loads, work.decode_iterations > 0)
                    });
                    let time = cost.price(&StepWork {
                        expected_routing,
                        ..work
                    });
                    // Its expert load is the prefill's expected routing (as the caps family
                    // records it); the router routed nothing.
                    if let (Some(routing), Some(router)) = (&run.expected, &run.expert_router) {
                        run.recorder
                            .expert_load(routing.prefill(), router.n_experts());
                    }
                    time
                }
                None => {
                    let time = run.step_cost.price_static(
                        &work,
                        run.expert_router.as_mut(),
                        &mut run.step_flops,
                    );
                    record_routed_load(&mut run.expert_router, &mut run.recorder);
                    time
                }
            };
            counts = StepCounts::of(&work);
        } else {
            let mut hook = Admit {
                outputs: &mut self.outputs,
                shared_prefix: self.scenario.shared_prefix_tokens,
                workflows: self.workflows.as_mut(),
            };
            let mut work = run.replica.schedule(now, &mut *self.queue, r, &mut hook)?;
            if let Some(router) = &mut run.expert_router {
                if router.topical() {
                    router.topic_tokens.fill(0);
                    for seq in work.batch.iter().filter(|s| s.scheduled() > 0) {
                        let topic = seq.request.topic as usize;
                        router.topic_tokens[topic] += u64::from(seq.scheduled());
                    }
                }
                work.routed = Some(router.route(work.prefill_tokens + work.decode_tokens));
            }
            if let Some(router) = &mut run.adapter_router {
                work.routed = Some(router.route(work.adapters));
            }
            // Each call writes its result straight into `time` (a `match` yielding it copied it).
            if let Some(cost) = &mut run.priced_by {
                time = cost.price(&work);
            } else {
                time = run.step_cost.price(&work);
            }
            run.step_cost.model_flops(&work, &mut run.step_flops);
            counts = StepCounts::of(&work);
        }
        let waiting = match &run.former {
            Some(former) => former.waiting(),
            None => run.replica.waiting(&*self.queue, r),
        };
        run.recorder.queue_depth(now, waiting);
        if run.former.is_none() {
            record_routed_load(&mut run.expert_router, &mut run.recorder);
        }
        run.replica.begin_step(time.duration);
        run.recorder.moe_time(time.breakdown.moe_ns);
        run.recorder.step_started(
            now,
            &run.replica,
            &time.breakdown.per_gpu_busy_ns,
            &run.step_flops,
        );
        if let Some(trace) = &mut self.trace {
            trace.step(
                r,
                now,
                time.duration,
                counts,
                run.replica.kv().used(),
                &time.breakdown,
            );
        }
        let end = now + time.duration;
        if run.priced_by.is_none() {
            run.step_cost.reuse(time.breakdown.per_gpu_busy_ns);
        }
        Some(end)
    }

    fn step_end(&mut self, r: usize, now: SimTime) {
        let mut finished = std::mem::take(&mut self.finished);
        let run = &mut self.replicas[r];
        run.recorder
            .complete_step(now, r, &mut run.replica, &mut finished, &mut *self.sink);
        if !finished.is_empty() {
            self.last_finish = now;
        }
        for seq in finished.drain(..) {
            if let Some(sessions) = &mut self.sessions {
                sessions.call_done(r, now, &mut self.session_starts);
            }
            run.in_flight_predicted -= seq.request.predicted_total_tokens;
            let workflow = seq.request.workflow;
            match &mut self.workflows {
                Some(workflows) => {
                    let capability = workflows.capability(run.group);
                    if workflows.stage_done(workflow, seq.output, capability, now) {
                        self.next_stages.push(workflow);
                    } else {
                        self.router.workflow_done(workflow);
                    }
                }
                None => self.router.workflow_done(workflow),
            }
            if let Some(questions) = &mut self.questions {
                let gate = self
                    .gate
                    .as_deref_mut()
                    .expect("a question workload has its gate");
                questions.call_done(seq.request.id, seq.output, now, gate);
            }
        }
        self.finished = finished;
        if let Some(former) = &mut run.former {
            former.finish_batch(|_| {});
        }
        // The next stages, in the order their predecessors finished, each routed and queued
        // at this instant (the replicas they wake start their steps once all are queued).
        let mut next = std::mem::take(&mut self.next_stages);
        self.woken.clear();
        for id in next.drain(..) {
            let woke = self.submit_stage(id, now, 0);
            if !self.woken.contains(&woke) {
                self.woken.push(woke);
            }
        }
        self.next_stages = next;
        // The questions' aggregator calls this step's finishes made ready.
        let mut woken = std::mem::take(&mut self.woken);
        self.submit_ready(now, &mut woken);
        self.woken = woken;
    }

    /// The run's summaries (overall, then per replica) once every request has finished, after
    /// checking conservation and Little's law on each replica; `Err` names what failed.
    pub fn finish(self) -> Result<(ServingSummary, Vec<ServingSummary>), String> {
        let end = self.last_finish;
        if let Some(workflows) = &self.workflows
            && workflows.in_flight() > 0
        {
            return Err(format!(
                "the run ended with {} workflows unfinished",
                workflows.in_flight()
            ));
        }
        if let Some(questions) = &self.questions
            && questions.in_flight() > 0
        {
            return Err(format!(
                "the run ended with {} questions unanswered",
                questions.in_flight()
            ));
        }
        let mut parts = Vec::with_capacity(self.replicas.len());
        for (r, run) in self.replicas.into_iter().enumerate() {
            let stats = run.replica.stats();
            let gpu = &self
                .scenario
                .groups()
                .nth(run.group)
                .expect("the replica's group")
                .1
                .gpu;
            let mut summary = run.recorder.finish(end, stats, gpu);
            summary.refused = run.refused;
            super::checks::conservation(
                r,
                stats,
                &summary,
                super::checks::Submitted {
                    requests: run.arrived,
                    prompt_tokens: run.prompt_tokens_in,
                    output_tokens: run.output_tokens_asked,
                },
            )?;
            super::checks::littles_law(r, stats, &summary, end)?;
            parts.push(summary);
        }
        if let Some(trace) = self.trace {
            trace.finish()?;
        }
        let mut overall = ServingSummary::merge(&parts);
        overall.workflows = self.workflows.as_ref().map(Workflows::summary);
        overall.questions = self.questions.as_ref().map(Questions::summary);
        // Placed, the expert stage ends with its last worker (an empty data-parallel session
        // loads past the last call), where the aggregator's session starts: MOSAIC's stages.
        if let (Some(q), Some(end)) = (
            &mut overall.questions,
            self.sessions.as_ref().and_then(Sessions::expert_end),
        ) {
            q.expert_end = q.expert_end.max(end);
            q.last_finish = q.last_finish.max(end);
        }
        Ok((overall, parts))
    }
}

impl Model for ServingServer<'_> {
    type Event = Event;

    fn start(&mut self, events: &mut EventQueue<Event>) {
        if let Some(first) = self.next_arrival() {
            events.schedule(first.time, Event::Arrival(first));
        }
        for (replica, run) in self.replicas.iter().enumerate() {
            if run.ready_at > SimTime::ZERO && run.ready_at < SimTime::MAX {
                events.schedule(run.ready_at, Event::Loaded { replica });
            }
        }
        if let Some(sessions) = &mut self.sessions {
            sessions.start(&mut self.session_starts);
            self.schedule_session_starts(events);
        }
    }

    fn handle(&mut self, now: SimTime, event: Event, events: &mut EventQueue<Event>) {
        if self.observed_enough() {
            // The observation pass stops: no event is scheduled any more.
            return;
        }
        match event {
            Event::Arrival(arrival) => {
                // Every request arriving at this instant is queued before an idle replica
                // schedules its step, as vLLM's engine adds the requests that arrived before it
                // schedules (an offline batch starts as one step, not one request).
                let mut woken = std::mem::take(&mut self.woken);
                woken.clear();
                let mut next = Some(arrival);
                while let Some(arrival) = next.take_if(|a| a.time <= now) {
                    if self.questions.is_some() {
                        self.arrive_question(now, &mut woken);
                        next = self.next_arrival();
                        continue;
                    }
                    let r = self.arrive(now, arrival);
                    if self.replicas[r].former.is_some() {
                        // A static replica checks its trigger at each arrival, as CAPS's
                        // scheduler loop does.
                        self.try_dispatch(r, now, false, events);
                    } else if !woken.contains(&r) {
                        woken.push(r);
                    }
                    next = self.next_arrival();
                }
                if let Some(next) = next {
                    events.schedule(next.time, Event::Arrival(next));
                }
                self.schedule_session_starts(events);
                for &replica in &woken {
                    let run = &self.replicas[replica];
                    if run.replica.is_busy() || now < run.ready_at {
                        continue;
                    }
                    if let Some(end) = self.start_step(replica, now) {
                        events.schedule(end, Event::StepEnd { replica });
                    }
                }
                self.woken = woken;
            }
            Event::StepEnd { replica } => {
                // The decode fast-forward: a continuous replica's next step that ends strictly
                // before every pending event is the event the engine would pop next (a tie
                // pops the event scheduled first), so it is handled here at once; a step
                // ending at `SimTime::MAX` goes through the engine, which notices it.
                let mut now = now;
                loop {
                    self.step_end(replica, now);
                    self.schedule_session_starts(events);
                    // Replicas a workflow's next stage woke (the finishing one starts below).
                    let woken = std::mem::take(&mut self.woken);
                    for &r in woken.iter().filter(|&&r| r != replica) {
                        let run = &self.replicas[r];
                        if run.replica.is_busy() || now < run.ready_at {
                            continue;
                        }
                        if let Some(end) = self.start_step(r, now) {
                            events.schedule(end, Event::StepEnd { replica: r });
                        }
                    }
                    self.woken = woken;
                    if self.replicas[replica].former.is_some() {
                        self.try_dispatch(replica, now, false, events);
                    } else if let Some(end) = self.start_step(replica, now) {
                        if self.fast_forward
                            && end < SimTime::MAX
                            && events.peek_time().is_none_or(|next| end < next)
                            && !self.observed_enough()
                        {
                            self.inlined += 1;
                            now = end;
                            continue;
                        }
                        events.schedule(end, Event::StepEnd { replica });
                    }
                    break;
                }
            }
            Event::SchedulerTick { replica } => {
                self.replicas[replica].tick_pending = false;
                self.try_dispatch(replica, now, true, events);
            }
            Event::Loaded { replica } => {
                if self.sessions.is_some() {
                    self.release(replica, now);
                    self.schedule_session_starts(events);
                }
                if self.replicas[replica].former.is_some() {
                    self.try_dispatch(replica, now, false, events);
                } else if !self.replicas[replica].replica.is_busy()
                    && let Some(end) = self.start_step(replica, now)
                {
                    events.schedule(end, Event::StepEnd { replica });
                }
            }
        }
    }
}

/// A one-stage request `id` (an arrival or an addressed call) queued at `now`, the replica at
/// `iteration`, with its predictor draws: its own workflow, nothing served yet.
fn one_stage_request(
    id: u64,
    now: SimTime,
    iteration: u64,
    prompt: u32,
    draws: &super::predictions::RequestDraws,
    topic: u32,
) -> QueuedRequest {
    QueuedRequest {
        id,
        workflow: id,
        stage: 0,
        submitted: now,
        workflow_arrival: now,
        enqueued_iteration: iteration,
        prompt_tokens: prompt,
        predicted_stage_tokens: draws.predicted_tokens,
        predicted_total_tokens: draws.predicted_tokens,
        attained_service: 0,
        rank_noise: draws.rank_noise,
        topic,
    }
}
