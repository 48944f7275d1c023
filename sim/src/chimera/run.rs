//! Running one Chimera simulation: the server of a scenario for a seed, the event loop, and the
//! family-independent output.

use super::config::ChimeraScenario;
use super::server::{ChimeraMetrics, ChimeraServer};
use crate::engine;
use crate::metrics::RunOutput;
use crate::records::RecordSink;
use crate::serving::{QueuePolicy, Router};

/// Simulates one seed of `scenario`. One `QueuePolicy` instance serves every engine (its methods
/// name the engine); both policies are reset first.
pub fn simulate(
    scenario: &ChimeraScenario,
    seed: u64,
    queue: &mut dyn QueuePolicy,
    router: &mut dyn Router,
) -> ChimeraMetrics {
    let mut server = ChimeraServer::new(scenario, seed, queue, router);
    engine::run(&mut server);
    server.finish()
}

/// The Chimera columns of the per-request CSV (one row per workflow), after the common ones.
pub const CSV_COLUMNS: &[&str] = &["stages", "queue_ms", "succeeded"];

/// [`run`], streaming one record per finished workflow to `sink`. A workflow's first token is
/// not tracked, so that column is empty.
pub fn run_recorded(
    scenario: &ChimeraScenario,
    seed: u64,
    queue: &mut dyn QueuePolicy,
    router: &mut dyn Router,
    sink: &mut dyn RecordSink,
) -> RunOutput {
    let mut server = ChimeraServer::new(scenario, seed, queue, router);
    server.record_requests(sink);
    engine::run(&mut server);
    let mut output = super::run_output(&server.finish());
    if let Some(pricing) = scenario.pricing() {
        output.details["pricing"] = pricing;
    }
    output
}

/// [`run`] with each engine's steps priced by `step_costs[e]` (live mode wraps the analytic
/// engine cost in one per engine).
pub fn run_with_step_costs<'a>(
    scenario: &'a ChimeraScenario,
    seed: u64,
    queue: &'a mut dyn QueuePolicy,
    router: &'a mut dyn Router,
    step_costs: Vec<Box<dyn crate::serving::step::StepCost + 'a>>,
) -> RunOutput {
    let mut server = ChimeraServer::new(scenario, seed, queue, router).with_step_costs(step_costs);
    engine::run(&mut server);
    super::run_output(&server.finish())
}

/// Runs one seed of `scenario` and reports it in the family-independent shape (scalars in the
/// order of `chimera::METRICS`, every field of `ChimeraMetrics` as detail).
pub fn run(
    scenario: &ChimeraScenario,
    seed: u64,
    queue: &mut dyn QueuePolicy,
    router: &mut dyn Router,
) -> RunOutput {
    super::run_output(&simulate(scenario, seed, queue, router))
}
