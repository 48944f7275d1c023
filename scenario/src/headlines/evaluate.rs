//! A claim against a result document: find the claimed cell and the compared one (at each value
//! of the `over` axis), take both means of the metric, decide whether the claimed direction
//! holds, measure our value against the paper's (ratio and distance from its value or range),
//! give the verdict of the rule in docs/reproduction.md, and format our value the way the
//! claim's statistic asks.

use super::value::NumberFormat;
use super::{Aggregate, Claim, Direction, PaperNumber, PaperValue, Statistic};
use crate::metrics::Better;
use crate::results::{CellResult, ResultsDocument, improvement_pct};

/// The claim's cell and compared cell at one value of the `over` axis.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    pub cell: f64,
    pub versus: f64,
}

/// The verdict of a claim (the rule of docs/reproduction.md, "How a claim is judged").
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The direction holds and ours is within `RELATIVE_TOLERANCE` (or, for a statistic in
    /// percent or points, `ABSOLUTE_TOLERANCE_POINTS`) of the paper's value or range at every
    /// judged point; or the paper states only the direction and it holds.
    Reproduced,
    /// The direction holds, the magnitude does not.
    DirectionOnly,
    /// The direction does not hold.
    NotReproduced,
    /// The claim's number is one of our inputs (`by_construction`): not a result.
    Input,
}

impl Verdict {
    pub fn text(self) -> &'static str {
        match self {
            Verdict::Reproduced => "reproduced",
            Verdict::DirectionOnly => "direction only",
            Verdict::NotReproduced => "not reproduced",
            Verdict::Input => "input",
        }
    }
}

/// A relative distance from the paper's value or range within which the magnitude counts as
/// reproduced.
pub const RELATIVE_TOLERANCE: f64 = 0.25;
/// An absolute distance, for statistics in percent or percentage points, within which the
/// magnitude counts as reproduced.
pub const ABSOLUTE_TOLERANCE_POINTS: f64 = 2.0;

/// Our value beside the paper's.
#[derive(Clone, Debug, PartialEq)]
pub struct Magnitude {
    /// Ours / the nearest point of the paper's value or range, per judged point (1 inside it).
    pub ratios: Vec<f64>,
    /// The largest distance of a judged point from the paper's value or range, in the
    /// statistic's unit, and relative to the nearest bound.
    pub worst_distance: f64,
    pub worst_relative: f64,
    /// Every judged point within the tolerance.
    pub within: bool,
    /// How many judged points are within the tolerance.
    pub within_points: usize,
}

/// Our side of a claim.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub points: Vec<Point>,
    /// Points where the direction holds (with `Aggregate::Mean`: 1 or 0 of 1).
    pub holding: usize,
    pub judged: usize,
    /// The verdict of the rule.
    pub verdict: Verdict,
    /// The verdict the claim expects (`expect`, `Input` when by construction, else
    /// `Reproduced`).
    pub expected: Verdict,
    /// The magnitude against the paper's number, when the paper gives one.
    pub magnitude: Option<Magnitude>,
    /// Our value, formatted per the claim's statistic.
    pub ours: String,
    /// The claim judged on each seed of its run alone, in the run's seed order.
    pub seeds: Vec<SeedOutcome>,
}

/// A claim judged on one seed's values alone.
#[derive(Clone, Debug, PartialEq)]
pub struct SeedOutcome {
    pub seed: u64,
    pub verdict: Verdict,
    /// The judged values in the claim's statistic (for `values`: the claimed cell's), one per
    /// judged point.
    pub values: Vec<f64>,
}

impl Outcome {
    /// Whether the verdict is the one the claim expects.
    pub fn as_expected(&self) -> bool {
        self.verdict == self.expected
    }

    /// How many seeds, judged alone, give the verdict of the seed means, of how many.
    pub fn seed_agreement(&self) -> (usize, usize) {
        let agreeing = self
            .seeds
            .iter()
            .filter(|s| s.verdict == self.verdict)
            .count();
        (agreeing, self.seeds.len())
    }

