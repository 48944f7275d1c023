//! `expertsim capacity`: the highest arrival rate at which a scenario still meets an SLO, on
//! latency (at most a bound) or throughput (at least one), or any metric of the family's table.
//! For each sweep cell (cells in parallel, `--shard K/N` like `run`), the family's rate key is
//! doubled or halved from the scenario's own rate until the SLO brackets, then bisected until the
//! bracket is within `--tolerance` (relative) of its upper end. A rate meets the SLO when the
//! across-seed mean of every named metric is on the right side of its bound (below for a
//! lower-is-better metric, above for a higher-is-better one). Bisection assumes the metrics get
//! no better as the rate rises; every evaluation is written out, so a non-monotone case shows.

use clap::Args;
use expertsim_scenario::metrics::Better;
use expertsim_scenario::partial::Shard;
use expertsim_scenario::scenario::ScenarioPlan;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Most doublings (or halvings) tried before giving up on a bracket: 2^40 spans any rate.
const MAX_BRACKET_STEPS: usize = 40;

/// The finest relative tolerance: 20 bisections below a bracket's upper end, past the noise of
/// any simulated metric.
const MIN_TOLERANCE: f64 = 1e-6;

/// Find the highest arrival rate that meets an SLO (latency, throughput or any metric).
#[derive(Args)]
pub struct CapacityArgs {
    /// The scenario TOML file (its arrival rate not swept, or narrowed to one value with --set).
    scenario: PathBuf,
    /// The SLO: comma-separated METRIC=BOUND over the family's metrics (docs/metrics.md), e.g.
    /// `latency_p99_ms=2000` (latency: lower is better, so at or below its bound) or
    /// `throughput_rps=100` (higher is better: at or above it).
    #[arg(long, value_delimiter = ',', required = true)]
    slo: Vec<String>,
    /// Stop when the bracket [met, missed] is this close, relative to its upper end.
    #[arg(long, default_value_t = 0.02)]
    tolerance: f64,
    /// First rate tried (default: the scenario's own rate).
    #[arg(long)]
    start: Option<f64>,
    /// Override scenario values (`key=value`, TOML syntax), as with `run`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
    /// Search only the K-th of N disjoint slices of the cells (as `run --shard`).
    #[arg(long, value_name = "K/N")]
    shard: Option<Shard>,
    /// Output directory (default: results/<scenario name>-capacity).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// One bound of the SLO.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Bound {
    pub metric: String,
    pub bound: f64,
    /// "at most" or "at least".
    pub must_be: &'static str,
}

/// One rate tried for one cell.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Evaluation {
    pub rate: f64,
    pub met: bool,
    /// The SLO metrics' across-seed means, in SLO order.
    pub means: Vec<f64>,
}

/// One cell's search.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CellCapacity {
    pub cell: String,
    /// The highest rate tried that met the SLO; None when none did.
    pub capacity: Option<f64>,
    /// The lowest rate tried that missed it; None when none did (the capacity is a lower bound).
    pub missed_at: Option<f64>,
    pub evaluations: Vec<Evaluation>,
    /// Why the search stopped before it bracketed the capacity: the scenario refuses the next
    /// rate (its ceilings on requests or simulated time, or the ceiling on rates).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
}

/// What `capacity.json` holds.
#[derive(Clone, Debug, Serialize)]
pub struct CapacityReport {
    pub scenario: String,
    pub rate_key: String,
    pub slo: Vec<Bound>,
    pub tolerance: f64,
    pub seeds: Vec<u64>,
    pub shard: Option<String>,
    pub cells: Vec<CellCapacity>,
}

fn refuse(message: String) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(2)
}

