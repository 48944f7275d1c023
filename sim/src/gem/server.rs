//! The expert-parallel serving model: G GPUs with speed factors serve requests with continuous
//! batching (chunked prefill and decode in the same step, vLLM V1 style). A step's latency is,
//! per MoE layer, the slowest GPU's time on the tokens its experts receive (the lock-step
//! barrier) plus the layer's tensor-parallel non-MoE part, plus the output head. The tokens
//! each expert receives follow the unseen steps of the utilization trace.
//!
//! Engine events: `RequestArrival` (the next request reaches the waiting queue) and
//! `BatchComplete` (the step in flight finishes; its tokens are emitted and the next step is
//! scheduled). `SchedulerTick` is not used: a step starts as soon as the previous one ends or,
//! when idle, when a request arrives.

use crate::cost::curve::CostCurve;
use crate::cost::moe_layer::{MoeLayerCost, MoeLayerParams, SpeedFactors};
use crate::cost::profile::SourceKind;
use crate::cost::roofline::RooflineParams;
use crate::engine::{Model, run};
use crate::event_queue::EventQueue;
use crate::gem::config::{Experiment, GemScenario, TraceSpec};
use crate::gem::costs::{GpuCosts, gpu_layer_curve};
use crate::gem::mapping::{ExpertMapper, LayerMapping, LayerProblem, score};
use crate::gem::trace::{ExpertTrace, generate};
use crate::gem::variability::variability_at_scale;
use crate::metrics::{Better, LatencyRecorder, MetricInfo, RunOutput};
use crate::records::{DiscardRecords, RecordSink, RequestRecord};
use crate::rng::stream;
use crate::time::{SimDuration, SimTime};
use rand_distr::{Distribution, Exp};
use serde_json::json;
use std::collections::VecDeque;
use std::sync::Arc;

const fn lower(name: &'static str, description: &'static str) -> MetricInfo {
    MetricInfo {
        name,
        description,
        better: Better::Lower,
    }
}
const fn higher(name: &'static str, description: &'static str) -> MetricInfo {
    MetricInfo {
        name,
        description,
        better: Better::Higher,
    }
}

/// The scalar metrics a GEM run reports, in this order (docs/gem.md defines each).
pub const METRICS: &[MetricInfo] = &[
    lower("e2e_mean_ms", "mean end-to-end latency (ms)"),
    lower("e2e_p90_ms", "P90 end-to-end latency (ms)"),
    lower("e2e_p95_ms", "P95 end-to-end latency (ms)"),
    lower("e2e_p99_ms", "P99 end-to-end latency (ms)"),
    lower("tpot_mean_ms", "mean time per output token (ms)"),
    lower("tpot_p90_ms", "P90 time per output token (ms)"),
    lower("tpot_p95_ms", "P95 time per output token (ms)"),
    lower("tpot_p99_ms", "P99 time per output token (ms)"),
    lower("ttft_mean_ms", "mean time to first token (ms)"),
    higher("throughput_tok_s", "output throughput (tokens/s)"),
    lower("makespan_s", "makespan (s)"),
    lower("mean_step_ms", "mean engine step (ms)"),
    lower("moe_time_share", "share of step time in MoE layers"),
    higher("busy_share_min", "least busy GPU's busy share"),
    higher("busy_share_mean", "mean per-GPU busy share"),
    higher("busy_share_max", "busiest GPU's busy share"),
    lower(
        "window_score_ms",
        "GEM score on the mapper's window, all layers (ms)",
    ),
    lower(
        "unseen_score_ms",
        "GEM score on the unseen trace steps, all layers (ms)",
    ),
    lower(
        "gap_vs_fastest",
        "slowest-to-fastest throughput gap (fraction of fastest)",
    ),
    lower("gap_vs_slowest", "fastest-over-slowest throughput excess"),
];

