//! How a `static` replica's batches are priced when not pass by pass
//! (`replica.scheduler.pricing`, docs/serving-family.md): a `serving::StepCost` that the
//! replica's batches go to through the one step-cost seam, each batch's `StepWork` carrying its
//! expected routing (the prefill's summed per-expert load vectors and each decode pass's
//! load / prompt tokens, `serving::topic_affinity::BatchRouting`). The expected-routing models
//! are CAPS's (`serving_family::execution`) on the replica GPU's analytic profile, no host time (CAPS
//! models none): `expected_routing` (`GroupedModel`: per layer the active experts as one grouped
//! GEMM through the one MoE entry point, `cost::moe_layer`, eager), `cv` (`CvModel`: caps.txt's
//! base x (1 + CV x sensitivity)) and `straggler` (`StragglerModel`: per layer the most loaded
//! expert on the expert curve); `constant` and `exponential` are the queueing references
//! (`ConstantService`, `ExponentialService`: one service time per batch, whatever it holds).

use super::config::{SchedulerTable, ServingScenario, StaticPricing};
use crate::rng::SimRng;
use crate::serving::StepCost;
use crate::serving_family::execution::{
    ConstantService, CvModel, ExecutionModel, ExponentialService, GroupedModel, StragglerModel,
};
use crate::time::SimDuration;

/// A static replica's pricing: its step cost and the weight of a batch's load CV in the
/// imbalance factor it reports (the `cv` model's sensitivity; 1 for the others, as the caps
/// family reports it).
pub struct StaticPricingCost<'a> {
    pub cost: Box<dyn StepCost + 'a>,
    pub imbalance_sensitivity: f64,
}

/// The pricing of a replica of `group` (`None` for `passes`, the replica's own
/// `ReplicaStepCost::price_static`, and for a kind other than `static`); `exponential` draws its
/// service times from `service`.
pub fn step_cost<'a>(group: &ServingScenario, service: SimRng) -> Option<StaticPricingCost<'a>> {
    let SchedulerTable::Static {
        pricing,
        sensitivity,
        service_ms,
        ..
    } = &group.replica.scheduler
    else {
        return None;
    };
    let service_time = || {
        SimDuration::from_secs_f64(service_ms.expect("a reference pricing has service_ms") * 1e-3)
    };
    let (cost, imbalance_sensitivity): (Box<dyn StepCost + 'a>, f64) = match pricing {
        StaticPricing::Passes => return None,
        StaticPricing::Constant => (Box::new(ConstantService(service_time())), 1.0),
        StaticPricing::Exponential => (
            Box::new(ExponentialService {
                mean: service_time(),
                rng: service,
            }),
            1.0,
        ),
        StaticPricing::ExpectedRouting | StaticPricing::Cv | StaticPricing::Straggler => {
            let shape = group
                .model
                .experts()
                .expect("expected-routing pricing is validated to an MoE model");
            let gpu = &group.replica.gpu;
            let profile = crate::cost::roofline::analytic_profile(gpu, &shape);
            let built = "an analytic profile is built for its own shape";
            let model = match pricing {
                StaticPricing::Cv => {
                    ExecutionModel::Cv(CvModel::new(&profile, &shape, *sensitivity).expect(built))
                }
                StaticPricing::Straggler => {
                    ExecutionModel::Straggler(StragglerModel::new(&profile, &shape).expect(built))
                }
                _ => ExecutionModel::Grouped(Box::new(
                    GroupedModel::new(&profile, &shape, gpu).expect(built),
                )),
            };
            let sensitivity = match &model {
                ExecutionModel::Cv(cv) => cv.sensitivity(),
                _ => 1.0,
            };
            (Box::new(model), sensitivity)
        }
    };
    Some(StaticPricingCost {
        cost,
        imbalance_sensitivity,
    })
}
