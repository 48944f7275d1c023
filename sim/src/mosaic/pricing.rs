//! What prices a MOSAIC run: each session's steps go through the serving layer's one step-cost
//! seam (`serving::StepCost`), each model load is the cost model's load operation
//! (`cost::load`: weight bytes over the load path) or a measured copy. [`SessionPricing`] hands
//! the run both; [`SimulatedPricing`] answers from the scenario (the roofline, the measured
//! operations of the set `[serving] measured` names, or the measured dense-decode profile
//! `[serving] profile` names), and live mode wraps it to also execute them.

use super::config::MosaicScenario;
use super::profile_cost::ProfileStepCost;
use super::session::ModelServing;
use crate::serving::{DenseStepCost, StepCost, StepTime, StepWork};
use crate::time::SimDuration;

/// Prices the loads and the steps of a MOSAIC run. `model` is an expert's index into the
/// scenario's `experts`, or `experts.len()` for the aggregator; `unit` a worker, or
/// `n_workers` for the aggregator's tensor-parallel group.
pub trait SessionPricing<'a> {
    /// Loading `model` on `unit`.
    fn load(&mut self, unit: usize, model: usize) -> SimDuration;
    /// What prices the steps of a session of `model` on `unit`.
    fn steps(&mut self, unit: usize, model: usize) -> Box<dyn StepCost + 'a>;
}

/// A model's simulated step cost: the roofline, its measured operations, or the measured
/// profile of its scaled-down model.
pub enum ModelStepCost<'a> {
    Dense(DenseStepCost<'a>),
    Profile(ProfileStepCost<'a>),
}

impl<'a> ModelStepCost<'a> {
    /// The step cost `serving` was built with: its measured operations when the scenario
    /// names a measured set, else its roofline.
    pub fn of(serving: &'a ModelServing) -> ModelStepCost<'a> {
        ModelStepCost::Dense(serving.dense.step_cost())
    }
}

impl StepCost for ModelStepCost<'_> {
    fn price(&mut self, work: &StepWork<'_>) -> StepTime {
        match self {
            ModelStepCost::Dense(cost) => cost.price(work),
            ModelStepCost::Profile(cost) => cost.price(work),
        }
    }
}

/// The simulated prices of a scenario: an expert's load is the profile's measured copy when
/// the scenario names a profile that has one, else the expert's `load_s` (its weights over the
/// load path, or the scenario's own value); its steps are the profile's when there is one, else
/// its measured operations' when the scenario names a measured set, else the roofline's. The
/// aggregator's steps are its measured operations' or the roofline's, its load its `load_s`.
#[derive(Clone, Copy)]
pub struct SimulatedPricing<'a> {
    pub scenario: &'a MosaicScenario,
    /// Price experts from `[serving] profile` when the scenario names one.
    pub use_profile: bool,
}

impl<'a> SimulatedPricing<'a> {
    /// The scenario's prices (its profile when it names one).
    pub fn of(scenario: &'a MosaicScenario) -> Self {
        SimulatedPricing {
            scenario,
            use_profile: true,
        }
    }

    /// The prices without the scenario's profile (the roofline, or the measured set's
    /// operations, and `load_s`): what the offline calibration runs on. A measured set prices
    /// the calibration too: it describes the GPU the sessions run on, as the roofline does.
    pub fn without_profile(scenario: &'a MosaicScenario) -> Self {
        SimulatedPricing {
            scenario,
            use_profile: false,
        }
    }

    /// The step cost of a session of `model`.
    pub fn step_cost(&self, model: usize) -> ModelStepCost<'a> {
        let scenario = self.scenario;
        match (self.profile(), scenario.experts.get(model)) {
            (Some(profile), Some(_)) => {
                ModelStepCost::Profile(ProfileStepCost(&profile.experts[model]))
            }
            (None, Some(expert)) => ModelStepCost::of(&expert.serving),
            (_, None) => ModelStepCost::of(&scenario.aggregator.serving),
        }
    }

    fn profile(&self) -> Option<&'a super::profile_cost::MosaicDecodeProfile> {
        self.scenario
            .decode_profile
            .as_ref()
            .filter(|_| self.use_profile)
    }
}

impl<'a> SessionPricing<'a> for SimulatedPricing<'a> {
    fn load(&mut self, _unit: usize, model: usize) -> SimDuration {
        let scenario = self.scenario;
        let Some(expert) = scenario.experts.get(model) else {
            return SimDuration::from_secs_f64(scenario.aggregator.load_s);
        };
        match self.profile().and_then(|p| p.experts[model].load_ns) {
            Some(ns) => SimDuration(ns.round() as u64),
            None => SimDuration::from_secs_f64(expert.load_s),
        }
    }

    fn steps(&mut self, _unit: usize, model: usize) -> Box<dyn StepCost + 'a> {
        Box::new(self.step_cost(model))
    }
}