/// The metrics `expertsim run` prints per cell.
pub const HEADLINE: &[&str] = &[
    "e2e_mean_ms",
    "tpot_p90_ms",
    "throughput_tok_s",
    "busy_share_min",
];

/// The metrics `expertsim run` prints as change against the baseline mapping.
pub const HEADLINE_IMPROVEMENTS: &[&str] = &["e2e_mean_ms", "tpot_p90_ms"];

/// The trace and cost curves of one run, before any mapping.
pub struct Deployment {
    pub trace: Arc<ExpertTrace>,
    pub observed_steps: usize,
    /// The mapper's planning model (the paper's): per-GPU token -> latency tables, the
    /// speed-1 curve divided by each GPU's speed factor.
    pub costs: GpuCosts,
    /// What the simulator charges: each GPU's MoE layer priced by `cost::moe_layer` (one
    /// grouped GEMM over its active experts, the speed factor split into compute and
    /// bandwidth factors).
    pub step_costs: GpuCosts,
    /// The speed-1 MoE-layer curve of one GPU.
    pub base_curve: CostCurve,
    /// Each GPU's compute and bandwidth factors.
    pub speeds: Vec<SpeedFactors>,
}

impl Deployment {
    /// Builds the trace (generated from `(seed, "gem/trace")` when synthetic) and the per-GPU
    /// curves of `scenario`.
    pub fn new(scenario: &GemScenario, seed: u64) -> Deployment {
        let shape = &scenario.shape;
        let (trace, observed_steps) = match &scenario.trace {
            TraceSpec::Synthetic(params) => {
                let (trace, _) = generate(
                    params,
                    shape.n_layers,
                    shape.n_experts,
                    shape.top_k,
                    &mut stream(seed, "gem/trace"),
                );
                (Arc::new(trace), params.observed_steps)
            }
            TraceSpec::Recorded {
                trace,
                observed_steps,
            } => (Arc::clone(trace), *observed_steps),
        };
        let expert = scenario
            .profile
            .expert_curve(shape.hidden, shape.expert_ffn, shape.weight_dtype)
            .expect("the analytic profile has the model's expert curve");
        let launch = scenario.gpu.kernel_launch_overhead_ns
            * f64::from(RooflineParams::default().kernels_per_expert_ffn);
        let base_curve = gpu_layer_curve(expert, shape.n_experts / scenario.n_gpus, launch);
        let limit = (trace.max_step_total().ceil() as usize).min(1 << 22);
        let costs = GpuCosts::scaled(&base_curve, &scenario.speed_factors, limit);
        let speeds: Vec<SpeedFactors> = scenario
            .speed_factors
            .iter()
            .map(|&s| SpeedFactors::split(s, scenario.bandwidth_share))
            .collect();
        let layer = physical_layer(scenario, expert);
        let experts_per_gpu = shape.n_experts / scenario.n_gpus;
        let step_costs = GpuCosts::new(
            speeds
                .iter()
                .map(|&sp| {
                    CostCurve::new(
                        base_curve
                            .samples()
                            .map(|(n, _)| {
                                (
                                    n,
                                    layer.grouped_gemm_even(n.round() as u64, experts_per_gpu, sp),
                                )
                            })
                            .collect(),
                    )
                    .expect("positive token counts and finite costs")
                })
                .collect(),
            limit,
        );
        Deployment {
            trace,
            observed_steps,
            costs,
            step_costs,
            base_curve,
            speeds,
        }
    }

