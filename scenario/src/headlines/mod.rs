//! Paper headlines as data: `scenarios/<family>/headlines.toml` names the runs a family's
//! reproduction needs (a scenario, its `--set` overrides, and the smaller overrides of its quick
//! variant), the paper's baselines (`[[baseline]]`: the paper's words, what the compared cell's
//! scenario writes) and the paper's claims about the runs (a metric, the cell it refers to, the
//! cell it is compared with, in its run or `versus_run`, the baseline that cell must be, the
//! claimed direction, the paper's words and its number in the claim's
//! statistic, and, where ours falls short, the verdict we expect with its explanation), the
//! claims whose number is an input rather than a result (`by_construction`), and the inputs we
//! chose or fitted with the paper's sentence they come from; the numbers of ours that prose
//! states (`[[value]]`, rendered by `value::render`), and the phrases of the family's prose that
//! quote the paper or state an input (`[prose]`, checked by `prose`). `load` reads the file with
//! file:line:field errors, `check_against` checks a claim's or value's keys against the loaded
//! scenario, `check_baselines` each claim's compared cells against its baseline, and `evaluate`
//! computes our value of a claim, its direction and its magnitude beside the paper's, on the seed
//! means and on each seed alone.

mod evaluate;
pub mod prose;
mod value;

pub use evaluate::{
    ABSOLUTE_TOLERANCE_POINTS, Magnitude, Outcome, Point, RELATIVE_TOLERANCE, SEEDS_FOR_STABILITY,
    STABLE_SEEDS, SeedOutcome, Verdict, evaluate, evaluate_against,
};
pub use value::{Combine, NumberFormat, Rendered, Value, render, render_against};

use crate::scenario::ScenarioPlan;
use crate::scenario::error::{Location, ScenarioError, SpanIndex};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// One run of a scenario that claims refer to.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSpec {
    /// Names the run in claims and its result folder (`<out>/<family>/<id>/`).
    pub id: String,
    /// The scenario file, relative to the headlines file.
    pub scenario: PathBuf,
    /// `--set` overrides of the full reproduction run.
    #[serde(default)]
    pub sets: Vec<String>,
    /// Overrides added to `sets` for the quick variant (the test and `reproduce --quick`).
    #[serde(default)]
    pub quick: Vec<String>,
}

/// What our value of a claim is shown as.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Statistic {
    /// The change of the cell against `versus` in percent, positive when better in the metric's
    /// own direction (as the summary table's `_vs_base` columns).
    ImprovementPct,
    /// The plain change of the cell against `versus` in percent of `versus`.
    ChangePct,
    /// `cell - versus` in the metric's unit (points of a score).
    Difference,
    /// `versus / cell`: the speedup when the metric is a time.
    Ratio,
    /// Both means, `versus -> cell`.
    Values,
}

/// How the points of an `over` axis combine into one verdict.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Aggregate {
    /// The claim must hold at every value of the axis; ours shows the range.
    #[default]
    Every,
    /// The claim must hold for the mean relative change over the axis; ours shows the mean.
    Mean,
    /// The paper's "up to" / "in the best case": the claim is about the best point of the axis
    /// (the one furthest in the claimed direction); ours shows it.
    Best,
}

/// The claimed direction of the cell's metric against `versus`'s.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    Lower,
    Higher,
    /// The paper claims the cell is close to `versus` ("negligible", "comparable"): the claim
    /// holds at a point when ours is within the rule's tolerance of `paper_value` there, and no
    /// sign is asked for, so its verdict is reproduced or not reproduced.
    Close,
}

