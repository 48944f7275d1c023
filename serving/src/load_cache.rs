//! The files a sweep's cells share, each loaded once while the cells are validated (traces,
//! profiles, measured sets), and the ceilings in force meanwhile. Above `arrivals` and `cost`,
//! whose files it holds; every family's validation takes it (`Family::validate`).

use crate::arrivals::Trace;
use crate::cost::measured_steps::MeasuredSet;
use crate::cost::profile::Profile;
use crate::validate::limits::Limits;
use crate::validate::{FieldError, field_error};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// Files a sweep's cells share, loaded once, and the ceilings in force while they are validated.
#[derive(Default)]
pub struct LoadCache {
    /// The scenario's `[limits]`: a count that sizes an allocation during validation is checked
    /// against them where it is derived, before anything is allocated.
    pub limits: Limits,
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