    /// The problem `mapper` solves for `layer` with a window of `window` steps.
    pub fn problem(&self, layer: usize, window: usize) -> LayerProblem<'_> {
        LayerProblem {
            layer,
            n_experts: self.trace.n_experts(),
            window: self
                .trace
                .window(layer, 0..window.clamp(1, self.observed_steps)),
            costs: &self.costs,
        }
    }

    /// The unseen steps of `layer` as a problem (to score a mapping on what it did not see).
    pub fn unseen(&self, layer: usize) -> LayerProblem<'_> {
        LayerProblem {
            layer,
            n_experts: self.trace.n_experts(),
            window: self
                .trace
                .window(layer, self.observed_steps..self.trace.n_steps()),
            costs: &self.costs,
        }
    }

    /// Maps every layer with `mapper`, each layer with its own stream
    /// `(seed, "gem/mapper/layer<l>")`. Panics if a mapper breaks the mapping invariants.
    pub fn map_layers(
        &self,
        mapper: &mut dyn ExpertMapper,
        window: usize,
        seed: u64,
    ) -> Vec<LayerMapping> {
        (0..self.trace.n_layers())
            .map(|layer| {
                let problem = self.problem(layer, window);
                let mut rng = stream(seed, &format!("gem/mapper/layer{layer}"));
                let mapping = mapper.map_layer(&problem, &mut rng);
                if let Err(e) = mapping.check(problem.n_experts, problem.n_gpus()) {
                    panic!("the mapper broke a mapping invariant on layer {layer}: {e}");
                }
                mapping
            })
            .collect()
    }
}

/// Runs one GEM scenario with seed `seed`: the serving simulation under the mapping `mapper`
/// computes, or the variability-at-scale experiment.
pub fn simulate(scenario: &GemScenario, seed: u64, mapper: &mut dyn ExpertMapper) -> RunOutput {
    simulate_recorded(scenario, seed, mapper, &mut DiscardRecords)
}

/// `simulate`, streaming each served request's record to `sink` (the variability-at-scale
/// experiment serves none).
pub fn simulate_recorded(
    scenario: &GemScenario,
    seed: u64,
    mapper: &mut dyn ExpertMapper,
    sink: &mut dyn RecordSink,
) -> RunOutput {
    match scenario.experiment {
        Experiment::VariabilityAtScale => scale_output(scenario, seed),
        Experiment::Serving => serve(scenario, seed, mapper, sink),
    }
}

fn gaps(speeds: &[f64]) -> (f64, f64) {
    let min = speeds.iter().copied().fold(f64::INFINITY, f64::min);
    let max = speeds.iter().copied().fold(0.0, f64::max);
    (1.0 - min / max, max / min - 1.0)
}

fn scale_output(scenario: &GemScenario, seed: u64) -> RunOutput {
    let point = variability_at_scale(
        &scenario.distribution,
        &[scenario.n_gpus],
        scenario.scale.draws,
        &mut stream(seed, "gem/scale"),
    )
    .remove(0);
    let scalars = METRICS
        .iter()
        .map(|m| {
            let v = match m.name {
                "gap_vs_fastest" => point.gap_vs_fastest,
                "gap_vs_slowest" => point.gap_vs_slowest,
                _ => 0.0,
            };
            (m.name.to_string(), v)
        })
        .collect();
    RunOutput {
        scalars,
        details: json!({
            "experiment": "variability_at_scale",
            "note": "serving metrics are not computed by this experiment and read 0",
            "draws": scenario.scale.draws,
            "distribution": scenario.distribution,
            "sigmas": scenario.distribution.sigmas(),
            "scale": point,
        }),
    }
}

struct Request {
    arrival: SimTime,
    prompt: u32,
    output: u32,
}

struct Running {
    request: usize,
    prefilled: u32,
    generated: u32,
    first_token: SimTime,
    last_token: SimTime,
    scheduled: u32,
}

/// What one engine step asks of the G GPUs: its tokens and, per MoE layer, the routed
/// tokens (token x slot assignments) each GPU's experts receive.
#[derive(Clone, Copy, Debug)]
pub struct GemStepWork<'a> {
    /// Tokens in the step (prefill chunks plus one per decoding sequence).
    pub tokens: u64,
    /// Sequences in their decode phase.
    pub decode_seqs: u64,
    /// Sequences whose next token the step computes (the output head's batch).
    pub emitting: u64,
    pub n_layers: usize,
    pub n_gpus: usize,
    /// `[layer][gpu]`: routed tokens GPU g receives in that layer.
    pub gpu_tokens: &'a [f64],
}

