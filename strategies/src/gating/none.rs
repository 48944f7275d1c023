//! The no-gate baseline: every question goes to the aggregator.

use expertsim_serving::policies::gate::{AggregationGate, Votes};

pub struct NoGate;

impl AggregationGate for NoGate {
    fn name(&self) -> &'static str {
        "none"
    }
    fn skip(&mut self, _votes: &Votes) -> bool {
        false
    }
}
