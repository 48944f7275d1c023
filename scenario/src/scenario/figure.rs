//! Validation of the `[[figure]]` tables against the family and the sweep: which keys each figure
//! kind needs or does not use, that named metrics exist and named keys are swept, and that
//! `select` values are among the swept ones.

use super::file::{FigureFile, ReportFile};
use super::sweep::{SweepAxis, display_value, listed_keys, lookup};
use crate::family::{FamilyId, FigureKind};
use crate::validate::{FieldError, field_error};

/// Checks every figure; the first problem is returned with its field path (`figure[2].kind`).
pub fn check(
    figures: &[FigureFile],
    family: FamilyId,
    axes: &[SweepAxis],
    report: Option<&ReportFile>,
) -> Result<(), FieldError> {
    for (i, figure) in figures.iter().enumerate() {
        check_one(&format!("figure[{i}]"), figure, family, axes, report)?;
    }
    Ok(())
}

/// Whether `key` names a sweep key, or a field inside a table-valued sweep key (`routing.kind`
/// when `routing` is swept as tables that all have `kind`).
pub fn is_swept(key: &str, axes: &[SweepAxis]) -> bool {
    axes.iter().any(|axis| {
        axis.key == key
            || key
                .strip_prefix(axis.key.as_str())
                .and_then(|rest| rest.strip_prefix('.'))
                .is_some_and(|inner| axis.values.iter().all(|v| lookup(v, inner).is_some()))
    })
}

/// The values a `select` entry names: `wanted` itself when it is one of the swept values (a
/// swept list such as a model combination), else the entries of a list, else `wanted`.
pub fn selected_values<'w, V>(swept: &[V], wanted: &'w V) -> Vec<&'w V>
where
    V: PartialEq + AsList,
{
    if swept.contains(wanted) {
        return vec![wanted];
    }
    match wanted.as_list() {
        Some(list) => list.iter().collect(),
        None => vec![wanted],
    }
}

/// A value that may be a list (TOML or JSON), for [`selected_values`].
pub trait AsList: Sized {
    fn as_list(&self) -> Option<&[Self]>;
}

impl AsList for toml::Value {
    fn as_list(&self) -> Option<&[Self]> {
        self.as_array().map(Vec::as_slice)
    }
}

impl AsList for serde_json::Value {
    fn as_list(&self) -> Option<&[Self]> {
        self.as_array().map(Vec::as_slice)
    }
}

