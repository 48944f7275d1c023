//! expertsim's pluggable policies, one file per policy, grouped by extension point folder, above
//! `expertsim-serving` (the extension points' traits, `policies` and `serving`), which Cargo holds
//! it to: it knows no scenario loader (`expertsim-scenario` is only its tests' and examples').

pub mod batch;
pub mod gating;
pub mod mapping;
pub mod memory;
pub mod placement;
pub mod queue;
pub mod registry;
pub mod routing;

pub use registry::{Registry, catalogue};
