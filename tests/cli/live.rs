//! `expertsim live` end to end: a CPU run prints the fidelity table and writes fidelity.json
//! and its figures; `--backend cuda` without a GPU fails with one line and writes nothing; the
//! probe flags a profile that does not describe the device (a warning, or with
//! `--strict-probe` an error that writes nothing); `--calibrate` measures a profile for the
//! scenario and prices the run with it; Chimera, CAPS, MOSAIC and ExpertWeave run live through
//! the step-cost seam with the simulated run's decisions.

use std::path::{Path, PathBuf};
use std::process::Command;

fn expertsim() -> Command {
    Command::new(env!("CARGO_BIN_EXE_expertsim"))
}

/// `scenarios/live/<name>.toml` in the workspace.
fn live_scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("scenarios/live/{name}.toml"))
}

fn scenario() -> PathBuf {
    live_scenario("gem")
}

/// The `fidelity.json` a live run wrote in `out`.
fn read_report(out: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("fidelity.json")).unwrap()).unwrap()
}

/// Runs `file` live on the CPU with the predicted clock (one repetition, then `extra`) and
/// checks what every preset's run through the step-cost seam must show: it succeeds, the report
/// is the serving family's, the live decisions are the simulated run's, every step was both
/// measured and predicted, and each metric's live value is its simulated one. Returns the
/// temporary folder (the run wrote in `live/` under it) and the report.
fn live_through_the_seam(file: &Path, extra: &[&str]) -> (tempfile::TempDir, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("live");
    let output = expertsim()
        .args(["live", "--backend", "cpu", "--clock", "predicted"])
        .args(["--repetitions", "1"])
        .args(extra)
        .arg("--out")
        .arg(&out)
        .arg(file)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let report = read_report(&out);
    assert_eq!(report["family"], "serving");
    assert_eq!(report["decisions"]["identical"], true);
    let steps = report["steps"].as_array().unwrap();
    assert!(!steps.is_empty());
    assert!(
        steps
            .iter()
            .all(|s| s["measured_ns"].as_f64().unwrap() > 0.0
                && s["predicted_ns"].as_f64().unwrap() > 0.0)
    );
    // Simulated and live metrics are the same run when the predicted clock drives both.
    for pair in report["metrics"].as_array().unwrap() {
        assert_eq!(pair["simulated"], pair["live"], "{pair}");
    }
    (dir, report)
}

#[test]
fn live_cpu_run_writes_the_fidelity_report() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("live");
    let output = expertsim()
        .args(["live", "--backend", "cpu", "--out"])
        .arg(&out)
        .arg(scenario())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("MAPE") && stdout.contains("emulated"),
        "{stdout}"
    );
    let report = read_report(&out);
    assert_eq!(report["backend"], "cpu");
    assert_eq!(report["decisions"]["identical"], true);
    assert!(!report["steps"].as_array().unwrap().is_empty());
    assert!(out.join("figures/fidelity.png").is_file());
    // The run measures its own timing noise (5 repetitions a launch) and prints its verdict.
    assert!(
        stdout.contains("timing noise: repetitions spread"),
        "{stdout}"
    );
    assert!(report["timing_noise"]["spread_pct"].as_f64().unwrap() >= 0.0);
    assert!(report["timing_noise"]["noisy"].is_boolean());

    // A second run into the same folder keeps the first's report and says where it wrote.
    let first = std::fs::read(out.join("fidelity.json")).unwrap();
    let again = expertsim()
        .args(["live", "--backend", "cpu", "--no-figures", "--out"])
        .arg(&out)
        .arg(scenario())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success(), "{stderr}");
    assert!(
        stderr.contains("holds an earlier live run's fidelity.json") && stderr.contains("live-2"),
        "{stderr}"
    );
    assert_eq!(std::fs::read(out.join("fidelity.json")).unwrap(), first);
    assert!(dir.path().join("live-2/fidelity.json").is_file());
}

#[test]
fn live_refuses_a_serving_scenario_it_cannot_run_before_probing() {
    // A dense model on a tensor-parallel pair: live mode runs dense replicas one GPU each.
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/serving/quick.toml"),
    )
    .unwrap()
    .replace("tensor_parallel = 1", "tensor_parallel = 2");
    assert!(text.contains("tensor_parallel = 2"));
    let file = dir.path().join("tp2.toml");
    std::fs::write(&file, text).unwrap();
    let output = expertsim()
        .args(["live", "--backend", "cpu"])
        .arg(&file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("live mode runs dense replicas of the serving family")
            && stderr.contains("replica.gpus = 1"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty(), "nothing before the refusal");
}

