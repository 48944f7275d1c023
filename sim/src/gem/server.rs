//! The expert-parallel serving model: G GPUs with speed factors serve requests through one
//! `serving::Replica` configured as vLLM V1 (continuous batching, chunked prefill, one token
//! budget; `replica_config`). Each step's tokens are routed per MoE layer by the unseen steps of
//! the utilization trace and the expert-to-GPU mapping (`RoutedTokens`, whole tokens per expert
//! and per GPU), and priced through the serving layer's `StepCost` seam: per MoE layer the
//! slowest GPU's time on the tokens its experts receive (the lock-step barrier), plus the
//! layer's tensor-parallel non-MoE part, plus the output head (`CurveStepCost`).
//!
//! Engine events (`Event`): `Arrival` (a request from the scenario's arrival process, streamed
//! one at a time: offline, Poisson, bursty or a replayed trace) and `StepEnd` (the step in
//! flight finishes; its tokens are emitted and the next step is scheduled).

use crate::arrivals::{Arrival, ArrivalProcess};
use crate::cost::curve::CostCurve;
use crate::cost::gpu::LinkSpec;
use crate::cost::kernel::Timing;
use crate::cost::measured_steps::OpSources;
use crate::cost::moe_layer::{ExpertRows, MoeLayerCost, SpeedFactors};
use crate::cost::profile::{ExpertFfnCurve, SourceKind};
use crate::distributions::TokenCount;
use crate::engine::{Model, run};
use crate::event_queue::EventQueue;
use crate::gem::config::{Experiment, FactorKind, GemScenario};
use crate::gem::trace::ExpertTrace;
use crate::metrics::lower_is_better as lat;
use crate::metrics::{Better, Metric, MetricInfo, RunOutput, metric_infos};
use crate::policies::mapping::gpu_costs::{GpuCosts, planning_costs, throughput_speed};
use crate::policies::mapping::{ExpertMapper, LayerMapping, LayerProblem, score};
use crate::recorder::{RequestLatencies, RequestSummary};
use crate::records::{DiscardRecords, RecordSink, RequestRecord};
use crate::rng::{SimRng, stream};
use crate::serving::variability::variability_at_scale;
use crate::serving::{
    Admission, AdmitHook, Batching, CostSource, KvConfig, QueuePolicy, QueuedRequest, Replica,
    ReplicaConfig, RoutedTokens, Seq, StepBreakdown, StepCost, StepTime, StepWork,
};
use crate::time::{SimDuration, SimTime};
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;

/// One GEM run's scalar values, one field per metric of `METRIC_TABLE` (docs/gem.md defines
/// each).
#[derive(Clone, Debug, PartialEq)]
pub struct GemScalars {
    /// The requests' latencies, as the replica recorded them (`recorder::RequestSummary`).
    pub requests: RequestSummary,
    pub throughput_tok_s: f64,
    pub makespan_s: f64,
    pub mean_step_ms: f64,
    pub moe_time_share: f64,
    pub busy_share_min: f64,
    pub busy_share_mean: f64,
    pub busy_share_max: f64,
    pub window_score_ms: f64,
    pub unseen_score_ms: f64,
    pub gap_vs_fastest: f64,
    pub gap_vs_slowest: f64,
    pub profiling_min: f64,
    pub profiled_counts: f64,
}

impl GemScalars {
    /// Every value missing (NaN, `null` in results): what an experiment does not compute.
    fn not_computed() -> GemScalars {
        GemScalars {
            requests: RequestLatencies::default().summary(),
            throughput_tok_s: f64::NAN,
            makespan_s: f64::NAN,
            mean_step_ms: f64::NAN,
            moe_time_share: f64::NAN,
            busy_share_min: f64::NAN,
            busy_share_mean: f64::NAN,
            busy_share_max: f64::NAN,
            window_score_ms: f64::NAN,
            unseen_score_ms: f64::NAN,
            gap_vs_fastest: f64::NAN,
            gap_vs_slowest: f64::NAN,
            profiling_min: f64::NAN,
            profiled_counts: f64::NAN,
        }
    }
}

