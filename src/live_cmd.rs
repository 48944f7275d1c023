//! `expertsim live`: the arguments, and the run through the `live` crate: with `--calibrate`
//! a profile measured for the scenario first, then the probe of the profile against the device
//! (printed, with a warning and the commands to recalibrate when it fails), then the run
//! (fidelity table printed, `fidelity.json` and figures written only when the run succeeded).

use crate::invocation;
use clap::{Args, ValueEnum};
use live::probe::{ProbeOptions, ProbeOutcome, Verdict};
use live::{BackendKind, BeforeRun, Clock, LiveOptions};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    /// The CPU reference kernels, timed with the wall clock.
    Cpu,
    /// A CUDA device: GEMMs through cuBLAS, our kernels compiled with NVRTC, timed with device
    /// events around CUDA-graph replays.
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
    /// Measure a profile for the scenario's model on this device first (only the token counts
    /// and batch sizes the scenario can use; CAPS and GEM) and price the run with it.
    #[arg(long)]
    calibrate: bool,
    /// Where --calibrate writes its profile (default: <out>/calibrated-profile.json).
    #[arg(long, value_name = "PATH", requires = "calibrate")]
    calibrate_output: Option<PathBuf>,
    /// Do not probe the profile against the device before the run.
    #[arg(long, conflicts_with_all = ["probe_points", "probe_threshold", "strict_probe"])]
    no_probe: bool,
    /// Probe points per step series of the profile (expert_ffn, non_expert_prefill,
    /// non_expert_decode, head), spread over each series' sampled counts.
    #[arg(long, default_value_t = live::probe::DEFAULT_POINTS_PER_SERIES)]
    probe_points: usize,
    /// The probe fails when the median |relative error| of its points exceeds this, percent.
    #[arg(long, value_name = "PCT", default_value_t = live::probe::DEFAULT_THRESHOLD_PCT)]
    probe_threshold: f64,
    /// A failed probe is an error (exit code 2, nothing written) instead of a warning.
    #[arg(long)]
    strict_probe: bool,
}

