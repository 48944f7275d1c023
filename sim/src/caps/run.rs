//! Running one CAPS simulation: the arrival process, request model and step executor of a
//! scenario for a seed, the event loop, and the per-request CSV sink.

use super::config::{ArrivalSpec, CapsScenario, ExecutionSpec};
use super::server::{CapsServer, DiscardRecords, RecordSink, RequestRecord, StepExecutor};
use super::workload::{RequestModel, RequestStreams, TopicAffinities};
use crate::arrivals::{ArrivalProcess, Bursty, Offline, Poisson, TraceReplay};
use crate::batch::BatchSelector;
use crate::engine;
use crate::executor::{ConstantService, ExponentialService};
use crate::metrics::{RunMetrics, RunOutput};
use crate::rng::stream;
use std::path::{Path, PathBuf};

/// The arrival process of `scenario` for `seed`.
pub fn arrival_process(scenario: &CapsScenario, seed: u64) -> Box<dyn ArrivalProcess> {
    let rng = stream(seed, "arrivals");
    let n = usize::try_from(scenario.workload.n_requests).expect("request count fits in usize");
    let topics = scenario.workload.n_topics as u32;
    match &scenario.arrival {
        ArrivalSpec::Poisson { rate_per_s } => Box::new(Poisson::new(*rate_per_s, n, topics, rng)),
        ArrivalSpec::Bursty { rate_per_s, params } => {
            Box::new(Bursty::new(*rate_per_s, *params, n, topics, rng))
        }
        ArrivalSpec::Offline => Box::new(Offline::new(n, topics, rng)),
        ArrivalSpec::Trace { trace, time_scale } => Box::new(
            TraceReplay::new(trace.clone(), Some(n), *time_scale, topics, rng)
                .expect("trace replay parameters were checked when the scenario was validated"),
        ),
    }
}

/// The step executor of `scenario` for `seed`, and the name of its cost-model source.
pub fn step_executor(scenario: &CapsScenario, seed: u64) -> (Box<dyn StepExecutor>, String) {
    match &scenario.execution {
        ExecutionSpec::CostModel(model) => (Box::new(model.clone()), model.source().to_string()),
        ExecutionSpec::Constant { service } => (
            Box::new(ConstantService(*service)),
            "reference-constant".into(),
        ),
        ExecutionSpec::Exponential { mean } => (
            Box::new(ExponentialService {
                mean: *mean,
                rng: stream(seed, "service"),
            }),
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
    let (mut executor, source) = step_executor(scenario, seed);
    let metrics = simulate_on(scenario, seed, selector, executor.as_mut(), sink);
    (metrics, source)
}

/// Runs one seed of `scenario` with batch times from `executor` instead of the scenario's own
/// execution model (live mode passes the kernels here); every scheduling decision is made by
/// the same server code as in [`simulate`].
pub fn simulate_on(
    scenario: &CapsScenario,
    seed: u64,
    selector: &mut dyn BatchSelector,
    executor: &mut dyn StepExecutor,
    sink: &mut dyn RecordSink,
) -> RunMetrics {
    let model = request_model(scenario, seed);
    let streams = RequestStreams {
        tokens: stream(seed, "tokens"),
        mixing: stream(seed, "mixing"),
        prediction: stream(seed, "prediction"),
    };
    let mut server = CapsServer::new(
        scenario.scheduler.clone(),
        scenario.shape.n_experts,
        arrival_process(scenario, seed),
        &model,
        streams,
        selector,
        stream(seed, "selector"),
        executor,
        sink,
        scenario.queue_sample_interval,
    )
    .with_factor_sensitivity(factor_sensitivity(scenario));
    engine::run(&mut server);
    server.finish()
}

/// The sensitivity of the imbalance factor a run reports: the `cv` model's (derived or given),
/// 1 for execution models without one.
pub fn factor_sensitivity(scenario: &CapsScenario) -> f64 {
    match &scenario.execution {
        ExecutionSpec::CostModel(model) => match model.as_ref() {
            crate::execution::ExecutionModel::Cv(cv) => cv.sensitivity(),
            crate::execution::ExecutionModel::Straggler(_) => 1.0,
        },
        _ => 1.0,
    }
}

/// Streams request records to a CSV file, renamed into place when the run completes.
pub struct CsvRecords {
    writer: csv::Writer<std::io::BufWriter<std::fs::File>>,
    tmp: PathBuf,
    path: PathBuf,
    error: Option<String>,
}

impl CsvRecords {
    pub fn create(path: &Path) -> Result<CsvRecords, String> {
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let tmp = path.with_extension("csv.tmp");
        let file = std::fs::File::create(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
        let mut writer = csv::Writer::from_writer(std::io::BufWriter::new(file));
        writer
            .write_record([
                "id",
                "topic",
                "prompt_tokens",
                "output_tokens",
                "batch",
                "arrival_s",
                "start_s",
                "done_s",
                "latency_ms",
                "queue_wait_ms",
            ])
            .map_err(|e| format!("{}: {e}", tmp.display()))?;
        Ok(CsvRecords {
            writer,
            tmp,
            path: path.to_path_buf(),
            error: None,
        })
    }

    /// Flushes and moves the file into place.
    pub fn finish(mut self) -> Result<(), String> {
        if let Some(error) = self.error.take() {
            let _ = std::fs::remove_file(&self.tmp);
            return Err(error);
        }
        self.writer
            .flush()
            .map_err(|e| format!("{}: {e}", self.tmp.display()))?;
        drop(self.writer);
        std::fs::rename(&self.tmp, &self.path).map_err(|e| format!("{}: {e}", self.path.display()))
    }
}

impl RecordSink for CsvRecords {
    fn record(&mut self, r: &RequestRecord) {
        if self.error.is_some() {
            return;
        }
        let row = [
            r.id.to_string(),
            r.topic.to_string(),
            r.prompt_tokens.to_string(),
            r.output_tokens.to_string(),
            r.batch.to_string(),
            format!("{:.9}", r.arrival.as_secs_f64()),
            format!("{:.9}", r.start.as_secs_f64()),
            format!("{:.9}", r.done.as_secs_f64()),
            format!("{:.6}", (r.done - r.arrival).as_millis_f64()),
            format!("{:.6}", (r.start - r.arrival).as_millis_f64()),
        ];
        if let Err(e) = self.writer.write_record(&row) {
            self.error = Some(format!("{}: {e}", self.tmp.display()));
        }
    }
}

/// Runs one seed of `scenario` and reports it in the family-independent shape; with `csv`, the
/// per-request records stream to that file. Returns the output and the cost-model source.
pub fn run(
    scenario: &CapsScenario,
    seed: u64,
    selector: &mut dyn BatchSelector,
    csv: Option<&Path>,
) -> Result<(RunOutput, String), String> {
    let (metrics, source) = match csv {
        Some(path) => {
            let mut sink = CsvRecords::create(path)?;
            let out = simulate(scenario, seed, selector, &mut sink);
            sink.finish()?;
            out
        }
        None => simulate(scenario, seed, selector, &mut DiscardRecords),
    };
    Ok((super::run_output(&metrics), source))
}
