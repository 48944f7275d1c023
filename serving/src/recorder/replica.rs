//! One replica's recorder: the requests it finished (`RequestLatencies`, which the replica itself
//! records as it hands them back, `ReplicaStats::latencies`), each of its GPUs' busy time and
//! model FLOPs, and its KV-cache use over time (the blocks in use, time-averaged, its maximum,
//! and a series bounded by `metrics::DepthTracker`), and the expert load of its MoE steps
//! (`expert_load::ExpertLoad`), and the requests waiting at it over time (time-averaged and its
//! maximum, CAPS's queue depth), and, when asked, the intervals its steps cover
//! (`timeline::BusyIntervals`). `complete_step` wraps
//! `Replica::complete_step`, so the finished requests are streamed to the per-request records
//! where the replica hands them back. `finish` closes it into a `ServingSummary`; the summaries
//! of a cluster's replicas merge into the overall one.

use super::expert_load::{ExpertLoad, StepLoad};
use super::timeline::BusyIntervals;
use crate::cost::gpu::GpuSpec;
use crate::metrics::DepthTracker;
use crate::policies::memory::MemoryReport;
use crate::records::{Extra, RecordSink, RequestRecord};
use crate::serving::{Replica, ReplicaStats, RequestLatencies, Seq};
use crate::time::SimTime;

/// The family columns of a served request's record (after `records::COMMON_COLUMNS`).
pub const RECORD_COLUMNS: &[&str] = &[
    "replica",
    "queueing_ms",
    "ttft_ms",
    "tpot_ms",
    "topic",
    "step",
    "start_s",
];

/// The replica's step (numbered from 0; a static replica's batch) a served request's record
/// finished in (its `step` column).
pub fn step_of(record: &RequestRecord<'_>) -> u64 {
    match record.extra.get(5) {
        Some(Extra::Count(step)) => *step,
        other => panic!("a served request's sixth column is its step, not {other:?}"),
    }
}

/// What one replica records as it runs.
pub struct ReplicaRecorder {
    gpu_busy_ns: Vec<f64>,
    /// Time of the steps in the MoE layers' routed experts, summed, ns.
    moe_ns: f64,
    gpu_model_flops: Vec<f64>,
    kv_used: DepthTracker,
    kv_blocks: u64,
    expert_load: ExpertLoad,
    /// The weight of a step's load CV in the imbalance factor (`ExpertLoad::imbalance_factor`).
    imbalance_sensitivity: f64,
    /// Requests waiting at the replica (not yet in a step).
    queue_depth: DepthTracker,
    /// The intervals its steps cover, when the run records its timeline.
    timeline: Option<BusyIntervals>,
}

impl ReplicaRecorder {
    /// A replica of `n_gpus` GPUs whose KV cache holds `kv_blocks` blocks, its use sampled every
    /// `kv_sample_interval_ns` (0: no series).
    pub fn new(n_gpus: usize, kv_blocks: u64, kv_sample_interval_ns: u64) -> ReplicaRecorder {
        ReplicaRecorder {
            gpu_busy_ns: vec![0.0; n_gpus],
            moe_ns: 0.0,
            gpu_model_flops: vec![0.0; n_gpus],
            kv_used: DepthTracker::new(kv_sample_interval_ns),
            kv_blocks,
            expert_load: ExpertLoad::default(),
            imbalance_sensitivity: 1.0,
            queue_depth: DepthTracker::new(0),
            timeline: None,
        }
    }

    /// Records the intervals the replica's steps cover when `record` (`[output] timeline`).
    pub fn with_timeline(mut self, record: bool) -> Self {
        self.timeline = record.then(BusyIntervals::default);
        self
    }

    /// The intervals the replica's steps covered so far, when it records them.
    pub fn busy(&self) -> Option<&BusyIntervals> {
        self.timeline.as_ref()
    }

    /// Weighs each step's load CV by `sensitivity` in the imbalance factor (1 unless set: the
    /// `cv` execution model's, so the factor is the one its batch times use).
    pub fn with_imbalance_sensitivity(mut self, sensitivity: f64) -> Self {
        self.imbalance_sensitivity = sensitivity;
        self
    }

