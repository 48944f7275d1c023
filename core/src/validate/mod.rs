//! The validation vocabulary every module checks scenario values with, below everything that
//! reads a scenario table: the field-level error the loader turns into file:line:column, number
//! and duration checks, profile names, file-name components, and the ceilings of `[limits]`
//! (`limits`). It names no cost model (the one check that reads one, a measured set's GPU, is
//! `expertsim_cost::measured_steps::measured_on`); the loader (`expertsim_scenario::scenario`) and the cache of
//! files a sweep's cells share (`expertsim_scenario::load_cache`) sit above.

pub mod limits;

use limits::MAX_SIM_SECONDS_CEILING;
use std::path::PathBuf;

/// A field-level problem found by validation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub path: String,
    pub message: String,
}

/// A `FieldError` at `path`.
pub fn field_error(path: &str, message: impl Into<String>) -> FieldError {
    FieldError {
        path: path.to_string(),
        message: message.into(),
    }
}

/// `value` if it is finite and positive.
pub fn positive(path: &str, value: f64) -> Result<f64, FieldError> {
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(field_error(
            path,
            format!("must be a positive number, got {value}"),
        ))
    }
}

/// `value` if finite and at least 0, else a `FieldError` at `path`.
pub fn non_negative(path: &str, value: f64) -> Result<f64, FieldError> {
    if value.is_finite() && value >= 0.0 {
        Ok(value)
    } else {
        Err(field_error(
            path,
            format!("must be finite and >= 0, got {value}"),
        ))
    }
}

/// `value` if it is at least 1.
pub fn at_least_one(path: &str, value: usize) -> Result<usize, FieldError> {
    if value >= 1 {
        Ok(value)
    } else {
        Err(field_error(path, "must be at least 1, got 0"))
    }
}

/// A duration of `seconds` as simulated time: finite, positive, at least one nanosecond once
/// rounded (simulated time is integer nanoseconds) and inside `max_seconds`.
pub fn duration(
    path: &str,
    seconds: f64,
    max_seconds: f64,
) -> Result<crate::time::SimDuration, FieldError> {
    if !(seconds.is_finite() && seconds > 0.0) {
        return Err(field_error(
            path,
            format!("must be a positive duration, got {seconds:e}"),
        ));
    }
    if seconds * 1e9 < 0.5 {
        return Err(field_error(
            path,
            format!(
                "{seconds:e} s rounds to 0 ns (simulated time is integer nanoseconds; the \
                 smallest duration is 1 ns)"
            ),
        ));
    }
    if seconds > max_seconds {
        return Err(field_error(
            path,
            format!(
                "{seconds:e} s is past the longest simulated span of {max_seconds:e} s \
                 (docs/limits.md)"
            ),
        ));
    }
    crate::time::SimDuration::try_from_secs_f64(seconds)
        .map_err(|e| field_error(path, e.to_string()))
}

/// A span of `seconds` that may be 0 (a load that takes no time, an overhead turned off):
/// finite, non-negative and at most `MAX_SIM_SECONDS_CEILING`, the longest duration a scenario
/// may state (docs/limits.md).
pub fn span(path: &str, seconds: f64) -> Result<f64, FieldError> {
    let seconds = non_negative(path, seconds)?;
    if seconds > MAX_SIM_SECONDS_CEILING {
        return Err(field_error(
            path,
            format!(
                "{seconds:e} s is past the longest duration a scenario may state, \
                 {MAX_SIM_SECONDS_CEILING:e} s (docs/limits.md)"
            ),
        ));
    }
    Ok(seconds)
}

/// The most arrivals per second a rate may ask for: a mean gap of 1 µs, a thousand times the
/// 1 ns resolution of simulated time, so that rounding arrival times to nanoseconds leaves the
/// process what it was asked to be.
pub const MAX_RATE_PER_S: f64 = 1e6;

/// An arrival rate (requests per second): positive, at most `MAX_RATE_PER_S`, and with a mean
/// gap no longer than the longest duration a scenario may state.
pub fn rate(path: &str, per_s: f64) -> Result<f64, FieldError> {
    let per_s = positive(path, per_s)?;
    if per_s > MAX_RATE_PER_S {
        return Err(field_error(
            path,
            format!(
                "{per_s:e} per second puts arrivals less than 1 µs apart; at most \
                 {MAX_RATE_PER_S:e} (simulated time is integer nanoseconds; docs/limits.md)"
            ),
        ));
    }
    if 1.0 / per_s > MAX_SIM_SECONDS_CEILING {
        return Err(field_error(
            path,
            format!(
                "{per_s:e} per second is a mean gap of {:e} s, past the longest duration a \
                 scenario may state, {MAX_SIM_SECONDS_CEILING:e} s (docs/limits.md)",
                1.0 / per_s
            ),
        ));
    }
    Ok(per_s)
}