/// The scalar metrics a GEM run reports, in this order (docs/gem.md defines each; the latency
/// rows are the one recorder's, docs/metrics.md). GEM's TPOT is the paper's (gem.txt Eq. 3):
/// quantiles over every gap between consecutive tokens, the recorder's inter-token latency. GEM's TPOT is the paper's (gem.txt Eq. 3):
/// quantiles over every gap between consecutive tokens, the recorder's inter-token latency.
pub const METRIC_TABLE: [Metric<GemScalars>; 34] = [
    lat("e2e_mean_ms", "mean end-to-end latency (ms)", |s| {
        s.requests.e2e.mean_ms
    }),
    lat("e2e_p50_ms", "P50 end-to-end latency (ms)", |s| {
        s.requests.e2e.p50_ms
    }),
    lat("e2e_p90_ms", "P90 end-to-end latency (ms)", |s| {
        s.requests.e2e.p90_ms
    }),
    lat("e2e_p95_ms", "P95 end-to-end latency (ms)", |s| {
        s.requests.e2e.p95_ms
    }),
    lat("e2e_p99_ms", "P99 end-to-end latency (ms)", |s| {
        s.requests.e2e.p99_ms
    }),
    lat(
        "tpot_mean_ms",
        "mean time per output token, over all token gaps (ms)",
        |s| s.requests.itl.mean_ms,
    ),
    lat(
        "tpot_p50_ms",
        "P50 time per output token, over all token gaps (ms)",
        |s| s.requests.itl.p50_ms,
    ),
    lat(
        "tpot_p90_ms",
        "P90 time per output token, over all token gaps (ms)",
        |s| s.requests.itl.p90_ms,
    ),
    lat(
        "tpot_p95_ms",
        "P95 time per output token, over all token gaps (ms)",
        |s| s.requests.itl.p95_ms,
    ),
    lat(
        "tpot_p99_ms",
        "P99 time per output token, over all token gaps (ms)",
        |s| s.requests.itl.p99_ms,
    ),
    lat("ttft_mean_ms", "mean time to first token (ms)", |s| {
        s.requests.ttft.mean_ms
    }),
    lat("ttft_p50_ms", "P50 time to first token (ms)", |s| {
        s.requests.ttft.p50_ms
    }),
    lat("ttft_p90_ms", "P90 time to first token (ms)", |s| {
        s.requests.ttft.p90_ms
    }),
    lat("ttft_p95_ms", "P95 time to first token (ms)", |s| {
        s.requests.ttft.p95_ms
    }),
    lat("ttft_p99_ms", "P99 time to first token (ms)", |s| {
        s.requests.ttft.p99_ms
    }),
    lat("queueing_mean_ms", "mean queueing delay (ms)", |s| {
        s.requests.queueing.mean_ms
    }),
    lat("queueing_p50_ms", "P50 queueing delay (ms)", |s| {
        s.requests.queueing.p50_ms
    }),
    lat("queueing_p90_ms", "P90 queueing delay (ms)", |s| {
        s.requests.queueing.p90_ms
    }),
    lat("queueing_p95_ms", "P95 queueing delay (ms)", |s| {
        s.requests.queueing.p95_ms
    }),
    lat("queueing_p99_ms", "P99 queueing delay (ms)", |s| {
        s.requests.queueing.p99_ms
    }),
    Metric::new(
        "throughput_rps",
        "throughput (requests/s)",
        Better::Higher,
        |s| s.requests.throughput_rps,
    ),
    Metric::new(
        "throughput_tok_s",
        "output throughput (tokens/s)",
        Better::Higher,
        |s| s.throughput_tok_s,
    ),
    Metric::new("makespan_s", "makespan (s)", Better::Lower, |s| {
        s.makespan_s
    }),
    Metric::new(
        "mean_step_ms",
        "mean engine step (ms)",
        Better::Lower,
        |s| s.mean_step_ms,
    ),
    Metric::new(
        "moe_time_share",
        "share of step time in MoE layers",
        Better::Lower,
        |s| s.moe_time_share,
    ),
    Metric::new(
        "busy_share_min",
        "least busy GPU's busy share",
        Better::Higher,
        |s| s.busy_share_min,
    ),
    Metric::new(
        "busy_share_mean",
        "mean per-GPU busy share",
        Better::Higher,
        |s| s.busy_share_mean,
    ),
    Metric::new(
        "busy_share_max",
        "busiest GPU's busy share",
        Better::Higher,
        |s| s.busy_share_max,
    ),
    Metric::new(
        "window_score_ms",
        "GEM score on the mapper's window, all layers (ms)",
        Better::Lower,
        |s| s.window_score_ms,
    ),
    Metric::new(
        "unseen_score_ms",
        "GEM score on the unseen trace steps, all layers (ms)",
        Better::Lower,
        |s| s.unseen_score_ms,
    ),
    Metric::new(
        "gap_vs_fastest",
        "slowest-to-fastest throughput gap (fraction of fastest)",
        Better::Lower,
        |s| s.gap_vs_fastest,
    ),
    Metric::new(
        "gap_vs_slowest",
        "fastest-over-slowest throughput excess",
        Better::Lower,
        |s| s.gap_vs_slowest,
    ),
    Metric::new(
        "profiling_min",
        "kernel time of one GPU's variability profile (min)",
        Better::Lower,
        |s| s.profiling_min,
    ),
    Metric::new(
        "profiled_counts",
        "token counts a variability profile measures",
        Better::Lower,
        |s| s.profiled_counts,
    ),
];

