//! A dense replica priced from a measured dense-decode profile (`replica.scheduler.profile` on
//! a dense model, the file `expertsim-calibrate --dense-models` writes; Chimera's live case):
//! the profile holds the whole step's nanoseconds of the model scaled down as it was measured
//! (`Scaling`), on a grid of kernel rows x cached tokens per row, and a step is looked up at its
//! rows (prompt and decoding rows alike) and its attention spread evenly over them (every
//! cached token once, a prompt chunk causally: half its square), interpolated as
//! `mosaic::profile_cost` does. Live mode runs the same scaled-down model on the kernels
//! (live/src/continuous.rs), so the prediction and the measurement price the same work. One
//! GPU per replica: the profile times one device's step.

use crate::cost::roofline::StepTokens;
use crate::mosaic::live_scale::Scaling;
use crate::mosaic::profile_cost::{DenseDecodeProfile, ModelDecodeCost};
use crate::validate::{FieldError, field_error};
use std::path::{Path, PathBuf};

/// A dense model's steps as its measured dense-decode profile prices them.
#[derive(Clone, Debug, PartialEq)]
pub struct DenseProfile {
    /// The profile file, resolved.
    pub path: PathBuf,
    /// The device that measured it, as it names itself.
    pub device: String,
    /// How the profile's model is scaled down from the replica's (live mode runs it so).
    pub scaling: Scaling,
    cost: ModelDecodeCost,
}

impl DenseProfile {
    /// The profile `file` (replica table `p`'s `scheduler.profile`, relative to `base_dir`) of
    /// the model `shape`; the error names the field and says what the profile lacks.
    pub fn validate(
        p: &str,
        file: &str,
        shape: &crate::cost::shape::DenseModelShape,
        base_dir: &Path,
    ) -> Result<DenseProfile, FieldError> {
        let field = format!("{p}.scheduler.profile");
        let path = crate::validate::resolve_profile(&field, file, base_dir)?;
        let profile = DenseDecodeProfile::load(&path).map_err(|e| {
            field_error(
                &field,
                format!(
                    "a dense model is priced from a dense-decode profile (expertsim-calibrate \
                     --dense-models): {e}"
                ),
            )
        })?;
        let cost = profile
            .model_cost(shape)
            .map_err(|e| field_error(&field, format!("{}: {e}", path.display())))?;
        Ok(DenseProfile {
            path,
            device: profile.device,
            scaling: profile.scaling,
            cost,
        })
    }

    /// Nanoseconds of one pass over `tokens`: the profile at its rows and at the attended tokens
    /// (the cached ones plus half the squared prompt chunks) per row.
    pub fn pass_ns(&self, tokens: &StepTokens) -> f64 {
        let rows = tokens.rows;
        let attended = tokens.context_tokens + tokens.prefill_square as u64 / 2;
        self.cost.step_ns(rows, attended.div_ceil(rows.max(1)))
    }
}
