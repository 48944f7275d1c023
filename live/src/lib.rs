//! expertsim live mode: a scenario's own scheduler code runs with a live step executor in place
//! of the simulated one, so every batch, mapping and placement is decided exactly as in
//! `expertsim run`, while each step is executed on the kernels (CPU references or CUDA) and
//! timed. The fidelity report sets every step's predicted time beside its measured time.
//!
//! Families: Chimera (`chimera`), GEM (`gem`) and CAPS (`caps`), through the serving layer's
//! one step-cost seam `sim::serving::step::StepCost`, wrapped once by `step::LiveStep`;
//! ExpertWeave (`expertweave`, through `sim::expertweave::EwStepCost`) and MOSAIC (`mosaic`,
//! through `sim::mosaic::SessionCost`). The last two move onto `step::LiveStep` as their
//! families move onto the serving replica.
//!
//! Before the run, `probe` checks that the scenario's measured profile describes the device
//! (a few of its points timed again), and `calibration` can measure a profile for the scenario
//! on the device first (`expertsim live --calibrate`).

pub mod calibration;
pub mod caps;
pub mod chimera;
pub mod device;
pub mod expertweave;
pub mod fidelity;
pub mod gem;
pub mod mosaic;
pub mod probe;
pub mod report;
pub mod step;

use device::Kernels;
use fidelity::{ErrorSummary, MetricPair, StepRecord, metric_pairs};
use kernels::BackendError;
pub use kernels::BackendKind;
use serde::Serialize;
use sim::metrics::RunOutput;
use sim::runner::Policies;
use sim::scenario::{Scenario, ScenarioPlan};
use std::time::Instant;

/// What advances simulated time after a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Clock {
    /// The measured duration (default): the live run's metrics are what the device did.
    Measured,
    /// The predicted duration, measuring alongside: the schedule is the simulated run's step
    /// for step, whatever the device does (used to check that decisions are identical).
    Predicted,
}

/// How to run live.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveOptions {
    pub backend: BackendKind,
    /// CUDA device ordinal.
    pub device: usize,
    /// Count host work in each step's duration (wall clock around the whole step).
    pub realtime: bool,
    pub clock: Clock,
    /// GEMM tile, as the profile in use was measured with.
    pub tile: usize,
    /// KV-cache tokens per sequence in decode steps, as the profile in use was measured with.
    pub decode_context: usize,
    /// Timed runs per kernel launch; the median is the launch's time.
    pub repetitions: usize,
}

/// Why a live run could not be done.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// The scenario asks for something live mode does not run (exit code 2).
    #[error("{0}")]
    Unsupported(String),
    /// The backend cannot run (no GPU, no driver, a kernel failure; exit code 1).
    #[error("backend: {0}")]
    Backend(#[from] BackendError),
    /// A file (the profile `--calibrate` measured) cannot be written (exit code 1).
    #[error("{0}")]
    Write(String),
}

impl LiveError {
    /// The process exit code: 2 for a scenario live mode cannot run, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            LiveError::Unsupported(_) => 2,
            LiveError::Backend(_) | LiveError::Write(_) => 1,
        }
    }
}

/// Whether the simulated and the live run decided the same, and how that was compared.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Decisions {
    pub compared: String,
    pub identical: bool,
    pub simulated_count: usize,
    pub live_count: usize,
    /// The first line that differs, from each run.
    pub first_difference: Option<(String, String)>,
}

impl Decisions {
    /// Compares two decision logs line by line.
    pub fn compare(compared: &str, simulated: Vec<String>, live: Vec<String>) -> Decisions {
        let first_difference = simulated
            .iter()
            .map(Some)
            .chain(std::iter::repeat(None))
            .zip(live.iter().map(Some).chain(std::iter::repeat(None)))
            .take(simulated.len().max(live.len()))
            .find(|(s, l)| s != l)
            .map(|(s, l)| {
                let text = |x: Option<&String>| x.cloned().unwrap_or_else(|| "(none)".into());
                (text(s), text(l))
            });
        Decisions {
            compared: compared.to_string(),
            identical: first_difference.is_none(),
            simulated_count: simulated.len(),
            live_count: live.len(),
            first_difference,
        }
    }
}

