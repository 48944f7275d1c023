//! `scripts/gpu_validate.sh`, the whole GPU validation in one command: its dry run lists every
//! step without a GPU or a build, and names every live scenario, the GPU profile each one is
//! run with, and every GPU test the sources mark as ignored, so a scenario or a GPU test the
//! script would miss fails here; and it prints the budgeted plan of the device half, whose
//! phase caps must fit the budget in the order of their value.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The attribute every GPU test carries (built here so that this file does not carry it).
fn gpu_ignore_attribute() -> String {
    format!("#[{} = \"needs a GPU: scripts/gpu_validate.sh\"]", "ignore")
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn script(args: &[&str]) -> Output {
    Command::new("bash")
        .arg("scripts/gpu_validate.sh")
        .args(args)
        .current_dir(root())
        .output()
        .expect("bash runs")
}

/// Every `.rs` file of the workspace (not under target/ or results/).
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if !["target", "results", ".git"].contains(&name.as_str()) {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

/// (file, test name) of every test marked with the GPU attribute; panics on an `#[ignore]`
/// with any other reason (the script runs the ignored tests as GPU tests).
fn gpu_tests_in_sources() -> Vec<(String, String)> {
    let mut files = Vec::new();
    rust_files(root(), &mut files);
    files.sort();
    let attribute = gpu_ignore_attribute();
    let mut tests = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let relative = file.strip_prefix(root()).unwrap().display().to_string();
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            let line = line.trim();
            if !line.starts_with(&format!("#[{}", "ignore")) {
                continue;
            }
            assert_eq!(
                line, attribute,
                "{relative}: an ignored test that is not a GPU test"
            );
            let name = lines
                .by_ref()
                .find_map(|l| {
                    let l = l.trim();
                    l.strip_prefix("fn ")
                        .map(|rest| rest.split('(').next().unwrap().to_string())
                })
                .unwrap_or_else(|| panic!("{relative}: no fn after {attribute}"));
            tests.push((relative.clone(), name));
        }
    }
    tests
}

#[test]
fn the_gpu_script_parses() {
    let output = Command::new("bash")
        .args(["-n", "scripts/gpu_validate.sh"])
        .current_dir(root())
        .output()
        .expect("bash runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_gpu_tests_are_ignored_with_the_reason() {
    let tests = gpu_tests_in_sources();
    for name in [
        "gpu_cublas_gemm_matches_an_f64_reference",
        "gpu_moe_layer_matches_the_cpu_reference",
        "gpu_moe_layer_is_deterministic",
        "gpu_rerouting_matches_the_cpu_reference",
        "gpu_decode_step_matches_the_cpu_reference",
        "gpu_timing_returns_positive_event_times",
    ] {
        assert!(
            tests.contains(&("kernels/src/cuda.rs".to_string(), name.to_string())),
            "{name}: {tests:?}"
        );
    }
    // No GPU test returns early: a run without a GPU is a failure, never a silent pass.
    let cuda = std::fs::read_to_string(root().join("kernels/src/cuda.rs")).unwrap();
    assert!(!cuda.contains("gpu_or_skip") && !cuda.contains("EXPERTSIM_GPU"));
}

#[test]
fn dry_run_lists_every_step_scenario_profile_and_gpu_test_and_exits_0() {
    let output = script(&["--dry-run"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("nothing was run"), "{stdout}");
    for command in [
        "$ cargo build --release --workspace --locked",
        "$ cargo test --release --workspace --locked --no-run --message-format=json",
        "--list --ignored",
        "--ignored --exact",
        "$ nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem",
        "$ python3 scripts/fidelity_table.py --doc docs/fidelity.md",
        "--model qwen1.5-moe-a2.7b --dense-limit 2048",
        "$ python3 scripts/vendor_check.py",
        "profiles/reference/nvidia-h200_cublas-qwen1.5-moe-expert.csv --tokens 64-2048 --max-ratio 1.5",
    ] {
        assert!(stdout.contains(command), "no `{command}` in:\n{stdout}");
    }
    // Every real-shape live scenario runs on CUDA, on a profile calibrated on the device for it
    // (`--for-scenario`) and set as its family's profile key.
    let mut scenarios: Vec<String> = std::fs::read_dir(root().join("scenarios/live-gpu"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".toml"))
        .collect();
    scenarios.sort();
    assert!(scenarios.len() >= 5, "{scenarios:?}");
    for name in &scenarios {
        let path = format!("scenarios/live-gpu/{name}");
        let live = format!("expertsim live {path} --backend cuda");
        assert!(stdout.contains(&live), "no `{live}` in:\n{stdout}");
        let text = std::fs::read_to_string(root().join(&path)).unwrap();
        let family = text
            .lines()
            .find(|l| l.trim_start().starts_with("family"))
            .and_then(|l| l.split('"').nth(1))
            .unwrap();
        let key = match family {
            "serving" => "replica.scheduler.profile",
            other => panic!("{name}: family {other} has no profile key here"),
        };
        let calibrated = format!("_live-gpu-{}.json", name.trim_end_matches(".toml"));
        assert!(
            stdout
                .lines()
                .any(|l| l.contains("expertsim-calibrate --backend cuda")
                    && l.contains(&format!("--for-scenario {path}"))
                    && l.contains(&calibrated)),
            "{name}: no calibration for the scenario writing *{calibrated} in:\n{stdout}"
        );
        assert!(
            stdout.lines().any(|l| l.contains(&live)
                && l.contains(&format!("{key}=\"../../profiles/measured/"))
                && l.contains(&calibrated)),
            "{name}: not run on *{calibrated} as {key} in:\n{stdout}"
        );
    }
    // The CPU rehearsal runs the scaled-down scenarios the same way.
    let rehearsal = script(&["--dry-run", "--device", "--backend", "cpu"]);
    let rehearsal = String::from_utf8_lossy(&rehearsal.stdout);
    for entry in std::fs::read_dir(root().join("scenarios/live")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".toml") {
            let path = format!("--for-scenario scenarios/live/{name}");
            assert!(rehearsal.contains(&path), "no `{path}` in:\n{rehearsal}");
        }
    }
    let tests = gpu_tests_in_sources();
    assert!(tests.len() >= 5, "{tests:?}");
    for (file, name) in &tests {
        let listed = format!("{file} {name}");
        assert!(stdout.contains(&listed), "no `{listed}` in:\n{stdout}");
    }
}

/// One phase row of the dry run's plan: (number, title, share %, cap s, minimum s).
fn plan_rows(stdout: &str) -> Vec<(usize, String, u64, u64, u64)> {
    let table = stdout
        .split("budgeted plan of the device half")
        .nth(1)
        .unwrap_or_else(|| panic!("no budgeted plan in:\n{stdout}"));
    table
        .lines()
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            let number = words.first()?.parse().ok()?;
            let [share, cap, min] = words[words.len() - 3..] else {
                return None;
            };
            let share = share.strip_suffix('%')?.parse().ok()?;
            let title = words[1..words.len() - 3].join(" ");
            Some((number, title, share, cap.parse().ok()?, min.parse().ok()?))
        })
        .collect()
}

