//! Reproduces MOSAIC's headline tables with the library (until `expertsim run` runs the MOSAIC
//! family): the paper's inputs (Table 3 slot counts, pools, load costs, model shapes) go in,
//! the simulator derives every time; printed beside the paper's numbers.
//!
//! `cargo run -p expertsim-strategies --profile test --example mosaic_reproduce`

use sim::mosaic::config::{
    AggregatorFile, CalibrationFile, ClusterFile, DatasetFile, OutputFile, PoolFile, ServingFile,
};
use sim::mosaic::{GateConfig, MosaicConfig, PlacementConfig, simulate};
use std::collections::BTreeMap;
use std::path::Path;

const SEEDS: [u64; 3] = [0, 1, 2];

fn config(
    pool: &str,
    dataset: &str,
    slots: Option<&[(&str, u32)]>,
    placement: PlacementConfig,
    gate: GateConfig,
) -> MosaicConfig {
    MosaicConfig {
        serving: ServingFile::default(),
        cluster: ClusterFile { n_workers: 4 },
        pool: Some(PoolFile {
            preset: pool.into(),
        }),
        experts: vec![],
        aggregator: AggregatorFile::default(),
        dataset: DatasetFile {
            preset: Some(dataset.into()),
            name: None,
            questions: None,
            slots: slots.map(|s| {
                s.iter()
                    .map(|(n, c)| (n.to_string(), *c))
                    .collect::<BTreeMap<_, _>>()
            }),
            calibration_questions: None,
            prompt_tokens_mean: None,
            prompt_tokens_sigma: 0.3,
            buckets: None,
            reasoning_output_scale: 1.0,
            instruction_output_scale: 1.0,
        },
        calibration: CalibrationFile::default(),
        placement,
        gate,
        output: OutputFile {
            record_solve_time: true,
        },
    }
}

/// Mean over the seeds of every scalar, plus the seed-0 details.
fn run(config: &MosaicConfig) -> (BTreeMap<String, f64>, serde_json::Value) {
    let scenario = config.validate(Path::new(".")).expect("valid scenario");
    let mut sums: BTreeMap<String, f64> = BTreeMap::new();
    let mut details = serde_json::Value::Null;
    for seed in SEEDS {
        let mut placement = strategies::placement::build(&scenario.placement);
        let mut gate = strategies::gating::build(&scenario.gate);
        let out = simulate(&scenario, seed, placement.as_mut(), gate.as_mut());
        for (name, value) in &out.scalars {
            *sums.entry(name.clone()).or_default() += value / SEEDS.len() as f64;
        }
        if seed == 0 {
            details = out.details;
        }
    }
    (sums, details)
}

fn ilp() -> PlacementConfig {
    PlacementConfig::Ilp {
        time_limit_s: 10.0,
        max_models_per_worker: 2,
        valid_bound: true,
        warm_start: true,
    }
}

fn print_plan(label: &str, details: &serde_json::Value) {
    if let Some(error) = details["error"].as_str() {
        println!("    {label:<6} seed 0: failed: {error}");
        return;
    }
    let plan: Vec<String> = details["plan"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(w, sessions)| {
            let s: Vec<String> = sessions
                .as_array()
                .unwrap()
                .iter()
                .map(|s| format!("{}x{}", s["model"].as_str().unwrap(), s["prompts"]))
                .collect();
            format!("W{w}[{}]", s.join(" + "))
        })
        .collect();
    println!("    {label:<6} seed 0: {}", plan.join("  "));
}

