//! A dense model served on one GPU or a tensor-parallel group of them: what a step streams and
//! computes (`cost::roofline::StepRoofline`) or, with a measured set, its step from measured
//! operations (`cost::measured_steps::MeasuredDenseStep`), and the tokens its KV cache holds in
//! the memory the weights leave. Chimera's engines and MOSAIC's sessions are each one; its
//! steps reach a replica through the step-cost seam (`DenseStepCost`).

use super::step::{MeasuredStepCost, RooflineStepCost, StepCost, StepTime, StepWork};
use crate::cost::gpu::GpuSpec;
use crate::cost::host::HostOverhead;
use crate::cost::measured_steps::{MeasuredDenseStep, MeasuredSet, OpSources};
use crate::cost::roofline::{Roofline, StepPrice, StepRoofline, StepTokens, TensorParallel};
use crate::cost::shape::DenseModelShape;
use crate::time::SimDuration;
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
    /// The host's time per step: its fixed part is the roofline's (and the measured step's)
    /// overhead, its part per sequence is added to each step's price.
    pub host: HostOverhead,
}

impl DenseServing {
    /// `shape` on `parallel.degree` GPUs like `gpu` (weights and KV cache split over them),
    /// `gpu_memory_utilization` of each GPU's memory for both, `host`'s time per step (a fixed
    /// part and a part per sequence, `cost::host`); its steps priced by the roofline or, with `measured`, from that set's
    /// operations (at the same degree, link and overhead). `None` when the weights leave no KV
    /// cache.
    pub fn new(
        shape: &DenseModelShape,
        gpu: &GpuSpec,
        gpu_memory_utilization: f64,
        parallel: TensorParallel,
        host: HostOverhead,
        measured: Option<&MeasuredSet>,
    ) -> Option<DenseServing> {
        let tp = f64::from(parallel.degree.max(1));
        let kv_capacity_tokens = gpu.kv_capacity_tokens(
            gpu_memory_utilization,
            shape.weight_bytes() / tp,
            shape.kv_bytes_per_token() / tp,
        )?;
        let roofline = StepRoofline::dense(shape, Roofline::of(gpu), parallel, host.fixed_ns);
        let measured = measured
            .map(|set| Arc::new(MeasuredDenseStep::new(set, shape, parallel, host.fixed_ns)));
        Some(DenseServing {
            roofline,
            measured,
            kv_capacity_tokens,
            host,
        })
    }

    /// One step's price and, when measured operations priced it, what priced each operation.
    pub fn price(&self, work: &StepTokens) -> (StepPrice, Option<OpSources>) {
        let (mut price, sources) = match &self.measured {
            Some(measured) => {
                let (price, sources) = measured.price(work);
                (price, Some(sources))
            }
            None => (self.roofline.price(work), None),
        };
        let per_sequence = self.per_sequence_host_ns(work.sequences);
        price.nanos += per_sequence;
        price.overhead_ns += per_sequence;
        (price, sources)
    }

    /// The host's time per step beyond its fixed part: `sequences` x the per-sequence term.
    pub fn per_sequence_host_ns(&self, sequences: u64) -> f64 {
        self.host.per_sequence_ns * sequences as f64
    }

    /// Its steps behind the step-cost seam: the measured operations when it has them, else the
    /// roofline.
    pub fn step_cost(&self) -> DenseStepCost<'_> {
        DenseStepCost(self)
    }
}

/// A dense model's step cost: its roofline or its measured operations, plus the host's time
/// per sequence (`DenseServing`).
pub struct DenseStepCost<'a>(&'a DenseServing);

impl StepCost for DenseStepCost<'_> {
    fn price(&mut self, work: &StepWork<'_>) -> StepTime {
        let mut time = match &self.0.measured {
            Some(measured) => MeasuredStepCost(measured).price(work),
            None => RooflineStepCost(&self.0.roofline).price(work),
        };
        let per_sequence = self.0.per_sequence_host_ns(work.dense_tokens().sequences);
        if per_sequence > 0.0 {
            time.duration = SimDuration(time.duration.0 + per_sequence.round() as u64);
            time.breakdown.overhead_ns += per_sequence;
        }
        time
    }
}
