//! How a `static` replica's batches are priced when not pass by pass
//! (`replica.scheduler.pricing`, docs/serving-family.md): a `serving::StepCost` that the
//! replica's batches go to through the one step-cost seam, each batch's `StepWork` carrying its
//! expected routing (the prefill's summed per-expert load vectors and each decode pass's
//! load / prompt tokens, `serving::topic_affinity::BatchRouting`). `expected_routing`: CAPS's
//! `grouped` execution model (per layer the active experts as one grouped GEMM through the one
//! MoE entry point, `cost::moe_layer`, eager) on the replica GPU's analytic profile, no host
//! time (CAPS models none).

use super::config::{ServingScenario, StaticPricing};
use crate::serving::StepCost;
use crate::serving::execution::{ExecutionModel, GroupedModel};

/// The step cost `pricing` names for a replica of `group`; `None` for `passes` (the replica's
/// own `ReplicaStepCost::price_static`).
pub fn step_cost<'a>(
    pricing: &StaticPricing,
    group: &ServingScenario,
) -> Option<Box<dyn StepCost + 'a>> {
    match pricing {
        StaticPricing::Passes => None,
        StaticPricing::ExpectedRouting => {
            let shape = group
                .model
                .experts()
                .expect("expected-routing pricing is validated to an MoE model");
            let gpu = &group.replica.gpu;
            let profile = crate::cost::roofline::analytic_profile(gpu, &shape);
            let model = GroupedModel::new(&profile, &shape, gpu)
                .expect("an analytic profile is built for its own shape");
            Some(Box::new(ExecutionModel::Grouped(Box::new(model))))
        }
    }
}
