//! Loading a model onto its device: the weights' bytes over the load path's bandwidth (storage
//! to host to GPU, with the serving engine's start-up folded into the effective rate). A
//! measured profile overrides it with a measured copy where it has one (docs/cost-model.md,
//! "Model load").

use expertsim_core::time::SimDuration;
use serde::Serialize;

/// The path a model's weights take onto a device, as one effective bandwidth.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct LoadPath {
    /// Bytes per second of weights through the whole path.
    pub bandwidth_bytes_per_s: f64,
}

impl LoadPath {
    /// Seconds to load `bytes` of weights.
    pub fn seconds(&self, bytes: f64) -> f64 {
        bytes / self.bandwidth_bytes_per_s
    }

    /// The load of `bytes` of weights, rounded to whole nanoseconds.
    pub fn price(&self, bytes: f64) -> SimDuration {
        SimDuration::from_secs_f64(self.seconds(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 16 GB at 0.4 GB/s: 40 s; half the bytes, half the time.
    #[test]
    fn a_load_is_bytes_over_bandwidth() {
        let path = LoadPath {
            bandwidth_bytes_per_s: 0.4e9,
        };
        assert_eq!(path.price(16e9), SimDuration(40_000_000_000));
        assert_eq!(path.price(8e9), SimDuration(20_000_000_000));
        assert_eq!(path.price(0.0), SimDuration::ZERO);
    }
}
