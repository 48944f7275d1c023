//! CAPS in live mode, through the serving layer's step-cost seam: the CAPS server (queue,
//! trigger/tick loop, selector as the replica's batch former) runs unchanged, and each static
//! batch, one step of the replica, is priced by a [`LiveStep`] that predicts with the scenario's
//! own step cost and measures the batch on the kernels ([`BatchMeasure`]): per layer the dense
//! part over the prompt tokens and the MoE layer on the batch's token-to-expert assignment (its
//! expected prefill routing rounded to whole tokens), the output head, then every decode pass
//! the same on the decode routing.

use crate::device::{Kernels, round_counts};
use crate::step::{LiveSession, LiveStep, Measure};
use crate::{Clock, Decisions, FamilyRun, LiveError};
use kernels::BackendError;
use sim::caps::CapsScenario;
use sim::caps::run::{batch_of, simulate_on, step_executor};
use sim::policies::Policies;
use sim::records::{RecordSink, RequestRecord};
use sim::serving::StepWork;

/// Runs one CAPS batch on the kernels.
struct BatchMeasure;

impl Measure for BatchMeasure {
    fn measure(&mut self, k: &mut Kernels, work: &StepWork<'_>) -> Result<f64, BackendError> {
        let routing = work
            .expected_routing
            .expect("a CAPS step carries its expected routing");
        let shape = k.shape().clone();
        let (n_experts, top_k) = (shape.n_experts, shape.top_k);
        let dense = k.dense_out_features();
        let prompt = work.prefill_tokens as usize;
        let batch = work.requests as usize;
        let mut total = 0.0;
        for (layer, load) in routing.prefill.chunks_exact(n_experts).enumerate() {
            total += k.dense(dense, prompt, 0)?;
            total += k.moe(layer, &round_counts(load, (prompt * top_k) as u32), top_k)?;
        }
        total += k.dense(shape.vocab, batch, 0)?;
        let decode_counts: Vec<Vec<u32>> = routing
            .decode
            .chunks_exact(n_experts)
            .map(|load| round_counts(load, (batch * top_k) as u32))
            .collect();
        let context = k.decode_context();
        for _ in 0..work.decode_iterations {
            for (layer, counts) in decode_counts.iter().enumerate() {
                total += k.dense(dense, batch, context)?;
                total += k.moe(layer, counts, top_k)?;
            }
            total += k.dense(shape.vocab, batch, 0)?;
        }
        Ok(total)
    }
}

/// Which requests went into which batch, in batch order (ids sorted within a batch).
#[derive(Default)]
pub struct BatchLog {
    batches: Vec<Vec<u64>>,
}

impl RecordSink for BatchLog {
    fn record(&mut self, record: &RequestRecord<'_>) {
        let b = batch_of(record) as usize;
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
    let simulated = simulate_on(
        scenario,
        seed,
        policies.batch_selector(&scenario.selector).as_mut(),
        &mut step_executor(scenario, seed).0,
        &mut simulated_log,
    );
    let session = LiveSession::new(kernels, clock);
    let mut live_log = BatchLog::default();
    let mut live_cost = LiveStep::new(
        "batch",
        step_executor(scenario, seed).0,
        BatchMeasure,
        session.clone(),
    );
    let live = simulate_on(
        scenario,
        seed,
        policies.batch_selector(&scenario.selector).as_mut(),
        &mut live_cost,
        &mut live_log,
    );
    drop(live_cost);
    let session = std::rc::Rc::try_unwrap(session)
        .ok()
        .expect("the live run's step cost is dropped")
        .into_inner();
    let (steps, _) = session.finish()?;
    Ok(FamilyRun {
        steps,
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