    /// Whether the verdict is stable over seeds: at least `SEEDS_FOR_STABILITY` seeds, of which
    /// at least `STABLE_SEEDS` in `SEEDS_FOR_STABILITY` give the verdict of the means.
    pub fn seed_stable(&self) -> bool {
        let (agreeing, n) = self.seed_agreement();
        n >= SEEDS_FOR_STABILITY && agreeing * SEEDS_FOR_STABILITY >= STABLE_SEEDS * n
    }

    /// Why `claim`'s word on its seed stability disagrees with this outcome, for every family
    /// alike: unstable (`seed_stable` false) without a `seed_sensitive` reason, or stable with
    /// one. `None` when the two agree.
    pub fn stability_problem(&self, claim: &Claim) -> Option<String> {
        let (agreeing, seeds) = self.seed_agreement();
        match (self.seed_stable(), &claim.seed_sensitive) {
            (false, None) => Some(format!(
                "{agreeing} of {seeds} seeds give its verdict ({}), fewer than {STABLE_SEEDS} of \
                 {SEEDS_FOR_STABILITY}: run more seeds or say why it is seed-sensitive \
                 (`seed_sensitive`)",
                self.verdict.text(),
            )),
            (true, Some(_)) => Some(format!(
                "{agreeing} of {seeds} seeds give its verdict: it is stable, delete `seed_sensitive`"
            )),
            _ => None,
        }
    }

    /// The spread of our value over seeds: each judged point's lowest to highest value over the
    /// seeds, in the claim's statistic, points separated by `; `.
    pub fn seed_spread_text(&self, claim: &Claim) -> String {
        let Some(first) = self.seeds.first() else {
            return "n/a".into();
        };
        (0..first.values.len())
            .map(|i| {
                let values = self.seeds.iter().filter_map(|s| s.values.get(i).copied());
                let (low, high) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| {
                    (l.min(v), h.max(v))
                });
                if !low.is_finite() || !high.is_finite() {
                    return "n/a".to_string();
                }
                match claim.statistic {
                    Statistic::Values => match number(low) == number(high) {
                        true => number(low),
                        false => format!("{} to {}", number(low), number(high)),
                    },
                    statistic => NumberFormat::of_statistic(statistic).range(low, high),
                }
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// `ours / paper` as text: one ratio or the range of the per-point ratios.
    pub fn ratio_text(&self) -> String {
        let Some(m) = &self.magnitude else {
            return "n/a".into();
        };
        let low = m.ratios.iter().copied().fold(f64::INFINITY, f64::min);
        let high = m.ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if !low.is_finite() || !high.is_finite() {
            return "n/a".into();
        }
        match (low - high).abs() < 0.005 {
            true => format!("{low:.2}"),
            false => format!("{low:.2} to {high:.2}"),
        }
    }

    /// The worst point's distance from the paper's value or range as text.
    pub fn distance_text(&self, claim: &Claim) -> String {
        let Some(m) = &self.magnitude else {
            return "n/a".into();
        };
        if m.worst_distance == 0.0 {
            return "inside".into();
        }
        let unit = match claim.statistic {
            Statistic::ImprovementPct | Statistic::ChangePct => " pts",
            Statistic::Ratio => "x",
            _ => "",
        };
        match m.worst_relative.is_finite() {
            true => format!(
                "{}{unit} ({:.0}%)",
                trim_number(m.worst_distance),
                m.worst_relative * 100.0
            ),
            false => format!("{}{unit}", trim_number(m.worst_distance)),
        }
    }
}

fn trim_number(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// Whether the coordinate key `key` of a claim is sweep key `axis` or reaches into it
/// (`queue.kind` into a swept `queue` table).
pub fn key_reaches(axis: &str, key: &str) -> bool {
    key == axis
        || key
            .strip_prefix(axis)
            .is_some_and(|rest| rest.starts_with('.'))
}

/// The sweep axis `key` of `document`, which `label` (a claim or value) names.
fn sweep_axis<'a>(
    document: &'a ResultsDocument,
    label: &str,
    key: &str,
) -> Result<&'a crate::results::SweepAxisEcho, String> {
    document
        .sweep
        .iter()
        .find(|a| a.key == key)
        .ok_or_else(|| format!("{label}: `{key}` is not a sweep key"))
}

/// Which cells a claim or a value reads: the cell's coordinates, the compared cell's (laid over
/// the cell's), and the sweep axes it ranges over.
pub(super) struct Selection<'a> {
    /// `claim <id>` or `value <id>`, for messages.
    pub label: &'a str,
    pub metric: &'a str,
    pub cell: &'a toml::Table,
    pub versus: Option<&'a toml::Table>,
    pub over: &'a [String],
    /// The values of an `over` axis the selection keeps (a value's `within`); an axis not named
    /// keeps all its values.
    pub within: Option<&'a toml::Table>,
}

