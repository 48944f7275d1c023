//! Integration tests of sweep sharding and resumption through the `expertsim` binary: three
//! shards merged give the bytes of one whole run; shards that do not fit together are refused
//! (exit 2, nothing written); a sweep killed midway resumes from its finished cells and ends with
//! the bytes of an uninterrupted run; stale cell files are rerun, not reused.

use crate::common::{SMALL, expertsim, stderr};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn succeed(args: &[&str]) -> String {
    let output = expertsim(args);
    assert!(output.status.success(), "{args:?}: {}", stderr(&output));
    stderr(&output)
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `SMALL` with two seeds as a CAPS sweep of 6 cells x 2 seeds whose baseline (fcfs) cells fall in
/// other shards than the cells compared with them, with a figure.
fn sweep() -> String {
    let seeds = SMALL.replacen("seeds = [7]", "seeds = [7, 8]", 1);
    assert_ne!(seeds, SMALL);
    format!(
        "{seeds}{}",
        r#"
[report]
compare = "replica.batch_former.kind"
baseline = "fcfs"

[sweep]
"arrival.rate_per_s" = [100, 200]
"replica.batch_former.kind" = ["fcfs", "random", "greedy_variance"]

[[figure]]
name = "p99"
metrics = ["e2e_p99_ms"]
x = "arrival.rate_per_s"
series = "replica.batch_former.kind"
"#
    )
}

struct Sweep {
    dir: tempfile::TempDir,
    scenario: PathBuf,
}

impl Sweep {
    fn new(text: &str) -> Sweep {
        let dir = tempfile::tempdir().unwrap();
        let scenario = dir.path().join("scenario.toml");
        std::fs::write(&scenario, text).unwrap();
        Sweep { dir, scenario }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `expertsim run` into `out` with `extra` arguments; returns stderr.
    fn run(&self, out: &str, extra: &[&str]) -> String {
        let out = self.path(out);
        let mut args = vec![
            "run",
            self.scenario.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        succeed(&args)
    }

    /// `expertsim merge` of the shard folders `dirs` into `out`.
    fn merge(&self, dirs: &[&str], out: &str) -> Output {
        let dirs: Vec<PathBuf> = dirs.iter().map(|d| self.path(d)).collect();
        let out = self.path(out);
        let mut args = vec!["merge"];
        args.extend(dirs.iter().map(|d| d.to_str().unwrap()));
        args.extend(["--out", out.to_str().unwrap()]);
        expertsim(&args)
    }
}

#[test]
fn three_merged_shards_give_the_bytes_of_one_run() {
    let sweep = Sweep::new(&sweep());
    sweep.run("whole", &["--no-figures"]);
    for k in 1..=3 {
        let stderr = sweep.run(&format!("shard{k}"), &["--shard", &format!("{k}/3")]);
        assert!(stderr.contains("2 cells"), "{stderr}");
        assert!(!sweep.path(&format!("shard{k}/results.json")).exists());
    }
    let output = sweep.merge(&["shard1", "shard2", "shard3"], "merged");
    assert!(output.status.success(), "{}", stderr(&output));
    let whole = read(&sweep.path("whole/results.json"));
    assert_eq!(whole, read(&sweep.path("merged/results.json")));
    // The comparison is not vacuous: the document holds every cell's runs and improvements.
    let document: serde_json::Value = serde_json::from_slice(&whole).unwrap();
    let cells = document["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 6);
    assert!(
        cells
            .iter()
            .all(|c| c["runs"].as_array().unwrap().len() == 2)
    );
    assert_eq!(cells[4]["improvement"]["baseline_cell"], cells[3]["id"]);
    // Figures are rendered from the scenario the shards recorded.
    let figure = read(&sweep.path("merged/figures/p99.svg"));
    assert!(figure.len() > 1000, "figure is {} bytes", figure.len());
}

/// Runs `merge` and checks the refusal: exit code 2, one line naming `needles`, nothing written.
fn assert_merge_refused(sweep: &Sweep, dirs: &[&str], needles: &[&str]) {
    let output = sweep.merge(dirs, "merged");
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{dirs:?}: {err}");
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "one line expected: {err}"
    );
    for needle in needles {
        assert!(err.contains(needle), "expected {needle:?} in: {err}");
    }
    assert!(!sweep.path("merged").exists(), "nothing is written");
}

#[test]
fn merge_refuses_shards_that_do_not_fit_together() {
    let sweep = Sweep::new(&sweep());
    sweep.run("a1", &["--shard", "1/2"]);
    sweep.run("a2", &["--shard", "2/2"]);
    sweep.run("b1", &["--shard", "1/3"]);
    sweep.run(
        "other2",
        &["--shard", "2/2", "--set", "workload.n_requests=100"],
    );
    assert_merge_refused(&sweep, &["a1"], &["3 of 6 cells missing", "shard 2/2"]);
    assert_merge_refused(&sweep, &["a1", "b1"], &["cell 0", "both", "shard 1/3"]);
    assert_merge_refused(&sweep, &["a1", "a1"], &["given twice"]);
    assert_merge_refused(&sweep, &["a1", "other2"], &["different sweeps"]);
    assert_merge_refused(&sweep, &["nowhere"], &["nowhere"]);
    // A cell file that does not belong to the shard's sweep is named.
    std::fs::copy(
        sweep.path("other2/cells/1.json"),
        sweep.path("a2/cells/1.json"),
    )
    .unwrap();
    assert_merge_refused(&sweep, &["a1", "a2"], &["1.json", "fingerprint"]);
    // The intact pair merges.
    sweep.run("a2", &["--shard", "2/2", "--fresh"]);
    assert!(sweep.merge(&["a1", "a2"], "merged").status.success());
}

#[test]
fn stale_cells_are_rerun_and_fresh_ignores_finished_ones() {
    let sweep = Sweep::new(&sweep());
    sweep.run("reference", &["--no-figures"]);
    // Half the cells, of the same scenario with another request count: not reused.
    sweep.run(
        "out",
        &["--shard", "1/2", "--set", "workload.n_requests=100"],
    );
    let stderr = sweep.run("out", &["--no-figures"]);
    assert!(stderr.contains("rerunning 3 cells"), "{stderr}");
    assert!(stderr.contains("12 runs in"), "{stderr}");
    assert_eq!(
        read(&sweep.path("reference/results.json")),
        read(&sweep.path("out/results.json"))
    );
    assert!(
        !sweep.path("out/cells").exists(),
        "a finished sweep removes its cells"
    );
    // A cell file of an earlier format (`expertsim-cell/1`: every traced MoE run's details with
    // its per-GPU staircase) is stale, naming both formats: its cell reruns.
    sweep.run("out", &["--shard", "2/2"]);
    let cell = sweep.path("out/cells/1.json");
    let text = String::from_utf8(read(&cell)).unwrap();
    let old = text.replace("\"expertsim-cell/2\"", "\"expertsim-cell/1\"");
    assert_ne!(old, text);
    std::fs::write(&cell, old).unwrap();
    let stderr = sweep.run("out", &["--no-figures"]);
    assert!(stderr.contains("rerunning 1 cells"), "{stderr}");
    assert!(
        stderr.contains("format \"expertsim-cell/1\", expected \"expertsim-cell/2\""),
        "{stderr}"
    );
    assert_eq!(
        read(&sweep.path("reference/results.json")),
        read(&sweep.path("out/results.json"))
    );
    // Cells of this very scenario are reused, unless --fresh.
    sweep.run("out", &["--shard", "2/2"]);
    let stderr = sweep.run("out", &["--no-figures", "--fresh"]);
    assert!(!stderr.contains("resuming"), "{stderr}");
    assert!(stderr.contains("12 runs in"), "{stderr}");
}

/// 48 cells x 2 seeds: long enough that a cell file appears well before the sweep ends.
fn long_sweep() -> String {
    let sweep = sweep();
    let body = sweep.split("[sweep]").next().unwrap();
    format!(
        "{body}[sweep]\n\"arrival.rate_per_s\" = [100, 150, 200, 250]\n\
         \"replica.batch_former.kind\" = [\"fcfs\", \"random\", \"greedy_variance\", \
         \"greedy_dot_product\", \"norm_minimizing\", \"best_fit\", \"power_of_d\", \
         \"power_of_d_dot\", \"lpt\", \"lpt_balanced\", \"karmarkar_karp\", \"differencing\"]\n"
    )
    .replace("n_requests = 200", "n_requests = 600")
}

#[test]
fn a_killed_sweep_resumes_to_the_bytes_of_an_uninterrupted_one() {
    let sweep = Sweep::new(&long_sweep());
    let out = sweep.path("out");
    let mut child = Command::new(env!("CARGO_BIN_EXE_expertsim"))
        .args(["run", sweep.scenario.to_str().unwrap(), "--no-figures"])
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the binary starts");
    let cells = out.join("cells");
    let finished_cells = || {
        std::fs::read_dir(&cells)
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                    .count()
            })
            .unwrap_or(0)
    };
    while finished_cells() == 0 {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the sweep ended before a cell file was seen"
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        !out.join("results.json").exists(),
        "the sweep finished before it was killed; it needs more cells"
    );
    let done = finished_cells();
    assert!((1..48).contains(&done), "{done} cells finished");

    let stderr = sweep.run("out", &["--no-figures"]);
    assert!(
        stderr.contains(&format!("resuming: {done} finished cells")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("{} runs in", (48 - done) * 2)),
        "{stderr}"
    );
    sweep.run("uninterrupted", &["--no-figures"]);
    assert_eq!(
        read(&out.join("results.json")),
        read(&sweep.path("uninterrupted/results.json"))
    );
}
