//! Scenario loading in two stages: the TOML text is checked against the file schema (the common
//! keys of `file::CommonFile`, then the tables of the family it names; unknown keys and wrong types
//! rejected with line and column), then each sweep cell is validated into a runnable `Scenario`.
//! Every error is one line naming the file, the line and the field, and nothing runs until every
//! cell has passed.

pub mod error;
pub mod figure;
pub mod file;
pub mod keys;
pub mod options;
pub mod schema;
pub mod sweep;

pub use crate::family::FamilyId;
pub use error::{Location, ScenarioError};
pub use file::CommonFile;

use crate::load_cache::LoadCache;
use crate::validate;
use crate::validate::limits::Limits;
use error::SpanIndex;
use file::{COMMON_KEYS, FigureFile, ReportFile};
use serde::de::DeserializeOwned;
use std::path::{Path, PathBuf};
use sweep::SweepAxis;

pub use crate::family::Scenario;

/// A loaded scenario: its sweep expanded into validated cells.
#[derive(Clone, Debug)]
pub struct ScenarioPlan {
    pub path: PathBuf,
    pub family: FamilyId,
    pub name: String,
    pub description: String,
    pub seeds: Vec<u64>,
    pub axes: Vec<SweepAxis>,
    /// `sweep_only`'s entries: the cells of the product the plan keeps (none: every cell).
    pub only: Vec<toml::Table>,
    pub cells: Vec<Cell>,
    pub report: Option<ReportFile>,
    pub figures: Vec<FigureFile>,
    /// The scenario document after `--set` overrides and without `[sweep]` and `sweep_only`, for
    /// the result echo.
    pub document: toml::Table,
    /// The ceilings in force (`[limits]`).
    pub limits: Limits,
    /// What the loader did that the user should know (a baseline cell kept in a narrowed sweep).
    pub notes: Vec<String>,
}

/// One sweep cell: its coordinates (a value per sweep key) and the validated scenario.
#[derive(Clone, Debug)]
pub struct Cell {
    pub id: String,
    pub coords: Vec<(String, toml::Value)>,
    pub scenario: Scenario,
}

/// Where an overridden value came from, for error messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    Sweep,
    CommandLine,
}

struct Loader<'a> {
    path: &'a Path,
    spans: SpanIndex,
}

impl Loader<'_> {
    fn error(
        &self,
        location: Location,
        field: Option<&str>,
        message: impl Into<String>,
    ) -> ScenarioError {
        ScenarioError {
            file: self.path.to_path_buf(),
            location,
            field: field.map(str::to_string),
            message: message.into(),
        }
    }

    fn locate_sweep_key(&self, key: &str) -> Location {
        self.spans.locate(&format!("sweep.{key}"))
    }

    /// Locates `path`, attributing it to the sweep key or `--set` that supplied its value.
    fn locate(&self, path: &str, overrides: &[(String, Origin)]) -> Location {
        for (key, origin) in overrides {
            let covers = path == key
                || path
                    .strip_prefix(key.as_str())
                    .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
                || key
                    .strip_prefix(path)
                    .is_some_and(|rest| rest.starts_with('.'));
            if covers {
                return match origin {
                    Origin::Sweep => self.locate_sweep_key(key),
                    Origin::CommandLine => Location::CommandLine,
                };
            }
        }
        self.spans.locate(path)
    }
}

/// The file name of a family's claims file (`headlines`), which sits beside its scenarios and
/// is not one: `scenario_files` skips it and `load` refuses it.
pub const CLAIMS_FILE_NAME: &str = "headlines.toml";

/// Every scenario file under `dir`, recursively, sorted: the `.toml` files other than the
/// claims files (`headlines.toml`) that sit beside the scenarios.
pub fn scenario_files(dir: &Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            found.extend(scenario_files(&path)?);
        } else if path.extension().is_some_and(|e| e == "toml")
            && path.file_name().is_none_or(|n| n != CLAIMS_FILE_NAME)
        {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}

