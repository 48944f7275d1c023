//! Scenario loading in two stages: the TOML text is checked against the file schema (the common
//! keys of `file::CommonFile`, then the tables of the family it names; unknown keys and wrong types
//! rejected with line and column), then each sweep cell is validated into a runnable `Scenario`.
//! Every error is one line naming the file, the line and the field, and nothing runs until every
//! cell has passed.

pub mod error;
pub mod figure;
pub mod file;
pub mod sweep;
pub mod validate;

pub use error::{Location, ScenarioError};
pub use file::{CommonFile, Family};

use error::SpanIndex;
use file::{COMMON_KEYS, FigureFile, ReportFile};
use serde::de::DeserializeOwned;
use std::path::{Path, PathBuf};
use sweep::SweepAxis;

/// One validated, runnable sweep cell of some family.
#[derive(Clone, Debug)]
pub enum Scenario {
    Caps(crate::caps::CapsScenario),
    Gem(crate::gem::GemScenario),
    Mosaic(crate::mosaic::MosaicScenario),
    Chimera(crate::chimera::ChimeraScenario),
    Expertweave(crate::expertweave::ExpertWeaveScenario),
}

impl Scenario {
    pub fn family(&self) -> Family {
        match self {
            Scenario::Caps(_) => Family::Caps,
            Scenario::Gem(_) => Family::Gem,
            Scenario::Mosaic(_) => Family::Mosaic,
            Scenario::Chimera(_) => Family::Chimera,
            Scenario::Expertweave(_) => Family::Expertweave,
        }
    }
    /// Whether the scenario asks for per-request records (`[output] per_request_csv`).
    pub fn per_request_csv(&self) -> bool {
        match self {
            Scenario::Caps(s) => s.per_request_csv,
            _ => false,
        }
    }
}

/// A loaded scenario: its sweep expanded into validated cells.
#[derive(Clone, Debug)]
pub struct ScenarioPlan {
    pub path: PathBuf,
    pub family: Family,
    pub name: String,
    pub description: String,
    pub seeds: Vec<u64>,
    pub axes: Vec<SweepAxis>,
    pub cells: Vec<Cell>,
    pub report: Option<ReportFile>,
    pub figures: Vec<FigureFile>,
    /// The scenario document after `--set` overrides and without `[sweep]`, for the result echo.
    pub document: toml::Table,
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

/// Every scenario file under `dir`, recursively, sorted: the `.toml` files other than the
/// claims files (`headlines.toml`) that sit beside the scenarios.
pub fn scenario_files(dir: &Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            found.extend(scenario_files(&path)?);
        } else if path.extension().is_some_and(|e| e == "toml")
            && path
                .file_name()
                .is_none_or(|n| n != crate::headlines::FILE_NAME)
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
    let text = std::fs::read_to_string(path).map_err(|e| ScenarioError {
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
        loader.error(Location::Unknown, None, e.message().to_string())
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

    // --set overrides: a swept key is narrowed to the given value(s); anything else is set.
    let mut overrides: Vec<(String, Origin)> = Vec::new();
    for argument in sets {
        let (key, value) =
            sweep::parse_set(argument).map_err(|m| loader.error(Location::CommandLine, None, m))?;
        if let Some(axis) = axes.iter_mut().find(|a| a.key == key) {
            axis.values = match value {
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
        } else {
            sweep::apply(&mut document, &key, value)
                .map_err(|m| loader.error(Location::CommandLine, Some(&key), m))?;
            overrides.push((key, Origin::CommandLine));
        }
    }

    let base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut cache = validate::LoadCache::default();
    let mut cells = Vec::new();
    let mut first: Option<CommonFile> = None;
    for coords in sweep::cartesian(&axes) {
        let mut cell_doc = document.clone();
        let mut cell_overrides = overrides.clone();
        for (key, value) in &coords {
            sweep::apply(&mut cell_doc, key, value.clone()).map_err(|m| {
                loader.error(
                    loader.locate_sweep_key(key),
                    Some(&format!("sweep.{key}")),
                    m,
                )
            })?;
            cell_overrides.push((key.clone(), Origin::Sweep));
        }
        let (common_doc, family_doc): (toml::Table, toml::Table) = cell_doc
            .into_iter()
            .partition(|(key, _)| COMMON_KEYS.contains(&key.as_str()));
        let file: CommonFile = deserialize_table(&loader, common_doc, &cell_overrides)?;
        if file.seeds.is_empty() {
            return Err(loader.error(
                loader.locate("seeds", &cell_overrides),
                Some("seeds"),
                "needs at least one seed",
            ));
        }
        let field_error = |e: validate::FieldError| {
            let location = loader.locate(&e.path, &cell_overrides);
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
        };
        let scenario = match file.family {
            Family::Caps => {
                let config: crate::caps::CapsConfig =
                    deserialize_table(&loader, family_doc, &cell_overrides)?;
                Scenario::Caps(
                    config
                        .validate(&base_dir, &mut cache)
                        .map_err(field_error)?,
                )
            }
            Family::Gem => {
                let config: crate::gem::GemConfig =
                    deserialize_table(&loader, family_doc, &cell_overrides)?;
                Scenario::Gem(config.validate(&base_dir).map_err(field_error)?)
            }
            Family::Mosaic => {
                let config: crate::mosaic::MosaicConfig =
                    deserialize_table(&loader, family_doc, &cell_overrides)?;
                Scenario::Mosaic(config.validate(&base_dir).map_err(field_error)?)
            }
            Family::Chimera => {
                let config: crate::chimera::ChimeraConfig =
                    deserialize_table(&loader, family_doc, &cell_overrides)?;
                Scenario::Chimera(config.validate(&base_dir).map_err(field_error)?)
            }
            Family::Expertweave => {
                let config: crate::expertweave::ExpertWeaveConfig =
                    deserialize_table(&loader, family_doc, &cell_overrides)?;
                Scenario::Expertweave(config.validate(&base_dir).map_err(field_error)?)
            }
        };
        if let Some(first) = &first
            && first.family != file.family
        {
            return Err(loader.error(
                loader.locate("family", &cell_overrides),
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
    let file = first.expect("cartesian always yields at least one cell");

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
                    if axis_keys.is_empty() {
                        "none".to_string()
                    } else {
                        axis_keys.join(", ")
                    }
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
    figure::check(&file.figures, file.family, &axes, file.report.as_ref())
        .map_err(|e| loader.error(loader.spans.locate(&e.path), Some(&e.path), e.message))?;

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
        document,
    })
}

/// Deserializes `table` (a part of the scenario document whose keys are top-level keys) into `T`,
/// turning a schema error into a one-line error with the field's file position.
fn deserialize_table<T: DeserializeOwned>(
    loader: &Loader<'_>,
    table: toml::Table,
    overrides: &[(String, Origin)],
) -> Result<T, ScenarioError> {
    serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|err| {
        let field = err.path().to_string();
        let field = if field == "." { None } else { Some(field) };
        let location = field
            .as_deref()
            .map(|f| loader.locate(f, overrides))
            .unwrap_or(Location::Unknown);
        loader.error(
            location,
            field.as_deref(),
            err.into_inner().message().to_string(),
        )
    })
}