/// One family's simulated and live run of one seed.
pub struct FamilyRun {
    pub steps: Vec<StepRecord>,
    pub simulated: RunOutput,
    pub live: RunOutput,
    pub decisions: Decisions,
    /// How GPU variability was emulated, when the family has it.
    pub variability: Option<String>,
    /// How the executed work differs from the scenario's, when it does (MOSAIC's scaled-down
    /// models and their measured loads).
    pub execution: Option<String>,
}

/// Everything `fidelity.json` holds.
#[derive(Clone, Debug, Serialize)]
pub struct LiveReport {
    pub scenario: String,
    pub family: String,
    pub seed: u64,
    pub backend: String,
    pub device: String,
    pub timing: String,
    pub clock: Clock,
    pub realtime: bool,
    pub model: String,
    pub cost_model_source: String,
    /// The profile file that priced the predictions, when the scenario names one.
    pub profile: Option<String>,
    /// The profile `--calibrate` measured for this run (then `profile` is that file).
    pub calibrated: Option<calibration::Calibrated>,
    /// The check of the profile against this device before the run.
    pub probe: probe::ProbeOutcome,
    pub variability: Option<String>,
    pub execution: Option<String>,
    pub errors: ErrorSummary,
    pub metrics: Vec<MetricPair>,
    pub decisions: Decisions,
    pub steps: Vec<StepRecord>,
    /// Wall-clock seconds of the live run (not part of any result; varies run to run).
    pub wall_s: f64,
}

/// Why live mode refuses a serving scenario (exit code 2).
const SERVING_NOT_LIVE: &str = "live mode does not run the serving family yet: its step cost \
     (sim::serving_family::step_cost) has no live wrapper; simulate it with `expertsim run`";

/// The MoE families' model shape (the kernels' MoE and dense launches), the model's name and
/// the cost-model source.
type Described = (Option<sim::cost::shape::MoeModelShape>, String, String);

