//! expertsim-calibrate: measures the MoE-layer, decode and rerouting kernels on a device
//! (`--backend cuda`, or the CPU references with `--backend cpu`) and writes a versioned
//! profile JSON that `expertsim run` reads through `[execution] profile = "path"`; or, with
//! `--analytic GPU`, writes the roofline profile of a catalogue GPU; or, with `--dense-models`,
//! measures the decode steps and loads of dense models scaled down as live MOSAIC runs them and
//! writes the dense-decode profile `[serving] profile` reads; or, with `import-vidur DIR`,
//! converts Vidur's public GPU profiling CSVs into op and network profiles. Exit codes: 0 success,
//! 2 bad input or no usable device (one line on stderr), 1 a profile that cannot be written.

use calibrate::adaptive::StoppingRule;
use calibrate::dense::{self, DensePlan};
use calibrate::pipeline::{self, CalibrateError, Plan};
use calibrate::{analytic, h200, scenario_points, vidur};
use clap::{Args, Parser, Subcommand, ValueEnum};
use expertsim_scenario::cost::shape::{DenseModelShape, MoeModelShape};
use expertsim_scenario::serving_family::live_scale::{LIVE_SCALING, Scaling};
use kernels::backend::{self, BackendKind};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum BackendArg {
    /// The CPU reference kernels, timed with the wall clock (CI, development).
    Cpu,
    /// CUDA device 0: GEMMs through cuBLAS, our kernels compiled with NVRTC, timed with device
    /// events around CUDA-graph replays.
    Cuda,
}

