//! The one metrics recorder a family serving requests through `serving::Replica` reports with:
//! per request TTFT, TPOT, end-to-end and queueing delay as bounded-memory histograms, read off
//! the replica's own moments (a sequence's submission, first admission, first token and finish,
//! `serving::Seq`; the histograms are the replica's own, `serving::latencies`, re-exported here);
//! per replica its throughput, per-GPU busy time and model FLOPs (utilisation,
//! MFU), KV-cache use over time (a bounded series) and preemptions; the overall figures merged
//! from the replicas'. A family declares its metrics once as a table (`table::MetricDef`: name,
//! unit, better direction, how to compute) and turns it into `RunOutput`; a failed run reports
//! no number but its reason (`table::failed`). `trace_events` writes the steps of every replica
//! as a Chrome trace-event file. Every metric is defined in docs/metrics.md.

pub mod expert_load;
pub mod ranking;
pub mod replica;
pub mod sessions;
pub mod table;
pub mod trace_events;

pub use crate::serving::latencies::{Percentiles, RequestLatencies, RequestSummary};
pub use expert_load::ExpertLoad;
pub use replica::{QuestionSummary, ReplicaRecorder, ServingSummary, WorkflowSummary};
pub use sessions::SessionSummary;
pub use table::{MetricDef, failed, infos, scalars};
pub use trace_events::{StepCounts, TraceEvents};
