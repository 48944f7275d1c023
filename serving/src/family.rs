//! The `Family` trait, everything a family of serving systems plugs into the simulator, and the
//! vocabulary every family shares with the layers above it: a run's `Run`, live mode's
//! `LiveDescription`, the type-erased `RegisteredFamily` each `Family` is, the `FamilyId` that
//! names one, the `Scenario` cell that carries one, the `FigureKind`s a family may own and the
//! `KeyDoc` rows its keys are documented in. The families sit above this module; the list that
//! declares and registers them, `families!` in lib.rs (`FAMILIES`), sits above the families.

use crate::arrivals::TraceStats;
use crate::load_cache::LoadCache;
use crate::metrics::{MetricInfo, RunOutput};
use crate::policies::Policies;
use crate::records::RecordSink;
use crate::validate::FieldError;
use crate::validate::limits::Demand;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::any::Any;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One family of serving systems: its scenario tables, their validation into a runnable cell,
/// what a cell asks of the simulator, how one seed of it runs, and what the run reports.
pub trait Family: Sync + 'static {
    /// The family's tables of a scenario file (serde, `deny_unknown_fields`).
    type Config: DeserializeOwned;
    /// One validated, runnable sweep cell.
    type Scenario: Clone + fmt::Debug + Send + Sync + 'static;

    /// The `family = "..."` value of scenario files and results.
    const NAME: &'static str;
    /// One line for `expertsim list`: what the family simulates, and its doc.
    const DESCRIPTION: &'static str;
    /// The scalar metrics a run reports, in the order of `RunOutput::scalars` (docs/metrics.md).
    const METRICS: &'static [MetricInfo];
    /// The metrics `expertsim run` prints per cell.
    const HEADLINE: &'static [&'static str];
    /// The metrics `expertsim run` prints as change against the `[report]` baseline.
    const HEADLINE_IMPROVEMENTS: &'static [&'static str];
    /// The scenario key holding the arrival rate that `expertsim capacity` searches; `None` for
    /// a family without one.
    const RATE_KEY: Option<&'static str> = None;
    /// The figure kinds only this family (and the other families listing them) draws.(`[[figure]] kind`).
    const FIGURE_KINDS: &'static [FigureKind] = &[];
    /// The family's own per-request CSV columns after `records::COMMON_COLUMNS`; `None` when the
    /// family has no per-request records.
    const CSV_COLUMNS: Option<&'static [&'static str]> = None;
    /// Where the scenario names the measured MoE profile live mode probes (`None`: none).
    const PROFILE_FIELD: Option<&'static str> = None;
    /// Whether a run can write a Chrome trace-event file of its steps (`--trace-events`).
    const TRACE_EVENTS: bool = false;
    /// A small scenario of the family, relative to the repository root, that runs in moments:
    /// the one `tests/cli/families.rs` loads and runs for every registered family.
    const QUICK_SCENARIO: &'static str;
    /// Whether `expertsim live` runs the family's cells (its runner a line of
    /// `live::LIVE_FAMILIES`, which launches kernels and so lives in `live`); without, live mode
    /// refuses the family by name.
    const LIVE: bool = false;

    /// Checks a cell's tables and builds the runnable scenario; `base_dir` anchors relative
    /// paths, `cache` shares traces and profiles between cells.
    fn validate(
        config: Self::Config,
        base_dir: &Path,
        cache: &mut LoadCache,
    ) -> Result<Self::Scenario, FieldError>;
    /// Every quantity the cell asks for, with the field that asks (bounded by `[limits]`).
    fn demands(scenario: &Self::Scenario) -> Vec<Demand>;
    /// Runs one seed, streaming finished requests to `records` (a family without
    /// `CSV_COLUMNS` ignores it).
    fn run(
        scenario: &Self::Scenario,
        seed: u64,
        policies: &dyn Policies,
        records: &mut dyn RecordSink,
    ) -> Result<Run, String>;
    /// Runs one seed as `run` does and writes its steps as a trace-event file to `path`; called
    /// only for a family with `TRACE_EVENTS`.
    fn run_traced(
        _scenario: &Self::Scenario,
        _seed: u64,
        _policies: &dyn Policies,
        _records: &mut dyn RecordSink,
        _path: &Path,
    ) -> Result<Run, String> {
        Err(format!(
            "the {} family writes no trace-event files",
            Self::NAME
        ))
    }
    /// Whether the cell asks for a trace-event file itself (`[output] trace_events`).
    fn trace_events(_scenario: &Self::Scenario) -> bool {
        false
    }
    /// What live mode needs to know before it opens a device.
    fn live_description(scenario: &Self::Scenario) -> LiveDescription;
    /// Whether the cell asks for per-request records itself (`[output] per_request_csv`).
    fn per_request_csv(_scenario: &Self::Scenario) -> bool {
        false
    }
    /// The trace a cell replays and its statistics (`expertsim validate` prints them).
    fn trace_replay(_scenario: &Self::Scenario) -> Option<(PathBuf, TraceStats)> {
        None
    }
    /// Removes from a cell's scenario document (overrides and sweep values applied) the keys
    /// whose values cannot change any run of it, and names a policy `policies` builds under two
    /// names by one of them, so that two cells differing only there read as equal
    /// (`reproduce` simulates equal cells once). Changing nothing is always correct.
    fn drop_inert_keys(_document: &mut toml::Table, _policies: &dyn Policies) {}
}