/// Loads the scenario at `path`, applies `--set key=value` overrides `sets`, expands the sweep
/// and validates every cell.
pub fn load(path: &Path, sets: &[String]) -> Result<ScenarioPlan, ScenarioError> {
    if path.file_name().is_some_and(|n| n == CLAIMS_FILE_NAME) {
        return Err(ScenarioError {
            file: path.to_path_buf(),
            location: Location::Unknown,
            field: None,
            message: format!(
                "this is a claims file ({}), read by `expertsim reproduce`, not a scenario; \
                 run one of the scenarios beside it",
                CLAIMS_FILE_NAME
            ),
        });
    }
    let text = crate::input::read_input_text_limited(path, crate::input::MAX_SCENARIO_FILE_BYTES)
        .map_err(|e| ScenarioError {
        file: path.to_path_buf(),
        location: Location::Unknown,
        field: None,
        message: format!("cannot read the scenario file: {e}"),
    })?;
    load_str(path, &text, sets)
}

/// Like `load`, for scenario text already in memory (`path` names it in errors and anchors
/// relative paths).
pub fn load_str(path: &Path, text: &str, sets: &[String]) -> Result<ScenarioPlan, ScenarioError> {
    let loader = Loader {
        path,
        spans: SpanIndex::build(path, text)?,
    };
    let mut document: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        let location = e
            .span()
            .map(|s| loader.spans.location_of(s.start))
            .unwrap_or(Location::Unknown);
        // A value error (an integer past 2^63) names the field it is the value of.
        let field = e.span().and_then(|s| loader.spans.field_at(s.start));
        loader.error(location, field.as_deref(), humanize(e.message()))
    })?;

    // The sweep axes, in the order written.
    let mut axes = Vec::new();
    if let Some(sweep) = document.remove("sweep") {
        let toml::Value::Table(sweep) = sweep else {
            return Err(loader.error(
                loader.spans.locate("sweep"),
                Some("sweep"),
                "must be a table of dotted keys to value lists",
            ));
        };
        for (key, values) in sweep {
            let field = format!("sweep.{key}");
            let toml::Value::Array(values) = values else {
                return Err(loader.error(
                    loader.locate_sweep_key(&key),
                    Some(&field),
                    "must be a list of values",
                ));
            };
            if values.is_empty() {
                return Err(loader.error(
                    loader.locate_sweep_key(&key),
                    Some(&field),
                    "must list at least one value",
                ));
            }
            axes.push(SweepAxis { key, values });
        }
    }

    // Figures are checked against the sweep as written, so narrowing it with --set leaves a
    // figure's `select` valid (the figure then draws the cells that remain).
    let written_axes = axes.clone();

    // The compared key and its baseline, as written (checked after the cells).
    let compared: Option<(String, toml::Value)> = document.get("report").and_then(|r| {
        Some((
            r.get("compare")?.as_str()?.to_string(),
            r.get("baseline")?.clone(),
        ))
    });
    let mut notes = Vec::new();
    // Swept keys whose values the command line chose: their errors point at `--set`.
    let mut narrowed: Vec<String> = Vec::new();

    // --set overrides: a swept key is narrowed to the given value(s); anything else is set.
    let mut overrides: Vec<(String, Origin)> = Vec::new();
    for argument in sets {
        let (key, value) =
            sweep::parse_set(argument).map_err(|m| loader.error(Location::CommandLine, None, m))?;
        if let Some(axis) = axes.iter().find(|a| {
            key.strip_prefix(a.key.as_str())
                .is_some_and(|r| r.starts_with('.'))
        }) {
            return Err(loader.error(
                Location::CommandLine,
                Some(&key),
                format!(
                    "`{}` is swept as whole values, which replace `{key}` in every cell; set it \
                     inside the swept values instead (e.g. --set '{}=[...]')",
                    axis.key, axis.key
                ),
            ));
        }
        if let Some(axis) = axes.iter_mut().find(|a| a.key == key) {
            let mut values = match value {
                toml::Value::Array(values) if !values.is_empty() => values,
                toml::Value::Array(_) => {
                    return Err(loader.error(
                        Location::CommandLine,
                        Some(&key),
                        "an empty list leaves no sweep cell",
                    ));
                }
                single => vec![single],
            };
            // Narrowing the compared key keeps its baseline, so the comparison still has one.
            if let Some((compare, baseline)) = &compared
                && *compare == key
                && !values.contains(baseline)
                && axis.values.contains(baseline)
            {
                values.insert(0, baseline.clone());
                notes.push(format!(
                    "kept the baseline cell {key} = {} that the report compares against",
                    sweep::display_value(baseline)
                ));
            }
            axis.values = values;
            narrowed.push(key.clone());
        } else {
            sweep::apply(&mut document, &key, value)
                .map_err(|m| loader.error(Location::CommandLine, Some(&key), m))?;
            overrides.push((key, Origin::CommandLine));
        }
    }

    // `sweep_only`, after --set (which may replace it: `--set 'sweep_only=[]'` keeps every
    // cell), checked against the sweep as written, like the figures.
    let only = match document.remove("sweep_only") {
        None => Vec::new(),
        Some(value) => sweep::parse_only(value, &written_axes).map_err(|(path, message)| {
            loader.error(loader.locate(&path, &overrides), Some(&path), message)
        })?,
    };

    // The ceilings, read before anything is expanded; they cannot be swept.
    if let Some(axis) = axes
        .iter()
        .find(|a| a.key == "limits" || a.key.starts_with("limits."))
    {
        return Err(loader.error(
            loader.locate_sweep_key(&axis.key),
            Some(&format!("sweep.{}", axis.key)),
            "limits cannot be swept; set them once in [limits]",
        ));
    }
    let limits: Limits = match document.get("limits") {
        None => Limits::default(),
        Some(table) => {
            let mut wrapper = toml::Table::new();
            wrapper.insert("limits".into(), table.clone());
            let common: LimitsOnly = deserialize_table(&loader, wrapper, &overrides)?;
            common.limits
        }
    };
    limits
        .validate()
        .map_err(|e| loader.error(loader.locate(&e.path, &overrides), Some(&e.path), e.message))?;
    let n_cells: f64 = axes.iter().map(|a| a.values.len() as f64).product();
    if n_cells > limits.max_cells {
        return Err(loader.error(
            axes.first()
                .map(|a| loader.locate_sweep_key(&a.key))
                .unwrap_or(Location::Unknown),
            Some("sweep"),
            format!(
                "expands to {n_cells} cells, above the ceiling of {} (raise it with `[limits] \
                 max_cells = ...`; docs/limits.md)",
                limits.max_cells
            ),
        ));
    }

    let base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut cache = LoadCache {
        limits: limits.clone(),
        ..LoadCache::default()
    };
    let mut cells = Vec::new();
    let mut first: Option<CommonFile> = None;
    let base = CellBase {
        loader: &loader,
        document: &document,
        overrides: &overrides,
        narrowed: &narrowed,
        base_dir: &base_dir,
        limits: &limits,
    };
    let product = sweep::cartesian(&axes);
    let product_len = product.len();
    let kept: Vec<_> = product
        .into_iter()
        .filter(|coords| sweep::keeps(&only, coords))
        .collect();
    if kept.is_empty() {
        return Err(loader.error(
            loader.locate("sweep_only", &overrides),
            Some("sweep_only"),
            format!("keeps none of the sweep's {product_len} cells"),
        ));
    }
    for coords in kept {
        let (file, scenario) = base.load_cell(&coords, &mut cache)?;
        if let Some(first) = &first
            && first.family != file.family
        {
            return Err(loader.error(
                loader.locate_sweep_key("family"),
                Some("family"),
                "every sweep cell must be of the same family",
            ));
        }
        first.get_or_insert(file);
        cells.push(Cell {
            id: sweep::cell_id(&coords),
            coords,
            scenario,
        });
    }
    // Base values that a sweep replaces in every cell are validated too, in a cell of their own
    // (every other axis at its first value), so a typo under a swept key is not silently ignored.
    let mut base_checks: Vec<(usize, Vec<(String, toml::Value)>)> = Vec::new();
    for (axis_idx, axis) in axes.iter().enumerate() {
        if written(&document, &axis.key) {
            let coords = axes
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != axis_idx)
                .map(|(_, a)| (a.key.clone(), a.values[0].clone()))
                .collect();
            base_checks.push((axis_idx, coords));
        }
    }
    for (axis_idx, coords) in base_checks {
        let key = &axes[axis_idx].key;
        base.load_cell(&coords, &mut cache).map_err(|mut e| {
            e.message = format!(
                "{} (in the base value of `{key}`, which the sweep replaces in every cell: fix it \
                 or remove it)",
                e.message
            );
            e
        })?;
    }
    let file = first.expect("cartesian always yields at least one cell");
    let n_runs = cells.len() as f64 * file.seeds.len() as f64;
    if n_runs > limits.max_runs {
        return Err(loader.error(
            loader.spans.locate("seeds"),
            Some("seeds"),
            format!(
                "{} cells x {} seeds = {n_runs} runs, above the ceiling of {} (raise it with \
                 `[limits] max_runs = ...`; docs/limits.md)",
                cells.len(),
                file.seeds.len(),
                limits.max_runs
            ),
        ));
    }
    let name_error = |e: validate::FieldError| {
        loader.error(loader.locate(&e.path, &overrides), Some(&e.path), e.message)
    };
    validate::file_name_component("name", &file.name).map_err(name_error)?;
    for (i, figure) in file.figures.iter().enumerate() {
        let field = format!("figure[{i}].name");
        validate::file_name_component(&field, &figure.name).map_err(name_error)?;
        if let Some(j) = file.figures[..i].iter().position(|f| f.name == figure.name) {
            return Err(name_error(validate::field_error(
                &field,
                format!(
                    "{:?} is also the name of figure[{j}]: their files would overwrite each \
                     other; give each figure a name of its own",
                    figure.name
                ),
            )));
        }
    }

    let axis_keys: Vec<&str> = axes.iter().map(|a| a.key.as_str()).collect();
    let require_axis = |key: &str, field: &str| -> Result<(), ScenarioError> {
        if axis_keys.contains(&key) {
            Ok(())
        } else {
            Err(loader.error(
                loader.spans.locate(field),
                Some(field),
                format!(
                    "`{key}` is not a sweep key (sweep keys: {})",
                    sweep::listed_keys(&axes)
                ),
            ))
        }
    };
    if let Some(report) = &file.report {
        require_axis(&report.compare, "report.compare")?;
        let axis = axes
            .iter()
            .find(|a| a.key == report.compare)
            .expect("checked above");
        if !axis.values.contains(&report.baseline) {
            return Err(loader.error(
                loader.spans.locate("report.baseline"),
                Some("report.baseline"),
                format!(
                    "`{}` is not among the swept values of `{}`",
                    sweep::display_value(&report.baseline),
                    report.compare
                ),
            ));
        }
    }
    figure::check(
        &file.figures,
        file.family,
        &written_axes,
        file.report.as_ref(),
    )
    .map_err(|e| loader.error(loader.spans.locate(&e.path), Some(&e.path), e.message))?;
    // A timeline or decode-curve figure draws what the runs record only when the file asks
    // for it.
    for (kind, key) in [
        (crate::family::FigureKind::Timeline, "timeline"),
        (crate::family::FigureKind::DecodeCurve, "decode_curves"),
    ] {
        if let Some(i) = file.figures.iter().position(|f| f.kind == kind)
            && document
                .get("output")
                .and_then(|o| o.get(key))
                .and_then(toml::Value::as_bool)
                != Some(true)
        {
            let field = format!("figure[{i}].kind");
            return Err(loader.error(
                loader.spans.locate(&field),
                Some(&field),
                format!(
                    "`{}` figures draw the runs' `details.{key}`, which a run records only \
                     with `[output] {key} = true`; set it",
                    kind.name()
                ),
            ));
        }
    }

    Ok(ScenarioPlan {
        path: path.to_path_buf(),
        family: file.family,
        name: file.name.clone(),
        description: file.description.clone(),
        seeds: file.seeds.clone(),
        axes,
        cells,
        report: file.report.clone(),
        figures: file.figures.clone(),
        only,
        document,
        limits,
        notes,
    })
}