/// A step's duration and the MoE layers' part of it, nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GemStepTime {
    pub nanos: f64,
    pub moe_nanos: f64,
}

/// Whoever prices a GEM engine step: the per-GPU curves in simulation ([`CurveStepCost`]), the
/// kernels in live mode. The server cannot tell which one it talks to.
pub trait GemStepCost {
    /// The step's time; adds each GPU's busy time to `busy`.
    fn step(&mut self, work: &GemStepWork<'_>, busy: &mut [f64]) -> GemStepTime;
}

/// The grouped-GEMM MoE layer of `scenario`'s model and GPU, refined by the profile's expert
/// curve when that profile was measured.
pub fn physical_layer(scenario: &GemScenario, expert: &CostCurve) -> MoeLayerCost {
    let layer = MoeLayerCost::new(&scenario.gpu, &scenario.shape, MoeLayerParams::default());
    if scenario.profile.source.kind == SourceKind::Measured {
        layer.with_profile(expert.clone())
    } else {
        layer
    }
}

/// The simulated step cost: per MoE layer the slowest GPU's grouped GEMM (the lock-step
/// barrier), plus the tensor-parallel dense part and head: the prefill part (compute-bound at
/// the token counts that matter) slowed by each GPU's compute factor, the decode part
/// (weight and KV streaming) by its bandwidth factor; the slowest GPU sets the pace.
pub struct CurveStepCost<'a> {
    costs: &'a GpuCosts,
    non_expert_prefill: &'a CostCurve,
    non_expert_decode: &'a CostCurve,
    head: &'a CostCurve,
    speeds: &'a [SpeedFactors],
}

impl<'a> CurveStepCost<'a> {
    /// The cost model of `scenario` on `deployment`'s per-GPU curves.
    pub fn new(scenario: &'a GemScenario, deployment: &'a Deployment) -> CurveStepCost<'a> {
        let profile = &scenario.profile;
        CurveStepCost {
            costs: &deployment.step_costs,
            non_expert_prefill: &profile.non_expert_prefill,
            non_expert_decode: &profile.non_expert_decode,
            head: &profile.head,
            speeds: &deployment.speeds,
        }
    }
}

impl GemStepCost for CurveStepCost<'_> {
    fn step(&mut self, work: &GemStepWork<'_>, busy: &mut [f64]) -> GemStepTime {
        let g_count = work.n_gpus as f64;
        let prefill = self.non_expert_prefill.at(work.tokens as f64);
        let decode = self.non_expert_decode.at(work.decode_seqs as f64);
        let head = self.head.at(work.emitting as f64);
        let layers = work.n_layers as f64;
        let mut moe_total = 0.0;
        for row in work.gpu_tokens.chunks_exact(work.n_gpus) {
            let mut slowest = 0.0f64;
            for (g, &n) in row.iter().enumerate() {
                let c = self.costs.cost(g, n);
                busy[g] += c;
                slowest = slowest.max(c);
            }
            moe_total += slowest;
        }
        // Attention, shared experts and the head are tensor-parallel over the G GPUs: each
        // runs 1/G of the work at its own speed and the slowest sets the pace.
        let mut dense_pace = 0.0f64;
        for (b, s) in busy.iter_mut().zip(self.speeds) {
            let dense = (prefill / s.compute).max(decode / s.bandwidth);
            let own = (layers * dense + head / s.bandwidth) / g_count;
            *b += own;
            dense_pace = dense_pace.max(own);
        }
        GemStepTime {
            nanos: moe_total + dense_pace,
            moe_nanos: moe_total,
        }
    }
}

/// Where each step's tokens go: trace fractions per (unseen step, layer, GPU).
struct StepRouting {
    n_layers: usize,
    n_gpus: usize,
    n_unseen: usize,
    /// `[unseen step][layer][gpu]`: tokens GPU g receives per token of the step (sums to top_k).
    fractions: Vec<f64>,
}