/// What one seed of one cell produced: the output and where its step costs really came from
/// (the `StepTime::source` its steps reported, or the cost model that priced it).
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    pub output: RunOutput,
    pub cost_source: String,
}

/// What live mode reads from a cell before the run: the MoE shape the kernels must load (none
/// for dense-only families), the model's name and the cost source of the predictions.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveDescription {
    pub moe_shape: Option<crate::cost::shape::MoeModelShape>,
    pub model: String,
    pub cost_source: String,
}

/// A `Family` with its types erased, so that families of different types sit in one list. Every
/// `Family` is one (a blanket implementation); nothing else implements it.
pub trait RegisteredFamily: Sync {
    fn name(&self) -> &'static str;
    fn description(&self) -> &'static str;
    fn metrics(&self) -> &'static [MetricInfo];
    fn headline(&self) -> &'static [&'static str];
    fn headline_improvements(&self) -> &'static [&'static str];
    fn rate_key(&self) -> Option<&'static str>;
    fn figure_kinds(&self) -> &'static [FigureKind];
    fn csv_columns(&self) -> Option<&'static [&'static str]>;
    fn profile_field(&self) -> Option<&'static str>;
    fn writes_trace_events(&self) -> bool;
    fn quick_scenario(&self) -> &'static str;
    fn live(&self) -> bool;
    /// Deserializes the family's tables into its `Config` (boxed).
    fn deserialize(&self, tables: toml::Value) -> Result<Box<dyn Any>, ConfigError>;
    /// Validates a config from `deserialize` into a cell of this (registered, so `'static`)
    /// family.
    fn validate(
        &'static self,
        config: Box<dyn Any>,
        base_dir: &Path,
        cache: &mut LoadCache,
    ) -> Result<Scenario, FieldError>;
    fn demands(&self, scenario: &Scenario) -> Vec<Demand>;
    fn run(
        &self,
        scenario: &Scenario,
        seed: u64,
        policies: &dyn Policies,
        records: &mut dyn RecordSink,
    ) -> Result<Run, String>;
    fn run_traced(
        &self,
        scenario: &Scenario,
        seed: u64,
        policies: &dyn Policies,
        records: &mut dyn RecordSink,
        path: &Path,
    ) -> Result<Run, String>;
    fn trace_events(&self, scenario: &Scenario) -> bool;
    fn live_description(&self, scenario: &Scenario) -> LiveDescription;
    fn per_request_csv(&self, scenario: &Scenario) -> bool;
    fn trace_replay(&self, scenario: &Scenario) -> Option<(PathBuf, TraceStats)>;
    fn drop_inert_keys(&self, document: &mut toml::Table, policies: &dyn Policies);
}

/// A schema error in a family's tables, with the path of the field.
pub type ConfigError = serde_path_to_error::Error<toml::de::Error>;

