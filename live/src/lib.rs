//! expertsim live mode: a scenario's own scheduler code runs with a live step executor in place
//! of the simulated one, so every batch, mapping and placement is decided exactly as in
//! `expertsim run`, while each step is executed on the kernels (CPU references or CUDA) and
//! timed. The fidelity report sets every step's predicted time beside its measured time.
//!
//! Families: the serving family (`serving`: the CAPS preset, a static replica priced from
//! expected routing, `caps`; `continuous`: a continuous MoE replica such as the GEM preset, the
//! ExpertWeave preset, a continuous MLA replica with adapters, and dense replicas such as the
//! Chimera preset's engines and the MOSAIC preset's placed sessions), through the serving
//! layer's one step-cost seam `expertsim_scenario::serving::step::StepCost`, wrapped once by `step::LiveStep`.
//!
//! Before the run, `probe` checks that the scenario's measured profile describes the device
//! (a few of its points timed again), and `calibration` can measure a profile for the scenario
//! on the device first (`expertsim live --calibrate`).

pub mod calibration;
pub mod caps;
pub mod continuous;
pub mod dense;
pub mod device;
pub mod fidelity;
pub mod noise;
pub mod probe;
pub mod report;
pub mod step;

use device::Kernels;
use expertsim_scenario::metrics::RunOutput;
use expertsim_scenario::policies::Policies;
use expertsim_scenario::scenario::{Scenario, ScenarioPlan};
use fidelity::{ErrorSummary, MetricPair, StepRecord, metric_pairs};
use kernels::BackendError;
pub use kernels::BackendKind;
use serde::Serialize;
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
    /// How noisy the run's own timings were (whether the errors can be read as the model's).
    pub timing_noise: noise::TimingNoise,
    pub variability: Option<String>,
    pub execution: Option<String>,
    pub errors: ErrorSummary,
    pub metrics: Vec<MetricPair>,
    pub decisions: Decisions,
    pub steps: Vec<StepRecord>,
    /// Wall-clock seconds of the live run (not part of any result; varies run to run).
    pub wall_s: f64,
}

/// How live mode runs one family's cell and seed on the kernels: the simulated run and the live
/// one, side by side.
type LiveRunner =
    fn(&Scenario, u64, &dyn Policies, &mut Kernels, Clock) -> Result<FamilyRun, LiveError>;

/// Whether live mode runs a cell of a family that it runs only in part (refused before the
/// device opens, exit code 2).
type LiveCheck = fn(&Scenario) -> Result<(), LiveError>;

/// A family's place in live mode: its runner, for the cells its check takes.
#[derive(Clone, Copy)]
enum LiveFamily {
    RunsChecked(LiveCheck, LiveRunner),
}

/// Live mode's runner for each registered family with a live path (`Family::LIVE`, read from
/// the registry), by name. A family's live module lives here because it launches kernels, which
/// `expertsim-scenario` does not know; a family without one needs no line (live mode refuses it by name), and
/// a test holds the lines and the registry's `LIVE` flags to one another.
const LIVE_FAMILIES: &[(&str, LiveFamily)] = &[(
    "serving",
    LiveFamily::RunsChecked(
        |s| {
            let s = cell(s);
            caps::check(s).or_else(|_| continuous::check(s))
        },
        |s, seed, p, k, clock| match caps::check(cell(s)) {
            Ok(()) => caps::run(cell(s), seed, p, k, clock),
            Err(_) => continuous::run(cell(s), seed, p, k, clock),
        },
    ),
)];

/// The cell of `scenario` as its family's scenario type (the runner is looked up by the
/// scenario's own family, so the type always matches).
fn cell<S: 'static>(scenario: &Scenario) -> &S {
    scenario
        .get::<S>()
        .expect("a live runner gets its own family's cells")
}

/// The live runner of `scenario`'s family, or why live mode refuses it.
fn live_runner(scenario: &Scenario) -> Result<LiveRunner, LiveError> {
    let name = scenario.family().name();
    match LIVE_FAMILIES.iter().find(|(family, _)| *family == name) {
        Some((_, LiveFamily::RunsChecked(check, runner))) => check(scenario).map(|_| *runner),
        None => Err(LiveError::Unsupported(format!(
            "the {name} family has no live mode"
        ))),
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

/// Checks that live mode runs `plan`'s family at all (before anything is printed or measured).
pub fn check_family(plan: &ScenarioPlan) -> Result<(), LiveError> {
    match plan.cells.first() {
        Some(cell) => live_runner(&cell.scenario).map(|_| ()),
        None => Ok(()),
    }
}

/// Checks that `plan` is one sweep cell and one seed, and opens the device for it.
pub fn open(plan: &ScenarioPlan, options: &LiveOptions) -> Result<Kernels, LiveError> {
    check_family(plan)?;
    if plan.cells.len() != 1 || plan.seeds.len() != 1 {
        return Err(LiveError::Unsupported(format!(
            "live mode runs one sweep cell and one seed; {} has {} cells x {} seeds (narrow it \
             with --set)",
            plan.name,
            plan.cells.len(),
            plan.seeds.len()
        )));
    }
    let shape = plan.cells[0].scenario.live_description().moe_shape;
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
    let description = scenario.live_description();
    let runner = live_runner(scenario)?;
    let profile = probe::scenario_profile(plan)?.map(|p| p.display().to_string());
    let cpu = kernels.kind() == BackendKind::Cpu;
    let load_before = if cpu { noise::load_average() } else { None };
    let launches_before = kernels.spreads().len();
    let started = Instant::now();
    let family_run = runner(scenario, seed, policies, kernels, options.clock)?;
    let wall_s = started.elapsed().as_secs_f64();
    let load = load_before.zip(if cpu { noise::load_average() } else { None });
    let timing_noise =
        noise::TimingNoise::assess(&kernels.spreads()[launches_before..], load, noise::cores());
    Ok(LiveReport {
        scenario: plan.name.clone(),
        family: scenario.family().name().to_string(),
        seed,
        backend: kernels.kind().as_str().to_string(),
        device: kernels.device_name().to_string(),
        timing: kernels.timing(),
        clock: options.clock,
        realtime: options.realtime,
        model: description.model,
        cost_model_source: description.cost_source,
        profile,
        calibrated: before.calibrated,
        probe: before.probe,
        timing_noise,
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

    /// The registry says which families live mode runs (`Family::LIVE`): each has a line here,
    /// and each line names one of them (a deleted family's line goes with it).
    #[test]
    fn every_registered_family_has_a_live_runner() {
        for family in expertsim_scenario::registry::families() {
            let named = |name: &&str| *name == family.name();
            assert_eq!(
                LIVE_FAMILIES.iter().any(|(name, _)| named(name)),
                family.live(),
                "{family}: its LIVE flag and its line in LIVE_FAMILIES disagree"
            );
        }
        for (name, _) in LIVE_FAMILIES {
            assert!(
                expertsim_scenario::registry::family(name).is_some_and(|f| f.live()),
                "{name} is not a registered family with a live path"
            );
        }
    }

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
