//! `expertsim merge`: joins the shards of a sweep (`run --shard K/N`) into the `results.json` one
//! run of the whole sweep writes, byte for byte, and renders its figures from the scenario file
//! the shards recorded. Shards that do not fit together are refused with one line and exit code
//! 2, before anything is written.

use clap::Args;
use expertsim_scenario::partial::SweepHeader;
use expertsim_scenario::partial::merge::Merged;
use expertsim_scenario::scenario::ScenarioPlan;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Join the shards of a sweep into the results and figures of one run.
#[derive(Args)]
pub struct MergeArgs {
    /// Result directories of the shards (each holds partial-K-of-N.json files and cells/).
    #[arg(required = true)]
    dirs: Vec<PathBuf>,
    /// Output directory (default: results/<scenario name>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Skip rendering figures (the scenario file then need not be at hand).
    #[arg(long)]
    no_figures: bool,
}

pub fn run(args: MergeArgs) -> ExitCode {
    let refuse = |message: String| {
        eprintln!("error: {message}");
        ExitCode::from(2)
    };
    let merged = match expertsim_scenario::partial::merge::merge(&args.dirs) {
        Ok(merged) => merged,
        Err(message) => return refuse(message),
    };
    let plan = match args.no_figures {
        true => None,
        false => match plan_for_figures(&merged) {
            Ok(plan) => Some(plan),
            Err(message) => return refuse(message),
        },
    };
    let name = &merged.document.scenario.name;
    let out = args.out.unwrap_or_else(|| Path::new("results").join(name));
    if let Some(plan) = &plan
        && let Err(code) = crate::check_before_running(plan, &out, true)
    {
        return code;
    }
    if let Err(err) = expertsim_scenario::results::check_output_folder(&out, name) {
        return refuse(format!(
            "--out {}: {err}; nothing was written",
            out.display()
        ));
    }
    match write(&merged, plan.as_ref(), &out) {
        Ok(()) if crate::report_failed_runs(&merged.document) > 0 => {
            ExitCode::from(crate::RUNS_FAILED)
        }
        result => crate::report_failure(result),
    }
}

/// The scenario the shards ran, reloaded to render figures; it must still describe the same sweep.
fn plan_for_figures(merged: &Merged) -> Result<ScenarioPlan, String> {
    let path = &merged.scenario_path;
    let hint = "(merge --no-figures writes results.json without them)";
    let plan = expertsim_scenario::scenario::load(path, &merged.sets)
        .map_err(|e| format!("cannot render the figures: {e} {hint}"))?;
    if SweepHeader::of(&plan).fingerprint() != merged.fingerprint {
        return Err(format!(
            "cannot render the figures: {} no longer describes the sweep the shards ran {hint}",
            path.display()
        ));
    }
    Ok(plan)
}

fn write(merged: &Merged, plan: Option<&ScenarioPlan>, out: &Path) -> anyhow::Result<()> {
    use anyhow::Context;
    let document = &merged.document;
    println!("{}", crate::summary::table(document));
    let results_path = out.join("results.json");
    expertsim_scenario::runner::write_results(document, &results_path)
        .with_context(|| format!("writing {}", results_path.display()))?;
    let mut written = vec![results_path];
    if let Some(plan) = plan {
        written.extend(crate::plots::render_run(
            plan,
            document,
            &out.join("figures"),
        )?);
    }
    eprintln!("merged {} shard manifests", merged.manifests.len());
    for path in written {
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