/// One paper claim about one run's results.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claim {
    pub id: String,
    /// The `RunSpec::id` whose results the claim is about.
    pub run: String,
    /// The claim in words, as the reproduction table shows it.
    pub claim: String,
    pub metric: String,
    pub statistic: Statistic,
    /// Sweep coordinates of the claimed cell (a key may reach into a table-valued sweep key:
    /// `queue.kind`).
    pub cell: toml::Table,
    /// Coordinates that differ for the compared cell; the others are the cell's.
    pub versus: toml::Table,
    /// The run whose results hold the compared cell, when it is not `run` (the paper's
    /// baseline is another scenario, e.g. MOSAIC's round-robin without the gate): its cell is
    /// `versus` laid over the claimed cell's coordinates on the sweep keys that run has.
    pub versus_run: Option<String>,
    /// The `[[baseline]]` the paper compares with: `versus` must select a cell that is that
    /// baseline, and the `paper` sentence must name it.
    pub baseline: String,
    /// Why `versus` is not (yet) the paper's baseline: the baseline check lets this claim
    /// through, and fails once the claim does compare with its baseline (then delete the key).
    pub baseline_mismatch: Option<String>,
    /// Why the claim's verdict is not the same for at least 4 of 5 seeds: the reproduction
    /// refuses an unstable claim without it, and a stable one with it.
    pub seed_sensitive: Option<String>,
    /// A sweep key the claim ranges over; each of its values is one point of comparison.
    pub over: Option<String>,
    /// More sweep keys whose values are more points of the claim, pooled with `over`'s (the
    /// paper's mean over models and datasets: `over = "model.name"`, `pool =
    /// ["workload.dataset"]`); not with a `paper_value` per point.
    #[serde(default)]
    pub pool: Vec<String>,
    #[serde(default)]
    pub aggregate: Aggregate,
    pub direction: Direction,
    /// The paper's value or statement, as text (quoted from the paper).
    pub paper: String,
    /// The paper's number in the claim's statistic (for `values`: the claimed cell's value);
    /// absent when the paper states only the direction.
    pub paper_value: Option<PaperValue>,
    /// Why the claim's number is an input of ours rather than a result: shown as "input", never
    /// as reproduced.
    pub by_construction: Option<String>,
    /// The verdict ours gets when it falls short of "reproduced"; needs `known_deviation`. A
    /// different verdict (better or worse) fails the claims test until the text is updated.
    pub expect: Option<Verdict>,
    /// `expect` for the quick variant (smaller runs), where it differs.
    pub expect_quick: Option<Verdict>,
    /// Why ours falls short of the paper (the `expect`ed verdict's explanation); a number of
    /// ours in it is a `{value:<id>}` placeholder, rendered from the run.
    pub known_deviation: Option<String>,
}

/// The paper's number in a claim's statistic.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum PaperValue {
    /// One value, or a `[low, high]` range, for every point.
    Same(PaperNumber),
    /// One value or range per value of the `over` axis (keyed by the value as text).
    PerPoint(std::collections::BTreeMap<String, PaperNumber>),
}

/// One number or a `[low, high]` range.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum PaperNumber {
    One(f64),
    Range([f64; 2]),
}

impl PaperNumber {
    /// `(low, high)`, ordered.
    pub fn bounds(self) -> (f64, f64) {
        match self {
            PaperNumber::One(v) => (v, v),
            PaperNumber::Range([a, b]) => (a.min(b), a.max(b)),
        }
    }
}

/// A comparison point a paper reports against (its baseline system or setting), defined once
/// per headlines file and named by each claim's `baseline`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Baseline {
    /// The name claims use.
    pub name: String,
    /// The paper's words for it: every claim naming this baseline quotes them in its `paper`
    /// sentence (compared without case).
    pub paper: String,
    /// The scenario file (relative to the headlines file) whose run holds the compared cell;
    /// absent: any run.
    pub scenario: Option<PathBuf>,
    /// Dotted keys and the values the compared cell's scenario (its file, `--set`s and sweep
    /// coordinates) must write.
    pub requires: toml::Table,
}

/// An input we chose or fitted (not a result), listed in the family's inputs table; a result of
/// ours its text mentions (what another choice would give) is a `{value:<id>}` placeholder.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// What the input is (a scenario key or a model constant).
    pub name: String,
    /// Its value, as we use it.
    pub value: String,
    /// `chosen`, `fitted` or `derived`, and from what.
    pub how: String,
    /// The paper's sentence it comes from, quoted, or "not in the paper".
    pub source: String,
}

/// The phrases of a family's prose (its section of docs/reproduction.md outside the generated
/// tables, and its claims' explanations) that state numbers which are not results of ours.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProseDeclarations {
    /// Phrases quoting the paper: every number in them occurs in the paper's text.
    #[serde(default)]
    pub paper: Vec<String>,
    /// Phrases stating our inputs, by the file that sets them (relative to the headlines file):
    /// every number in a phrase occurs in its file.
    #[serde(default)]
    pub inputs: std::collections::BTreeMap<PathBuf, Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HeadlinesFile {
    /// The document whose value spans (and generated section, if the file has claims) the
    /// reproduction rewrites, relative to the headlines file; absent: docs/reproduction.md.
    doc: Option<PathBuf>,
    #[serde(default)]
    run: Vec<RunSpec>,
    #[serde(default)]
    baseline: Vec<Baseline>,
    #[serde(default)]
    claim: Vec<Claim>,
    #[serde(default)]
    input: Vec<Input>,
    #[serde(default)]
    value: Vec<Value>,
    #[serde(default)]
    prose: ProseDeclarations,
}