/// What every cell of a plan is built from: the document after `--set`, and what errors need.
struct CellBase<'a> {
    loader: &'a Loader<'a>,
    document: &'a toml::Table,
    overrides: &'a [(String, Origin)],
    /// Swept keys whose values the command line chose: their errors point at `--set`.
    narrowed: &'a [String],
    base_dir: &'a Path,
    limits: &'a Limits,
}

impl CellBase<'_> {
    /// The cell at `coords` (a value per swept key): its common keys and its validated scenario,
    /// whose demands are within the limits.
    fn load_cell(
        &self,
        coords: &[(String, toml::Value)],
        cache: &mut LoadCache,
    ) -> Result<(CommonFile, Scenario), ScenarioError> {
        let loader = self.loader;
        let mut cell_doc = self.document.clone();
        let mut cell_overrides = self.overrides.to_vec();
        for (key, value) in coords {
            sweep::apply(&mut cell_doc, key, value.clone()).map_err(|m| {
                loader.error(
                    loader.locate_sweep_key(key),
                    Some(&format!("sweep.{key}")),
                    m,
                )
            })?;
            let origin = if self.narrowed.contains(key) {
                Origin::CommandLine
            } else {
                Origin::Sweep
            };
            cell_overrides.push((key.clone(), origin));
        }
        let (common_doc, family_doc): (toml::Table, toml::Table) = cell_doc
            .into_iter()
            .partition(|(key, _)| COMMON_KEYS.contains(&key.as_str()));
        if !common_doc.contains_key("family") {
            let families: Vec<&str> = crate::registry::families().map(FamilyId::name).collect();
            return Err(loader.error(
                loader.locate("name", &cell_overrides).or_top(),
                Some("family"),
                format!(
                    "is missing: every scenario names the simulator family that reads its \
                     tables, e.g. `family = \"serving\"` beside `name`; the families: {} \
                     (`expertsim list` describes them)",
                    families.join(", ")
                ),
            ));
        }
        let file: CommonFile = deserialize_table(loader, common_doc, &cell_overrides)?;
        if file.seeds.is_empty() {
            return Err(loader.error(
                loader.locate("seeds", &cell_overrides),
                Some("seeds"),
                "needs at least one seed",
            ));
        }
        let scenario = validate_family(
            loader,
            file.family,
            family_doc,
            &cell_overrides,
            self.base_dir,
            cache,
            coords,
        )?;
        self.limits
            .check(&scenario.demands())
            .map_err(|e| cell_field_error(loader, &cell_overrides, coords, e))?;
        Ok((file, scenario))
    }
}

