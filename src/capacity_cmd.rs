//! `expertsim capacity`: the highest arrival rate at which a scenario still meets an SLO, on
//! latency (at most a bound) or throughput (at least one), or any metric of the family's table.
//! For each sweep cell (cells in parallel, `--shard K/N` like `run`), the family's rate key is
//! doubled or halved from the scenario's own rate until the SLO brackets, then bisected until the
//! bracket is within `--tolerance` (relative) of its upper end. A rate meets the SLO when the
//! across-seed mean of every named metric is on the right side of its bound (below for a
//! lower-is-better metric, above for a higher-is-better one). Bisection assumes the metrics get
//! no better as the rate rises; every evaluation is written out, so a non-monotone case shows.

use clap::Args;
use serde::Serialize;
use sim::metrics::Better;
use sim::partial::Shard;
use sim::scenario::ScenarioPlan;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Most doublings (or halvings) tried before giving up on a bracket: 2^40 spans any rate.
const MAX_BRACKET_STEPS: usize = 40;

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

/// The SLO metrics' means of cell `cell` at `rate`, and whether they meet the bounds.
fn evaluate(
    args: &CapacityArgs,
    key: &str,
    cell: usize,
    rate: f64,
    slo: &[Bound],
) -> Result<Evaluation, String> {
    let mut sets = args.sets.clone();
    sets.push(format!("{key}={rate:?}"));
    let plan = sim::scenario::load(&args.scenario, &sets).map_err(|e| e.to_string())?;
    let runs = sim::runner::run_cells(
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
    Ok(Evaluation { rate, met, means })
}

/// Brackets, then bisects, the capacity of one cell.
fn search(
    args: &CapacityArgs,
    key: &str,
    cell: usize,
    start: f64,
    slo: &[Bound],
) -> Result<(Option<f64>, Option<f64>, Vec<Evaluation>), String> {
    let mut evaluations = Vec::new();
    let try_rate = |rate: f64, evaluations: &mut Vec<Evaluation>| -> Result<bool, String> {
        let e = evaluate(args, key, cell, rate, slo)?;
        let met = e.met;
        evaluations.push(e);
        Ok(met)
    };
    let (mut met, mut missed) = (None, None);
    let mut rate = start;
    if try_rate(rate, &mut evaluations)? {
        met = Some(rate);
        for _ in 0..MAX_BRACKET_STEPS {
            rate *= 2.0;
            if try_rate(rate, &mut evaluations)? {
                met = Some(rate);
            } else {
                missed = Some(rate);
                break;
            }
        }
    } else {
        missed = Some(rate);
        for _ in 0..MAX_BRACKET_STEPS {
            rate /= 2.0;
            if try_rate(rate, &mut evaluations)? {
                met = Some(rate);
                break;
            }
            missed = Some(rate);
        }
    }
    if let (Some(mut lo), Some(mut hi)) = (met, missed) {
        while hi - lo > args.tolerance * hi {
            let mid = 0.5 * (lo + hi);
            if try_rate(mid, &mut evaluations)? {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        met = Some(lo);
        missed = Some(hi);
    }
    Ok((met, missed, evaluations))
}

pub fn run(args: CapacityArgs) -> ExitCode {
    use rayon::prelude::*;
    let plan = match crate::load(&args.scenario, &args.sets) {
        Ok(plan) => plan,
        Err(code) => return code,
    };
    let Some(key) = plan.family.rate_key() else {
        let searchable: Vec<&str> = sim::family::FamilyId::all()
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
    if !(args.tolerance > 0.0 && args.tolerance < 1.0) {
        return refuse(format!(
            "--tolerance {}: must be between 0 and 1 (relative)",
            args.tolerance
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
    let cells = match args.shard {
        Some(shard) => shard.cells(plan.cells.len()),
        None => (0..plan.cells.len()).collect(),
    };
    let started = std::time::Instant::now();
    let searched: Vec<Result<CellCapacity, String>> = cells
        .par_iter()
        .map(|&cell| {
            let (capacity, missed_at, evaluations) = search(&args, key, cell, start, &slo)?;
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
            (None, Some(m)) => format!("none (missed even at {m:.4})"),
            (None, None) => "none".into(),
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
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| Path::new("results").join(format!("{}-capacity", plan.name)));
    let name = match args.shard {
        Some(s) => format!("capacity-{}-of-{}.json", s.index, s.count),
        None => "capacity.json".into(),
    };
    let mut bytes = serde_json::to_vec_pretty(&report).expect("the report serializes");
    bytes.push(b'\n');
    let written = std::fs::create_dir_all(&out)
        .and_then(|()| sim::results::write_atomic(&out.join(&name), &bytes));
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