/// Measure the kernels and write a profile the simulator reads.
#[derive(Debug, Parser)]
#[command(
    name = "expertsim-calibrate",
    version,
    about,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Where to run the kernels.
    #[arg(long, value_enum, default_value = "cuda")]
    backend: BackendArg,
    /// A seconds-long smoke run of the whole pipeline (tiny tiles, one repetition).
    #[arg(long)]
    quick: bool,
    /// Model preset whose shapes are measured (must have bf16 weights).
    #[arg(long, default_value = "qwen1.5-moe-a2.7b")]
    model: String,
    /// Override the preset's layer count (as a scenario's `[model] n_layers`).
    #[arg(long)]
    n_layers: Option<usize>,
    /// Override the preset's routed experts per layer.
    #[arg(long)]
    n_experts: Option<usize>,
    /// Override the preset's experts per token.
    #[arg(long)]
    top_k: Option<usize>,
    /// Override the preset's routed-expert FFN width (e.g. 32 for the experts of ExpertWeave's
    /// `live-tiny-mla`).
    #[arg(long)]
    expert_ffn: Option<usize>,
    /// Rows per GEMM tile (multiple of 4, at most 256).
    #[arg(long)]
    tile: Option<usize>,
    /// A fixed count of timed repetitions per point (default: adaptive, below; 1 with --quick).
    #[arg(long, conflicts_with_all = ["precision", "confidence", "min_repetitions", "max_repetitions"])]
    repetitions: Option<usize>,
    /// Adaptive repetitions: stop a point once the confidence interval of its median has at
    /// most this half-width relative to the median.
    #[arg(long, default_value_t = StoppingRule::default().relative_half_width)]
    precision: f64,
    /// Coverage of that interval (distribution-free, from order statistics).
    #[arg(long, default_value_t = StoppingRule::default().confidence)]
    confidence: f64,
    /// Adaptive repetitions: at least this many per point.
    #[arg(long, default_value_t = StoppingRule::default().min_repetitions)]
    min_repetitions: usize,
    /// Adaptive repetitions: at most this many per point.
    #[arg(long, default_value_t = StoppingRule::default().max_repetitions)]
    max_repetitions: usize,
    /// Measure only the token counts and batch sizes this scenario can use (CAPS, GEM), for its
    /// model shape: the tile rule up to its largest pass, every batch size up to its largest.
    #[arg(long, value_name = "SCENARIO", conflicts_with_all = [
        "n_layers", "n_experts", "top_k", "expert_ffn", "dense_limit", "sparse_step",
        "sparse_limit", "max_batch", "contexts", "context_batches", "reroute_tokens", "adapters",
        "tensor_parallel", "gemm_widths",
    ])]
    for_scenario: Option<PathBuf>,
    /// With --for-scenario: override a scenario value, as `expertsim run --set`.
    #[arg(long = "set", value_name = "KEY=VALUE", requires = "for_scenario")]
    sets: Vec<String>,
    /// Untimed runs before each point's repetitions.
    #[arg(long)]
    warmup: Option<usize>,
    /// Sample both sides of every tile boundary up to this many tokens.
    #[arg(long)]
    dense_limit: Option<usize>,
    /// Past the dense limit, sample every this many tokens (0: no sparse samples) ...
    #[arg(long)]
    sparse_step: Option<usize>,
    /// ... up to this many.
    #[arg(long)]
    sparse_limit: Option<usize>,
    /// Largest decode batch.
    #[arg(long)]
    max_batch: Option<usize>,
    /// Cached tokens per sequence for the profile's decode curves.
    #[arg(long)]
    decode_context: Option<usize>,
    /// Further contexts for the decode-vs-context measurements (comma-separated).
    #[arg(long, value_delimiter = ',')]
    contexts: Option<Vec<usize>>,
    /// Batch sizes for the decode-vs-context measurements.
    #[arg(long, value_delimiter = ',')]
    context_batches: Option<Vec<usize>>,
    /// Token counts for the rerouting measurements.
    #[arg(long, value_delimiter = ',')]
    reroute_tokens: Option<Vec<usize>>,
    /// Adapter counts for the rerouting measurements.
    #[arg(long, value_delimiter = ',')]
    adapters: Option<Vec<usize>>,
    /// Output widths of further GEMMs over hidden to measure alone at the prefill token counts
    /// (`dense_gemm/out=W`; ExpertWeave's profile prices its layers and head at these widths).
    #[arg(long, value_delimiter = ',')]
    gemm_widths: Option<Vec<usize>>,
    /// Measure the non-expert and head series as one GPU's shard at this tensor-parallel
    /// degree (outputs, attention heads and vocabulary divided by it), as a GEM scenario over
    /// that many GPUs runs them (the profile's `tensor_parallel`).
    #[arg(long)]
    tensor_parallel: Option<usize>,
    /// Seed of the synthetic inputs.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Profile to write (default: profiles/measured/<device>_<model>.json).
    #[arg(long)]
    output: Option<PathBuf>,
    /// Measure these dense model presets (comma-separated) scaled down, as live MOSAIC runs
    /// them, and write a dense-decode profile instead of the MoE profile.
    #[arg(long, value_delimiter = ',')]
    dense_models: Option<Vec<String>>,
    /// With --dense-models: divide the hidden, intermediate, head and vocabulary widths by this.
    #[arg(long, default_value_t = LIVE_SCALING.widths)]
    scale_widths: u64,
    /// With --dense-models: divide the layer count by this.
    #[arg(long, default_value_t = LIVE_SCALING.layers)]
    scale_layers: u64,
    /// With --dense-models: the sampled kernel rows (sequences plus prefill tokens).
    #[arg(long, value_delimiter = ',')]
    dense_rows: Option<Vec<u64>>,
    /// With --dense-models: the sampled cached tokens per row.
    #[arg(long, value_delimiter = ',')]
    dense_contexts: Option<Vec<u64>>,
    /// Write the analytic roofline profile of this catalogue GPU instead of measuring
    /// (`all`: every committed reference profile, under --output or `profiles/`).
    #[arg(long, value_name = "GPU")]
    analytic: Option<String>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Convert Vidur's profiling CSVs (its `data/` folder) into op and network profiles:
    /// `<out>/<gpu>/<model>.json` and `<out>/network/<topology>.json` (docs/calibration.md).
    ImportVidur(ImportVidurArgs),
    /// Convert a kernel-timing folder measured on one GPU (gemm.csv, moe_grouped.csv,
    /// attention_decode.csv, attention_prefill.csv, device.json; `../shared/data/h200/`) into
    /// `<out>/kernels.json` (docs/calibration.md).
    ImportH200(ImportH200Args),
}

