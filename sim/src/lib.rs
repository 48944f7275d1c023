//! expertsim's simulator: arrival processes, request models, the serving layer, the families,
//! metrics, results and scenarios, above `expertsim-core` (time, events, the engine loop, random
//! streams) and `expertsim-cost` (the cost model), which it re-exports under their old module
//! names. It knows no policy, no CUDA and no plotting; policies plug in through the traits
//! defined here.

pub mod arrivals;
pub mod chimera;
pub mod family;
pub mod headlines;
pub mod load_cache;
pub mod metrics;
pub mod mosaic;
pub mod partial;
pub mod policies;
pub mod recorder;
pub mod records;
pub mod registry;
pub mod results;
pub mod runner;
pub mod scenario;
pub mod serving;
pub mod serving_family;
pub mod validate;

#[cfg(test)]
mod module_graph_checks;
#[cfg(test)]
mod one_engine_checks;
#[cfg(test)]
mod one_model_checks;
#[cfg(test)]
mod queueing_checks;
#[cfg(test)]
mod shipped_scenarios;

// The crates below this one, under the module names every path already uses (`crate::time`,
// `sim::cost::gpu`, ...).
pub use expertsim_core::{apportion, distributions, engine, event_queue, input, rng, time};
pub use expertsim_cost as cost;

pub use time::{SimDuration, SimTime};
