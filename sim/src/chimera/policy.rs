//! The Chimera family's two extension points: the per-engine `QueuePolicy` (which waiting request an
//! engine admits next) and the `Router` (which engine a request is dispatched to), with their
//! serde-tagged registry enums `QueuePolicyConfig` and `RouterConfig`. Implementations live in the
//! `strategies` crate (`strategies::queue`, `strategies::routing`).

use crate::time::SimTime;
use serde::{Deserialize, Serialize};

/// A request (one agent stage of a workflow) waiting in an engine's queue, as a queue policy sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QueuedRequest {
    /// Unique id, increasing in submission order.
    pub id: u64,
    /// The workflow (program id) the request belongs to.
    pub workflow: u64,
    /// 0-based stage index within the workflow.
    pub stage: u32,
    /// When this request was submitted (its workflow's arrival for stage 0, the previous stage's
    /// completion otherwise).
    pub submitted: SimTime,
    /// When the workflow arrived.
    pub workflow_arrival: SimTime,
    /// The engine iteration (decode step count) at which the request entered the queue; a
    /// request's starvation count at iteration `i` is `i - enqueued_iteration`.
    pub enqueued_iteration: u64,
    /// Input tokens of this stage (system prompt + user prompt + accumulated context).
    pub prompt_tokens: u32,
    /// The length predictor's estimate of this stage's output tokens (SJF, LTR).
    pub predicted_stage_tokens: f64,
    /// The length predictor's estimate of the workflow's total remaining output tokens, this
    /// stage included (STJF's priority, Chimera's `r.priority`).
    pub predicted_total_tokens: f64,
    /// Output tokens the workflow's earlier stages have generated (attained service, MLFQ).
    pub attained_service: u64,
    /// A standard normal draw private to this request, for policies that model their own
    /// prediction error (LTR's ranking noise). Drawn from the run's `"rank"` stream.
    pub rank_noise: f64,
}

/// Orders the waiting requests of each engine. One instance serves every engine of a run; each
/// method names the engine. `iteration` is that engine's decode-step counter (a scheduling
/// iteration in vLLM's sense), which advances only while the engine runs.
pub trait QueuePolicy: Send {
    /// The policy's kind, as in the scenario.
    fn name(&self) -> &'static str;
    /// Forgets every queued request and prepares `n_engines` empty queues.
    fn reset(&mut self, n_engines: usize);
    /// Adds a request to `engine`'s queue.
    fn push(&mut self, engine: usize, request: QueuedRequest);
    /// Removes and returns the request `engine` admits next at `iteration`, if any waits.
    fn pop(&mut self, engine: usize, iteration: u64) -> Option<QueuedRequest>;
    /// Requests waiting at `engine`.
    fn len(&self, engine: usize) -> usize;
    fn is_empty(&self, engine: usize) -> bool {
        self.len(engine) == 0
    }
}

/// One engine's state as a router sees it at dispatch time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EngineState {
    /// Index of the engine's model in the scenario's model list.
    pub model: usize,
    /// Requests waiting in the engine's queue.
    pub waiting: usize,
    /// Requests in the engine's running batch.
    pub running: usize,
    /// Activity monitor: sum of the predicted total remaining tokens of the requests dispatched
    /// to this engine and not yet completed (Chimera's `P_m`).
    pub in_flight_predicted_tokens: f64,
    /// Profiled decode time per step at the engine's full batch, in ms (`decode_ms_per_token`).
    pub decode_ms_per_token: f64,
    /// The engine's batch size limit (`max_batch_size`).
    pub max_batch_size: usize,
}

impl EngineState {
    /// Chimera's load estimate `L[m] = P_m * decode_ms_per_token / max_batch_size` (ms).
    pub fn estimated_delay_ms(&self) -> f64 {
        self.in_flight_predicted_tokens * self.decode_ms_per_token / self.max_batch_size as f64
    }
}

/// A request to dispatch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RouteRequest<'a> {
    pub id: u64,
    pub workflow: u64,
    /// 0-based stage index; stage 0 starts a workflow.
    pub stage: u32,
    /// The semantic router's confidence that each engine's model solves the workflow, one per
    /// engine (`q[m]`), in [0, 1].
    pub confidence: &'a [f64],
    /// The length predictor's total remaining tokens were each engine chosen (`Ŷ(r, m)`).
    pub predicted_total_tokens: &'a [f64],
}

