//! MOSAIC in live mode, through the serving layer's step-cost seam: the workload, the offline
//! calibration, the placement (ILP or round-robin) and every worker session's replica run
//! unchanged, each expert session's steps are priced by a [`LiveStep`] (the scenario's step
//! cost predicts, `dense::DenseStep` runs the step on the kernels) and each expert load is a
//! real host-to-device copy of the model's bytes. Both are of the model scaled down (see
//! [`scaling`]: live mode's default scaling, so that a session runs in milliseconds on the CPU
//! references, or the scaling of the `[serving] profile` that prices the run, e.g. the real
//! widths with fewer layers on a GPU); the predictions are the scenario's prices: its
//! full-size models on `serving.gpu`, or, with `[serving] profile`, the measured profile of the
//! scaled models (`expertsim-calibrate --dense-models`). The aggregator stage is priced by the
//! family's model in both runs.

use crate::dense::DenseStep;
use crate::device::Kernels;
use crate::step::{LiveSession, LiveStep, Logged};
use crate::{Clock, Decisions, FamilyRun, LiveError};
use sim::mosaic::live_scale::{LIVE_SCALING, Scaling};
use sim::mosaic::{MosaicScenario, SessionPricing, SimulatedPricing, try_simulate_on};
use sim::policies::Policies;
use sim::serving::step::StepCost;
use sim::time::SimDuration;
use std::cell::RefCell;
use std::rc::Rc;

/// How the scenario's experts are scaled for live execution: as its `[serving] profile` was
/// measured, else live mode's default.
pub fn scaling(scenario: &MosaicScenario) -> Scaling {
    scenario
        .decode_profile
        .as_ref()
        .map_or(LIVE_SCALING, |p| p.scaling)
}

/// How a model is scaled down, as reported in the output.
fn scaling_line(scaling: Scaling) -> String {
    format!(
        "each expert runs scaled down: {}; loads copy that model's bf16 bytes",
        scaling.describe()
    )
}

/// How the decision logs name a worker's session of `model` (the worker first, so that the
/// logs can be read worker by worker).
fn unit_name(scenario: &MosaicScenario, unit: usize, model: usize) -> String {
    format!("worker {unit} ({})", scenario.experts[model].name)
}

/// The simulated prices with the live run's decision log: each expert load and step logged.
struct LoggedPricing<'a> {
    simulated: SimulatedPricing<'a>,
    log: Rc<RefCell<Vec<String>>>,
}

impl<'a> SessionPricing<'a> for LoggedPricing<'a> {
    fn load(&mut self, unit: usize, model: usize) -> SimDuration {
        let scenario = self.simulated.scenario;
        if model < scenario.experts.len() {
            let line = format!("{}: load", unit_name(scenario, unit, model));
            self.log.borrow_mut().push(line);
        }
        self.simulated.load(unit, model)
    }

    fn steps(&mut self, unit: usize, model: usize) -> Box<dyn StepCost + 'a> {
        let scenario = self.simulated.scenario;
        let cost = self.simulated.step_cost(model);
        if model < scenario.experts.len() {
            let name = unit_name(scenario, unit, model);
            Box::new(Logged::new(name, cost, self.log.clone()))
        } else {
            Box::new(cost)
        }
    }
}

/// The live prices: expert steps through [`LiveStep`], expert loads copied on the device; the
/// aggregator's as simulated.
struct LivePricing<'a, 'k> {
    simulated: SimulatedPricing<'a>,
    session: Rc<RefCell<LiveSession<'k>>>,
    /// Measured load nanoseconds, with what was loaded.
    loads: Vec<(String, f64)>,
}

impl<'a: 'x, 'k: 'x, 'x> SessionPricing<'x> for LivePricing<'a, 'k> {
    fn load(&mut self, unit: usize, model: usize) -> SimDuration {
        let scenario = self.simulated.scenario;
        let predicted = self.simulated.load(unit, model);
        if model >= scenario.experts.len() {
            return predicted;
        }
        let name = unit_name(scenario, unit, model);
        let bytes = scaling(scenario)
            .apply(&scenario.experts[model].shape)
            .weight_bytes() as usize;
        let mut session = self.session.borrow_mut();
        let measured =
            session.run_outside_step(format!("{name}: load"), |kernels| kernels.load(bytes));
        self.loads.push((
            format!("{name}: {bytes} bytes"),
            measured.unwrap_or(f64::NAN),
        ));
        match (session.clock(), measured) {
            (Clock::Measured, Some(ns)) => SimDuration(ns.round() as u64),
            _ => predicted,
        }
    }

