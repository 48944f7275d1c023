//! The Chimera serving model: heterogeneous engines (one model each, continuous batching, a local
//! priority queue ordered by a `QueuePolicy`) fed by a `Router`, serving multi-stage workflows whose
//! next stage is submitted, with the accumulated context, when the previous one completes.
//!
//! Events (`Event`): `WorkflowArrival` (the next workflow, from the scenario's arrival process:
//! Poisson at its RPS, bursty, or a replayed trace carrying the user prompt's length) and
//! `StepComplete { engine }` (that engine's step ends).
//!
//! Each engine is a `serving::Replica` configured as Chimera runs vLLM (`replica_config`):
//! requests are admitted at step boundaries while the batch has room and the KV cache holds their
//! prompt, a step runs every request in the batch for one token (a newly admitted request's
//! prefill produces its first token), and requests run to completion (no preemption). Steps are
//! priced through the serving layer's `StepCost` seam (`EngineStepCost`).

use super::config::ChimeraScenario;
use super::models::{EngineCost, PREFIX_BLOCK_TOKENS};
use crate::arrivals::ArrivalProcess;
use crate::engine::Model;
use crate::event_queue::EventQueue;
use crate::metrics::{LatencyRecorder, LatencySummary};
use crate::recorder::ranking::{average_precision, kendall_tau_distance};
use crate::recorder::{RequestLatencies, RequestSummary};
use crate::rng::{SimRng, stream};
use crate::serving::agent_workflows::{SYSTEM_PROMPT_TOKENS, Workflow};
use crate::serving::{
    Admission, AdmitHook, Batching, KvConfig, Replica, ReplicaConfig, Seq, StepCost, StepTime,
    StepWork,
};
use crate::serving::{
    EngineState, PrefixSegment, QueuePolicy, QueuedRequest, RouteRequest, Router,
};
use crate::time::SimTime;
use rand_distr::{Distribution, StandardNormal};
use rustc_hash::FxHashMap;
use serde::Serialize;

/// Requests whose (prediction, truth) pairs feed the Kendall tau distance (O(n^2) pairs).
pub const KENDALL_SAMPLE: usize = 2_000;
/// Workflows whose confidences feed the router's mean average precision.
pub const MAP_SAMPLE: usize = 20_000;

/// One engine: its replica and what Chimera's router and reports track beside it.
struct EngineRun {
    replica: Replica,
    /// Activity monitor: predicted total remaining tokens dispatched here and not finished.
    in_flight_predicted: f64,
    first_stage_requests: u64,
    max_waiting: usize,
}

/// The replica configuration that reproduces Chimera's engine: `max_num_seqs` = the engine's
/// batch limit, vLLM's token budget with chunked prefill (`cluster.max_num_batched_tokens`; 0:
/// no budget, no chunking), a cache counted in tokens (block size 1, no watermark) that admits
/// on the prompt alone and never preempts (docs/serving.md).
pub fn replica_config(cost: &EngineCost) -> ReplicaConfig {
    // Tokens are counted exactly, except where prefix caching needs vLLM's blocks.
    let block_size = if cost.prefix_caching {
        PREFIX_BLOCK_TOKENS
    } else {
        1
    };
    ReplicaConfig {
        max_num_seqs: cost.max_batch_size,
        max_num_batched_tokens: (cost.max_num_batched_tokens > 0)
            .then_some(cost.max_num_batched_tokens),
        chunked_prefill: cost.max_num_batched_tokens > 0,
        kv: KvConfig {
            block_size,
            blocks: cost.dense.kv_capacity_tokens / u64::from(block_size),
            watermark_blocks: 0,
        },
        admission: Admission::PromptOnly,
        batching: Batching::Continuous,
    }
}

/// The replica of an engine: `replica_config`, caching prefixes when the engine does.
pub fn engine_replica(cost: &EngineCost) -> Replica {
    let replica = Replica::new(replica_config(cost));
    if cost.prefix_caching {
        replica.with_prefix_caching()
    } else {
        replica
    }
}

/// Chimera's engine cost (`models::EngineCost`) behind the serving layer's step-cost seam: the
/// serving layer's dense step over the engine's roofline, or over its measured operations with
/// `cluster.measured` (`DenseServing::step_cost`: a step's decoding sequences and
/// prompt tokens are its rows, its sequences the head's rows, its cached context the attention's,
/// its prompts the causal prefill's), or with `cluster.profile` from the measured dense-decode
/// profile of its model (`mosaic::profile_cost::ProfileStepCost`, as MOSAIC's sessions).
pub struct EngineStepCost<'a>(pub &'a EngineCost);

