//! Helpers shared by the integration tests: run the `expertsim` binary from the workspace root,
//! write a scenario, check a refusal; `SMALL`, the scenario that tests patch line by line.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A small valid scenario (CAPS on one L4, 200 requests, one seed) that tests patch by replacing
/// its lines.
pub const SMALL: &str = r#"name = "small"
family = "serving"
seeds = [7]

[model]
name = "qwen1.5-moe-a2.7b-nf4"

[workload]
n_requests = 200
prompt_tokens = { kind = "log_normal", median = 128, sigma = 0.6, max = 2048 }
output_tokens = { kind = "log_normal", median = 16, sigma = 0.6, max = 256 }

[arrival]
pattern = "bursty"
rate_per_s = 100

[replica]
gpu = "L4"
max_num_seqs = 8
batch_former = { kind = "greedy_variance" }
scheduler = { kind = "static", loads = "experts", pricing = "cv" }

[experts]
routing = { kind = "affinity", concentration = 0.3, purity = 0.8 }
"#;

/// Runs `expertsim args...` in the workspace root and waits for it.
pub fn expertsim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_expertsim"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the binary runs")
}

/// The process's standard error as text.
pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Writes `text` as `scenario.toml` in `dir`.
pub fn write_scenario(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("scenario.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs `run` on `text` and checks the refusal: exit code 2, one line on stderr that starts with
/// `<file>:<line>:` (when `line` is given) and mentions each of `needles`, and no output written.
pub fn assert_refused(text: &str, line: Option<usize>, needles: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let path = write_scenario(dir.path(), text);
    let out = dir.path().join("out");
    let output = expertsim(&[
        "run",
        path.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "stderr: {err}");
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "one line expected, got: {err}"
    );
    let prefix = match line {
        Some(line) => format!("error: {}:{line}:", path.display()),
        None => format!("error: {}", path.display()),
    };
    assert!(
        err.starts_with(&prefix),
        "expected prefix {prefix:?} in: {err}"
    );
    for needle in needles {
        assert!(err.contains(needle), "expected {needle:?} in: {err}");
    }
    assert!(
        !out.exists(),
        "nothing may be written for a refused scenario"
    );
}
