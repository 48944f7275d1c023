//! Live mode over the serving layer's one step-cost seam (`expertsim_scenario::serving::step::StepCost`),
//! written once: [`LiveStep`] wraps any simulated step cost, predicts each step with it, runs
//! the step on the kernels through a family's [`Measure`], records predicted beside measured,
//! logs what the scheduler put into the step, and hands back the duration the chosen clock
//! says. [`Logged`] is the simulated twin (same log, no kernels), so the two runs' decisions
//! can be compared line by line. Several `LiveStep`s (one per engine or replica) share one
//! [`LiveSession`], hence one device and one step log.

use crate::device::Kernels;
use crate::fidelity::StepRecord;
use crate::{Clock, LiveError};
use expertsim_scenario::serving::step::{StepBreakdown, StepCost, StepParts, StepTime, StepWork};
use expertsim_scenario::time::SimDuration;
use kernels::BackendError;
use std::cell::RefCell;
use std::rc::Rc;

/// How a family runs one step of one engine on the kernels.
pub trait Measure {
    /// Runs `work` and returns its measured time in nanoseconds.
    fn measure(&mut self, kernels: &mut Kernels, work: &StepWork<'_>) -> Result<f64, BackendError>;
}

/// One line for the decision log: which engine, what the scheduler put into the step, where its
/// tokens were routed when the step carries MoE routing, and its tokens per adapter when its
/// sequences run with adapters.
pub fn step_line(engine: &str, work: &StepWork<'_>) -> String {
    let mut line = format!(
        "{engine}: {} sequences, {} prefill tokens, {} decoding, {} context tokens",
        work.requests, work.prefill_tokens, work.decode_tokens, work.context_tokens
    );
    if let Some(routed) = work.routed {
        line.push_str(&format!(", routed per (layer, GPU) {:?}", routed.per_gpu));
    }
    if !work.adapters.is_empty() {
        let per_adapter: Vec<(u32, u64)> = work
            .adapters
            .iter()
            .map(|a| (a.adapter, a.tokens))
            .collect();
        line.push_str(&format!(", tokens per adapter {per_adapter:?}"));
    }
    line
}

/// What every `LiveStep` of a run shares: the device, the clock, the records and the log.
pub struct LiveSession<'k> {
    kernels: &'k mut Kernels,
    clock: Clock,
    steps: Vec<StepRecord>,
    log: Vec<String>,
    error: Option<BackendError>,
}

impl<'k> LiveSession<'k> {
    pub fn new(kernels: &'k mut Kernels, clock: Clock) -> Rc<RefCell<LiveSession<'k>>> {
        Rc::new(RefCell::new(LiveSession {
            kernels,
            clock,
            steps: Vec::new(),
            log: Vec::new(),
            error: None,
        }))
    }

    /// The clock the run advances by.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// Runs `op` on the device outside any step (MOSAIC's model loads), with `line` in the
    /// decision log: its measured nanoseconds, or `None` once the device has failed (the first
    /// failure is kept and reported as a step's is).
    pub fn run_outside_step(
        &mut self,
        line: String,
        op: impl FnOnce(&mut Kernels) -> Result<f64, BackendError>,
    ) -> Option<f64> {
        self.log.push(line);
        if self.error.is_some() {
            return None;
        }
        match op(self.kernels) {
            Ok(ns) => Some(ns),
            Err(e) => {
                self.error = Some(e);
                None
            }
        }
    }

    /// The step records and the decision log, or the first backend failure.
    pub fn finish(self) -> Result<(Vec<StepRecord>, Vec<String>), LiveError> {
        match self.error {
            Some(e) => Err(LiveError::Backend(e)),
            None => Ok((self.steps, self.log)),
        }
    }
}

/// A simulated step cost run live: `predictor` prices, `measure` runs the step.
pub struct LiveStep<'k, P, M> {
    name: String,
    predictor: P,
    measure: M,
    session: Rc<RefCell<LiveSession<'k>>>,
}

impl<'k, P: StepCost, M: Measure> LiveStep<'k, P, M> {
    /// `name` labels the engine in the log and the step records.
    pub fn new(
        name: impl Into<String>,
        predictor: P,
        measure: M,
        session: Rc<RefCell<LiveSession<'k>>>,
    ) -> Self {
        LiveStep {
            name: name.into(),
            predictor,
            measure,
            session,
        }
    }
}

impl<P: StepCost, M: Measure> StepCost for LiveStep<'_, P, M> {
    fn price(&mut self, work: &StepWork<'_>) -> StepTime {
        let predicted = self.predictor.price(work);
        let mut session = self.session.borrow_mut();
        let session = &mut *session;
        let line = step_line(&self.name, work);
        session.log.push(line.clone());
        // After a failure the run finishes on predictions; the failure is reported.
        let measured = if session.error.is_none() {
            self.measure.measure(session.kernels, work)
        } else {
            Ok(f64::NAN)
        };
        let measured_ns = match measured {
            Ok(ns) => ns,
            Err(e) => {
                session.error = Some(e);
                f64::NAN
            }
        };
        session.steps.push(StepRecord {
            index: session.steps.len(),
            what: line,
            predicted_ns: predicted.duration.0 as f64,
            measured_ns,
        });
        match session.clock {
            Clock::Measured if measured_ns.is_finite() => {
                let duration = SimDuration(measured_ns.round().max(1.0) as u64);
                StepTime {
                    breakdown: scaled(
                        &predicted.breakdown,
                        duration.0 as f64 / predicted.duration.0.max(1) as f64,
                    ),
                    duration,
                    source: predicted.source,
                }
            }
            _ => predicted,
        }
    }
}

/// The prediction's breakdown stretched to a measured step: the kernels time the step as a
/// whole, so each part (and each GPU's busy time) keeps its predicted share of the duration.
fn scaled(breakdown: &StepBreakdown, factor: f64) -> StepBreakdown {
    StepBreakdown {
        compute_ns: breakdown.compute_ns * factor,
        memory_ns: breakdown.memory_ns * factor,
        communication_ns: breakdown.communication_ns * factor,
        overhead_ns: breakdown.overhead_ns * factor,
        moe_ns: breakdown.moe_ns * factor,
        per_gpu_busy_ns: breakdown
            .per_gpu_busy_ns
            .iter()
            .map(|b| b * factor)
            .collect(),
        op_sources: breakdown.op_sources,
        parts: StepParts {
            linear_ns: breakdown.parts.linear_ns * factor,
            elementwise_ns: breakdown.parts.elementwise_ns * factor,
            attention_ns: breakdown.parts.attention_ns * factor,
            head_ns: breakdown.parts.head_ns * factor,
            host_ns: breakdown.parts.host_ns * factor,
        },
    }
}

/// The simulated run's step cost with the same decision log as [`LiveStep`].
pub struct Logged<P> {
    name: String,
    inner: P,
    log: Rc<RefCell<Vec<String>>>,
}

impl<P: StepCost> Logged<P> {
    pub fn new(name: impl Into<String>, inner: P, log: Rc<RefCell<Vec<String>>>) -> Self {
        Logged {
            name: name.into(),
            inner,
            log,
        }
    }
}

impl<P: StepCost> StepCost for Logged<P> {
    fn price(&mut self, work: &StepWork<'_>) -> StepTime {
        self.log.borrow_mut().push(step_line(&self.name, work));
        self.inner.price(work)
    }
}
