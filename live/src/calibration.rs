//! `expertsim live --calibrate`: measures a profile for the scenario's model shape on the live
//! run's own device before the run, sampling only the token counts and batch sizes the
//! scenario can use (`calibrate::scenario_points`) with the adaptive stopping rule, writes it,
//! and says where, so that the run is priced by it (the caller reloads the scenario with the
//! profile field pointing at the new file).

use crate::LiveError;
use crate::device::Kernels;
use calibrate::adaptive::StoppingRule;
use calibrate::pipeline::{CalibrateError, Plan};
use expertsim_scenario::scenario::ScenarioPlan;
use serde::Serialize;
use std::path::Path;
use std::time::Instant;

/// A profile measured by `--calibrate`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Calibrated {
    /// Where it was written.
    pub path: String,
    /// How the sampled ranges follow from the scenario.
    pub sampling: String,
    pub points: usize,
    pub repetitions: u64,
    /// Points that reached the maximum repetitions with their median still less precise.
    pub points_at_maximum: u32,
    pub seconds: f64,
}

/// Measures the profile of `plan`'s single cell on `kernels` (GEMM tile `tile`, decode
/// attention over `decode_context` cached tokens: the live run's) and writes it to `output`.
/// `log` gets the calibration's progress lines.
pub fn calibrate_for(
    kernels: &mut Kernels,
    plan: &ScenarioPlan,
    tile: usize,
    decode_context: usize,
    rule: StoppingRule,
    output: &Path,
    log: &mut dyn FnMut(&str),
) -> Result<Calibrated, LiveError> {
    let started = Instant::now();
    let sampling = calibrate::scenario_points::for_scenario(&plan.cells[0].scenario)
        .map_err(|e| LiveError::Unsupported(format!("--calibrate: {e}")))?;
    let mut calibration_plan = Plan::full();
    calibration_plan.tile = tile;
    calibration_plan.decode_context = decode_context;
    calibration_plan.stopping = rule;
    sampling.apply(&mut calibration_plan);
    log(&format!(
        "sampling for the scenario: {}",
        sampling.derivation
    ));
    let measured = calibrate::pipeline::calibrate(
        kernels.backend_mut(),
        &sampling.shape,
        &calibration_plan,
        log,
        true,
    )
    .map_err(|e| match e {
        CalibrateError::Backend(e) => LiveError::Backend(e),
        other => LiveError::Unsupported(format!("--calibrate: {other}")),
    })?;
    measured
        .save(output)
        .map_err(|e| LiveError::Write(e.to_string()))?;
    let c = &measured.calibration;
    Ok(Calibrated {
        path: output.display().to_string(),
        sampling: sampling.derivation,
        points: c.measurements.iter().map(|m| m.points.len()).sum(),
        repetitions: c.stopping.as_ref().map_or_else(
            || {
                c.measurements
                    .iter()
                    .map(|m| (m.points.len() as u64) * u64::from(c.repetitions))
                    .sum()
            },
            |s| s.total_repetitions,
        ),
        points_at_maximum: c.stopping.as_ref().map_or(0, |s| s.points_at_maximum),
        seconds: started.elapsed().as_secs_f64(),
    })
}
