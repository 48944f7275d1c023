//! A claim against a result document: find the claimed cell and the compared one (at each value
//! of the `over` axis), take both means of the metric, decide whether the claimed direction
//! holds, and format our value the way the claim's statistic asks.

use super::{Aggregate, Claim, Direction, Statistic};
use crate::metrics::Better;
use crate::results::{CellResult, ResultsDocument, improvement_pct};

/// The claim's cell and compared cell at one value of the `over` axis.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    pub cell: f64,
    pub versus: f64,
}

/// Whether our results show the claimed direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It holds (at every point, or on the mean).
    Holds,
    /// It does not hold and the claim explains why (`known_deviation`).
    KnownDeviation,
    /// It does not hold and nothing explains it.
    Fails,
    /// It holds although the claim is marked as a known deviation: the explanation is stale.
    HoldsDespiteDeviation,
}

/// Our side of a claim.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub points: Vec<Point>,
    /// Points where the direction holds (with `Aggregate::Mean`: 1 or 0 of 1).
    pub holding: usize,
    pub judged: usize,
    pub verdict: Verdict,
    /// Our value, formatted per the claim's statistic.
    pub ours: String,
}

/// Whether the coordinate key `key` of a claim is sweep key `axis` or reaches into it
/// (`queue.kind` into a swept `queue` table).
pub fn key_reaches(axis: &str, key: &str) -> bool {
    key == axis
        || key
            .strip_prefix(axis)
            .is_some_and(|rest| rest.starts_with('.'))
}

/// Evaluates `claim` on `document` (the results of the claim's run).
pub fn evaluate(claim: &Claim, document: &ResultsDocument) -> Result<Outcome, String> {
    let better = document
        .scenario
        .family
        .metrics()
        .iter()
        .find(|m| m.name == claim.metric)
        .map(|m| m.better)
        .ok_or_else(|| format!("claim {}: no metric {}", claim.id, claim.metric))?;
    let over_values: Vec<Option<toml::Value>> = match &claim.over {
        None => vec![None],
        Some(key) => {
            let axis = document
                .sweep
                .iter()
                .find(|a| &a.key == key)
                .ok_or_else(|| format!("claim {}: `{key}` is not a sweep key", claim.id))?;
            axis.values
                .iter()
                .map(|v| json_to_toml(v).map(Some))
                .collect::<Result<_, _>>()
                .map_err(|e| format!("claim {}: {e}", claim.id))?
        }
    };
    let mut points = Vec::new();
    for over_value in over_values {
        let mut wanted = claim.cell.clone();
        if let (Some(key), Some(value)) = (&claim.over, over_value) {
            wanted.insert(key.clone(), value);
        }
        let compared = replace_coords(document, &wanted, &claim.versus);
        let cell = find_cell(document, &wanted).map_err(|e| format!("claim {}: {e}", claim.id))?;
        let versus =
            find_cell(document, &compared).map_err(|e| format!("claim {}: {e}", claim.id))?;
        let mean = |c: &CellResult| {
            c.mean(&claim.metric)
                .ok_or_else(|| format!("claim {}: cell {} lacks {}", claim.id, c.id, claim.metric))
        };
        points.push(Point {
            cell: mean(cell)?,
            versus: mean(versus)?,
        });
    }
    let shows = |change: f64| match claim.direction {
        Direction::Lower => change < 0.0,
        Direction::Higher => change > 0.0,
    };
    let (holding, judged) = match claim.aggregate {
        Aggregate::Every => (
            points.iter().filter(|p| shows(p.cell - p.versus)).count(),
            points.len(),
        ),
        Aggregate::Mean => {
            let stats: Vec<f64> = points.iter().map(|p| statistic(claim, better, p)).collect();
            let mean = stats.iter().sum::<f64>() / stats.len() as f64;
            (
                usize::from(shows(raw_change_sign(claim.statistic, better, mean))),
                1,
            )
        }
    };
    let holds = holding == judged;
    let verdict = match (holds, claim.known_deviation.is_some()) {
        (true, false) => Verdict::Holds,
        (true, true) => Verdict::HoldsDespiteDeviation,
        (false, true) => Verdict::KnownDeviation,
        (false, false) => Verdict::Fails,
    };
    let ours = format_ours(claim, better, &points);
    Ok(Outcome {
        points,
        holding,
        judged,
        verdict,
        ours,
    })
}

