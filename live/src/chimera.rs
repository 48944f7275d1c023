//! Chimera in live mode, through the serving layer's step-cost seam: the Chimera server
//! (semantic router, length predictor, queue policy, every engine's continuous-batching
//! replica) runs unchanged, and each engine's steps are priced by a [`LiveStep`] that predicts
//! with the analytic engine cost and measures the step on the kernels: the engine's dense model
//! scaled down as live MOSAIC scales its experts (1/64 of the widths, 1/8 of the layers, heads
//! kept), each layer one GEMM over the step's rows with attention over their cached tokens,
//! then the output head over the sequences.

use crate::device::Kernels;
use crate::step::{LiveSession, LiveStep, Logged, Measure};
use crate::{Clock, Decisions, FamilyRun, LiveError};
use kernels::BackendError;
use kernels::decode::DecodeShape;
use sim::chimera::ChimeraScenario;
use sim::chimera::server::EngineStepCost;
use sim::cost::shape::DenseModelShape;
use sim::mosaic::live_scale::{LIVE_SCALING, block_gemm_width};
use sim::runner::Policies;
use sim::serving::step::{StepCost, StepWork};
use std::cell::RefCell;
use std::rc::Rc;

/// A Chimera engine's model scaled down for live execution: one block's decode shape, the
/// output head's, and the layer count.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScaledEngine {
    pub block: DecodeShape,
    pub head: DecodeShape,
    pub layers: usize,
}

impl ScaledEngine {
    /// From the model's shape: one block as one GEMM over `hidden` of the block's parameters
    /// (`live_scale::block_gemm_width`, as live MOSAIC runs a block), widths and layers scaled
    /// by `LIVE_SCALING`, heads kept.
    pub fn of(model: &DenseModelShape) -> ScaledEngine {
        let widths = LIVE_SCALING.widths as usize;
        let width = |v: usize| (v / widths).max(1);
        let block = DecodeShape {
            hidden: width(model.hidden as usize),
            // The block GEMM's output width over the full hidden, then scaled like a width.
            out_features: width(block_gemm_width(model) as usize),
            n_heads: model.n_heads as usize,
            n_kv_heads: model.n_kv_heads as usize,
            head_dim: width(model.head_dim as usize),
        };
        ScaledEngine {
            block,
            head: DecodeShape {
                out_features: width(model.vocab as usize),
                ..block
            },
            layers: (model.n_layers as usize / LIVE_SCALING.layers as usize).max(1),
        }
    }
}

/// Runs one engine step on the kernels: every scaled-down layer over the step's rows (its
/// sequences plus the prompt tokens it prefills), with the step's cached tokens spread evenly
/// over the rows, then the head over the sequences.
struct EngineMeasure(ScaledEngine);

impl Measure for EngineMeasure {
    fn measure(&mut self, kernels: &mut Kernels, work: &StepWork<'_>) -> Result<f64, BackendError> {
        let rows = (work.requests + work.prefill_tokens) as usize;
        let context = work.context_tokens.div_ceil((rows as u64).max(1)) as usize;
        let mut total = 0.0;
        for _ in 0..self.0.layers {
            total += kernels.decode_step(self.0.block, rows, context)?;
        }
        total += kernels.decode_step(self.0.head, work.requests as usize, 0)?;
        Ok(total)
    }
}

fn engine_name(scenario: &ChimeraScenario, e: usize) -> String {
    format!("engine {e} ({})", scenario.engines[e].cost.model)
}

/// One seed of `scenario` simulated, then live on `kernels`.
pub fn run(
    scenario: &ChimeraScenario,
    seed: u64,
    policies: &dyn Policies,
    kernels: &mut Kernels,
    clock: Clock,
) -> Result<FamilyRun, LiveError> {
    let simulated_log = Rc::new(RefCell::new(Vec::new()));
    let logged: Vec<Box<dyn StepCost + '_>> = (0..scenario.engines.len())
        .map(|e| {
            Box::new(Logged::new(
                engine_name(scenario, e),
                EngineStepCost(&scenario.engines[e].cost),
                simulated_log.clone(),
            )) as Box<dyn StepCost + '_>
        })
        .collect();
    let simulated = sim::chimera::run::run_with_step_costs(
        scenario,
        seed,
        policies.queue_policy(&scenario.queue).as_mut(),
        policies.router(&scenario.routing).as_mut(),
        logged,
    );
    let session = LiveSession::new(kernels, clock);
    let live_costs: Vec<Box<dyn StepCost + '_>> = (0..scenario.engines.len())
        .map(|e| {
            Box::new(LiveStep::new(
                engine_name(scenario, e),
                EngineStepCost(&scenario.engines[e].cost),
                EngineMeasure(ScaledEngine::of(&scenario.engines[e].cost.shape)),
                session.clone(),
            )) as Box<dyn StepCost + '_>
        })
        .collect();
    let live = sim::chimera::run::run_with_step_costs(
        scenario,
        seed,
        policies.queue_policy(&scenario.queue).as_mut(),
        policies.router(&scenario.routing).as_mut(),
        live_costs,
    );
    let session = Rc::try_unwrap(session)
        .ok()
        .expect("the live run's step costs are dropped")
        .into_inner();
    let (steps, live_log) = session.finish()?;
    let simulated_log = std::mem::take(&mut *simulated_log.borrow_mut());
    Ok(FamilyRun {
        steps,
        simulated,
        live,
        decisions: Decisions::compare(
            "every engine step in the order the engines started them: the engine, its \
             sequences, prefill tokens, decoding sequences and cached tokens",
            simulated_log,
            live_log,
        ),
        variability: None,
        execution: Some(format!(
            "each engine's model runs scaled down: {}; a layer is one GEMM over hidden with \
             attention over the step's cached tokens spread evenly over its rows",
            LIVE_SCALING.describe()
        )),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sim::chimera::models::model_shape;

    /// Qwen2.5-7B: a block holds 3584 x (3584 + 2 x 512 + 3584) + 3 x 3584 x 18944 =
    /// 233,046,016 parameters, a block GEMM 65,024 wide over 3584; scaled by 1/64: hidden 56,
    /// width 1016, head_dim 2, vocab 2376; 28 query heads and 4 KV heads kept; 28 / 8 = 3 layers.
    #[test]
    fn a_scaled_engine_keeps_heads_and_shrinks_widths() {
        let model = model_shape("qwen2.5-7b").unwrap();
        let s = ScaledEngine::of(&model);
        assert_eq!(s.layers, 3);
        assert_eq!(
            (s.block.hidden, s.block.n_heads, s.block.n_kv_heads),
            (56, 28, 4)
        );
        assert_eq!(s.block.head_dim, 2);
        assert_eq!(s.head.out_features, 152_064 / 64);
        assert_eq!(s.block.out_features, 65_024 / 64);
        assert!((1000..1030).contains(&s.block.out_features), "{s:?}");
    }
}
