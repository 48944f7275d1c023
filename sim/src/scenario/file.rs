//! The common part of every scenario file: its name, family, seeds, baseline report and
//! figures. Everything else in the file belongs to the family (`caps::config::CapsConfig`, ...),
//! and `[sweep]` is expanded before anything is deserialized.

use serde::{Deserialize, Serialize};

/// The top-level keys every family shares; the loader deserializes them into `CommonFile` and
/// hands the rest of the document to the family's own schema.
pub const COMMON_KEYS: &[&str] = &["name", "description", "family", "seeds", "report", "figure"];

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommonFile {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub family: Family,
    /// One run per seed in every sweep cell.
    #[serde(default = "default_seeds")]
    pub seeds: Vec<u64>,
    pub report: Option<ReportFile>,
    #[serde(default, rename = "figure")]
    pub figures: Vec<FigureFile>,
}

fn default_seeds() -> Vec<u64> {
    vec![42]
}

/// Which family of serving system a scenario describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// CAPS batch selection on one MoE GPU (caps.txt).
    Caps,
    /// GEM expert mapping under GPU variability (gem.txt).
    Gem,
    /// MOSAIC mixture-of-agents placement and gating (mosaic.txt).
    Mosaic,
    /// Chimera multi-agent workflow queueing and routing (chimera.txt).
    Chimera,
    /// ExpertWeave multi-adapter MoE serving (expertweave.txt).
    Expertweave,
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

/// `[[figure]]`: one figure of scalar metrics against a sweep key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FigureFile {
    /// File stem of the PNG and SVG.
    pub name: String,
    #[serde(default)]
    pub title: String,
    /// One row of panels per metric (names from the family's metric table).
    pub metrics: Vec<String>,
    /// Sweep key on the x axis.
    pub x: String,
    /// Sweep key whose values become the lines (or bars); without it, one per metric.
    pub series: Option<String>,
    /// Sweep key whose values become side-by-side panels.
    pub panels: Option<String>,
    #[serde(default)]
    pub log_y: bool,
}

impl Family {
    /// The scalar metrics the family reports.
    pub fn metrics(self) -> &'static [crate::metrics::MetricInfo] {
        match self {
            Family::Caps => crate::caps::METRICS,
            Family::Gem => crate::gem::METRICS,
            Family::Mosaic => crate::mosaic::METRICS,
            Family::Chimera => crate::chimera::METRICS,
            Family::Expertweave => crate::expertweave::METRICS,
        }
    }
    /// The metrics `expertsim run` prints per cell.
    pub fn headline(self) -> &'static [&'static str] {
        match self {
            Family::Caps => crate::caps::HEADLINE,
            Family::Gem => crate::gem::HEADLINE,
            Family::Mosaic => crate::mosaic::HEADLINE,
            Family::Chimera => crate::chimera::HEADLINE,
            Family::Expertweave => crate::expertweave::HEADLINE,
        }
    }
    /// The metrics `expertsim run` prints as change against the baseline.
    pub fn headline_improvements(self) -> &'static [&'static str] {
        match self {
            Family::Caps => crate::caps::HEADLINE_IMPROVEMENTS,
            Family::Gem => crate::gem::HEADLINE_IMPROVEMENTS,
            Family::Mosaic => crate::mosaic::HEADLINE_IMPROVEMENTS,
            Family::Chimera => crate::chimera::HEADLINE_IMPROVEMENTS,
            Family::Expertweave => crate::expertweave::HEADLINE_IMPROVEMENTS,
        }
    }
}