/// The metric column of `METRIC_TABLE`.
pub const METRICS: &[MetricInfo] = &metric_infos(&METRIC_TABLE);

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
    /// The mapper's planning curves: each GPU's MoE layer on `n` tokens spread evenly over its
    /// experts at its own speed, through the one MoE entry point (`policies::mapping::gpu_costs::planning_costs`).
    pub costs: GpuCosts,
    /// What the simulator charges: the one MoE entry point on each GPU's slots
    /// (`cost::moe_layer`; the measured grouped GEMMs where the GPU and expert shape were
    /// measured).
    pub layer: MoeLayerCost,
    /// The link of the expert-parallel all-to-all (`LinkSpec::of_server`).
    pub link: LinkSpec,
    /// Each GPU's compute and bandwidth factors.
    pub speeds: Vec<SpeedFactors>,
}

impl Deployment {
    /// Builds the trace (generated from `(seed, "gem/trace")` when synthetic) and the per-GPU
    /// curves of `scenario`.
    pub fn new(scenario: &GemScenario, seed: u64) -> Deployment {
        let shape = &scenario.shape;
        let (trace, observed_steps) =
            scenario
                .trace
                .build(shape.n_layers, shape.n_experts, shape.top_k, seed);
        let expert = scenario
            .profile
            .expert_entry(shape.hidden, shape.expert_ffn, shape.weight_dtype)
            .expect("the analytic profile has the model's expert curve");
        let limit = (trace.max_step_total().ceil() as usize).min(1 << 22);
        let layer = physical_layer(scenario, expert);
        let experts_per_gpu = shape.n_experts / scenario.n_gpus;
        let share = scenario.bandwidth_share;
        let speeds: Vec<SpeedFactors> = match scenario.factors {
            FactorKind::Clock => scenario
                .speed_factors
                .iter()
                .map(|&s| SpeedFactors::split(s, share))
                .collect(),
            FactorKind::Throughput => {
                let tokens = trace.mean_tokens_per_gpu(observed_steps, scenario.n_gpus);
                scenario
                    .speed_factors
                    .iter()
                    .map(|&s| throughput_speed(&layer, experts_per_gpu, tokens, s, share))
                    .collect()
            }
        };
        let costs = planning_costs(&layer, experts_per_gpu, &speeds, limit);
        Deployment {
            trace,
            observed_steps,
            costs,
            layer,
            link: LinkSpec::of_server(&scenario.gpu),
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
/// computes, its waiting requests ordered by `queue` (the runner passes FCFS), or the
/// variability-at-scale experiment.
pub fn simulate(
    scenario: &GemScenario,
    seed: u64,
    mapper: &mut dyn ExpertMapper,
    queue: &mut dyn QueuePolicy,
) -> RunOutput {
    simulate_recorded(scenario, seed, mapper, queue, &mut DiscardRecords)
}

/// `simulate`, streaming each served request's record to `sink` (the variability-at-scale
/// experiment serves none).
pub fn simulate_recorded(
    scenario: &GemScenario,
    seed: u64,
    mapper: &mut dyn ExpertMapper,
    queue: &mut dyn QueuePolicy,
    sink: &mut dyn RecordSink,
) -> RunOutput {
    match scenario.experiment {
        Experiment::VariabilityAtScale => scale_output(scenario, seed),
        Experiment::ProfilingCost => profiling_output(scenario),
        Experiment::Serving => serve(scenario, seed, mapper, queue, sink),
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
    // Not computed by this experiment: no number (null in results), not 0.
    let scalars = crate::metrics::scalars(
        &METRIC_TABLE,
        &GemScalars {
            gap_vs_fastest: point.gap_vs_fastest,
            gap_vs_slowest: point.gap_vs_slowest,
            ..GemScalars::not_computed()
        },
    );
    RunOutput {
        scalars,
        details: json!({
            "experiment": "variability_at_scale",
            "note": "serving metrics are not computed by this experiment and are null",
            "draws": scenario.scale.draws,
            "distribution": scenario.distribution,
            "sigmas": scenario.distribution.sigmas(),
            "scale": point,
        }),
    }
}

fn profiling_output(scenario: &GemScenario) -> RunOutput {
    let cost = super::profiling::profiling_cost(scenario);
    let scalars = crate::metrics::scalars(
        &METRIC_TABLE,
        &GemScalars {
            profiling_min: cost.minutes,
            profiled_counts: cost.counts as f64,
            ..GemScalars::not_computed()
        },
    );
    RunOutput {
        scalars,
        details: json!({
            "experiment": "profiling_cost",
            "note": "serving metrics are not computed by this experiment and are null",
            "repetitions": scenario.profiling.repetitions,
            "profiling": cost,
        }),
    }
}

/// The MoE layer of `scenario`'s model and GPU through the one entry point, replayed in CUDA
/// graphs (vLLM V1): refined by the profile's measured expert entry when that profile was
/// measured (its fixed part once per layer plus each active expert's GEMM pair, where it splits
/// the layer), by the GPU's measured grouped GEMMs where the expert shape was measured on it
/// (Mixtral-8x7B and Qwen1.5-MoE on the H200), the kernel model elsewhere.
pub fn physical_layer(scenario: &GemScenario, expert: &ExpertFfnCurve) -> MoeLayerCost {
    let layer = MoeLayerCost::new(&scenario.gpu, &scenario.shape, Timing::Graph);
    if scenario.profile.source.kind != SourceKind::AnalyticRoofline {
        layer.with_profile(expert)
    } else {
        layer.with_measured_grouped(&scenario.gpu).0
    }
}

/// The replica GEM's engine is: vLLM V1's scheduler (the default engine since vLLM 0.8) with
/// its defaults for GPUs of at least 70 GiB: `max_num_seqs` sequences, one token budget of
/// `max_num_batched_tokens` shared by decodes and prefill chunks, chunked prefill, running
/// sequences before waiting ones, and no KV-cache limit (the cache is not modelled: every
/// admission fits, nothing is preempted; docs/serving.md).
pub fn replica_config(scenario: &GemScenario) -> ReplicaConfig {
    ReplicaConfig {
        max_num_seqs: scenario.serving.max_num_seqs,
        max_num_batched_tokens: Some(scenario.serving.max_num_batched_tokens as u64),
        chunked_prefill: true,
        kv: KvConfig {
            block_size: 1,
            blocks: u64::MAX,
            watermark_blocks: 0,
        },
        admission: Admission::PromptOnly,
        batching: Batching::Continuous,
    }
}

/// The simulated step cost, behind the serving layer's `StepCost` seam: per MoE layer the
/// slowest GPU's grouped GEMM on the tokens routed to it (`work.routed.per_gpu`; the lock-step
/// barrier), plus the tensor-parallel dense part and head: the prefill part (compute-bound at
/// the token counts that matter) slowed by each GPU's compute factor, the decode part (weight
/// and KV streaming) by its bandwidth factor; the slowest GPU sets the pace. The breakdown
/// carries the MoE time and each GPU's own busy time.
pub struct CurveStepCost<'a> {
    layer: &'a MoeLayerCost,
    link: LinkSpec,
    non_expert_prefill: &'a CostCurve,
    non_expert_decode: &'a CostCurve,
    head: &'a CostCurve,
    speeds: &'a [SpeedFactors],
    /// Whether the non-expert curves are already one GPU's share of the tensor-parallel layer
    /// (built from operations measured at that degree, or a profile measured as one GPU's
    /// shard) rather than the whole layer's.
    non_expert_per_gpu: bool,
    /// Whether the head curve is one GPU's shard too (a profile measured as one).
    head_per_gpu: bool,
    source: CostSource,
    op_sources: Option<OpSources>,
}

impl<'a> CurveStepCost<'a> {
    /// The cost model of `scenario` on `deployment`'s per-GPU curves.
    pub fn new(scenario: &'a GemScenario, deployment: &'a Deployment) -> CurveStepCost<'a> {
        let profile = &scenario.profile;
        let op_sources = scenario.pricing.as_ref().map(|p| p.sources());
        CurveStepCost {
            layer: &deployment.layer,
            link: deployment.link,
            non_expert_prefill: &profile.non_expert_prefill,
            non_expert_decode: &profile.non_expert_decode,
            head: &profile.head,
            speeds: &deployment.speeds,
            non_expert_per_gpu: scenario.pricing.is_some() || profile.tensor_parallel > 1,
            head_per_gpu: profile.tensor_parallel > 1,
            source: match profile.source.kind {
                SourceKind::Measured => CostSource::Measured,
                SourceKind::AnalyticRoofline => CostSource::Analytic,
                SourceKind::MeasuredOperations => {
                    op_sources.map_or(CostSource::Analytic, |s| s.step_source())
                }
            },
            op_sources,
        }
    }
}

impl StepCost for CurveStepCost<'_> {
    fn price(&mut self, work: &StepWork<'_>) -> StepTime {
        let routed = work
            .routed
            .expect("a GEM step carries its routed tokens per layer and GPU");
        let n_gpus = self.speeds.len();
        let emitting = work.batch.iter().filter(|s| s.step_emits()).count();
        // A step's dense part: a pass over its prefill tokens (the GEMMs, compute-bound at the
        // counts that matter) and a decode pass over its decoding sequences (the GEMMs and
        // attention over their cache, weight- and KV-streaming), whichever it has.
        let at = |curve: &CostCurve, n: u64| if n > 0 { curve.at(n as f64) } else { 0.0 };
        let prefill = at(self.non_expert_prefill, work.prefill_tokens);
        let decode = at(self.non_expert_decode, work.decode_tokens);
        let head = at(self.head, emitting as u64);
        let mut busy = vec![0.0; n_gpus];
        let mut moe = 0.0;
        let mut communication = 0.0;
        let slots = routed.per_slot.len() / (routed.layers * n_gpus).max(1);
        for layer in 0..routed.layers {
            let mut ep = self.layer.layer(n_gpus, Some(self.link));
            for (g, b) in busy.iter_mut().enumerate() {
                let rows = &routed.per_slot[(layer * n_gpus + g) * slots..][..slots];
                *b += ep.add(ExpertRows::Counted(rows), self.speeds[g]);
            }
            let cost = ep.finish();
            moe += cost.nanos;
            communication += cost.all_to_all_ns;
        }
        // Attention, shared experts and the head are tensor-parallel over the G GPUs: each
        // runs 1/G of the work at its own speed (or, priced from operations or a profile
        // measured at tensor parallelism G, its measured share) and the slowest sets the pace.
        let layers = routed.layers as f64;
        let g = n_gpus as f64;
        let mut dense_pace = 0.0f64;
        for (b, s) in busy.iter_mut().zip(self.speeds) {
            let dense = prefill / s.compute + decode / s.bandwidth;
            let dense = if self.non_expert_per_gpu {
                dense
            } else {
                dense / g
            };
            let head = head / s.bandwidth;
            let own = layers * dense + if self.head_per_gpu { head } else { head / g };
            *b += own;
            dense_pace = dense_pace.max(own);
        }
        StepTime {
            duration: SimDuration((moe + dense_pace).round().max(1.0) as u64),
            breakdown: StepBreakdown {
                moe_ns: moe,
                communication_ns: communication,
                per_gpu_busy_ns: busy,
                op_sources: self.op_sources,
                ..StepBreakdown::default()
            },
            source: self.source,
        }
    }
}

/// Where each step's tokens go: the unseen trace steps, in turn, give each layer's share of
/// routed tokens per expert; the mapping sends each expert's tokens to the GPUs hosting it.
struct StepRouting {
    n_unseen: usize,
    n_layers: usize,
    n_experts: usize,
    n_gpus: usize,
    top_k: u64,
    /// Per layer, the expert of each slot, in GPU order (every GPU hosts as many slots).
    slot_experts: Vec<Vec<usize>>,
    /// `[unseen step][layer][slot]`: the share of the layer's routed tokens that the slots up to
    /// and including this one receive (an expert with r copies counts 1/r in each); the last
    /// slot of a layer with routed tokens is 1.
    cumulative: Vec<f64>,
    /// Slots per layer (the stride of `cumulative`).
    slots_per_layer: usize,
    /// `[layer][expert]`, `[layer][gpu]` and `[layer][gpu][slot]` of the step being routed.
    per_expert: Vec<u32>,
    per_gpu: Vec<u32>,
    per_slot: Vec<u32>,
    /// Slots per GPU in `per_slot` (the most any layer maps; fewer are padded with zeros).
    slots_per_gpu: usize,
}

impl StepRouting {
    fn new(
        trace: &ExpertTrace,
        observed_steps: usize,
        mappings: &[LayerMapping],
        n_gpus: usize,
        top_k: usize,
    ) -> StepRouting {
        let (n_layers, n_experts) = (trace.n_layers(), trace.n_experts());
        let n_unseen = trace.n_steps() - observed_steps;
        let slot_experts: Vec<Vec<usize>> = mappings
            .iter()
            .map(|m| m.slots.iter().flatten().copied().collect())
            .collect();
        let slots_per_layer = slot_experts.iter().map(Vec::len).max().unwrap_or(0);
        let copies: Vec<Vec<usize>> = mappings
            .iter()
            .map(|m| m.replica_counts(n_experts))
            .collect();
        let mut cumulative = vec![0.0; n_unseen * n_layers * slots_per_layer];
        for u in 0..n_unseen {
            for layer in 0..n_layers {
                let counts = trace.step(layer, observed_steps + u);
                let total: f64 = counts.iter().map(|&c| f64::from(c)).sum();
                let row = &mut cumulative[(u * n_layers + layer) * slots_per_layer..]
                    [..slot_experts[layer].len()];
                if total <= 0.0 {
                    continue;
                }
                let mut running = 0.0;
                for (out, &e) in row.iter_mut().zip(&slot_experts[layer]) {
                    running += f64::from(counts[e]) / copies[layer][e] as f64;
                    *out = running / total;
                }
                // Every expert is placed, so the slots hold the whole layer; pin the rounding.
                *row.last_mut().expect("a layer has slots") = 1.0;
            }
        }
        StepRouting {
            n_unseen,
            n_layers,
            n_experts,
            n_gpus,
            top_k: top_k as u64,
            slot_experts,
            cumulative,
            slots_per_layer,
            per_expert: vec![0; n_layers * n_experts],
            per_gpu: vec![0; n_layers * n_gpus],
            per_slot: vec![0; n_layers * slots_per_layer],
            slots_per_gpu: slots_per_layer / n_gpus,
        }
    }

