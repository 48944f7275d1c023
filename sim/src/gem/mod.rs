//! The GEM family (gem.txt): expert-parallel MoE serving on GPUs of unequal speed, its experts
//! placed through the expert-to-GPU mapping extension point (`policies::mapping`; linear, round
//! robin, EPLB, GEM in `strategies::mapping`). See docs/gem.md for the model and every constant.

pub mod config;
pub mod family;
pub mod profiling;
pub mod server;

/// The expert-utilization traces, shared with the serving family (`serving::expert_trace`).
pub use crate::serving::expert_trace as trace;
/// GPU variability, shared with the serving family (`serving::variability`).
pub use crate::serving::variability;

#[cfg(test)]
mod tests;

pub use config::{GemConfig, GemScenario};
pub use family::Gem;
pub use server::{
    CurveStepCost, Deployment, HEADLINE, HEADLINE_IMPROVEMENTS, METRICS, replica_config, serve_on,
    simulate, simulate_recorded,
};
