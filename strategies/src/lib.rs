//! expertsim's pluggable policies, one file per policy, grouped by family folder.

pub mod batch;
pub mod registry;

pub use registry::{Registry, catalogue};
