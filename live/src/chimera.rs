//! Chimera in live mode, through the serving layer's step-cost seam: the Chimera server
//! (semantic router, length predictor, queue policy, every engine's continuous-batching
//! replica) runs unchanged, and each engine's steps are priced by a [`LiveStep`] that predicts
//! with the scenario's engine cost (the analytic one, or with `[cluster] profile` the measured
//! dense-decode profile of the engine's model) and measures the step on the kernels
//! (`dense::DenseStep`, as live MOSAIC runs its experts): the engine's dense model at the
//! profile's scaling (live mode's default without one: 1/64 of the widths, 1/8 of the layers,
//! heads kept), each layer one GEMM over the step's rows with attention over their cached
//! tokens, then the output head over the rows.

use crate::dense::DenseStep;
use crate::device::Kernels;
use crate::step::{LiveSession, LiveStep, Logged};
use crate::{Clock, Decisions, FamilyRun, LiveError};
use sim::chimera::ChimeraScenario;
use sim::chimera::server::EngineStepCost;
use sim::mosaic::live_scale::{LIVE_SCALING, Scaling};
use sim::policies::Policies;
use sim::serving::step::StepCost;
use std::cell::RefCell;
use std::rc::Rc;

/// How engine `e`'s model is scaled for live execution: as the `[cluster] profile` that
/// prices it was measured, else live mode's default.
fn engine_scaling(scenario: &ChimeraScenario, e: usize) -> Scaling {
    scenario.engines[e]
        .cost
        .profile
        .as_ref()
        .map_or(LIVE_SCALING, |p| p.scaling)
}

fn engine_name(scenario: &ChimeraScenario, e: usize) -> String {
    format!("engine {e} ({})", scenario.engines[e].cost.model)
}

/// One seed of `scenario` simulated, then live on `kernels`.
pub fn run(
    scenario: &ChimeraScenario,
    seed: u64,
    policies: &dyn Policies,
    kernels: &mut Kernels,
    clock: Clock,
) -> Result<FamilyRun, LiveError> {
    let simulated_log = Rc::new(RefCell::new(Vec::new()));
    let logged: Vec<Box<dyn StepCost + '_>> = (0..scenario.engines.len())
        .map(|e| {
            Box::new(Logged::new(
                engine_name(scenario, e),
                EngineStepCost(&scenario.engines[e].cost),
                simulated_log.clone(),
            )) as Box<dyn StepCost + '_>
        })
        .collect();
    let simulated = sim::chimera::run::run_with_step_costs(
        scenario,
        seed,
        policies.queue_policy(&scenario.queue).as_mut(),
        policies.router(&scenario.routing).as_mut(),
        logged,
    );
    let session = LiveSession::new(kernels, clock);
    let live_costs: Vec<Box<dyn StepCost + '_>> = (0..scenario.engines.len())
        .map(|e| {
            Box::new(LiveStep::new(
                engine_name(scenario, e),
                EngineStepCost(&scenario.engines[e].cost),
                DenseStep::of(&scenario.engines[e].cost.shape, engine_scaling(scenario, e)),
                session.clone(),
            )) as Box<dyn StepCost + '_>
        })
        .collect();
    let live = sim::chimera::run::run_with_step_costs(
        scenario,
        seed,
        policies.queue_policy(&scenario.queue).as_mut(),
        policies.router(&scenario.routing).as_mut(),
        live_costs,
    );
    let session = Rc::try_unwrap(session)
        .ok()
        .expect("the live run's step costs are dropped")
        .into_inner();
    let (steps, live_log) = session.finish()?;
    let simulated_log = std::mem::take(&mut *simulated_log.borrow_mut());
    Ok(FamilyRun {
        steps,
        simulated,
        live,
        decisions: Decisions::compare(
            "every engine step in the order the engines started them: the engine, its \
             sequences, prefill tokens, decoding sequences and cached tokens",
            simulated_log,
            live_log,
        ),
        variability: None,
        execution: Some(format!(
            "each engine's model runs scaled down: {}; a layer is one GEMM over hidden with \
             attention over the step's cached tokens spread evenly over its rows",
            engine_scaling(scenario, 0).describe()
        )),
    })
}
