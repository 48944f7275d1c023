//! The session-cost seam of the MOSAIC expert stage: what a worker session's model load and
//! each of its continuous-batching decode steps cost. The expert-stage code asks a
//! [`SessionCost`] for both; [`SimulatedSessionCost`] answers from the scenario (the expert's
//! `load_s` and its analytic decode model) and live mode answers by executing them, so the
//! placement, the sessions and every step are decided by the same code either way.

use super::config::MosaicScenario;
use super::decode::DecodeStep;

/// Prices a worker session's load and decode steps, in seconds.
pub trait SessionCost {
    /// Loading expert `expert` (an index into `scenario.experts`) on worker `worker`.
    fn load_s(&mut self, worker: usize, expert: usize) -> f64;
    /// One decode step of expert `expert`'s session on worker `worker`.
    fn step_s(&mut self, worker: usize, expert: usize, step: &DecodeStep) -> f64;
}

/// The simulated session costs: the scenario's load times and analytic decode model.
pub struct SimulatedSessionCost<'a> {
    pub scenario: &'a MosaicScenario,
}

impl SessionCost for SimulatedSessionCost<'_> {
    fn load_s(&mut self, _worker: usize, expert: usize) -> f64 {
        self.scenario.experts[expert].load_s
    }

    fn step_s(&mut self, _worker: usize, expert: usize, step: &DecodeStep) -> f64 {
        step.seconds(&self.scenario.experts[expert].cost)
    }
}
