//! The router extension point: which replica a request is dispatched to, from each replica's
//! state at dispatch time. Implementations live in `strategies::routing` (least loaded, round
//! robin, Chimera's dispatcher).

/// Context per sequence at which `decode_ms_per_token` is profiled (the paper profiles it offline;
/// 1024 tokens is the order of an agent stage's prompt plus output here).
pub const PROFILE_CONTEXT_TOKENS: f64 = 1024.0;

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
    /// Profiled decode time per step at the engine's full batch, each sequence holding
    /// `PROFILE_CONTEXT_TOKENS`, in ms (`decode_ms_per_token`).
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
