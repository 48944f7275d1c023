//! How the commands the tool advises call this project's binaries from the user's shell: the
//! bare name where `PATH` finds this very build (`cargo install --path .`), else the binary's
//! path (`target/release/expertsim`, relative to the working folder when inside it), else, for a
//! binary not built yet, the `cargo run` that builds it.

use std::path::{Path, PathBuf};

/// The command that runs `bin` (`expertsim` or `expertsim-calibrate`) of this build.
pub fn command(bin: &str) -> String {
    let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
    else {
        return bin.to_string();
    };
    let sibling = dir.join(bin);
    if !sibling.is_file() {
        return match bin {
            "expertsim-calibrate" => "cargo run --release -p expertsim-calibrate --".to_string(),
            _ => bin.to_string(),
        };
    }
    if on_path(bin).is_some_and(|found| same_file(&found, &sibling)) {
        return bin.to_string();
    }
    let shown = std::env::current_dir()
        .ok()
        .and_then(|cwd| sibling.strip_prefix(&cwd).ok().map(Path::to_path_buf))
        .unwrap_or(sibling);
    shown.display().to_string()
}

/// Where `PATH` finds `bin`, if it does.
fn on_path(bin: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(bin))
        .find(|candidate| candidate.is_file())
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}
