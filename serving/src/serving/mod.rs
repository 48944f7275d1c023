//! The serving layer: one continuous-batching replica (the vLLM scheduler model done once), the
//! queue-policy, batch-former and router extension points that order, group and place requests,
//! and the one step-cost seam every family prices a step through. A replica is driven by a
//! family's engine `Model`: the family schedules the step-end event, the replica decides what
//! each step runs (docs/serving.md).

pub mod agent_workflows;
pub mod config;
pub mod datasets;
pub mod dense;
pub mod expert_trace;
pub mod former;
pub mod kv;
pub mod latencies;
pub mod metrics;
pub mod policy;
pub mod predictors;
pub mod prefix;
pub mod profiling;
pub mod questions;
pub mod queue;
pub mod replica;
pub mod router;
pub mod session_regression;
pub mod step;
pub mod topic_affinity;
pub mod variability;
mod wheel;

pub use config::{Admission, Batching, KvConfig, Preemption, ReplicaConfig, StepOrder};
pub use dense::{DenseServing, DenseStepCost};
pub use former::BatchFormer;
pub use kv::BlockManager;
pub use latencies::{Percentiles, RequestLatencies, RequestSummary};
pub use metrics::ReplicaStats;
pub use policy::{QueuePolicyConfig, RouterConfig};
pub use prefix::{PrefixCache, PrefixSegment, SharedSegments};
pub use queue::{QueuePolicy, QueuedRequest};
pub use replica::{AdmitHook, Replica, Seq};
pub use router::{EngineState, RouteRequest, Router};
pub use step::{
    AdapterTokens, CopyTokens, CostSource, ExpectedRouting, MeasuredStepCost, NotingSource,
    RooflineStepCost, RoutedTokens, StepBreakdown, StepCost, StepParts, StepTime, StepWork,
};

#[cfg(test)]
pub(crate) mod tests;
