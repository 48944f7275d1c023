//! Turns a result document into the figures its scenario asks for (`[[figure]]` tables). Every
//! kind works on the same selection: the cells that pass `select`, split into one figure per
//! combination of the sweep keys the figure does not use (`x`, `series`, `panels`, `points`,
//! `select`), each file named `<name>_<key>-<value>...`. One file per kind builds the chart data.

mod decode_curve;
mod expertweave_memory;
mod frontier;
mod gem_expert_load;
mod gem_staircase;
mod improvement;
mod labels;
mod metric;
mod stacked;
mod timeline;

use anyhow::Context;
use expertsim_scenario::family::FigureKind;
use expertsim_scenario::results::{CellResult, ResultsDocument, SweepAxisEcho};
use expertsim_scenario::scenario::ScenarioPlan;
use expertsim_scenario::scenario::figure::selected_values;
use expertsim_scenario::scenario::file::FigureFile;
use figures::ChartFigure;
use std::path::{Path, PathBuf};

type Json = serde_json::Value;

/// The cells one figure file draws, with what it needs to label them.
pub(crate) struct Selection<'a> {
    pub spec: &'a FigureFile,
    pub document: &'a ResultsDocument,
    /// In plan order.
    pub cells: Vec<&'a CellResult>,
}

impl<'a> Selection<'a> {
    /// The distinct values `key` takes over the selected cells, in sweep order.
    pub fn values(&self, key: &str) -> Vec<Json> {
        let mut values: Vec<Json> = Vec::new();
        for cell in &self.cells {
            if let Some(v) = coord(cell, key)
                && !values.contains(&v)
            {
                values.push(v);
            }
        }
        values
    }

    /// The cells whose `key` is `value`, for each `(key, value)`.
    pub fn matching(&self, wanted: &[(&str, &Json)]) -> Vec<&'a CellResult> {
        self.cells
            .iter()
            .copied()
            .filter(|c| wanted.iter().all(|(k, v)| coord(c, k).as_ref() == Some(*v)))
            .collect()
    }

    /// The description of `metric` from the family's metric table.
    pub fn metric_label(&self, metric: &str) -> String {
        self.document
            .scenario
            .family
            .metrics()
            .iter()
            .find(|m| m.name == metric)
            .map(|m| m.description.to_string())
            .unwrap_or_else(|| metric.to_string())
    }

    /// A panel's name for its `panels` value: `rps = 8` for a number, the value for a text.
    pub fn panel_name(&self, value: Option<&Json>) -> String {
        match (value, &self.spec.panels) {
            (Some(v @ (Json::Number(_) | Json::Bool(_))), Some(key)) => {
                format!(
                    "{} = {}",
                    labels::without_unit(&labels::key_label(key)),
                    label(v)
                )
            }
            (Some(v), _) => label(v),
            (None, _) => String::new(),
        }
    }

    /// The panels of the figure: one per value of `panels`, else one holding every cell.
    pub fn panels(&self) -> Vec<(Option<Json>, Vec<&'a CellResult>)> {
        match &self.spec.panels {
            Some(key) => self
                .values(key)
                .into_iter()
                .map(|v| {
                    let cells = self.matching(&[(key.as_str(), &v)]);
                    (Some(v), cells)
                })
                .collect(),
            None => vec![(None, self.cells.clone())],
        }
    }
}

/// The cell's value of `key`: a sweep key, or a field inside a table-valued sweep key.
pub(crate) fn coord(cell: &CellResult, key: &str) -> Option<Json> {
    if let Some(v) = cell.coord(key) {
        return Some(v.clone());
    }
    cell.coords.iter().find_map(|(k, v)| {
        let inner = key.strip_prefix(k.as_str())?.strip_prefix('.')?;
        inner.split('.').try_fold(v, |v, part| v.get(part)).cloned()
    })
}

