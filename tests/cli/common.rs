//! Helpers shared by the integration tests: run the `expertsim` binary from the workspace root,
//! write a scenario, check a refusal.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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