    /// `waiting` requests wait at the replica from `now` on.
    pub fn queue_depth(&mut self, now: SimTime, waiting: usize) {
        self.queue_depth.set(now, waiting as u64);
    }

    /// The step just started routed `load` to the experts (`layers x n_experts` tokens,
    /// layer-major: every pass of the step summed): its expert-load imbalance and CV.
    pub fn expert_load<'a>(&mut self, load: impl Into<StepLoad<'a>>, n_experts: usize) {
        self.expert_load
            .add(load.into(), n_experts, self.imbalance_sensitivity);
    }

    /// The step just started spends `moe_ns` in the MoE layers' routed experts
    /// (`StepBreakdown::moe_ns`).
    pub fn moe_time(&mut self, moe_ns: f64) {
        self.moe_ns += moe_ns;
    }

    /// `replica` starts the step it just scheduled at `now`; in it each GPU is busy for
    /// `gpu_busy_ns[g]` and does `gpu_model_flops[g]` model FLOPs.
    pub fn step_started(
        &mut self,
        now: SimTime,
        replica: &Replica,
        gpu_busy_ns: &[f64],
        gpu_model_flops: &[f64],
    ) {
        for (total, step) in self.gpu_busy_ns.iter_mut().zip(gpu_busy_ns) {
            *total += step;
        }
        if let Some(timeline) = &mut self.timeline {
            timeline.step_started(now);
        }
        for (total, step) in self.gpu_model_flops.iter_mut().zip(gpu_model_flops) {
            *total += step;
        }
        self.kv_used.set(now, replica.kv().used());
    }

    /// The step of `replica` (replica `index` of the cluster) ends at `now`: completes it,
    /// appends the finished sequences to `finished` (the replica records their latencies) and
    /// writes one record each to `sink` with `RECORD_COLUMNS`.
    pub fn complete_step(
        &mut self,
        now: SimTime,
        index: usize,
        replica: &mut Replica,
        finished: &mut Vec<Seq>,
        sink: &mut dyn RecordSink,
    ) {
        let from = finished.len();
        // The step ending now, numbered from 0 per replica (a static replica's batch).
        let step = replica.stats().steps.saturating_sub(1);
        replica.complete_step(now, finished);
        if let Some(timeline) = &mut self.timeline {
            timeline.step_ended(now);
        }
        for seq in &finished[from..] {
            let submitted = seq.request.submitted;
            let tpot_ms = if seq.output > 1 {
                (now - seq.first_token()).as_millis_f64() / f64::from(seq.output - 1)
            } else {
                f64::NAN
            };
            sink.record(&RequestRecord {
                id: seq.request.id,
                arrival: submitted,
                first_token: Some(seq.first_token()),
                finish: now,
                prompt_tokens: u64::from(seq.request.prompt_tokens),
                output_tokens: u64::from(seq.output),
                extra: &[
                    Extra::Count(index as u64),
                    Extra::Millis((seq.admitted() - submitted).as_millis_f64()),
                    Extra::Millis((seq.first_token() - submitted).as_millis_f64()),
                    Extra::Millis(tpot_ms),
                    Extra::Count(u64::from(seq.request.topic)),
                    Extra::Count(step),
                    Extra::Time(seq.admitted()),
                ],
            });
        }
        self.kv_used.set(now, replica.kv().used());
    }

    /// The replica's summary over [0, `end`] (the run's end), from its own `stats` and its GPU's
    /// datasheet peak (`gpu`, for MFU).
    pub fn finish(self, end: SimTime, stats: &ReplicaStats, gpu: &GpuSpec) -> ServingSummary {
        let (kv_mean_blocks, kv_max_blocks, kv_series) = self.kv_used.finish(end);
        let (queue_depth_mean, queue_depth_max, _) = self.queue_depth.finish(end);
        let seconds = end.as_secs_f64();
        let share = |busy: &f64| {
            if seconds > 0.0 {
                busy * 1e-9 / seconds
            } else {
                0.0
            }
        };
        ServingSummary {
            latencies: stats.latencies.clone(),
            makespan_s: seconds,
            replicas: 1,
            steps: stats.steps,
            batch_sum: stats.batch_sum,
            busy_ns: stats.busy_ns,
            moe_ns: self.moe_ns,
            preemptions: stats.preempted_recompute + stats.preempted_swap,
            refused: 0,
            gpu_busy_share: self.gpu_busy_ns.iter().map(share).collect(),
            gpu_mfu: self
                .gpu_model_flops
                .iter()
                .map(|&flops| gpu.model_flops_utilization(flops, seconds))
                .collect(),
            kv_blocks: self.kv_blocks,
            kv_mean_blocks,
            kv_max_blocks,
            kv_series,
            expert_load: self.expert_load,
            queue_depth_mean,
            queue_depth_max,
            memory: None,
            prefix_lookup_tokens: stats.prefix_lookup_tokens,
            prefix_hit_tokens: stats.prefix_hit_tokens,
            replica_output_tokens: vec![stats.tokens],
            workflows: None,
            questions: None,
            sessions: None,
        }
    }
}