/// `word` quoted for a POSIX shell when it needs it.
fn shell_word(word: &str) -> String {
    let plain = word
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@".contains(c));
    if plain && !word.is_empty() {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// The commands that would give a profile describing this device: measure one for this run
/// (`--calibrate`), or keep one for later runs (CAPS and GEM: for the scenario's counts),
/// written to a new file in the run's output folder, never over the profile the scenario names
/// (a shipped profile stays as committed). After `--calibrate` nothing is advised but a quieter
/// machine: the profile was measured here moments ago.
fn recalibrate_commands(
    args: &LiveArgs,
    plan: &expertsim_scenario::scenario::ScenarioPlan,
    profile: &str,
    out: &Path,
    just_calibrated: bool,
) -> Vec<String> {
    if just_calibrated {
        return vec![
            "the profile was measured on this device moments ago, so the device's speed moved \
             since (other processes' load; see the timing noise line below): measuring again \
             here gives the same; rerun when the machine is quiet"
                .to_string(),
        ];
    }
    let backend = match args.backend {
        BackendArg::Cpu => "cpu",
        BackendArg::Cuda => "cuda",
    };
    let scenario = shell_word(&args.scenario.display().to_string());
    let sets: String = args
        .sets
        .iter()
        .map(|s| format!(" --set {}", shell_word(s)))
        .collect();
    let defaults = calibrate::pipeline::Plan::full();
    let mut kernel_flags = String::new();
    if args.tile != defaults.tile {
        kernel_flags += &format!(" --tile {}", args.tile);
    }
    if args.decode_context != defaults.decode_context {
        kernel_flags += &format!(" --decode-context {}", args.decode_context);
    }
    let expertsim = invocation::command("expertsim");
    let calibrate = invocation::command("expertsim-calibrate");
    let kept = std::path::absolute(out.join("recalibrated-profile.json"))
        .unwrap_or_else(|_| out.join("recalibrated-profile.json"));
    let overwrites_profile = same_path(&kept, Path::new(profile));
    let mut commands = Vec::new();
    if calibrate::scenario_points::for_scenario(&plan.cells[0].scenario).is_ok() {
        commands.push(format!(
            "measure one for this run: {expertsim} live {scenario} --backend {backend}{sets}\
             {kernel_flags} --calibrate"
        ));
        if let (false, Some(field)) = (overwrites_profile, plan.family.profile_field()) {
            let kept = kept.display().to_string();
            commands.push(format!(
                "or keep one for later runs: {calibrate} --backend {backend} --for-scenario \
                 {scenario}{sets}{kernel_flags} --output {}, then run with --set {}",
                shell_word(&kept),
                shell_word(&format!("{field}={}", toml::Value::String(kept.clone())))
            ));
        }
    } else {
        commands.push(format!(
            "recalibrate it on this device with {calibrate} --backend {backend} and the flags \
             it was measured with (docs/calibration.md), written with --output to a new file \
             (not over {profile}), then point the scenario at that file with --set"
        ));
    }
    commands
}

/// Whether two paths name the same file (as written, or once both exist).
fn same_path(a: &Path, b: &Path) -> bool {
    a == b || matches!((a.canonicalize(), b.canonicalize()), (Ok(a), Ok(b)) if a == b)
}

/// `out`, or, when it already holds a live run's `fidelity.json`, the first of `out-2`,
/// `out-3`, ... that does not: a second run never overwrites the first's report.
fn unused_out(out: PathBuf) -> PathBuf {
    if !out.join("fidelity.json").exists() {
        return out;
    }
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "live".into());
    (2..)
        .map(|i| out.with_file_name(format!("{name}-{i}")))
        .find(|candidate| !candidate.join("fidelity.json").exists())
        .expect("some numbered folder is free")
}

/// `--calibrate`: measures the scenario's profile on `kernels`, writes it, and reloads the
/// scenario priced by it. On failure, the message is printed and the exit code returned.
fn calibrate_first(
    args: &LiveArgs,
    plan: &expertsim_scenario::scenario::ScenarioPlan,
    out: &Path,
    kernels: &mut live::device::Kernels,
) -> Result<
    (
        expertsim_scenario::scenario::ScenarioPlan,
        live::calibration::Calibrated,
    ),
    ExitCode,
> {
    let path = args
        .calibrate_output
        .clone()
        .unwrap_or_else(|| out.join("calibrated-profile.json"));
    if let Some(parent) = path.parent()
        && let Err(err) = std::fs::create_dir_all(parent)
    {
        eprintln!("error: {}: {err}", parent.display());
        return Err(ExitCode::from(1));
    }
    let calibrated = live::calibration::calibrate_for(
        kernels,
        plan,
        args.tile,
        args.decode_context,
        calibrate::adaptive::StoppingRule::default(),
        &path,
        &mut |line| eprintln!("  {line}"),
    )
    .map_err(|err| {
        eprintln!("error: {}: {err}", args.scenario.display());
        ExitCode::from(err.exit_code())
    })?;
    eprintln!(
        "calibrated {} points ({} repetitions) in {:.1} s; wrote {}; this run is priced by it",
        calibrated.points, calibrated.repetitions, calibrated.seconds, calibrated.path
    );
    let field = plan
        .family
        .profile_field()
        .expect("--calibrate succeeds only for families with a profile field");
    let absolute = std::path::absolute(&path).unwrap_or(path);
    let mut sets = args.sets.clone();
    sets.push(format!(
        "{field}={}",
        toml::Value::String(absolute.display().to_string())
    ));
    match expertsim_scenario::scenario::load(&args.scenario, &sets) {
        Ok(plan) => Ok((plan, calibrated)),
        Err(err) => {
            eprintln!("error: {err}");
            Err(ExitCode::from(2))
        }
    }
}

/// The failed probe's warning (or, with `--strict-probe`, error) and the commands to fix it.
fn warn_about_the_profile(
    args: &LiveArgs,
    plan: &expertsim_scenario::scenario::ScenarioPlan,
    probe: &live::probe::Probe,
    out: &Path,
    just_calibrated: bool,
) {
    let level = if args.strict_probe {
        "error"
    } else {
        "warning"
    };
    eprintln!(
        "{level}: profile {} does not describe this device ({}): its probed points are off by a \
         median {:.1} % (signed {:+.1} %), over the {} % threshold (--probe-threshold); the \
         predictions below inherit that error{}",
        probe.profile,
        probe.device,
        probe.median_abs_error_pct,
        probe.median_error_pct,
        probe.threshold_pct,
        if just_calibrated {
            " (it was measured moments ago: the device's speed changed since)"
        } else {
            ""
        }
    );
    for line in recalibrate_commands(args, plan, &probe.profile, out, just_calibrated) {
        eprintln!("  {line}");
    }
}

/// The most timed runs per kernel launch `--repetitions` may ask for.
const MAX_REPETITIONS: usize = 1000;
/// The longest KV cache per sequence `--decode-context` may ask for (128 Ki tokens, the longest
/// context of the catalogue's models); the decode kernel allocates it for every row.
const MAX_DECODE_CONTEXT: usize = 131_072;
/// The most probe points per step series `--probe-points` may ask for (a series has tens of
/// sampled counts).
const MAX_PROBE_POINTS: usize = 1000;
/// The tile sizes the kernels accept: a multiple of 4 from 4 to 256 (`kernels::moe`).
const TILE_STEP: usize = 4;
const MAX_TILE: usize = 256;

/// The command-line numbers, each against its floor and ceiling: one line naming the flag.
fn check_numbers(args: &LiveArgs) -> Result<(), String> {
    let within = |flag: &str, value: usize, low: usize, high: usize| {
        if (low..=high).contains(&value) {
            Ok(())
        } else {
            Err(format!("{flag} {value}: must be from {low} to {high}"))
        }
    };
    if args.tile % TILE_STEP != 0 || !(TILE_STEP..=MAX_TILE).contains(&args.tile) {
        return Err(format!(
            "--tile {}: must be a multiple of {TILE_STEP} from {TILE_STEP} to {MAX_TILE}",
            args.tile
        ));
    }
    within("--repetitions", args.repetitions, 1, MAX_REPETITIONS)?;
    within(
        "--decode-context",
        args.decode_context,
        1,
        MAX_DECODE_CONTEXT,
    )?;
    if !args.no_probe {
        within("--probe-points", args.probe_points, 1, MAX_PROBE_POINTS)
            .map_err(|e| format!("{e} (or --no-probe)"))?;
    }
    if !(args.probe_threshold.is_finite() && args.probe_threshold >= 0.0) {
        return Err(format!(
            "--probe-threshold {}: must be a non-negative percentage",
            args.probe_threshold
        ));
    }
    Ok(())
}

pub fn run(args: LiveArgs) -> ExitCode {
    if let Err(message) = check_numbers(&args) {
        eprintln!("error: {message}; nothing was run");
        return ExitCode::from(2);
    }
    let plan = match expertsim_scenario::scenario::load(&args.scenario, &args.sets) {
        Ok(plan) => plan,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::from(2);
        }
    };
    if let Err(err) = live::check_family(&plan) {
        eprintln!("error: {}: {err}", args.scenario.display());
        return ExitCode::from(err.exit_code());
    }
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
    let asked = args
        .out
        .clone()
        .unwrap_or_else(|| Path::new("results").join(format!("{}-live", plan.name)));
    let out = unused_out(asked.clone());
    if out != asked {
        eprintln!(
            "note: {} holds an earlier live run's fidelity.json; this run writes to {} \
             (--out chooses the folder)",
            asked.display(),
            out.display()
        );
    }
    if let Err(err) = expertsim_scenario::results::check_output_folder(&out, &plan.name) {
        eprintln!("error: --out {}: {err}; nothing was run", out.display());
        return ExitCode::from(2);
    }
    let fail = |err: live::LiveError| {
        eprintln!("error: {}: {err}", args.scenario.display());
        ExitCode::from(err.exit_code())
    };
    let mut kernels = match live::open(&plan, &options) {
        Ok(kernels) => kernels,
        Err(err) => return fail(err),
    };
    let mut before = BeforeRun::default();
    let plan = if args.calibrate {
        match calibrate_first(&args, &plan, &out, &mut kernels) {
            Ok((plan, calibrated)) => {
                before.calibrated = Some(calibrated);
                plan
            }
            Err(code) => return code,
        }
    } else {
        plan
    };
    before.probe = if args.no_probe {
        ProbeOutcome::Skipped {
            reason: "--no-probe".into(),
        }
    } else {
        let probe_options = ProbeOptions {
            points_per_series: args.probe_points,
            threshold_pct: args.probe_threshold,
            ..ProbeOptions::default()
        };
        match live::probe::run(&mut kernels, &plan, &probe_options) {
            Ok(outcome) => outcome,
            Err(err) => return fail(err),
        }
    };
    match &before.probe {
        ProbeOutcome::Ran(probe) => print!("{}", live::report::probe_table(probe)),
        skipped => println!("{}", live::report::probe_line(skipped)),
    }
    if let ProbeOutcome::Ran(probe) = &before.probe
        && probe.verdict == Verdict::DoesNotDescribe
    {
        warn_about_the_profile(&args, &plan, probe, &out, before.calibrated.is_some());
        if args.strict_probe {
            return ExitCode::from(2);
        }
    }
    let report = match live::run_on(&mut kernels, &plan, &strategies::Registry, &options, before) {
        Ok(report) => report,
        Err(err) => return fail(err),
    };
    if let Some(why) = &report.timing_noise.why {
        eprintln!(
            "warning: noisy timings ({why}): the step errors below measure this machine's load \
             as much as the cost model; rerun on a quiet machine before reading the MAPE as \
             the model's error"
        );
    }
    print!("{}", live::report::table(&report));
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
