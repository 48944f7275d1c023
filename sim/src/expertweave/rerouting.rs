//! The batched-rerouting operator of every MoE layer (ExpertWeave's fused kernel or
//! ExpertWeave-SingleOp's chain of framework operators) as the bytes it moves: what the
//! expertweave family's and the serving family's `[adapters]` step costs both price.

use super::config::Rerouting;
use crate::cost::shape::MlaMoeShape;

/// One step's rerouting traffic: per MoE layer and token its adapter id and top-k expert ids
/// read and the rerouted ids written (int32); per step the expert map's rows of the adapters the
/// instance holds. The unfused chain moves its intermediate arrays through memory once per
/// operator.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReroutingTraffic {
    /// The operators a step runs: one fused kernel, or the unfused chain's operators, per MoE
    /// layer.
    pub operators_per_step: f64,
    per_token_bytes: f64,
    per_step_bytes: f64,
}

impl ReroutingTraffic {
    /// The rerouting of `shape`'s MoE layers for an instance holding `adapters` adapters.
    pub fn new(
        shape: &MlaMoeShape,
        rerouting: Rerouting,
        unfused_ops: u64,
        adapters: usize,
    ) -> ReroutingTraffic {
        let operators = match rerouting {
            Rerouting::Fused => 1.0,
            Rerouting::Unfused => unfused_ops as f64,
        };
        ReroutingTraffic {
            operators_per_step: operators * shape.n_moe_layers() as f64,
            per_token_bytes: (4 + 2 * 4 * shape.top_k) as f64,
            per_step_bytes: (adapters as u64 * shape.n_routed_experts * 4) as f64,
        }
    }

    /// The bytes one operator moves over a step of `rows` token rows.
    pub fn bytes(&self, rows: u64) -> f64 {
        rows as f64 * self.per_token_bytes + self.per_step_bytes
    }
}