/// A run's (or one replica's) recorded figures, what a family's metric table computes from.
#[derive(Clone, Debug, Default)]
pub struct ServingSummary {
    pub latencies: RequestLatencies,
    /// The run's end (its last finish), seconds from 0.
    pub makespan_s: f64,
    /// Replicas summed into this summary.
    pub replicas: usize,
    pub steps: u64,
    /// Sum over steps of the sequences in the step.
    pub batch_sum: u64,
    /// Time the replicas spent in steps, summed, ns.
    pub busy_ns: u64,
    /// Of `busy_ns`, the time in the MoE layers' routed experts, ns.
    pub moe_ns: f64,
    pub preemptions: u64,
    /// Requests refused at admission (their prompt past what the replica takes); the family
    /// that refuses sets it.
    pub refused: u64,
    /// Each GPU's busy time over the makespan (the replicas' GPUs in order).
    pub gpu_busy_share: Vec<f64>,
    /// Each GPU's model FLOPs over its datasheet peak x the makespan.
    pub gpu_mfu: Vec<f64>,
    /// KV-cache blocks, summed over the replicas.
    pub kv_blocks: u64,
    /// Blocks in use, time-averaged over [0, makespan] and summed over the replicas.
    pub kv_mean_blocks: f64,
    /// Most blocks in use at once (the largest over the replicas for a merged summary).
    pub kv_max_blocks: u64,
    /// (seconds, blocks in use) on a grid (one replica's; empty once merged).
    pub kv_series: Vec<(f64, u64)>,
    /// The expert-load statistics of the MoE steps (`ReplicaRecorder::expert_load`).
    pub expert_load: ExpertLoad,
    /// Requests waiting (not yet in a step), time-averaged over [0, makespan] and summed over
    /// the replicas, where the family records them (`ReplicaRecorder::queue_depth`).
    pub queue_depth_mean: f64,
    /// Most requests waiting at once at one replica.
    pub queue_depth_max: u64,
    /// The adapter-memory manager's plan of the run (set on the run's summary by the family
    /// that plans one; `None` without adapters and on one replica's summary).
    pub memory: Option<MemoryReport>,
    /// With prefix caching: the prompt tokens looked up at first admissions and those found
    /// cached (`ReplicaStats::prefix_lookup_tokens`, `prefix_hit_tokens`), summed.
    pub prefix_lookup_tokens: u64,
    pub prefix_hit_tokens: u64,
    /// Each replica's output tokens (the replicas in order).
    pub replica_output_tokens: Vec<u64>,
    /// With a workflow workload: its finished workflows (set on the run's summary by the
    /// family that serves workflows; `None` otherwise and on one replica's summary).
    pub workflows: Option<WorkflowSummary>,
    /// With a question workload: its questions (set on the run's summary by the family that
    /// serves them; `None` otherwise and on one replica's summary).
    pub questions: Option<QuestionSummary>,
    /// With placed sessions: what the workers did (set on the run's summary by the family that
    /// places them; `None` otherwise and on one replica's summary).
    pub sessions: Option<super::SessionSummary>,
}

