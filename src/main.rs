//! The expertsim command-line interface: parses arguments and calls the libraries.
//! Exit codes: 0 success, 2 bad input (scenario, override or trace), 1 any other failure.

mod plots;
mod summary;

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sim::scenario::{self, ScenarioError, ScenarioPlan};
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
    /// Run a scenario (and its sweep): print a summary, write results JSON and figures.
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
        /// Skip rendering figures.
        #[arg(long)]
        no_figures: bool,
    },
    /// Check a scenario without running it.
    Validate {
        scenario: PathBuf,
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
    },
    /// List every policy kind with a one-line description.
    List,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run {
            scenario,
            out,
            sets,
            per_request_csv,
            no_figures,
        } => match load(&scenario, &sets) {
            Ok(plan) => report_failure(run(&plan, out, per_request_csv, no_figures)),
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
                ExitCode::SUCCESS
            }
            Err(code) => code,
        },
        Command::List => {
            for info in strategies::catalogue() {
                println!("{:<10} {:<20} {}", info.family, info.kind, info.description);
            }
            ExitCode::SUCCESS
        }
    }
}

/// Loads a scenario; a bad one prints a one-line error and yields exit code 2.
fn load(path: &Path, sets: &[String]) -> Result<ScenarioPlan, ExitCode> {
    scenario::load(path, sets).map_err(|err: ScenarioError| {
        eprintln!("error: {err}");
        ExitCode::from(2)
    })
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

fn run(
    plan: &ScenarioPlan,
    out: Option<PathBuf>,
    per_request_csv: bool,
    no_figures: bool,
) -> anyhow::Result<()> {
    use anyhow::Context;
    let out = out.unwrap_or_else(|| Path::new("results").join(&plan.name));
    let total = (plan.cells.len() * plan.seeds.len()) as u64;
    let csv = per_request_csv || plan.cells.iter().any(|c| c.scenario.per_request_csv());
    let progress = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    progress.set_style(
        ProgressStyle::with_template("{spinner} {pos}/{len} runs [{elapsed_precise}] {wide_bar}")
            .expect("valid template"),
    );
    let started = Instant::now();
    let requests_dir = out.join("requests");
    let document = sim::runner::run_plan(
        plan,
        &strategies::Registry,
        csv.then_some(requests_dir.as_path()),
        &|| progress.inc(1),
    )
    .map_err(anyhow::Error::msg)
    .context("writing per-request records")?;
    progress.finish_and_clear();
    let elapsed = started.elapsed();

    println!("{}", summary::table(&document));
    let results_path = out.join("results.json");
    sim::runner::write_results(&document, &results_path)
        .with_context(|| format!("writing {}", results_path.display()))?;
    let mut written = vec![results_path];
    if !no_figures {
        written.extend(plots::render_all(plan, &document, &out.join("figures"))?);
    }
    if csv {
        written.push(requests_dir);
    }
    eprintln!("{total} runs in {:.2} s", elapsed.as_secs_f64());
    for path in written {
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