impl StepRouting {
    /// Fills `gpu_tokens` (`[layer][gpu]`) for a step of `tokens` tokens on `unseen_step`.
    fn gpu_tokens(&self, unseen_step: usize, tokens: u64, gpu_tokens: &mut [f64]) {
        let n = tokens as f64;
        let row = &self.fractions[unseen_step * self.n_layers * self.n_gpus..]
            [..self.n_layers * self.n_gpus];
        for (out, &f) in gpu_tokens.iter_mut().zip(row) {
            *out = n * f;
        }
    }
}

/// What happens to the GEM serving engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    /// The next request arrives.
    RequestArrival,
    /// The engine step in execution finishes.
    StepComplete,
}

struct GemServer<'a> {
    routing: StepRouting,
    cost: &'a mut dyn GemStepCost,
    gpu_tokens: Vec<f64>,
    requests: Vec<Request>,
    next_arrival: usize,
    waiting: VecDeque<usize>,
    running: Vec<Running>,
    max_num_seqs: usize,
    max_num_batched_tokens: u32,
    in_flight: bool,
    steps: u64,
    step_nanos: f64,
    moe_nanos: f64,
    busy: Vec<f64>,
    e2e: LatencyRecorder,
    tpot: LatencyRecorder,
    ttft: LatencyRecorder,
    output_tokens: u64,
    last_completion: SimTime,
    sink: &'a mut dyn RecordSink,
}

impl GemServer<'_> {
    fn dispatch(&mut self, now: SimTime, events: &mut EventQueue<Event>) {
        let mut budget = self.max_num_batched_tokens;
        let (mut tokens, mut decode, mut emitting) = (0u64, 0u64, 0u64);
        for r in self.running.iter_mut() {
            let prompt = self.requests[r.request].prompt;
            r.scheduled = 0;
            if budget == 0 {
                continue;
            }
            if r.prefilled < prompt {
                let chunk = (prompt - r.prefilled).min(budget);
                r.scheduled = chunk;
                if r.prefilled + chunk == prompt {
                    emitting += 1;
                }
                budget -= chunk;
                tokens += u64::from(chunk);
            } else {
                r.scheduled = 1;
                budget -= 1;
                tokens += 1;
                decode += 1;
                emitting += 1;
            }
        }
        while budget > 0 && self.running.len() < self.max_num_seqs {
            let Some(request) = self.waiting.pop_front() else {
                break;
            };
            let prompt = self.requests[request].prompt;
            let chunk = prompt.min(budget);
            if chunk == prompt {
                emitting += 1;
            }
            budget -= chunk;
            tokens += u64::from(chunk);
            self.running.push(Running {
                request,
                prefilled: 0,
                generated: 0,
                first_token: now,
                last_token: now,
                scheduled: chunk,
            });
        }
        if tokens == 0 {
            return;
        }
        let unseen = (self.steps as usize) % self.routing.n_unseen;
        self.routing
            .gpu_tokens(unseen, tokens, &mut self.gpu_tokens);
        let work = GemStepWork {
            tokens,
            decode_seqs: decode,
            emitting,
            n_layers: self.routing.n_layers,
            n_gpus: self.routing.n_gpus,
            gpu_tokens: &self.gpu_tokens,
        };
        let GemStepTime {
            nanos,
            moe_nanos: moe,
        } = self.cost.step(&work, &mut self.busy);
        self.steps += 1;
        self.step_nanos += nanos;
        self.moe_nanos += moe;
        self.in_flight = true;
        events.schedule(
            now + SimDuration(nanos.round().max(1.0) as u64),
            Event::StepComplete,
        );
    }

    fn complete(&mut self, now: SimTime) {
        self.in_flight = false;
        let requests = &self.requests;
        let (e2e, tpot, ttft) = (&mut self.e2e, &mut self.tpot, &mut self.ttft);
        let sink = &mut *self.sink;
        let mut emitted = 0u64;
        let mut finished = false;
        self.running.retain_mut(|r| {
            if r.scheduled == 0 {
                return true;
            }
            let request = &requests[r.request];
            if r.prefilled < request.prompt {
                r.prefilled += r.scheduled;
                if r.prefilled < request.prompt {
                    return true;
                }
                r.generated = 1;
                r.first_token = now;
                ttft.record(now.0 - request.arrival.0);
            } else {
                r.generated += 1;
                tpot.record(now.0 - r.last_token.0);
            }
            r.last_token = now;
            emitted += 1;
            if r.generated >= request.output {
                e2e.record(now.0 - request.arrival.0);
                sink.record(&RequestRecord {
                    id: r.request as u64,
                    arrival: request.arrival,
                    first_token: Some(r.first_token),
                    finish: now,
                    prompt_tokens: u64::from(request.prompt),
                    output_tokens: u64::from(request.output),
                    extra: &[],
                });
                finished = true;
                false
            } else {
                true
            }
        });
        self.output_tokens += emitted;
        if finished {
            self.last_completion = now;
        }
    }

    fn schedule_arrival(&self, events: &mut EventQueue<Event>) {
        if let Some(r) = self.requests.get(self.next_arrival) {
            events.schedule(r.arrival, Event::RequestArrival);
        }
    }
}