impl StepCost for EngineStepCost<'_> {
    fn price(&mut self, work: &StepWork<'_>) -> StepTime {
        if let Some(profile) = &self.0.profile {
            return crate::mosaic::profile_cost::ProfileStepCost(&profile.cost).price(work);
        }
        self.0.dense.step_cost().price(work)
    }
}

/// What a Chimera engine does when its replica admits a request: the stage's true output length
/// comes from the workflow; the wait is added to the workflow's (the replica records each
/// request's own).
struct Admit<'x> {
    workflows: &'x mut FxHashMap<u64, WorkflowRun>,
    admissions: &'x mut Option<Vec<AdmissionRecord>>,
    engine: usize,
    model: usize,
}

impl AdmitHook for Admit<'_> {
    fn output_tokens(&mut self, request: &QueuedRequest) -> u32 {
        self.workflows
            .get(&request.workflow)
            .expect("queued request's workflow exists")
            .workflow
            .tokens(self.model, request.stage)
    }

    /// The stage's prompt as the paper's section 3.1 builds it: "the stage-i system prompt, the
    /// user message, and the accumulated history from prior stages", in that order. The system
    /// prompt is its role's (the same for every stage of that role of every workflow), the user
    /// message the workflow's, the history the workflow's earlier outputs in order (so a later
    /// stage's history extends an earlier one's).
    fn prefix(&mut self, request: &QueuedRequest, segments: &mut Vec<PrefixSegment>) {
        let run = self
            .workflows
            .get(&request.workflow)
            .expect("queued request's workflow exists");
        segments.extend(run.workflow.prompt_segments(request));
    }

    fn admitted(&mut self, now: SimTime, request: &QueuedRequest, _output: u32) {
        let run = self
            .workflows
            .get_mut(&request.workflow)
            .expect("queued request's workflow exists");
        let waited = (now - request.submitted).0;
        run.queue_ns += waited;
        if let Some(records) = self.admissions {
            records.push(AdmissionRecord {
                engine: self.engine,
                request: request.id,
                workflow: request.workflow,
                stage: request.stage,
                submitted: request.submitted,
                admitted: now,
                prompt_tokens: request.prompt_tokens,
                predicted_total_tokens: request.predicted_total_tokens,
                true_remaining_tokens: run.workflow.remaining_total(self.model, request.stage),
            });
        }
    }
}

#[derive(Clone, Debug)]
struct WorkflowRun {
    workflow: Workflow,
    arrival: SimTime,
    next_stage: u32,
    accumulated_output: u32,
    generated: u64,
    queue_ns: u64,
    capability_sum: f64,
    /// Per model (scenario model index).
    confidence: Vec<f64>,
}

/// One admission, recorded when the server is asked to (tests, debugging).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AdmissionRecord {
    pub engine: usize,
    pub request: u64,
    pub workflow: u64,
    pub stage: u32,
    pub submitted: SimTime,
    pub admitted: SimTime,
    /// The stage's prompt: system prompt, user prompt and the earlier stages' outputs.
    pub prompt_tokens: u32,
    pub predicted_total_tokens: f64,
    pub true_remaining_tokens: u64,
}

/// One engine's share of the run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EngineReport {
    pub model: String,
    pub requests: u64,
    /// Stage-0 requests routed here (workflows assigned by the router's first decision).
    pub workflows_started: u64,
    pub output_tokens: u64,
    /// Fraction of the run the engine was executing a step.
    pub utilization: f64,
    pub mean_batch_size: f64,
    pub steps: u64,
    pub max_waiting: usize,
    pub decode_ms_per_token: f64,
    /// With prefix caching: the share of its requests' prompt tokens found cached.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix_hit_rate: Option<f64>,
}