/// Chooses the engine a request is dispatched to.
pub trait Router: Send {
    /// The router's kind, as in the scenario.
    fn name(&self) -> &'static str;
    /// Forgets all state (assignments, cursors) for a run over `n_engines` engines.
    fn reset(&mut self, n_engines: usize);
    /// The engine index (< `engines.len()`) that serves `request`.
    fn route(&mut self, request: &RouteRequest<'_>, engines: &[EngineState]) -> usize;
    /// The workflow finished its last stage (lets sticky routers drop their assignment).
    fn workflow_done(&mut self, _workflow: u64) {}
}

/// The queue policies a scenario's `[queue]` table can name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum QueuePolicyConfig {
    /// First-come first-served by submission time (vLLM's default).
    Fcfs,
    /// Shortest job first on the predicted output tokens of the request itself.
    Sjf,
    /// Shortest total job first on the predicted remaining workflow tokens, with Chimera's aging:
    /// key (starvation level, priority, arrival); a request's level drops by one for every
    /// `starvation_threshold` iterations it waits (0: no aging). `quantum` is the paper's Q.
    Stjf {
        #[serde(default = "default_starvation_threshold")]
        starvation_threshold: u64,
        #[serde(default = "default_quantum")]
        quantum: u64,
    },
    /// Multi-level feedback queue on the workflow's attained service (Autellix-style program-level
    /// least-attained-service): level k holds workflows that have generated at least
    /// `base_quantum_tokens * 2^(k-1)` tokens; FCFS within a level.
    Mlfq {
        #[serde(default = "default_levels")]
        levels: u32,
        #[serde(default = "default_base_quantum_tokens")]
        base_quantum_tokens: u64,
    },
    /// Learning to rank (Fu et al. 2024): SJF on a predicted rank of the request's output length,
    /// with extra log-normal ranking noise `noise`.
    Ltr {
        #[serde(default = "default_ltr_noise")]
        noise: f64,
    },
}

/// Chimera's starvation threshold S, in engine iterations (our choice; the paper gives no value):
/// 4096 steps of 20-50 ms are 1.5-3.5 minutes, beyond the queueing of a loaded engine, so aging
/// catches starvation without turning an overloaded queue into FCFS (with S = 256 it did, see
/// docs/chimera.md). Every Chimera scenario with an aging STJF queue uses this value.
pub fn default_starvation_threshold() -> u64 {
    4096
}
/// Chimera's running quantum Q, in engine iterations (our choice; the paper gives no value).
pub fn default_quantum() -> u64 {
    64
}
fn default_levels() -> u32 {
    4
}
fn default_base_quantum_tokens() -> u64 {
    256
}
fn default_ltr_noise() -> f64 {
    0.5
}

impl QueuePolicyConfig {
    pub fn kind(&self) -> &'static str {
        match self {
            QueuePolicyConfig::Fcfs => "fcfs",
            QueuePolicyConfig::Sjf => "sjf",
            QueuePolicyConfig::Stjf { .. } => "stjf",
            QueuePolicyConfig::Mlfq { .. } => "mlfq",
            QueuePolicyConfig::Ltr { .. } => "ltr",
        }
    }
}

/// The routers a scenario's `[routing]` table can name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum RouterConfig {
    /// vLLM's data-parallel load balancer: the engine with the lowest
    /// `waiting_weight * waiting + running_weight * running`.
    LeastLoaded {
        #[serde(default = "default_waiting_weight")]
        waiting_weight: f64,
        #[serde(default = "default_running_weight")]
        running_weight: f64,
    },
    /// Engines in turn.
    RoundRobin,
    /// Chimera's dispatcher (Algorithm 1): the highest-confidence engine within `(1 + slack)` of
    /// the fastest estimated delay, switching away from the fastest only for a confidence gain of
    /// at least `margin`; sticky per workflow.
    Chimera {
        slack: f64,
        #[serde(default = "default_margin")]
        margin: f64,
    },
}

/// vLLM v1's DP load-balancing score weighs waiting requests 4x running ones.
fn default_waiting_weight() -> f64 {
    4.0
}
fn default_running_weight() -> f64 {
    1.0
}
/// Chimera's confidence margin Δs (our choice; the paper gives no value).
fn default_margin() -> f64 {
    0.05
}

impl RouterConfig {
    pub fn kind(&self) -> &'static str {
        match self {
            RouterConfig::LeastLoaded { .. } => "least_loaded",
            RouterConfig::RoundRobin => "round_robin",
            RouterConfig::Chimera { .. } => "chimera",
        }
    }
}
