//! Test support: every shipped scenario of a family loads through the real loader
//! (`scenario::load`: sweep expansion, per-cell validation, report and figure checks), with the
//! number of cells the cartesian product of its `[sweep]` gives (fewer, where `sweep_only` keeps
//! some).

use crate::scenario::ScenarioPlan;
use std::path::Path;

/// Loads every scenario under `scenarios/<folder>/` and returns the plans; panics with the file
/// and the loader's message on the first that fails, or when a file is of another family than
/// the folder's (or the serving family's: a paper's presets) or has the wrong number of cells.
pub fn load_all(folder: &str, at_least: usize) -> Vec<ScenarioPlan> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios")
        .join(folder);
    let files = crate::scenario::scenario_files(&dir).unwrap();
    assert!(files.len() >= at_least, "{files:?}");
    files
        .iter()
        .map(|path| {
            let plan = crate::scenario::load(path, &[]).unwrap_or_else(|e| panic!("{e}"));
            // A paper's folder holds its family's scenarios and its presets of the serving
            // family (`*_serving.toml`).
            let family = plan.family.name();
            assert!(
                family == folder || family == "serving",
                "{} is of family {family}",
                path.display()
            );
            // The cell count, from the raw file: the product of the sweep's value counts.
            let raw: toml::Table = toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
            let expected: usize = raw
                .get("sweep")
                .and_then(|s| s.as_table())
                .map(|sweep| {
                    sweep
                        .values()
                        .map(|v| v.as_array().map_or(1, Vec::len))
                        .product()
                })
                .unwrap_or(1);
            if raw.contains_key("sweep_only") {
                // A `sweep_only` keeps some of the product's cells (its own tests say which).
                assert!(
                    !plan.only.is_empty() && (1..expected).contains(&plan.cells.len()),
                    "{}",
                    path.display()
                );
            } else {
                assert_eq!(plan.cells.len(), expected, "{}", path.display());
            }
            plan
        })
        .collect()
}
