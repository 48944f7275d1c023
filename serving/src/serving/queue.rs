//! The queue-policy extension point: which waiting request a replica admits next. One policy
//! instance serves every replica of a run (each method names the replica); implementations live in
//! `strategies::queue` (FCFS, SJF, STJF, MLFQ, LTR).

use crate::time::SimTime;

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
    /// The request's topic, which routes its tokens to experts (the serving family's topical
    /// routing; 0 elsewhere).
    pub topic: u32,
}

/// Orders the waiting requests of each engine. One instance serves every engine of a run; each
/// method names the engine. `iteration` is that engine's decode-step counter (a scheduling
/// iteration in vLLM's sense), which advances only while the engine runs.
pub trait QueuePolicy: Send {
    /// The policy's kind, as in the scenario.
    fn name(&self) -> &'static str;
    /// Forgets every queued request and prepares `n_engines` empty queues.
    fn reset(&mut self, n_engines: usize);
    /// Adds a request to `engine`'s queue. Pushing back a request `pop` returned leaves the
    /// queue as it was before the pop (a replica pushes back a request it cannot admit).
    fn push(&mut self, engine: usize, request: QueuedRequest);
    /// Removes and returns the request `engine` admits next at `iteration`, if any waits.
    fn pop(&mut self, engine: usize, iteration: u64) -> Option<QueuedRequest>;
    /// The request `pop` would return at `iteration`, left queued; `None` when none waits or
    /// the policy does not say (the default). A replica reads the request it may admit here and
    /// pops it once admitted, instead of popping it and pushing it back every step it cannot.
    fn peek(&mut self, _engine: usize, _iteration: u64) -> Option<QueuedRequest> {
        None
    }
    /// Requests waiting at `engine`.
    fn len(&self, engine: usize) -> usize;
    fn is_empty(&self, engine: usize) -> bool {
        self.len(engine) == 0
    }
}