/// Everything one Chimera run reports (scalars and detail).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChimeraMetrics {
    pub n_workflows: u64,
    pub n_requests: u64,
    /// Workflow arrival to the completion of its last stage.
    pub workflow_latency: LatencySummary,
    /// Mean over workflows of end-to-end latency / output tokens generated, ms per token.
    pub latency_per_token_ms: f64,
    /// Per request (a workflow's stage), as the engines' replicas recorded them: TTFT, TPOT,
    /// end to end (submission to its last token) and queueing (submission to admission into
    /// a step, the `queue_time_*` metrics).
    pub requests: RequestSummary,
    /// Per workflow: the sum of its stages' queueing times.
    pub workflow_queue_time: LatencySummary,
    /// Mean task score, percent.
    pub score_pct: f64,
    /// Completed workflows per second, first arrival to last completion.
    pub throughput_wps: f64,
    pub makespan_s: f64,
    pub engine_utilization_mean: f64,
    /// Max over engines of output tokens / mean over engines.
    pub engine_token_imbalance: f64,
    /// Macro mean average precision of the semantic router's confidences (0 without positives).
    pub router_map: f64,
    /// Kendall tau distance between the predictor's totals and the true remaining totals over the
    /// first `KENDALL_SAMPLE` requests (0 without an untied pair).
    pub predictor_kendall_distance: f64,
    pub engines: Vec<EngineReport>,
}

/// What happens to the Chimera cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A workflow arrives, with its user prompt length when the arrivals know it (trace replay).
    WorkflowArrival { prompt_tokens: Option<u32> },
    /// The step in execution on `engine` finishes.
    StepComplete { engine: usize },
}

/// The Chimera server as an event-driven `Model`.
pub struct ChimeraServer<'a> {
    scenario: &'a ChimeraScenario,
    queue: &'a mut dyn QueuePolicy,
    router: &'a mut dyn Router,
    arrivals: Box<dyn ArrivalProcess>,
    horizon: SimTime,
    rng_workflows: SimRng,
    rng_router: SimRng,
    rng_predictor: SimRng,
    rng_rank: SimRng,

    engines: Vec<EngineRun>,
    /// Step ends (time, engine) decided while handling the current event, handed to the event
    /// queue after it in the order they were decided.
    pending_steps: Vec<(SimTime, usize)>,
    /// By workflow id (a sequence number, so the map's hash can be cheap; never iterated).
    workflows: FxHashMap<u64, WorkflowRun>,
    next_workflow: u64,
    next_request: u64,
    finished: Vec<Seq>,
    engine_confidence: Vec<f64>,
    engine_predicted: Vec<f64>,
    engine_states: Vec<EngineState>,

    workflow_latency: LatencyRecorder,
    per_token_sum_ms: f64,
    workflow_queue_time: LatencyRecorder,
    successes: u64,
    completed: u64,
    last_completion: SimTime,
    kendall_predicted: Vec<f64>,
    kendall_truth: Vec<f64>,
    map_scores: Vec<Vec<f64>>,
    map_labels: Vec<Vec<bool>>,
    admissions: Option<Vec<AdmissionRecord>>,
    /// What prices each engine's steps: `EngineStepCost` in simulation, a live wrapper in
    /// live mode (one per engine, in engine order).
    step_costs: Vec<Box<dyn StepCost + 'a>>,
    /// Where finished workflows' records go (`--per-request-csv`), when anywhere.
    records: Option<&'a mut dyn crate::records::RecordSink>,
}

