//! Simulated time: integer nanoseconds, so event ordering never depends on float rounding.
//!
//! A user-derived span (a configured duration, a load time, a horizon) is converted with
//! `SimDuration::try_from_secs_f64`, which returns an error instead of panicking when the value
//! is not a finite non-negative number or does not fit in integer nanoseconds; validation names
//! the field. Arithmetic saturates at `SimTime::MAX` instead of panicking: a time that reached it
//! has run out of simulated time, which `crate::engine` reports as an error of the run.

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

/// Why a number of seconds is not a simulated duration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TimeError {
    /// NaN, infinite or negative.
    NotAFiniteNonNegative(f64),
    /// Past what integer nanoseconds hold (about 584 years).
    TooLong(f64),
}

impl fmt::Display for TimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimeError::NotAFiniteNonNegative(s) => {
                write!(f, "{s} s is not a finite non-negative duration")
            }
            TimeError::TooLong(s) => write!(
                f,
                "{s:e} s does not fit in simulated time (integer nanoseconds end after {:e} s)",
                SimTime::MAX.as_secs_f64()
            ),
        }
    }
}

impl std::error::Error for TimeError {}

impl SimTime {
    pub const ZERO: SimTime = SimTime(0);
    /// The last representable instant: a time that saturated here ran out of simulated time.
    pub const MAX: SimTime = SimTime(u64::MAX);

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
    #[inline]
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
    /// `seconds` rounded to the nearest nanosecond, or why it is not a duration.
    pub fn try_from_secs_f64(seconds: f64) -> Result<SimDuration, TimeError> {
        if !(seconds.is_finite() && seconds >= 0.0) {
            return Err(TimeError::NotAFiniteNonNegative(seconds));
        }
        let nanos = (seconds * 1e9).round();
        if nanos >= u64::MAX as f64 {
            return Err(TimeError::TooLong(seconds));
        }
        Ok(SimDuration(nanos as u64))
    }
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 * 1e-9
    }
    pub fn as_millis_f64(self) -> f64 {
        self.0 as f64 * 1e-6
    }
}

/// Rounds a non-negative number of seconds to the nearest nanosecond, saturating at the last
/// one. For values validation already bounded; user-derived values go through
/// `SimDuration::try_from_secs_f64`.
fn secs_to_nanos(seconds: f64) -> u64 {
    assert!(
        !seconds.is_nan() && seconds >= 0.0,
        "time must be non-negative, got {seconds} s"
    );
    (seconds * 1e9).round() as u64
}

/// Saturates at `SimTime::MAX` (the engine reports a run whose events reach it).
impl Add<SimDuration> for SimTime {
    type Output = SimTime;
    #[inline]
    fn add(self, rhs: SimDuration) -> SimTime {
        SimTime(self.0.saturating_add(rhs.0))
    }
}
impl AddAssign<SimDuration> for SimTime {
    #[inline]
    fn add_assign(&mut self, rhs: SimDuration) {
        *self = *self + rhs;
    }
}
impl Add for SimDuration {
    type Output = SimDuration;
    #[inline]
    fn add(self, rhs: SimDuration) -> SimDuration {
        SimDuration(self.0.saturating_add(rhs.0))
    }
}
impl AddAssign for SimDuration {
    #[inline]
    fn add_assign(&mut self, rhs: SimDuration) {
        *self = *self + rhs;
    }
}
impl Sub for SimTime {
    type Output = SimDuration;
    #[inline]
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
        assert_eq!(SimDuration::from_secs_f64(0.0000000004).0, 0);
        assert_eq!(SimDuration::from_secs_f64(0.0000000006).0, 1);
        let t = SimTime(10) + SimDuration(5);
        assert_eq!(t - SimTime(3), SimDuration(12));
    }

    #[test]
    fn user_derived_durations_are_errors_not_panics() {
        assert_eq!(
            SimDuration::try_from_secs_f64(2.5),
            Ok(SimDuration(2_500_000_000))
        );
        for bad in [f64::NAN, -1.0, f64::INFINITY] {
            assert!(matches!(
                SimDuration::try_from_secs_f64(bad),
                Err(TimeError::NotAFiniteNonNegative(_))
            ));
        }
        for huge in [1e308, 9.223372036854776e18, 1.9e10] {
            let err = SimDuration::try_from_secs_f64(huge).unwrap_err();
            assert_eq!(err, TimeError::TooLong(huge));
            assert!(err.to_string().contains("does not fit"), "{err}");
        }
    }

    #[test]
    fn arithmetic_saturates_at_the_last_instant() {
        assert_eq!(SimTime(u64::MAX - 1) + SimDuration(5), SimTime::MAX);
        assert_eq!(
            SimDuration(u64::MAX) + SimDuration(1),
            SimDuration(u64::MAX)
        );
    }

    #[test]
    #[should_panic(expected = "is after")]
    fn since_rejects_reversed_order() {
        let _ = SimTime(1).since(SimTime(2));
    }
}