    /// Routes a step of `tokens` tokens, the `step`-th of the run, on unseen trace step
    /// `step mod n_unseen`. Each layer's `tokens x top_k` token-expert assignments are split
    /// over the expert slots, GPU by GPU, in proportion to the trace step's counts (an expert
    /// with r copies weighs 1/r in each), in whole tokens, by rounding the cumulative shares:
    /// each slot gets the floor or the ceiling of its exact share, each GPU the floor or the
    /// ceiling of its own, and the layer's total is exact. An expert's tokens are the sum over
    /// its copies.
    fn route(&mut self, step: u64, tokens: u64) -> RoutedTokens<'_> {
        let u = (step % self.n_unseen as u64) as usize;
        let assignments = (tokens * self.top_k) as f64;
        for (layer, slot_experts) in self.slot_experts.iter().enumerate() {
            let shares = &self.cumulative[(u * self.n_layers + layer) * self.slots_per_layer..]
                [..slot_experts.len()];
            let experts = &mut self.per_expert[layer * self.n_experts..][..self.n_experts];
            let gpus = &mut self.per_gpu[layer * self.n_gpus..][..self.n_gpus];
            let stride = self.slots_per_gpu;
            let slots = &mut self.per_slot[layer * self.n_gpus * stride..][..self.n_gpus * stride];
            experts.fill(0);
            slots.fill(0);
            let per_gpu = slot_experts.len() / self.n_gpus;
            let mut given = 0u64;
            for (((gpu_shares, gpu_experts), on_gpu), gpu_slots) in shares
                .chunks_exact(per_gpu)
                .zip(slot_experts.chunks_exact(per_gpu))
                .zip(gpus)
                .zip(slots.chunks_exact_mut(stride))
            {
                let before = given;
                for ((&share, &expert), slot) in gpu_shares.iter().zip(gpu_experts).zip(gpu_slots) {
                    // Round half up (the shares are non-negative).
                    let upto = (share * assignments + 0.5) as u64;
                    *slot = (upto - given) as u32;
                    experts[expert] += *slot;
                    given = upto;
                }
                *on_gpu = (given - before) as u32;
            }
        }
        RoutedTokens {
            layers: self.n_layers,
            per_expert: &self.per_expert,
            per_gpu: &self.per_gpu,
            per_slot: &self.per_slot,
        }
    }
}

