//! Arrival processes: when requests reach the system and which semantic topic each carries.
//!
//! Every process is a stream: [`ArrivalProcess::next_arrival`] yields one [`Arrival`] at a time, in
//! non-decreasing time order, so memory never grows with the length of a run. Five processes are
//! provided, one file each:
//!
//! - [`Poisson`]: exponential inter-arrival gaps, topics independent and uniform;
//! - [`GammaArrivals`]: gamma inter-arrival gaps of a given coefficient of variation (a renewal
//!   process; CV 1 is Poisson), topics independent and uniform;
//! - [`Bursty`]: a two-state Markov-modulated Poisson process whose bursts raise the rate *and*
//!   concentrate requests on one topic (the "semantic hotspot" traffic of the CAPS paper);
//! - [`Offline`]: every request present at time zero (a batch / throughput job);
//! - [`TraceReplay`]: timestamps (and optional token counts) replayed from a CSV [`Trace`], e.g. in
//!   the BurstGPT layout.
//!
//! [`ArrivalTable`] (`spec`) is the scenario's `[arrival]` table choosing one of them, validated
//! into an [`ArrivalSpec`] that builds the process of a run.
//!
//! Randomness comes only from the [`SimRng`] the caller passes in (derived with
//! [`crate::rng::stream`]), so the same seed gives the same sequence of arrivals.

mod bursty;
mod gamma;
mod offline;
mod poisson;
pub mod spec;
mod trace;

pub use bursty::{Bursty, BurstyParams, InvalidBurstyParams};
pub use gamma::GammaArrivals;
pub use offline::Offline;
pub use poisson::Poisson;
pub use spec::{ArrivalPattern, ArrivalSpec, ArrivalTable, TraceReplayTable};
pub use trace::{LengthStats, Trace, TraceError, TraceReplay, TraceRow, TraceStats};

use crate::rng::SimRng;
use crate::time::SimTime;
use rand::RngExt;

/// One request arrival as the arrival process decides it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arrival {
    /// When the request reaches the system.
    pub time: SimTime,
    /// The request's semantic topic, in `0..n_topics`; requests with the same topic tend to
    /// activate the same experts.
    pub topic: u32,
    /// Prompt length in tokens when the process knows it (trace replay); `None` lets the request
    /// model draw it.
    pub prompt_tokens: Option<u32>,
    /// Output length in tokens when the process knows it (trace replay); `None` lets the request
    /// model draw it.
    pub output_tokens: Option<u32>,
}

/// A source of request arrivals, consumed one at a time by the engine.
pub trait ArrivalProcess: Send {
    /// The next arrival in time order, or None when the process is exhausted.
    fn next_arrival(&mut self) -> Option<Arrival>;
}

/// An exponentially distributed gap with rate `rate_per_s`, in seconds: the one exponential
/// sampler (`crate::distributions::Exponential`, by inversion of the CDF). Callers check the rate.
fn exponential_gap_s(rng: &mut SimRng, rate_per_s: f64) -> f64 {
    crate::distributions::Exponential::new(rate_per_s)
        .expect("arrival rates are checked when the process is built")
        .sample(rng)
}

/// A topic drawn uniformly from `0..n_topics`.
fn uniform_topic(rng: &mut SimRng, n_topics: u32) -> u32 {
    rng.random_range(0..n_topics)
}

/// Panics with a message naming `what` unless `n_topics >= 1`.
fn check_n_topics(what: &str, n_topics: u32) {
    assert!(n_topics >= 1, "{what}: n_topics must be at least 1");
}

/// Panics with a message naming `what` unless `rate_per_s` is finite and positive.
fn check_rate(what: &str, rate_per_s: f64) {
    assert!(
        rate_per_s.is_finite() && rate_per_s > 0.0,
        "{what}: rate_per_s must be finite and positive, got {rate_per_s}"
    );
}

#[cfg(test)]
mod test_support;
