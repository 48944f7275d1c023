//! A dense model served on one GPU or a tensor-parallel group of them: what a step streams and
//! computes (`cost::roofline::StepRoofline`) or, with a measured set, its step from measured
//! operations (`cost::measured_steps::MeasuredDenseStep`), and the tokens its KV cache holds in
//! the memory the weights leave. Chimera's engines and MOSAIC's sessions are each one; its
//! steps reach a replica through the step-cost seam (`DenseStepCost`).

use super::step::{MeasuredStepCost, RooflineStepCost, StepCost, StepTime, StepWork};
use crate::cost::gpu::GpuSpec;
use crate::cost::measured_steps::{MeasuredDenseStep, MeasuredSet, OpSources};
use crate::cost::roofline::{Roofline, StepPrice, StepRoofline, StepTokens, TensorParallel};
use crate::cost::shape::DenseModelShape;
use serde::Serialize;
use std::sync::Arc;

/// A dense model's steps and KV cache on its GPUs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DenseServing {
    /// What a step streams and computes per GPU (`cost::roofline`).
    pub roofline: StepRoofline,
    /// With a measured set: the step priced from its measured operations instead of the
    /// roofline, with its pricing record.
    #[serde(skip)]
    pub measured: Option<Arc<MeasuredDenseStep>>,
    /// Tokens the KV cache holds (all GPUs of the group together).
    pub kv_capacity_tokens: u64,
}

impl DenseServing {
    /// `shape` on `parallel.degree` GPUs like `gpu` (weights and KV cache split over them),
    /// `gpu_memory_utilization` of each GPU's memory for both, `host_overhead_ns` of host time
    /// per step; its steps priced by the roofline or, with `measured`, from that set's
    /// operations (at the same degree, link and overhead). `None` when the weights leave no KV
    /// cache.
    pub fn new(
        shape: &DenseModelShape,
        gpu: &GpuSpec,
        gpu_memory_utilization: f64,
        parallel: TensorParallel,
        host_overhead_ns: f64,
        measured: Option<&MeasuredSet>,
    ) -> Option<DenseServing> {
        let tp = f64::from(parallel.degree.max(1));
        let kv_capacity_tokens = gpu.kv_capacity_tokens(
            gpu_memory_utilization,
            shape.weight_bytes() / tp,
            shape.kv_bytes_per_token() / tp,
        )?;
        let roofline = StepRoofline::dense(shape, Roofline::of(gpu), parallel, host_overhead_ns);
        let measured = measured.map(|set| {
            Arc::new(MeasuredDenseStep::new(
                set,
                shape,
                parallel,
                host_overhead_ns,
            ))
        });
        Some(DenseServing {
            roofline,
            measured,
            kv_capacity_tokens,
        })
    }

    /// One step's price and, when measured operations priced it, what priced each operation.
    pub fn price(&self, work: &StepTokens) -> (StepPrice, Option<OpSources>) {
        match &self.measured {
            Some(measured) => {
                let (price, sources) = measured.price(work);
                (price, Some(sources))
            }
            None => (self.roofline.price(work), None),
        }
    }

    /// Its steps behind the step-cost seam: the measured operations when it has them, else the
    /// roofline.
    pub fn step_cost(&self) -> DenseStepCost<'_> {
        match &self.measured {
            Some(measured) => DenseStepCost::Measured(MeasuredStepCost(measured)),
            None => DenseStepCost::Roofline(RooflineStepCost(&self.roofline)),
        }
    }
}

/// A dense model's step cost: its roofline or its measured operations (`DenseServing`).
pub enum DenseStepCost<'a> {
    Roofline(RooflineStepCost<'a>),
    Measured(MeasuredStepCost<'a>),
}

impl StepCost for DenseStepCost<'_> {
    fn price(&mut self, work: &StepWork<'_>) -> StepTime {
        match self {
            DenseStepCost::Roofline(cost) => cost.price(work),
            DenseStepCost::Measured(cost) => cost.price(work),
        }
    }
}