/// What happens to the GEM serving engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    /// A request arrives (and, offline, every other one arriving at the same instant).
    Arrival(Arrival),
    /// The engine step in execution finishes.
    StepEnd,
}

/// GEM's side of an admission: the request's output length, kept from its arrival.
struct OutputLengths<'x>(&'x mut HashMap<u64, u32>);

impl AdmitHook for OutputLengths<'_> {
    fn output_tokens(&mut self, request: &QueuedRequest) -> u32 {
        self.0[&request.id]
    }
    fn admitted(&mut self, _now: SimTime, request: &QueuedRequest, _output: u32) {
        self.0.remove(&request.id);
    }
}

/// The GEM server: arrivals into one replica whose steps are routed by the trace and the
/// mapping and priced by a `StepCost`.
struct GemServer<'a> {
    arrivals: Box<dyn ArrivalProcess>,
    lengths: SimRng,
    prompt_tokens: TokenCount,
    output_tokens: TokenCount,
    next_id: u64,
    replica: Replica,
    queue: &'a mut dyn QueuePolicy,
    /// Output lengths of the requests not yet admitted.
    outputs: HashMap<u64, u32>,
    routing: StepRouting,
    cost: &'a mut dyn StepCost,
    steps: u64,
    moe_ns: f64,
    busy_ns: Vec<f64>,
    finished: Vec<Seq>,
    last_completion: SimTime,
    sink: &'a mut dyn RecordSink,
}

