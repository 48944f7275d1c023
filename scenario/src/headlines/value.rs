//! Numbers of ours that prose states, as data: a `[[value]]` of a headlines file names a run, a
//! metric, the cells it reads (with the claim's selection: `cell`, `versus`, `over`, and the
//! values of an `over` axis it keeps, `within`), the
//! statistic and how its points combine (one, a range, a mean, each), and how the number is
//! written. `render` computes its text from a result document; `expertsim reproduce` writes it
//! into docs/reproduction.md's `<!-- value:<family>/<id> -->` spans and the claims'
//! explanations' `{value:<id>}` placeholders (docs/reproduction.md, "How a claim is judged").

use super::Statistic;
use super::evaluate::{
    SelectedPoints, Selection, metric_better, select_cells, select_points, statistic_of,
};
use crate::results::ResultsDocument;
use serde::Deserialize;

/// One number (or range) of ours that prose states.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Value {
    /// Names the value in spans (`<family>/<id>`) and placeholders (`{value:<id>}`).
    pub id: String,
    /// The `RunSpec::id` whose results it is computed from.
    pub run: String,
    pub metric: String,
    /// Sweep coordinates of the cell(s) it reads; with `over`, the other coordinates.
    #[serde(default)]
    pub cell: toml::Table,
    /// Coordinates of the compared cell (laid over `cell`'s, as in a claim); needs `statistic`.
    pub versus: Option<toml::Table>,
    /// The run whose results hold the compared cell, when it is not `run` (as a claim's).
    pub versus_run: Option<String>,
    /// The cell against `versus` (`improvement_pct`, `change_pct`, `difference`, `ratio`);
    /// absent: the cell's own mean.
    pub statistic: Option<Statistic>,
    /// Sweep keys it ranges over: one point per combination of their values.
    #[serde(default)]
    pub over: Vec<String>,
    /// The values an `over` axis keeps, by key (`{ "arrival.rate_per_s" = [2.0, 4.0] }`: the
    /// points at those rates only); an `over` axis not named keeps all its values.
    #[serde(default)]
    pub within: toml::Table,
    /// How the points become one text.
    #[serde(default)]
    pub combine: Combine,
    /// Each seed's value alone (the cell's against the compared cell's at the same seed) rather
    /// than the seed means: the points are every seed at every `over` combination, so `range`
    /// gives the spread over seeds.
    #[serde(default)]
    pub over_seeds: bool,
    /// The number as written: digits after the point, a factor (100 turns a share into a
    /// percentage), a leading `+` on positive numbers, thousands separators, and the unit
    /// appended as is (`"%"`, `" req/s"`, `"x"`).
    pub decimals: usize,
    pub scale: Option<f64>,
    #[serde(default)]
    pub sign: bool,
    #[serde(default)]
    pub grouping: bool,
    #[serde(default)]
    pub unit: String,
    /// The text the quick variant of the run renders, where its cells differ from the full
    /// run's (fewer seeds or requests); the claims test checks it instead of the document's.
    pub quick: Option<String>,
}

/// How the points of a value combine into its text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Combine {
    /// The lowest and highest point, `low-high` (`low to high` when signed or negative); one
    /// number when both ends are written alike.
    #[default]
    Range,
    /// The mean of the points.
    Mean,
    /// Every point, in sweep order, separated by commas.
    Each,
}

/// How a number is written.
#[derive(Clone, Debug, PartialEq)]
pub struct NumberFormat {
    pub decimals: usize,
    pub sign: bool,
    pub grouping: bool,
    pub unit: String,
}

impl NumberFormat {
    /// How a claim's statistic writes our value in the reproduction table.
    pub fn of_statistic(statistic: Statistic) -> NumberFormat {
        let (decimals, sign, unit) = match statistic {
            Statistic::Ratio => (2, false, "x"),
            Statistic::Difference => (2, true, ""),
            _ => (1, true, "%"),
        };
        NumberFormat {
            decimals,
            sign,
            grouping: false,
            unit: unit.into(),
        }
    }

    /// `value` without its unit (`-0.0` written as `0.0`).
    pub fn number(&self, value: f64) -> String {
        let value = value + 0.0;
        let digits = match self.sign {
            true => format!("{value:+.*}", self.decimals),
            false => format!("{value:.*}", self.decimals),
        };
        let digits = match digits.strip_prefix('-') {
            Some(rest) if rest.chars().all(|c| c == '0' || c == '.') => match self.sign {
                true => format!("+{rest}"),
                false => rest.to_string(),
            },
            _ => digits,
        };
        match self.grouping {
            true => group_thousands(&digits),
            false => digits,
        }
    }

    /// `value` with its unit.
    pub fn text(&self, value: f64) -> String {
        format!("{}{}", self.number(value), self.unit)
    }

