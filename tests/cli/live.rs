//! `expertsim live` end to end: a CPU run prints the fidelity table and writes fidelity.json
//! and its figures; `--backend cuda` without a GPU fails with one line and writes nothing.

use std::path::Path;
use std::process::Command;

fn expertsim() -> Command {
    Command::new(env!("CARGO_BIN_EXE_expertsim"))
}

fn scenario() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/live/gem.toml")
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
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("fidelity.json")).unwrap()).unwrap();
    assert_eq!(report["backend"], "cpu");
    assert_eq!(report["decisions"]["identical"], true);
    assert!(!report["steps"].as_array().unwrap().is_empty());
    assert!(out.join("figures/fidelity.png").is_file());
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

/// Chimera runs live through the serving layer's step-cost seam: with the predicted clock the
/// live run's engine steps are the simulated run's, step for step, and every step was measured.
#[test]
fn chimera_runs_live_through_the_step_cost_seam() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("live");
    let output = expertsim()
        .args([
            "live",
            "--backend",
            "cpu",
            "--clock",
            "predicted",
            "--repetitions",
            "1",
            "--out",
        ])
        .arg(&out)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/live/chimera.toml"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("fidelity.json")).unwrap()).unwrap();
    assert_eq!(report["family"], "chimera");
    assert_eq!(report["decisions"]["identical"], true);
    let steps = report["steps"].as_array().unwrap();
    assert!(steps.len() > 100, "{}", steps.len());
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
}

/// CAPS runs live through the same wrapper: each static batch is one step of the replica,
/// predicted by the scenario's step cost and measured on the kernels; with the predicted clock
/// the live run forms the simulated run's batches and reports its metrics exactly.
#[test]
fn caps_runs_live_through_the_step_cost_seam() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("live");
    let output = expertsim()
        .args([
            "live",
            "--backend",
            "cpu",
            "--clock",
            "predicted",
            "--repetitions",
            "1",
            "--out",
        ])
        .arg(&out)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/live/caps.toml"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("fidelity.json")).unwrap()).unwrap();
    assert_eq!(report["family"], "caps");
    assert_eq!(report["decisions"]["identical"], true);
    let steps = report["steps"].as_array().unwrap();
    // One step per batch: as many steps as the decision log has batches.
    assert_eq!(
        steps.len() as u64,
        report["decisions"]["simulated_count"].as_u64().unwrap()
    );
    assert!(
        steps
            .iter()
            .all(|s| s["measured_ns"].as_f64().unwrap() > 0.0
                && s["predicted_ns"].as_f64().unwrap() > 0.0)
    );
    for pair in report["metrics"].as_array().unwrap() {
        assert_eq!(pair["simulated"], pair["live"], "{pair}");
    }
}
