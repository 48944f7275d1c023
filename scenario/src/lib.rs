//! expertsim's simulator: request models, the serving layer, the recorder of replicas, the
//! families, results and scenarios, above `expertsim-core` (time, events, the engine loop, random
//! streams, arrivals, the validation vocabulary, metrics and records) and `expertsim-cost` (the
//! cost model), which it re-exports under their old module names. It knows no policy, no CUDA
//! and no plotting; policies plug in through the traits defined here.

pub mod headlines;
pub mod partial;
pub mod registry;
pub mod results;
pub mod results_layout;
pub mod runner;
pub mod scenario;

#[cfg(test)]
mod module_graph_checks;
#[cfg(test)]
mod one_engine_checks;
#[cfg(test)]
mod one_model_checks;
#[cfg(test)]
mod serving_family_files;
#[cfg(test)]
mod shipped_scenarios;
#[cfg(test)]
mod toy_family_checks;

// The crates below this one, under the module names every path already uses (`crate::time`,
// `expertsim_scenario::cost::gpu`, ...).
pub use expertsim_core::{
    apportion, arrivals, distributions, engine, event_queue, input, memo, metrics, records, rng,
    time,
};
pub use expertsim_cost as cost;
pub use expertsim_serving::{family, load_cache, policies, recorder, serving};
// Every registered family's module (`expertsim_serving::families!`), under the same name.
pub use expertsim_serving::family_modules::*;

/// The validation vocabulary (`expertsim_core::validate`, `[limits]` included) under its old
/// path, with the one check that reads the cost model, a measured set's GPU
/// (`cost::measured_steps::measured_on`).
pub mod validate {
    pub use expertsim_core::validate::*;
    pub use expertsim_cost::measured_steps::measured_on;
}

pub use time::{SimDuration, SimTime};