/// The questions of a run (`serving_family::questions`, MOSAIC's).
#[derive(Clone, Debug, Default)]
pub struct QuestionSummary {
    pub questions: u64,
    /// Questions the gate let skip the aggregator.
    pub skipped: u64,
    /// Aggregator calls made.
    pub aggregated: u64,
    /// Questions answered right (the majority's answer where skipped, else the aggregator's).
    pub correct: u64,
    /// Questions the aggregator answers right (every question aggregated).
    pub baseline_correct: u64,
    /// Per vote-agreement bucket, its plurality and counts.
    pub buckets: [(u32, BucketCount); 3],
    /// The last expert call's finish.
    pub expert_end: SimTime,
    /// The last call's finish, expert or aggregator.
    pub last_finish: SimTime,
}

/// One vote-agreement bucket's questions.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct BucketCount {
    pub questions: u64,
    pub skipped: u64,
    pub majority_correct: u64,
    pub aggregator_correct: u64,
}

impl QuestionSummary {
    fn share_pct(&self, count: u64) -> f64 {
        100.0 * count as f64 / self.questions.max(1) as f64
    }

    pub fn skip_pct(&self) -> f64 {
        self.share_pct(self.skipped)
    }

    pub fn accuracy_pct(&self) -> f64 {
        self.share_pct(self.correct)
    }

    /// Accuracy against aggregating every question, percentage points.
    pub fn accuracy_change_pp(&self) -> f64 {
        self.share_pct(self.correct) - self.share_pct(self.baseline_correct)
    }

    pub fn expert_makespan_s(&self) -> f64 {
        self.expert_end.as_secs_f64()
    }

    pub fn end_to_end_s(&self) -> f64 {
        self.last_finish.as_secs_f64()
    }

    /// What the aggregator stage adds past the expert stage.
    pub fn aggregator_s(&self) -> f64 {
        (self.last_finish - self.expert_end.min(self.last_finish)).as_secs_f64()
    }
}

/// The finished workflows of a run (`serving_family::workflows`).
#[derive(Clone, Debug, Default)]
pub struct WorkflowSummary {
    pub completed: u64,
    /// Workflows dropped because a stage's prompt was past what its replica takes.
    pub abandoned: u64,
    /// Arrival to the finish of the workflow's last stage.
    pub e2e: crate::metrics::LatencyRecorder,
    /// Per workflow, its stages' queueing (submission to first admission) summed.
    pub queueing: crate::metrics::LatencyRecorder,
    /// Mean over workflows of end-to-end latency over output tokens, ms per token.
    pub latency_per_token_ms: f64,
    /// The semantic router's macro mean average precision over the replica groups' models
    /// (`recorder::ranking::average_precision` of each model's confidences against whether it
    /// solves the workflow, the first `MAP_SAMPLE` workflows); NaN without a semantic router.
    pub router_map: f64,
    /// The Kendall tau distance between the length predictor's estimates of a stage's
    /// remaining workflow tokens on its replica's model and the truth, over the first
    /// `KENDALL_SAMPLE` stages; NaN without an untied pair.
    pub predictor_kendall_distance: f64,
    /// Workflows solved, % of the finished ones.
    pub score_pct: f64,
    /// The last workflow's finish.
    pub last_finish: SimTime,
}

impl WorkflowSummary {
    /// Finished workflows per second of the run (time 0 to the last finish).
    pub fn throughput_wps(&self) -> f64 {
        let span = self.last_finish.as_secs_f64();
        if span > 0.0 {
            self.completed as f64 / span
        } else {
            0.0
        }
    }
}

impl ServingSummary {
    /// The cluster's summary from its replicas'.
    pub fn merge(parts: &[ServingSummary]) -> ServingSummary {
        let mut all = ServingSummary::default();
        for p in parts {
            all.latencies.merge(&p.latencies);
            all.makespan_s = all.makespan_s.max(p.makespan_s);
            all.replicas += p.replicas;
            all.steps += p.steps;
            all.batch_sum += p.batch_sum;
            all.busy_ns += p.busy_ns;
            all.moe_ns += p.moe_ns;
            all.preemptions += p.preemptions;
            all.refused += p.refused;
            all.gpu_busy_share.extend(&p.gpu_busy_share);
            all.replica_output_tokens.extend(&p.replica_output_tokens);
            all.gpu_mfu.extend(&p.gpu_mfu);
            all.kv_blocks += p.kv_blocks;
            all.kv_mean_blocks += p.kv_mean_blocks;
            all.kv_max_blocks = all.kv_max_blocks.max(p.kv_max_blocks);
            all.expert_load.merge(&p.expert_load);
            all.queue_depth_mean += p.queue_depth_mean;
            all.queue_depth_max = all.queue_depth_max.max(p.queue_depth_max);
            all.prefix_lookup_tokens += p.prefix_lookup_tokens;
            all.prefix_hit_tokens += p.prefix_hit_tokens;
        }
        all
    }

