//! Runs a loaded scenario plan: every (cell, seed) pair is one independent simulation, run in
//! parallel with rayon and gathered in plan order, so the result does not depend on thread
//! timing. Per-request records stream to CSV files when asked for.

use crate::arrivals::{ArrivalProcess, Bursty, Offline, Poisson, TraceReplay};
use crate::batch::{BatchSelector, BatchSelectorConfig};
use crate::caps_server::{CapsServer, DiscardRecords, RecordSink, RequestRecord, StepExecutor};
use crate::engine;
use crate::executor::{ConstantService, ExponentialService};
use crate::metrics::RunMetrics;
use crate::results::{
    BaselineEcho, CellResult, ResultsDocument, RunResult, ScenarioEcho, SweepAxisEcho, ToolInfo,
    compute_improvements, write_atomic,
};
use crate::rng::stream;
use crate::scenario::{ArrivalSpec, ExecutionSpec, Scenario, ScenarioPlan};
use crate::workload::{RequestModel, RequestStreams, TopicAffinities};
use rayon::prelude::*;
use std::path::{Path, PathBuf};

/// Builds the batch selector a scenario names (provided by the `strategies` crate).
pub type SelectorFactory = dyn Fn(&BatchSelectorConfig) -> Box<dyn BatchSelector> + Sync;

/// The arrival process of `scenario` for `seed`.
pub fn arrival_process(scenario: &Scenario, seed: u64) -> Box<dyn ArrivalProcess> {
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
pub fn step_executor(scenario: &Scenario, seed: u64) -> (Box<dyn StepExecutor>, String) {
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
pub fn request_model(scenario: &Scenario, seed: u64) -> RequestModel {
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
    scenario: &Scenario,
    seed: u64,
    selector: &mut dyn BatchSelector,
    sink: &mut dyn RecordSink,
) -> (RunMetrics, String) {
    let model = request_model(scenario, seed);
    let (mut executor, source) = step_executor(scenario, seed);
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
        executor.as_mut(),
        sink,
        scenario.queue_sample_interval,
    );
    engine::run(&mut server);
    (server.finish(), source)
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

fn toml_to_json(value: &toml::Value) -> serde_json::Value {
    serde_json::to_value(value).expect("TOML values convert to JSON")
}

/// Runs every cell and seed of `plan`. `csv_dir`, when given, receives one per-request CSV per
/// run (`<cell index>_seed<seed>.csv`). `on_run_done` is called after each run (progress bars).
pub fn run_plan(
    plan: &ScenarioPlan,
    factory: &SelectorFactory,
    csv_dir: Option<&Path>,
    on_run_done: &(dyn Fn() + Sync),
) -> Result<ResultsDocument, String> {
    let jobs: Vec<(usize, u64)> = (0..plan.cells.len())
        .flat_map(|c| plan.seeds.iter().map(move |s| (c, *s)))
        .collect();
    let outcomes: Vec<Result<(RunResult, String), String>> = jobs
        .par_iter()
        .map(|&(cell_idx, seed)| {
            let scenario = &plan.cells[cell_idx].scenario;
            let mut selector = factory(&scenario.selector);
            let (metrics, source) = match csv_dir {
                Some(dir) => {
                    let mut sink =
                        CsvRecords::create(&dir.join(format!("{cell_idx:04}_seed{seed}.csv")))?;
                    let out = simulate(scenario, seed, selector.as_mut(), &mut sink);
                    sink.finish()?;
                    out
                }
                None => simulate(scenario, seed, selector.as_mut(), &mut DiscardRecords),
            };
            on_run_done();
            Ok((RunResult { seed, metrics }, source))
        })
        .collect();

    let mut outcomes = outcomes.into_iter();
    let mut cells = Vec::with_capacity(plan.cells.len());
    for cell in &plan.cells {
        let mut runs = Vec::with_capacity(plan.seeds.len());
        let mut source = String::new();
        for _ in &plan.seeds {
            let (run, run_source) = outcomes.next().expect("one outcome per job")?;
            runs.push(run);
            source = run_source;
        }
        let coords = cell
            .coords
            .iter()
            .map(|(k, v)| (k.clone(), toml_to_json(v)))
            .collect();
        cells.push(CellResult::new(cell.id.clone(), coords, source, runs));
    }
    let baseline = plan.report.as_ref().map(|r| BaselineEcho {
        compare: r.compare.clone(),
        baseline: toml_to_json(&r.baseline),
    });
    if let Some(b) = &baseline {
        compute_improvements(&mut cells, &b.compare, &b.baseline);
    }
    Ok(ResultsDocument {
        tool: ToolInfo {
            name: "expertsim".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        },
        scenario: ScenarioEcho {
            name: plan.name.clone(),
            description: plan.description.clone(),
            document: toml_to_json(&toml::Value::Table(plan.document.clone())),
        },
        seeds: plan.seeds.clone(),
        sweep: plan
            .axes
            .iter()
            .map(|a| SweepAxisEcho {
                key: a.key.clone(),
                values: a.values.iter().map(toml_to_json).collect(),
            })
            .collect(),
        baseline,
        cells,
    })
}

/// Writes `document` as pretty JSON to `path`, atomically.
pub fn write_results(document: &ResultsDocument, path: &Path) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(document).expect("results serialize");
    bytes.push(b'\n');
    write_atomic(path, &bytes)
}