impl GemServer<'_> {
    /// Queues `arrival` as the next request: its lengths are the trace's where it has them,
    /// drawn from the workload's distributions otherwise (prompt, then output).
    fn submit(&mut self, now: SimTime, arrival: Arrival) {
        let prompt = arrival
            .prompt_tokens
            .unwrap_or_else(|| self.prompt_tokens.sample(&mut self.lengths));
        let output = arrival
            .output_tokens
            .unwrap_or_else(|| self.output_tokens.sample(&mut self.lengths));
        let id = self.next_id;
        self.next_id += 1;
        self.outputs.insert(id, output);
        let request = QueuedRequest {
            id,
            workflow: id,
            stage: 0,
            submitted: now,
            workflow_arrival: now,
            enqueued_iteration: self.replica.iteration(),
            prompt_tokens: prompt,
            predicted_stage_tokens: 0.0,
            predicted_total_tokens: 0.0,
            attained_service: 0,
            rank_noise: 0.0,
            topic: 0,
        };
        self.replica.submit(now, request, &mut *self.queue, 0);
    }

    /// Schedules the replica's next step, routes and prices it, or leaves the replica idle.
    fn start_step(&mut self, now: SimTime, events: &mut EventQueue<Event>) {
        let mut hook = OutputLengths(&mut self.outputs);
        let Some(work) = self.replica.schedule(now, &mut *self.queue, 0, &mut hook) else {
            return;
        };
        let routed = self
            .routing
            .route(self.steps, work.prefill_tokens + work.decode_tokens);
        let time = self.cost.price(&StepWork {
            routed: Some(routed),
            ..work
        });
        self.steps += 1;
        self.moe_ns += time.breakdown.moe_ns;
        for (busy, step) in self.busy_ns.iter_mut().zip(&time.breakdown.per_gpu_busy_ns) {
            *busy += step;
        }
        self.replica.begin_step(time.duration);
        events.schedule(now + time.duration, Event::StepEnd);
    }

    /// The step ends: the replica records its finished requests' latencies, each gets its
    /// per-request record, and the next step starts.
    fn step_end(&mut self, now: SimTime, events: &mut EventQueue<Event>) {
        let mut finished = std::mem::take(&mut self.finished);
        self.replica.complete_step(now, &mut finished);
        for done in finished.drain(..) {
            let arrival = done.request.submitted;
            self.sink.record(&RequestRecord {
                id: done.request.id,
                arrival,
                first_token: Some(done.first_token()),
                finish: now,
                prompt_tokens: u64::from(done.request.prompt_tokens),
                output_tokens: u64::from(done.output),
                extra: &[],
            });
            self.last_completion = now;
        }
        self.finished = finished;
        self.start_step(now, events);
    }
}