/// A value as text: strings bare, lists joined by `+` (model combinations), tables as their
/// `kind` followed by the other fields (`chimera slack=0.5`).
pub(crate) fn label(value: &Json) -> String {
    match value {
        Json::String(s) => s.clone(),
        Json::Array(items) => items.iter().map(label).collect::<Vec<_>>().join("+"),
        Json::Object(fields) => {
            let mut parts: Vec<String> = Vec::new();
            if let Some(kind) = fields.get("kind") {
                parts.push(label(kind));
            }
            parts.extend(
                fields
                    .iter()
                    .filter(|(k, _)| k.as_str() != "kind")
                    .map(|(k, v)| format!("{k}={}", label(v))),
            );
            parts.join(" ")
        }
        other => other.to_string(),
    }
}

/// A dotted key's name for axis labels: its last part, or the part before it when the last one
/// only says which field (`mapper.kind` -> `mapper`, `workload.rps` -> `rps`).
pub(crate) fn short_key(key: &str) -> &str {
    let mut parts = key.rsplit('.');
    let last = parts.next().unwrap_or(key);
    match (last, parts.next()) {
        ("kind" | "name" | "preset", Some(parent)) => parent,
        _ => last,
    }
}

fn sanitize(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The sweep keys (whole keys, not fields inside them) that `spec` uses, of the axes `sweep`.
fn used_axes<'d>(spec: &FigureFile, sweep: &'d [SweepAxisEcho]) -> Vec<&'d str> {
    let named: Vec<&str> = spec
        .x
        .iter()
        .chain(&spec.series)
        .chain(&spec.panels)
        .chain(&spec.points)
        .chain(spec.select.keys())
        .map(String::as_str)
        .chain(implicit_keys(spec.kind).iter().copied())
        .collect();
    sweep
        .iter()
        .map(|a| a.key.as_str())
        .filter(|axis| {
            named.iter().any(|n| {
                n == axis
                    || n.strip_prefix(axis)
                        .is_some_and(|rest| rest.starts_with('.'))
            })
        })
        .collect()
}

/// Sweep keys a kind always draws, whatever the figure table names.
fn implicit_keys(kind: FigureKind) -> &'static [&'static str] {
    match kind {
        FigureKind::ExpertweaveMemory => &[expertweave_memory::GROUP_KEY],
        _ => &[],
    }
}

/// Every combination of the values of the sweep keys (of `sweep`) that `spec` does not use:
/// one figure file each.
fn combinations(spec: &FigureFile, sweep: &[SweepAxisEcho]) -> Vec<Vec<(String, Json)>> {
    let used = used_axes(spec, sweep);
    let mut combos: Vec<Vec<(String, Json)>> = vec![vec![]];
    for axis in sweep.iter().filter(|a| !used.contains(&a.key.as_str())) {
        combos = combos
            .into_iter()
            .flat_map(|c| {
                axis.values
                    .iter()
                    .map(move |v| [c.clone(), vec![(axis.key.clone(), v.clone())]].concat())
            })
            .collect();
    }
    combos
}

/// The file name (without extension) of `spec`'s figure for one combination of the sweep keys
/// it does not use.
fn file_stem(spec: &FigureFile, combo: &[(String, Json)]) -> String {
    let suffix: String = combo
        .iter()
        .map(|(k, v)| format!("_{}-{}", sanitize(short_key(k)), sanitize(&label(v))))
        .collect();
    format!("{}{suffix}", spec.name)
}

/// The longest file name the file system takes (Linux and macOS: 255 bytes).
const MAX_FILE_NAME_BYTES: usize = 255;

