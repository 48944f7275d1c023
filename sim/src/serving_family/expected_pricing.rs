//! A static replica's batch priced from its expected routing (`replica.scheduler.pricing =
//! "expected_routing"`, docs/serving-family.md): the batch's prefill routes the sum of its
//! candidates' per-expert load vectors, each decode pass the sum of load / prompt tokens
//! (`serving::topic_affinity::batch_routing`), and CAPS's `grouped` execution model
//! (`caps::execution::GroupedModel`: per layer the active experts as one grouped GEMM through
//! the one MoE entry point, `cost::moe_layer`, eager, on the replica GPU's analytic profile)
//! prices prefill then decode passes. No host time is added (CAPS models none). The step's
//! expert load, for the recorder's imbalance, is the prefill's vector (as the caps family
//! records it).

use super::batch_former::ServingCandidate;
use crate::caps::execution::{ExecutionModel, GroupedModel};
use crate::cost::gpu::GpuSpec;
use crate::cost::shape::MoeModelShape;
use crate::serving::topic_affinity::batch_routing;
use crate::serving::{ExpectedRouting, StepTime, StepWork};

/// Prices a static batch from its candidates' expected routing.
pub struct ExpectedRoutingCost {
    model: ExecutionModel,
    n_layers: usize,
    prefill: Vec<f32>,
    decode: Vec<f32>,
}

impl ExpectedRoutingCost {
    /// The grouped model of `shape` on `gpu`'s analytic profile (`cost::roofline`).
    pub fn new(gpu: &GpuSpec, shape: &MoeModelShape) -> ExpectedRoutingCost {
        let profile = crate::cost::roofline::analytic_profile(gpu, shape);
        let model = GroupedModel::new(&profile, shape, gpu)
            .expect("an analytic profile is built for its own shape");
        let dims = shape.n_layers * shape.n_experts;
        ExpectedRoutingCost {
            model: ExecutionModel::Grouped(Box::new(model)),
            n_layers: shape.n_layers,
            prefill: vec![0.0; dims],
            decode: vec![0.0; dims],
        }
    }

    /// The time of `work`, the static batch of `batch` (their true load vectors).
    pub fn price(&mut self, work: &StepWork<'_>, batch: &[ServingCandidate]) -> StepTime {
        batch_routing(
            batch.iter().map(|c| (c.load.as_slice(), c.prompt_tokens)),
            work.decode_iterations > 0,
            &mut self.prefill,
            &mut self.decode,
        );
        let work = StepWork {
            expected_routing: Some(ExpectedRouting {
                layers: self.n_layers,
                prefill: &self.prefill,
                decode: &self.decode,
            }),
            ..*work
        };
        self.model.step_time(&work)
    }

    /// The last priced batch's prefill routing per layer and expert (its expert load).
    pub fn prefill_load(&self) -> &[f32] {
        &self.prefill
    }
}
