//! The `serving` family (docs/serving-family.md): a cluster of replicas of any catalogued dense
//! or MoE model, each a `serving::Replica` under a named scheduler kind (`vllm`, `sarathi`,
//! `orca`) with tensor parallelism for the dense part and expert parallelism over GPUs of given
//! speeds, KV memory from what the weights leave, a router across replicas, and the shared
//! arrivals and length distributions; with `[adapters]`, ExpertWeave's adapters on an MLA MoE
//! model (`adapters`). It reports through the one recorder (`crate::recorder`): its metrics are
//! declared once below (`TABLE`).

pub mod adapters;
pub mod batch_former;
pub mod checks;
pub mod config;
pub mod curve_pricing;
pub mod decode_curves;
pub mod dense_profile;
pub mod deployment;
pub mod execution;
pub mod experiment;
pub mod expert_routing;
mod family;
pub mod fixtures;
pub mod keys;
pub mod live_scale;
pub mod load;
pub mod mapping;
pub mod placement;
pub mod popularity;
pub mod predictions;
pub mod questions;
pub mod rerouting;
pub mod scheduler;
pub mod selector_former;
pub mod server;
pub mod session_calibration;
pub mod sessions;
pub mod static_pricing;
pub mod step_cost;
pub mod swap;
pub mod workflows;

pub use config::{ServingConfig, ServingScenario};
pub use family::Serving;

use crate::engine;
use crate::metrics::{Better, MetricInfo, RunOutput};
use crate::policies::Policies;
use crate::policies::batch::BatchSelector;
use crate::policies::gate::AggregationGate;
use crate::policies::mapping::ExpertMapper;
use crate::policies::mapping::gpu_costs::throughput_speed;
use crate::policies::memory::{AdapterMemory, MemoryPlan, MemoryReport};
use crate::recorder::{
    MetricDef, QuestionSummary, ServingSummary, SessionSummary, TraceEvents, WorkflowSummary, table,
};
use crate::records::RecordSink;
use crate::serving::variability::FactorKind;
use crate::serving::{QueuePolicy, Router, StepCost};
use deployment::Deployment;
use serde_json::json;
use server::ServingServer;
use std::path::Path;
pub use step_cost::ReplicaStepCost;

const fn ms(
    name: &'static str,
    label: &'static str,
    value: fn(&ServingSummary) -> f64,
) -> MetricDef<ServingSummary> {
    MetricDef {
        name,
        label,
        unit: "ms",
        better: Better::Lower,
        value,
    }
}