/// Checks, before anything runs, that every figure file `plan` would write has a name the file
/// system takes (`.png` and `.svg` added); the error names the figure's `name` field.
pub fn check_file_names(plan: &ScenarioPlan) -> Result<(), (String, String)> {
    let sweep = expertsim_scenario::partial::SweepHeader::of(plan).sweep;
    for (i, spec) in plan.figures.iter().enumerate() {
        for combo in combinations(spec, &sweep) {
            let name = format!("{}.png", file_stem(spec, &combo));
            if name.len() > MAX_FILE_NAME_BYTES {
                return Err((
                    format!("figure[{i}].name"),
                    format!(
                        "its file {}... would have a {}-byte name, over the \
                         {MAX_FILE_NAME_BYTES} bytes a file name may have; shorten the name",
                        name.chars().take(40).collect::<String>(),
                        name.len()
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// One file's cells: the values of the sweep keys the figure does not use, and the cells with
/// those values.
pub(crate) type FileCells<'d> = (Vec<(String, Json)>, Vec<&'d CellResult>);

/// The cells of `document` that pass `spec.select`, grouped into one list per combination of
/// the sweep keys the figure does not use (with that combination), in plan order.
pub(crate) fn split_into_files<'d>(
    spec: &FigureFile,
    document: &'d ResultsDocument,
) -> Vec<FileCells<'d>> {
    let selected: Vec<&CellResult> = document
        .cells
        .iter()
        .filter(|cell| {
            spec.select.iter().all(|(key, wanted)| {
                let Ok(wanted) = serde_json::to_value(wanted) else {
                    return false;
                };
                let swept: Vec<Json> = document
                    .sweep
                    .iter()
                    .find(|a| &a.key == key)
                    .map(|a| a.values.clone())
                    .unwrap_or_default();
                let allowed = selected_values(&swept, &wanted);
                cell.coord(key).is_some_and(|v| allowed.contains(&v))
            })
        })
        .collect();
    combinations(spec, &document.sweep)
        .into_iter()
        .map(|combo| {
            let cells: Vec<&CellResult> = selected
                .iter()
                .copied()
                .filter(|cell| combo.iter().all(|(k, v)| cell.coord(k) == Some(v)))
                .collect();
            (combo, cells)
        })
        .filter(|(_, cells)| !cells.is_empty())
        .collect()
}

/// The figure's title, with the values of the sweep keys that split it into files.
pub(crate) fn figure_title(spec: &FigureFile, combo: &[(String, Json)]) -> String {
    let title = if spec.title.is_empty() {
        spec.name.clone()
    } else {
        spec.title.clone()
    };
    if combo.is_empty() {
        return title;
    }
    let values: Vec<String> = combo
        .iter()
        .map(|(k, v)| format!("{} = {}", short_key(k), label(v)))
        .collect();
    format!("{title} ({})", values.join(", "))
}

/// The first run's `details` of `cell`, which detail figures draw (seeds differ only in noise).
pub(crate) fn first_details(cell: &CellResult) -> anyhow::Result<&Json> {
    cell.runs
        .first()
        .map(|r| &r.details)
        .with_context(|| format!("cell {} has no runs", cell.id))
}

/// The expert layout detail of a cell's first run that the `gem_*` figure kinds draw: the
/// first replica group's `details.deployment[].experts` (a serving run with `experts.trace`,
/// `serving_family::mapping::expert_detail`).
pub(crate) fn expert_details(cell: &CellResult) -> anyhow::Result<&Json> {
    first_details(cell)?["deployment"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|g| &g["experts"])
        .find(|e| e.is_object())
        .with_context(|| {
            format!(
                "cell {}: no replica group records its expert layout (an MoE model with \
                 `experts.trace` does)",
                cell.id
            )
        })
}

/// The figures `run` and `merge` draw: the scenario's `[[figure]]` tables or, without any, its
/// headline metrics over its sweep ([`default_figure`]); a scenario that sweeps nothing and
/// names no figure gets none, and a note on stderr says so.
pub fn render_run(
    plan: &ScenarioPlan,
    document: &ResultsDocument,
    dir: &Path,
) -> anyhow::Result<Vec<PathBuf>> {
    if !plan.figures.is_empty() {
        return render_all(plan, document, dir);
    }
    let Some(spec) = default_figure(document) else {
        eprintln!(
            "note: no figure: {} has no [[figure]] table and sweeps nothing (the table above and \
             results.json hold its numbers; add a [sweep] or a [[figure]] for one)",
            plan.path.display()
        );
        return Ok(Vec::new());
    };
    let written = render(std::slice::from_ref(&spec), document, dir)?;
    eprintln!(
        "note: {} has no [[figure]] table: drew its headline metrics over `{}` ({}*; a \
         [[figure]] table chooses, docs/serving-family.md)",
        plan.path.display(),
        spec.x.as_deref().unwrap_or_default(),
        dir.join(&spec.name).display()
    );
    Ok(written)
}

/// The figure of a scenario without `[[figure]]` tables: the family's headline metrics (a row
/// each) over the first sweep key, one line per value of the second, a panel per value of the
/// third, a file per combination of the rest; `None` when nothing is swept.
pub fn default_figure(document: &ResultsDocument) -> Option<FigureFile> {
    let mut keys = document.sweep.iter().map(|a| a.key.clone());
    let x = keys.next()?;
    Some(FigureFile {
        name: "headline".into(),
        title: format!("{}: headline metrics", document.scenario.name),
        kind: FigureKind::Metric,
        metrics: document
            .scenario
            .family
            .headline()
            .iter()
            .map(|m| m.to_string())
            .collect(),
        x: Some(x),
        series: keys.next().into_iter().collect(),
        panels: keys.next(),
        points: Vec::new(),
        select: Default::default(),
        log_y: false,
        categorical_x: false,
        x_label: None,
        y_label: None,
        with_improvement: false,
    })
}

/// Renders every figure of `plan` into `dir`; returns the files written.
pub fn render_all(
    plan: &ScenarioPlan,
    document: &ResultsDocument,
    dir: &Path,
) -> anyhow::Result<Vec<PathBuf>> {
    render(&plan.figures, document, dir)
}

/// Renders the figures `specs` of `document` into `dir`; returns the files written.
fn render(
    specs: &[FigureFile],
    document: &ResultsDocument,
    dir: &Path,
) -> anyhow::Result<Vec<PathBuf>> {
    if specs.is_empty() {
        return Ok(Vec::new());
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut written = Vec::new();
    for spec in specs {
        for (combo, cells) in split_into_files(spec, document) {
            let stem = file_stem(spec, &combo);
            let selection = Selection {
                spec,
                document,
                cells,
            };
            let mut figure =
                build(&selection).with_context(|| format!("building figure {stem}"))?;
            if matches!(spec.kind, FigureKind::Metric | FigureKind::Improvement) {
                metric::name_coinciding_series(&mut figure);
            }
            figure.title = figure_title(spec, &combo);
            // Where the legend lists the series values (not stack layers or segment kinds),
            // it is titled with what they are.
            let legend_is_series = matches!(
                spec.kind,
                FigureKind::Metric | FigureKind::Improvement | FigureKind::Frontier
            );
            if legend_is_series && figure.legend_title.is_none() && !spec.series.is_empty() {
                let keys: Vec<String> = spec.series.iter().map(|k| labels::key_label(k)).collect();
                figure.legend_title = Some(keys.join(" / "));
            }
            let stem = dir.join(stem);
            let paths = match figures::render(&figure, &stem) {
                // A sweep narrowed with --set can leave a figure nothing to draw (an improvement
                // figure of the baseline alone: no panel, or panels without points): say so
                // instead of failing the finished run.
                Err(
                    figures::FigureError::EmptyPanel { .. }
                    | figures::FigureError::EmptyFigure { .. },
                ) => {
                    eprintln!(
                        "note: figure {} not drawn: no data among the cells this run kept",
                        stem.display()
                    );
                    continue;
                }
                other => other.with_context(|| format!("rendering figure {}", stem.display()))?,
            };
            written.extend(paths);
        }
    }
    Ok(written)
}

fn build(selection: &Selection<'_>) -> anyhow::Result<ChartFigure> {
    match selection.spec.kind {
        FigureKind::Metric => Ok(metric::build(selection)),
        FigureKind::Improvement => improvement::build(selection),
        FigureKind::Stacked => Ok(stacked::build(selection)),
        FigureKind::Frontier => Ok(frontier::build(selection)),
        FigureKind::GemExpertLoad => gem_expert_load::build(selection),
        FigureKind::GemStaircase => gem_staircase::build(selection),
        FigureKind::ExpertweaveMemory => expertweave_memory::build(selection),
        FigureKind::Timeline => timeline::build(selection),
        FigureKind::DecodeCurve => decode_curve::build(selection),
    }
}
