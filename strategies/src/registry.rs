//! The policy registry the runner uses: one method per extension point, each building the
//! policy a scenario names; and the catalogue of every policy kind for `expertsim list`.

use crate::batch::{self, PolicyInfo};
use expertsim_serving::policies::batch::{BatchSelector, BatchSelectorConfig};
use expertsim_serving::policies::gate::{AggregationGate, GateConfig};
use expertsim_serving::policies::mapping::{ExpertMapper, MapperConfig};
use expertsim_serving::policies::memory::{AdapterMemory, MemoryConfig};
use expertsim_serving::policies::placement::{Placement, PlacementConfig};
use expertsim_serving::serving::{QueuePolicy, QueuePolicyConfig, Router, RouterConfig};

/// Builds every policy of every family from its scenario config.
pub struct Registry;

impl expertsim_serving::policies::Policies for Registry {
    fn batch_selector(&self, config: &BatchSelectorConfig) -> Box<dyn BatchSelector> {
        batch::build(config)
    }
    fn same_batch_selector(&self, config: &BatchSelectorConfig) -> Option<BatchSelectorConfig> {
        batch::same_selector(config)
    }
    fn expert_mapper(&self, config: &MapperConfig) -> Box<dyn ExpertMapper> {
        crate::mapping::build(config)
    }
    fn placement(&self, config: &PlacementConfig) -> Box<dyn Placement> {
        crate::placement::build(config)
    }
    fn aggregation_gate(&self, config: &GateConfig) -> Box<dyn AggregationGate> {
        crate::gating::build(config)
    }
    fn queue_policy(&self, config: &QueuePolicyConfig) -> Box<dyn QueuePolicy> {
        crate::queue::build(config)
    }
    fn router(&self, config: &RouterConfig) -> Box<dyn Router> {
        crate::routing::build(config)
    }
    fn adapter_memory(&self, config: &MemoryConfig) -> Box<dyn AdapterMemory> {
        crate::memory::build(config)
    }
    fn memo_name(&self) -> Option<&'static str> {
        Some("strategies::Registry")
    }
}

/// Every policy kind of every family, with a one-line description.
pub fn catalogue() -> Vec<PolicyInfo> {
    let mut all = batch::catalogue();
    all.extend(crate::mapping::catalogue());
    all.extend(crate::placement::catalogue());
    all.extend(crate::gating::catalogue());
    all.extend(crate::queue::catalogue());
    all.extend(crate::routing::catalogue());
    all.extend(crate::memory::catalogue());
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use expertsim_scenario::scenario::schema::variants;

    /// `expertsim list` shows the catalogue: every kind a policy table accepts is in it, and
    /// nothing else, for each extension point.
    #[test]
    fn the_catalogue_lists_exactly_the_kinds_the_parser_accepts() {
        let cases = [
            ("batch", variants::<BatchSelectorConfig>()),
            ("mapping", variants::<MapperConfig>()),
            ("placement", variants::<PlacementConfig>()),
            ("gating", variants::<GateConfig>()),
            ("queue", variants::<QueuePolicyConfig>()),
            ("routing", variants::<RouterConfig>()),
            ("memory", variants::<MemoryConfig>()),
        ];
        let catalogue = catalogue();
        for (family, mut accepted) in cases {
            let mut listed: Vec<String> = catalogue
                .iter()
                .filter(|p| p.family == family)
                .map(|p| p.kind.to_string())
                .collect();
            listed.sort();
            accepted.sort();
            assert_eq!(listed, accepted, "{family}");
        }
    }
}
