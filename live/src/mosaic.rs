//! MOSAIC in live mode: the workload, the offline calibration, the placement (ILP or
//! round-robin) and every worker session's continuous-batching loop run unchanged and ask a
//! [`MosaicLive`] session cost for each load and decode step. A load is a real host-to-device
//! copy of the model's bytes; a decode step runs the model's layers and output head through
//! the kernels' decode step. Both are of the model scaled down (see [`scaled_down`]), so a
//! session runs in milliseconds on the CPU references; the predictions are the scenario's
//! session costs: those of its full-size models on `serving.gpu`, or, with `[serving]
//! profile`, the measured profile of the scaled-down models (`expertsim-calibrate
//! --dense-models`). The aggregator stage is priced by the
//! family's model in both runs.

use crate::device::Kernels;
use crate::fidelity::StepRecord;
use crate::{Clock, Decisions, FamilyRun, LiveError};
use kernels::BackendError;
use sim::cost::shape::DenseModelShape;
use sim::mosaic::decode::DecodeStep;
use sim::mosaic::live_scale::{LIVE_SCALING, kernel_rows_and_context};
use sim::mosaic::{MosaicScenario, SessionCost, SimulatedSessionCost, try_simulate_on};
use sim::runner::Policies;

/// How a model is scaled down, as reported in the output.
fn scaling_line() -> String {
    format!(
        "each expert runs scaled down: {}; loads copy that model's bf16 bytes",
        LIVE_SCALING.describe()
    )
}

/// `shape` scaled down for live execution.
pub fn scaled_down(shape: &DenseModelShape) -> DenseModelShape {
    LIVE_SCALING.apply(shape)
}

/// One line per priced event: the load, or what the session loop put into the step.
fn load_line(scenario: &MosaicScenario, worker: usize, expert: usize) -> String {
    format!("worker {worker}: load {}", scenario.experts[expert].name)
}

fn step_line(scenario: &MosaicScenario, worker: usize, expert: usize, s: &DecodeStep) -> String {
    format!(
        "worker {worker}: {} step of {} sequences, {} cached tokens, {} prefill tokens",
        scenario.experts[expert].name, s.batch, s.context_tokens, s.prefill_tokens
    )
}

/// The simulated session costs, logging each load and step.
struct LoggedSimulated<'a> {
    costs: SimulatedSessionCost<'a>,
    log: Vec<String>,
}

impl SessionCost for LoggedSimulated<'_> {
    fn load_s(&mut self, worker: usize, expert: usize) -> f64 {
        self.log
            .push(load_line(self.costs.scenario, worker, expert));
        self.costs.load_s(worker, expert)
    }

    fn step_s(&mut self, worker: usize, expert: usize, step: &DecodeStep) -> f64 {
        self.log
            .push(step_line(self.costs.scenario, worker, expert, step));
        self.costs.step_s(worker, expert, step)
    }
}

/// The live session costs: the scenario's model predicts, the kernels measure.
pub struct MosaicLive<'a> {
    predictor: SimulatedSessionCost<'a>,
    kernels: &'a mut Kernels,
    clock: Clock,
    steps: Vec<StepRecord>,
    /// Measured load nanoseconds, with what was loaded.
    loads: Vec<(String, f64)>,
    log: Vec<String>,
    error: Option<BackendError>,
}

impl MosaicLive<'_> {
    /// What advances the clock: the prediction, or the measurement when there is one.
    fn advance(&mut self, predicted_s: f64, measured: Result<f64, BackendError>) -> (f64, f64) {
        match measured {
            Ok(ns) => (
                ns,
                match self.clock {
                    Clock::Predicted => predicted_s,
                    Clock::Measured => ns * 1e-9,
                },
            ),
            Err(e) => {
                self.error.get_or_insert(e);
                (f64::NAN, predicted_s)
            }
        }
    }

    /// One decode step of `expert`: every (scaled-down) layer over the step's rows, attention
    /// spread evenly over them, then the output head.
    fn measure_step(&mut self, expert: usize, step: &DecodeStep) -> Result<f64, BackendError> {
        let shape = scaled_down(&self.predictor.scenario.experts[expert].shape);
        let (block, head) = dense_decode_shapes(&shape);
        let (rows, context) = kernel_rows_and_context(step);
        let (rows, context) = (rows as usize, context as usize);
        let mut total = 0.0;
        for _ in 0..shape.n_layers {
            total += self.kernels.decode_step(block, rows, context)?;
        }
        total += self.kernels.decode_step(head, rows, 0)?;
        Ok(total)
    }
}