impl Model for GemServer<'_> {
    type Event = Event;
    fn start(&mut self, events: &mut EventQueue<Event>) {
        self.schedule_arrival(events);
    }

    fn handle(&mut self, now: SimTime, event: Event, events: &mut EventQueue<Event>) {
        match event {
            Event::RequestArrival => {
                while self
                    .requests
                    .get(self.next_arrival)
                    .is_some_and(|r| r.arrival <= now)
                {
                    self.waiting.push_back(self.next_arrival);
                    self.next_arrival += 1;
                }
                self.schedule_arrival(events);
                if !self.in_flight {
                    self.dispatch(now, events);
                }
            }
            Event::StepComplete => {
                self.complete(now);
                self.dispatch(now, events);
            }
        }
    }
}

fn generate_requests(scenario: &GemScenario, seed: u64) -> Vec<Request> {
    let mut lengths = stream(seed, "gem/lengths");
    let mut arrivals = stream(seed, "gem/arrivals");
    let gap = scenario
        .arrival_rate_per_s
        .map(|rate| Exp::new(rate).expect("validated positive rate"));
    let mut t = 0.0f64;
    (0..scenario.n_requests)
        .map(|_| {
            if let Some(gap) = &gap {
                t += gap.sample(&mut arrivals);
            }
            Request {
                arrival: SimTime((t * 1e9).round() as u64),
                prompt: scenario.prompt_tokens.sample(&mut lengths),
                output: scenario.output_tokens.sample(&mut lengths),
            }
        })
        .collect()
}

/// `[unseen step][layer][gpu]` tokens per step token under `mappings`.
fn unseen_fractions(
    deployment: &Deployment,
    mappings: &[LayerMapping],
    top_k: usize,
) -> (Vec<f64>, usize) {
    let trace = &deployment.trace;
    let n_unseen = trace.n_steps() - deployment.observed_steps;
    let (n_layers, n_experts) = (trace.n_layers(), trace.n_experts());
    let n_gpus = deployment.costs.n_gpus();
    let weights: Vec<Vec<Vec<f64>>> = mappings.iter().map(|m| m.gpu_weights(n_experts)).collect();
    let mut fractions = vec![0.0; n_unseen * n_layers * n_gpus];
    for u in 0..n_unseen {
        for layer in 0..n_layers {
            let counts = trace.step(layer, deployment.observed_steps + u);
            let routed: f64 = counts.iter().map(|&c| f64::from(c)).sum();
            let tokens = routed / top_k as f64;
            for g in 0..n_gpus {
                let on_gpu: f64 = counts
                    .iter()
                    .zip(&weights[layer][g])
                    .map(|(&c, &w)| f64::from(c) * w)
                    .sum();
                fractions[(u * n_layers + layer) * n_gpus + g] =
                    if tokens > 0.0 { on_gpu / tokens } else { 0.0 };
            }
        }
    }
    (fractions, n_unseen)
}