impl<F: Family> RegisteredFamily for F {
    fn name(&self) -> &'static str {
        F::NAME
    }
    fn description(&self) -> &'static str {
        F::DESCRIPTION
    }
    fn metrics(&self) -> &'static [MetricInfo] {
        F::METRICS
    }
    fn headline(&self) -> &'static [&'static str] {
        F::HEADLINE
    }
    fn headline_improvements(&self) -> &'static [&'static str] {
        F::HEADLINE_IMPROVEMENTS
    }
    fn rate_key(&self) -> Option<&'static str> {
        F::RATE_KEY
    }
    fn figure_kinds(&self) -> &'static [FigureKind] {
        F::FIGURE_KINDS
    }
    fn csv_columns(&self) -> Option<&'static [&'static str]> {
        F::CSV_COLUMNS
    }
    fn profile_field(&self) -> Option<&'static str> {
        F::PROFILE_FIELD
    }
    fn writes_trace_events(&self) -> bool {
        F::TRACE_EVENTS
    }
    fn quick_scenario(&self) -> &'static str {
        F::QUICK_SCENARIO
    }
    fn live(&self) -> bool {
        F::LIVE
    }
    fn deserialize(&self, tables: toml::Value) -> Result<Box<dyn Any>, ConfigError> {
        let config: F::Config = serde_path_to_error::deserialize(tables)?;
        Ok(Box::new(config))
    }
    fn validate(
        &'static self,
        config: Box<dyn Any>,
        base_dir: &Path,
        cache: &mut LoadCache,
    ) -> Result<Scenario, FieldError> {
        let config = config
            .downcast::<F::Config>()
            .expect("a config comes from its own family's `deserialize`");
        Ok(Scenario {
            family: FamilyId(self),
            cell: Arc::new(F::validate(*config, base_dir, cache)?),
        })
    }
    fn demands(&self, scenario: &Scenario) -> Vec<Demand> {
        F::demands(cell::<F>(scenario))
    }
    fn run(
        &self,
        scenario: &Scenario,
        seed: u64,
        policies: &dyn Policies,
        records: &mut dyn RecordSink,
    ) -> Result<Run, String> {
        F::run(cell::<F>(scenario), seed, policies, records)
    }
    fn run_traced(
        &self,
        scenario: &Scenario,
        seed: u64,
        policies: &dyn Policies,
        records: &mut dyn RecordSink,
        path: &Path,
    ) -> Result<Run, String> {
        F::run_traced(cell::<F>(scenario), seed, policies, records, path)
    }
    fn trace_events(&self, scenario: &Scenario) -> bool {
        F::trace_events(cell::<F>(scenario))
    }
    fn live_description(&self, scenario: &Scenario) -> LiveDescription {
        F::live_description(cell::<F>(scenario))
    }
    fn per_request_csv(&self, scenario: &Scenario) -> bool {
        F::per_request_csv(cell::<F>(scenario))
    }
    fn trace_replay(&self, scenario: &Scenario) -> Option<(PathBuf, TraceStats)> {
        F::trace_replay(cell::<F>(scenario))
    }
    fn drop_inert_keys(&self, document: &mut toml::Table, policies: &dyn Policies) {
        F::drop_inert_keys(document, policies)
    }
}

/// The cell of `scenario`, which belongs to family `F` (the erased family dispatched on it).
fn cell<F: Family>(scenario: &Scenario) -> &F::Scenario {
    scenario
        .get::<F::Scenario>()
        .expect("a scenario is dispatched to its own family")
}

/// A registered family, as scenarios and results name it: compared, printed and serialized by
/// its name (read back by name through the registry: `registry::deserialize_family`).
#[derive(Clone, Copy)]
pub struct FamilyId(&'static dyn RegisteredFamily);

impl FamilyId {
    /// The family `registered` (the registry's lookups make one; `RegisteredFamily::validate`
    /// names its own).
    pub fn of(registered: &'static dyn RegisteredFamily) -> FamilyId {
        FamilyId(registered)
    }
    pub fn name(self) -> &'static str {
        self.0.name()
    }
    /// The module of `expertsim-serving` (folder under `serving/src/`, re-exported by `expertsim-scenario`
    /// under the same name) that holds the family: its name, but `serving_family` for `serving`
    /// (`serving` is the shared serving layer).
    pub fn module(self) -> &'static str {
        match self.name() {
            "serving" => "serving_family",
            name => name,
        }
    }
    /// What the family simulates, in one line (`expertsim list`).
    pub fn description(self) -> &'static str {
        self.0.description()
    }
    /// The scalar metrics the family reports.
    pub fn metrics(self) -> &'static [MetricInfo] {
        self.0.metrics()
    }
    /// The metrics `expertsim run` prints per cell.
    pub fn headline(self) -> &'static [&'static str] {
        self.0.headline()
    }
    /// The metrics `expertsim run` prints as change against the baseline.
    pub fn headline_improvements(self) -> &'static [&'static str] {
        self.0.headline_improvements()
    }
    /// The scenario key holding the family's arrival rate, which `expertsim capacity` searches.
    pub fn rate_key(self) -> Option<&'static str> {
        self.0.rate_key()
    }
    /// The figure kinds only this family (and the other families listing them) draws.
    pub fn figure_kinds(self) -> &'static [FigureKind] {
        self.0.figure_kinds()
    }
    /// The family's own per-request CSV columns (`None`: it has no per-request records).
    pub fn csv_columns(self) -> Option<&'static [&'static str]> {
        self.0.csv_columns()
    }
    /// Where the family's scenario names the measured MoE profile live mode probes.
    pub fn profile_field(self) -> Option<&'static str> {
        self.0.profile_field()
    }
    /// Whether the family's runs can write a trace-event file of their steps.
    pub fn writes_trace_events(self) -> bool {
        self.0.writes_trace_events()
    }
    /// The family's small scenario (relative to the repository root) the families test runs.
    pub fn quick_scenario(self) -> &'static str {
        self.0.quick_scenario()
    }
    /// Whether `expertsim live` runs the family's cells.
    pub fn live(self) -> bool {
        self.0.live()
    }
    /// A cell's scenario document without the keys that cannot change its runs
    /// (`Family::drop_inert_keys`).
    pub fn drop_inert_keys(self, document: &mut toml::Table, policies: &dyn Policies) {
        self.0.drop_inert_keys(document, policies)
    }
    pub fn registered(self) -> &'static dyn RegisteredFamily {
        self.0
    }
}

