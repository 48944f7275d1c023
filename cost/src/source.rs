//! Where a step's price came from (`CostSource`): a measured profile of the device, one scaled
//! to another device or shape, the analytic roofline, or a queueing reference; the serving
//! layer's step costs report it and results name a cell's cost model by it.

use serde::Serialize;

/// Where a step's price came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CostSource {
    /// The analytic roofline (datasheet rates and the model's shape).
    Analytic,
    /// A measured profile of this device.
    Measured,
    /// A measured profile scaled to another device, shape or token count (past the last
    /// measured one: the roofline carries the last measurement on).
    Scaled,
    /// A queueing-theory reference service time (constant or exponential), no cost model.
    Reference,
}

impl CostSource {
    /// The less measured of two sources, in the order measured, scaled, analytic, a queueing
    /// reference (how far each is from a measurement of this device).
    pub fn less_measured(self, other: CostSource) -> CostSource {
        let rank = |source: CostSource| match source {
            CostSource::Measured => 0,
            CostSource::Scaled => 1,
            CostSource::Analytic => 2,
            CostSource::Reference => 3,
        };
        if rank(other) > rank(self) {
            other
        } else {
            self
        }
    }

    /// The source as results name a cell's cost model (`cells[].cost_model`).
    pub fn cost_model_name(self) -> &'static str {
        match self {
            CostSource::Measured => super::profile::SourceKind::Measured.as_str(),
            CostSource::Scaled => "scaled",
            CostSource::Analytic => super::profile::SourceKind::AnalyticRoofline.as_str(),
            CostSource::Reference => "reference",
        }
    }
}