/// The family's metrics, each computed from a run's (or one replica's) `ServingSummary`
/// (defined in docs/metrics.md, "serving").
pub const TABLE: [MetricDef<ServingSummary>; 83] = [
    ms("ttft_mean_ms", "mean time to first token (ms)", |s| {
        s.latencies.ttft.mean_ms()
    }),
    ms("ttft_p50_ms", "P50 time to first token (ms)", |s| {
        s.latencies.ttft.quantile_ms(0.5)
    }),
    ms("ttft_p90_ms", "P90 time to first token (ms)", |s| {
        s.latencies.ttft.quantile_ms(0.9)
    }),
    ms("ttft_p99_ms", "P99 time to first token (ms)", |s| {
        s.latencies.ttft.quantile_ms(0.99)
    }),
    ms("tpot_mean_ms", "mean time per output token (ms)", |s| {
        s.latencies.tpot.mean_ms()
    }),
    ms("tpot_p50_ms", "P50 time per output token (ms)", |s| {
        s.latencies.tpot.quantile_ms(0.5)
    }),
    ms("tpot_p90_ms", "P90 time per output token (ms)", |s| {
        s.latencies.tpot.quantile_ms(0.9)
    }),
    ms("tpot_p99_ms", "P99 time per output token (ms)", |s| {
        s.latencies.tpot.quantile_ms(0.99)
    }),
    ms("itl_mean_ms", "mean inter-token latency (ms)", |s| {
        s.latencies.itl.mean_ms()
    }),
    ms("itl_p50_ms", "P50 inter-token latency (ms)", |s| {
        s.latencies.itl.quantile_ms(0.5)
    }),
    ms("itl_p90_ms", "P90 inter-token latency (ms)", |s| {
        s.latencies.itl.quantile_ms(0.9)
    }),
    ms("itl_p95_ms", "P95 inter-token latency (ms)", |s| {
        s.latencies.itl.quantile_ms(0.95)
    }),
    ms("itl_p99_ms", "P99 inter-token latency (ms)", |s| {
        s.latencies.itl.quantile_ms(0.99)
    }),
    ms("e2e_mean_ms", "mean end-to-end latency (ms)", |s| {
        s.latencies.e2e.mean_ms()
    }),
    ms("e2e_p50_ms", "P50 end-to-end latency (ms)", |s| {
        s.latencies.e2e.quantile_ms(0.5)
    }),
    ms("e2e_p90_ms", "P90 end-to-end latency (ms)", |s| {
        s.latencies.e2e.quantile_ms(0.9)
    }),
    ms("e2e_p99_ms", "P99 end-to-end latency (ms)", |s| {
        s.latencies.e2e.quantile_ms(0.99)
    }),
    ms("queueing_mean_ms", "mean queueing delay (ms)", |s| {
        s.latencies.queueing.mean_ms()
    }),
    ms("queueing_p50_ms", "P50 queueing delay (ms)", |s| {
        s.latencies.queueing.quantile_ms(0.5)
    }),
    ms("queueing_p90_ms", "P90 queueing delay (ms)", |s| {
        s.latencies.queueing.quantile_ms(0.9)
    }),
    ms("queueing_p99_ms", "P99 queueing delay (ms)", |s| {
        s.latencies.queueing.quantile_ms(0.99)
    }),
    MetricDef {
        name: "throughput_rps",
        label: "throughput (requests/s)",
        unit: "1/s",
        better: Better::Higher,
        value: ServingSummary::throughput_rps,
    },
    MetricDef {
        name: "throughput_tok_s",
        label: "output throughput (tokens/s)",
        unit: "1/s",
        better: Better::Higher,
        value: ServingSummary::throughput_tok_s,
    },
    MetricDef {
        name: "completed",
        label: "requests finished",
        unit: "count",
        better: Better::Higher,
        value: |s| s.latencies.completed as f64,
    },
    MetricDef {
        name: "mean_batch_size",
        label: "mean sequences per step",
        unit: "count",
        better: Better::Higher,
        value: ServingSummary::mean_batch_size,
    },
    ms(
        "mean_step_ms",
        "mean step duration (ms)",
        ServingSummary::mean_step_ms,
    ),
    MetricDef {
        name: "moe_time_share",
        label: "share of step time in the MoE layers' routed experts",
        unit: "fraction",
        better: Better::Lower,
        value: ServingSummary::moe_time_share,
    },
    MetricDef {
        name: "replica_utilization",
        label: "share of time replicas run steps",
        unit: "fraction",
        better: Better::Higher,
        value: ServingSummary::replica_utilization,
    },
    MetricDef {
        name: "replica_token_imbalance",
        label: "most output tokens of one replica over the replicas' mean",
        unit: "ratio",
        better: Better::Lower,
        value: ServingSummary::token_imbalance,
    },
    MetricDef {
        name: "gpu_busy_mean",
        label: "mean GPU busy share",
        unit: "fraction",
        better: Better::Higher,
        value: ServingSummary::gpu_busy_share_mean,
    },
    MetricDef {
        name: "gpu_busy_min",
        label: "least busy GPU's busy share",
        unit: "fraction",
        better: Better::Higher,
        value: ServingSummary::gpu_busy_share_min,
    },
    MetricDef {
        name: "mfu_mean",
        label: "mean model FLOPs utilization",
        unit: "fraction",
        better: Better::Higher,
        value: ServingSummary::mfu_mean,
    },
    MetricDef {
        name: "kv_used_mean",
        label: "time-averaged share of KV blocks in use",
        unit: "fraction",
        better: Better::Lower,
        value: ServingSummary::kv_used_mean,
    },
    MetricDef {
        name: "kv_used_max",
        label: "largest share of a replica's KV blocks in use",
        unit: "fraction",
        better: Better::Lower,
        value: ServingSummary::kv_used_max,
    },
    MetricDef {
        name: "preemptions",
        label: "sequences preempted",
        unit: "count",
        better: Better::Lower,
        value: |s| s.preemptions as f64,
    },
    MetricDef {
        name: "refused",
        label: "requests refused at admission",
        unit: "count",
        better: Better::Lower,
        value: |s| s.refused as f64,
    },
    MetricDef {
        name: "imbalance",
        label: "expert-load imbalance (max/mean per layer, mean over MoE steps)",
        unit: "ratio",
        better: Better::Lower,
        value: |s| s.expert_load.imbalance(),
    },
    MetricDef {
        name: "load_cv",
        label: "expert-load CV (std/mean, mean over MoE steps)",
        unit: "ratio",
        better: Better::Lower,
        value: |s| s.expert_load.load_cv(),
    },
    MetricDef {
        name: "imbalance_factor",
        label: "caps.txt's imbalance factor (1 + CV x sensitivity, mean over MoE steps)",
        unit: "ratio",
        better: Better::Lower,
        value: |s| s.expert_load.imbalance_factor(),
    },
    MetricDef {
        name: "queue_depth_mean",
        label: "mean queue depth (requests waiting, time-averaged, summed over replicas)",
        unit: "count",
        better: Better::Lower,
        value: |s| s.queue_depth_mean,
    },
    MetricDef {
        name: "queue_depth_max",
        label: "max queue depth (at one replica)",
        unit: "count",
        better: Better::Lower,
        value: |s| s.queue_depth_max as f64,
    },
    MetricDef {
        name: "makespan_s",
        label: "last finish (s)",
        unit: "s",
        better: Better::Lower,
        value: |s| s.makespan_s,
    },
    MetricDef {
        name: "prefill_throughput_tps",
        label: "prefill throughput (prompt tokens per second of time to first token)",
        unit: "1/s",
        better: Better::Higher,
        value: |s| s.latencies.prefill_throughput_tps(),
    },
    MetricDef {
        name: "decode_throughput_tps",
        label: "decode throughput (tokens after the first per second of decode time)",
        unit: "1/s",
        better: Better::Higher,
        value: |s| s.latencies.decode_throughput_tps(),
    },
    MetricDef {
        name: "weights_gib",
        label: "weights on device, all instances (GiB; adapters only)",
        unit: "GiB",
        better: Better::Lower,
        value: |s| plan_number(s, |r| gib(r.weight_bytes)),
    },
    MetricDef {
        name: "adapter_memory_gib",
        label: "memory allocated for adapters (GiB; adapters only)",
        unit: "GiB",
        better: Better::Lower,
        value: |s| plan_number(s, |r| gib(r.adapter_allocated_bytes)),
    },
    MetricDef {
        name: "padding_waste_gib",
        label: "allocated adapter memory holding no fine-tuned expert (GiB; adapters only)",
        unit: "GiB",
        better: Better::Lower,
        value: |s| plan_number(s, |r| gib(r.padding_waste_bytes)),
    },
    MetricDef {
        name: "fragmentation_factor",
        label: "allocated over needed adapter bytes (adapters only)",
        unit: "ratio",
        better: Better::Lower,
        value: |s| plan_number(s, |r| r.fragmentation_factor),
    },
    MetricDef {
        name: "sparsity_factor",
        label: "mean adapter sparsity factor (adapters only)",
        unit: "ratio",
        better: Better::Lower,
        value: |s| plan_number(s, |r| r.sparsity_factor),
    },
    MetricDef {
        name: "kv_capacity_tokens",
        label: "KV-cache capacity, all instances (tokens; adapters only)",
        unit: "count",
        better: Better::Higher,
        value: |s| plan_number(s, |r| r.kv_capacity_tokens as f64),
    },
    MetricDef {
        name: "out_of_memory",
        label: "some instance does not fit (1) or all do (0) (adapters only)",
        unit: "count",
        better: Better::Lower,
        value: |s| plan_number(s, |r| f64::from(u8::from(r.out_of_memory))),
    },
    // With `[workload.workflow]` only (`workflows`), null otherwise.
    ms(
        "workflow_e2e_mean_ms",
        "mean workflow end-to-end latency (ms; workflows only)",
        |s| workflow_number(s, |w| w.e2e.mean_ms()),
    ),
    ms(
        "workflow_e2e_p50_ms",
        "P50 workflow end-to-end latency (ms; workflows only)",
        |s| workflow_number(s, |workflows| workflows.e2e.quantile_ms(0.5)),
    ),
    ms(
        "workflow_e2e_p99_ms",
        "P99 workflow end-to-end latency (ms; workflows only)",
        |s| workflow_number(s, |workflows| workflows.e2e.quantile_ms(0.99)),
    ),
    ms(
        "workflow_queueing_mean_ms",
        "mean over workflows of their stages' queueing summed (ms; workflows only)",
        |s| workflow_number(s, |w| w.queueing.mean_ms()),
    ),
    ms(
        "workflow_latency_per_token_ms",
        "mean over workflows of end-to-end latency per output token (ms; workflows only)",
        |s| workflow_number(s, |w| w.latency_per_token_ms),
    ),
    MetricDef {
        name: "workflow_score_pct",
        label: "workflows solved (%; workflows only)",
        unit: "%",
        better: Better::Higher,
        value: |s| workflow_number(s, |w| w.score_pct),
    },
    MetricDef {
        name: "workflow_throughput_wps",
        label: "finished workflows per second, time 0 to the last finish (1/s; workflows only)",
        unit: "1/s",
        better: Better::Higher,
        value: |s| workflow_number(s, WorkflowSummary::throughput_wps),
    },
    MetricDef {
        name: "router_map",
        label: "semantic router's macro mean average precision, first 20,000 workflows (workflows with a semantic router only)",
        unit: "ratio",
        better: Better::Higher,
        value: |s| workflow_number(s, |w| w.router_map),
    },
    MetricDef {
        name: "predictor_kendall_distance",
        label: "length predictor's Kendall tau distance to the true remaining tokens, first 2,000 stages (workflows only)",
        unit: "ratio",
        better: Better::Lower,
        value: |s| workflow_number(s, |w| w.predictor_kendall_distance),
    },
    // With `[workload.questions]` only (`questions`, MOSAIC's), null otherwise.
    MetricDef {
        name: "expert_makespan_s",
        label: "the last expert call's finish (s; questions only)",
        unit: "s",
        better: Better::Lower,
        value: |s| question_number(s, QuestionSummary::expert_makespan_s),
    },
    MetricDef {
        name: "aggregator_s",
        label: "the last call's finish past the last expert call's (s; questions only)",
        unit: "s",
        better: Better::Lower,
        value: |s| question_number(s, QuestionSummary::aggregator_s),
    },
    MetricDef {
        name: "end_to_end_s",
        label: "the last call's finish, expert or aggregator (s; questions only)",
        unit: "s",
        better: Better::Lower,
        value: |s| question_number(s, QuestionSummary::end_to_end_s),
    },
    MetricDef {
        name: "skip_pct",
        label: "questions skipping the aggregator (%; questions only)",
        unit: "%",
        better: Better::Higher,
        value: |s| question_number(s, QuestionSummary::skip_pct),
    },
    MetricDef {
        name: "accuracy_pct",
        label: "questions answered right (%; questions only)",
        unit: "%",
        better: Better::Higher,
        value: |s| question_number(s, QuestionSummary::accuracy_pct),
    },
    MetricDef {
        name: "accuracy_change_pp",
        label: "accuracy change vs aggregating every question (pp; questions only)",
        unit: "pp",
        better: Better::Higher,
        value: |s| question_number(s, QuestionSummary::accuracy_change_pp),
    },
    // With `[placement]` only (`sessions`, MOSAIC's workers), null otherwise.
    MetricDef {
        name: "gpu_idle_pct",
        label: "workers' idle share of workers x the last worker's end: barrier waits and the tail (%; placement only)",
        unit: "%",
        better: Better::Lower,
        value: |s| session_number(s, |w| w.idle_pct),
    },
    MetricDef {
        name: "fastest_worker_s",
        label: "the earliest-finishing worker's wall, among workers that ran a session (s; placement only)",
        unit: "s",
        better: Better::Lower,
        value: |s| session_number(s, SessionSummary::fastest_worker_s),
    },
    MetricDef {
        name: "worker_wall_ratio",
        label: "slowest over fastest worker's wall (ratio; placement only)",
        unit: "ratio",
        better: Better::Lower,
        value: |s| session_number(s, SessionSummary::worker_wall_ratio),
    },
    MetricDef {
        name: "worker_wall_rank2_s",
        label: "the second-longest worker's wall (s; placement only)",
        unit: "s",
        better: Better::Lower,
        value: |s| session_number(s, |w| w.worker_wall_ranked_s(2)),
    },
    MetricDef {
        name: "worker_wall_rank3_s",
        label: "the third-longest worker's wall (s; placement only)",
        unit: "s",
        better: Better::Lower,
        value: |s| session_number(s, |w| w.worker_wall_ranked_s(3)),
    },
    MetricDef {
        name: "model_loads",
        label: "sessions that loaded their model (placement only)",
        unit: "count",
        better: Better::Lower,
        value: |s| session_number(s, |w| f64::from(w.loads)),
    },
    MetricDef {
        name: "load_time_s",
        label: "the sessions' load time summed over workers (s; placement only)",
        unit: "s",
        better: Better::Lower,
        value: |s| session_number(s, |w| w.load_time_s),
    },
    MetricDef {
        name: "expert_tokens_per_s",
        label: "the sessions' output tokens per second of the last worker's end (tok/s; placement only)",
        unit: "tok/s",
        better: Better::Higher,
        value: |s| session_number(s, SessionSummary::expert_tokens_per_s),
    },
    MetricDef {
        name: "predicted_makespan_s",
        label: "the makespan the plan predicts from the predicted session times (s; placement with a prediction per model only)",
        unit: "s",
        better: Better::Lower,
        value: |s| session_number(s, SessionSummary::predicted_makespan_s),
    },
    MetricDef {
        name: "prediction_error_pct",
        label: "the last worker's end against the predicted makespan (% of the prediction; placement with a prediction per model only)",
        unit: "%",
        better: Better::Lower,
        value: |s| session_number(s, SessionSummary::prediction_error_pct),
    },
    MetricDef {
        name: "ilp_status",
        label: "placement MILP status (0 no MILP, 1 optimal, 2 node limit, 3 gap, 4 no incumbent; placement only)",
        unit: "code",
        better: Better::Lower,
        value: |s| session_number(s, SessionSummary::ilp_status),
    },
    MetricDef {
        name: "ilp_gap",
        label: "placement MILP relative gap (0 without a MILP; placement only)",
        unit: "fraction",
        better: Better::Lower,
        value: |s| session_number(s, SessionSummary::ilp_gap),
    },
    MetricDef {
        name: "ilp_nodes",
        label: "placement MILP branch-and-bound nodes (0 without a MILP; placement only)",
        unit: "count",
        better: Better::Lower,
        value: |s| session_number(s, SessionSummary::ilp_nodes),
    },
    // Computed by an `[experiment]` run only (`experiment`), null in a serving run.
    MetricDef {
        name: "gap_vs_fastest",
        label: "slowest-to-fastest throughput gap, fraction of the fastest (experiment variability_at_scale only)",
        unit: "fraction",
        better: Better::Lower,
        value: |_| f64::NAN,
    },
    MetricDef {
        name: "gap_vs_slowest",
        label: "fastest-over-slowest throughput excess (experiment variability_at_scale only)",
        unit: "fraction",
        better: Better::Lower,
        value: |_| f64::NAN,
    },
    MetricDef {
        name: "profiling_min",
        label: "kernel time of one GPU's variability profile, min (experiment profiling_cost only)",
        unit: "min",
        better: Better::Lower,
        value: |_| f64::NAN,
    },
    MetricDef {
        name: "profiled_counts",
        label: "token counts a variability profile measures (experiment profiling_cost only)",
        unit: "count",
        better: Better::Lower,
        value: |_| f64::NAN,
    },
];

