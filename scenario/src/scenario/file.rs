//! The common part of every scenario file: its name, family, seeds, baseline report and
//! figures. Everything else in the file belongs to the family (`caps::config::CapsConfig`, ...),
//! and `[sweep]` is expanded before anything is deserialized.

use crate::family::FigureKind;
use serde::{Deserialize, Serialize};

/// The top-level keys every family shares; the loader deserializes them into `CommonFile` and
/// hands the rest of the document to the family's own schema.
pub const COMMON_KEYS: &[&str] = &[
    "name",
    "description",
    "family",
    "seeds",
    "report",
    "figure",
    "limits",
];

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommonFile {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// A registered family's name (`registry::FAMILIES`).
    #[serde(deserialize_with = "crate::registry::deserialize_family")]
    pub family: crate::family::FamilyId,
    /// One run per seed in every sweep cell.
    #[serde(default = "default_seeds")]
    pub seeds: Vec<u64>,
    pub report: Option<ReportFile>,
    #[serde(default, rename = "figure")]
    pub figures: Vec<FigureFile>,
    /// `[limits]`: ceilings on what the scenario may ask for (docs/limits.md).
    #[serde(default)]
    pub limits: crate::validate::limits::Limits,
}

fn default_seeds() -> Vec<u64> {
    vec![42]
}

/// `[report]`: compare every value of one sweep key against a baseline value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportFile {
    /// The sweep key whose values are compared (e.g. `scheduler.selector.kind`).
    pub compare: String,
    /// The baseline value of that key (e.g. `fcfs`).
    pub baseline: toml::Value,
}

/// `[[figure]]`: one figure of a run's results. `kind` says what it draws (see
/// `scenario::figure` for which keys each kind needs); the other keys name metrics and sweep keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FigureFile {
    /// File stem of the PNG and SVG.
    pub name: String,
    #[serde(default)]
    pub title: String,
    #[serde(default)]
    pub kind: FigureKind,
    /// Metrics (names from the family's metric table): one row of panels each for `metric` and
    /// `improvement`, the stack layers for `stacked`, (x, y) for `frontier`.
    #[serde(default)]
    pub metrics: Vec<String>,
    /// Sweep key on the x axis (`metric`, `improvement`, `stacked`).
    pub x: Option<String>,
    /// Sweep key(s) whose values become the lines, bars or point sets; several keys (`frontier`
    /// only) label a series by all their values. A key may reach into a table-valued sweep key
    /// (`routing.kind` when `routing` is swept as tables).
    #[serde(default, deserialize_with = "one_or_many")]
    pub series: Vec<String>,
    /// Sweep key whose values become side-by-side panels.
    pub panels: Option<String>,
    /// `frontier` only: sweep keys whose values are the operating points of one series.
    #[serde(default)]
    pub points: Vec<String>,
    /// Only the cells whose sweep key has this value (or one of these values).
    #[serde(default)]
    pub select: std::collections::BTreeMap<String, toml::Value>,
    #[serde(default)]
    pub log_y: bool,
    /// `metric` and `improvement`: bars, one group per x value, even for a numeric x (a
    /// power-of-two sweep that lines would bunch at the left).
    #[serde(default)]
    pub categorical_x: bool,
    /// The x axis's description (default: the sweep key's label and unit, e.g. "arrival rate
    /// (requests/s)" for `arrival.rate_per_s`).
    pub x_label: Option<String>,
    /// The y axis's description (`metric` figures; default: the metric's label and unit).
    pub y_label: Option<String>,
    /// `metric` only: under each metric's row, a row of its change against the `[report]`
    /// baseline in percent (positive = better), for lines too close to tell apart.
    #[serde(default)]
    pub with_improvement: bool,
}

/// Accepts `series = "key"` as well as `series = ["key", ...]`.
fn one_or_many<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Keys {
        One(String),
        Many(Vec<String>),
    }
    Ok(match Keys::deserialize(deserializer)? {
        Keys::One(key) => vec![key],
        Keys::Many(keys) => keys,
    })
}