fn serve(
    scenario: &GemScenario,
    seed: u64,
    mapper: &mut dyn ExpertMapper,
    sink: &mut dyn RecordSink,
) -> RunOutput {
    let deployment = Deployment::new(scenario, seed);
    let mut cost = CurveStepCost::new(scenario, &deployment);
    serve_on(scenario, seed, mapper, &deployment, &mut cost, sink)
}

/// The serving experiment of `scenario` on `deployment` (built by [`Deployment::new`] for the
/// same seed) with step times from `cost`: [`CurveStepCost`] in simulation, the kernels in live
/// mode. Mapping, batching and routing are the same code either way.
pub fn serve_on(
    scenario: &GemScenario,
    seed: u64,
    mapper: &mut dyn ExpertMapper,
    deployment: &Deployment,
    cost: &mut dyn GemStepCost,
    sink: &mut dyn RecordSink,
) -> RunOutput {
    let window = scenario.mapper.window().max(1);
    let mappings = deployment.map_layers(mapper, window, seed);
    let n_layers = deployment.trace.n_layers();
    let window_scores: Vec<f64> = (0..n_layers)
        .map(|l| score(&mappings[l], &deployment.problem(l, window)) / 1e6)
        .collect();
    let unseen_scores: Vec<f64> = (0..n_layers)
        .map(|l| score(&mappings[l], &deployment.unseen(l)) / 1e6)
        .collect();
    let (fractions, n_unseen) = unseen_fractions(deployment, &mappings, scenario.shape.top_k);
    let speeds = &scenario.speed_factors;
    let mut server = GemServer {
        routing: StepRouting {
            n_layers,
            n_gpus: scenario.n_gpus,
            n_unseen,
            fractions,
        },
        cost,
        gpu_tokens: vec![0.0; n_layers * scenario.n_gpus],
        requests: generate_requests(scenario, seed),
        next_arrival: 0,
        waiting: VecDeque::new(),
        running: Vec::new(),
        max_num_seqs: scenario.serving.max_num_seqs,
        max_num_batched_tokens: u32::try_from(scenario.serving.max_num_batched_tokens)
            .unwrap_or(u32::MAX),
        in_flight: false,
        steps: 0,
        step_nanos: 0.0,
        moe_nanos: 0.0,
        busy: vec![0.0; scenario.n_gpus],
        e2e: LatencyRecorder::default(),
        tpot: LatencyRecorder::default(),
        ttft: LatencyRecorder::default(),
        output_tokens: 0,
        last_completion: SimTime::ZERO,
        sink,
    };
    run(&mut server);
    assert_eq!(
        server.e2e.count(),
        scenario.n_requests as u64,
        "every request completes"
    );
    let makespan_s = server.last_completion.0 as f64 / 1e9;
    let busy_share: Vec<f64> = server
        .busy
        .iter()
        .map(|b| {
            if makespan_s > 0.0 {
                b / 1e9 / makespan_s
            } else {
                0.0
            }
        })
        .collect();
    let (gap_fast, gap_slow) = gaps(speeds);
    let value = |name: &str| -> f64 {
        match name {
            "e2e_mean_ms" => server.e2e.mean_ms(),
            "e2e_p90_ms" => server.e2e.quantile_ms(0.90),
            "e2e_p95_ms" => server.e2e.quantile_ms(0.95),
            "e2e_p99_ms" => server.e2e.quantile_ms(0.99),
            "tpot_mean_ms" => server.tpot.mean_ms(),
            "tpot_p90_ms" => server.tpot.quantile_ms(0.90),
            "tpot_p95_ms" => server.tpot.quantile_ms(0.95),
            "tpot_p99_ms" => server.tpot.quantile_ms(0.99),
            "ttft_mean_ms" => server.ttft.mean_ms(),
            "throughput_tok_s" => {
                if makespan_s > 0.0 {
                    server.output_tokens as f64 / makespan_s
                } else {
                    0.0
                }
            }
            "makespan_s" => makespan_s,
            "mean_step_ms" => server.step_nanos / server.steps.max(1) as f64 / 1e6,
            "moe_time_share" => {
                if server.step_nanos > 0.0 {
                    server.moe_nanos / server.step_nanos
                } else {
                    0.0
                }
            }
            "busy_share_min" => busy_share.iter().copied().fold(f64::INFINITY, f64::min),
            "busy_share_mean" => busy_share.iter().sum::<f64>() / busy_share.len() as f64,
            "busy_share_max" => busy_share.iter().copied().fold(0.0, f64::max),
            "window_score_ms" => window_scores.iter().sum(),
            "unseen_score_ms" => unseen_scores.iter().sum(),
            "gap_vs_fastest" => gap_fast,
            "gap_vs_slowest" => gap_slow,
            other => unreachable!("metric {other} has no value"),
        }
    };
    let scalars = METRICS
        .iter()
        .map(|m| (m.name.to_string(), value(m.name)))
        .collect();
    let details = details(
        scenario,
        deployment,
        &mappings,
        window,
        &busy_share,
        &server,
    );
    RunOutput {
        scalars,
        details: json!({
            "experiment": "serving",
            "per_layer_window_score_ms": window_scores,
            "per_layer_unseen_score_ms": unseen_scores,
            "steps": server.steps,
            "output_tokens": server.output_tokens,
            "deployment": details,
        }),
    }
}

