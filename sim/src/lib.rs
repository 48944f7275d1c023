//! expertsim's discrete-event simulation core: time, the event queue, seeded random streams,
//! arrival processes, request models, cost models, metrics, scenarios and the engine loop.
//! It knows no policy, no CUDA and no plotting; policies plug in through the traits defined here.

pub mod batch;
pub mod event_queue;
pub mod rng;
pub mod time;

pub use time::{SimDuration, SimTime};
