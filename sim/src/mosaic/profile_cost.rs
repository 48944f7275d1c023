//! MOSAIC session costs priced from a measured dense-decode profile (`[serving] profile`),
//! as `expertsim-calibrate --dense-models` writes it: per scaled-down model (see
//! [`super::live_scale`]) the whole decode step's nanoseconds on a grid of kernel rows x
//! cached tokens per row, and the measured copy of the model's bytes. A step is priced by
//! linear interpolation over rows (past the last sample, the last segment's slope) at the two
//! sampled contexts around its own, then linearly between them (clamped to the sampled
//! contexts): [`ProfileStepCost`], a `serving::StepCost`; a load is the measured copy, or the
//! scenario's `load_s` when the profile has none.

use super::live_scale::{Scaling, kernel_rows_and_context};
use crate::cost::curve::CostCurve;
use crate::cost::shape::DenseModelShape;
use crate::serving::{CostSource, StepBreakdown, StepCost, StepTime, StepWork};
use crate::time::SimDuration;
use serde::{Deserialize, Serialize};
use std::path::Path;

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

/// A model's steps priced from its measured profile: the step's kernel rows and cached tokens
/// per row (`live_scale::kernel_rows_and_context`) looked up in the sampled grid.
pub struct ProfileStepCost<'a>(pub &'a ModelDecodeCost);

impl StepCost for ProfileStepCost<'_> {
    fn price(&mut self, work: &StepWork<'_>) -> StepTime {
        let (rows, context) = kernel_rows_and_context(work);
        StepTime {
            duration: SimDuration(self.0.step_ns(rows, context).round() as u64),
            breakdown: StepBreakdown::default(),
            source: CostSource::Measured,
        }
    }
}

/// The scenario's profile pricing: the device, and per expert its model's costs.
#[derive(Clone, Debug, PartialEq)]
pub struct MosaicDecodeProfile {
    pub device: String,
    pub path: String,
    /// How the profile's models are scaled down from the experts' (live mode runs them so).
    pub scaling: Scaling,
    pub experts: Vec<ModelDecodeCost>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mosaic::{MosaicScenario, SessionPricing, SimulatedPricing};
    use crate::scenario::load_str;

    const PROFILE: &str = "../../profiles/measured/amd-epyc_mosaic-live-dense.json";

    /// The live MOSAIC scenario with `serving.profile` set to `profile`.
    fn live_scenario(profile: &str) -> Result<MosaicScenario, String> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/live/mosaic.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let set = format!("serving.profile=\"{profile}\"");
        let plan = load_str(&path, &text, &[set]).map_err(|e| e.to_string())?;
        let cell = &plan.cells[0].scenario;
        match cell.get::<MosaicScenario>() {
            Some(s) => Ok(s.clone()),
            None => panic!("not MOSAIC: {:?}", cell.family()),
        }
    }

    fn committed_profile() -> DenseDecodeProfile {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/live");
        DenseDecodeProfile::load(&path.join(PROFILE)).unwrap()
    }

    #[test]
    fn a_measured_profile_prices_a_sampled_step_and_the_load_exactly() {
        let s = live_scenario(PROFILE).unwrap();
        let file = committed_profile();
        let expert = 1;
        let model = file
            .models
            .iter()
            .find(|m| m.shape == file.scaling.apply(&s.experts[expert].shape))
            .unwrap();
        let (ci, ri) = (2, 3);
        let (context, rows) = (model.contexts[ci], model.rows[ri]);
        // `rows` sequences decoding over `context` cached tokens each, no prefill.
        let step = StepWork {
            requests: rows,
            decode_tokens: rows,
            context_tokens: rows * context,
            ..StepWork::default()
        };
        let mut pricing = SimulatedPricing::of(&s);
        let time = pricing.steps(0, expert).price(&step);
        assert_eq!(time.duration.0, model.step_ns[ci][ri].round() as u64);
        assert_eq!(time.source, CostSource::Measured);
        assert_eq!(
            pricing.load(0, expert).0,
            model.load_ns.unwrap().round() as u64
        );
        // Halfway between two sampled contexts: halfway between their samples.
        let p = &s.decode_profile.as_ref().unwrap().experts[expert];
        let (c0, c1) = (model.contexts[0], model.contexts[1]);
        if (c1 - c0) % 2 == 0 {
            let mid = p.step_ns(rows, (c0 + c1) / 2);
            let expected = 0.5 * (model.step_ns[0][ri] + model.step_ns[1][ri]);
            assert!(
                (mid - expected).abs() <= 1e-9 * expected,
                "{mid} {expected}"
            );
        }
    }

    #[test]
    fn a_profile_of_another_shape_is_refused_naming_the_key() {
        let mut other = committed_profile();
        other.scaling.widths = 32;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w32.json");
        other.save(&path).unwrap();
        let error = live_scenario(path.to_str().unwrap()).unwrap_err();
        assert!(
            error.contains("serving.profile") && error.contains("Qwen/Qwen2.5-7B-Instruct"),
            "{error}"
        );
        let missing = live_scenario("none.json").unwrap_err();
        assert!(
            missing.contains("serving.profile") && missing.contains("none.json"),
            "{missing}"
        );
    }
}