    /// Finished requests per second, first submission to last finish.
    pub fn throughput_rps(&self) -> f64 {
        per_second(self.latencies.completed as f64, self.latencies.span_s())
    }

    /// Output tokens per second, first submission to last finish.
    pub fn throughput_tok_s(&self) -> f64 {
        per_second(self.latencies.output_tokens as f64, self.latencies.span_s())
    }

    /// The share of the steps' time in the MoE layers' routed experts (0 for a dense model).
    pub fn moe_time_share(&self) -> f64 {
        if self.busy_ns > 0 {
            self.moe_ns / self.busy_ns as f64
        } else {
            0.0
        }
    }

    /// Mean sequences per step.
    pub fn mean_batch_size(&self) -> f64 {
        self.batch_sum as f64 / self.steps.max(1) as f64
    }

    /// Mean step duration, ms.
    pub fn mean_step_ms(&self) -> f64 {
        self.busy_ns as f64 * 1e-6 / self.steps.max(1) as f64
    }

    /// Share of the makespan the replicas spent in steps, averaged over the replicas.
    pub fn replica_utilization(&self) -> f64 {
        let capacity = self.makespan_s * 1e9 * self.replicas.max(1) as f64;
        if capacity > 0.0 {
            self.busy_ns as f64 / capacity
        } else {
            0.0
        }
    }

    /// The most output tokens of one replica over the replicas' mean (1: balanced; 0 before
    /// any token).
    pub fn token_imbalance(&self) -> f64 {
        let tokens = &self.replica_output_tokens;
        let total: u64 = tokens.iter().sum();
        if total == 0 {
            return 0.0;
        }
        let max = tokens.iter().copied().max().unwrap_or(0);
        max as f64 * tokens.len() as f64 / total as f64
    }

    pub fn gpu_busy_share_mean(&self) -> f64 {
        mean(&self.gpu_busy_share)
    }

    pub fn gpu_busy_share_min(&self) -> f64 {
        if self.gpu_busy_share.is_empty() {
            return 0.0;
        }
        self.gpu_busy_share
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min)
    }

    pub fn mfu_mean(&self) -> f64 {
        mean(&self.gpu_mfu)
    }

    /// Time-averaged share of the KV blocks in use.
    pub fn kv_used_mean(&self) -> f64 {
        self.kv_mean_blocks / self.kv_blocks.max(1) as f64
    }

    /// Largest share of one replica's KV blocks in use at once.
    pub fn kv_used_max(&self) -> f64 {
        self.kv_max_blocks as f64 * self.replicas.max(1) as f64 / self.kv_blocks.max(1) as f64
    }
}

fn per_second(count: f64, seconds: f64) -> f64 {
    if seconds > 0.0 { count / seconds } else { 0.0 }
}

fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        0.0
    } else {
        values.iter().sum::<f64>() / values.len() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The token imbalance is the busiest replica's output tokens over the mean: 300 and 100
    /// tokens give 1.5, equal counts 1, no token 0.
    #[test]
    fn the_token_imbalance_is_the_busiest_replica_over_the_mean() {
        let of = |tokens: &[u64]| {
            let parts: Vec<ServingSummary> = tokens
                .iter()
                .map(|&t| ServingSummary {
                    replica_output_tokens: vec![t],
                    ..ServingSummary::default()
                })
                .collect();
            ServingSummary::merge(&parts).token_imbalance()
        };
        assert_eq!(of(&[300, 100]), 1.5);
        assert_eq!(of(&[200, 200, 200]), 1.0);
        assert_eq!(of(&[0, 0]), 0.0);
    }
}
