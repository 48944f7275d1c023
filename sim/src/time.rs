//! Simulated time: integer nanoseconds, so event ordering never depends on float rounding.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::{Add, AddAssign, Sub};

/// A point in simulated time, in nanoseconds since the start of the run.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct SimTime(pub u64);

/// A span of simulated time, in nanoseconds.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct SimDuration(pub u64);

impl SimTime {
    pub const ZERO: SimTime = SimTime(0);

    pub fn from_secs_f64(seconds: f64) -> SimTime {
        SimTime(secs_to_nanos(seconds))
    }
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 * 1e-9
    }
    pub fn as_millis_f64(self) -> f64 {
        self.0 as f64 * 1e-6
    }
    /// Time elapsed since `earlier`; `earlier` must not be later than `self`.
    pub fn since(self, earlier: SimTime) -> SimDuration {
        assert!(
            earlier <= self,
            "SimTime::since: {earlier:?} is after {self:?}"
        );
        SimDuration(self.0 - earlier.0)
    }
}

impl SimDuration {
    pub const ZERO: SimDuration = SimDuration(0);

    pub fn from_secs_f64(seconds: f64) -> SimDuration {
        SimDuration(secs_to_nanos(seconds))
    }
    pub fn from_millis_f64(millis: f64) -> SimDuration {
        SimDuration(secs_to_nanos(millis * 1e-3))
    }
    pub fn from_micros_f64(micros: f64) -> SimDuration {
        SimDuration(secs_to_nanos(micros * 1e-6))
    }
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 * 1e-9
    }
    pub fn as_millis_f64(self) -> f64 {
        self.0 as f64 * 1e-6
    }
}

/// Rounds a non-negative, finite number of seconds to the nearest nanosecond.
fn secs_to_nanos(seconds: f64) -> u64 {
    assert!(
        seconds.is_finite() && seconds >= 0.0,
        "time must be finite and non-negative, got {seconds} s"
    );
    (seconds * 1e9).round() as u64
}

impl Add<SimDuration> for SimTime {
    type Output = SimTime;
    fn add(self, rhs: SimDuration) -> SimTime {
        SimTime(self.0.checked_add(rhs.0).expect("SimTime overflow"))
    }
}
impl AddAssign<SimDuration> for SimTime {
    fn add_assign(&mut self, rhs: SimDuration) {
        *self = *self + rhs;
    }
}
impl Add for SimDuration {
    type Output = SimDuration;
    fn add(self, rhs: SimDuration) -> SimDuration {
        SimDuration(self.0 + rhs.0)
    }
}
impl AddAssign for SimDuration {
    fn add_assign(&mut self, rhs: SimDuration) {
        self.0 += rhs.0;
    }
}
impl Sub for SimTime {
    type Output = SimDuration;
    fn sub(self, rhs: SimTime) -> SimDuration {
        self.since(rhs)
    }
}
impl fmt::Display for SimTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.6} s", self.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_round_to_nearest_nanosecond() {
        assert_eq!(SimTime::from_secs_f64(1.5).0, 1_500_000_000);
        assert_eq!(SimDuration::from_millis_f64(0.0000004).0, 0);
        assert_eq!(SimDuration::from_millis_f64(0.0000006).0, 1);
        assert_eq!(SimDuration::from_micros_f64(2.5).0, 2_500);
        let t = SimTime(10) + SimDuration(5);
        assert_eq!(t - SimTime(3), SimDuration(12));
    }

    #[test]
    #[should_panic(expected = "is after")]
    fn since_rejects_reversed_order() {
        let _ = SimTime(1).since(SimTime(2));
    }
}