/// `wanted` with `versus` laid over it: a key of `versus` replaces every key of `wanted` on the
/// same sweep axis (`routing.kind = "least_loaded"` drops `routing.slack`).
fn replace_coords(
    document: &ResultsDocument,
    wanted: &toml::Table,
    versus: &toml::Table,
) -> toml::Table {
    let axis_of = |key: &str| {
        document
            .sweep
            .iter()
            .find(|a| key_reaches(&a.key, key))
            .map(|a| a.key.clone())
    };
    let replaced: Vec<Option<String>> = versus.keys().map(|k| axis_of(k)).collect();
    let mut compared: toml::Table = wanted
        .iter()
        .filter(|(k, _)| {
            let axis = axis_of(k);
            axis.is_none() || !replaced.contains(&axis)
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    compared.extend(versus.clone());
    compared
}

/// The one cell of `document` whose coordinates match every entry of `wanted`.
fn find_cell<'a>(
    document: &'a ResultsDocument,
    wanted: &toml::Table,
) -> Result<&'a CellResult, String> {
    let matching: Vec<&CellResult> = document
        .cells
        .iter()
        .filter(|cell| {
            wanted
                .iter()
                .all(|(key, value)| coord_matches(cell, key, value))
        })
        .collect();
    match matching.as_slice() {
        [one] => Ok(one),
        [] => Err(format!(
            "no cell of {} has {}",
            document.scenario.name,
            show(wanted)
        )),
        many => Err(format!(
            "{} cells of {} have {} (name more coordinates): {}, ...",
            many.len(),
            document.scenario.name,
            show(wanted),
            many[0].id
        )),
    }
}

fn show(table: &toml::Table) -> String {
    table
        .iter()
        .map(|(k, v)| format!("{k} = {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether the cell's coordinate `key` (or the part of a table-valued coordinate it reaches
/// into) equals `value`, numbers compared as numbers.
fn coord_matches(cell: &CellResult, key: &str, value: &toml::Value) -> bool {
    let Ok(want) = serde_json::to_value(value) else {
        return false;
    };
    cell.coords.iter().any(|(axis, actual)| {
        if !key_reaches(axis, key) {
            return false;
        }
        let mut actual = actual;
        for part in key[axis.len()..].split('.').filter(|p| !p.is_empty()) {
            match actual.get(part) {
                Some(inner) => actual = inner,
                None => return false,
            }
        }
        json_equal(actual, &want)
    })
}

fn json_equal(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_equal(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

fn json_to_toml(value: &serde_json::Value) -> Result<toml::Value, String> {
    toml::Value::try_from(value).map_err(|e| format!("sweep value {value} has no TOML form: {e}"))
}

/// One point in the claim's statistic (`Values`: the relative change, for the mean verdict).
fn statistic(claim: &Claim, better: Better, p: &Point) -> f64 {
    match claim.statistic {
        Statistic::ImprovementPct => improvement_pct(p.versus, p.cell, better),
        Statistic::ChangePct => (p.cell - p.versus) / p.versus.abs() * 100.0,
        Statistic::Difference => p.cell - p.versus,
        Statistic::Ratio => p.versus / p.cell,
        Statistic::Values => (p.cell - p.versus) / p.versus.abs(),
    }
}

/// A value of the statistic turned into a number with the sign of `cell - versus`.
fn raw_change_sign(statistic: Statistic, better: Better, value: f64) -> f64 {
    match (statistic, better) {
        (Statistic::ImprovementPct, Better::Lower) => -value,
        (Statistic::ImprovementPct, Better::Higher) => value,
        (Statistic::ChangePct | Statistic::Difference | Statistic::Values, _) => value,
        (Statistic::Ratio, _) => 1.0 - value,
    }
}

/// Our value in the claim's statistic: one number, a range over the `over` axis, or its mean.
fn format_ours(claim: &Claim, better: Better, points: &[Point]) -> String {
    if claim.statistic == Statistic::Values {
        return points
            .iter()
            .map(|p| format!("{} -> {}", number(p.versus), number(p.cell)))
            .collect::<Vec<_>>()
            .join("; ");
    }
    let values: Vec<f64> = points.iter().map(|p| statistic(claim, better, p)).collect();
    let text = |v: f64| match claim.statistic {
        Statistic::Ratio => format!("{v:.2}x"),
        Statistic::Difference => format!("{:+.2}", v + 0.0),
        _ => format!("{:+.1}%", v + 0.0),
    };
    match (claim.aggregate, values.as_slice()) {
        (_, [one]) => text(*one),
        (Aggregate::Mean, _) => format!(
            "{} (mean of {})",
            text(values.iter().sum::<f64>() / values.len() as f64),
            values.len()
        ),
        (Aggregate::Every, _) => {
            let low = values.iter().copied().fold(f64::INFINITY, f64::min);
            let high = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            format!("{} to {}", text(low), text(high))
        }
    }
}

/// About four significant digits, whatever the magnitude.
fn number(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude >= 1000.0 || value.fract() == 0.0 {
        format!("{value:.0}")
    } else if magnitude >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.3}")
    }
}
