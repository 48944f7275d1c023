//! The session-cost seam of the MOSAIC expert stage: what a worker session's model load and
//! each of its continuous-batching decode steps cost. The expert-stage code asks a
//! [`SessionCost`] for both; [`SimulatedSessionCost`] answers from the scenario (the expert's
//! `load_s` and its analytic decode model, or the measured profile `[serving] profile` names:
//! see [`super::profile_cost`]) and live mode answers by executing them, so the
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

/// The simulated session costs: the scenario's measured profile when it names one (its load
/// when measured, else `load_s`), otherwise its load times and analytic decode model.
pub struct SimulatedSessionCost<'a> {
    pub scenario: &'a MosaicScenario,
}

impl SessionCost for SimulatedSessionCost<'_> {
    fn load_s(&mut self, _worker: usize, expert: usize) -> f64 {
        let measured = self.scenario.decode_profile.as_ref();
        match measured.and_then(|p| p.experts[expert].load_ns) {
            Some(ns) => ns * 1e-9,
            None => self.scenario.experts[expert].load_s,
        }
    }

    fn step_s(&mut self, _worker: usize, expert: usize, step: &DecodeStep) -> f64 {
        match &self.scenario.decode_profile {
            Some(p) => p.experts[expert].step_s(step),
            None => step.seconds(&self.scenario.experts[expert].cost),
        }
    }
}
