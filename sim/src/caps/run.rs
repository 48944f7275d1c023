//! Running one CAPS simulation: the arrival process, request model and step cost of a
//! scenario for a seed, the event loop, and the per-request CSV sink.

use super::config::{CapsScenario, ExecutionSpec};
use super::server::CapsServer;
use super::step_cost::CapsStepCost;
use super::workload::{RequestModel, RequestStreams, TopicAffinities};
use crate::arrivals::ArrivalProcess;
use crate::caps::metrics::RunMetrics;
use crate::engine;
use crate::metrics::RunOutput;
use crate::policies::batch::BatchSelector;
use crate::records::{Extra, RecordSink, RequestRecord};
use crate::rng::stream;
use crate::serving::StepCost;
use crate::serving_family::execution::{ConstantService, ExponentialService};

/// The arrival process of `scenario` for `seed`.
pub fn arrival_process(scenario: &CapsScenario, seed: u64) -> Box<dyn ArrivalProcess> {
    let rng = stream(seed, "arrivals");
    let n = usize::try_from(scenario.workload.n_requests).expect("request count fits in usize");
    let topics = scenario.workload.n_topics as u32;
    scenario.arrival.process(n, topics, rng)
}

/// What executes the batches of `scenario` for `seed`: its step cost, and the name of its
/// cost-model source.
pub fn step_executor(scenario: &CapsScenario, seed: u64) -> (CapsStepCost, String) {
    match &scenario.execution {
        ExecutionSpec::CostModel(model) => (
            CapsStepCost::Model(model.clone()),
            model.source().to_string(),
        ),
        ExecutionSpec::Constant { service } => (
            CapsStepCost::Constant(ConstantService(*service)),
            "reference-constant".into(),
        ),
        ExecutionSpec::Exponential { mean } => (
            CapsStepCost::Exponential(Box::new(ExponentialService {
                mean: *mean,
                rng: stream(seed, "service"),
            })),
            "reference-exponential".into(),
        ),
    }
}

/// The request model of `scenario` for `seed` (topic affinities are drawn per seed).
pub fn request_model(scenario: &CapsScenario, seed: u64) -> RequestModel {
    let w = &scenario.workload;
    let shape = &scenario.shape;
    RequestModel {
        affinities: TopicAffinities::generate(
            w.n_topics,
            shape.n_layers,
            shape.n_experts,
            w.affinity_concentration,
            &mut stream(seed, "topics"),
        ),
        top_k: shape.top_k,
        topic_purity: w.topic_purity,
        prompt_tokens: w.prompt_tokens.clone(),
        output_tokens: w.output_tokens.clone(),
        prediction_noise: w.prediction_noise,
    }
}

/// Simulates one seed of one scenario with the given selector, streaming records to `sink`.
pub fn simulate(
    scenario: &CapsScenario,
    seed: u64,
    selector: &mut dyn BatchSelector,
    sink: &mut dyn RecordSink,
) -> (RunMetrics, String) {
    let (mut step_cost, source) = step_executor(scenario, seed);
    let metrics = simulate_on(scenario, seed, selector, &mut step_cost, sink);
    (metrics, source)
}

/// Runs one seed of `scenario` with batch times from `step_cost` instead of the scenario's own
/// (live mode wraps it in `live::step::LiveStep` here); every scheduling decision is made by
/// the same server code as in [`simulate`].
pub fn simulate_on(
    scenario: &CapsScenario,
    seed: u64,
    selector: &mut dyn BatchSelector,
    step_cost: &mut dyn StepCost,
    sink: &mut dyn RecordSink,
) -> RunMetrics {
    let model = request_model(scenario, seed);
    let streams = RequestStreams {
        tokens: stream(seed, "tokens"),
        mixing: stream(seed, "mixing"),
    };
    let mut server = CapsServer::new(
        scenario.scheduler.clone(),
        scenario.shape.n_experts,
        arrival_process(scenario, seed),
        &model,
        streams,
        selector,
        stream(seed, "selector"),
        stream(seed, "prediction"),
        step_cost,
        sink,
        scenario.queue_sample_interval,
    )
    .with_factor_sensitivity(factor_sensitivity(scenario));
    engine::run(&mut server);
    server.finish()
}

/// The CAPS columns of the per-request CSV, after the common ones (`sim::records`).
pub const CSV_COLUMNS: &[&str] = &["topic", "batch", "start_s", "queue_wait_ms"];

/// The batch (numbered from 0 in the order they ran) of a CAPS request's record.
pub fn batch_of(record: &RequestRecord<'_>) -> u64 {
    match record.extra.get(1) {
        Some(Extra::Count(batch)) => *batch,
        other => panic!("a CAPS record's second column is its batch, not {other:?}"),
    }
}

/// The sensitivity of the imbalance factor a run reports: the `cv` model's (derived or given),
/// 1 for execution models without one.
pub fn factor_sensitivity(scenario: &CapsScenario) -> f64 {
    match &scenario.execution {
        ExecutionSpec::CostModel(model) => match model.as_ref() {
            crate::serving_family::execution::ExecutionModel::Cv(cv) => cv.sensitivity(),
            _ => 1.0,
        },
        _ => 1.0,
    }
}

/// Runs one seed of `scenario` and reports it in the family-independent shape, streaming the
/// per-request records to `records`. Returns the output and the cost-model source.
pub fn run(
    scenario: &CapsScenario,
    seed: u64,
    selector: &mut dyn BatchSelector,
    records: &mut dyn RecordSink,
) -> (RunOutput, String) {
    let (metrics, source) = simulate(scenario, seed, selector, records);
    let mut output = super::run_output(&metrics);
    if let ExecutionSpec::CostModel(model) = &scenario.execution
        && let Some(record) = model.pricing()
    {
        output.details["pricing"] = serde_json::to_value(record).expect("records serialize");
    }
    (output, source)
}
