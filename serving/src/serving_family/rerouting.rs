//! ExpertWeave's batched-rerouting operator of every MoE layer (the fused kernel, or
//! ExpertWeave-SingleOp's chain of framework operators) and its one price: the bytes it moves
//! split over an instance's devices, streamed at the slowest one's bandwidth, plus a launch per
//! operator. The serving family's `[adapters]` step cost prices rerouting here (or, on a replica
//! priced from a measured profile, from its measured series: `curve_pricing::MlaGemms`).

use crate::cost::moe_layer::SpeedFactors;
use crate::cost::roofline::Roofline;
use crate::cost::shape::MlaMoeShape;
use serde::{Deserialize, Serialize};

/// How batched rerouting is executed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rerouting {
    /// One fused kernel per MoE layer (ExpertWeave).
    Fused,
    /// A chain of framework operators per layer (ExpertWeave-SingleOp).
    Unfused,
}

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

/// The price of one instance's rerouting: `traffic` split evenly over `devices` devices, each
/// at its own roofline, the slowest setting the pace, once per operator of the step.
#[derive(Clone, Debug)]
pub struct ReroutingCost {
    traffic: ReroutingTraffic,
    devices: f64,
    /// Each distinct device speed's roofline.
    rooflines: Vec<Roofline>,
}

impl ReroutingCost {
    /// `traffic` over `devices` devices running at `nominal` scaled by each of `speeds`
    /// (`[SpeedFactors::NOMINAL]` for identical devices at the datasheet's rates).
    pub fn new(
        traffic: ReroutingTraffic,
        nominal: Roofline,
        speeds: &[SpeedFactors],
        devices: u64,
    ) -> ReroutingCost {
        let mut rooflines: Vec<Roofline> = Vec::new();
        for &speed in speeds {
            let r = nominal.scaled(speed);
            if !rooflines.contains(&r) {
                rooflines.push(r);
            }
        }
        ReroutingCost {
            traffic,
            devices: devices.max(1) as f64,
            rooflines,
        }
    }

    /// The operators a step runs (each one launch).
    pub fn operators(&self) -> f64 {
        self.traffic.operators_per_step
    }

    /// Nanoseconds the step's operators spend moving their bytes over `rows` token rows.
    pub fn memory_ns(&self, rows: u64) -> f64 {
        self.traffic.operators_per_step * self.operator_ns(rows)
    }

    /// One operator's bytes over `rows` token rows, on the slowest device.
    fn operator_ns(&self, rows: u64) -> f64 {
        let bytes = self.traffic.bytes(rows);
        self.rooflines
            .iter()
            .map(|r| r.op(bytes / self.devices, 0.0).nanos())
            .fold(0.0, f64::max)
    }

    /// Nanoseconds the step's operators take launched one by one from the host, each the
    /// longer of its launch (`host_launch_ns`) and its bytes' time (`Timing::Eager`).
    pub fn eager_ns(&self, rows: u64, host_launch_ns: f64) -> f64 {
        self.traffic.operators_per_step * self.operator_ns(rows).max(host_launch_ns)
    }

    /// Nanoseconds the step's operators spend in launches, each `launch_ns` (eager launches;
    /// in a CUDA graph the replay's host time covers them).
    pub fn launch_ns(&self, launch_ns: f64) -> f64 {
        self.traffic.operators_per_step * launch_ns
    }
}