/// Only the `[limits]` table, read before the sweep is expanded.
#[derive(serde::Deserialize)]
struct LimitsOnly {
    limits: Limits,
}

/// Whether dotted `key` is written in `document`, reaching into every table of an array of
/// tables (`replica.queue` is written when any `[[replica]]` has a `queue`).
fn written(document: &toml::Table, key: &str) -> bool {
    fn under(value: &toml::Value, parts: &[&str]) -> bool {
        match (parts.split_first(), value) {
            (None, _) => true,
            (Some((part, rest)), toml::Value::Table(table)) => {
                table.get(*part).is_some_and(|v| under(v, rest))
            }
            (Some(_), toml::Value::Array(items)) => items.iter().any(|item| under(item, parts)),
            (Some(_), _) => false,
        }
    }
    let parts: Vec<&str> = key.split('.').collect();
    document
        .get(parts[0])
        .is_some_and(|value| under(value, &parts[1..]))
}

/// A family's field error as a scenario error, located at the sweep key or `--set` that supplied
/// the field, with the sweep cell named.
fn cell_field_error(
    loader: &Loader<'_>,
    overrides: &[(String, Origin)],
    coords: &[(String, toml::Value)],
    e: validate::FieldError,
) -> ScenarioError {
    let location = loader.locate(&e.path, overrides);
    let mut message = e.message;
    if let Some((key, value)) = coords
        .iter()
        .find(|(k, _)| e.path == *k || e.path.starts_with(&format!("{k}.")))
    {
        message = format!(
            "{message} (in the sweep cell {key} = {})",
            sweep::display_value(value)
        );
    }
    loader.error(location, Some(&e.path), message)
}