/// Whether lower or higher is better for `metric`, one of the document's family's metrics.
pub(super) fn metric_better(
    document: &ResultsDocument,
    label: &str,
    metric: &str,
) -> Result<Better, String> {
    document
        .scenario
        .family
        .metrics()
        .iter()
        .find(|m| m.name == metric)
        .map(|m| m.better)
        .ok_or_else(|| format!("{label}: no metric {metric}"))
}

/// A cell's coordinates as its result records them.
pub(super) type Coords = Vec<(String, serde_json::Value)>;

/// Per point, the selected cell's mean and the compared cell's; and every cell read.
pub(super) type SelectedPoints = (Vec<(f64, Option<f64>)>, Vec<Coords>);

/// Per point, the selected cell and the compared one; and every cell read.
pub(super) type SelectedCells<'a> = (Vec<(&'a CellResult, Option<&'a CellResult>)>, Vec<Coords>);

/// The selected cell's mean of the metric and, with `versus`, the compared cell's, at every
/// combination of the `over` axes' values (the first axis varying slowest, each in sweep order);
/// and the coordinates of every cell read.
pub(super) fn select_points(
    document: &ResultsDocument,
    versus_document: &ResultsDocument,
    selection: &Selection,
) -> Result<SelectedPoints, String> {
    let (pairs, read) = select_cells(document, versus_document, selection)?;
    let mean = |c: &CellResult| {
        c.mean(selection.metric).ok_or_else(|| {
            format!(
                "{}: cell {} lacks {}",
                selection.label, c.id, selection.metric
            )
        })
    };
    let points = pairs
        .into_iter()
        .map(|(cell, versus)| Ok((mean(cell)?, versus.map(mean).transpose()?)))
        .collect::<Result<_, String>>()?;
    Ok((points, read))
}

/// The selected cell and, with `versus`, the compared cell of `versus_document` (the same
/// document, or the run `versus_run` names), at every combination of the `over` axes' values;
/// and the coordinates of every cell read.
pub(super) fn select_cells<'a>(
    document: &'a ResultsDocument,
    versus_document: &'a ResultsDocument,
    selection: &Selection,
) -> Result<SelectedCells<'a>, String> {
    let label = selection.label;
    let mut combinations: Vec<toml::Table> = vec![selection.cell.clone()];
    for key in selection.over {
        let axis = &sweep_axis(document, label, key)?.values;
        let kept: Vec<&serde_json::Value> = match selection.within.and_then(|w| w.get(key)) {
            None => axis.iter().collect(),
            Some(wanted) => {
                let wanted = wanted.as_array().map(Vec::as_slice).unwrap_or_default();
                let mut kept = Vec::new();
                for want in wanted {
                    let want = serde_json::to_value(want).map_err(|e| format!("{label}: {e}"))?;
                    let found = axis.iter().find(|v| json_equal(v, &want)).ok_or_else(|| {
                        format!("{label}: within `{key}`: {want} is not a value of the axis")
                    })?;
                    kept.push(found);
                }
                // In the axis's order, whatever order `within` lists them in.
                axis.iter()
                    .filter(|v| kept.iter().any(|k| std::ptr::eq(*k, *v)))
                    .collect()
            }
        };
        let values = kept
            .into_iter()
            .map(json_to_toml)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("{label}: {e}"))?;
        combinations = combinations
            .iter()
            .flat_map(|wanted| {
                values.iter().map(move |value| {
                    let mut wanted = wanted.clone();
                    wanted.insert(key.clone(), value.clone());
                    wanted
                })
            })
            .collect();
    }
    let versus_axes: Vec<&str> = versus_document
        .sweep
        .iter()
        .map(|a| a.key.as_str())
        .collect();
    let mut pairs = Vec::new();
    let mut read = Vec::new();
    for wanted in &combinations {
        let cell = find_cell(document, wanted).map_err(|e| format!("{label}: {e}"))?;
        read.push(cell.coords.clone());
        let versus = match selection.versus {
            None => None,
            Some(versus) => {
                let compared = replace_coords(&versus_axes, wanted, versus);
                let found =
                    find_cell(versus_document, &compared).map_err(|e| format!("{label}: {e}"))?;
                read.push(found.coords.clone());
                Some(found)
            }
        };
        pairs.push((cell, versus));
    }
    Ok((pairs, read))
}

