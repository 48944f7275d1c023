//! GEM in live mode, through the serving layer's step-cost seam: the GEM server (mapping, the
//! continuous-batching replica, trace routing) runs unchanged, and each engine step is priced
//! by a [`LiveStep`] that predicts with the per-GPU curves (`CurveStepCost`) and measures the
//! step on the kernels ([`GemMeasure`]): per MoE layer, every virtual GPU runs one MoE launch on
//! the routed tokens its mapped experts receive (spread over its experts, as the per-GPU curve
//! assumes) at its emulated speed, and the layer waits for the slowest (the lock-step barrier is
//! the maximum); the tensor-parallel dense part and head run as each virtual GPU's shard
//! (`DecodeShape::shard`: 1/G of the outputs and attention heads): per layer a prefill pass
//! over the step's prompt tokens and a decode pass (GEMM and attention over the decode context)
//! over its decoding sequences, whichever it has, as `CurveStepCost` prices them; again the
//! slowest GPU counts. Under the measured clock the step's duration is the measurement, and its
//! MoE time and per-GPU busy times are the prediction's shares of it (`step::LiveStep`).

use crate::device::{Kernels, even_counts};
use crate::step::{LiveSession, LiveStep, Logged, Measure};
use crate::{Clock, Decisions, FamilyRun, LiveError};
use kernels::BackendError;
use sim::gem::config::Experiment;
use sim::gem::{CurveStepCost, Deployment, GemScenario, serve_on};
use sim::policies::Policies;
use sim::serving::QueuePolicyConfig;
use sim::serving::step::StepWork;
use std::cell::RefCell;
use std::rc::Rc;

/// Runs one GEM engine step on the kernels: the MoE layers per virtual GPU, then the dense part.
pub struct GemMeasure<'a> {
    speeds: &'a [f64],
    experts_per_gpu: usize,
}

impl Measure for GemMeasure<'_> {
    fn measure(&mut self, k: &mut Kernels, work: &StepWork<'_>) -> Result<f64, BackendError> {
        let routed = work
            .routed
            .expect("a GEM step carries its routed tokens per layer and GPU");
        let top_k = k.shape().top_k;
        let g_count = self.speeds.len();
        let mut moe = 0.0;
        for (layer, row) in routed.per_gpu.chunks_exact(g_count).enumerate() {
            let mut slowest = 0.0f64;
            for (&tokens, &speed) in row.iter().zip(self.speeds) {
                let counts = even_counts(tokens, self.experts_per_gpu);
                slowest = slowest.max(k.moe_at_speed(layer, &counts, top_k, speed)?);
            }
            moe += slowest;
        }
        let (prefill, decode) = (work.prefill_tokens as usize, work.decode_tokens as usize);
        let emitting = work.batch.iter().filter(|s| s.step_emits()).count();
        let context = k.decode_context();
        let block = k.dense_shape(k.dense_out_features()).shard(g_count);
        let head = k.dense_shape(k.shape().vocab).shard(g_count);
        let mut dense = 0.0f64;
        for &speed in self.speeds {
            let mut t = 0.0;
            for _ in 0..routed.layers {
                t += k.decode_step_at_speed(block, prefill, 0, speed)?;
                t += k.decode_step_at_speed(block, decode, context, speed)?;
            }
            t += k.decode_step_at_speed(head, emitting, 0, speed)?;
            dense = dense.max(t);
        }
        Ok(moe + dense)
    }
}

/// The mapping's footprint in a run's details: its per-layer scores on the trace.
fn mapping_lines(details: &serde_json::Value) -> Vec<String> {
    ["per_layer_window_score_ms", "per_layer_unseen_score_ms"]
        .iter()
        .map(|key| format!("mapping {key}: {}", details[*key]))
        .collect()
}

const ENGINE: &str = "engine";

/// One seed of `scenario` simulated, then live on `kernels`.
pub fn run(
    scenario: &GemScenario,
    seed: u64,
    policies: &dyn Policies,
    kernels: &mut Kernels,
    clock: Clock,
) -> Result<FamilyRun, LiveError> {
    if scenario.experiment != Experiment::Serving {
        return Err(LiveError::Unsupported(
            "GEM live mode runs the serving experiment (experiment = \"serving\")".into(),
        ));
    }
    let deployment = Deployment::new(scenario, seed);
    let simulated_log = Rc::new(RefCell::new(Vec::new()));
    let mut simulated_cost = Logged::new(
        ENGINE,
        CurveStepCost::new(scenario, &deployment),
        simulated_log.clone(),
    );
    let simulated = serve_on(
        scenario,
        seed,
        policies.expert_mapper(&scenario.mapper).as_mut(),
        policies.queue_policy(&QueuePolicyConfig::Fcfs).as_mut(),
        &deployment,
        &mut simulated_cost,
        &mut sim::records::DiscardRecords,
    );
    let variability = kernels.variability_emulation(&scenario.speed_factors);
    let session = LiveSession::new(kernels, clock);
    let mut live_cost = LiveStep::new(
        ENGINE,
        CurveStepCost::new(scenario, &deployment),
        GemMeasure {
            speeds: &scenario.speed_factors,
            experts_per_gpu: (scenario.shape.n_experts / scenario.n_gpus).max(1),
        },
        session.clone(),
    );
    let live = serve_on(
        scenario,
        seed,
        policies.expert_mapper(&scenario.mapper).as_mut(),
        policies.queue_policy(&QueuePolicyConfig::Fcfs).as_mut(),
        &deployment,
        &mut live_cost,
        &mut sim::records::DiscardRecords,
    );
    drop(live_cost);
    let session = Rc::try_unwrap(session)
        .ok()
        .expect("the live run's step cost is dropped")
        .into_inner();
    let (steps, live_log) = session.finish()?;
    let mut simulated_lines = mapping_lines(&simulated.details);
    simulated_lines.extend(std::mem::take(&mut *simulated_log.borrow_mut()));
    let mut live_lines = mapping_lines(&live.details);
    live_lines.extend(live_log);
    Ok(FamilyRun {
        steps,
        simulated,
        live,
        decisions: Decisions::compare(
            "the expert mapping's per-layer scores, then every engine step's sequences, \
             prefill tokens, decoding sequences, cached tokens and routed tokens per \
             (layer, GPU)",
            simulated_lines,
            live_lines,
        ),
        variability: Some(variability),
        execution: None,
    })
}