impl Model for GemServer<'_> {
    type Event = Event;
    fn start(&mut self, events: &mut EventQueue<Event>) {
        if let Some(first) = self.arrivals.next_arrival() {
            events.schedule(first.time, Event::Arrival(first));
        }
    }

    fn handle(&mut self, now: SimTime, event: Event, events: &mut EventQueue<Event>) {
        match event {
            Event::Arrival(arrival) => {
                self.submit(now, arrival);
                // Requests arriving at the same instant join before the step is decided.
                while let Some(next) = self.arrivals.next_arrival() {
                    if next.time > now {
                        events.schedule(next.time, Event::Arrival(next));
                        break;
                    }
                    self.submit(now, next);
                }
                if !self.replica.is_busy() {
                    self.start_step(now, events);
                }
            }
            Event::StepEnd => self.step_end(now, events),
        }
    }
}

fn serve(
    scenario: &GemScenario,
    seed: u64,
    mapper: &mut dyn ExpertMapper,
    queue: &mut dyn QueuePolicy,
    sink: &mut dyn RecordSink,
) -> RunOutput {
    let deployment = Deployment::new(scenario, seed);
    let mut cost = CurveStepCost::new(scenario, &deployment);
    serve_on(scenario, seed, mapper, queue, &deployment, &mut cost, sink)
}

/// The serving experiment of `scenario` on `deployment` (built by [`Deployment::new`] for the
/// same seed): requests stream from the scenario's arrivals into one `serving::Replica`
/// ([`replica_config`]) whose admissions follow `queue` (FCFS in every GEM run), and each step
/// is routed by the trace and the mapping and priced by `cost`: [`CurveStepCost`] in
/// simulation, a live wrapper in live mode. Mapping, batching and routing are the same code
/// either way.
pub fn serve_on(
    scenario: &GemScenario,
    seed: u64,
    mapper: &mut dyn ExpertMapper,
    queue: &mut dyn QueuePolicy,
    deployment: &Deployment,
    cost: &mut dyn StepCost,
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
    queue.reset(1);
    let mut server = GemServer {
        arrivals: scenario
            .arrival
            .process(scenario.n_requests, 1, stream(seed, "gem/arrivals")),
        lengths: stream(seed, "gem/lengths"),
        prompt_tokens: scenario.prompt_tokens.sampler(),
        output_tokens: scenario.output_tokens.sampler(),
        next_id: 0,
        replica: Replica::new(replica_config(scenario)),
        queue,
        outputs: HashMap::new(),
        routing: StepRouting::new(
            &deployment.trace,
            deployment.observed_steps,
            &mappings,
            scenario.n_gpus,
            scenario.shape.top_k,
        ),
        cost,
        steps: 0,
        moe_ns: 0.0,
        busy_ns: vec![0.0; scenario.n_gpus],
        finished: Vec::new(),
        last_completion: SimTime::ZERO,
        sink,
    };
    run(&mut server);
    let stats = server.replica.stats();
    assert_eq!(
        stats.completed, scenario.n_requests as u64,
        "every request completes"
    );
    let end = server.last_completion;
    let makespan_s = end.as_secs_f64();
    let busy_share: Vec<f64> = server
        .busy_ns
        .iter()
        .map(|b| {
            if makespan_s > 0.0 {
                b / 1e9 / makespan_s
            } else {
                0.0
            }
        })
        .collect();
    let (gap_fast, gap_slow) = gaps(&scenario.speed_factors);
    let values = GemScalars {
        requests: stats.latencies.summary(),
        throughput_tok_s: {
            if makespan_s > 0.0 {
                stats.tokens as f64 / makespan_s
            } else {
                0.0
            }
        },
        makespan_s,
        mean_step_ms: stats.busy_ns as f64 / stats.steps.max(1) as f64 / 1e6,
        moe_time_share: {
            if stats.busy_ns > 0 {
                server.moe_ns / stats.busy_ns as f64
            } else {
                0.0
            }
        },
        busy_share_min: busy_share.iter().copied().fold(f64::INFINITY, f64::min),
        busy_share_mean: busy_share.iter().sum::<f64>() / busy_share.len() as f64,
        busy_share_max: busy_share.iter().copied().fold(0.0, f64::max),
        window_score_ms: window_scores.iter().sum(),
        unseen_score_ms: unseen_scores.iter().sum(),
        gap_vs_fastest: gap_fast,
        gap_vs_slowest: gap_slow,
        profiling_min: f64::NAN,
        profiled_counts: f64::NAN,
    };
    let scalars = crate::metrics::scalars(&METRIC_TABLE, &values);
    let details = details(scenario, deployment, &mappings, window, &busy_share);
    let trace_stats = scenario
        .arrival
        .trace_stats(scenario.n_requests)
        .map(|(_, s)| s);
    let mut output = RunOutput {
        scalars,
        details: json!({
            "experiment": "serving",
            "per_layer_window_score_ms": window_scores,
            "per_layer_unseen_score_ms": unseen_scores,
            "steps": stats.steps,
            "output_tokens": stats.tokens,
            "replica": {
                "steps": stats.steps,
                "busy_ns": stats.busy_ns,
                "mean_batch_size": stats.batch_sum as f64 / stats.steps.max(1) as f64,
                "prefill_tokens": stats.prefill_tokens,
                "admitted": stats.admitted,
                "completed": stats.completed,
                "mean_in_system": stats.mean_in_system(end),
                "mean_sojourn_ns": stats.mean_sojourn_ns(),
            },
            "arrival_trace": trace_stats,
            "deployment": details,
        }),
    };
    if let Some(record) = &scenario.pricing {
        output.details["pricing"] =
            serde_json::to_value(record.as_ref()).expect("records serialize");
    }
    output
}