fn details(
    scenario: &GemScenario,
    deployment: &Deployment,
    mappings: &[LayerMapping],
    window: usize,
    busy_share: &[f64],
    _server: &GemServer<'_>,
) -> serde_json::Value {
    let layer = scenario.serving.detail_layer;
    let trace = &deployment.trace;
    let steps = scenario
        .serving
        .detail_steps
        .min(trace.n_steps() - deployment.observed_steps);
    let expert_tokens: Vec<Vec<f32>> = (0..steps)
        .map(|u| trace.step(layer, deployment.observed_steps + u).to_vec())
        .collect();
    let gpu_tokens: Vec<Vec<f64>> = expert_tokens
        .iter()
        .map(|row| mappings[layer].gpu_tokens(row))
        .collect();
    let limit = (trace.max_step_total() * 2.0).max(1024.0);
    let staircase: Vec<serde_json::Value> = (0..scenario.n_gpus)
        .map(|g| {
            let samples: Vec<(f64, f64)> = deployment
                .costs
                .curve(g)
                .samples()
                .filter(|(n, _)| *n <= limit)
                .map(|(n, ns)| (n, ns / 1e3))
                .collect();
            json!({"gpu": g, "speed": scenario.speed_factors[g], "samples_tokens_us": samples})
        })
        .collect();
    json!({
        "model": scenario.shape.name,
        "gpu": scenario.gpu.name,
        "cost_source": scenario.profile.source.kind.as_str(),
        "n_gpus": scenario.n_gpus,
        "variability": scenario.variability,
        "speed_factors": scenario.speed_factors,
        "mapper": scenario.mapper,
        "window": window,
        "observed_steps": deployment.observed_steps,
        "unseen_steps": trace.n_steps() - deployment.observed_steps,
        "per_gpu_busy_share": busy_share,
        "mapping": mappings.iter().map(|m| &m.slots).collect::<Vec<_>>(),
        "detail_layer": {
            "layer": layer,
            "slots": mappings[layer].slots,
            "expert_tokens": expert_tokens,
            "gpu_tokens": gpu_tokens,
        },
        "staircase": staircase,
    })
}
