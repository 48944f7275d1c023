//! Per-request latencies of finished sequences, read off the moments a `serving::Seq` keeps:
//! time to first token, time per output token (the request's mean gap between tokens), every
//! gap between consecutive tokens (inter-token latency, recorded as tokens are emitted), end to
//! end and queueing delay (submission to first admission), each in a bounded-memory histogram;
//! and `RequestSummary`, what every family's metric table reads them from: mean, p50, p90, p99
//! p95 and max of each, no number (NaN, `null` in the results) where no request was measured.

use super::replica::Seq;
use crate::metrics::LatencyRecorder;
use crate::time::SimTime;
use serde::{Deserialize, Serialize};

/// The latencies and token counts of the requests a replica (or a cluster) finished.
#[derive(Clone, Debug, Default)]
pub struct RequestLatencies {
    /// Submission to first output token.
    pub ttft: LatencyRecorder,
    /// Per request, (finish - first token) / (output tokens - 1); requests of one output token
    /// have no gap and are not counted.
    pub tpot: LatencyRecorder,
    /// Every gap between two consecutive output tokens of a request (inter-token latency), one
    /// sample per token after the first, recorded as the replica emits them (GEM's TPOT).
    pub itl: LatencyRecorder,
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
    /// Summed over the finished requests: submission to first token (the prefill phase,
    /// queueing included), ns.
    pub prefill_ns: u64,
    /// Summed over the finished requests: the tokens after the first, and first to last token
    /// (the decode phase), ns.
    pub decode_tokens: u64,
    pub decode_ns: u64,
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
        self.prefill_ns += (seq.first_token() - submitted).0;
        self.decode_tokens += u64::from(seq.output.saturating_sub(1));
        self.decode_ns += (now - seq.first_token()).0;
    }

    /// `count` requests each emitted their next token `gap_ns` after their previous one.
    pub fn token_gaps(&mut self, gap_ns: u64, count: u64) {
        if count > 0 {
            self.itl.record_n(gap_ns, count);
        }
    }

    /// Adds `other`'s requests.
    pub fn merge(&mut self, other: &RequestLatencies) {
        self.ttft.merge(&other.ttft);
        self.tpot.merge(&other.tpot);
        self.itl.merge(&other.itl);
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
        self.prefill_ns += other.prefill_ns;
        self.decode_tokens += other.decode_tokens;
        self.decode_ns += other.decode_ns;
    }

    /// Prefill throughput: prompt tokens per second of the finished requests' summed time to
    /// first token (NaN when none finished). ExpertWeave reports "prefill throughput" without
    /// defining it further; this is the prompt phase's tokens over the time requests spend in
    /// it, queueing included (what the paper names as lowering its merged baseline's), so
    /// below saturation it is not the offered load (tokens over the run's length would be).
    pub fn prefill_throughput_tps(&self) -> f64 {
        per_second(self.prompt_tokens, self.prefill_ns)
    }

    /// Decode throughput: the tokens after the first per second of the finished requests'
    /// summed first-to-last-token time (NaN when no request decoded).
    pub fn decode_throughput_tps(&self) -> f64 {
        per_second(self.decode_tokens, self.decode_ns)
    }

    /// The summary every family's metric table reads.
    pub fn summary(&self) -> RequestSummary {
        RequestSummary {
            completed: self.completed,
            ttft: measured(&self.ttft),
            tpot: measured(&self.tpot),
            itl: measured(&self.itl),
            e2e: measured(&self.e2e),
            queueing: measured(&self.queueing),
            throughput_rps: if self.span_s() > 0.0 {
                self.completed as f64 / self.span_s()
            } else {
                f64::NAN
            },
        }
    }

    /// Seconds from the first submission to the last finish (0 before any finish).
    pub fn span_s(&self) -> f64 {
        self.first_arrival
            .map_or(0.0, |first| (self.last_finish - first).as_secs_f64())
    }
}

fn per_second(tokens: u64, ns: u64) -> f64 {
    match ns {
        0 => f64::NAN,
        ns => tokens as f64 / (ns as f64 * 1e-9),
    }
}

/// The recorded latencies of a run's requests, in milliseconds: mean, p50, p90, p95, p99 and max
/// of each (the histogram's, within 0.1 %; means exact), `NaN` (`null`) for a latency no request
/// measured (no request finished; TPOT when every request had one output token).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RequestSummary {
    pub completed: u64,
    pub ttft: Percentiles,
    pub tpot: Percentiles,
    pub itl: Percentiles,
    pub e2e: Percentiles,
    pub queueing: Percentiles,
    /// Finished requests per second, first submission to last finish (NaN with no span).
    pub throughput_rps: f64,
}

/// One latency's mean and percentiles, ms.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

fn measured(recorder: &LatencyRecorder) -> Percentiles {
    if recorder.count() == 0 {
        return Percentiles {
            mean_ms: f64::NAN,
            p50_ms: f64::NAN,
            p90_ms: f64::NAN,
            p95_ms: f64::NAN,
            p99_ms: f64::NAN,
            max_ms: f64::NAN,
        };
    }
    Percentiles {
        mean_ms: recorder.mean_ms(),
        p50_ms: recorder.quantile_ms(0.50),
        p90_ms: recorder.quantile_ms(0.90),
        p95_ms: recorder.quantile_ms(0.95),
        p99_ms: recorder.quantile_ms(0.99),
        max_ms: recorder.quantile_ms(1.0),
    }
}
