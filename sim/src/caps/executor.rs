//! Simulated step executors: the cost-model executors (`cv`, `straggler`) and two
//! queueing-theory reference executors (constant and exponential service times) used to check
//! the engine against M/D/1 and M/M/1 closed forms.

use crate::caps::execution::{BatchWork, ExecutionModel};
use crate::caps::server::StepExecutor;
use crate::rng::SimRng;
use crate::time::SimDuration;
use rand::RngExt;
use std::sync::Arc;

/// The cost models are immutable, so every run of a cell shares one.
impl StepExecutor for Arc<ExecutionModel> {
    fn batch_time(&mut self, work: &BatchWork<'_>) -> SimDuration {
        ExecutionModel::batch_time(self, work)
    }
}

/// Every batch takes the same time.
pub struct ConstantService(pub SimDuration);

impl StepExecutor for ConstantService {
    fn batch_time(&mut self, _: &BatchWork<'_>) -> SimDuration {
        self.0
    }
}

/// Batch times drawn from an exponential distribution with the given mean (inverse CDF).
pub struct ExponentialService {
    pub mean: SimDuration,
    pub rng: SimRng,
}

impl StepExecutor for ExponentialService {
    fn batch_time(&mut self, _: &BatchWork<'_>) -> SimDuration {
        let u: f64 = self.rng.random();
        SimDuration::from_secs_f64(-(-u).ln_1p() * self.mean.as_secs_f64())
    }
}