/// Deserializes and validates the family tables of one cell, through the family's registered
/// implementation.
fn validate_family(
    loader: &Loader<'_>,
    family: FamilyId,
    family_doc: toml::Table,
    overrides: &[(String, Origin)],
    base_dir: &Path,
    cache: &mut LoadCache,
    coords: &[(String, toml::Value)],
) -> Result<Scenario, ScenarioError> {
    let family = family.registered();
    let config = family
        .deserialize(toml::Value::Table(family_doc))
        .map_err(|err| schema_error(loader, err, overrides))?;
    family
        .validate(config, base_dir, cache)
        .map_err(|e| cell_field_error(loader, overrides, coords, e))
}

/// Deserializes `table` (a part of the scenario document whose keys are top-level keys) into `T`,
/// turning a schema error into a one-line error with the field's file position.
fn deserialize_table<T: DeserializeOwned>(
    loader: &Loader<'_>,
    table: toml::Table,
    overrides: &[(String, Origin)],
) -> Result<T, ScenarioError> {
    serde_path_to_error::deserialize(toml::Value::Table(table))
        .map_err(|err| schema_error(loader, err, overrides))
}

/// A schema error as a one-line error with the field's file position.
fn schema_error(
    loader: &Loader<'_>,
    err: serde_path_to_error::Error<toml::de::Error>,
    overrides: &[(String, Origin)],
) -> ScenarioError {
    let field = err.path().to_string();
    let mut field = if field == "." { None } else { Some(field) };
    // A top-level key left out: name it, at the top of the file.
    let message = err.inner().message().to_string();
    if field.is_none()
        && let Some(missing) = message
            .strip_prefix("missing field `")
            .and_then(|rest| rest.split('`').next())
    {
        field = Some(missing.to_string());
        return loader.error(Location::top(), field.as_deref(), humanize(&message));
    }
    let location = field
        .as_deref()
        .map(|f| loader.locate(f, overrides))
        .unwrap_or(Location::Unknown);
    loader.error(
        location,
        field.as_deref(),
        humanize(err.into_inner().message()),
    )
}