impl SessionCost for MosaicLive<'_> {
    fn load_s(&mut self, worker: usize, expert: usize) -> f64 {
        let scenario = self.predictor.scenario;
        self.log.push(load_line(scenario, worker, expert));
        let predicted = self.predictor.load_s(worker, expert);
        let bytes = scaled_down(&scenario.experts[expert].shape).weight_bytes() as usize;
        let measured = if self.error.is_none() {
            self.kernels.load(bytes)
        } else {
            Ok(0.0)
        };
        let (measured_ns, seconds) = self.advance(predicted, measured);
        self.loads.push((
            format!(
                "worker {worker}: {} ({bytes} bytes)",
                scenario.experts[expert].name
            ),
            measured_ns,
        ));
        seconds
    }

    fn step_s(&mut self, worker: usize, expert: usize, step: &DecodeStep) -> f64 {
        let scenario = self.predictor.scenario;
        self.log.push(step_line(scenario, worker, expert, step));
        let predicted = self.predictor.step_s(worker, expert, step);
        let measured = if self.error.is_none() {
            self.measure_step(expert, step)
        } else {
            Ok(0.0)
        };
        let (measured_ns, seconds) = self.advance(predicted, measured);
        self.steps.push(StepRecord {
            index: self.steps.len(),
            what: format!(
                "worker {worker} {}: {} sequences, {} cached, {} prefill tokens",
                scenario.experts[expert].name, step.batch, step.context_tokens, step.prefill_tokens
            ),
            predicted_ns: predicted * 1e9,
            measured_ns,
        });
        seconds
    }
}

/// The placement in a run's details, one line per worker.
fn placement_lines(details: &serde_json::Value) -> Vec<String> {
    match details["plan"].as_array() {
        Some(workers) => workers
            .iter()
            .enumerate()
            .map(|(w, sessions)| format!("placement worker {w}: {sessions}"))
            .collect(),
        None => vec![format!("no placement: {}", details["error"])],
    }
}

/// One seed of `scenario` simulated, then live on `kernels`.
pub fn run(
    scenario: &MosaicScenario,
    seed: u64,
    policies: &dyn Policies,
    kernels: &mut Kernels,
    clock: Clock,
) -> Result<FamilyRun, LiveError> {
    let failed = |e: sim::mosaic::SimulateError| LiveError::Unsupported(e.to_string());
    let mut simulated_cost = LoggedSimulated {
        costs: SimulatedSessionCost { scenario },
        log: Vec::new(),
    };
    let simulated = try_simulate_on(
        scenario,
        seed,
        policies.placement(&scenario.placement).as_mut(),
        policies.aggregation_gate(&scenario.gate).as_mut(),
        &mut simulated_cost,
    )
    .map_err(failed)?;
    let mut live_cost = MosaicLive {
        predictor: SimulatedSessionCost { scenario },
        kernels,
        clock,
        steps: Vec::new(),
        loads: Vec::new(),
        log: Vec::new(),
        error: None,
    };
    let live = try_simulate_on(
        scenario,
        seed,
        policies.placement(&scenario.placement).as_mut(),
        policies.aggregation_gate(&scenario.gate).as_mut(),
        &mut live_cost,
    )
    .map_err(failed)?;
    if let Some(e) = live_cost.error {
        return Err(LiveError::Backend(e));
    }
    let mut simulated_lines = placement_lines(&simulated.details);
    simulated_lines.extend(simulated_cost.log);
    let mut live_lines = placement_lines(&live.details);
    live_lines.extend(live_cost.log);
    let loads: Vec<String> = live_cost
        .loads
        .iter()
        .map(|(what, ns)| format!("{what} in {:.1} us", ns / 1e3))
        .collect();
    Ok(FamilyRun {
        steps: live_cost.steps,
        simulated,
        live,
        decisions: Decisions::compare(
            "the placement (sessions per worker with their prompt counts), then every session's \
             load and continuous-batching decode steps (sequences, cached and prefill tokens)",
            simulated_lines,
            live_lines,
        ),
        variability: None,
        execution: Some(format!(
            "{}; measured host-to-device loads: {}",
            scaling_line(),
            loads.join("; ")
        )),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scaled_down_model_keeps_its_heads_and_shrinks_its_bytes() {
        let full = DenseModelShape::preset("llama-3.1-8b-instruct").unwrap();
        let small = scaled_down(&full);
        assert_eq!((small.hidden, small.n_layers, small.n_heads), (64, 4, 32));
        let ratio = full.weight_bytes() / small.weight_bytes();
        assert!(ratio > 4096.0, "{ratio}");
        let (block, head) = dense_decode_shapes(&small);
        assert_eq!(
            block.out_features * block.hidden,
            small.block_params() as usize
        );
        assert_eq!(head.out_features, small.vocab as usize);
    }
}

/// The kernels' decode shapes of a dense model (block, head).
fn dense_decode_shapes(
    shape: &sim::cost::shape::DenseModelShape,
) -> (kernels::decode::DecodeShape, kernels::decode::DecodeShape) {
    let [
        hidden,
        block_out_features,
        n_heads,
        n_kv_heads,
        head_dim,
        vocab,
    ] = sim::mosaic::live_scale::kernel_dims(shape);
    kernels::decode::DecodeShape::of_dense(kernels::decode::DenseDims {
        hidden,
        block_out_features,
        n_heads,
        n_kv_heads,
        head_dim,
        vocab,
    })
}