#[test]
fn dry_run_prints_a_budgeted_plan_whose_caps_fit_the_budget_in_order_of_value() {
    let mut caps_by_budget = Vec::new();
    for budget in [300u64, 480, 1200] {
        let output = script(&[
            "--dry-run",
            "--device",
            "--budget",
            &budget.to_string(),
            "--collect-tar",
            "/tmp/gpu-validate.tar.gz",
        ]);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{stdout}");
        assert!(
            stdout.contains(&format!("(--budget {budget} s)")),
            "{stdout}"
        );
        let rows = plan_rows(&stdout);
        let titles: Vec<&str> = rows.iter().map(|r| r.1.as_str()).collect();
        // By value: the tests, the calibrations the live runs need, the real expert against
        // the vendor, the live runs, the table, then the full calibration of the real shape.
        let order = [
            "preflight",
            "the GPU tests",
            "calibrate every profile",
            "calibrate the real Qwen1.5-MoE-A2.7B expert",
            "the live runs",
            "the fidelity table",
            "calibrate the real Qwen1.5-MoE-A2.7B shape with every default",
        ];
        assert_eq!(rows.len(), order.len(), "{stdout}");
        for ((number, title, ..), (i, want)) in rows.iter().zip(order.iter().enumerate()) {
            assert_eq!(*number, i + 1);
            assert!(title.starts_with(want), "phase {number}: {title}");
        }
        assert_eq!(rows.iter().map(|r| r.2).sum::<u64>(), 100, "{titles:?}");
        for (number, title, _, cap, min) in &rows {
            assert!(
                cap >= min,
                "phase {number} {title}: cap {cap} under its minimum {min}"
            );
            // Each phase header repeats its cap in the steps below the table.
            assert!(
                stdout.contains(&format!("phase {number}/7: {title}\n  (cap {cap} s)")),
                "{stdout}"
            );
        }
        let planned: u64 = rows.iter().map(|r| r.3).sum();
        let total = stdout
            .lines()
            .find_map(|l| {
                l.trim()
                    .strip_prefix("total")
                    .map(|t| t.trim().parse::<u64>().unwrap())
            })
            .expect("a total line");
        assert!(
            total <= budget && total > planned,
            "total {total}, phases {planned}, budget {budget}"
        );
        // Packed for a machine that brings back a few files only.
        assert!(
            stdout.contains("$ tar -czf /tmp/gpu-validate.tar.gz -C"),
            "{stdout}"
        );
        caps_by_budget.push(rows.iter().map(|r| r.3).collect::<Vec<_>>());
    }
    // A larger budget never shrinks a phase, and grows the ones with a share above their floor.
    for pair in caps_by_budget.windows(2) {
        assert!(
            pair[0].iter().zip(&pair[1]).all(|(a, b)| a <= b),
            "{caps_by_budget:?}"
        );
        assert!(
            pair[1][4] > pair[0][4],
            "the live runs' cap grows: {caps_by_budget:?}"
        );
    }
    let default = script(&["--dry-run", "--device"]);
    assert!(String::from_utf8_lossy(&default.stdout).contains("(--budget 480 s)"));
}

#[test]
fn a_bad_option_is_exit_code_2() {
    for args in [
        &["--frobnicate"][..],
        &["--runs", "0", "--dry-run"],
        &["--backend", "rocm", "--dry-run"],
        // Under every phase's minimum plus the collect reserve (100 s).
        &["--budget", "99", "--dry-run"],
        &["--budget", "5m", "--dry-run"],
    ] {
        let output = script(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
    }
}