/// Parses `METRIC=BOUND` items against the family's metric table.
fn parse_slo(items: &[String], plan: &ScenarioPlan) -> Result<Vec<Bound>, String> {
    let metrics = plan.family.metrics();
    let mut bounds = Vec::new();
    for item in items {
        let (name, value) = item
            .split_once('=')
            .ok_or_else(|| format!("--slo {item:?}: expected METRIC=BOUND"))?;
        let (name, value) = (name.trim(), value.trim());
        let info = metrics.iter().find(|m| m.name == name).ok_or_else(|| {
            format!(
                "--slo {item:?}: {name:?} is not a {} metric; known: {}",
                plan.family.name(),
                metrics
                    .iter()
                    .map(|m| m.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })?;
        let bound: f64 = value
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite())
            .ok_or_else(|| format!("--slo {item:?}: {value:?} is not a finite number"))?;
        bounds.push(Bound {
            metric: name.to_string(),
            bound,
            must_be: match info.better {
                Better::Lower => "at most",
                Better::Higher => "at least",
            },
        });
    }
    Ok(bounds)
}

/// The scenario's own value of the dotted `key` (after `--set`), when it is a number.
fn own_rate(path: &Path, key: &str, sets: &[String]) -> Option<f64> {
    for set in sets.iter().rev() {
        if let Some((k, v)) = set.split_once('=')
            && k.trim() == key
        {
            return v.trim().parse().ok();
        }
    }
    let text = std::fs::read_to_string(path).ok()?;
    let doc: toml::Table = text.parse().ok()?;
    let mut value = doc.get(key.split('.').next()?)?;
    for part in key.split('.').skip(1) {
        value = value.get(part)?;
    }
    value
        .as_float()
        .or_else(|| value.as_integer().map(|i| i as f64))
}

/// What trying one rate gave.
enum Tried {
    Evaluated(Evaluation),
    /// The scenario refuses this rate (the message says why): the search goes no further.
    Refused(String),
}

/// The SLO metrics' means of cell `cell` at `rate`, and whether they meet the bounds.
fn evaluate(
    args: &CapacityArgs,
    key: &str,
    cell: usize,
    rate: f64,
    slo: &[Bound],
) -> Result<Tried, String> {
    let mut sets = args.sets.clone();
    sets.push(format!("{key}={rate:?}"));
    let plan = match expertsim_scenario::scenario::load(&args.scenario, &sets) {
        Ok(plan) => plan,
        // The rate itself, or what it derives (requests, simulated seconds), is refused.
        Err(e) if e.field.as_deref() == Some(key) => {
            return Ok(Tried::Refused(
                expertsim_scenario::scenario::error::one_line(&e.message),
            ));
        }
        Err(e) => return Err(e.to_string()),
    };
    let runs = expertsim_scenario::runner::run_cells(
        &plan,
        &strategies::Registry,
        &[cell],
        None,
        None,
        &|| {},
        &|_, _| Ok(()),
    )?;
    let runs = &runs[0].runs;
    let mut means = Vec::with_capacity(slo.len());
    let mut met = true;
    for bound in slo {
        let values: Vec<f64> = runs
            .iter()
            .filter_map(|r| r.scalars.get(&bound.metric).copied())
            .collect();
        let mean = values.iter().sum::<f64>() / values.len().max(1) as f64;
        // A metric a run could not report (NaN, none) does not meet the SLO.
        let ok = !values.is_empty()
            && mean.is_finite()
            && match bound.must_be {
                "at most" => mean <= bound.bound,
                _ => mean >= bound.bound,
            };
        met &= ok;
        means.push(mean);
    }
    Ok(Tried::Evaluated(Evaluation { rate, met, means }))
}

/// One cell's search: the highest rate met, the lowest missed, every evaluation, and why the
/// search stopped early if it did.
type Search = (Option<f64>, Option<f64>, Vec<Evaluation>, Option<String>);

/// Brackets, then bisects, the capacity of one cell.
fn search(
    args: &CapacityArgs,
    key: &str,
    cell: usize,
    start: f64,
    slo: &[Bound],
) -> Result<Search, String> {
    let mut evaluations = Vec::new();
    let mut stopped = None;
    // Some(met) for an evaluated rate, None for one the scenario refuses (noted in `stopped`).
    let mut try_rate =
        |rate: f64, evaluations: &mut Vec<Evaluation>| -> Result<Option<bool>, String> {
            match evaluate(args, key, cell, rate, slo)? {
                Tried::Evaluated(e) => {
                    let met = e.met;
                    evaluations.push(e);
                    Ok(Some(met))
                }
                Tried::Refused(why) => {
                    stopped = Some(format!("{key} = {rate:e} is refused: {why}"));
                    Ok(None)
                }
            }
        };
    let (mut met, mut missed) = (None, None);
    let mut rate = start;
    match try_rate(rate, &mut evaluations)? {
        None => {}
        Some(true) => {
            met = Some(rate);
            for _ in 0..MAX_BRACKET_STEPS {
                rate *= 2.0;
                match try_rate(rate, &mut evaluations)? {
                    Some(true) => met = Some(rate),
                    Some(false) => {
                        missed = Some(rate);
                        break;
                    }
                    None => break,
                }
            }
        }
        Some(false) => {
            missed = Some(rate);
            for _ in 0..MAX_BRACKET_STEPS {
                rate /= 2.0;
                match try_rate(rate, &mut evaluations)? {
                    Some(true) => {
                        met = Some(rate);
                        break;
                    }
                    Some(false) => missed = Some(rate),
                    None => break,
                }
            }
        }
    }
    if let (Some(mut lo), Some(mut hi)) = (met, missed) {
        while hi - lo > args.tolerance * hi {
            let mid = 0.5 * (lo + hi);
            match try_rate(mid, &mut evaluations)? {
                Some(true) => lo = mid,
                Some(false) => hi = mid,
                None => break,
            }
        }
        met = Some(lo);
        missed = Some(hi);
    }
    Ok((met, missed, evaluations, stopped))
}

pub fn run(args: CapacityArgs) -> ExitCode {
    use rayon::prelude::*;
    let plan = match crate::load(&args.scenario, &args.sets) {
        Ok(plan) => plan,
        Err(code) => return code,
    };
    let Some(key) = plan.family.rate_key() else {
        let searchable: Vec<&str> = expertsim_scenario::registry::families()
            .filter(|f| f.rate_key().is_some())
            .map(|f| f.name())
            .collect();
        return refuse(format!(
            "{}: the {} family has no arrival rate to search (capacity runs {} scenarios)",
            args.scenario.display(),
            plan.family.name(),
            searchable.join(", ")
        ));
    };
    if plan.axes.iter().any(|a| a.key == key && a.values.len() > 1) {
        return refuse(format!(
            "{}: {key} is swept; capacity searches it (remove it from [sweep] or fix it with --set)",
            args.scenario.display()
        ));
    }
    if !(MIN_TOLERANCE..1.0).contains(&args.tolerance) {
        return refuse(format!(
            "--tolerance {:e}: must be from {MIN_TOLERANCE:e} to below 1 (relative; a \
             bisection halves the bracket {} times to reach the floor)",
            args.tolerance,
            (1.0 / MIN_TOLERANCE).log2().ceil()
        ));
    }
    let slo = match parse_slo(&args.slo, &plan) {
        Ok(slo) => slo,
        Err(message) => return refuse(message),
    };
    let start = match args
        .start
        .or_else(|| own_rate(&args.scenario, key, &args.sets))
    {
        Some(rate) if rate.is_finite() && rate > 0.0 => rate,
        Some(rate) => return refuse(format!("start rate {rate}: must be finite and positive")),
        None => {
            return refuse(format!(
                "{}: no {key} to start from; give --start RATE",
                args.scenario.display()
            ));
        }
    };
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| Path::new("results").join(format!("{}-capacity", plan.name)));
    if let Err(err) = expertsim_scenario::results::check_output_folder(&out, &plan.name) {
        return refuse(format!("--out {}: {err}; nothing was run", out.display()));
    }
    let cells = match args.shard {
        Some(shard) => shard.cells(plan.cells.len()),
        None => (0..plan.cells.len()).collect(),
    };
    let started = std::time::Instant::now();
    let searched: Vec<Result<CellCapacity, String>> = cells
        .par_iter()
        .map(|&cell| {
            let (capacity, missed_at, evaluations, stopped) =
                search(&args, key, cell, start, &slo)?;
            // The cell's coordinates other than the searched rate (fixed by --set, if at all).
            let label = plan.cells[cell]
                .coords
                .iter()
                .filter(|(k, _)| k != key)
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",");
            Ok(CellCapacity {
                cell: label,
                capacity,
                missed_at,
                evaluations,
                stopped,
            })
        })
        .collect();
    let mut report = CapacityReport {
        scenario: plan.name.clone(),
        rate_key: key.to_string(),
        slo,
        tolerance: args.tolerance,
        seeds: plan.seeds.clone(),
        shard: args.shard.map(|s| s.to_string()),
        cells: Vec::new(),
    };
    for cell in searched {
        match cell {
            Ok(cell) => report.cells.push(cell),
            Err(message) => {
                eprintln!("error: {message}");
                return ExitCode::from(1);
            }
        }
    }
    let slo_text: Vec<String> = report
        .slo
        .iter()
        .map(|b| format!("{} {} {}", b.metric, b.must_be, b.bound))
        .collect();
    println!(
        "{}: highest {key} meeting {} (tolerance {:.1}%, {} seeds)",
        plan.name,
        slo_text.join(", "),
        report.tolerance * 100.0,
        report.seeds.len()
    );
    let width = report
        .cells
        .iter()
        .map(|c| c.cell.len())
        .max()
        .unwrap_or(4)
        .max(4);
    for cell in &report.cells {
        let capacity = match (cell.capacity, cell.missed_at) {
            (Some(c), Some(m)) => format!("{c:.4} (missed at {m:.4})"),
            (Some(c), None) => format!("at least {c:.4} (met at every rate tried)"),
            (None, Some(m)) => format!("none: no rate met the SLO (missed even at {m:.4})"),
            (None, None) => "none: no rate could be tried".into(),
        };
        let capacity = match &cell.stopped {
            Some(why) => format!("{capacity}; the search stopped: {why}"),
            None => capacity,
        };
        println!(
            "{:<width$}  {capacity}  [{} evaluations]",
            if cell.cell.is_empty() {
                "(all)"
            } else {
                &cell.cell
            },
            cell.evaluations.len()
        );
    }
    println!("searched in {:.2} s", started.elapsed().as_secs_f64());
    let name = match args.shard {
        Some(s) => format!("capacity-{}-of-{}.json", s.index, s.count),
        None => "capacity.json".into(),
    };
    let mut bytes = serde_json::to_vec_pretty(&report).expect("the report serializes");
    bytes.push(b'\n');
    let written = std::fs::create_dir_all(&out)
        .and_then(|()| expertsim_scenario::results::write_atomic(&out.join(&name), &bytes));
    match written {
        Ok(()) => {
            println!("wrote {}", out.join(&name).display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {}: {e}", out.join(&name).display());
            ExitCode::from(1)
        }
    }
}