/// One number of the run's workflows (NaN, `null`, without a workflow workload).
fn workflow_number(s: &ServingSummary, number: fn(&WorkflowSummary) -> f64) -> f64 {
    s.workflows.as_ref().map_or(f64::NAN, number)
}

/// One number of the run's questions (NaN, `null`, without a question workload).
fn question_number(s: &ServingSummary, number: fn(&QuestionSummary) -> f64) -> f64 {
    s.questions.as_ref().map_or(f64::NAN, number)
}

/// One number of the run's placed sessions (NaN, `null`, without `[placement]`).
fn session_number(s: &ServingSummary, number: fn(&SessionSummary) -> f64) -> f64 {
    s.sessions.as_ref().map_or(f64::NAN, number)
}

/// The session rows' summary of a placed run: what its workers did (`workers`), what its plan
/// predicted and its solver reported (`plan`), and the tokens its sessions generated.
fn session_summary(
    workers: &sessions::SessionsSummary,
    plan: &sessions::WorkerSessions,
    overall: &ServingSummary,
) -> SessionSummary {
    SessionSummary {
        makespan_s: workers.makespan_s,
        worker_walls_s: workers.worker_walls_s.clone(),
        idle_pct: workers.idle_pct,
        loads: workers.loads,
        load_time_s: workers.load_time_s,
        output_tokens: overall.replica_output_tokens.iter().sum(),
        predicted_makespan_s: plan.predicted_makespan_s,
        solver: plan
            .solver
            .as_ref()
            .map(|s| (s.status.code(), s.gap, s.nodes)),
    }
}

