//! Every registered family (`expertsim_scenario::registry::FAMILIES`) is reachable: the scenario loader accepts
//! its `family = "..."`, the runner runs a cell of it through the policy registry, and the
//! per-request CSV it writes carries exactly the columns the family declares. (Live mode's
//! coverage of the list is held by `live`'s own unit test, from the families' `LIVE` flags.)

use std::path::Path;

#[test]
fn every_registered_family_loads_and_runs() {
    for family in expertsim_scenario::registry::families() {
        // Each family names its small scenario (`Family::QUICK_SCENARIO`), which runs in moments.
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(family.quick_scenario());
        let plan = expertsim_scenario::scenario::load(&path, &[])
            .unwrap_or_else(|e| panic!("{family}: {e}"));
        assert_eq!(plan.family, family);
        assert_eq!(plan.cells[0].scenario.family(), family);
        let dir = tempfile::tempdir().unwrap();
        let csv = dir.path().join("requests.csv");
        let run = expertsim_scenario::runner::run_cell(
            &plan.cells[0].scenario,
            plan.seeds[0],
            &strategies::Registry,
            Some(&csv),
            None,
        )
        .unwrap_or_else(|e| panic!("{family}: {e}"));
        let names: Vec<&str> = run.output.scalars.iter().map(|(n, _)| n.as_str()).collect();
        let table: Vec<&str> = family.metrics().iter().map(|m| m.name).collect();
        assert_eq!(names, table, "{family}: scalars follow the metric table");
        assert!(!run.cost_source.is_empty(), "{family}");
        match family.csv_columns() {
            Some(columns) => {
                let text = std::fs::read_to_string(&csv).unwrap();
                let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
                let expected: Vec<&str> = expertsim_scenario::records::COMMON_COLUMNS
                    .iter()
                    .chain(columns)
                    .copied()
                    .collect();
                assert_eq!(header, expected, "{family}");
            }
            None => assert!(!csv.exists(), "{family} has no per-request records"),
        }
    }
}

/// A MOSAIC cell records the source its expert steps reported: the live scenario names a
/// measured dense-decode profile (`replica.scheduler.profile`), the quick one none (the
/// roofline).
#[test]
fn mosaic_records_the_source_its_expert_steps_reported() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (scenario, expected) in [
        ("scenarios/live/mosaic.toml", "measured"),
        ("scenarios/mosaic/quick.toml", "analytic-roofline"),
    ] {
        let plan = expertsim_scenario::scenario::load(&root.join(scenario), &[]).unwrap();
        let run = expertsim_scenario::runner::run_cell(
            &plan.cells[0].scenario,
            plan.seeds[0],
            &strategies::Registry,
            None,
            None,
        )
        .unwrap();
        assert_eq!(run.cost_source, expected, "{scenario}");
    }
}

/// The serving family's adapters example (scenarios/serving/esft_adapters.toml) runs both its
/// cells: the virtual weight tensor holds the adapters' experts beside the base model, so its
/// KV cache is smaller than base-only's by the bytes it maps, and its steps, reading the copies
/// and rerouting, are slower; every request of the trace cut finishes in both.
#[test]
fn the_serving_adapters_example_runs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let plan =
        expertsim_scenario::scenario::load(&root.join("scenarios/serving/esft_adapters.toml"), &[])
            .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(plan.cells.len(), 2);
    let runs: Vec<expertsim_scenario::metrics::RunOutput> = plan
        .cells
        .iter()
        .map(|cell| {
            expertsim_scenario::runner::run_cell(
                &cell.scenario,
                plan.seeds[0],
                &strategies::Registry,
                None,
                None,
            )
            .unwrap()
            .output
        })
        .collect();
    let (base, weave) = (&runs[0], &runs[1]);
    assert_eq!(base.details["adapters"]["manager"], "base_only");
    assert_eq!(
        weave.details["adapters"]["manager"],
        "virtual_weight_tensor"
    );
    for run in &runs {
        assert_eq!(run.scalar("completed"), Some(300.0));
    }
    let memory = &weave.details["adapters"]["memory"];
    let mapped = memory["adapter_allocated_bytes"].as_f64().unwrap();
    assert!(mapped > 0.0);
    let kv = |run: &expertsim_scenario::metrics::RunOutput| {
        run.details["deployment"][0]["kv_tokens_per_replica"]
            .as_f64()
            .unwrap()
    };
    // Every NPU of the TP-8 group holds each token's 31,104-byte latent: the mapped bytes cost
    // mapped / (8 x 31,104) tokens, to a 128-token block.
    let lost = kv(base) - kv(weave);
    assert!((lost - mapped / (8.0 * 31_104.0)).abs() <= 128.0, "{lost}");
    assert!(weave.scalar("tpot_mean_ms").unwrap() > base.scalar("tpot_mean_ms").unwrap());
}