fn main() {
    // Paper: expert-stage, aggregator-stage and end-to-end speedups of MOSAIC (ILP + tau = 2/3)
    // over round-robin (no gate), and the skip shares at tau = 1 and tau = 2/3.
    let paper = [
        ("mmlu_pro", 1.69, 1.74, 1.71, 45.71, 84.62, 0.24, -0.62),
        ("medmcqa", 1.53, 4.23, 2.04, 47.48, 90.18, -0.04, 0.32),
        ("gpqa", 2.54, 1.53, 2.34, 37.37, 87.37, 1.00, 0.49),
    ];
    println!("MOSAIC reproduction (mean of seeds 0, 1, 2; A100-80GB analytic decode model)\n");
    println!(
        "{:<9} {:>8} {:>8} {:>8} {:>8} | {:>7} {:>7} | {:>7} {:>7} | {:>7} {:>7} | {:>6} {:>6}",
        "dataset",
        "RR exp",
        "ILP exp",
        "LPT exp",
        "DP exp",
        "exp x",
        "paper",
        "agg x",
        "paper",
        "e2e x",
        "paper",
        "gap",
        "solve"
    );
    let mut plans = Vec::new();
    let mut gates = Vec::new();
    for (name, p_exp, p_agg, p_e2e, p_skip1, p_skip23, p_d1, p_d23) in paper {
        let (rr, rr_detail) = run(&config(
            "hybrid",
            name,
            None,
            PlacementConfig::RoundRobin,
            GateConfig::None,
        ));
        let (mosaic, ilp_detail) = run(&config(
            "hybrid",
            name,
            None,
            ilp(),
            GateConfig::Threshold { tau: 2.0 / 3.0 },
        ));
        let (lpt, _) = run(&config(
            "hybrid",
            name,
            None,
            PlacementConfig::Lpt {
                max_models_per_worker: 2,
            },
            GateConfig::None,
        ));
        let (dp, _) = run(&config(
            "hybrid",
            name,
            None,
            PlacementConfig::DataParallel,
            GateConfig::None,
        ));
        let (tau1, _) = run(&config(
            "hybrid",
            name,
            None,
            ilp(),
            GateConfig::Threshold { tau: 1.0 },
        ));
        let e = |m: &BTreeMap<String, f64>, k: &str| m[k];
        println!(
            "{:<9} {:>8.0} {:>8.0} {:>8.0} {:>8.0} | {:>6.2}x {:>6.2}x | {:>6.2}x {:>6.2}x | {:>6.2}x {:>6.2}x | {:>6.4} {:>5.3}s",
            name,
            e(&rr, "expert_makespan_s"),
            e(&mosaic, "expert_makespan_s"),
            e(&lpt, "expert_makespan_s"),
            e(&dp, "expert_makespan_s"),
            e(&rr, "expert_makespan_s") / e(&mosaic, "expert_makespan_s"),
            p_exp,
            e(&rr, "aggregator_s") / e(&mosaic, "aggregator_s"),
            p_agg,
            e(&rr, "end_to_end_s") / e(&mosaic, "end_to_end_s"),
            p_e2e,
            e(&mosaic, "ilp_gap"),
            e(&mosaic, "ilp_solve_time_s"),
        );
        plans.push((name, rr_detail, ilp_detail, rr.clone(), mosaic.clone()));
        gates.push((
            name,
            e(&tau1, "skip_pct"),
            p_skip1,
            e(&mosaic, "skip_pct"),
            p_skip23,
            e(&tau1, "accuracy_change_pp"),
            p_d1,
            e(&mosaic, "accuracy_change_pp"),
            p_d23,
            e(&rr, "aggregator_s"),
            e(&mosaic, "aggregator_s"),
            e(&rr, "gpu_idle_pct"),
            e(&mosaic, "gpu_idle_pct"),
        ));
    }
    println!("\nAbsolute stage times (s): RR (no gate) vs MOSAIC (ILP + tau = 2/3)");
    for (name, _, _, rr, mosaic) in &plans {
        println!(
            "  {name:<9} expert {:>6.0} -> {:>6.0}   aggregator {:>6.0} -> {:>6.0}   end-to-end {:>6.0} -> {:>6.0}   predicted ILP makespan {:>6.0} (error {:+.1} %)",
            rr["expert_makespan_s"],
            mosaic["expert_makespan_s"],
            rr["aggregator_s"],
            mosaic["aggregator_s"],
            rr["end_to_end_s"],
            mosaic["end_to_end_s"],
            mosaic["predicted_makespan_s"],
            mosaic["prediction_error_pct"],
        );
    }
    println!("\nGate (Table 1): skip % and accuracy change (pp), ours vs paper");
    for (name, s1, ps1, s23, ps23, d1, pd1, d23, pd23, _, _, idle_rr, idle_ilp) in &gates {
        println!(
            "  {name:<9} tau=1: skip {s1:>6.2} ({ps1:>6.2})  dacc {d1:>+5.2} ({pd1:>+5.2})   tau=2/3: skip {s23:>6.2} ({ps23:>6.2})  dacc {d23:>+5.2} ({pd23:>+5.2})   idle RR {idle_rr:>4.1} % ILP {idle_ilp:>4.1} %"
        );
    }
    println!("\nPlacements (seed 0)");
    for (name, rr, ilp, _, _) in &plans {
        println!("  {name}");
        print_plan("RR", rr);
        print_plan("ILP", ilp);
    }

    // The data-parallel trade-off on MMLU-Pro (section 3, Figure 3a): DP better than RR for
    // the default and all-reasoning pools, ~29 % worse for all-non-reasoning.
    println!("\nData parallelism vs round-robin on MMLU-Pro (expert stage, s)");
    let all_r: &[(&str, u32)] = &[
        ("LlamaR1", 1400),
        ("QwenR1", 1500),
        ("DLERR1", 1200),
        ("ThinkerR1", 900),
        ("StratosR1", 600),
        ("SkyworkR1", 700),
    ];
    let all_non_r: &[(&str, u32)] = &[
        ("Gemma", 3339),
        ("Qwen", 1512),
        ("Exaone", 700),
        ("GLM", 603),
        ("Llama", 110),
        ("Granite", 36),
    ];
    for (pool, slots, paper_line) in [
        ("hybrid", None, "paper: DP ~9 % faster"),
        (
            "all_reasoning",
            Some(all_r),
            "paper: 7080 -> 6431 (DP 9 % faster)",
        ),
        (
            "all_non_reasoning",
            Some(all_non_r),
            "paper: 631 -> 892 (DP ~29 % slower)",
        ),
    ] {
        let (rr, _) = run(&config(
            pool,
            "mmlu_pro",
            slots,
            PlacementConfig::RoundRobin,
            GateConfig::None,
        ));
        let (dp, _) = run(&config(
            pool,
            "mmlu_pro",
            slots,
            PlacementConfig::DataParallel,
            GateConfig::None,
        ));
        let (ilp_run, _) = run(&config(pool, "mmlu_pro", slots, ilp(), GateConfig::None));
        println!(
            "  {pool:<18} RR {:>6.0}  DP {:>6.0} ({:+.1} % time)  ILP {:>6.0}  RR idle {:>4.1} %   {paper_line}",
            rr["expert_makespan_s"],
            dp["expert_makespan_s"],
            100.0 * (dp["expert_makespan_s"] / rr["expert_makespan_s"] - 1.0),
            ilp_run["expert_makespan_s"],
            rr["gpu_idle_pct"],
        );
    }
}