/// One number of the run's adapter-memory plan (NaN, `null`, without adapters).
fn plan_number(s: &ServingSummary, number: fn(&MemoryReport) -> f64) -> f64 {
    s.memory.as_ref().map_or(f64::NAN, number)
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / crate::policies::memory::device::GIB as f64
}

/// The scalar metrics a serving run reports, in `TABLE` order.
pub const METRICS: &[MetricInfo] = &table::infos(&TABLE);

/// The metrics `expertsim run` prints per cell, and those it prints as change vs the baseline.
pub const HEADLINE: &[&str] = &[
    "ttft_p99_ms",
    "tpot_p99_ms",
    "e2e_mean_ms",
    "throughput_tok_s",
];
pub const HEADLINE_IMPROVEMENTS: &[&str] = &["ttft_p99_ms", "tpot_p99_ms", "throughput_tok_s"];

/// The family columns of the per-request CSV.
pub use crate::recorder::replica::RECORD_COLUMNS as CSV_COLUMNS;

/// The adapter-memory manager's plan of `scenario`'s replicas (`None` without adapters), or why
/// it cannot be planned: one instance, which every replica is, or (merged copies on devices of
/// their own) one instance per replica, `replica.count` of them; a plan-only run
/// (`adapters.plan_only`) serves none, so any number of instances.
pub fn plan(
    scenario: &ServingScenario,
    memory: Option<&mut dyn AdapterMemory>,
) -> Result<Option<MemoryPlan>, String> {
    let (Some(adapters), config::ServedModel::Mla(shape)) = (&scenario.adapters, &scenario.model)
    else {
        return Ok(None);
    };
    let memory = memory.ok_or("a scenario with adapters needs its adapter-memory manager")?;
    let device = adapters::device_memory(&scenario.replica, adapters);
    let plan = memory
        .plan(shape, &device, &adapters.adapters)
        .map_err(|e| format!("adapters.memory: {e}"))?;
    let (instances, count) = (plan.instances.len(), scenario.replica.count);
    if instances != 1 && instances != count && !adapters.plan_only {
        return Err(format!(
            "adapters.memory: {} plans {instances} instances (one per adapter), each a replica \
             of its own: set replica.count = {instances} (got {count})",
            memory.kind(),
        ));
    }
    Ok(Some(plan))
}

