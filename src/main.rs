//! The expertsim command-line interface: parses arguments and calls the libraries.
//! Exit codes: 0 success, 2 bad input (scenario, override or trace), 3 the sweep ran and its
//! results were written but some runs failed (out of memory, no placement: named on stderr),
//! 1 any other failure.

mod capacity_cmd;
mod invocation;
mod live_cmd;
mod merge_cmd;
mod plots;
mod price_cmd;
mod reproduce_cmd;
mod reproduce_runs;
mod summary;

use clap::{Parser, Subcommand};
use expertsim_scenario::partial::resume::{SweepOptions, SweepOutcome};
use expertsim_scenario::scenario::{self, ScenarioError, ScenarioPlan};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

#[derive(Parser)]
#[command(
    name = "expertsim",
    version,
    about = "Discrete-event simulator for MoE and multi-LLM serving schedules"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a scenario (and its sweep): print a summary, write results JSON and figures (its
    /// [[figure]] tables; without any, its headline metrics over the first sweep key).
    Run {
        /// The scenario TOML file.
        scenario: PathBuf,
        /// Output directory (default: results/<scenario name>).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Override a scenario value, e.g. --set workload.n_requests=500; narrows a swept key.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
        /// Also write one CSV row per served request (one file per run, under requests/).
        #[arg(long)]
        per_request_csv: bool,
        /// Also write a Chrome trace-event JSON of every replica's steps per run (serving
        /// family; under trace_events/, opens in Perfetto; capped at 200,000 events a file).
        #[arg(long)]
        trace_events: bool,
        /// Skip rendering figures.
        #[arg(long)]
        no_figures: bool,
        /// Run only the K-th of N disjoint slices of the sweep's cells (K from 1, as with
        /// `sbatch --array=1-N`) and write a partial result for `merge` (docs/cluster.md).
        #[arg(long, value_name = "K/N")]
        shard: Option<expertsim_scenario::partial::Shard>,
        /// Rerun every cell, ignoring those an interrupted run left in the output directory.
        #[arg(long)]
        fresh: bool,
    },
    /// Join the shards of a sweep (`run --shard K/N`) into the results and figures of one run.
    Merge(merge_cmd::MergeArgs),
    /// Find the highest arrival rate at which a scenario meets an SLO on any of its metrics,
    /// latency (at most) or throughput (at least) (bisection per sweep cell; docs/capacity.md).
    Capacity(capacity_cmd::CapacityArgs),
    /// Run every family's reproduction scenarios, render their figures and rewrite the paper
    /// claims' tables and value spans in docs/reproduction.md, or in the document a family's
    /// headlines name (`doc`: the studies' docs/studies.md) (scenarios/<family>/headlines.toml).
    Reproduce(reproduce_cmd::ReproduceArgs),
    /// Check a scenario without running it: every sweep cell validated (keys, ranges, models,
    /// GPUs, whether the weights fit), the runs counted, each replayed trace summarized.
    Validate {
        /// The scenario TOML file.
        scenario: PathBuf,
        /// Override a scenario value as `run` would, e.g. --set replica.gpus=1.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
    },
    /// List every option a scenario can name, with a line each: the policies, the families,
    /// scheduler kinds, routers, predictors, distributions, arrival patterns, figure kinds,
    /// models and GPUs.
    List,
    /// Run a scenario live: the same scheduler code, every step executed and timed on the
    /// kernels; prints the fidelity table, writes fidelity.json and figures.
    Live(live_cmd::LiveArgs),
    /// Price operations (a CSV of GPU, model and op or expert rows) through the simulator's
    /// cost model: predicted time and its memory, compute, floor and host terms.
    Price(price_cmd::PriceArgs),
}