fn details(
    scenario: &GemScenario,
    deployment: &Deployment,
    mappings: &[LayerMapping],
    window: usize,
    busy_share: &[f64],
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
        "moe_layer": deployment.layer.pricing(&scenario.gpu),
        "n_gpus": scenario.n_gpus,
        "variability": scenario.variability,
        "speed_factors": scenario.speed_factors,
        "factors": scenario.factors,
        "clock_and_bandwidth": deployment.speeds.iter().map(|s| [s.compute, s.bandwidth]).collect::<Vec<_>>(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_splits_whole_tokens_over_slots_by_cumulative_rounding() {
        // One layer, 4 experts; observed step 0 (ignored), unseen step 1 with counts 3, 1, 0, 4.
        // Three GPUs, two slots each: GPU 0 hosts experts 0 and 3, GPU 1 experts 0 and 1, GPU 2
        // experts 2 and 3 (experts 0 and 3 have two copies, each weighing half).
        // A step of 5 tokens at top-2 makes 10 assignments over the total of 8: x 1.25.
        // Slot shares in GPU order: 1.5, 2, 1.5, 1, 0, 2 -> cumulative 1.5, 3.5, 5, 6, 6, 8,
        // x 1.25 = 1.875, 4.375, 6.25, 7.5, 7.5, 10, rounded 2, 4, 6, 8, 8, 10: slots 2, 2, 2,
        // 2, 0, 2. GPUs 4, 4, 2; experts 0: 2 + 2, 1: 2, 2: 0, 3: 2 + 2.
        let trace = ExpertTrace::from_counts(1, 4, 2, vec![9.0, 9.0, 9.0, 9.0, 3.0, 1.0, 0.0, 4.0]);
        let mapping = LayerMapping {
            slots: vec![vec![0, 3], vec![0, 1], vec![2, 3]],
        };
        let mut routing = StepRouting::new(&trace, 1, &[mapping], 3, 2);
        let routed = routing.route(0, 5);
        assert_eq!(routed.layers, 1);
        assert_eq!(routed.per_gpu, &[4, 4, 2]);
        assert_eq!(routed.per_expert, &[4, 2, 0, 4]);
        assert_eq!(routed.per_slot, &[2, 2, 2, 2, 0, 2]);
        // The step counter cycles over the one unseen step; a step of 0 tokens routes none.
        assert_eq!(routing.route(7, 5).per_gpu, &[4, 4, 2]);
        assert_eq!(routing.route(1, 0).per_expert, &[0, 0, 0, 0]);
        // A trace step without tokens routes none either.
        let empty = ExpertTrace::from_counts(1, 2, 2, vec![1.0, 1.0, 0.0, 0.0]);
        let linear = LayerMapping {
            slots: vec![vec![0], vec![1]],
        };
        let mut routing = StepRouting::new(&empty, 1, &[linear], 2, 1);
        assert_eq!(routing.route(0, 9).per_gpu, &[0, 0]);
    }
}