/// A family's headlines file, loaded and checked for internal consistency.
#[derive(Clone, Debug)]
pub struct Headlines {
    pub path: PathBuf,
    /// The folder name under `scenarios/` (the family's name in docs and on the command line).
    pub family: String,
    /// The document its values (and claims' section) go to, when it names its own (`doc`,
    /// resolved); `None`: the reproduction's default document, docs/reproduction.md.
    pub doc: Option<PathBuf>,
    pub runs: Vec<RunSpec>,
    /// The paper's baselines the claims name (scenario files resolved).
    pub baselines: Vec<Baseline>,
    pub claims: Vec<Claim>,
    /// The inputs we chose or fitted, in file order.
    pub inputs: Vec<Input>,
    /// The numbers of ours that prose states.
    pub values: Vec<Value>,
    /// The phrases of the prose quoting the paper or stating inputs (input files resolved).
    pub prose: ProseDeclarations,
    spans: SpanIndex,
}

static EMPTY_TABLE: std::sync::LazyLock<toml::Table> = std::sync::LazyLock::new(toml::Table::new);

/// The file name of a family's headlines beside its scenarios (the loader's, which skips and
/// refuses it as a scenario).
pub const FILE_NAME: &str = crate::scenario::CLAIMS_FILE_NAME;

/// Reads and checks `path`: unique ids, every claim's run defined, every scenario file present,
/// `aggregate` only with `over`, a non-empty `versus`.
pub fn load(path: &Path) -> Result<Headlines, ScenarioError> {
    let text = crate::input::read_input_text_limited(path, crate::input::MAX_SCENARIO_FILE_BYTES)
        .map_err(|e| ScenarioError {
        file: path.to_path_buf(),
        location: Location::Unknown,
        field: None,
        message: format!("cannot read the headlines file: {e}"),
    })?;
    let spans = SpanIndex::build(path, &text)?;
    let error = |field: &str, message: String| ScenarioError {
        file: path.to_path_buf(),
        location: spans.locate(field),
        field: Some(field.to_string()),
        message,
    };
    let table: toml::Table = toml::from_str(&text).map_err(|e| ScenarioError {
        file: path.to_path_buf(),
        location: Location::Unknown,
        field: None,
        message: format!("invalid TOML: {}", e.message()),
    })?;
    let file: HeadlinesFile =
        serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|err| {
            let field = err.path().to_string();
            let message = err.into_inner().message().to_string();
            error(&field, message)
        })?;
    if file.run.is_empty() {
        return Err(error(
            "run",
            "no [[run]]: a family's headlines name the runs its reproduction needs (an empty \
             file reproduces nothing)"
                .into(),
        ));
    }
    let base = path.parent().unwrap_or(Path::new(""));
    let doc = match file.doc {
        None => None,
        Some(doc) => {
            let resolved = base.join(&doc);
            if !resolved.is_file() {
                return Err(error(
                    "doc",
                    format!(
                        "no document at {} (a path relative to the headlines file)",
                        resolved.display()
                    ),
                ));
            }
            Some(resolved)
        }
    };
    let mut runs = file.run;
    for (i, run) in runs.iter_mut().enumerate() {
        let resolved = base.join(&run.scenario);
        if !resolved.is_file() {
            return Err(error(
                &format!("run[{i}].scenario"),
                format!("no scenario file at {}", resolved.display()),
            ));
        }
        run.scenario = resolved;
    }
    for (i, input) in file.input.iter().enumerate() {
        for (key, text) in [
            ("name", &input.name),
            ("value", &input.value),
            ("how", &input.how),
            ("source", &input.source),
        ] {
            if text.trim().is_empty() {
                return Err(error(
                    &format!("input[{i}].{key}"),
                    "is empty: every chosen or fitted input names its source".into(),
                ));
            }
            if let Some((id, _)) = prose::placeholders(text)
                .into_iter()
                .find(|(id, _)| !file.value.iter().any(|v| &v.id == id))
            {
                return Err(error(
                    &format!("input[{i}].{key}"),
                    format!("`{{value:{id}}}` names no [[value]]"),
                ));
            }
        }
    }
    for (i, run) in runs.iter().enumerate() {
        if runs[..i].iter().any(|r| r.id == run.id) {
            return Err(error(
                &format!("run[{i}].id"),
                format!("run id `{}` is used twice", run.id),
            ));
        }
    }
    let mut baselines = file.baseline;
    let file_names: Vec<String> = baselines.iter().map(|b| b.name.clone()).collect();
    for (i, baseline) in baselines.iter_mut().enumerate() {
        let at = |key: &str| format!("baseline[{i}].{key}");
        if file_names[..i].contains(&baseline.name) {
            return Err(error(
                &at("name"),
                format!("baseline `{}` is defined twice", baseline.name),
            ));
        }
        if baseline.paper.trim().is_empty() {
            return Err(error(
                &at("paper"),
                "is empty: a baseline quotes the paper's words for it".into(),
            ));
        }
        if baseline.requires.is_empty() {
            return Err(error(
                &at("requires"),
                "names no key: a baseline says what the compared cell's scenario writes".into(),
            ));
        }
        if let Some(scenario) = &baseline.scenario {
            let resolved = base.join(scenario);
            if !resolved.is_file() {
                return Err(error(
                    &at("scenario"),
                    format!("no scenario file at {}", resolved.display()),
                ));
            }
            baseline.scenario = Some(resolved);
        }
    }
    for (i, claim) in file.claim.iter().enumerate() {
        let at = |key: &str| format!("claim[{i}].{key}");
        if file.claim[..i].iter().any(|c| c.id == claim.id) {
            return Err(error(
                &at("id"),
                format!("claim id `{}` is used twice", claim.id),
            ));
        }
        if !runs.iter().any(|r| r.id == claim.run) {
            return Err(error(
                &at("run"),
                format!("no [[run]] has id `{}`", claim.run),
            ));
        }
        if let Some(versus_run) = &claim.versus_run
            && !runs.iter().any(|r| &r.id == versus_run)
        {
            return Err(error(
                &at("versus_run"),
                format!("no [[run]] has id `{versus_run}`"),
            ));
        }
        match baselines.iter().find(|b| b.name == claim.baseline) {
            None => {
                return Err(error(
                    &at("baseline"),
                    format!(
                        "no [[baseline]] is named `{}` (defined: {})",
                        claim.baseline,
                        file_names.join(", ")
                    ),
                ));
            }
            Some(baseline) => {
                if !claim
                    .paper
                    .to_lowercase()
                    .contains(&baseline.paper.to_lowercase())
                {
                    return Err(error(
                        &at("paper"),
                        format!(
                            "does not name its baseline `{}` in the paper's words (\"{}\")",
                            baseline.name, baseline.paper
                        ),
                    ));
                }
            }
        }
        for (key, reason) in [
            ("baseline_mismatch", &claim.baseline_mismatch),
            ("seed_sensitive", &claim.seed_sensitive),
        ] {
            if reason.as_ref().is_some_and(|r| r.trim().is_empty()) {
                return Err(error(&at(key), "needs its reason".into()));
            }
        }
        if claim.versus.is_empty() {
            return Err(error(
                &at("versus"),
                "names no coordinate, so the claim compares a cell with itself".into(),
            ));
        }
        if let Some(reason) = &claim.by_construction {
            if reason.trim().is_empty() {
                return Err(error(
                    &at("by_construction"),
                    "a claim that holds by construction needs its reason (which input makes \
                     it hold)"
                        .into(),
                ));
            }
            if claim.expect.is_some() || claim.known_deviation.is_some() {
                return Err(error(
                    &at("by_construction"),
                    "a by-construction claim is shown as an input; it takes no `expect` or \
                     `known_deviation`"
                        .into(),
                ));
            }
        }
        for (key, expect) in [
            ("expect", claim.expect),
            ("expect_quick", claim.expect_quick),
        ] {
            if expect == Some(Verdict::Input) {
                return Err(error(
                    &at(key),
                    "`input` is a verdict of by-construction claims: write `by_construction = \
                     \"why\"` instead"
                        .into(),
                ));
            }
        }
        let short = [claim.expect, claim.expect_quick]
            .iter()
            .any(|e| e.is_some_and(|e| e != Verdict::Reproduced));
        match (short, &claim.known_deviation) {
            (true, None) => {
                return Err(error(
                    &at("known_deviation"),
                    "a claim expected short of `reproduced` needs its explanation".into(),
                ));
            }
            (false, Some(_)) => {
                return Err(error(
                    &at("expect"),
                    "a claim with a known_deviation names the verdict it explains \
                     (`direction_only` or `not_reproduced`)"
                        .into(),
                ));
            }
            _ => {}
        }
        for (key, text) in [
            ("known_deviation", &claim.known_deviation),
            ("seed_sensitive", &claim.seed_sensitive),
            ("baseline_mismatch", &claim.baseline_mismatch),
        ] {
            for (id, _) in prose::placeholders(text.as_deref().unwrap_or("")) {
                if !file.value.iter().any(|v| v.id == id) {
                    return Err(error(
                        &at(key),
                        format!("`{{value:{id}}}` names no [[value]]"),
                    ));
                }
            }
        }
        if claim.direction == Direction::Close && claim.paper_value.is_none() {
            return Err(error(
                &at("paper_value"),
                "a `close` claim is judged against the paper's value: give it".into(),
            ));
        }
        if let Some(PaperValue::PerPoint(_)) = &claim.paper_value
            && (claim.over.is_none()
                || claim.aggregate != Aggregate::Every
                || !claim.pool.is_empty())
        {
            return Err(error(
                &at("paper_value"),
                "a value per point needs `over`, no `pool` (and every point judged)".into(),
            ));
        }
        if !claim.pool.is_empty() && claim.over.is_none() {
            return Err(error(
                &at("pool"),
                "pools points with `over`: name it".into(),
            ));
        }
        if claim.over.is_none() && claim.aggregate != Aggregate::Every {
            return Err(error(
                &at("aggregate"),
                "applies only to a claim with `over`".into(),
            ));
        }
    }
    for (i, value) in file.value.iter().enumerate() {
        let at = |key: &str| format!("value[{i}].{key}");
        if file.value[..i].iter().any(|v| v.id == value.id) {
            return Err(error(
                &at("id"),
                format!("value id `{}` is declared twice", value.id),
            ));
        }
        if !prose::is_id(&value.id) {
            return Err(error(
                &at("id"),
                "an id is letters, digits, `-` and `_`".into(),
            ));
        }
        if !runs.iter().any(|r| r.id == value.run) {
            return Err(error(
                &at("run"),
                format!("no [[run]] has id `{}`", value.run),
            ));
        }
        if let Some(versus_run) = &value.versus_run {
            if !runs.iter().any(|r| &r.id == versus_run) {
                return Err(error(
                    &at("versus_run"),
                    format!("no [[run]] has id `{versus_run}`"),
                ));
            }
            if value.versus.is_none() {
                return Err(error(
                    &at("versus_run"),
                    "names the run of a compared cell: the value needs `versus`".into(),
                ));
            }
        }
        match (&value.versus, value.statistic) {
            (Some(versus), Some(statistic)) => {
                if versus.is_empty() {
                    return Err(error(
                        &at("versus"),
                        "names no coordinate, so the value compares a cell with itself".into(),
                    ));
                }
                if statistic == Statistic::Values {
                    return Err(error(
                        &at("statistic"),
                        "a value is one number per point: improvement_pct, change_pct, \
                         difference or ratio"
                            .into(),
                    ));
                }
            }
            (None, None) => {}
            (Some(_), None) => {
                return Err(error(
                    &at("statistic"),
                    "a value with `versus` names its statistic".into(),
                ));
            }
            (None, Some(_)) => {
                return Err(error(
                    &at("versus"),
                    "a statistic compares with a `versus` cell".into(),
                ));
            }
        }
        for (key, kept) in &value.within {
            if !value.over.contains(key) {
                return Err(error(
                    &at(&format!("within.{key}")),
                    format!("`{key}` is not one of the value's `over` keys"),
                ));
            }
            if kept.as_array().is_none_or(|a| a.is_empty()) {
                return Err(error(
                    &at(&format!("within.{key}")),
                    "lists the axis values to keep: a non-empty array".into(),
                ));
            }
        }
        if value.decimals > 6 {
            return Err(error(&at("decimals"), "at most 6".into()));
        }
    }
    let mut prose = file.prose;
    for (i, phrase) in prose.paper.iter().enumerate() {
        if prose::number_tokens(phrase).is_empty() {
            return Err(error(
                &format!("prose.paper[{i}]"),
                format!("`{phrase}` states no number"),
            ));
        }
    }
    let mut resolved = std::collections::BTreeMap::new();
    for (file_name, phrases) in std::mem::take(&mut prose.inputs) {
        let field = format!("prose.inputs.{}", file_name.display());
        let path = base.join(&file_name);
        if !path.is_file() {
            return Err(error(&field, format!("no file at {}", path.display())));
        }
        if let Some(phrase) = phrases.iter().find(|p| prose::number_tokens(p).is_empty()) {
            return Err(error(&field, format!("`{phrase}` states no number")));
        }
        resolved.insert(path, phrases);
    }
    prose.inputs = resolved;
    let family = base
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_string();
    Ok(Headlines {
        path: path.to_path_buf(),
        family,
        doc,
        runs,
        baselines,
        claims: file.claim,
        inputs: file.input,
        values: file.value,
        prose,
        spans,
    })
}