#[test]
fn live_cuda_without_a_gpu_fails_cleanly_and_writes_nothing() {
    if kernels_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("live");
    let output = expertsim()
        .args(["live", "--backend", "cuda", "--out"])
        .arg(&out)
        .arg(scenario())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("error: ") && stderr.contains("backend"),
        "{stderr}"
    );
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(!out.exists());
}

/// Whether this machine has an NVIDIA driver (then the CUDA failure test does not apply).
fn kernels_present() -> bool {
    ["/dev/nvidia0", "/proc/driver/nvidia/version"]
        .iter()
        .any(|p| Path::new(p).exists())
}

/// Chimera (the serving family's preset: two dense replica groups serving APPS workflows) runs
/// live through the serving layer's step-cost seam: with the predicted clock the live run's
/// engine steps are the simulated run's, step for step, every step was measured, and both
/// engines ran.
#[test]
fn chimera_runs_live_through_the_step_cost_seam() {
    let (_dir, report) = live_through_the_seam(&live_scenario("chimera"), &[]);
    let steps = report["steps"].as_array().unwrap();
    assert!(steps.len() > 100, "{}", steps.len());
    for engine in ["engine 0 (", "engine 1 ("] {
        assert!(
            steps
                .iter()
                .any(|s| s["what"].as_str().is_some_and(|n| n.starts_with(engine))),
            "no step of {engine}"
        );
    }
}

/// MOSAIC (the serving family's preset: placed sessions of dense replica groups, a question
/// workload with its gated aggregator) runs live through `LiveStep`: every continuous-batching
/// step of every session a measured decode of its model; with the predicted clock the live
/// run's placement, loads, steps (the aggregator's among them) and gate decisions are the
/// simulated run's, in the same order, and so are its metrics, which are `expertsim run`'s.
#[test]
fn mosaic_runs_live_through_the_step_cost_seam() {
    let file = live_scenario("mosaic");
    let (dir, report) = live_through_the_seam(&file, &["--no-probe"]);
    let steps = report["steps"].as_array().unwrap();
    // Every expert's sessions ran steps.
    for model in ["Qwen2.5-7B", "Llama-3.1-8B", "granite-3.1-8b"] {
        assert!(
            steps.iter().any(|s| s["what"]
                .as_str()
                .unwrap()
                .to_lowercase()
                .contains(&model.to_lowercase())),
            "no step of {model}"
        );
    }
    // The workers ran their planned sessions, each loading its model once.
    let metrics = report["metrics"].as_array().unwrap();
    let loads = metrics
        .iter()
        .find(|m| m["metric"] == "model_loads")
        .unwrap()["simulated"]
        .as_f64()
        .unwrap();
    assert!(loads >= 3.0, "{loads}");
    // The decision log is every step, then one gate decision per question (6), each naming
    // the question it decides, compared line by line: the same questions skipped, in the same
    // order.
    let decisions = &report["decisions"];
    assert_eq!(decisions["simulated_count"], steps.len() + 6, "{decisions}");
    assert_eq!(decisions["live_count"], decisions["simulated_count"]);
    let compared = decisions["compared"].as_str().unwrap();
    assert!(
        compared.contains("aggregation gate") && compared.contains("naming its question"),
        "{decisions}"
    );
    // The question metrics are `expertsim run`'s for the same seed, and both gate outcomes
    // occur: some questions skipped, some aggregated (the aggregator's session loaded and ran).
    let ran = dir.path().join("run");
    let output = expertsim()
        .args(["run", "--no-figures", "--out"])
        .arg(&ran)
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ran.join("results.json")).unwrap()).unwrap();
    let run = &results["cells"][0]["runs"][0];
    assert_eq!(run["seed"], 5);
    for name in [
        "skip_pct",
        "aggregator_s",
        "expert_makespan_s",
        "end_to_end_s",
        "accuracy_pct",
        "model_loads",
    ] {
        let live = metrics
            .iter()
            .find(|m| m["metric"] == name)
            .unwrap_or_else(|| panic!("no {name} in {metrics:?}"));
        let simulated = run["scalars"][name].as_f64().unwrap();
        assert!(
            (live["live"].as_f64().unwrap() - simulated).abs() <= 1e-9 * simulated.abs().max(1.0),
            "{name}: live {live} against expertsim run's {simulated}"
        );
    }
    let skip = run["scalars"]["skip_pct"].as_f64().unwrap();
    assert!(skip > 0.0 && skip < 100.0, "skip_pct {skip}");
    assert!(run["scalars"]["aggregator_s"].as_f64().unwrap() > 0.0);
    assert_eq!(run["details"]["questions"]["questions"], 6);
    let aggregator = &run["details"]["sessions"]["aggregator"];
    assert!(!aggregator.is_null(), "{}", run["details"]["sessions"]);
}

