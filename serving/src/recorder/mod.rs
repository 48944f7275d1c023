//! The one metrics recorder a family serving requests through `serving::Replica` reports with:
//! per request TTFT, TPOT, end-to-end and queueing delay as bounded-memory histograms, read off
//! the replica's own moments (a sequence's submission, first admission, first token and finish,
//! `serving::Seq`; the histograms are the replica's own, `serving::latencies`, re-exported here);
//! per replica its throughput, per-GPU busy time and model FLOPs (utilisation,
//! MFU), KV-cache use over time (a bounded series) and preemptions; the overall figures merged
//! from the replicas'. A family declares its metrics once as a table (`table::MetricDef`: name,
//! unit, better direction, how to compute) and turns it into `RunOutput`; a failed run reports
//! no number but its reason (`table::failed`); the table, the expert-load and ranking statistics
//! are `expertsim-core`'s (`expertsim_core::recorder`), re-exported here. `trace_events` writes
//! the steps of every replica as a Chrome trace-event file; `timeline` the intervals each replica
//! loads, runs steps and idles (`[output] timeline`). Every metric is defined in docs/metrics.md.

pub mod replica;
pub mod sessions;
pub mod timeline;
pub mod trace_events;

// The parts below the serving layer are `expertsim-core`'s (`expertsim_core::recorder`), under
// their old paths (`crate::recorder::table::MetricDef`, ...).
pub use crate::serving::latencies::{Percentiles, RequestLatencies, RequestSummary};
pub use expertsim_core::recorder::{ExpertLoad, MetricDef, expert_load, failed, infos, ranking};
pub use expertsim_core::recorder::{scalars, table};
pub use replica::{QuestionSummary, ReplicaRecorder, ServingSummary, WorkflowSummary};
pub use sessions::SessionSummary;
pub use trace_events::{StepCounts, TraceEvents};