/// The policy objects one run of a scenario uses, built by the registry `policies`: its queue
/// policy, router, expert mapper, one batch selector per static replica and, with adapters, its
/// adapter-memory manager (what `Family::run` and live mode both serve with).
pub struct ScenarioPolicies {
    pub queue: Box<dyn QueuePolicy>,
    pub router: Box<dyn Router>,
    pub mapper: Box<dyn ExpertMapper>,
    pub selectors: Vec<Box<dyn BatchSelector>>,
    pub memory: Option<Box<dyn AdapterMemory>>,
    /// With `[workload.questions]`: its aggregation gate.
    pub gate: Option<Box<dyn AggregationGate>>,
}

impl ScenarioPolicies {
    pub fn of(scenario: &ServingScenario, policies: &dyn Policies) -> ScenarioPolicies {
        ScenarioPolicies {
            queue: policies.queue_policy(&scenario.queue),
            router: policies.router(&scenario.router),
            mapper: policies.expert_mapper(&scenario.expert_mapping),
            selectors: scenario.batch_selectors(policies),
            memory: scenario
                .adapters
                .as_ref()
                .map(|a| policies.adapter_memory(&a.memory)),
            gate: scenario
                .questions
                .as_ref()
                .map(|q| policies.aggregation_gate(&q.gate)),
        }
    }

    /// The adapter-memory manager, if the scenario has adapters.
    pub fn memory(&mut self) -> Option<&mut dyn AdapterMemory> {
        self.memory
            .as_mut()
            .map(|m| &mut **m as &mut dyn AdapterMemory)
    }
}

/// Runs one seed of `scenario`, its experts (MoE only) mapped by `mapper`, a static replica
/// `r`'s batches selected by `selectors[r]` (one per replica; none for the continuous kinds),
/// with adapters placed by `memory`, streaming each finished request to `sink` and, given
/// `trace_events`, every step to that trace-event file. A replica whose weights do not fit, or
/// a run whose checks fail, reports no number but its reason (`details.failed`).
#[allow(clippy::too_many_arguments)]
pub fn run_recorded(
    scenario: &ServingScenario,
    seed: u64,
    queue: &mut dyn QueuePolicy,
    router: &mut dyn Router,
    mapper: &mut dyn ExpertMapper,
    selectors: &mut [Box<dyn BatchSelector>],
    memory: Option<&mut dyn AdapterMemory>,
    sink: &mut dyn RecordSink,
    trace_events: Option<&Path>,
) -> Result<RunOutput, String> {
    run_gated(
        scenario,
        seed,
        queue,
        router,
        mapper,
        selectors,
        memory,
        None,
        sink,
        trace_events,
    )
}

/// [`run_recorded`] with every policy of `p`, a question workload's gate included (what
/// `Family::run` serves with).
pub fn run_policies(
    scenario: &ServingScenario,
    seed: u64,
    p: &mut ScenarioPolicies,
    sink: &mut dyn RecordSink,
    trace_events: Option<&Path>,
) -> Result<RunOutput, String> {
    run_gated(
        scenario,
        seed,
        &mut *p.queue,
        &mut *p.router,
        &mut *p.mapper,
        &mut p.selectors,
        p.memory
            .as_mut()
            .map(|m| &mut **m as &mut dyn AdapterMemory),
        p.gate.take(),
        sink,
        trace_events,
    )
}

#[allow(clippy::too_many_arguments)]
fn run_gated(
    scenario: &ServingScenario,
    seed: u64,
    queue: &mut dyn QueuePolicy,
    router: &mut dyn Router,
    mapper: &mut dyn ExpertMapper,
    selectors: &mut [Box<dyn BatchSelector>],
    memory: Option<&mut dyn AdapterMemory>,
    gate: Option<Box<dyn AggregationGate>>,
    sink: &mut dyn RecordSink,
    trace_events: Option<&Path>,
) -> Result<RunOutput, String> {
    // Throughput speed factors: the clocks solved on this seed's trace.
    let solved = with_seed_speeds(scenario, seed);
    let scenario = solved.as_ref().unwrap_or(scenario);
    let plan = match plan(scenario, memory) {
        Ok(plan) => plan,
        Err(reason) => return Ok(table::failed(&TABLE, &reason)),
    };
    if let (Some(plan), Some(adapters)) = (&plan, &scenario.adapters)
        && adapters.plan_only
    {
        return Ok(plan_only(scenario, plan));
    }
    serve_gated(
        scenario,
        seed,
        queue,
        router,
        mapper,
        selectors,
        plan.as_ref(),
        gate,
        sink,
        trace_events,
        None,
    )
}