/// A schema error in a user's words: serde names Rust types (`internally tagged enum
/// QueuePolicyConfig`, `struct ModelFile`, `i128`) where a scenario author thinks in TOML.
fn humanize(message: &str) -> String {
    let mut out = message.to_string();
    for (rust, toml) in [
        (
            "internally tagged enum",
            "a table with a `kind` key such as",
        ),
        ("expected struct", "expected a table"),
        ("expected a sequence", "expected a list"),
        ("expected a map", "expected a table"),
        (" as i128", ""),
        (
            "expected any valid TOML value",
            "expected an integer from -2^63 to 2^63-1",
        ),
        ("expected u64", "expected a non-negative integer"),
        ("expected u32", "expected a non-negative integer below 2^32"),
        ("expected usize", "expected a non-negative integer"),
        ("expected f64", "expected a number"),
        (
            "u64 value was too large",
            "integer too large: TOML integers run from -2^63 to 2^63-1 (9223372036854775807)",
        ),
    ] {
        out = out.replace(rust, toml);
    }
    // Drop the Rust type name that follows (the enum's or struct's name).
    for marker in ["such as ", "expected a table "] {
        if let Some(at) = out.find(marker) {
            let rest = &out[at + marker.len()..];
            let name_end = rest
                .find(|c: char| !c.is_alphanumeric() && c != '_')
                .unwrap_or(rest.len());
            if rest[..name_end].starts_with(|c: char| c.is_ascii_uppercase()) {
                let head = out[..at + marker.len()]
                    .trim_end_matches("such as ")
                    .trim_end();
                out = format!("{}{}", head.trim_end_matches(','), &rest[name_end..]);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
