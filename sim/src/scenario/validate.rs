//! Validation helpers every family uses: the field-level error the loader turns into
//! file:line:column, number checks, and the cache of files (traces, profiles) a sweep's cells share.

use crate::arrivals::Trace;
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
}