    /// The range `low`..`high`: one number when both are written alike, `low-high` with the unit
    /// once when neither is signed nor negative, else `low to high`.
    pub fn range(&self, low: f64, high: f64) -> String {
        let (a, b) = (self.number(low), self.number(high));
        if a == b {
            return self.text(low);
        }
        match self.sign || a.starts_with('-') || b.starts_with('-') {
            false => format!("{a}-{b}{}", self.unit),
            true => format!("{} to {}", self.text(low), self.text(high)),
        }
    }
}

/// `digits` (an optional sign, an integer part, an optional fraction) with a comma between
/// every three digits of the integer part.
fn group_thousands(digits: &str) -> String {
    let (sign, rest) = match digits.strip_prefix(['+', '-']) {
        Some(rest) => (&digits[..1], rest),
        None => ("", digits),
    };
    let (integer, fraction) = match rest.find('.') {
        Some(point) => rest.split_at(point),
        None => (rest, ""),
    };
    let mut grouped = String::new();
    for (i, c) in integer.chars().enumerate() {
        if i > 0 && (integer.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    format!("{sign}{grouped}{fraction}")
}

/// A value's text and the coordinates of the cells it read.
#[derive(Clone, Debug, PartialEq)]
pub struct Rendered {
    pub text: String,
    /// Every cell the value read (the compared cells included), as `(sweep key, value)` lists.
    pub cells: Vec<Vec<(String, serde_json::Value)>>,
}

impl Value {
    fn format(&self) -> NumberFormat {
        NumberFormat {
            decimals: self.decimals,
            sign: self.sign,
            grouping: self.grouping,
            unit: self.unit.clone(),
        }
    }
}

/// Computes `value`'s text from `document` (the results of its run); a value with `versus_run`
/// needs `render_against`.
pub fn render(value: &Value, document: &ResultsDocument) -> Result<Rendered, String> {
    if let Some(run) = &value.versus_run {
        return Err(format!(
            "value {}: its compared cell is in run `{run}`: render it with that run's results",
            value.id
        ));
    }
    render_against(value, document, document)
}

/// Computes `value`'s text from `document` (the results of its run), its compared cells taken
/// from `versus_document` (the results of its `versus_run`, or `document` again).
pub fn render_against(
    value: &Value,
    document: &ResultsDocument,
    versus_document: &ResultsDocument,
) -> Result<Rendered, String> {
    let label = format!("value {}", value.id);
    let better = metric_better(document, &label, &value.metric)?;
    let selection = Selection {
        label: &label,
        metric: &value.metric,
        cell: &value.cell,
        versus: value.versus.as_ref(),
        over: &value.over,
        within: Some(&value.within),
    };
    let (points, cells) = match value.over_seeds {
        false => select_points(document, versus_document, &selection)?,
        true => seed_points(document, versus_document, &selection)?,
    };
    let scale = value.scale.unwrap_or(1.0);
    let numbers: Vec<f64> = points
        .iter()
        .map(|&(cell, versus)| match (value.statistic, versus) {
            (Some(statistic), Some(versus)) => statistic_of(statistic, better, cell, versus),
            _ => cell,
        })
        .map(|v| v * scale)
        .collect();
    if numbers.iter().any(|v| !v.is_finite()) {
        return Err(format!("{label}: a point is not a finite number"));
    }
    let format = value.format();
    let text = match value.combine {
        Combine::Range => {
            let low = numbers.iter().copied().fold(f64::INFINITY, f64::min);
            let high = numbers.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            format.range(low, high)
        }
        Combine::Mean => format.text(numbers.iter().sum::<f64>() / numbers.len() as f64),
        Combine::Each => numbers
            .iter()
            .map(|&v| format.text(v))
            .collect::<Vec<_>>()
            .join(", "),
    };
    Ok(Rendered { text, cells })
}

/// The selected cell's value of the metric at each seed of `document` and, with `versus`, the
/// compared cell's at the same seed, for every combination of the `over` axes.
fn seed_points(
    document: &ResultsDocument,
    versus_document: &ResultsDocument,
    selection: &Selection,
) -> Result<SelectedPoints, String> {
    let (pairs, read) = select_cells(document, versus_document, selection)?;
    let mut points = Vec::new();
    for (cell, versus) in pairs {
        for &seed in &document.seeds {
            let at_seed = |c: &crate::results::CellResult| {
                c.runs
                    .iter()
                    .find(|r| r.seed == seed)
                    .and_then(|r| r.scalars.get(selection.metric).copied())
                    .ok_or_else(|| {
                        format!(
                            "{}: cell {} has no {} at seed {seed}",
                            selection.label, c.id, selection.metric
                        )
                    })
            };
            points.push((at_seed(cell)?, versus.map(at_seed).transpose()?));
        }
    }
    Ok((points, read))
}
