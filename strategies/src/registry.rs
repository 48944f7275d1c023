//! The policy registry the runner uses: one method per extension point, each building the
//! policy a scenario names; and the catalogue of every policy kind for `expertsim list`.

use crate::batch::{self, PolicyInfo};
use sim::batch::{BatchSelector, BatchSelectorConfig};

/// Builds every policy of every family from its scenario config.
pub struct Registry;

impl sim::runner::Policies for Registry {
    fn batch_selector(&self, config: &BatchSelectorConfig) -> Box<dyn BatchSelector> {
        batch::build(config)
    }
}

/// Every policy kind of every family, with a one-line description.
pub fn catalogue() -> Vec<PolicyInfo> {
    batch::catalogue()
}