#[derive(Debug, Args)]
struct ImportH200Args {
    /// The kernel-timing folder.
    dir: PathBuf,
    /// GPU catalogue name of the measured device.
    #[arg(long, default_value = "H200")]
    gpu: String,
    /// Who measured and where the raw files live (recorded in the file).
    #[arg(
        long,
        default_value = "measured for expertsim on one NVIDIA H200 SXM (the team's run; raw files: ../shared/data/h200/)"
    )]
    origin: String,
    /// Date of the measurement (recorded).
    #[arg(long, default_value = "2026-11-25")]
    measured: String,
    /// Licence or terms of the data (recorded).
    #[arg(
        long,
        default_value = "this project's own measurements, under the repository's licence"
    )]
    licence: String,
    /// Folder to write `kernels.json` into.
    #[arg(long, default_value = "profiles/h200")]
    out: PathBuf,
}

fn import_h200(args: &ImportH200Args) -> Result<(), Failure> {
    let attribution = h200::Attribution {
        gpu: args.gpu.clone(),
        origin: args.origin.clone(),
        measured: args.measured.clone(),
        licence: args.licence.clone(),
    };
    let set = h200::import_dir(&args.dir, &attribution).map_err(|e| input(e.to_string()))?;
    let target = args.out.join("kernels.json");
    std::fs::create_dir_all(&args.out).map_err(|e| Failure {
        code: 1,
        message: format!("{}: cannot create: {e}", args.out.display()),
    })?;
    set.save(&target).map_err(|e| Failure {
        code: 1,
        message: e.to_string(),
    })?;
    println!(
        "wrote {} ({} GEMM, {} grouped GEMM, {} decode and {} prefill attention points)",
        target.display(),
        set.gemm.len(),
        set.grouped.len(),
        set.decode_attention.len(),
        set.prefill_attention.len()
    );
    Ok(())
}

#[derive(Debug, Args)]
struct ImportVidurArgs {
    /// Vidur's `data/` folder (with `profiling/compute` and/or `profiling/network`).
    dir: PathBuf,
    /// Commit of the Vidur repository the folder comes from (recorded in every profile).
    #[arg(long)]
    commit: String,
    /// Repository recorded as the source.
    #[arg(long, default_value = "github.com/microsoft/vidur")]
    repository: String,
    /// Licence of the data (SPDX), recorded in every profile.
    #[arg(long, default_value = "MIT")]
    licence: String,
    /// Import only these models (`org/model`) and network topologies (comma-separated).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Folder to write into.
    #[arg(long, default_value = "profiles/vidur")]
    out: PathBuf,
}

fn import_vidur(args: &ImportVidurArgs) -> Result<(), Failure> {
    let provenance = vidur::Provenance {
        repository: args.repository.clone(),
        commit: args.commit.clone(),
        licence: args.licence.clone(),
    };
    let imported =
        vidur::import_dir(&args.dir, &args.out, &args.only, &provenance).map_err(|e| match e {
            vidur::ImportError::Write(e) => Failure {
                code: 1,
                message: e.to_string(),
            },
            other => input(other.to_string()),
        })?;
    for (path, what) in &imported.written {
        println!("wrote {} ({what})", path.display());
    }
    Ok(())
}

/// A failed invocation: its exit code and one line.
struct Failure {
    code: u8,
    message: String,
}

fn input(message: String) -> Failure {
    Failure { code: 2, message }
}

impl From<CalibrateError> for Failure {
    fn from(e: CalibrateError) -> Self {
        input(e.to_string())
    }
}

fn shape_of(cli: &Cli) -> Result<MoeModelShape, Failure> {
    let mut shape = MoeModelShape::preset(&cli.model).map_err(|e| input(e.to_string()))?;
    if let Some(n) = cli.n_layers {
        shape.n_layers = n;
    }
    if let Some(n) = cli.n_experts {
        shape.n_experts = n;
    }
    if let Some(k) = cli.top_k {
        shape.top_k = k;
    }
    if let Some(f) = cli.expert_ffn {
        shape.expert_ffn = f;
    }
    shape.validate().map_err(|e| input(e.to_string()))?;
    Ok(shape)
}

