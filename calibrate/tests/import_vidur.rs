//! `expertsim-calibrate import-vidur` through the binary: on the committed fixtures (a subset
//! of Vidur's rows) it writes profiles whose every point, shape and source equal the committed
//! profiles under `profiles/vidur/` (imported from the whole files), and a malformed CSV exits
//! with code 2 and one line naming the file, the row and the column.

use expertsim_scenario::cost::op_profile::{NetworkProfile, OpProfile};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/vidur")
}

fn committed(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../profiles/vidur")
        .join(relative)
}

fn import(dir: &Path, out: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_expertsim-calibrate"))
        .arg("import-vidur")
        .arg(dir)
        .args(["--commit", "7d47513", "--out"])
        .arg(out)
        .output()
        .expect("the binary runs")
}

#[test]
fn fixture_rows_import_to_the_committed_profiles() {
    let out = tempfile::tempdir().unwrap();
    let run = import(&fixtures(), out.path());
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );

    let from_fixture = OpProfile::load(&out.path().join("a100/Meta-Llama-3-8B.json")).unwrap();
    let whole = OpProfile::load(&committed("a100/Meta-Llama-3-8B.json")).unwrap();
    assert_eq!(from_fixture.gpu, whole.gpu);
    assert_eq!(from_fixture.model, whole.model);
    assert_eq!(from_fixture.shape, whole.shape);
    assert_eq!(from_fixture.source, whole.source);
    // 10 operations at tensor parallelism 1 and 2, each with the fixture's 13 token counts.
    assert_eq!(from_fixture.series.len(), 20);
    let mut compared = 0;
    for series in &from_fixture.series {
        let full = whole
            .series(series.operation, series.tensor_parallel)
            .expect("the committed profile has every series of the fixture");
        for &(tokens, nanos) in &series.points {
            let point = full.points.iter().find(|(t, _)| *t == tokens);
            assert_eq!(
                point,
                Some(&(tokens, nanos)),
                "{} at TP {}",
                series.operation,
                series.tensor_parallel
            );
            compared += 1;
        }
    }
    assert!(compared >= 200, "{compared} points compared");

    let from_fixture = NetworkProfile::load(&out.path().join("network/a100_dgx.json")).unwrap();
    let whole = NetworkProfile::load(&committed("network/a100_dgx.json")).unwrap();
    let series = &from_fixture.series[0];
    let full = whole
        .series(series.collective, series.workers, series.devices_per_node)
        .unwrap();
    for point in &series.points {
        assert!(full.points.contains(point), "{point:?}");
    }
    assert_eq!(from_fixture.sources[0], whole.sources[0]);
}

#[test]
fn a_malformed_csv_exits_2_naming_file_row_and_column() {
    let data = tempfile::tempdir().unwrap();
    let folder = data
        .path()
        .join("profiling/compute/a100/meta-llama/Meta-Llama-3-8B");
    std::fs::create_dir_all(&folder).unwrap();
    let source = fixtures().join("profiling/compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv");
    let text = std::fs::read_to_string(source).unwrap();
    // Break the token count of the fourth data row (line 5 of the file).
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let header: Vec<&str> = lines[0].split(',').collect();
    let column = header.iter().position(|c| *c == "num_tokens").unwrap();
    let mut cells: Vec<String> = lines[4].split(',').map(str::to_string).collect();
    cells[column] = "many".into();
    lines[4] = cells.join(",");
    std::fs::write(folder.join("mlp.csv"), lines.join("\n") + "\n").unwrap();

    let out = tempfile::tempdir().unwrap();
    let run = import(data.path(), &out.path().join("profiles"));
    assert_eq!(run.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("Meta-Llama-3-8B/mlp.csv:5: column \"num_tokens\""),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(!out.path().join("profiles").exists(), "nothing is written");
}
