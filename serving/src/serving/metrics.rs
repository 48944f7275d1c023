//! What a replica counts about itself: steps, busy time, batch sizes, tokens, admissions and
//! preemptions, and the time integral of the requests it holds (waiting or running), so Little's
//! law can be checked on its own numbers; and the latencies of the requests it finished, recorded
//! as `complete_step` hands them back (`latencies::RequestLatencies`,
//! which the recorder reports), so every family
//! serving through a replica has them without recording anything itself.

use super::latencies::RequestLatencies;
use crate::time::SimTime;

/// A replica's counters.
#[derive(Clone, Debug, Default)]
pub struct ReplicaStats {
    pub steps: u64,
    pub busy_ns: u64,
    /// Sum over steps of the sequences in the step.
    pub batch_sum: u64,
    /// Output tokens emitted.
    pub tokens: u64,
    pub prefill_tokens: u64,
    /// Prefill tokens beyond the prompts (`prefill_tokens` = the prompts' sum + this): what
    /// recompute preemptions make sequences prefill again (the prefill lost, and the tokens
    /// generated before the preemption), counted when a sequence is preempted.
    pub recomputed_tokens: u64,
    /// With prefix caching: the prompt tokens of the first admissions, and those of them found
    /// cached (not prefilled).
    pub prefix_lookup_tokens: u64,
    pub prefix_hit_tokens: u64,
    /// With prefix caching: tokens found cached when a sequence preempted by recompute is
    /// admitted again (not prefilled again either).
    pub prefix_rehit_tokens: u64,
    /// First admissions (a resumed sequence is not counted again).
    pub admitted: u64,
    pub completed: u64,
    pub preempted_recompute: u64,
    pub preempted_swap: u64,
    /// Requests submitted and not yet finished.
    pub in_system: u64,
    /// Integral over time of `in_system`, request-nanoseconds.
    pub in_system_area: u128,
    /// Sum over finished requests of finish - submission, ns.
    pub sojourn_ns: u128,
    /// TTFT, TPOT, end-to-end and queueing delay of the finished requests.
    pub latencies: RequestLatencies,
    last_change: SimTime,
}

impl ReplicaStats {
    /// `in_system` changes by `delta` at `now`.
    pub fn population(&mut self, now: SimTime, delta: i64) {
        self.in_system_area += u128::from(self.in_system) * u128::from((now - self.last_change).0);
        self.last_change = now;
        self.in_system = self
            .in_system
            .checked_add_signed(delta)
            .expect("a replica holds a non-negative number of requests");
    }

    /// Time-average requests held over [0, `end`].
    pub fn mean_in_system(&self, end: SimTime) -> f64 {
        let tail = u128::from(self.in_system) * u128::from((end - self.last_change).0);
        (self.in_system_area + tail) as f64 / end.0.max(1) as f64
    }

    /// Mean time from submission to finish, ns.
    pub fn mean_sojourn_ns(&self) -> f64 {
        self.sojourn_ns as f64 / self.completed.max(1) as f64
    }
}
