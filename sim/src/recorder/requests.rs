//! Per-request latencies of finished sequences, read off the moments a `serving::Seq` keeps:
//! time to first token, time per output token (the request's mean gap between tokens), end to
//! end and queueing delay (submission to first admission), each in a bounded-memory histogram.

use crate::metrics::LatencyRecorder;
use crate::serving::Seq;
use crate::time::SimTime;

/// The latencies and token counts of the requests a replica (or a cluster) finished.
#[derive(Clone, Debug, Default)]
pub struct RequestLatencies {
    /// Submission to first output token.
    pub ttft: LatencyRecorder,
    /// Per request, (finish - first token) / (output tokens - 1); requests of one output token
    /// have no gap and are not counted.
    pub tpot: LatencyRecorder,
    /// Submission to last output token.
    pub e2e: LatencyRecorder,
    /// Submission to first admission into a step.
    pub queueing: LatencyRecorder,
    pub completed: u64,
    pub prompt_tokens: u64,
    pub output_tokens: u64,
    /// The earliest submission among the finished requests.
    pub first_arrival: Option<SimTime>,
    /// The latest finish.
    pub last_finish: SimTime,
}

impl RequestLatencies {
    /// `seq` finished at `now`: its output is complete (`complete_step` handed it back).
    pub fn finished(&mut self, now: SimTime, seq: &Seq) {
        let submitted = seq.request.submitted;
        self.ttft.record((seq.first_token() - submitted).0);
        if seq.output > 1 {
            let gaps = u64::from(seq.output - 1);
            self.tpot.record((now - seq.first_token()).0 / gaps);
        }
        self.e2e.record((now - submitted).0);
        self.queueing.record((seq.admitted() - submitted).0);
        self.completed += 1;
        self.prompt_tokens += u64::from(seq.request.prompt_tokens);
        self.output_tokens += u64::from(seq.output);
        self.first_arrival = Some(self.first_arrival.map_or(submitted, |t| t.min(submitted)));
        self.last_finish = self.last_finish.max(now);
    }

    /// Adds `other`'s requests.
    pub fn merge(&mut self, other: &RequestLatencies) {
        self.ttft.merge(&other.ttft);
        self.tpot.merge(&other.tpot);
        self.e2e.merge(&other.e2e);
        self.queueing.merge(&other.queueing);
        self.completed += other.completed;
        self.prompt_tokens += other.prompt_tokens;
        self.output_tokens += other.output_tokens;
        self.first_arrival = match (self.first_arrival, other.first_arrival) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.last_finish = self.last_finish.max(other.last_finish);
    }

    /// Seconds from the first submission to the last finish (0 before any finish).
    pub fn span_s(&self) -> f64 {
        self.first_arrival
            .map_or(0.0, |first| (self.last_finish - first).as_secs_f64())
    }
}