fn describe(scenario: &Scenario) -> Result<Described, LiveError> {
    let moe = |shape: sim::cost::shape::MoeModelShape, source: String| {
        let name = shape.name.clone();
        Ok((Some(shape), name, source))
    };
    match scenario {
        Scenario::Serving(_) => Err(LiveError::Unsupported(SERVING_NOT_LIVE.into())),
        Scenario::Caps(s) => moe(s.shape.clone(), sim::caps::run::step_executor(s, 0).1),
        Scenario::Gem(s) => moe(s.shape.clone(), s.profile.source.kind.as_str().into()),
        Scenario::Expertweave(s) => moe(
            s.shape.moe_geometry(),
            match &s.profile {
                Some(p) => format!("measured ({})", p.device),
                None => "analytic-roofline".into(),
            },
        ),
        Scenario::Mosaic(s) => Ok((
            None,
            s.experts
                .iter()
                .map(|e| e.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            match &s.decode_profile {
                Some(p) => format!("measured ({}, {})", p.device, p.path),
                None => format!("analytic-roofline ({} decode model)", s.serving.gpu.name),
            },
        )),
        Scenario::Chimera(s) => Ok((
            None,
            s.engines
                .iter()
                .map(|e| e.cost.model.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            s.source(),
        )),
    }
}

/// What happened before the run: the probe and, with `--calibrate`, the profile measured.
#[derive(Clone, Debug, PartialEq)]
pub struct BeforeRun {
    pub probe: probe::ProbeOutcome,
    pub calibrated: Option<calibration::Calibrated>,
}

impl Default for BeforeRun {
    fn default() -> Self {
        BeforeRun {
            probe: probe::ProbeOutcome::Skipped {
                reason: "not asked for".into(),
            },
            calibrated: None,
        }
    }
}

/// Checks that `plan` is one sweep cell and one seed, and opens the device for it.
pub fn open(plan: &ScenarioPlan, options: &LiveOptions) -> Result<Kernels, LiveError> {
    if plan.cells.len() != 1 || plan.seeds.len() != 1 {
        return Err(LiveError::Unsupported(format!(
            "live mode runs one sweep cell and one seed; {} has {} cells x {} seeds (narrow it \
             with --set)",
            plan.name,
            plan.cells.len(),
            plan.seeds.len()
        )));
    }
    let (shape, _, _) = describe(&plan.cells[0].scenario)?;
    Ok(Kernels::open(
        options.backend,
        options.device,
        shape.as_ref(),
        options.tile,
        options.decode_context,
        options.realtime,
        options.repetitions,
    )?)
}

/// Runs the single cell and seed of `plan` simulated and live, opening the device and
/// probing nothing.
pub fn run(
    plan: &ScenarioPlan,
    policies: &dyn Policies,
    options: &LiveOptions,
) -> Result<LiveReport, LiveError> {
    let mut kernels = open(plan, options)?;
    run_on(&mut kernels, plan, policies, options, BeforeRun::default())
}

/// Runs the single cell and seed of `plan` simulated and live on `kernels` (from [`open`]),
/// recording `before` in the report.
pub fn run_on(
    kernels: &mut Kernels,
    plan: &ScenarioPlan,
    policies: &dyn Policies,
    options: &LiveOptions,
    before: BeforeRun,
) -> Result<LiveReport, LiveError> {
    let scenario = &plan.cells[0].scenario;
    let seed = plan.seeds[0];
    let (_, model, source) = describe(scenario)?;
    let profile = probe::scenario_profile(plan)?.map(|p| p.display().to_string());
    let started = Instant::now();
    let family_run = match scenario {
        Scenario::Serving(_) => return Err(LiveError::Unsupported(SERVING_NOT_LIVE.into())),
        Scenario::Caps(s) => caps::run(s, seed, policies, kernels, options.clock)?,
        Scenario::Gem(s) => gem::run(s, seed, policies, kernels, options.clock)?,
        Scenario::Expertweave(s) => expertweave::run(s, seed, policies, kernels, options.clock)?,
        Scenario::Mosaic(s) => mosaic::run(s, seed, policies, kernels, options.clock)?,
        Scenario::Chimera(s) => chimera::run(s, seed, policies, kernels, options.clock)?,
    };
    let wall_s = started.elapsed().as_secs_f64();
    Ok(LiveReport {
        scenario: plan.name.clone(),
        family: format!("{:?}", scenario.family()).to_ascii_lowercase(),
        seed,
        backend: kernels.kind().as_str().to_string(),
        device: kernels.device_name().to_string(),
        timing: kernels.timing(),
        clock: options.clock,
        realtime: options.realtime,
        model,
        cost_model_source: source,
        profile,
        calibrated: before.calibrated,
        probe: before.probe,
        variability: family_run.variability,
        execution: family_run.execution,
        errors: ErrorSummary::of(&family_run.steps),
        metrics: metric_pairs(&family_run.simulated.scalars, &family_run.live.scalars),
        decisions: family_run.decisions,
        steps: family_run.steps,
        wall_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decision_logs_report_the_first_difference() {
        let lines = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let same = Decisions::compare("batches", lines(&["a", "b"]), lines(&["a", "b"]));
        assert!(same.identical && same.first_difference.is_none());
        let differ = Decisions::compare("batches", lines(&["a", "b"]), lines(&["a", "c"]));
        assert!(!differ.identical);
        assert_eq!(differ.first_difference, Some(("b".into(), "c".into())));
        let shorter = Decisions::compare("batches", lines(&["a", "b"]), lines(&["a"]));
        assert_eq!(
            shorter.first_difference,
            Some(("b".into(), "(none)".into()))
        );
        assert_eq!((shorter.simulated_count, shorter.live_count), (2, 1));
    }
}