fn check_one(
    at: &str,
    figure: &FigureFile,
    family: FamilyId,
    axes: &[SweepAxis],
    report: Option<&ReportFile>,
) -> Result<(), FieldError> {
    let kind = figure.kind;
    let unused = |field: &str| {
        field_error(
            &format!("{at}.{field}"),
            format!("is not used by figures of kind `{}`", kind.name()),
        )
    };
    // A kind that some families own (`Family::FIGURE_KINDS`) draws only their results.
    let owners: Vec<_> = crate::registry::families()
        .filter(|f| f.figure_kinds().contains(&kind))
        .collect();
    if !owners.is_empty() && !owners.contains(&family) {
        return Err(field_error(
            &format!("{at}.kind"),
            format!(
                "`{}` figures need a {} scenario, this one is {family}",
                kind.name(),
                owners
                    .iter()
                    .map(|f| f.name())
                    .collect::<Vec<_>>()
                    .join(" or ")
            ),
        ));
    }
    let require_key = |key: &str, field: &str| {
        if is_swept(key, axes) {
            Ok(())
        } else {
            Err(field_error(
                &format!("{at}.{field}"),
                format!(
                    "`{key}` is not a sweep key (sweep keys: {})",
                    listed_keys(axes)
                ),
            ))
        }
    };

    // Which fields the kind takes.
    let takes_metrics = matches!(
        kind,
        FigureKind::Metric | FigureKind::Improvement | FigureKind::Stacked | FigureKind::Frontier
    );
    let takes_x = matches!(
        kind,
        FigureKind::Metric | FigureKind::Improvement | FigureKind::Stacked
    );
    let takes_series = takes_metrics || kind == FigureKind::ExpertweaveMemory;
    if !takes_metrics && !figure.metrics.is_empty() {
        return Err(unused("metrics"));
    }
    if !takes_x && figure.x.is_some() {
        return Err(unused("x"));
    }
    if !takes_series && !figure.series.is_empty() {
        return Err(unused("series"));
    }
    if kind != FigureKind::Frontier && !figure.points.is_empty() {
        return Err(unused("points"));
    }
    if figure.categorical_x && !matches!(kind, FigureKind::Metric | FigureKind::Improvement) {
        return Err(unused("categorical_x"));
    }
    if kind == FigureKind::Frontier && figure.log_y {
        return Err(unused("log_y"));
    }
    if !takes_x && figure.x_label.is_some() {
        return Err(unused("x_label"));
    }
    if !matches!(kind, FigureKind::Metric | FigureKind::Stacked) && figure.y_label.is_some() {
        return Err(unused("y_label"));
    }
    if kind != FigureKind::Metric && figure.with_improvement {
        return Err(unused("with_improvement"));
    }
    if figure.with_improvement && report.is_none() {
        return Err(field_error(
            &format!("{at}.with_improvement"),
            "needs a [report] table (the baseline the change is against)",
        ));
    }

    // Required fields.
    if takes_metrics && figure.metrics.is_empty() {
        return Err(field_error(
            &format!("{at}.metrics"),
            "must name at least one metric",
        ));
    }
    if kind == FigureKind::Frontier && figure.metrics.len() != 2 {
        return Err(field_error(
            &format!("{at}.metrics"),
            format!(
                "a frontier needs exactly two metrics (x, then y), got {}",
                figure.metrics.len()
            ),
        ));
    }
    if takes_x {
        match &figure.x {
            Some(x) => require_key(x, "x")?,
            None => {
                return Err(field_error(
                    &format!("{at}.x"),
                    format!("is required by figures of kind `{}`", kind.name()),
                ));
            }
        }
    }
    if kind != FigureKind::Frontier && figure.series.len() > 1 {
        return Err(field_error(
            &format!("{at}.series"),
            format!(
                "figures of kind `{}` take one series key, got {}",
                kind.name(),
                figure.series.len()
            ),
        ));
    }
    if kind == FigureKind::Improvement && report.is_none() {
        return Err(field_error(
            &format!("{at}.kind"),
            "`improvement` figures need a [report] table (the baseline they compare against)",
        ));
    }

    for (j, metric) in figure.metrics.iter().enumerate() {
        if !family.metrics().iter().any(|m| m.name == metric) {
            let known: Vec<&str> = family.metrics().iter().map(|m| m.name).collect();
            return Err(field_error(
                &format!("{at}.metrics[{j}]"),
                format!(
                    "unknown metric `{metric}`; known metrics: {}",
                    known.join(", ")
                ),
            ));
        }
    }
    for (j, key) in figure.series.iter().enumerate() {
        let field = if figure.series.len() == 1 {
            "series".to_string()
        } else {
            format!("series[{j}]")
        };
        require_key(key, &field)?;
    }
    if let Some(panels) = &figure.panels {
        require_key(panels, "panels")?;
    }
    for (j, key) in figure.points.iter().enumerate() {
        require_key(key, &format!("points[{j}]"))?;
    }
    for (key, wanted) in &figure.select {
        let field = format!("select.{key}");
        let Some(axis) = axes.iter().find(|a| &a.key == key) else {
            return Err(field_error(
                &format!("{at}.{field}"),
                format!(
                    "`{key}` is not a sweep key (sweep keys: {})",
                    listed_keys(axes)
                ),
            ));
        };
        let values = selected_values(&axis.values, wanted);
        if values.is_empty() {
            return Err(field_error(
                &format!("{at}.{field}"),
                "must name at least one value",
            ));
        }
        for value in values {
            if !axis.values.contains(value) {
                return Err(field_error(
                    &format!("{at}.{field}"),
                    format!(
                        "`{}` is not among the swept values of `{key}`",
                        display_value(value)
                    ),
                ));
            }
        }
    }
    Ok(())
}