/// `scenario` as one seed of it is served: with `[placement.calibration]`, each model's
/// predicted session time computed first (`session_calibration::calibrated`); with
/// `[placement]`, the workers' sessions planned by the policies' placement
/// (`placement::planned`). `None`: neither, the scenario is served as written; `Err`: why the
/// calibration or the placement failed.
pub fn prepared(
    scenario: &ServingScenario,
    seed: u64,
    policies: &dyn Policies,
) -> Result<Option<ServingScenario>, String> {
    let Some(spec) = &scenario.placement else {
        return Ok(None);
    };
    let calibrated = match spec.calibration {
        None => None,
        Some(_) => Some(session_calibration::calibrated(scenario, seed, policies)?),
    };
    let scenario = calibrated.as_ref().unwrap_or(scenario);
    let spec = scenario
        .placement
        .as_ref()
        .expect("calibrated keeps the placement");
    placement::planned(scenario, &mut *policies.placement(&spec.policy), seed).map(Some)
}

/// How `serve` prices the replicas' steps other than by their own `ReplicaStepCost`: the seam
/// live mode and tests price through.
pub enum StepCosts<'a> {
    /// Replica `r`'s steps by `costs[r]` (one per replica).
    Given(Vec<Box<dyn StepCost + 'a>>),
    /// Replica `r`'s steps by `wrap(r, a copy of its own step cost)`: a wrapper (live mode's)
    /// that predicts with the serving family's own pricing, layout and all.
    Wrapped(Box<dyn FnMut(usize, ReplicaStepCost) -> Box<dyn StepCost + 'a> + 'a>),
}

/// Serves one seed of `scenario` on replicas laid out by `plan` (with adapters) and by `mapper`
/// (experts; `run_recorded` says the rest), each replica's steps priced as `step_costs` says
/// when given, by its own `ReplicaStepCost` otherwise.
#[allow(clippy::too_many_arguments)]
pub fn serve<'a>(
    scenario: &'a ServingScenario,
    seed: u64,
    queue: &'a mut dyn QueuePolicy,
    router: &'a mut dyn Router,
    mapper: &mut dyn ExpertMapper,
    selectors: &'a mut [Box<dyn BatchSelector>],
    plan: Option<&MemoryPlan>,
    sink: &'a mut dyn RecordSink,
    trace_events: Option<&Path>,
    step_costs: Option<StepCosts<'a>>,
) -> Result<RunOutput, String> {
    serve_gated(
        scenario,
        seed,
        queue,
        router,
        mapper,
        selectors,
        plan,
        None,
        sink,
        trace_events,
        step_costs,
    )
}

