//! Tests of the loader's guards against hostile and extreme input: ceilings, sweeps and `--set`,
//! base values under swept keys, output names.

use super::*;

const QUICK: &str = r#"
name = "t"
family = "serving"
[model]
name = "qwen1.5-moe-a2.7b-nf4"
[workload]
n_requests = 100
prompt_tokens = { kind = "log_normal", median = 128, sigma = 0.6, max = 2048 }
output_tokens = { kind = "fixed", value = 1 }
[arrival]
pattern = "poisson"
rate_per_s = 150
[replica]
gpu = "L4"
max_num_seqs = 8
batch_former = { kind = "greedy_variance" }
[replica.scheduler]
kind = "static"
loads = "experts"
pricing = "cv"
[experts]
routing = { kind = "affinity", concentration = 0.3, purity = 0.8 }
[report]
compare = "replica.batch_former.kind"
baseline = "fcfs"
[sweep]
"arrival.rate_per_s" = [150, 300]
"replica.batch_former.kind" = ["fcfs", "random", "greedy_variance"]
"#;

fn load(text: &str, sets: &[&str]) -> Result<ScenarioPlan, String> {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    load_str(Path::new("t.toml"), text, &sets).map_err(|e| e.to_string())
}

#[test]
fn a_rate_whose_horizon_passes_the_ceiling_is_refused_at_its_field() {
    let err = load(QUICK, &["arrival.rate_per_s=1e-6"]).unwrap_err();
    assert!(err.contains("field `arrival.rate_per_s`"), "{err}");
    assert!(err.contains("limits.max_sim_seconds"), "{err}");
    // A mean gap past the 1e8 s any duration may have is refused whatever the ceilings.
    let err = load(QUICK, &["arrival.rate_per_s=1e-9"]).unwrap_err();
    assert!(err.contains("field `arrival.rate_per_s`"), "{err}");
    assert!(err.contains("mean gap"), "{err}");
    // Raised on purpose, the same scenario loads.
    assert!(
        load(
            QUICK,
            &["arrival.rate_per_s=1e-4", "limits.max_sim_seconds=1e7"]
        )
        .is_ok()
    );
}

#[test]
fn a_sweep_is_counted_before_it_is_expanded() {
    let big = QUICK.replace(
        "\"arrival.rate_per_s\" = [150, 300]",
        "\"arrival.rate_per_s\" = [150, 300]\n\"workload.n_topics\" = [1, 2, 3, 4, 5, 6, 7, 8]",
    );
    assert!(load(&big, &[]).is_ok());
    let err = load(&big, &["limits.max_cells=40"]).unwrap_err();
    assert!(err.contains("expands to 48 cells"), "{err}");
    let err = load(&big, &["limits.max_runs=40"]).unwrap_err();
    assert!(err.contains("48 runs"), "{err}");
    let sweep_limits = QUICK.replace("[sweep]", "[sweep]\n\"limits.max_cells\" = [1, 2]");
    assert!(
        load(&sweep_limits, &[])
            .unwrap_err()
            .contains("cannot be swept")
    );
}

#[test]
fn setting_a_key_inside_a_table_valued_sweep_key_is_an_error_naming_both() {
    let text = QUICK
        .replace(
            "\"replica.batch_former.kind\" = [\"fcfs\", \"random\", \"greedy_variance\"]",
            "\"replica.batch_former\" = [{ kind = \"fcfs\" }, { kind = \"power_of_d\", samples = 2 }]",
        )
        .replace("compare = \"replica.batch_former.kind\"", "compare = \"replica.batch_former\"")
        .replace("baseline = \"fcfs\"", "baseline = { kind = \"fcfs\" }");
    assert!(load(&text, &[]).is_ok());
    let err = load(&text, &["replica.batch_former.samples=4"]).unwrap_err();
    assert!(err.contains("`replica.batch_former` is swept"), "{err}");
    assert!(err.contains("replica.batch_former.samples"), "{err}");
}

#[test]
fn a_bad_base_value_under_a_swept_key_is_not_silently_ignored() {
    let bogus = QUICK.replace(
        "batch_former = { kind = \"greedy_variance\" }",
        "batch_former = { kind = \"bogus_kind\" }",
    );
    let err = load(&bogus, &[]).unwrap_err();
    assert!(
        err.contains("base value of `replica.batch_former.kind`"),
        "{err}"
    );
    let nan = QUICK.replace("rate_per_s = 150", "rate_per_s = nan");
    let err = load(&nan, &[]).unwrap_err();
    assert!(err.contains("field `arrival.rate_per_s`"), "{err}");
    assert!(err.contains("base value"), "{err}");
}

