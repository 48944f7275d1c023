//! The step cost of a CAPS run: the scenario's execution model (`grouped`, `cv` or `straggler`,
//! built once per cell and shared by its runs), or one of the two queueing-theory references
//! (constant and exponential service per batch) that check the engine against the M/D/1 and
//! M/M/1 closed forms, all from `serving_family::execution`. A static batch is one step.

use crate::serving::{StepCost, StepTime, StepWork};
use crate::serving_family::execution::{ConstantService, ExecutionModel, ExponentialService};
use std::sync::Arc;

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
