//! Helpers shared by the integration tests: run the `expertsim` binary from the workspace root.

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