/// [`serve`] with a question workload's aggregation gate (`[workload.questions]` needs one).
#[allow(clippy::too_many_arguments)]
pub fn serve_gated<'a>(
    scenario: &'a ServingScenario,
    seed: u64,
    queue: &'a mut dyn QueuePolicy,
    router: &'a mut dyn Router,
    mapper: &mut dyn ExpertMapper,
    selectors: &'a mut [Box<dyn BatchSelector>],
    plan: Option<&MemoryPlan>,
    gate: Option<Box<dyn AggregationGate>>,
    sink: &'a mut dyn RecordSink,
    trace_events: Option<&Path>,
    step_costs: Option<StepCosts<'a>>,
) -> Result<RunOutput, String> {
    if scenario.questions.is_some() && gate.is_none() {
        return Ok(table::failed(
            &TABLE,
            "a question workload is served with its aggregation gate (serving_family::run_policies)",
        ));
    }
    // Adapters serve one replica group (config validation), the first. Its replicas are the
    // plan's instances, of one shape (a merged copy each, or one instance): the deployment is
    // the first one out of memory, else the first.
    let instance = plan.and_then(|p| {
        p.instances
            .iter()
            .find(|i| i.kv.out_of_memory)
            .or(p.instances.first())
    });
    let mut deployments = Vec::new();
    for g in 0..1 + scenario.other_groups.len() {
        let group_instance = if g == 0 { instance } else { None };
        match Deployment::new(&scenario.group(g), group_instance) {
            Ok(mut d) => {
                if let (Some(spec), Some(shape)) =
                    (&scenario.expert_trace, scenario.group(g).model.experts())
                {
                    d.expert_trace =
                        Some(spec.build(shape.n_layers, shape.n_experts, shape.top_k, seed));
                }
                deployments.push(d);
            }
            Err(reason) => return Ok(table::failed(&TABLE, &reason)),
        }
    }
    let layouts = mapping::replica_layouts(
        scenario,
        &deployments,
        seed,
        mapper,
        selectors,
        queue,
        router,
    );
    let mut first_replica = 0;
    let expert_details: Vec<Option<serde_json::Value>> = deployments
        .iter()
        .zip(scenario.groups())
        .enumerate()
        .map(|(g, (d, (_, r)))| {
            let layout = layouts[first_replica].as_deref();
            first_replica += r.count;
            mapping::expert_detail(scenario, g, d, layout)
        })
        .collect();
    let mut server = ServingServer::new(
        scenario,
        &deployments,
        plan,
        seed,
        &layouts,
        selectors,
        queue,
        router,
        sink,
    );
    if let Some(gate) = gate {
        server = server.with_gate(gate);
    }
    match step_costs {
        Some(StepCosts::Given(costs)) => server = server.with_step_costs(costs),
        Some(StepCosts::Wrapped(wrap)) => server = server.with_wrapped_step_costs(wrap),
        None => {}
    }
    if let Some(path) = trace_events {
        let label = format!("{} seed {seed}", scenario.model.name());
        server =
            server.with_trace_events(TraceEvents::create(path, &label, scenario.replica_count())?);
    }
    let stats = engine::run(&mut server);
    // Every step end is counted as an event, those the server handled at once included.
    let handled_events = stats.events + server.inlined_steps();
    let task_score_pct = server.task_score_pct();
    let timeline = server.timeline_detail();
    let sessions = server.sessions_detail();
    let workers = server.sessions_summary();
    let (mut overall, replicas) = match server.finish() {
        Ok(parts) => parts,
        Err(reason) => return Ok(table::failed(&TABLE, &reason)),
    };
    overall.memory = plan.map(|p| p.report.clone());
    if let (Some(workers), Some(plan)) = (workers, &scenario.sessions) {
        overall.sessions = Some(session_summary(&workers, plan, &overall));
    }
    let models: Vec<&str> = scenario
        .groups()
        .flat_map(|(model, r)| std::iter::repeat_n(model.name(), r.count))
        .collect();
    let caching: Vec<bool> = scenario
        .groups()
        .flat_map(|(_, r)| std::iter::repeat_n(r.prefix_caching, r.count))
        .collect();
    let replica_details: Vec<serde_json::Value> = replicas
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut details = json!({
                "model": models[i],
                "metrics": table::object(&TABLE, r),
                "gpu_busy_share": r.gpu_busy_share,
                "gpu_mfu": r.gpu_mfu,
                "kv_blocks": r.kv_blocks,
                "kv_series_s_blocks": r.kv_series,
            });
            // With prefix caching: the share of its first admissions' prompt tokens found
            // cached (as the chimera family's engines report it).
            if caching[i] {
                details["prefix_hit_rate"] =
                    json!(r.prefix_hit_tokens as f64 / r.prefix_lookup_tokens.max(1) as f64);
            }
            details
        })
        .collect();
    let questions = overall.questions.as_ref().map(|q| {
        json!({
            "questions": q.questions,
            "skipped": q.skipped,
            "aggregated": q.aggregated,
            "correct": q.correct,
            "baseline_correct": q.baseline_correct,
            "buckets": q
                .buckets
                .iter()
                .map(|(plurality, row)| {
                    let mut row = json!(row);
                    row["bucket"] = json!(crate::policies::gate::Votes {
                        k: 3,
                        plurality: *plurality,
                    }
                    .bucket_label());
                    row
                })
                .collect::<Vec<_>>(),
        })
    });
    let mut details = json!({
            "deployment": deployments
                .iter()
                .zip(scenario.groups())
                .zip(expert_details)
                .map(|((d, (model, r)), experts)| {
                    let mut details = deployment_details(model.name(), d, r);
                    if let Some(experts) = experts {
                        details["experts"] = experts;
                    }
                    details
                })
                .collect::<Vec<_>>(),
            "metric_units": table::units(&TABLE),
            "scheduler": scenario.replica.scheduler.kind(),
            "router": scenario.router_kind,
            "queue": scenario.queue.kind(),
            "task_score_pct": task_score_pct,
            "events": handled_events,
            "gpu_busy_share": overall.gpu_busy_share,
            "gpu_mfu": overall.gpu_mfu,
            "replicas": replica_details,
            "adapters": adapter_details(scenario, plan),
            "speed_factors": scenario
                .groups()
                .map(|(_, r)| speed_details(r))
                .collect::<Vec<_>>(),
            "host_overhead": scenario
                .groups()
                .map(|(_, r)| json!({
                    "fixed_ms": r.host.fixed_ns * 1e-6,
                    "per_sequence_us": r.host.per_sequence_ns * 1e-3,
                }))
                .collect::<Vec<_>>(),
            "pricing": scenario
                .groups()
                .map(|(_, r)| {
                    r.measured
                        .as_ref()
                        .map(|m| &m.record)
                        .or_else(|| r.static_cost.as_ref().and_then(|c| c.pricing()))
                        .or_else(|| r.curves.as_ref().and_then(|c| c.record.as_deref()))
                })
                .collect::<Vec<_>>(),
    });
    // With `[placement]`: its plan and what the workers did.
    if let (Some(plan), Some(sessions)) = (&scenario.sessions, sessions) {
        details["placement"] = plan.detail.clone();
        details["sessions"] = sessions;
    }
    // Only with `[output] timeline`, so no other run's details change.
    if let Some(timeline) = timeline {
        details["timeline"] = timeline;
    }
    // Only with `[output] decode_curves`, so no other run's details change.
    if scenario.decode_curves {
        let mut first = 0;
        let group_layouts: Vec<_> = scenario
            .groups()
            .map(|(_, r)| {
                let layout = layouts.get(first).cloned().flatten();
                first += r.count;
                layout
            })
            .collect();
        details["decode_curves"] = decode_curves::detail(scenario, &deployments, &group_layouts);
    }
    // Only with a question workload, so no other run's details change.
    if let Some(questions) = questions {
        details["questions"] = questions;
    }
    Ok(RunOutput {
        scalars: table::scalars(&TABLE, &overall),
        details,
    })
}

/// A run that serves nothing and reports `reason` (`details.failed`), every metric `null`.
pub fn failed(reason: &str) -> RunOutput {
    table::failed(&TABLE, reason)
}