impl PartialEq for FamilyId {
    fn eq(&self, other: &FamilyId) -> bool {
        self.name() == other.name()
    }
}

impl Eq for FamilyId {}

impl fmt::Debug for FamilyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for FamilyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl serde::Serialize for FamilyId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

/// One validated, runnable sweep cell of some registered family.
#[derive(Clone)]
pub struct Scenario {
    family: FamilyId,
    cell: Arc<dyn Cell>,
}

/// A cell of any family: its scenario type, seen as `Any` for `Scenario::get`.
trait Cell: Any + fmt::Debug + Send + Sync {
    fn as_any(&self) -> &dyn Any;
}

impl<T: Any + fmt::Debug + Send + Sync> Cell for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Scenario {
    pub fn family(&self) -> FamilyId {
        self.family
    }
    /// The cell as its family's scenario type `S`, if it is one.
    pub fn get<S: 'static>(&self) -> Option<&S> {
        // Through the `dyn Cell` (not the `Arc`, which is a `Cell` itself).
        (*self.cell).as_any().downcast_ref::<S>()
    }
    /// Every quantity this cell asks for, with the field that asks.
    pub fn demands(&self) -> Vec<Demand> {
        self.family.0.demands(self)
    }
    /// The trace a cell replays, with its statistics after `time_scale` over the requests
    /// replayed (`expertsim validate` prints it).
    pub fn trace_replay(&self) -> Option<(PathBuf, TraceStats)> {
        self.family.0.trace_replay(self)
    }
    /// Whether the scenario asks for per-request records (`[output] per_request_csv`).
    pub fn per_request_csv(&self) -> bool {
        self.family.0.per_request_csv(self)
    }
    /// Whether the scenario asks for a trace-event file of its steps (`[output] trace_events`).
    pub fn trace_events(&self) -> bool {
        self.family.0.trace_events(self)
    }
    /// What live mode needs before it opens a device.
    pub fn live_description(&self) -> LiveDescription {
        self.family.0.live_description(self)
    }
}

impl fmt::Debug for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {:?}", self.family.name(), self.cell)
    }
}

/// What a `[[figure]]` draws.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FigureKind {
    /// Metric mean across seeds (95% CI bars) vs a sweep key: lines for a numeric x, bars else.
    #[default]
    Metric,
    /// Change in percent against the `[report]` baseline (positive = better), as bars.
    Improvement,
    /// Stacked bars: the metrics as layers, one bar per series value in each x group.
    Stacked,
    /// Operating points (metric 0 on x, metric 1 on y) with each series' Pareto frontier.
    Frontier,
    /// GEM: tokens per expert and trace step of the detail layer, experts grouped by GPU, one
    /// panel per mapping.
    GemExpertLoad,
    /// GEM: per-GPU MoE-layer latency vs tokens (the cost staircase scaled by speed).
    GemStaircase,
    /// ExpertWeave: device memory per adapter count and manager, stacked as base weights,
    /// adapter experts, allocation overhead and KV cache.
    ExpertweaveMemory,
    /// Per replica (placed, per worker), the intervals its model loads, runs steps and idles
    /// over simulated time (`details.timeline`, `[output] timeline`), one panel per value of
    /// `panels` stacked on a shared time axis (MOSAIC's Figure 5).
    Timeline,
    /// Per replica group, its decode step latency and the tokens per second it emits against
    /// the batch, as its own step cost prices them (`details.decode_curves`, `[output]
    /// decode_curves`; MOSAIC's Figure 3b).
    DecodeCurve,
}

impl FigureKind {
    /// The name used in scenario files.
    pub fn name(self) -> &'static str {
        match self {
            FigureKind::Metric => "metric",
            FigureKind::Improvement => "improvement",
            FigureKind::Stacked => "stacked",
            FigureKind::Frontier => "frontier",
            FigureKind::GemExpertLoad => "gem_expert_load",
            FigureKind::GemStaircase => "gem_staircase",
            FigureKind::ExpertweaveMemory => "expertweave_memory",
            FigureKind::Timeline => "timeline",
            FigureKind::DecodeCurve => "decode_curve",
        }
    }
}

/// One documented key (or several, `a, b`): a dotted key or a `[table]`, its default and what
/// it means (both markdown, as the table shows them). A row covers its key and, for a table or
/// a key whose value is a table, every key under it whose last part its meaning names in
/// backticks (a tagged table's `kind` is always covered).
#[derive(Clone, Copy, Debug)]
pub struct KeyDoc {
    pub key: &'static str,
    pub default: &'static str,
    pub meaning: &'static str,
}