/// The seeds of a claim's verdict that must agree with the verdict on the seed means: at least
/// `STABLE_SEEDS` of `SEEDS_FOR_STABILITY` (the same share of more seeds).
pub const STABLE_SEEDS: usize = 4;
/// The fewest seeds a full reproduction run judges a claim's stability on.
pub const SEEDS_FOR_STABILITY: usize = 5;

/// Evaluates `claim` on `document` (the results of the claim's run); a claim with `versus_run`
/// needs `evaluate_against`.
pub fn evaluate(claim: &Claim, document: &ResultsDocument) -> Result<Outcome, String> {
    if let Some(run) = &claim.versus_run {
        return Err(format!(
            "claim {}: its compared cell is in run `{run}`: evaluate it with that run's results",
            claim.id
        ));
    }
    evaluate_against(claim, document, document)
}

/// Evaluates `claim` on `document` (the results of the claim's run), its compared cells taken
/// from `versus_document` (the results of its `versus_run`, or `document` again): on the seed
/// means, and on each seed of `document` alone.
pub fn evaluate_against(
    claim: &Claim,
    document: &ResultsDocument,
    versus_document: &ResultsDocument,
) -> Result<Outcome, String> {
    let label = format!("claim {}", claim.id);
    let better = metric_better(document, &label, &claim.metric)?;
    let over: Vec<String> = claim.over.iter().chain(&claim.pool).cloned().collect();
    let (pairs, _) = select_cells(
        document,
        versus_document,
        &Selection {
            label: &label,
            metric: &claim.metric,
            cell: &claim.cell,
            versus: Some(&claim.versus),
            over: &over,
            within: None,
        },
    )?;
    let pairs: Vec<(&CellResult, &CellResult)> = pairs
        .into_iter()
        .map(|(cell, versus)| (cell, versus.expect("a claim always has `versus`")))
        .collect();
    let mean = |c: &CellResult| {
        c.mean(&claim.metric)
            .ok_or_else(|| format!("{label}: cell {} lacks {}", c.id, claim.metric))
    };
    let points = pairs
        .iter()
        .map(|(cell, versus)| {
            Ok(Point {
                cell: mean(cell)?,
                versus: mean(versus)?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let judgement = judge(claim, better, &points, document)?;
    let mut seeds = Vec::new();
    for &seed in &document.seeds {
        let of_seed = |c: &CellResult| {
            c.runs
                .iter()
                .find(|r| r.seed == seed)
                .and_then(|r| r.scalars.get(&claim.metric).copied())
                .ok_or_else(|| {
                    format!(
                        "{label}: cell {} has no {} at seed {seed}",
                        c.id, claim.metric
                    )
                })
        };
        let seed_points = pairs
            .iter()
            .map(|(cell, versus)| {
                Ok(Point {
                    cell: of_seed(cell)?,
                    versus: of_seed(versus)?,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        let seed_judgement = judge(claim, better, &seed_points, document)?;
        seeds.push(SeedOutcome {
            seed,
            verdict: seed_judgement.verdict,
            values: judged_values(claim, better, &seed_points),
        });
    }
    let expected = match &claim.by_construction {
        Some(_) => Verdict::Input,
        None => claim.expect.unwrap_or(Verdict::Reproduced),
    };
    let ours = format_ours(claim, better, &points);
    Ok(Outcome {
        points,
        holding: judgement.holding,
        judged: judgement.judged,
        verdict: judgement.verdict,
        expected,
        magnitude: judgement.magnitude,
        ours,
        seeds,
    })
}

/// The direction and magnitude of a claim on one set of points, and its verdict.
struct Judgement {
    holding: usize,
    judged: usize,
    magnitude: Option<Magnitude>,
    verdict: Verdict,
}

fn judge(
    claim: &Claim,
    better: Better,
    points: &[Point],
    document: &ResultsDocument,
) -> Result<Judgement, String> {
    let shows = |change: f64| match claim.direction {
        Direction::Lower => change < 0.0,
        Direction::Higher => change > 0.0,
        Direction::Close => true,
    };
    let magnitude = match &claim.paper_value {
        None => None,
        Some(paper) => Some(magnitude(claim, better, points, paper, document)?),
    };
    let (holding, judged) = match (claim.direction, &magnitude) {
        // A closeness claim holds where ours is within the tolerance of the paper's value.
        (Direction::Close, Some(m)) => (m.within_points, m.ratios.len()),
        _ => match claim.aggregate {
            Aggregate::Every => (
                points.iter().filter(|p| shows(p.cell - p.versus)).count(),
                points.len(),
            ),
            Aggregate::Mean | Aggregate::Best => {
                let stats: Vec<f64> = points.iter().map(|p| statistic(claim, better, p)).collect();
                let combined = combine(claim, &stats);
                (
                    usize::from(shows(raw_change_sign(claim.statistic, better, combined))),
                    1,
                )
            }
        },
    };
    let holds = holding == judged;
    let verdict = match (&claim.by_construction, holds, &magnitude) {
        (Some(_), _, _) => Verdict::Input,
        (None, false, _) => Verdict::NotReproduced,
        (None, true, Some(m)) if !m.within => Verdict::DirectionOnly,
        (None, true, _) => Verdict::Reproduced,
    };
    Ok(Judgement {
        holding,
        judged,
        magnitude,
        verdict,
    })
}

/// The judged values of the claim in its statistic (for `values`: the claimed cell's mean), one
/// per point, or their mean with `Aggregate::Mean`.
fn judged_values(claim: &Claim, better: Better, points: &[Point]) -> Vec<f64> {
    let values: Vec<f64> = points
        .iter()
        .map(|p| match claim.statistic {
            Statistic::Values => p.cell,
            _ => statistic(claim, better, p),
        })
        .collect();
    match claim.aggregate {
        Aggregate::Every => values,
        Aggregate::Mean | Aggregate::Best => vec![combine(claim, &values)],
    }
}

/// The mean of `values` (one per point, in the claim's statistic) or, with `Aggregate::Best`,
/// the one furthest in the claimed direction (improvements and speedups: the largest).
fn combine(claim: &Claim, values: &[f64]) -> f64 {
    match claim.aggregate {
        Aggregate::Best => {
            let largest = match claim.statistic {
                Statistic::ImprovementPct | Statistic::Ratio => true,
                _ => claim.direction == Direction::Higher,
            };
            let pick = if largest { f64::max } else { f64::min };
            let start = if largest {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            };
            values.iter().copied().fold(start, pick)
        }
        _ => values.iter().sum::<f64>() / values.len() as f64,
    }
}

/// Ours against the paper's number: per judged point, the distance from the paper's value or
/// range (zero inside it), relative to its nearest bound, and whether it is within tolerance.
fn magnitude(
    claim: &Claim,
    better: Better,
    points: &[Point],
    paper: &PaperValue,
    document: &ResultsDocument,
) -> Result<Magnitude, String> {
    let values = judged_values(claim, better, points);
    let targets: Vec<PaperNumber> = match paper {
        PaperValue::Same(number) => vec![*number; values.len()],
        PaperValue::PerPoint(map) => {
            let key = claim.over.as_ref().expect("load checked `over`");
            sweep_axis(document, &format!("claim {}", claim.id), key)?
                .values
                .iter()
                .map(|v| {
                    let name = match v {
                        serde_json::Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    map.get(&name).copied().ok_or_else(|| {
                        format!(
                            "claim {}: paper_value names no value for `{name}`",
                            claim.id
                        )
                    })
                })
                .collect::<Result<_, _>>()?
        }
    };
    let points_scale = match claim.statistic {
        Statistic::ImprovementPct | Statistic::ChangePct => true,
        Statistic::Difference | Statistic::Values => claim.metric.ends_with("_pct"),
        Statistic::Ratio => false,
    };
    let mut ratios = Vec::new();
    let (mut worst_distance, mut worst_relative) = (0.0f64, 0.0f64);
    let mut within_points = 0;
    for (value, target) in values.iter().zip(&targets) {
        let (low, high) = target.bounds();
        let nearest = value.clamp(low, high);
        let distance = (value - nearest).abs();
        let relative = match nearest {
            0.0 => f64::INFINITY,
            n => distance / n.abs(),
        };
        let relative = if distance == 0.0 { 0.0 } else { relative };
        ratios.push(value / nearest);
        within_points += usize::from(
            relative <= RELATIVE_TOLERANCE
                || (points_scale && distance <= ABSOLUTE_TOLERANCE_POINTS),
        );
        if distance > worst_distance {
            worst_distance = distance;
            worst_relative = relative;
        }
    }
    Ok(Magnitude {
        within: within_points == values.len(),
        within_points,
        ratios,
        worst_distance,
        worst_relative,
    })
}

/// `wanted` with `versus` laid over it, for a document with sweep keys `axes`: a key of
/// `versus` replaces every key of `wanted` on the same sweep axis (`routing.kind =
/// "least_loaded"` drops `routing.slack`), and a key of `wanted` on no axis of `axes` is dropped
/// (the compared run does not sweep it).
pub(super) fn replace_coords(
    axes: &[&str],
    wanted: &toml::Table,
    versus: &toml::Table,
) -> toml::Table {
    let axis_of = |key: &str| {
        axes.iter()
            .find(|a| key_reaches(a, key))
            .map(|a| a.to_string())
    };
    let replaced: Vec<Option<String>> = versus.keys().map(|k| axis_of(k)).collect();
    let mut compared: toml::Table = wanted
        .iter()
        .filter(|(k, _)| axis_of(k).is_some_and(|axis| !replaced.contains(&Some(axis))))
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
                .all(|(key, value)| coord_matches(&cell.coords, key, value))
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

/// Whether the coordinate `key` of a cell with `coords` (or the part of a table-valued
/// coordinate it reaches into) equals `value`, numbers compared as numbers.
pub(super) fn coord_matches(
    coords: &[(String, serde_json::Value)],
    key: &str,
    value: &toml::Value,
) -> bool {
    let Ok(want) = serde_json::to_value(value) else {
        return false;
    };
    coords.iter().any(|(axis, actual)| {
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

pub(super) fn json_equal(a: &serde_json::Value, b: &serde_json::Value) -> bool {
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
    statistic_of(claim.statistic, better, p.cell, p.versus)
}

/// `cell` against `versus` in `statistic` (`Values`: the relative change).
pub(super) fn statistic_of(statistic: Statistic, better: Better, cell: f64, versus: f64) -> f64 {
    match statistic {
        Statistic::ImprovementPct => improvement_pct(versus, cell, better).unwrap_or(f64::NAN),
        Statistic::ChangePct => (cell - versus) / versus.abs() * 100.0,
        Statistic::Difference => cell - versus,
        Statistic::Ratio => versus / cell,
        Statistic::Values => (cell - versus) / versus.abs(),
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
    let format = NumberFormat::of_statistic(claim.statistic);
    let text = |v: f64| format.text(v);
    match (claim.aggregate, values.as_slice()) {
        (_, [one]) => text(*one),
        (Aggregate::Mean | Aggregate::Best, _) => format!(
            "{} ({} of {})",
            text(combine(claim, &values)),
            if claim.aggregate == Aggregate::Best {
                "best"
            } else {
                "mean"
            },
            values
                .iter()
                .map(|v| text(*v))
                .collect::<Vec<_>>()
                .join(", ")
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
