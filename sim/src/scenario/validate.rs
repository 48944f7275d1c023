//! Validation helpers every family uses: the field-level error the loader turns into
//! file:line:column, number checks, and the cache of files (traces, profiles) a sweep's cells share.

use crate::arrivals::Trace;
use crate::cost::measured_steps::MeasuredSet;
use crate::cost::profile::Profile;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

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

/// `value` if it is at least 1.
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

pub fn at_least_one(path: &str, value: usize) -> Result<usize, FieldError> {
    if value >= 1 {
        Ok(value)
    } else {
        Err(field_error(path, "must be at least 1, got 0"))
    }
}

/// Files a sweep's cells share, loaded once.
#[derive(Default)]
pub struct LoadCache {
    pub traces: HashMap<PathBuf, Arc<Trace>>,
    pub profiles: HashMap<String, Arc<Profile>>,
    /// Measured sets by folder.
    pub measured_sets: HashMap<PathBuf, Arc<MeasuredSet>>,
}

/// The measured profile set `name` a scenario's `field` names (`profiles/<name>/`, see
/// `MeasuredSet::find`, from the scenario's folder `base_dir`), loaded once per sweep; an error
/// names the field.
pub fn measured_set(
    field: &str,
    name: &str,
    base_dir: &std::path::Path,
    cache: &mut LoadCache,
) -> Result<Arc<MeasuredSet>, FieldError> {
    let dir = MeasuredSet::find(name, base_dir).map_err(|e| field_error(field, e))?;
    if let Some(set) = cache.measured_sets.get(&dir) {
        return Ok(set.clone());
    }
    let set = Arc::new(MeasuredSet::load(name, &dir).map_err(|e| field_error(field, e))?);
    cache.measured_sets.insert(dir, set.clone());
    Ok(set)
}

/// Checks that the measured set `set` (named by `field`) was measured on `gpu`, the GPU the
/// scenario's `gpu_field` names: a measured set prices only its own GPU.
pub fn measured_on(
    field: &str,
    set: &MeasuredSet,
    gpu_field: &str,
    gpu: &crate::cost::GpuSpec,
) -> Result<(), FieldError> {
    if set.ops.gpu.name == gpu.name {
        return Ok(());
    }
    Err(field_error(
        field,
        format!(
            "`{}` was measured on {}, but {gpu_field} is {}; name that GPU or another set",
            set.name, set.ops.gpu.name, gpu.name
        ),
    ))
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
            format!("must be a positive duration, got {seconds}"),
        ));
    }
    if seconds * 1e9 < 0.5 {
        return Err(field_error(
            path,
            format!(
                "{seconds} s rounds to 0 ns (simulated time is integer nanoseconds; the smallest \
                 duration is 1 ns)"
            ),
        ));
    }
    if seconds > max_seconds {
        return Err(field_error(
            path,
            format!(
                "{seconds:e} s is past the longest simulated span of {max_seconds:e} s \
                 (limits.max_sim_seconds; docs/limits.md)"
            ),
        ));
    }
    Ok(crate::time::SimDuration::from_secs_f64(seconds))
}

/// The largest input file (scenario, trace, profile) read: inputs are read whole into memory.
pub const MAX_INPUT_FILE_BYTES: u64 = 1 << 30;

/// Opens a user-named input file for reading: it must be a regular file (not a device or a
/// pipe, which could stream forever) of at most `MAX_INPUT_FILE_BYTES`; reads stop there.
pub fn open_input(path: &std::path::Path) -> std::io::Result<std::io::Take<std::fs::File>> {
    use std::io::{Error, ErrorKind, Read};
    let metadata = std::fs::metadata(path)?;
    if !metadata.is_file() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "not a regular file (a device, pipe or folder is not read)",
        ));
    }
    if metadata.len() > MAX_INPUT_FILE_BYTES {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "{} bytes, above the {MAX_INPUT_FILE_BYTES}-byte limit on input files",
                metadata.len()
            ),
        ));
    }
    Ok(std::fs::File::open(path)?.take(MAX_INPUT_FILE_BYTES))
}

/// Reads a user-named input file (`open_input`) as UTF-8 text; a bad byte is reported with its
/// line.
pub fn read_input_text(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    open_input(path)?.read_to_end(&mut bytes)?;
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let line = e.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count() + 1;
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("line {line}: not UTF-8 text (invalid byte at offset {at})"),
        )
    })
}

/// `read_input_text` with the file named in the error.
pub fn read_input_file(path: &std::path::Path) -> Result<String, String> {
    read_input_text(path).map_err(|e| format!("{}: {e}", path.display()))
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
    fn only_regular_utf8_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("latin1.csv");
        std::fs::write(&bad, b"a,b\n1,\xe9\n").unwrap();
        let err = read_input_file(&bad).unwrap_err();
        assert!(err.contains("latin1.csv: line 2: not UTF-8"), "{err}");
        assert!(
            read_input_file(dir.path())
                .unwrap_err()
                .contains("not a regular file")
        );
        assert!(
            read_input_file(std::path::Path::new("/dev/zero"))
                .unwrap_err()
                .contains("not a regular file")
        );
    }

    #[test]
    fn names_are_single_file_name_components() {
        assert!(file_name_component("name", "caps-quick").is_ok());
        for bad in ["", "..", ".", "../x", "/abs", "a/b", "a\\b", "x\u{1}"] {
            assert!(file_name_component("name", bad).is_err(), "{bad:?}");
        }
    }
}