fn plan_of(cli: &Cli) -> Plan {
    let mut plan = if cli.quick {
        Plan::quick()
    } else {
        Plan::full()
    };
    macro_rules! set {
        ($($field:ident),*) => {
            $(if let Some(v) = cli.$field.clone() {
                plan.$field = v;
            })*
        };
    }
    set!(
        tile,
        warmup,
        dense_limit,
        sparse_step,
        sparse_limit,
        max_batch,
        decode_context,
        contexts,
        context_batches,
        reroute_tokens,
        adapters,
        tensor_parallel,
        gemm_widths
    );
    plan.seed = cli.seed;
    if let Some(n) = cli.repetitions {
        plan.stopping = StoppingRule::fixed(n);
    } else if !cli.quick {
        plan.stopping = StoppingRule {
            confidence: cli.confidence,
            relative_half_width: cli.precision,
            min_repetitions: cli.min_repetitions,
            max_repetitions: cli.max_repetitions,
        };
    }
    plan
}

/// `--for-scenario`: the scenario's one sweep cell.
fn scenario_cell(
    path: &std::path::Path,
    sets: &[String],
) -> Result<(String, expertsim_scenario::scenario::Scenario), Failure> {
    let plan = expertsim_scenario::scenario::load(path, sets).map_err(|e| input(e.to_string()))?;
    if plan.cells.len() != 1 {
        return Err(input(format!(
            "--for-scenario: {} has {} sweep cells; narrow it to one with --set",
            path.display(),
            plan.cells.len()
        )));
    }
    let cell = plan.cells[0].scenario.clone();
    Ok((plan.name, cell))
}

/// `--for-scenario`: what to sample for the scenario's MoE profile.
fn scenario_sampling(
    path: &std::path::Path,
    scenario: &expertsim_scenario::scenario::Scenario,
) -> Result<scenario_points::ScenarioSampling, Failure> {
    scenario_points::for_scenario(scenario)
        .map_err(|e| input(format!("--for-scenario {}: {e}", path.display())))
}