fn main() -> ExitCode {
    // Rust ignores SIGPIPE, so printing into a closed pipe (`expertsim validate ... | head`)
    // would panic; the default action ends the process quietly, as other command-line tools do.
    #[cfg(unix)]
    // SAFETY: called first thing in main, before any other thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    match cli.command {
        Command::Run {
            scenario,
            out,
            sets,
            per_request_csv,
            trace_events,
            no_figures,
            shard,
            fresh,
        } => match load(&scenario, &sets) {
            Ok(plan) => {
                if per_request_csv && plan.family.csv_columns().is_none() {
                    eprintln!(
                        "error: --per-request-csv: the {} family has no per-request records \
                         (docs/metrics.md); nothing was run",
                        plan.family
                    );
                    return ExitCode::from(2);
                }
                if trace_events && !plan.family.writes_trace_events() {
                    eprintln!(
                        "error: --trace-events: the {} family writes no trace-event files of \
                         its steps (the serving family does); nothing was run",
                        plan.family
                    );
                    return ExitCode::from(2);
                }
                let out = out.unwrap_or_else(|| Path::new("results").join(&plan.name));
                if let Err(code) = check_before_running(&plan, &out, !no_figures) {
                    return code;
                }
                if let Err(err) = probe_output_folder(&out) {
                    eprintln!("error: --out {}: {err}; nothing was run", out.display());
                    return ExitCode::from(2);
                }
                let sweep = SweepOptions {
                    out: &out,
                    shard,
                    fresh,
                    per_request_csv: per_request_csv
                        || plan.cells.iter().any(|c| c.scenario.per_request_csv()),
                    trace_events: trace_events
                        || plan.cells.iter().any(|c| c.scenario.trace_events()),
                    sets: &sets,
                };
                match run(&plan, &sweep, no_figures) {
                    Ok(0) => ExitCode::SUCCESS,
                    Ok(_) => ExitCode::from(RUNS_FAILED),
                    Err(err) => report_failure(Err(err)),
                }
            }
            Err(code) => code,
        },
        Command::Validate { scenario, sets } => match load(&scenario, &sets) {
            Ok(plan) => {
                println!(
                    "{}: ok ({} sweep cells x {} seeds = {} runs)",
                    scenario.display(),
                    plan.cells.len(),
                    plan.seeds.len(),
                    plan.cells.len() * plan.seeds.len()
                );
                // What each replayed trace offers, once per distinct (file, replay).
                let mut printed = Vec::new();
                for cell in &plan.cells {
                    if let Some((path, stats)) = cell.scenario.trace_replay() {
                        let line = format!("trace {}: {stats}", path.display());
                        if !printed.contains(&line) {
                            println!("{line}");
                            printed.push(line);
                        }
                    }
                }
                ExitCode::SUCCESS
            }
            Err(code) => code,
        },
        Command::Live(args) => live_cmd::run(args),
        Command::Price(args) => price_cmd::run(args),
        Command::Merge(args) => merge_cmd::run(args),
        Command::Capacity(args) => capacity_cmd::run(args),
        Command::Reproduce(args) => reproduce_cmd::run(args),
        Command::List => {
            print!("{}", list());
            ExitCode::SUCCESS
        }
    }
}

/// `expertsim list`: every policy kind (`strategies::catalogue`), then every other named option
/// (`expertsim_scenario::scenario::options`), one per line as `group kind description`, each group headed by a
/// `#` line naming the key that takes it, each key in one group: the routers are the options'
/// `routing` group (every kind `routing.kind` takes, the policies' among them).
fn list() -> String {
    // Where each extension point's kind is named, per family.
    const POLICY_KEYS: &[(&str, &str)] = &[
        ("batch", "replica.batch_former.kind (serving)"),
        ("mapping", "experts.mapping.kind (serving)"),
        ("placement", "placement.policy.kind (serving)"),
        (
            "gating",
            "workload.questions.aggregator.gate.kind (serving)",
        ),
        ("queue", "replica.queue.kind (serving)"),
        ("memory", "adapters.memory.kind (serving)"),
    ];
    let mut out = String::new();
    let mut heading = "";
    for info in strategies::catalogue() {
        if info.family == "routing" {
            continue;
        }
        if info.family != heading {
            heading = info.family;
            let key = POLICY_KEYS
                .iter()
                .find(|(group, _)| *group == heading)
                .map_or("", |(_, key)| key);
            out += &format!("# {heading} policies: {key}\n");
        }
        out += &format!(
            "{:<16} {:<28} {}\n",
            info.family, info.kind, info.description
        );
    }
    for group in expertsim_scenario::scenario::options::catalogue() {
        out += &format!("# {}: {}\n", group.group, group.key);
        for (kind, description) in &group.kinds {
            out += &format!("{:<16} {kind:<28} {description}\n", group.group);
        }
    }
    out
}

