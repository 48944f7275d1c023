//! MOSAIC session costs priced from a measured dense-decode profile (`[serving] profile`): the
//! profile reader and its step pricing are the serving family's
//! (`serving_family::dense_profile`, re-exported here for the mosaic family until its deletion);
//! this module keeps the mosaic scenario's per-expert view of it.

use crate::serving::{CostSource, StepBreakdown, StepCost, StepTime, StepWork};
pub use crate::serving_family::dense_profile::{
    DENSE_PROFILE_FORMAT, DenseDecodeProfile, DenseModelProfile, ModelDecodeCost,
};
use crate::serving_family::live_scale::{Scaling, kernel_rows_and_context};
use crate::time::SimDuration;

/// A model's steps priced from its measured profile: the step's kernel rows and cached tokens
/// per row (`live_scale::kernel_rows_and_context`) looked up in the sampled grid.
pub struct ProfileStepCost<'a>(pub &'a ModelDecodeCost);

impl StepCost for ProfileStepCost<'_> {
    fn price(&mut self, work: &StepWork<'_>) -> StepTime {
        let (rows, context) = kernel_rows_and_context(work);
        StepTime {
            duration: SimDuration(self.0.step_ns(rows, context).round() as u64),
            breakdown: StepBreakdown::default(),
            source: CostSource::Measured,
        }
    }
}

/// The scenario's profile pricing: the device, and per expert its model's costs.
#[derive(Clone, Debug, PartialEq)]
pub struct MosaicDecodeProfile {
    pub device: String,
    pub path: String,
    /// How the profile's models are scaled down from the experts' (live mode runs them so).
    pub scaling: Scaling,
    pub experts: Vec<ModelDecodeCost>,
}
