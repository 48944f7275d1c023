//! The step cost of a CAPS run: the scenario's execution model (`grouped`, `cv` or `straggler`,
//! built once per cell and shared by its runs), or one of the two queueing-theory references
//! (constant and exponential service per batch) that check the engine against the M/D/1 and
//! M/M/1 closed forms. Every one is a `serving::StepCost`; a static batch is one step.

use crate::caps::execution::ExecutionModel;
use crate::rng::SimRng;
use crate::serving::{CostSource, StepBreakdown, StepCost, StepTime, StepWork};
use crate::time::SimDuration;
use rand::RngExt;
use std::sync::Arc;

/// Every batch takes the same time.
pub struct ConstantService(pub SimDuration);

impl StepCost for ConstantService {
    fn price(&mut self, _: &StepWork<'_>) -> StepTime {
        reference(self.0)
    }
}

/// Batch times drawn from an exponential distribution with the given mean (inverse CDF).
pub struct ExponentialService {
    pub mean: SimDuration,
    pub rng: SimRng,
}

impl StepCost for ExponentialService {
    fn price(&mut self, _: &StepWork<'_>) -> StepTime {
        let u: f64 = self.rng.random();
        reference(SimDuration::from_secs_f64(
            -(-u).ln_1p() * self.mean.as_secs_f64(),
        ))
    }
}

fn reference(duration: SimDuration) -> StepTime {
    StepTime {
        duration,
        breakdown: StepBreakdown::default(),
        source: CostSource::Reference,
    }
}

/// The step cost one CAPS run prices its batches with.
pub enum CapsStepCost {
    /// The scenario's execution model, shared by every run of the cell.
    Model(Arc<ExecutionModel>),
    Constant(ConstantService),
    Exponential(Box<ExponentialService>),
}

impl StepCost for CapsStepCost {
    fn price(&mut self, work: &StepWork<'_>) -> StepTime {
        match self {
            CapsStepCost::Model(model) => model.step_time(work),
            CapsStepCost::Constant(service) => service.price(work),
            CapsStepCost::Exponential(service) => service.price(work),
        }
    }
}