    fn steps(&mut self, unit: usize, model: usize) -> Box<dyn StepCost + 'x> {
        let scenario = self.simulated.scenario;
        let cost = self.simulated.step_cost(model);
        if model >= scenario.experts.len() {
            return Box::new(cost);
        }
        Box::new(LiveStep::new(
            unit_name(scenario, unit, model),
            cost,
            DenseStep::of(&scenario.experts[model].shape, scaling(scenario)),
            self.session.clone(),
        ))
    }
}

/// The placement in a run's details, one line per worker.
fn placement_lines(details: &serde_json::Value) -> Vec<String> {
    match details["plan"].as_array() {
        Some(workers) => workers
            .iter()
            .enumerate()
            .map(|(w, sessions)| format!("placement worker {w}: {sessions}"))
            .collect(),
        None => vec![format!("no placement: {}", details["error"])],
    }
}

/// The placement, then each worker's loads and steps in its own order: workers run at once, so
/// how their lines interleave depends on the clock, what each decides does not.
fn worker_by_worker(placement: Vec<String>, mut sessions: Vec<String>) -> Vec<String> {
    let worker = |line: &String| {
        line.strip_prefix("worker ")
            .and_then(|rest| rest.split(' ').next())
            .and_then(|w| w.parse::<usize>().ok())
    };
    sessions.sort_by_key(worker);
    placement.into_iter().chain(sessions).collect()
}

/// One seed of `scenario` simulated, then live on `kernels`.
pub fn run(
    scenario: &MosaicScenario,
    seed: u64,
    policies: &dyn Policies,
    kernels: &mut Kernels,
    clock: Clock,
) -> Result<FamilyRun, LiveError> {
    let failed = |e: sim::mosaic::SimulateError| LiveError::Unsupported(e.to_string());
    let fcfs = sim::serving::QueuePolicyConfig::Fcfs;
    let simulated_log = Rc::new(RefCell::new(Vec::new()));
    let simulated = try_simulate_on(
        scenario,
        seed,
        policies.placement(&scenario.placement).as_mut(),
        policies.aggregation_gate(&scenario.gate).as_mut(),
        policies.queue_policy(&fcfs).as_mut(),
        &mut LoggedPricing {
            simulated: SimulatedPricing::of(scenario),
            log: simulated_log.clone(),
        },
    )
    .map_err(failed)?;
    let session = LiveSession::new(kernels, clock);
    let mut live_pricing = LivePricing {
        simulated: SimulatedPricing::of(scenario),
        session: session.clone(),
        loads: Vec::new(),
    };
    let live = try_simulate_on(
        scenario,
        seed,
        policies.placement(&scenario.placement).as_mut(),
        policies.aggregation_gate(&scenario.gate).as_mut(),
        policies.queue_policy(&fcfs).as_mut(),
        &mut live_pricing,
    );
    let loads: Vec<String> = live_pricing
        .loads
        .iter()
        .map(|(what, ns)| format!("{what} in {:.1} us", ns / 1e3))
        .collect();
    drop(live_pricing);
    let session = Rc::try_unwrap(session)
        .ok()
        .expect("the live run's step costs are dropped")
        .into_inner();
    let (steps, live_log) = session.finish()?;
    let live = live.map_err(failed)?;
    let simulated_log = std::mem::take(&mut *simulated_log.borrow_mut());
    Ok(FamilyRun {
        steps,
        decisions: Decisions::compare(
            "the placement (sessions per worker with their prompt counts), then worker by \
             worker every session's load and continuous-batching steps (sequences, prefill, \
             decoding and cached tokens)",
            worker_by_worker(placement_lines(&simulated.details), simulated_log),
            worker_by_worker(placement_lines(&live.details), live_log),
        ),
        simulated,
        live,
        variability: None,
        execution: Some(format!(
            "{}; measured host-to-device loads: {}",
            scaling_line(scaling(scenario)),
            loads.join("; ")
        )),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decision_logs_are_compared_worker_by_worker() {
        let lines = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let ordered = worker_by_worker(
            lines(&["placement worker 0: []"]),
            lines(&[
                "worker 1 (B): load",
                "worker 0 (A): load",
                "worker 10 (C): load",
                "worker 0 (A): 1 sequences",
                "worker 1 (B): 2 sequences",
            ]),
        );
        assert_eq!(
            ordered,
            lines(&[
                "placement worker 0: []",
                "worker 0 (A): load",
                "worker 0 (A): 1 sequences",
                "worker 1 (B): load",
                "worker 1 (B): 2 sequences",
                "worker 10 (C): load",
            ])
        );
    }
}