/// A file-name-safe lowercase slug.
fn slug(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if c.is_ascii_alphanumeric() || c == '.' {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_string()
}

/// `--dense-models` (or `--for-scenario` of a family with dense models): the dense-decode
/// calibration of `shapes`.
fn run_dense(cli: &Cli, shapes: &[DenseModelShape]) -> Result<(), Failure> {
    let plan = DensePlan {
        scaling: Scaling {
            widths: cli.scale_widths,
            layers: cli.scale_layers,
        },
        rows: cli
            .dense_rows
            .clone()
            .unwrap_or_else(DensePlan::default_rows),
        contexts: cli
            .dense_contexts
            .clone()
            .unwrap_or_else(DensePlan::default_contexts),
        tile: cli.tile.unwrap_or(64),
        warmup: cli.warmup.unwrap_or(2),
        repetitions: cli.repetitions.unwrap_or(15),
        seed: cli.seed,
    };
    plan.validate()?;
    let started = Instant::now();
    let kind = match cli.backend {
        BackendArg::Cpu => BackendKind::Cpu,
        BackendArg::Cuda => BackendKind::Cuda,
    };
    let mut device = backend::open(kind).map_err(|e| input(e.to_string()))?;
    let profile = dense::calibrate_dense(device.as_mut(), shapes, &plan, &mut |line| {
        eprintln!("  {line}")
    })?;
    let path = cli.output.clone().unwrap_or_else(|| {
        PathBuf::from(format!(
            "profiles/measured/{}_dense-decode-w{}-l{}.json",
            slug(&profile.device),
            plan.scaling.widths,
            plan.scaling.layers
        ))
    });
    profile
        .save(&path)
        .map_err(|message| Failure { code: 1, message })?;
    println!(
        "profiled {} dense models on {} in {:.1} s; wrote {}",
        shapes.len(),
        profile.device,
        started.elapsed().as_secs_f64(),
        path.display()
    );
    Ok(())
}

fn run(cli: &Cli) -> Result<(), Failure> {
    match &cli.command {
        Some(Command::ImportVidur(args)) => return import_vidur(args),
        Some(Command::ImportH200(args)) => return import_h200(args),
        None => {}
    }
    if let Some(names) = &cli.dense_models {
        let shapes = names
            .iter()
            .map(|n| DenseModelShape::preset(n).map_err(|e| input(format!("--dense-models: {e}"))))
            .collect::<Result<Vec<_>, _>>()?;
        return run_dense(cli, &shapes);
    }
    let scenario = match &cli.for_scenario {
        Some(path) => {
            let (name, cell) = scenario_cell(path, &cli.sets)?;
            if let Some(shapes) = scenario_points::dense_models(&cell) {
                return run_dense(cli, &shapes);
            }
            Some((name, scenario_sampling(path, &cell)?))
        }
        None => None,
    };
    let shape = match &scenario {
        Some((_, sampling)) => sampling.shape.clone(),
        None => shape_of(cli)?,
    };
    if cli.analytic.as_deref() == Some("all") {
        let dir = cli
            .output
            .clone()
            .unwrap_or_else(|| PathBuf::from("profiles"));
        let paths = analytic::write_reference_profiles(&dir).map_err(|e| Failure {
            code: 1,
            message: e.to_string(),
        })?;
        for path in paths {
            println!("wrote {}", path.display());
        }
        return Ok(());
    }
    if let Some(gpu) = &cli.analytic {
        let profile = analytic::profile_for(gpu, &shape).map_err(input)?;
        let path = cli.output.clone().unwrap_or_else(|| {
            PathBuf::from(format!(
                "profiles/analytic/{}_{}.json",
                slug(gpu),
                slug(&cli.model)
            ))
        });
        profile.save(&path).map_err(|e| Failure {
            code: 1,
            message: e.to_string(),
        })?;
        println!(
            "wrote the analytic profile of {} on {gpu} to {}",
            shape.name,
            path.display()
        );
        return Ok(());
    }
    let mut plan = plan_of(cli);
    if let Some((_, sampling)) = &scenario {
        sampling.apply(&mut plan);
        eprintln!("sampling for the scenario: {}", sampling.derivation);
    }
    plan.validate()?;
    let started = Instant::now();
    let kind = match cli.backend {
        BackendArg::Cpu => BackendKind::Cpu,
        BackendArg::Cuda => BackendKind::Cuda,
    };
    let mut device = backend::open(kind).map_err(|e| input(e.to_string()))?;
    let points: usize = pipeline::schedule(&plan)
        .iter()
        .map(|(_, xs)| xs.len())
        .sum();
    eprintln!(
        "calibrating {} on {} ({}, {points} points, {}, tile {})",
        shape.name,
        device.device().name,
        kind,
        plan.stopping.describe(),
        plan.tile
    );
    if let Some(libraries) = &device.device().libraries {
        eprintln!(
            "  libraries: {libraries}; timing: {}",
            device.device().timing
        );
    }
    let measured = pipeline::calibrate(
        device.as_mut(),
        &shape,
        &plan,
        &mut |line| eprintln!("  {line}"),
        true,
    )?;
    let stem = match &scenario {
        Some((name, _)) => slug(name),
        None => slug(&cli.model),
    };
    let path = cli.output.clone().unwrap_or_else(|| {
        PathBuf::from(format!(
            "profiles/measured/{}_{stem}.json",
            slug(&measured.calibration.device_name)
        ))
    });
    measured.save(&path).map_err(|e| Failure {
        code: 1,
        message: e.to_string(),
    })?;
    let points: usize = measured
        .calibration
        .measurements
        .iter()
        .map(|m| m.points.len())
        .sum();
    let repetitions: u64 = measured
        .calibration
        .measurements
        .iter()
        .map(|m| match &m.repetitions {
            Some(counts) => counts.iter().map(|&c| u64::from(c)).sum(),
            None => (m.points.len() * plan.stopping.max_repetitions) as u64,
        })
        .sum();
    let at_maximum = measured
        .calibration
        .stopping
        .as_ref()
        .map(|s| format!(", {} points stopped at the maximum", s.points_at_maximum))
        .unwrap_or_default();
    println!(
        "profiled {points} points with {repetitions} repetitions in all (mean {:.1} per point{at_maximum}) on {} in {:.1} s; wrote {}",
        repetitions as f64 / points.max(1) as f64,
        measured.calibration.device_name,
        started.elapsed().as_secs_f64(),
        path.display()
    );
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("expertsim-calibrate: {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use expertsim_scenario::cost::profile::{MeasuredProfile, Profile, SourceKind};
    use expertsim_scenario::serving_family::execution::{CvModel, StragglerModel};

    fn cli(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("expertsim-calibrate").chain(args.iter().copied()))
            .unwrap()
    }

    /// `--backend cpu --quick` writes a profile that the simulator loads and builds both execution
    /// models from, for the preset's shape (what `expertsim run` does with it).
    #[test]
    fn quick_cpu_calibration_writes_a_profile_sim_accepts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cpu.json");
        let args = cli(&[
            "--backend",
            "cpu",
            "--quick",
            "--output",
            path.to_str().unwrap(),
        ]);
        run(&args).unwrap_or_else(|f| panic!("{}", f.message));
        let profile = Profile::load(&path).unwrap();
        assert_eq!(profile.source.kind, SourceKind::Measured);
        let shape = MoeModelShape::qwen1_5_moe_a2_7b();
        profile.check_shape(&shape).unwrap();
        CvModel::new(&profile, &shape, None).unwrap();
        StragglerModel::new(&profile, &shape).unwrap();
        let measured = MeasuredProfile::load(&path).unwrap();
        let c = &measured.calibration;
        assert_eq!(
            (c.backend.as_str(), c.tile_tokens, c.repetitions),
            ("cpu", 4, 1)
        );
        assert_eq!(c.kernel_source_hash, kernels::source::source_hash());
        assert!(
            profile
                .source
                .date
                .as_deref()
                .is_some_and(|d| d.ends_with('Z'))
        );
        let names: Vec<&str> = c.measurements.iter().map(|m| m.name.as_str()).collect();
        for name in [
            "expert_ffn",
            "non_expert_prefill",
            "non_expert_decode",
            "head",
        ] {
            assert!(names.contains(&name), "{names:?}");
        }
        for name in ["reroute/fused/adapters=4", "reroute/unfused/adapters=1"] {
            assert!(names.contains(&name), "{names:?}");
        }
        // The expert curve was sampled at the tile rule's counts: 1, 4, 5, 8.
        let expert = profile
            .expert_curve(shape.hidden, shape.expert_ffn, shape.weight_dtype)
            .unwrap();
        let xs: Vec<f64> = expert.samples().map(|(x, _)| x).collect();
        assert_eq!(xs, vec![1.0, 4.0, 5.0, 8.0]);
        assert!(expert.samples().all(|(_, ns)| ns > 0.0));
    }

    #[test]
    fn bad_input_is_exit_code_2_with_one_line() {
        for args in [
            &["--backend", "cpu", "--quick", "--tile", "6"][..],
            &["--backend", "cpu", "--quick", "--repetitions", "0"],
            &[
                "--backend",
                "cpu",
                "--model",
                "qwen1.5-moe-a2.7b-nf4",
                "--quick",
            ],
            &["--backend", "cpu", "--model", "mixtral"],
            &["--backend", "cpu", "--quick", "--top-k", "99"],
            &["--analytic", "B200"],
            &["--backend", "cpu", "--precision", "0"],
            &["--backend", "cpu", "--min-repetitions", "0"],
            &[
                "--backend",
                "cpu",
                "--min-repetitions",
                "20",
                "--max-repetitions",
                "10",
            ],
            &[
                "--backend",
                "cpu",
                "--for-scenario",
                concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/live/mosaic.toml"),
                "--dense-rows",
                "3,1",
            ],
            &[
                "--backend",
                "cpu",
                "--for-scenario",
                "no/such/scenario.toml",
            ],
        ] {
            let failure = run(&cli(args))
                .err()
                .unwrap_or_else(|| panic!("{args:?} succeeded"));
            assert_eq!(failure.code, 2, "{args:?}: {}", failure.message);
            assert!(!failure.message.contains('\n'), "{}", failure.message);
        }
    }

    /// Without a GPU the cuda backend is a one-line exit 2.
    #[test]
    fn cuda_without_a_gpu_exits_2() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("never.json");
        match run(&cli(&[
            "--backend",
            "cuda",
            "--quick",
            "--output",
            path.to_str().unwrap(),
        ])) {
            Err(failure) => {
                assert_eq!(failure.code, 2);
                assert!(
                    failure.message.starts_with("no CUDA driver found")
                        || failure.message.starts_with("no device")
                        || failure.message.starts_with("NVRTC not found")
                        || failure.message.starts_with("cuBLAS not found"),
                    "{}",
                    failure.message
                );
                assert!(!path.exists());
            }
            Ok(()) => println!("a CUDA device is present; the no-GPU path was not exercised"),
        }
    }

    /// On a GPU, `--backend cuda --quick` writes a measured profile labelled with the device
    /// (name, compute capability, driver, the cuBLAS it used) and timed with device events,
    /// which the simulator accepts.
    #[test]
    #[ignore = "needs a GPU: scripts/gpu_validate.sh"]
    fn gpu_quick_calibration_writes_a_device_profile() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gpu.json");
        let args = cli(&[
            "--backend",
            "cuda",
            "--quick",
            "--output",
            path.to_str().unwrap(),
        ]);
        run(&args).unwrap_or_else(|f| {
            panic!(
                "this test needs a GPU (scripts/gpu_validate.sh): {}",
                f.message
            )
        });
        let profile = Profile::load(&path).unwrap();
        assert_eq!(profile.source.kind, SourceKind::Measured);
        profile
            .check_shape(&MoeModelShape::qwen1_5_moe_a2_7b())
            .unwrap();
        assert!(
            !profile.expert_execution.is_concurrent(),
            "the CUDA backend runs one GEMM pair per expert, one expert after another"
        );
        assert!(
            profile.source.notes.contains("with cuBLAS "),
            "{}",
            profile.source.notes
        );
        let c = &MeasuredProfile::load(&path).unwrap().calibration;
        assert_eq!(c.backend, "cuda");
        assert!(c.timing.starts_with("device events"), "{}", c.timing);
        assert!(!c.device_name.is_empty() && profile.gpu == c.device_name);
        assert!(
            c.compute_capability.is_some() && c.driver.is_some(),
            "{c:?}"
        );
        for m in &c.measurements {
            assert!(
                m.points
                    .iter()
                    .all(|p| p[1] > 0.0 && p[4] <= p[1] && p[1] <= p[5]),
                "{}",
                m.name
            );
        }
    }

    /// A quick CPU calibration of the live CAPS scenario's counts with `extra` flags (one
    /// repetition, no warm-up), loaded back.
    fn calibrate_caps_counts(extra: &[&str]) -> MeasuredProfile {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("caps.json");
        let scenario = concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/live/caps.toml");
        let mut args = vec!["--backend", "cpu", "--for-scenario", scenario];
        args.extend_from_slice(extra);
        args.extend(["--repetitions", "1", "--warmup", "0", "--output"]);
        args.push(path.to_str().unwrap());
        run(&cli(&args)).unwrap_or_else(|f| panic!("{}", f.message));
        MeasuredProfile::load(&path).unwrap()
    }

    /// The measured `x` values of measurement `name`.
    fn xs(measured: &MeasuredProfile, name: &str) -> Vec<f64> {
        let mut all = measured.calibration.measurements.iter();
        let m = all.find(|m| m.name == name).unwrap();
        assert!(m.points.iter().all(|p| p[1] > 0.0), "{name}");
        m.points.iter().map(|p| p[0]).collect()
    }

    /// `--for-scenario` measures the scenario's shape at its counts only (by hand for the live
    /// CAPS case: tokens 1, 64, 65, 128, 129, 192, 193, 256; batches 1-4), and a fixed
    /// `--repetitions` records no stopping rule.
    #[test]
    fn for_scenario_measures_only_the_scenario_counts() {
        let measured = calibrate_caps_counts(&[]);
        measured
            .profile
            .check_shape(&MoeModelShape::live_tiny_moe())
            .unwrap();
        assert_eq!(
            xs(&measured, "expert_ffn"),
            vec![1.0, 64.0, 65.0, 128.0, 129.0, 192.0, 193.0, 256.0]
        );
        assert_eq!(xs(&measured, "non_expert_decode"), vec![1.0, 2.0, 3.0, 4.0]);
        assert_eq!(measured.calibration.measurements.len(), 6);
        assert!(measured.calibration.stopping.is_none());
        assert_eq!(measured.calibration.repetitions, 1);
    }

    /// The expert's two GEMMs are measured alone at the expert curve's counts, and with the
    /// whole layer they split it: each expert's GEMM pair `w13 + w2`, the fixed part the rest
    /// (at least 0).
    #[test]
    fn the_expert_gemms_split_the_layer() {
        let measured = calibrate_caps_counts(&[]);
        let names: Vec<&str> = measured
            .calibration
            .measurements
            .iter()
            .map(|m| m.name.as_str())
            .collect();
        assert_eq!(
            names,
            [
                "expert_ffn",
                "expert_gemm/w13",
                "expert_gemm/w2",
                "non_expert_prefill",
                "non_expert_decode",
                "head"
            ]
        );
        let expert = xs(&measured, "expert_ffn");
        assert_eq!(xs(&measured, "expert_gemm/w13"), expert);
        assert_eq!(xs(&measured, "expert_gemm/w2"), expert);
        let median = |name: &str| -> Vec<f64> {
            let m = measured.calibration.measurements.iter();
            let m = m.clone().find(|m| m.name == name).unwrap();
            m.points.iter().map(|p| p[1]).collect()
        };
        let (layer, w13, w2) = (
            median("expert_ffn"),
            median("expert_gemm/w13"),
            median("expert_gemm/w2"),
        );
        let entry = &measured.profile.expert_ffn[0];
        let split = entry
            .split
            .as_ref()
            .expect("a measured profile splits its layer");
        for (i, &x) in expert.iter().enumerate() {
            let pair = w13[i] + w2[i];
            assert_eq!(split.expert_gemms.at(x), pair, "tokens {x}");
            assert_eq!(split.fixed.at(x), (layer[i] - pair).max(0.0), "tokens {x}");
        }
    }

    #[test]
    fn analytic_mode_writes_a_labelled_profile() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h200.json");
        run(&cli(&[
            "--analytic",
            "H200",
            "--output",
            path.to_str().unwrap(),
        ]))
        .unwrap_or_else(|f| panic!("{}", f.message));
        let profile = Profile::load(&path).unwrap();
        assert_eq!(profile.source.kind, SourceKind::AnalyticRoofline);
        assert_eq!(profile.gpu, "H200");
    }

    /// `--dense-models` measures the live-scaled model on the given grid; the profile prices a
    /// sampled step with that sample, and bad grids or names are a one-line exit 2.
    #[test]
    fn dense_calibration_writes_a_profile_of_the_live_scaled_model() {
        use expertsim_scenario::serving_family::dense_profile::DenseDecodeProfile;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dense.json");
        let out = path.to_str().unwrap();
        let base = [
            "--backend",
            "cpu",
            "--dense-models",
            "granite-3.1-8b-instruct",
            "--repetitions",
            "1",
            "--warmup",
            "0",
            "--output",
            out,
        ];
        let with = |extra: &[&'static str]| {
            let mut args: Vec<&str> = base.to_vec();
            args.extend_from_slice(extra);
            cli(&args)
        };
        run(&with(&["--dense-rows", "1,3", "--dense-contexts", "1,8"]))
            .unwrap_or_else(|f| panic!("{}", f.message));
        let profile = DenseDecodeProfile::load(&path).unwrap();
        assert_eq!(profile.scaling, LIVE_SCALING);
        let full = DenseModelShape::preset("granite-3.1-8b-instruct").unwrap();
        let model = &profile.models[0];
        assert_eq!(model.shape, LIVE_SCALING.apply(&full));
        assert_eq!(
            (model.rows.clone(), model.contexts.clone()),
            (vec![1, 3], vec![1, 8])
        );
        assert!(model.load_ns.is_some_and(|ns| ns > 0.0));
        let cost = profile.model_cost(&full).unwrap();
        assert_eq!(cost.step_ns(3, 8), model.step_ns[1][1]);
        for extra in [
            &["--dense-rows", "3,1"][..],
            &["--dense-contexts", "0,8"],
            &["--scale-layers", "0"],
        ] {
            let failure = run(&with(extra)).expect_err("bad grid accepted");
            assert_eq!(failure.code, 2, "{extra:?}: {}", failure.message);
        }
        let unknown = cli(&[
            "--backend",
            "cpu",
            "--dense-models",
            "gpt-5",
            "--output",
            out,
        ]);
        let failure = run(&unknown).expect_err("unknown model accepted");
        assert!(failure.code == 2 && failure.message.contains("--dense-models"));
    }

    #[test]
    fn default_output_names_are_slugs() {
        assert_eq!(slug("NVIDIA H200 NVL"), "nvidia-h200-nvl");
        assert_eq!(slug("AMD EPYC (r) 9004"), "amd-epyc-r-9004");
    }
}
