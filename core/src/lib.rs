//! expertsim's simulation core (crate `expertsim-core`, re-exported by `expertsim-scenario` under the same module
//! names): simulated time, the future-event list and the engine loop, seeded random streams and
//! the samplers drawn from them, largest-remainder rounding, the safe reading of user-named
//! input files, the arrival processes (`arrivals`, with the `[arrival]` table), the validation
//! vocabulary every scenario table is checked with (`validate`, with the ceilings of
//! `[limits]`), the bounded per-process memo of pure computations (`memo`), and the recording
//! vocabulary below the replicas' recorder: bounded-memory latency histograms and run summaries
//! (`metrics`), per-request records streamed to disk (`records`), metric tables, expert-load and
//! ranking statistics (`recorder`). It depends on no other expertsim crate: it knows no cost
//! model, serving layer, family, policy or scenario loader, which Cargo enforces.

pub mod apportion;
pub mod arrivals;
pub mod distributions;
pub mod engine;
pub mod event_queue;
pub mod input;
pub mod memo;
pub mod metrics;
pub mod recorder;
pub mod records;
pub mod rng;
pub mod time;
pub mod validate;

pub use time::{SimDuration, SimTime};
