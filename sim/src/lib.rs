//! expertsim's discrete-event simulation core: time, the event queue, seeded random streams,
//! arrival processes, request models, cost models, metrics, scenarios and the engine loop.
//! It knows no policy, no CUDA and no plotting; policies plug in through the traits defined here.

pub mod apportion;
pub mod arrivals;
pub mod caps;
pub mod chimera;
pub mod cost;
pub mod distributions;
pub mod engine;
pub mod event_queue;
pub mod expertweave;
pub mod family;
pub mod gem;
pub mod headlines;
pub mod input;
pub mod metrics;
pub mod mosaic;
pub mod partial;
pub mod policies;
pub mod recorder;
pub mod records;
pub mod registry;
pub mod results;
pub mod rng;
pub mod runner;
pub mod scenario;
pub mod serving;
pub mod serving_family;
pub mod time;

#[cfg(test)]
mod module_graph_checks;
#[cfg(test)]
mod queueing_checks;
#[cfg(test)]
mod shipped_scenarios;

pub use time::{SimDuration, SimTime};