fn caps_scenario() -> PathBuf {
    live_scenario("caps")
}

/// The committed CPU profile of the live CAPS case with every measured time (the probe's
/// reference and the curves) multiplied by 1000: no device this test runs on is 1000x slower
/// than a CPU that ran those kernels, so the probe is off by orders of magnitude more than
/// its 10 % threshold whatever the machine's load.
fn profile_scaled_by_1000(dir: &Path) -> PathBuf {
    let committed =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles/measured/amd-epyc_live-tiny-moe.json");
    let mut profile: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(committed).unwrap()).unwrap();
    let scale_rows = |rows: &mut serde_json::Value, columns: std::ops::Range<usize>| {
        for row in rows.as_array_mut().unwrap() {
            for c in columns.clone() {
                row[c] = (row[c].as_f64().unwrap() * 1000.0).into();
            }
        }
    };
    for m in profile["calibration"]["measurements"]
        .as_array_mut()
        .unwrap()
    {
        scale_rows(&mut m["points"], 1..6);
    }
    for curve in [
        "non_expert_prefill",
        "non_expert_decode",
        "head",
        "decode_step",
    ] {
        scale_rows(&mut profile[curve]["samples"], 1..2);
    }
    scale_rows(&mut profile["expert_ffn"][0]["curve"]["samples"], 1..2);
    let path = dir.join("scaled.json");
    std::fs::write(&path, serde_json::to_string_pretty(&profile).unwrap()).unwrap();
    path
}

#[test]
fn the_probe_warns_when_the_profile_does_not_describe_the_device() {
    let dir = tempfile::tempdir().unwrap();
    let profile = profile_scaled_by_1000(dir.path());
    let set = format!("replica.scheduler.profile=\"{}\"", profile.display());
    let out = dir.path().join("warned");
    let output = expertsim()
        .args([
            "live",
            "--backend",
            "cpu",
            "--repetitions",
            "1",
            "--no-figures",
        ])
        .args(["--set", &set, "--out"])
        .arg(&out)
        .arg(caps_scenario())
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(output.status.success(), "{stdout}{stderr}");
    assert!(
        stderr.contains("warning: profile") && stderr.contains("does not describe this device"),
        "{stderr}"
    );
    assert!(
        stderr.contains("expertsim-calibrate")
            && stderr.contains("--backend cpu --for-scenario")
            && stderr.contains("--calibrate"),
        "{stderr}"
    );
    // The profile to keep goes to a new file in the run's folder, never over the one in use.
    assert!(
        stderr.contains(&format!(
            "--output {}",
            std::path::absolute(out.join("recalibrated-profile.json"))
                .unwrap()
                .display()
        )),
        "{stderr}"
    );
    assert!(
        !stderr.contains(&format!("--output {}", profile.display())),
        "{stderr}"
    );
    assert!(
        stdout.contains("probe of") && stdout.contains("expert_ffn"),
        "{stdout}"
    );
    let report = read_report(&out);
    let probe = &report["probe"];
    assert_eq!(probe["status"], "ran");
    assert_eq!(probe["verdict"], "does_not_describe");
    assert_eq!(probe["threshold_pct"], 10.0);
    assert_eq!(probe["points"].as_array().unwrap().len(), 12);
    assert!(
        probe["median_error_pct"].as_f64().unwrap() > 1000.0,
        "{probe}"
    );

    // --strict-probe: the same failure is an error, and nothing is written.
    let strict = dir.path().join("strict");
    let output = expertsim()
        .args([
            "live",
            "--backend",
            "cpu",
            "--repetitions",
            "1",
            "--strict-probe",
        ])
        .args(["--set", &set, "--out"])
        .arg(&strict)
        .arg(caps_scenario())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("error: profile"), "{stderr}");
    assert!(!strict.exists());
}