impl<'a> ChimeraServer<'a> {
    pub fn new(
        scenario: &'a ChimeraScenario,
        seed: u64,
        queue: &'a mut dyn QueuePolicy,
        router: &'a mut dyn Router,
    ) -> Self {
        let n_engines = scenario.engines.len();
        let n_models = scenario.generator.models.len();
        queue.reset(n_engines);
        router.reset(n_engines);
        ChimeraServer {
            scenario,
            queue,
            router,
            arrivals: scenario
                .arrival
                .process(usize::MAX, 1, stream(seed, "arrivals")),
            horizon: SimTime::from_secs_f64(scenario.duration_s),
            rng_workflows: stream(seed, "workflows"),
            records: None,
            rng_router: stream(seed, "semantic_router"),
            rng_predictor: stream(seed, "predictor"),
            rng_rank: stream(seed, "rank"),
            engines: scenario
                .engines
                .iter()
                .map(|spec| EngineRun {
                    replica: engine_replica(&spec.cost),
                    in_flight_predicted: 0.0,
                    first_stage_requests: 0,
                    max_waiting: 0,
                })
                .collect(),
            pending_steps: Vec::new(),
            workflows: FxHashMap::default(),
            next_workflow: 0,
            next_request: 0,
            finished: Vec::new(),
            engine_confidence: vec![0.0; n_engines],
            engine_predicted: vec![0.0; n_engines],
            engine_states: Vec::with_capacity(n_engines),
            workflow_latency: LatencyRecorder::default(),
            per_token_sum_ms: 0.0,
            workflow_queue_time: LatencyRecorder::default(),
            successes: 0,
            completed: 0,
            last_completion: SimTime::ZERO,
            kendall_predicted: Vec::new(),
            kendall_truth: Vec::new(),
            map_scores: vec![Vec::new(); n_models],
            map_labels: vec![Vec::new(); n_models],
            admissions: None,
            step_costs: scenario
                .engines
                .iter()
                .map(|spec| Box::new(EngineStepCost(&spec.cost)) as Box<dyn StepCost + 'a>)
                .collect(),
        }
    }

    /// Prices engine `e`'s steps with `step_costs[e]` instead of the analytic engine cost
    /// (live mode). One per engine, in engine order.
    pub fn with_step_costs(mut self, step_costs: Vec<Box<dyn StepCost + 'a>>) -> Self {
        assert_eq!(
            step_costs.len(),
            self.engines.len(),
            "one step cost per engine"
        );
        self.step_costs = step_costs;
        self
    }

    /// Records every admission (for tests); off by default.
    /// Streams each finished workflow's record (one row per workflow) to `sink`.
    pub fn record_requests(&mut self, sink: &'a mut dyn crate::records::RecordSink) {
        self.records = Some(sink);
    }

    pub fn record_admissions(&mut self) {
        self.admissions = Some(Vec::new());
    }

    /// The admissions recorded so far.
    pub fn admissions(&self) -> &[AdmissionRecord] {
        self.admissions.as_deref().unwrap_or(&[])
    }

    fn schedule_next_arrival(&mut self, events: &mut EventQueue<Event>) {
        if let Some(arrival) = self
            .arrivals
            .next_arrival()
            .filter(|a| a.time <= self.horizon)
        {
            events.schedule(
                arrival.time.max(events.now()),
                Event::WorkflowArrival {
                    prompt_tokens: arrival.prompt_tokens,
                },
            );
        }
    }

    fn workflow_arrives(&mut self, now: SimTime, prompt_tokens: Option<u32>) {
        let mut workflow = self.scenario.generator.generate(&mut self.rng_workflows);
        // A trace's prompt replaces the drawn one (drawn all the same, so the other draws of
        // the workflow stream stay where they are).
        if let Some(tokens) = prompt_tokens {
            workflow.user_prompt_tokens = tokens.max(1);
        }
        let mut confidence = Vec::with_capacity(self.scenario.generator.models.len());
        self.scenario.semantic_router.confidences(
            &workflow,
            &self.scenario.generator.models,
            &mut self.rng_router,
            &mut confidence,
        );
        if (self.next_workflow as usize) < MAP_SAMPLE {
            for (m, model) in self.scenario.generator.models.iter().enumerate() {
                self.map_scores[m].push(confidence[m]);
                self.map_labels[m].push(workflow.succeeds(model.capability));
            }
        }
        let id = self.next_workflow;
        self.next_workflow += 1;
        self.workflows.insert(
            id,
            WorkflowRun {
                workflow,
                arrival: now,
                next_stage: 0,
                accumulated_output: 0,
                generated: 0,
                queue_ns: 0,
                capability_sum: 0.0,
                confidence,
            },
        );
        self.submit(id, now, None);
    }

    /// Submits the next stage of workflow `id`. `finishing_engine` is the engine whose step end is
    /// being processed (it admits at the end of that processing, not here).
    fn submit(&mut self, id: u64, now: SimTime, finishing_engine: Option<usize>) {
        let scenario = self.scenario;
        let run = self.workflows.get(&id).expect("submitted workflow exists");
        let stage = run.next_stage;
        let prompt_tokens = SYSTEM_PROMPT_TOKENS
            .saturating_add(run.workflow.user_prompt_tokens)
            .saturating_add(run.accumulated_output);
        let request_id = self.next_request;
        self.next_request += 1;
        self.engine_states.clear();
        for (e, engine) in scenario.engines.iter().enumerate() {
            self.engine_confidence[e] = run.confidence[engine.model];
            let truth = run.workflow.remaining_total(engine.model, stage);
            self.engine_predicted[e] = scenario.predictor.predict(
                truth,
                prompt_tokens,
                request_id,
                &mut self.rng_predictor,
            );
            self.engine_states.push(EngineState {
                model: engine.model,
                waiting: self.engines[e].replica.waiting(&*self.queue, e),
                running: self.engines[e].replica.running().len(),
                in_flight_predicted_tokens: self.engines[e].in_flight_predicted.max(0.0),
                decode_ms_per_token: engine.cost.decode_ms_per_token,
                max_batch_size: engine.cost.max_batch_size,
            });
        }
        let e = self.router.route(
            &RouteRequest {
                id: request_id,
                workflow: id,
                stage,
                confidence: &self.engine_confidence,
                predicted_total_tokens: &self.engine_predicted,
            },
            &self.engine_states,
        );
        assert!(
            e < self.engines.len(),
            "router {} chose engine {e} of {}",
            self.router.name(),
            self.engines.len()
        );
        let model = scenario.engines[e].model;
        let predicted_total = self.engine_predicted[e];
        let stage_truth = u64::from(run.workflow.tokens(model, stage));
        let predicted_stage = scenario.predictor.predict(
            stage_truth,
            prompt_tokens,
            request_id,
            &mut self.rng_predictor,
        );
        if self.kendall_predicted.len() < KENDALL_SAMPLE {
            self.kendall_predicted.push(predicted_total);
            self.kendall_truth
                .push(run.workflow.remaining_total(model, stage) as f64);
        }
        let rank_noise: f64 = StandardNormal.sample(&mut self.rng_rank);
        let request = QueuedRequest {
            id: request_id,
            workflow: id,
            stage,
            submitted: now,
            workflow_arrival: run.arrival,
            enqueued_iteration: self.engines[e].replica.iteration(),
            prompt_tokens,
            predicted_stage_tokens: predicted_stage,
            predicted_total_tokens: predicted_total,
            attained_service: run.generated,
            rank_noise,
            topic: 0,
        };
        let engine = &mut self.engines[e];
        engine.in_flight_predicted += predicted_total;
        if stage == 0 {
            engine.first_stage_requests += 1;
        }
        engine.replica.submit(now, request, &mut *self.queue, e);
        let waiting = self.queue.len(e);
        let engine = &mut self.engines[e];
        engine.max_waiting = engine.max_waiting.max(waiting);
        if !engine.replica.is_busy() && finishing_engine != Some(e) {
            self.start_step(e, now);
        }
    }

    /// Admits what fits and starts the engine's next step, or leaves it idle.
    fn start_step(&mut self, e: usize, now: SimTime) {
        let spec = &self.scenario.engines[e];
        let step_cost = &mut self.step_costs[e];
        let mut hook = Admit {
            workflows: &mut self.workflows,
            admissions: &mut self.admissions,
            engine: e,
            model: spec.model,
        };
        let replica = &mut self.engines[e].replica;
        let Some(work) = replica.schedule(now, &mut *self.queue, e, &mut hook) else {
            return;
        };
        let duration = step_cost.price(&work).duration;
        replica.begin_step(duration);
        self.pending_steps.push((now + duration, e));
    }

    fn step_done(&mut self, e: usize, now: SimTime) {
        let mut finished = std::mem::take(&mut self.finished);
        let engine = &mut self.engines[e];
        engine.replica.complete_step(now, &mut finished);
        for done in &finished {
            engine.in_flight_predicted -= done.request.predicted_total_tokens;
        }
        let capability = self.scenario.generator.models[self.scenario.engines[e].model].capability;
        for done in finished.drain(..) {
            let workflow = done.request.workflow;
            let run = self
                .workflows
                .get_mut(&workflow)
                .expect("running request's workflow exists");
            run.generated += u64::from(done.output);
            run.accumulated_output = run.accumulated_output.saturating_add(done.output);
            run.capability_sum += capability;
            run.next_stage += 1;
            if run.next_stage < run.workflow.n_stages {
                self.submit(workflow, now, Some(e));
            } else {
                let run = self
                    .workflows
                    .remove(&workflow)
                    .expect("finished workflow exists");
                self.workflow_finished(workflow, run, now);
            }
        }
        self.finished = finished;
        self.start_step(e, now);
    }

    fn workflow_finished(&mut self, id: u64, run: WorkflowRun, now: SimTime) {
        let latency = (now - run.arrival).0;
        self.workflow_latency.record(latency);
        self.per_token_sum_ms += latency as f64 * 1e-6 / run.generated.max(1) as f64;
        self.workflow_queue_time.record(run.queue_ns);
        let capability = run.capability_sum / f64::from(run.workflow.n_stages);
        let succeeded = run.workflow.succeeds(capability);
        if succeeded {
            self.successes += 1;
        }
        if let Some(sink) = self.records.as_deref_mut() {
            use crate::records::{Extra, RequestRecord};
            sink.record(&RequestRecord {
                id,
                arrival: run.arrival,
                first_token: None,
                finish: now,
                prompt_tokens: u64::from(run.workflow.user_prompt_tokens),
                output_tokens: run.generated,
                extra: &[
                    Extra::Count(u64::from(run.workflow.n_stages)),
                    Extra::Millis(run.queue_ns as f64 * 1e-6),
                    Extra::Count(u64::from(succeeded)),
                ],
            });
        }
        self.completed += 1;
        self.last_completion = now;
        self.router.workflow_done(id);
    }

    /// The metrics of the finished run.
    pub fn finish(self) -> ChimeraMetrics {
        assert!(
            self.workflows.is_empty(),
            "run ended with {} workflows unfinished",
            self.workflows.len()
        );
        let end = self.last_completion;
        let n = self.completed.max(1) as f64;
        let engines: Vec<EngineReport> = self
            .engines
            .iter()
            .zip(&self.scenario.engines)
            .map(|(run, spec)| {
                let stats = run.replica.stats();
                EngineReport {
                    model: spec.cost.model.clone(),
                    requests: stats.admitted,
                    workflows_started: run.first_stage_requests,
                    output_tokens: stats.tokens,
                    utilization: if end.0 > 0 {
                        stats.busy_ns as f64 / end.0 as f64
                    } else {
                        0.0
                    },
                    mean_batch_size: stats.batch_sum as f64 / stats.steps.max(1) as f64,
                    steps: stats.steps,
                    max_waiting: run.max_waiting,
                    decode_ms_per_token: spec.cost.decode_ms_per_token,
                    prefix_hit_rate: spec.cost.prefix_caching.then(|| {
                        stats.prefix_hit_tokens as f64 / stats.prefix_lookup_tokens.max(1) as f64
                    }),
                }
            })
            .collect();
        let mean_tokens =
            engines.iter().map(|e| e.output_tokens as f64).sum::<f64>() / engines.len() as f64;
        let max_tokens = engines
            .iter()
            .map(|e| e.output_tokens as f64)
            .fold(0.0, f64::max);
        let aps: Vec<f64> = self
            .map_scores
            .iter()
            .zip(&self.map_labels)
            .filter_map(|(s, l)| average_precision(s, l))
            .collect();
        let mut requests = RequestLatencies::default();
        for run in &self.engines {
            requests.merge(&run.replica.stats().latencies);
        }
        let span = end.as_secs_f64();
        ChimeraMetrics {
            n_workflows: self.completed,
            n_requests: self.next_request,
            workflow_latency: self.workflow_latency.summary(),
            latency_per_token_ms: self.per_token_sum_ms / n,
            requests: requests.summary(),
            workflow_queue_time: self.workflow_queue_time.summary(),
            score_pct: 100.0 * self.successes as f64 / n,
            throughput_wps: if span > 0.0 {
                self.completed as f64 / span
            } else {
                0.0
            },
            makespan_s: span,
            engine_utilization_mean: engines.iter().map(|e| e.utilization).sum::<f64>()
                / engines.len() as f64,
            engine_token_imbalance: if mean_tokens > 0.0 {
                max_tokens / mean_tokens
            } else {
                0.0
            },
            router_map: if aps.is_empty() {
                0.0
            } else {
                aps.iter().sum::<f64>() / aps.len() as f64
            },
            predictor_kendall_distance: kendall_tau_distance(
                &self.kendall_predicted,
                &self.kendall_truth,
            )
            .unwrap_or(0.0),
            engines,
        }
    }
}

impl Model for ChimeraServer<'_> {
    type Event = Event;
    fn start(&mut self, events: &mut EventQueue<Event>) {
        self.schedule_next_arrival(events);
    }

    fn handle(&mut self, now: SimTime, event: Event, events: &mut EventQueue<Event>) {
        match event {
            Event::WorkflowArrival { prompt_tokens } => {
                self.workflow_arrives(now, prompt_tokens);
                self.schedule_next_arrival(events);
            }
            Event::StepComplete { engine } => self.step_done(engine, now),
        }
        for (at, engine) in self.pending_steps.drain(..) {
            events.schedule(at, Event::StepComplete { engine });
        }
    }
}
