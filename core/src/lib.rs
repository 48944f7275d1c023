//! expertsim's simulation core (crate `expertsim-core`, re-exported by `sim` under the same module
//! names): simulated time, the future-event list and the engine loop, seeded random streams and
//! the samplers drawn from them, largest-remainder rounding, and the safe reading of user-named
//! input files. It depends on no other expertsim crate: it knows no cost model, family, policy or
//! scenario, which Cargo enforces.

pub mod apportion;
pub mod distributions;
pub mod engine;
pub mod event_queue;
pub mod input;
pub mod rng;
pub mod time;

pub use time::{SimDuration, SimTime};