#[test]
fn live_calibrate_measures_the_scenario_profile_and_prices_the_run_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("calibrated");
    let output = expertsim()
        .args([
            "live",
            "--backend",
            "cpu",
            "--repetitions",
            "1",
            "--no-figures",
        ])
        // A zero threshold fails the probe of the profile just measured: the warning then
        // blames the device's drift and does not advise --calibrate again.
        .args(["--calibrate", "--probe-threshold", "0", "--out"])
        .arg(&out)
        .arg(caps_scenario())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}{stderr}");
    assert!(
        stderr.contains("it was measured moments ago")
            && stderr.contains("rerun when the machine is quiet"),
        "{stderr}"
    );
    let warning = &stderr[stderr.find("warning: profile").unwrap()..];
    assert!(!warning.contains("--calibrate"), "{warning}");
    let profile_path = out.join("calibrated-profile.json");
    let profile: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&profile_path).unwrap()).unwrap();
    // Only the scenario's counts: 4 requests x 64 prompt tokens, tile 64 (see
    // calibrate::scenario_points), batches up to 4.
    let xs = |name: &str| -> Vec<f64> {
        profile["calibration"]["measurements"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .unwrap()["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p[0].as_f64().unwrap())
            .collect()
    };
    assert_eq!(
        xs("expert_ffn"),
        vec![1.0, 64.0, 65.0, 128.0, 129.0, 192.0, 193.0, 256.0]
    );
    assert_eq!(xs("head"), vec![1.0, 2.0, 3.0, 4.0]);
    // The expert's two GEMMs alone at the expert curve's counts, which split the layer.
    assert_eq!(xs("expert_gemm/w13"), xs("expert_ffn"));
    assert_eq!(xs("expert_gemm/w2"), xs("expert_ffn"));
    assert!(profile["expert_ffn"][0]["split"].is_object());
    assert!(
        profile["calibration"]["stopping"]["total_repetitions"]
            .as_u64()
            .unwrap()
            >= 240
    );
    assert!(
        stdout.contains("priced by:") && stdout.contains("calibrated-profile.json"),
        "{stdout}"
    );
    let report = read_report(&out);
    assert!(
        report["profile"]
            .as_str()
            .unwrap()
            .ends_with("calibrated-profile.json"),
        "{}",
        report["profile"]
    );
    // 8 expert, 8 prefill, 4 decode and 4 head points, and the 2 x 8 expert GEMMs.
    assert_eq!(report["calibrated"]["points"], 40);
    assert_eq!(report["probe"]["status"], "ran");
}

/// CAPS runs live through the same wrapper: each static batch is one step of the replica,
/// predicted by the scenario's step cost and measured on the kernels; with the predicted clock
/// the live run forms the simulated run's batches and reports its metrics exactly.
#[test]
fn caps_runs_live_through_the_step_cost_seam() {
    let (_dir, report) = live_through_the_seam(&caps_scenario(), &[]);
    let steps = report["steps"].as_array().unwrap();
    // One step per batch: as many steps as the decision log has batches.
    assert_eq!(
        steps.len() as u64,
        report["decisions"]["simulated_count"].as_u64().unwrap()
    );
}

/// The ExpertWeave preset runs live on the serving family's continuous replica: its steps are
/// predicted by the replica's step cost (the profile's GEMMs, expert entry and rerouting series)
/// and measured on the kernels (each layer's GEMM, the rerouting kernel, the MoE layer on the base
/// experts and adapter copies the simulator routed to); with the predicted clock the live run
/// makes the simulated run's decisions and reports its metrics.
#[test]
fn expertweave_runs_live_through_the_step_cost_seam() {
    let (_dir, report) = live_through_the_seam(&live_scenario("expertweave"), &[]);
    assert!(
        report["model"].as_str().unwrap().contains("live-tiny-mla"),
        "{}",
        report["model"]
    );
    let steps = report["steps"].as_array().unwrap();
    // One decision line per step.
    assert_eq!(
        steps.len() as u64,
        report["decisions"]["simulated_count"].as_u64().unwrap()
    );
    assert!(
        steps
            .iter()
            .all(|s| s["what"].as_str().unwrap().contains("routed per"))
    );
    let metrics = report["metrics"].as_array().unwrap();
    // Something was served, so the latencies are numbers.
    let ttft = metrics
        .iter()
        .find(|m| m["metric"] == "ttft_mean_ms")
        .unwrap();
    assert!(ttft["live"].as_f64().unwrap() > 0.0, "{ttft}");
}