/// The slowest a GPU may be relative to its datasheet (a speed factor divides every duration it
/// prices, so a factor near 0 would push a step past what simulated time holds).
pub const MIN_SPEED_FACTOR: f64 = 1e-3;

/// A GPU's relative speed: finite, in `[MIN_SPEED_FACTOR, max]`.
pub fn speed_factor(path: &str, value: f64, max: f64) -> Result<f64, FieldError> {
    if value.is_finite() && (MIN_SPEED_FACTOR..=max).contains(&value) {
        Ok(value)
    } else {
        Err(field_error(
            path,
            format!(
                "must lie in [{MIN_SPEED_FACTOR}, {max}] (a GPU at 1/1000 of its datasheet \
                 speed at the slowest; the factor divides every duration), got {value}"
            ),
        ))
    }
}

/// Where profiles named without a path are looked for, in order: `$EXPERTSIM_PROFILE_DIR`, then
/// `profiles/measured` and `profiles/analytic` under the working directory.
fn profile_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("EXPERTSIM_PROFILE_DIR")
        .map(Into::into)
        .into_iter()
        .collect();
    dirs.push("profiles/measured".into());
    dirs.push("profiles/analytic".into());
    dirs
}

/// A profile field's value as a file: a path (relative to the scenario's folder `base_dir`) when
/// it contains a `/` or ends in `.json`; otherwise a profile name, `<name>.json` in the first of
/// `profile_dirs` that has it. Every family's profile field goes through here.
pub fn resolve_profile(
    field: &str,
    value: &str,
    base_dir: &std::path::Path,
) -> Result<PathBuf, FieldError> {
    if value.contains('/') || value.ends_with(".json") {
        return Ok(base_dir.join(value));
    }
    let dirs = profile_dirs();
    for dir in &dirs {
        let candidate = dir.join(format!("{value}.json"));
        if candidate.is_file() {
            return Ok(std::path::absolute(&candidate).unwrap_or(candidate));
        }
    }
    let searched: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    Err(field_error(
        field,
        format!(
            "no profile named `{value}` (looked for {value}.json in {})",
            searched.join(", ")
        ),
    ))
}

/// `name` if it can be one component of a file name: not empty, no path separator, not `.` or
/// `..`, no control character. Scenario and figure names become folder and file names.
pub fn file_name_component(path: &str, name: &str) -> Result<(), FieldError> {
    let bad = if name.is_empty() {
        Some("must not be empty")
    } else if name == "." || name == ".." {
        Some("must not be `.` or `..`")
    } else if name.contains(['/', '\\']) {
        Some("must not contain a path separator")
    } else if name.chars().any(char::is_control) {
        Some("must not contain control characters")
    } else {
        None
    };
    match bad {
        Some(why) => Err(field_error(
            path,
            format!("{why}: it names a file or folder of the output, got {name:?}"),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_that_round_to_zero_or_pass_the_horizon_are_refused() {
        assert_eq!(duration("d", 1e-9, 1e7).unwrap().0, 1);
        for bad in [4e-13, 1e-300, 0.0, -1.0, f64::NAN, f64::INFINITY, 1e300] {
            assert!(duration("d", bad, 1e7).is_err(), "{bad}");
        }
        assert!(
            duration("d", 1e-10, 1e7)
                .unwrap_err()
                .message
                .contains("0 ns")
        );
    }

    #[test]
    fn spans_rates_and_speed_factors_stay_inside_simulated_time() {
        assert_eq!(span("s", 0.0), Ok(0.0));
        for bad in [-1.0, f64::NAN, 1e9, 1e308, 9.223372036854776e18] {
            assert!(span("s", bad).is_err(), "{bad}");
        }
        assert!(span("s", 1e9).unwrap_err().message.contains("1e8"));
        assert_eq!(rate("r", 150.0), Ok(150.0));
        for bad in [0.0, 1e9, 1e308, 1e-9, f64::INFINITY] {
            assert!(rate("r", bad).is_err(), "{bad}");
        }
        assert_eq!(speed_factor("f", 0.8, 10.0), Ok(0.8));
        for bad in [1e-300, 0.0, 11.0, f64::NAN] {
            assert_eq!(speed_factor("f", bad, 10.0).unwrap_err().path, "f", "{bad}");
        }
    }

    #[test]
    fn names_are_single_file_name_components() {
        assert!(file_name_component("name", "caps-quick").is_ok());
        for bad in ["", "..", ".", "../x", "/abs", "a/b", "a\\b", "x\u{1}"] {
            assert!(file_name_component("name", bad).is_err(), "{bad:?}");
        }
    }
}
