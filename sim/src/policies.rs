//! The `Policies` registry trait: builds the policy objects a scenario names, one method per
//! extension point (each point's trait and registry enum live with the family or layer that
//! calls it). `sim` knows no policy; the `strategies` crate implements it (`strategies::Registry`)
//! and the caller hands it to the runner, which hands it to each family's run.

use crate::caps::batch::{BatchSelector, BatchSelectorConfig};
use crate::expertweave::{AdapterMemory, MemoryConfig};
use crate::gem::{ExpertMapper, MapperConfig};
use crate::mosaic::{AggregationGate, GateConfig, Placement, PlacementConfig};
use crate::serving::{QueuePolicy, QueuePolicyConfig, Router, RouterConfig};

/// Builds the policy objects scenarios name; one method per extension point.
pub trait Policies: Sync {
    fn batch_selector(&self, config: &BatchSelectorConfig) -> Box<dyn BatchSelector>;
    fn expert_mapper(&self, config: &MapperConfig) -> Box<dyn ExpertMapper>;
    fn placement(&self, config: &PlacementConfig) -> Box<dyn Placement>;
    fn aggregation_gate(&self, config: &GateConfig) -> Box<dyn AggregationGate>;
    fn queue_policy(&self, config: &QueuePolicyConfig) -> Box<dyn QueuePolicy>;
    fn router(&self, config: &RouterConfig) -> Box<dyn Router>;
    fn adapter_memory(&self, config: &MemoryConfig) -> Box<dyn AdapterMemory>;
}
