//! Every paper claim in `scenarios/<family>/headlines.toml`, checked on the quick variant of its
//! run: its verdict (direction and magnitude against the paper's number, or "input" for a
//! by-construction claim) must be the one the file expects, so a verdict that changes either way
//! fails until `expect` and `known_deviation` are updated. Also the
//! `reproduce` command's document handling: generated sections replaced, prose kept, a second
//! run byte-identical, missing markers refused.

use crate::common::expertsim;
use sim::headlines::{self, Headlines};
use sim::partial::SweepHeader;
use std::path::{Path, PathBuf};

fn families() -> Vec<Headlines> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir("scenarios")
        .unwrap()
        .flatten()
        .map(|e| e.path().join(headlines::FILE_NAME))
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|p| headlines::load(p).unwrap_or_else(|e| panic!("{e}")))
        .collect()
}

#[test]
fn every_claim_gets_its_expected_verdict_on_its_quick_run() {
    let families = families();
    let names: Vec<&str> = families.iter().map(|h| h.family.as_str()).collect();
    for family in ["caps", "gem", "mosaic", "chimera", "expertweave"] {
        assert!(names.contains(&family), "{family} has no headlines.toml");
    }
    let mut problems = Vec::new();
    let mut checked = 0;
    for family in &families {
        for run in &family.runs {
            let mut sets = run.sets.clone();
            sets.extend(run.quick.iter().cloned());
            let plan = sim::scenario::load(&run.scenario, &sets).unwrap_or_else(|e| panic!("{e}"));
            family
                .check_against(&run.id, &plan)
                .unwrap_or_else(|e| panic!("{e}"));
            let all: Vec<usize> = (0..plan.cells.len()).collect();
            let cells = sim::runner::run_cells(
                &plan,
                &strategies::Registry,
                &all,
                None,
                &|| {},
                &|_, _| Ok(()),
            )
            .unwrap();
            let document = SweepHeader::of(&plan).assemble(cells);
            for (_, claim) in family.claims_of(&run.id) {
                let outcome = headlines::evaluate(claim, &document).unwrap();
                checked += 1;
                let at = format!("{}/{} ({})", family.family, claim.id, outcome.ours);
                let expected = match (claim.by_construction.is_some(), claim.expect_quick) {
                    (false, Some(quick)) => quick,
                    _ => outcome.expected,
                };
                let unquoted = outcome.unquoted(claim);
                if !unquoted.is_empty() {
                    problems.push(format!(
                        "{at}: its known_deviation quotes {} as ours, which this run does not give",
                        unquoted.join(", ")
                    ));
                }
                if outcome.verdict != expected {
                    problems.push(format!(
                        "{at}: verdict {} (direction at {} of {} points, ours/paper {}), but \
                         headlines.toml expects {}; update `expect`/`expect_quick` and \
                         `known_deviation`",
                        outcome.verdict.text(),
                        outcome.holding,
                        outcome.judged,
                        outcome.ratio_text(),
                        expected.text()
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let claims: usize = families.iter().map(|f| f.claims.len()).sum();
    assert_eq!(
        checked, claims,
        "every claim is about one of its family's runs"
    );
}

#[test]
fn reproduce_rewrites_only_the_generated_sections_and_is_stable() {
    let dir = tempfile::tempdir().unwrap();
    // One family folder with one claim about the (sub-second) ExpertWeave memory scenario.
    let family = dir.path().join("scenarios/expertweave");
    std::fs::create_dir_all(&family).unwrap();
    let scenario = std::fs::canonicalize("scenarios/expertweave/memory.toml").unwrap();
    let all = std::fs::read_to_string("scenarios/expertweave/headlines.toml").unwrap();
    let claim = &all[all
        .find("[[claim]]\nid = \"kv-virtual-vs-padding\"")
        .unwrap()..];
    let claim = &claim[..claim[1..].find("[[claim]]").unwrap() + 1];
    std::fs::write(
        family.join(headlines::FILE_NAME),
        format!(
            "[[run]]\nid = \"memory\"\nscenario = {:?}\n\n{claim}",
            scenario.display().to_string()
        ),
    )
    .unwrap();
    let doc = dir.path().join("reproduction.md");
    let out = dir.path().join("results");
    let prose = "# Reproduction\n\nHand-written prose stays.\n\n";
    std::fs::write(
        &doc,
        format!(
            "{prose}<!-- generated:expertweave:begin -->\nstale | 1 |\n\
             <!-- generated:expertweave:end -->\n\nMore prose.\n"
        ),
    )
    .unwrap();
    let scenarios = dir.path().join("scenarios");
    let args = |doc: &Path| {
        vec![
            "reproduce".to_string(),
            "--scenarios".into(),
            scenarios.display().to_string(),
            "--out".into(),
            out.display().to_string(),
            "--doc".into(),
            doc.display().to_string(),
        ]
    };
    let run = |doc: &Path| {
        let args = args(doc);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        expertsim(&args)
    };
    let first = run(&doc);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let text = std::fs::read_to_string(&doc).unwrap();
    assert!(
        text.starts_with(prose)
            && text.ends_with("<!-- generated:expertweave:end -->\n\nMore prose.\n")
    );
    assert!(!text.contains("stale | 1 |"));
    assert!(text.contains("| the virtual weight tensor holds more KV cache than padding"));
    assert!(out.join("expertweave/memory/results.json").is_file());
    assert!(out.join("expertweave/memory/figures").is_dir());

    let results = std::fs::read(out.join("expertweave/memory/results.json")).unwrap();
    let second = run(&doc);
    assert!(second.status.success());
    assert_eq!(
        std::fs::read_to_string(&doc).unwrap(),
        text,
        "a second run changes no byte"
    );
    assert_eq!(
        std::fs::read(out.join("expertweave/memory/results.json")).unwrap(),
        results
    );

    let unmarked = dir.path().join("unmarked.md");
    std::fs::write(&unmarked, prose).unwrap();
    let refused = run(&unmarked);
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("lacks the lines `<!-- generated:expertweave:begin -->`"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&unmarked).unwrap(), prose);
}

#[test]
fn reproduce_refuses_an_unknown_family_with_exit_code_2() {
    let output = expertsim(&["reproduce", "no-such-family", "--quick"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("family no-such-family"));
}
