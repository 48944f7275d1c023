//! GEM in live mode: the GEM server (mapping, continuous batching, trace routing) runs
//! unchanged and asks a [`GemLive`] step cost for each engine step. Per MoE layer, every
//! virtual GPU runs one MoE launch on the routed tokens its mapped experts receive (spread over
//! its experts, as the per-GPU curve assumes) at its emulated speed, and the layer waits for
//! the slowest (the lock-step barrier is the maximum); the tensor-parallel dense part and head
//! run as one 1/G-wide GEMM per virtual GPU, again waiting for the slowest.

use crate::device::{Kernels, even_counts};
use crate::fidelity::StepRecord;
use crate::{Clock, Decisions, FamilyRun, LiveError};
use kernels::BackendError;
use sim::gem::config::Experiment;
use sim::gem::{
    CurveStepCost, Deployment, GemScenario, GemStepCost, GemStepTime, GemStepWork, serve_on,
};
use sim::runner::Policies;

/// One line per step: what the scheduler put into it and where its tokens went.
fn decision_line(work: &GemStepWork<'_>) -> String {
    format!(
        "tokens {} decode {} emitting {} per-layer-per-gpu {:?}",
        work.tokens, work.decode_seqs, work.emitting, work.gpu_tokens
    )
}

/// The simulated step cost, logging each step's decisions.
struct LoggedCurves<'a> {
    curves: CurveStepCost<'a>,
    log: Vec<String>,
}

impl GemStepCost for LoggedCurves<'_> {
    fn step(&mut self, work: &GemStepWork<'_>, busy: &mut [f64]) -> GemStepTime {
        self.log.push(decision_line(work));
        self.curves.step(work, busy)
    }
}

/// The live step cost: the curves predict, the kernels measure.
pub struct GemLive<'a> {
    predictor: CurveStepCost<'a>,
    kernels: &'a mut Kernels,
    speeds: &'a [f64],
    experts_per_gpu: usize,
    clock: Clock,
    steps: Vec<StepRecord>,
    log: Vec<String>,
    error: Option<BackendError>,
}

impl GemLive<'_> {
    /// Runs the step; adds each virtual GPU's measured busy time to `busy`.
    fn measure(&mut self, work: &GemStepWork<'_>, busy: &mut [f64]) -> Result<f64, BackendError> {
        let k = &mut *self.kernels;
        let top_k = k.shape().top_k;
        let g_count = work.n_gpus;
        let mut moe = 0.0;
        for (layer, row) in work.gpu_tokens.chunks_exact(g_count).enumerate() {
            let mut slowest = 0.0f64;
            for (g, &tokens) in row.iter().enumerate() {
                let counts = even_counts(tokens.round() as u32, self.experts_per_gpu);
                let t = k.moe_at_speed(layer, &counts, top_k, self.speeds[g])?;
                busy[g] += t;
                slowest = slowest.max(t);
            }
            moe += slowest;
        }
        let dense_share = k.dense_out_features().div_ceil(g_count);
        let head_share = k.shape().vocab.div_ceil(g_count);
        let mut dense = 0.0f64;
        for (g, &speed) in self.speeds.iter().enumerate() {
            let mut t = 0.0;
            for _ in 0..work.n_layers {
                t += k.dense_at_speed(dense_share, work.tokens as usize, 0, speed)?;
            }
            t += k.dense_at_speed(head_share, work.emitting as usize, 0, speed)?;
            busy[g] += t;
            dense = dense.max(t);
        }
        Ok(moe + dense)
    }
}

impl GemStepCost for GemLive<'_> {
    fn step(&mut self, work: &GemStepWork<'_>, busy: &mut [f64]) -> GemStepTime {
        self.log.push(decision_line(work));
        // The busy times of the step that advances the clock accumulate straight into `busy`
        // (so the predicted clock adds exactly what the simulation adds).
        let mut other_busy = vec![0.0; work.n_gpus];
        let predicted = match self.clock {
            Clock::Predicted => self.predictor.step(work, busy),
            Clock::Measured => self.predictor.step(work, &mut other_busy),
        };
        let measured_busy = match self.clock {
            Clock::Predicted => &mut other_busy[..],
            Clock::Measured => &mut *busy,
        };
        let measured = if self.error.is_none() {
            self.measure(work, measured_busy).unwrap_or_else(|e| {
                self.error = Some(e);
                predicted.nanos
            })
        } else {
            predicted.nanos
        };
        self.steps.push(StepRecord {
            index: self.steps.len(),
            what: format!(
                "step of {} tokens ({} decoding, {} emitting)",
                work.tokens, work.decode_seqs, work.emitting
            ),
            predicted_ns: predicted.nanos,
            measured_ns: measured,
        });
        match self.clock {
            Clock::Predicted => predicted,
            Clock::Measured => {
                // The MoE share of a measured step is not separated; the prediction's is used.
                let share = if predicted.nanos > 0.0 {
                    predicted.moe_nanos / predicted.nanos
                } else {
                    0.0
                };
                GemStepTime {
                    nanos: measured,
                    moe_nanos: measured * share,
                }
            }
        }
    }
}

/// The mapping's footprint in a run's details: its per-layer scores on the trace.
fn mapping_lines(details: &serde_json::Value) -> Vec<String> {
    ["per_layer_window_score_ms", "per_layer_unseen_score_ms"]
        .iter()
        .map(|key| format!("mapping {key}: {}", details[*key]))
        .collect()
}

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
    let mut simulated_cost = LoggedCurves {
        curves: CurveStepCost::new(scenario, &deployment),
        log: Vec::new(),
    };
    let simulated = serve_on(
        scenario,
        seed,
        policies.expert_mapper(&scenario.mapper).as_mut(),
        &deployment,
        &mut simulated_cost,
        &mut sim::records::DiscardRecords,
    );
    let variability = kernels.variability_emulation(&scenario.speed_factors);
    let mut live_cost = GemLive {
        predictor: CurveStepCost::new(scenario, &deployment),
        kernels,
        speeds: &scenario.speed_factors,
        experts_per_gpu: (scenario.shape.n_experts / scenario.n_gpus).max(1),
        clock,
        steps: Vec::new(),
        log: Vec::new(),
        error: None,
    };
    let live = serve_on(
        scenario,
        seed,
        policies.expert_mapper(&scenario.mapper).as_mut(),
        &deployment,
        &mut live_cost,
        &mut sim::records::DiscardRecords,
    );
    if let Some(e) = live_cost.error {
        return Err(LiveError::Backend(e));
    }
    let mut simulated_lines = mapping_lines(&simulated.details);
    simulated_lines.extend(simulated_cost.log);
    let mut live_lines = mapping_lines(&live.details);
    live_lines.extend(live_cost.log);
    Ok(FamilyRun {
        steps: live_cost.steps,
        simulated,
        live,
        decisions: Decisions::compare(
            "the expert mapping's per-layer scores, then every engine step's tokens, \
             decoding and emitting sequences, and routed tokens per (layer, GPU)",
            simulated_lines,
            live_lines,
        ),
        variability: Some(variability),
        execution: None,
    })
}
