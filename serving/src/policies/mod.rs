//! The policy extension points the families call, one module and one trait each, with what the
//! policy sees, what it returns and the registry enum scenarios name it by: `batch`
//! (`BatchSelector`), `mapping` (`ExpertMapper`), `placement` (`Placement`), `gate`
//! (`AggregationGate`), `memory` (`AdapterMemory`); the queue-policy and router points are the
//! serving layer's (`serving::queue`, `serving::router`, their enums in `serving::policy`). And
//! `Policies`, the registry trait that builds a policy object per point from its enum. The module
//! sits below every family and names none. `expertsim-scenario` knows no policy; the `strategies` crate
//! implements every one and `Policies` (`strategies::Registry`), and the caller hands it to the
//! runner, which hands it to each family's run.

pub mod batch;
pub mod gate;
pub mod mapping;
pub mod memory;
pub mod placement;

use crate::serving::{QueuePolicy, QueuePolicyConfig, Router, RouterConfig};
use batch::{BatchSelector, BatchSelectorConfig};
use gate::{AggregationGate, GateConfig};
use mapping::{ExpertMapper, MapperConfig};
use memory::{AdapterMemory, MemoryConfig};
use placement::{Placement, PlacementConfig};

/// Builds the policy objects scenarios name; one method per extension point.
pub trait Policies: Sync {
    fn batch_selector(&self, config: &BatchSelectorConfig) -> Box<dyn BatchSelector>;
    fn expert_mapper(&self, config: &MapperConfig) -> Box<dyn ExpertMapper>;
    fn placement(&self, config: &PlacementConfig) -> Box<dyn Placement>;
    fn aggregation_gate(&self, config: &GateConfig) -> Box<dyn AggregationGate>;
    fn queue_policy(&self, config: &QueuePolicyConfig) -> Box<dyn QueuePolicy>;
    fn router(&self, config: &RouterConfig) -> Box<dyn Router>;
    fn adapter_memory(&self, config: &MemoryConfig) -> Box<dyn AdapterMemory>;
    /// Another config of a batch selector that selects exactly what `config`'s does (the same
    /// batches, the same draws), where the registry builds one algorithm under two names, so
    /// that `reproduce` can simulate such cells once; `None`, the default: none.
    fn same_batch_selector(&self, _config: &BatchSelectorConfig) -> Option<BatchSelectorConfig> {
        None
    }
    /// The registry's name where every policy it builds is a function of its config alone, so
    /// that a result computed with it may be reused by another cell of the process that uses
    /// a registry of the same name (the calibration pass's memo); `None`, the default: never
    /// reused.
    fn memo_name(&self) -> Option<&'static str> {
        None
    }
}
