//! Dense-decode profiles and the dense replica they price. A profile (`expertsim-calibrate
//! --dense-models` writes it) holds, per dense model scaled down as live mode runs it
//! ([`super::live_scale`]), the whole decode step's nanoseconds on a grid of kernel rows x
//! cached tokens per row, and the measured copy of the model's bytes. A step is priced by linear
//! interpolation over rows (past the last sample, the last segment's slope) at the two sampled
//! contexts around its own, then linearly between them (clamped to the sampled contexts):
//! [`ModelDecodeCost`].
//!
//! A dense replica priced from one (`replica.scheduler.profile` on a dense model; the Chimera and
//! MOSAIC live cases): a step is looked up at its rows (prompt and decoding rows alike) and its
//! attention spread evenly over them (every cached token once, a prompt chunk causally: half its
//! square). Live mode runs the same scaled-down model on the kernels (live/src/continuous.rs), so
//! the prediction and the measurement price the same work. One GPU per replica: the profile
//! times one device's step.

use super::live_scale::Scaling;
use crate::cost::curve::CostCurve;
use crate::cost::roofline::StepTokens;
use crate::cost::shape::DenseModelShape;
use crate::validate::{FieldError, field_error};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The `format` string of a dense-decode profile.
pub const DENSE_PROFILE_FORMAT: &str = "expertsim-dense-decode-profile/1";

/// A measured dense-decode profile file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DenseDecodeProfile {
    pub format: String,
    /// The device, as it names itself.
    pub device: String,
    pub backend: String,
    pub timing: String,
    pub tool_version: String,
    pub date: Option<String>,
    pub notes: String,
    pub scaling: Scaling,
    pub tile_tokens: u32,
    pub warmup: u32,
    pub repetitions: u32,
    pub models: Vec<DenseModelProfile>,
}

/// One scaled-down model's measurements.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DenseModelProfile {
    /// The shape as run (already scaled down).
    pub shape: DenseModelShape,
    /// bf16 weight bytes of that shape (what a load copies).
    pub weight_bytes: u64,
    /// Median nanoseconds of one host-to-device copy of `weight_bytes`, when measured.
    pub load_ns: Option<f64>,
    /// Sampled kernel rows (ascending).
    pub rows: Vec<u64>,
    /// Sampled cached tokens per row (ascending).
    pub contexts: Vec<u64>,
    /// Median nanoseconds of one whole decode step, `step_ns[context][row]`:
    /// `n_layers x block(rows, context) + head(rows)`.
    pub step_ns: Vec<Vec<f64>>,
}

impl DenseDecodeProfile {
    /// Reads and checks a profile file; the error is one line.
    pub fn load(path: &Path) -> Result<DenseDecodeProfile, String> {
        let text =
            crate::input::read_input_text(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let profile: DenseDecodeProfile =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        if profile.format != DENSE_PROFILE_FORMAT {
            return Err(format!(
                "{}: format {:?} is not {DENSE_PROFILE_FORMAT:?}",
                path.display(),
                profile.format
            ));
        }
        Ok(profile)
    }

    /// Writes the profile as pretty JSON (the parent folder is created).
    pub fn save(&self, path: &Path) -> Result<(), String> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let text = serde_json::to_string_pretty(self).map_err(|e| e.to_string())?;
        std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The pricing of the model that `scaling` makes of `shape`; the error names the shape.
    pub fn model_cost(&self, shape: &DenseModelShape) -> Result<ModelDecodeCost, String> {
        let scaled = self.scaling.apply(shape);
        let model = self
            .models
            .iter()
            .find(|m| m.shape == scaled)
            .ok_or_else(|| {
                format!(
                    "has no decode samples for {} at {} (it has {}); calibrate it with \
                 --dense-models",
                    shape.name,
                    self.scaling.describe(),
                    self.models
                        .iter()
                        .map(|m| m.shape.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })?;
        ModelDecodeCost::new(model)
    }
}

/// One model's step and load prices, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelDecodeCost {
    /// (cached tokens per row, rows -> ns), by ascending context.
    by_context: Vec<(u64, CostCurve)>,
    pub load_ns: Option<f64>,
}

impl ModelDecodeCost {
    fn new(model: &DenseModelProfile) -> Result<ModelDecodeCost, String> {
        let name = &model.shape.name;
        if model.contexts.is_empty() || !model.contexts.windows(2).all(|w| w[0] < w[1]) {
            return Err(format!("{name}: contexts must be non-empty and ascending"));
        }
        if model.step_ns.len() != model.contexts.len() {
            return Err(format!(
                "{name}: {} step rows for {} contexts",
                model.step_ns.len(),
                model.contexts.len()
            ));
        }
        let mut by_context = Vec::new();
        for (&context, row) in model.contexts.iter().zip(&model.step_ns) {
            if row.len() != model.rows.len() {
                return Err(format!(
                    "{name}: context {context} has {} samples for {} rows",
                    row.len(),
                    model.rows.len()
                ));
            }
            let samples = model
                .rows
                .iter()
                .map(|&r| r as f64)
                .zip(row.iter().copied());
            let curve = CostCurve::new(samples.collect())
                .map_err(|e| format!("{name}: context {context}: {e}"))?;
            curve
                .check_measured()
                .map_err(|e| format!("{name}: context {context}: {e}"))?;
            by_context.push((context, curve));
        }
        if let Some(ns) = model.load_ns
            && !(ns.is_finite() && (0.0..=crate::cost::curve::MAX_MEASURED_NANOS).contains(&ns))
        {
            return Err(format!(
                "{name}: load_ns must be finite, >= 0 and at most {:e} (one hour), got {ns}",
                crate::cost::curve::MAX_MEASURED_NANOS
            ));
        }
        Ok(ModelDecodeCost {
            by_context,
            load_ns: model.load_ns,
        })
    }

    /// Nanoseconds of a step of `rows` kernel rows over `context` cached tokens per row.
    pub fn step_ns(&self, rows: u64, context: u64) -> f64 {
        let at = |i: usize| self.by_context[i].1.at(rows as f64);
        let upper = self.by_context.partition_point(|(c, _)| *c < context);
        if upper == 0 {
            return at(0);
        }
        if upper == self.by_context.len() {
            return at(upper - 1);
        }
        let (c0, c1) = (self.by_context[upper - 1].0, self.by_context[upper].0);
        let w = (context - c0) as f64 / (c1 - c0) as f64;
        let (y0, y1) = (at(upper - 1), at(upper));
        if w == 1.0 { y1 } else { y0 + (y1 - y0) * w }
    }
}

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
        shape: &DenseModelShape,
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
