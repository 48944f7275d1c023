//! CAPS in live mode: the serving simulator's CAPS preset (a `static` replica whose batches are
//! priced from their expected routing, `replica.scheduler.pricing`) runs unchanged through the
//! serving layer's step-cost seam (`expertsim_scenario::serving_family::serve` with one step cost for the
//! replica), and each static batch, one step of the replica, is priced by a [`LiveStep`] that
//! predicts with the scenario's own pricing and measures the batch on the kernels
//! ([`BatchMeasure`]): per layer the dense
//! part over the prompt tokens and the MoE layer on the batch's token-to-expert assignment (its
//! expected prefill routing rounded to whole tokens), the output head, then every decode pass
//! the same on the decode routing.

use crate::device::{Kernels, round_counts};
use crate::step::{LiveSession, LiveStep, Measure};
use crate::{Clock, Decisions, FamilyRun, LiveError};
use expertsim_scenario::metrics::RunOutput;
use expertsim_scenario::policies::Policies;
use expertsim_scenario::recorder::replica::step_of;
use expertsim_scenario::records::{RecordSink, RequestRecord};
use expertsim_scenario::serving::{StepCost, StepWork};
use expertsim_scenario::serving_family::{ScenarioPolicies, ServingScenario};
use kernels::BackendError;

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
        let b = step_of(record) as usize;
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

/// Whether live mode runs `scenario`: one static replica of an MoE model whose batches are
/// priced from their expected routing (the CAPS preset), or why not.
pub fn check(scenario: &ServingScenario) -> Result<(), LiveError> {
    let priced = scenario
        .replica
        .static_cost
        .as_ref()
        .is_some_and(|c| c.model().is_some());
    if priced && scenario.replica_count() == 1 && scenario.model.experts().is_some() {
        Ok(())
    } else {
        Err(LiveError::Unsupported(
            "live mode runs the serving family's CAPS preset only: one static replica \
             (replica.count = 1) of an MoE model, replica.scheduler.pricing = \
             \"expected_routing\", \"cv\" or \"straggler\" (scenarios/live/caps.toml); a \
             continuous MoE replica runs through `continuous`"
                .into(),
        ))
    }
}

/// One seed of `scenario` served with its replica's steps priced by `cost` (`None`: its own
/// pricing), the records to `log`.
fn serve(
    scenario: &ServingScenario,
    seed: u64,
    policies: &dyn Policies,
    cost: Option<Box<dyn StepCost + '_>>,
    log: &mut BatchLog,
) -> Result<RunOutput, LiveError> {
    let mut p = ScenarioPolicies::of(scenario, policies);
    let plan = expertsim_scenario::serving_family::plan(scenario, p.memory())
        .map_err(LiveError::Unsupported)?;
    expertsim_scenario::serving_family::serve(
        scenario,
        seed,
        &mut *p.queue,
        &mut *p.router,
        &mut *p.mapper,
        &mut p.selectors,
        plan.as_ref(),
        log,
        None,
        cost.map(|c| expertsim_scenario::serving_family::StepCosts::Given(vec![c])),
    )
    .map_err(LiveError::Unsupported)
}

/// One seed of `scenario` simulated, then live on `kernels`.
pub fn run(
    scenario: &ServingScenario,
    seed: u64,
    policies: &dyn Policies,
    kernels: &mut Kernels,
    clock: Clock,
) -> Result<FamilyRun, LiveError> {
    check(scenario)?;
    let pricing = scenario
        .replica
        .static_cost
        .as_ref()
        .expect("check found the replica's pricing");
    let mut simulated_log = BatchLog::default();
    let simulated = serve(scenario, seed, policies, None, &mut simulated_log)?;
    let session = LiveSession::new(kernels, clock);
    let mut live_log = BatchLog::default();
    let live_cost = LiveStep::new(
        "batch",
        pricing.step_cost(expertsim_scenario::rng::stream(seed, "service")),
        BatchMeasure,
        session.clone(),
    );
    let live = serve(
        scenario,
        seed,
        policies,
        Some(Box::new(live_cost)),
        &mut live_log,
    )?;
    let session = std::rc::Rc::try_unwrap(session)
        .ok()
        .expect("the live run's step cost is dropped")
        .into_inner();
    let (steps, _) = session.finish()?;
    Ok(FamilyRun {
        steps,
        simulated,
        live,
        decisions: Decisions::compare(
            "the requests of every batch, in batch order",
            simulated_log.into_lines(),
            live_log.into_lines(),
        ),
        variability: None,
        execution: None,
    })
}
