//! `expertsim live`: the arguments, and the run through the `live` crate (fidelity table
//! printed, `fidelity.json` and figures written only when the run succeeded).

use clap::{Args, ValueEnum};
use live::{BackendKind, Clock, LiveOptions};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    /// The CPU reference kernels, timed with the wall clock.
    Cpu,
    /// A CUDA device: kernels compiled with NVRTC, timed with device events.
    Cuda,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ClockArg {
    /// Time advances by the measured step durations.
    Measured,
    /// Time advances by the predicted durations (measuring alongside): the simulated schedule.
    Predicted,
}

/// Run a scenario live: the same scheduler code, every step executed and timed on the kernels.
#[derive(Args)]
pub struct LiveArgs {
    /// The scenario TOML file (one sweep cell, one seed).
    scenario: PathBuf,
    #[arg(long, value_enum)]
    backend: BackendArg,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    device: usize,
    /// Count host work in every step (wall clock around the whole step).
    #[arg(long)]
    realtime: bool,
    #[arg(long, value_enum, default_value = "measured")]
    clock: ClockArg,
    /// GEMM tile of the kernels; must be the one the profile in use was measured with.
    #[arg(long, default_value_t = 64)]
    tile: usize,
    /// KV-cache tokens per sequence in decode steps; the profile's `decode_context_tokens`.
    #[arg(long, default_value_t = 256)]
    decode_context: usize,
    /// Timed runs per kernel launch; the median counts (ignored with --realtime).
    #[arg(long, default_value_t = 5)]
    repetitions: usize,
    /// Output directory (default: results/<scenario name>-live).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Override a scenario value, e.g. --set workload.n_requests=8.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
    /// Skip rendering figures.
    #[arg(long)]
    no_figures: bool,
}

pub fn run(args: LiveArgs) -> ExitCode {
    let plan = match sim::scenario::load(&args.scenario, &args.sets) {
        Ok(plan) => plan,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::from(2);
        }
    };
    let options = LiveOptions {
        backend: match args.backend {
            BackendArg::Cpu => BackendKind::Cpu,
            BackendArg::Cuda => BackendKind::Cuda,
        },
        device: args.device,
        realtime: args.realtime,
        clock: match args.clock {
            ClockArg::Measured => Clock::Measured,
            ClockArg::Predicted => Clock::Predicted,
        },
        tile: args.tile,
        decode_context: args.decode_context,
        repetitions: args.repetitions,
    };
    let report = match live::run(&plan, &strategies::Registry, &options) {
        Ok(report) => report,
        Err(err) => {
            eprintln!("error: {}: {err}", args.scenario.display());
            return ExitCode::from(err.exit_code());
        }
    };
    print!("{}", live::report::table(&report));
    let out = args
        .out
        .unwrap_or_else(|| Path::new("results").join(format!("{}-live", plan.name)));
    let mut written = Vec::new();
    let result = live::report::write_json(&report, &out).map(|p| written.push(p));
    let result = result.and_then(|()| {
        if args.no_figures {
            Ok(())
        } else {
            live::report::write_figures(&report, &out).map(|p| written.extend(p))
        }
    });
    if let Err(err) = result {
        eprintln!("error: {err}");
        return ExitCode::from(1);
    }
    eprintln!("live run took {:.2} s", report.wall_s);
    for path in written {
        eprintln!("wrote {}", path.display());
    }
    ExitCode::SUCCESS
}
