//! expertsim's pluggable policies, one file per policy, grouped by family folder.

pub mod batch;
pub mod gating;
pub mod mapping;
pub mod memory;
pub mod placement;
pub mod queue;
pub mod registry;
pub mod routing;

pub use registry::{Registry, catalogue};