impl Headlines {
    /// The run named `id`.
    pub fn run(&self, id: &str) -> Option<&RunSpec> {
        self.runs.iter().find(|r| r.id == id)
    }

    /// Whether the file quotes a paper: it has claims or `[prose]` phrases of the paper's (a
    /// file of runs and values alone, a study's, quotes none).
    pub fn quotes_paper(&self) -> bool {
        !self.claims.is_empty() || !self.prose.paper.is_empty()
    }

    /// Checks the claims and values about run `id` against its loaded scenario: the metric is
    /// one of the family's, and every coordinate key (and `over`) is a sweep key of the run.
    pub fn check_against(&self, id: &str, plan: &ScenarioPlan) -> Result<(), ScenarioError> {
        let error = |field: String, message: String| ScenarioError {
            file: self.path.clone(),
            location: self.spans.locate(&field),
            field: Some(field),
            message,
        };
        let axes: Vec<&str> = plan.axes.iter().map(|a| a.key.as_str()).collect();
        let claims = self.claims.iter().enumerate().filter_map(|(i, c)| {
            let versus_run = c.versus_run.as_deref().unwrap_or(&c.run);
            let own = c.run == id;
            let compared = versus_run == id;
            if !own && !compared {
                return None;
            }
            let over = c
                .over
                .as_slice()
                .iter()
                .map(|k| (format!("claim[{i}].over"), k))
                .chain(
                    c.pool
                        .iter()
                        .enumerate()
                        .map(move |(j, k)| (format!("claim[{i}].pool[{j}]"), k)),
                )
                .filter(|_| own);
            let empty: &toml::Table = &EMPTY_TABLE;
            Some((
                format!("claim[{i}]"),
                &c.metric,
                if own { &c.cell } else { empty },
                compared.then_some(&c.versus),
                over.collect::<Vec<_>>(),
            ))
        });
        let values = self.values.iter().enumerate().filter_map(|(i, v)| {
            let own = v.run == id;
            let compared = v.versus_run.as_deref().unwrap_or(&v.run) == id;
            if !own && !compared {
                return None;
            }
            let over = v.over.iter().enumerate().filter(|_| own);
            let empty: &toml::Table = &EMPTY_TABLE;
            Some((
                format!("value[{i}]"),
                &v.metric,
                if own { &v.cell } else { empty },
                v.versus.as_ref().filter(|_| compared),
                over.map(|(j, k)| (format!("value[{i}].over[{j}]"), k))
                    .collect::<Vec<_>>(),
            ))
        });
        for (at, metric, cell, versus, over) in claims.chain(values) {
            if !plan.family.metrics().iter().any(|m| m.name == *metric) {
                return Err(error(
                    format!("{at}.metric"),
                    format!(
                        "{metric} is not a metric of the {} family",
                        plan.family.name()
                    ),
                ));
            }
            let keys = cell
                .keys()
                .map(|k| (format!("{at}.cell.{k}"), k))
                .chain(
                    versus
                        .into_iter()
                        .flat_map(|v| v.keys())
                        .map(|k| (format!("{at}.versus.{k}"), k)),
                )
                .chain(over);
            for (field, key) in keys {
                if !axes.iter().any(|axis| evaluate::key_reaches(axis, key)) {
                    return Err(error(
                        field,
                        format!(
                            "`{key}` is not a sweep key of run `{id}` (sweep keys: {})",
                            axes.join(", ")
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Checks that every claim compares with the baseline it names: the compared cells (the
    /// claimed cells' coordinates with `versus` laid over them, in the `versus_run` or the
    /// claim's run) come from the baseline's scenario file and their scenario writes every
    /// value the baseline requires. A claim with `baseline_mismatch` must fail this (it says
    /// why), every other claim must pass it. `plan_of` gives each run's loaded scenario.
    pub fn check_baselines<'a>(
        &self,
        plan_of: impl Fn(&str) -> Option<&'a ScenarioPlan>,
    ) -> Result<(), ScenarioError> {
        let error = |field: String, message: String| ScenarioError {
            file: self.path.clone(),
            location: self.spans.locate(&field),
            field: Some(field),
            message,
        };
        for (i, claim) in self.claims.iter().enumerate() {
            let baseline = self
                .baselines
                .iter()
                .find(|b| b.name == claim.baseline)
                .expect("load checked every claim's baseline");
            let versus_run = claim.versus_run.as_deref().unwrap_or(&claim.run);
            let (Some(cell_plan), Some(versus_plan)) = (plan_of(&claim.run), plan_of(versus_run))
            else {
                return Err(error(
                    format!("claim[{i}].run"),
                    format!(
                        "no loaded scenario for run `{}` or `{versus_run}`",
                        claim.run
                    ),
                ));
            };
            let problems =
                baseline_problems(baseline, &claim.cell, &claim.versus, cell_plan, versus_plan);
            match (problems.is_empty(), &claim.baseline_mismatch) {
                (false, None) => {
                    return Err(error(
                        format!("claim[{i}].versus"),
                        format!(
                            "does not compare with the paper's baseline `{}` (\"{}\"): {}",
                            baseline.name,
                            baseline.paper,
                            problems.join("; ")
                        ),
                    ));
                }
                (true, Some(_)) => {
                    return Err(error(
                        format!("claim[{i}].baseline_mismatch"),
                        format!(
                            "the claim compares with its baseline `{}`: delete baseline_mismatch",
                            baseline.name
                        ),
                    ));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// Why the cells a claim compares with (`versus` over the claimed `cell`s of `cell_plan`, found
/// in `versus_plan`) are not `baseline`; empty when they are.
fn baseline_problems(
    baseline: &Baseline,
    cell: &toml::Table,
    versus: &toml::Table,
    cell_plan: &ScenarioPlan,
    versus_plan: &ScenarioPlan,
) -> Vec<String> {
    let mut problems = Vec::new();
    if let Some(scenario) = &baseline.scenario {
        let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
            (Ok(a), Ok(b)) => a == b,
            _ => a == b,
        };
        if !same(scenario, &versus_plan.path) {
            problems.push(format!(
                "its compared cell is a cell of {}, the baseline's is in {}",
                versus_plan.path.display(),
                scenario.display()
            ));
        }
    }
    let json_coords = |coords: &[(String, toml::Value)]| -> Vec<(String, serde_json::Value)> {
        coords
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::to_value(v).unwrap_or_default()))
            .collect()
    };
    let versus_axes: Vec<&str> = versus_plan.axes.iter().map(|a| a.key.as_str()).collect();
    let mut compared = 0;
    for claimed in cell_plan.cells.iter().filter(|c| {
        let coords = json_coords(&c.coords);
        cell.iter()
            .all(|(k, v)| evaluate::coord_matches(&coords, k, v))
    }) {
        let wanted: toml::Table = claimed.coords.iter().cloned().collect();
        let wanted = evaluate::replace_coords(&versus_axes, &wanted, versus);
        let claimed_document = cell_document(cell_plan, &claimed.coords);
        for found in versus_plan.cells.iter().filter(|c| {
            let coords = json_coords(&c.coords);
            wanted
                .iter()
                .all(|(k, v)| evaluate::coord_matches(&coords, k, v))
        }) {
            compared += 1;
            let document = cell_document(versus_plan, &found.coords);
            for key in confounds(&claimed_document, &document, baseline, cell, versus) {
                let said = format!(" differ in {key} (");
                if problems.iter().any(|p| p.contains(&said)) {
                    continue;
                }
                let problem = format!(
                    "cell {} of {} and the compared cell {} of {} differ in {key} ({} vs {}), \
                     which neither the claim's cell and versus nor the baseline names",
                    claimed.id,
                    cell_plan.path.display(),
                    found.id,
                    versus_plan.path.display(),
                    written_value(&claimed_document, &key)
                        .map_or("(not written)".to_string(), |v| v.to_string()),
                    written_value(&document, &key)
                        .map_or("(not written)".to_string(), |v| v.to_string()),
                );
                if !problems.contains(&problem) {
                    problems.push(problem);
                }
            }
            for (key, want) in &baseline.requires {
                let actual = written_value(&document, key);
                let matches = actual.is_some_and(|actual| {
                    match (serde_json::to_value(actual), serde_json::to_value(want)) {
                        (Ok(a), Ok(w)) => evaluate::json_equal(&a, &w),
                        _ => false,
                    }
                });
                if !matches {
                    let problem = format!(
                        "cell {} of {} has {key} = {}, the baseline {want}",
                        found.id,
                        versus_plan.path.display(),
                        actual.map_or("(not written)".to_string(), |v| v.to_string())
                    );
                    if !problems.contains(&problem) {
                        problems.push(problem);
                    }
                }
            }
        }
    }
    if compared == 0 {
        problems.push(format!(
            "no cell of {} is compared (versus {})",
            versus_plan.path.display(),
            toml::Value::Table(versus.clone())
        ));
    }
    problems.truncate(3);
    problems
}

/// A cell's scenario document: the plan's document (after `--set`) with the cell's sweep
/// coordinates applied.
fn cell_document(plan: &ScenarioPlan, coords: &[(String, toml::Value)]) -> toml::Table {
    let mut document = plan.document.clone();
    for (key, value) in coords {
        let _ = crate::scenario::sweep::apply(&mut document, key, value.clone());
    }
    document
}

/// Top-level keys of a scenario that name, seed, sweep or report a run but do not change the
/// system it simulates: two compared cells may differ in them.
const NOT_THE_SYSTEM: &[&str] = &[
    "name",
    "description",
    "seeds",
    "sweep",
    "report",
    "figure",
    "output",
    "limits",
];

/// The dotted keys in which the claimed cell's document and the compared cell's differ (one
/// writes a value the other does not, or both write different values), other than those the
/// claim may vary: its `cell` and `versus` keys, the baseline's `requires`, and every key of a
/// table whose `kind` one of those names (another kind reads other keys). A key written in one
/// document only counts: the comparison would then rest on a default.
fn confounds(
    claimed: &toml::Table,
    compared: &toml::Table,
    baseline: &Baseline,
    cell: &toml::Table,
    versus: &toml::Table,
) -> Vec<String> {
    let named: Vec<&str> = cell
        .keys()
        .chain(versus.keys())
        .chain(baseline.requires.keys())
        .map(String::as_str)
        .collect();
    let free = |key: &str| {
        NOT_THE_SYSTEM.contains(&key.split('.').next().unwrap_or(key))
            || named.iter().any(|n| {
                let reaches = |a: &str, b: &str| a == b || b.starts_with(&format!("{a}."));
                reaches(n, key)
                    || reaches(key, n)
                    || n.strip_suffix(".kind")
                        .is_some_and(|table| key.starts_with(&format!("{table}.")))
            })
    };
    let (mut a, mut b) = (Vec::new(), Vec::new());
    flatten(claimed, "", &mut a);
    flatten(compared, "", &mut b);
    let mut keys: Vec<&String> = a.iter().chain(&b).map(|(k, _)| k).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|key| !free(key))
        .filter(|key| {
            let of = |leaves: &[(String, serde_json::Value)]| {
                leaves
                    .iter()
                    .find(|(k, _)| k == *key)
                    .map(|(_, v)| v.clone())
            };
            match (of(&a), of(&b)) {
                (Some(x), Some(y)) => !evaluate::json_equal(&x, &y),
                _ => true,
            }
        })
        .cloned()
        .collect()
}

/// The leaves of a scenario document as dotted keys (tables recursed; arrays, arrays of tables
/// included, are leaves).
fn flatten(table: &toml::Table, prefix: &str, out: &mut Vec<(String, serde_json::Value)>) {
    for (key, value) in table {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match value {
            toml::Value::Table(inner) => flatten(inner, &path, out),
            other => out.push((path, serde_json::to_value(other).unwrap_or_default())),
        }
    }
}

/// The value a scenario document writes at dotted `key`.
fn written_value<'a>(document: &'a toml::Table, key: &str) -> Option<&'a toml::Value> {
    let mut parts = key.split('.');
    let mut value = document.get(parts.next()?)?;
    for part in parts {
        value = value.as_table()?.get(part)?;
    }
    Some(value)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod prose_tests;