/// The metrics a plan-only run reports: the memory plan's numbers.
const PLAN_METRICS: &[&str] = &[
    "weights_gib",
    "adapter_memory_gib",
    "padding_waste_gib",
    "fragmentation_factor",
    "sparsity_factor",
    "kv_capacity_tokens",
    "out_of_memory",
];

/// A plan-only run (`adapters.plan_only`): the memory plan's numbers (an out-of-memory plan's
/// included: a plan that does not fit is its result, not a failed run), every serving metric
/// `null`, and the adapters' details; nothing is served and no stream is drawn.
fn plan_only(scenario: &ServingScenario, plan: &MemoryPlan) -> RunOutput {
    let summary = ServingSummary {
        memory: Some(plan.report.clone()),
        ..ServingSummary::default()
    };
    RunOutput {
        scalars: TABLE
            .iter()
            .map(|m| {
                let value = if PLAN_METRICS.contains(&m.name) {
                    (m.value)(&summary)
                } else {
                    f64::NAN
                };
                (m.name.to_string(), value)
            })
            .collect(),
        details: json!({
            "plan_only": true,
            "metric_units": table::units(&TABLE),
            "adapters": adapter_details(scenario, Some(plan)),
        }),
    }
}

/// `scenario` with every throughput-factor group's speeds solved for `seed` (None when no
/// group reads its factors as throughput): GPU `i` at factor `s` gets the clock at which the
/// group's MoE layer, on one GPU's even share of the seed's trace's mean step (its observed
/// steps, every layer), takes `1 / s` as long as at the nominal clock
/// (`gpu_costs::throughput_speed`, the gem family's `cluster.factors = "throughput"`). The
/// expert count per GPU is the model's over the expert-parallel degree, whatever the mapping
/// (the clock is the hardware's).
pub fn with_seed_speeds(scenario: &ServingScenario, seed: u64) -> Option<ServingScenario> {
    let spec = scenario.expert_trace.as_ref()?;
    if scenario
        .groups()
        .all(|(_, r)| r.speed_factors_kind != FactorKind::Throughput)
    {
        return None;
    }
    let mut solved = scenario.clone();
    for g in 0..1 + scenario.other_groups.len() {
        let one = scenario.group(g);
        let r = &one.replica;
        let Some(shape) = one.model.experts() else {
            continue;
        };
        if r.speed_factors_kind != FactorKind::Throughput {
            continue;
        }
        let (trace, observed) = spec.build(shape.n_layers, shape.n_experts, shape.top_k, seed);
        let layer = step_cost::moe_layer_cost(&one, &shape);
        let per_gpu = shape.n_experts / r.expert_parallel;
        let tokens = trace.mean_tokens_per_gpu(observed, r.gpus);
        let speeds = r
            .speed_factors
            .iter()
            .map(|&s| throughput_speed(&layer, per_gpu, tokens, s, r.bandwidth_share))
            .collect();
        match g {
            0 => solved.replica.speeds = speeds,
            _ => solved.other_groups[g - 1].replica.speeds = speeds,
        }
    }
    Some(solved)
}

/// One replica group's speed factors, for the details: as given (or drawn), what they are, the
/// clock factor each GPU runs at, and the gap between the slowest and the fastest GPU (as a
/// share of the fastest, `gap_vs_fastest`, and of the slowest, `gap_vs_slowest`; GEM's section
/// 6).
fn speed_details(r: &config::ReplicaSpec) -> serde_json::Value {
    let f = &r.speed_factors;
    let min = f.iter().copied().fold(f64::INFINITY, f64::min);
    let max = f.iter().copied().fold(0.0, f64::max);
    json!({
        "factors": f,
        "kind": r.speed_factors_kind,
        "clock": r.speeds.iter().map(|s| s.compute).collect::<Vec<_>>(),
        "gap_vs_fastest": 1.0 - min / max,
        "gap_vs_slowest": max / min - 1.0,
    })
}

/// One replica group's deployment, for the details (with `replica.load`, its load's pricing
/// and seconds).
fn deployment_details(
    model: &str,
    deployment: &Deployment,
    replica: &config::ReplicaSpec,
) -> serde_json::Value {
    let mut details = json!({
        "model": model,
        "gpus_per_replica": deployment.gpus,
        "tensor_parallel": deployment.tensor_parallel,
        "data_parallel": deployment.data_parallel,
        "expert_parallel": deployment.expert_parallel,
        "weights_per_gpu_gb": deployment.weights_per_gpu_bytes * 1e-9,
        "kv_tokens_per_replica": deployment.kv_tokens,
        "kv_blocks_per_replica": deployment.kv_blocks,
    });
    if let Some(load) = &replica.load {
        details["load"] = json!(load.kind());
        details["load_s"] = json!(load.duration(deployment.weights_per_gpu_bytes).0 as f64 / 1e9);
    }
    details
}

/// With adapters: the manager, the adapters and their shares, and the memory plan's breakdown
/// and (first) instance (weights, KV capacity, whether it reroutes); a plan of one instance per
/// replica lists them all as `instances`.
fn adapter_details(scenario: &ServingScenario, plan: Option<&MemoryPlan>) -> serde_json::Value {
    match (&scenario.adapters, plan) {
        (Some(adapters), Some(plan)) => {
            let mut details = json!({
                "manager": adapters.memory.kind(),
                "names": adapters.adapters.iter().map(|a| a.name.as_str()).collect::<Vec<_>>(),
                "shares": adapters.shares,
                "memory": plan.report,
                "instance": plan.instances[0],
            });
            if plan.instances.len() > 1 {
                details["instances"] = json!(plan.instances);
            }
            details
        }
        _ => serde_json::Value::Null,
    }
}

#[cfg(test)]
mod queueing_checks;
#[cfg(test)]
pub(crate) mod tests;
