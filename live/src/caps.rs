//! CAPS in live mode: the CAPS server (queue, trigger/tick loop, selector) runs unchanged and
//! asks a [`CapsLive`] executor for each batch's time. It runs the batch on the kernels as the
//! `straggler` cost model prices it — per layer the dense part over the prompt tokens and the
//! MoE layer on the batch's token-to-expert assignment (the summed routing counts of its
//! requests, rounded to whole tokens), the output head, then every decode step the same on the
//! decode routing — and answers with the measured time (or the predicted one, see [`Clock`]).

use crate::device::{Kernels, round_counts};
use crate::fidelity::StepRecord;
use crate::{Clock, Decisions, FamilyRun, LiveError};
use kernels::BackendError;
use sim::caps::CapsScenario;
use sim::caps::execution::BatchWork;
use sim::caps::run::{simulate_on, step_executor};
use sim::caps::server::{RecordSink, RequestRecord, StepExecutor};
use sim::runner::Policies;
use sim::time::SimDuration;

/// The live step executor: the scenario's own cost model predicts, the kernels measure.
pub struct CapsLive<'a> {
    predictor: Box<dyn StepExecutor>,
    kernels: &'a mut Kernels,
    clock: Clock,
    steps: Vec<StepRecord>,
    error: Option<BackendError>,
}

impl CapsLive<'_> {
    /// Runs `work` on the kernels; returns the summed kernel time in nanoseconds.
    fn measure(&mut self, work: &BatchWork<'_>) -> Result<f64, BackendError> {
        let k = &mut *self.kernels;
        let shape = k.shape().clone();
        let (n_experts, top_k) = (shape.n_experts, shape.top_k);
        let dense = k.dense_out_features();
        let prompt = work.prompt_tokens as usize;
        let batch = work.n_requests;
        let mut total = 0.0;
        for (layer, load) in work.load.chunks_exact(n_experts).enumerate() {
            total += k.dense(dense, prompt, 0)?;
            total += k.moe(layer, &round_counts(load, (prompt * top_k) as u32), top_k)?;
        }
        total += k.dense(shape.vocab, batch, 0)?;
        let decode_counts: Vec<Vec<u32>> = work
            .decode_load
            .chunks_exact(n_experts)
            .map(|load| round_counts(load, (batch * top_k) as u32))
            .collect();
        let context = k.decode_context();
        for _ in 0..work.decode_steps {
            for (layer, counts) in decode_counts.iter().enumerate() {
                total += k.dense(dense, batch, context)?;
                total += k.moe(layer, counts, top_k)?;
            }
            total += k.dense(shape.vocab, batch, 0)?;
        }
        Ok(total)
    }
}

impl StepExecutor for CapsLive<'_> {
    fn batch_time(&mut self, work: &BatchWork<'_>) -> SimDuration {
        let predicted = self.predictor.batch_time(work);
        // After a backend failure the run finishes on predicted times and then reports it.
        let measured = if self.error.is_none() {
            self.measure(work).unwrap_or_else(|e| {
                self.error = Some(e);
                predicted.0 as f64
            })
        } else {
            predicted.0 as f64
        };
        self.steps.push(StepRecord {
            index: self.steps.len(),
            what: format!(
                "batch of {} requests, {} prompt tokens, {} decode steps",
                work.n_requests, work.prompt_tokens, work.decode_steps
            ),
            predicted_ns: predicted.0 as f64,
            measured_ns: measured,
        });
        match self.clock {
            Clock::Measured => SimDuration(measured.round().max(1.0) as u64),
            Clock::Predicted => predicted,
        }
    }
}

/// Which requests went into which batch, in batch order (ids sorted within a batch).
#[derive(Default)]
pub struct BatchLog {
    batches: Vec<Vec<u64>>,
}

impl RecordSink for BatchLog {
    fn record(&mut self, record: &RequestRecord) {
        let b = record.batch as usize;
        if self.batches.len() <= b {
            self.batches.resize(b + 1, Vec::new());
        }
        self.batches[b].push(record.id);
    }
}

impl BatchLog {
    fn into_lines(self) -> Vec<String> {
        self.batches
            .into_iter()
            .enumerate()
            .map(|(b, mut ids)| {
                ids.sort_unstable();
                format!("batch {b}: requests {ids:?}")
            })
            .collect()
    }
}

/// One seed of `scenario` simulated, then live on `kernels`.
pub fn run(
    scenario: &CapsScenario,
    seed: u64,
    policies: &dyn Policies,
    kernels: &mut Kernels,
    clock: Clock,
) -> Result<FamilyRun, LiveError> {
    let mut simulated_log = BatchLog::default();
    let (mut simulated_executor, _) = step_executor(scenario, seed);
    let simulated = simulate_on(
        scenario,
        seed,
        policies.batch_selector(&scenario.selector).as_mut(),
        simulated_executor.as_mut(),
        &mut simulated_log,
    );
    let mut live_log = BatchLog::default();
    let mut executor = CapsLive {
        predictor: step_executor(scenario, seed).0,
        kernels,
        clock,
        steps: Vec::new(),
        error: None,
    };
    let live = simulate_on(
        scenario,
        seed,
        policies.batch_selector(&scenario.selector).as_mut(),
        &mut executor,
        &mut live_log,
    );
    if let Some(e) = executor.error {
        return Err(LiveError::Backend(e));
    }
    Ok(FamilyRun {
        steps: executor.steps,
        simulated: sim::caps::run_output(&simulated),
        live: sim::caps::run_output(&live),
        decisions: Decisions::compare(
            "the requests of every batch, in batch order",
            simulated_log.into_lines(),
            live_log.into_lines(),
        ),
        variability: None,
        execution: None,
    })
}
