//! MOSAIC aggregation gates (Algorithm 1): whether a question's experts agree enough for the
//! majority answer to be returned without the aggregator LLM. One file per gate, each an
//! [`AggregationGate`] built from its [`GateConfig`] variant by [`build`].

use crate::batch::PolicyInfo;
use expertsim_serving::policies::gate::{AggregationGate, GateConfig};

pub mod none;
pub mod threshold;

/// The gate a scenario's `[gate]` table asks for.
pub fn build(config: &GateConfig) -> Box<dyn AggregationGate> {
    match config {
        GateConfig::None => Box::new(none::NoGate),
        GateConfig::Threshold { tau } => Box::new(threshold::Threshold::new(*tau)),
    }
}

/// Every gate.
pub fn catalogue() -> Vec<PolicyInfo> {
    vec![
        PolicyInfo {
            family: "gating",
            kind: "none",
            description: "every question goes to the aggregator (baseline)",
        },
        PolicyInfo {
            family: "gating",
            kind: "threshold",
            description: "skip the aggregator when the plurality vote share C >= tau (1: 3:0; 2/3: 3:0 + 2:1)",
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_matches_the_kind() {
        for config in [GateConfig::None, GateConfig::Threshold { tau: 1.0 }] {
            assert_eq!(build(&config).name(), config.kind());
        }
        assert!(catalogue().iter().all(|p| p.family == "gating"));
    }
}