#[test]
fn narrowing_the_compared_key_keeps_the_baseline_cell() {
    let plan = load(QUICK, &["replica.batch_former.kind=greedy_variance"]).unwrap();
    let axis = plan
        .axes
        .iter()
        .find(|a| a.key == "replica.batch_former.kind")
        .unwrap();
    let values: Vec<&str> = axis.values.iter().filter_map(|v| v.as_str()).collect();
    assert_eq!(values, ["fcfs", "greedy_variance"]);
    assert_eq!(plan.cells.len(), 4);
    assert!(
        plan.notes[0].contains("kept the baseline"),
        "{:?}",
        plan.notes
    );
    // Narrowing to the baseline itself needs no note.
    let plan = load(QUICK, &["replica.batch_former.kind=fcfs"]).unwrap();
    assert!(plan.notes.is_empty());
}

#[test]
fn scenario_and_figure_names_must_be_single_file_name_components() {
    for bad in ["", "../x", "/tmp/x", "a/b"] {
        let text = QUICK.replace("name = \"t\"", &format!("name = {bad:?}"));
        let err = load(&text, &[]).unwrap_err();
        assert!(err.contains("field `name`"), "{bad:?}: {err}");
    }
    let figure = format!(
        "{QUICK}\n[[figure]]\nname = \"../../x\"\nmetrics = [\"e2e_p99_ms\"]\n\
         x = \"arrival.rate_per_s\"\nseries = \"replica.batch_former.kind\"\n"
    );
    let err = load(&figure, &[]).unwrap_err();
    assert!(err.contains("figure[0].name"), "{err}");
}

#[test]
fn intervals_that_round_to_zero_nanoseconds_are_refused() {
    let err = load(
        QUICK,
        &["replica.scheduler.scheduling_interval_ms=0.0000004"],
    )
    .unwrap_err();
    assert!(
        err.contains("replica.scheduler.scheduling_interval_ms"),
        "{err}"
    );
    assert!(err.contains("rounds to 0 ns"), "{err}");
}

#[test]
fn schema_errors_speak_toml_not_rust_types() {
    let err = load(QUICK, &["model=3"]).unwrap_err();
    assert!(err.ends_with("expected a table"), "{err}");
    let err = load(QUICK, &["replica.batch_former=3"]).unwrap_err();
    assert!(!err.contains("Config"), "{err}");
    let dup = QUICK.replace("family = \"serving\"", "family = \"serving\"\nname = \"u\"");
    let err = load(&dup, &[]).unwrap_err();
    assert!(err.contains("duplicate key `name`"), "{err}");
}

#[test]
fn sweep_only_drops_cells_and_names_its_file_line_and_field() {
    let filtered = QUICK.replace(
        "[model]",
        "sweep_only = [{ \"replica.batch_former.kind\" = \"fcfs\" }, { \"arrival.rate_per_s\" = 300 }]\n[model]",
    );
    let plan = load(&filtered, &[]).unwrap();
    let ids: Vec<&str> = plan.cells.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "arrival.rate_per_s=150,replica.batch_former.kind=fcfs",
            "arrival.rate_per_s=300,replica.batch_former.kind=fcfs",
            "arrival.rate_per_s=300,replica.batch_former.kind=random",
            "arrival.rate_per_s=300,replica.batch_former.kind=greedy_variance",
        ]
    );
    // The filter is not part of the document the cells are built from.
    assert!(!plan.document.contains_key("sweep_only"));
    // `--set 'sweep_only=[]'` keeps every cell.
    assert_eq!(load(&filtered, &["sweep_only=[]"]).unwrap().cells.len(), 6);
    // Narrowing the sweep so that no kept cell remains is refused.
    let err = load(
        &filtered,
        &[
            "arrival.rate_per_s=150",
            "sweep_only=[{ \"arrival.rate_per_s\" = 300 }]",
        ],
    )
    .unwrap_err();
    assert!(err.contains("keeps none of the sweep's 3 cells"), "{err}");
    assert!(err.contains("(--set)"), "{err}");
    // A typo names the file, its line and the field.
    let typo = filtered.replace("= \"fcfs\" }, {", "= \"fcsf\" }, {");
    let err = load(&typo, &[]).unwrap_err();
    assert!(err.contains("t.toml:4:"), "{err}");
    assert!(
        err.contains("sweep_only[0].replica.batch_former.kind"),
        "{err}"
    );
    assert!(err.contains("fcsf is not among the swept values"), "{err}");
}
