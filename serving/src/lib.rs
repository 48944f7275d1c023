//! expertsim's serving layer (crate `expertsim-serving`, re-exported by `sim` under the same module
//! names): one continuous-batching replica, the queue-policy, batch-former and router extension
//! points, the step-cost seam, per-request latencies and a dense model's serving cost
//! (`serving`, docs/serving.md); the other extension points' traits and registry enums
//! (`policies`: batch, mapping, placement, gate, adapter memory, and the `Policies` registry
//! trait); the recorder of replicas above both (`recorder`); the files a sweep's cells share
//! (`load_cache`) and the `Family` trait with what families share with the layers above
//! (`family`; the registration list and the loader stay in `sim`), and the serving family, the
//! one simulator every paper is a preset of, above all of them (`serving_family`,
//! docs/serving-family.md). It sits above `expertsim-core` (time, events, random streams,
//! arrivals, the validation vocabulary, metrics) and `expertsim-cost` (the cost model), which it
//! re-exports under the module names the moved files use (`crate::time`, `crate::cost`, ...);
//! it knows no scenario loader, family registry or policy implementation, which Cargo enforces.

pub mod family;
pub mod load_cache;
pub mod policies;
pub mod recorder;
pub mod serving;
pub mod serving_family;

// The crates below this one, under the module names every path already uses.
pub use expertsim_core::{
    apportion, arrivals, distributions, engine, event_queue, input, metrics, records, rng, time,
};
pub use expertsim_cost as cost;

/// The validation vocabulary (`expertsim_core::validate`, `[limits]` included) with the one
/// check that reads the cost model, a measured set's GPU (`cost::measured_steps::measured_on`),
/// as `sim::validate` has it.
pub mod validate {
    pub use expertsim_core::validate::*;
    pub use expertsim_cost::measured_steps::measured_on;
}

pub use time::{SimDuration, SimTime};