/// Loads a scenario; a bad one prints a one-line error and yields exit code 2. What the loader
/// did on the user's behalf (a kept baseline cell) is printed as a note.
fn load(path: &Path, sets: &[String]) -> Result<ScenarioPlan, ExitCode> {
    let plan = scenario::load(path, sets).map_err(|err: ScenarioError| {
        eprintln!("error: {err}");
        ExitCode::from(2)
    })?;
    for note in &plan.notes {
        eprintln!("note: {note}");
    }
    Ok(plan)
}

/// What must hold before a scenario runs into `out` (or a merge writes there), each refused
/// with one line and exit code 2 and nothing written: every figure file name one the file
/// system takes (when figures are drawn), and an output folder `check_output_folder` accepts.
fn check_before_running(plan: &ScenarioPlan, out: &Path, figures: bool) -> Result<(), ExitCode> {
    if figures && let Err((field, message)) = plots::check_file_names(plan) {
        eprintln!(
            "error: {}: field `{field}`: {message}; nothing was run",
            plan.path.display()
        );
        return Err(ExitCode::from(2));
    }
    expertsim_scenario::results::check_output_folder(out, &plan.name).map_err(|err| {
        eprintln!("error: --out {}: {err}; nothing was run", out.display());
        ExitCode::from(2)
    })
}

/// Creates the output folder and checks that a file can be written in it, before any cell runs.
fn probe_output_folder(out: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(out)?;
    let probe = out.join(".expertsim-write-probe");
    std::fs::write(&probe, b"")?;
    std::fs::remove_file(&probe)
}

/// The exit code of a sweep that ran and wrote its results with some runs failed.
const RUNS_FAILED: u8 = 3;

/// Prints the failed runs of `document` (if any) on stderr; returns how many failed.
fn report_failed_runs(document: &expertsim_scenario::results::ResultsDocument) -> usize {
    let lines = summary::failed_runs(document);
    for line in &lines {
        eprintln!("{line}");
    }
    document
        .cells
        .iter()
        .flat_map(|c| &c.runs)
        .filter(|r| r.failure().is_some())
        .count()
}

fn report_failure(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(1)
        }
    }
}

/// Runs the cells `sweep` selects that its output directory does not already hold; a whole sweep
/// then prints its table and writes results and figures, a shard its partial result. Returns
/// how many runs failed (named on stderr).
fn run(plan: &ScenarioPlan, sweep: &SweepOptions, no_figures: bool) -> anyhow::Result<usize> {
    use anyhow::Context;
    let out = sweep.out;
    let prepared = expertsim_scenario::partial::resume::prepare(plan, sweep);
    if let Some(first) = prepared.stale.first() {
        let n = prepared.stale.len();
        eprintln!("rerunning {n} cells whose files are stale, e.g. {first}");
    }
    if prepared.reused_cells() > 0 {
        let cells = out.join("cells");
        let n = prepared.reused_cells();
        eprintln!(
            "resuming: {n} finished cells reused from {}",
            cells.display()
        );
    }
    let total = prepared.runs_to_do() as u64;
    let progress = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    progress.set_style(
        ProgressStyle::with_template("{spinner} {pos}/{len} runs [{elapsed_precise}] {wide_bar}")
            .expect("valid template"),
    );
    let started = Instant::now();
    let outcome = prepared
        .run(plan, &strategies::Registry, sweep, &|| progress.inc(1))
        .map_err(anyhow::Error::msg)
        .context("running the sweep")?;
    progress.finish_and_clear();
    let elapsed = started.elapsed();
    let document = match outcome {
        SweepOutcome::Complete(document) => document,
        SweepOutcome::Shard { manifest, cells } => {
            eprintln!("{total} runs in {:.2} s", elapsed.as_secs_f64());
            eprintln!(
                "wrote {} ({cells} cells); join the shards with `{} merge`",
                manifest.display(),
                invocation::command("expertsim")
            );
            return Ok(0);
        }
    };

    println!("{}", summary::table(&document));
    let results_path = expertsim_scenario::partial::resume::finish(&document, out)
        .with_context(|| format!("writing {}", out.join("results.json").display()))?;
    let mut written = vec![results_path];
    if !no_figures {
        written.extend(plots::render_run(plan, &document, &out.join("figures"))?);
    }
    if sweep.per_request_csv {
        written.push(out.join("requests"));
    }
    if sweep.trace_events {
        written.push(out.join("trace_events"));
    }
    eprintln!("{total} runs in {:.2} s", elapsed.as_secs_f64());
    for path in written {
        eprintln!("wrote {}", path.display());
    }
    Ok(report_failed_runs(&document))
}
