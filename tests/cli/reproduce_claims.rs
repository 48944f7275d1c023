//! Every paper claim in `scenarios/<family>/headlines.toml`, checked on the quick variant of its
//! run: its verdict (direction and magnitude against the paper's number, or "input" for a
//! by-construction claim) must be the one the file expects, so a verdict that changes either way
//! fails until `expect` and `known_deviation` are updated. On the same runs, every declared value
//! of docs/reproduction.md's prose: a span must say what the run gives (or, where the quick run
//! reads other cells than the full one, the value's `quick` text must), and every other number of
//! a family's prose must be declared as the paper's or an input (`expertsim_scenario::headlines::prose`). Also
//! the `reproduce` command's document handling: generated sections and value spans replaced,
//! prose kept, a second run byte-identical, missing markers, unknown values and (given the
//! papers' text) a number quoted as the paper's that its paper lacks refused.

use crate::common::expertsim;
use expertsim_scenario::headlines::prose::{self, FamilyProse, QuickRendering};
use expertsim_scenario::headlines::{self, Headlines};
use expertsim_scenario::partial::SweepHeader;
use expertsim_scenario::scenario::ScenarioPlan;
use std::collections::BTreeMap;
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

/// Whether `quick` (a quick plan) reads, for the cells `read` (coordinates as results record
/// them) and the sweep keys `over`, exactly what `full` does: the same seeds, the same values of
/// each `over` key, and each cell's settings the same.
fn same_cells(
    full: &ScenarioPlan,
    quick: &ScenarioPlan,
    over: &[String],
    read: &[Vec<(String, serde_json::Value)>],
) -> bool {
    let axis = |plan: &ScenarioPlan, key: &str| {
        plan.axes
            .iter()
            .find(|a| a.key == key)
            .map(|a| a.values.clone())
    };
    let settings = |plan: &ScenarioPlan, coords: &[(String, serde_json::Value)]| {
        plan.cells
            .iter()
            .find(|c| {
                c.coords.len() == coords.len()
                    && c.coords.iter().zip(coords).all(|((k, v), (key, value))| {
                        k == key && serde_json::to_value(v).ok().as_ref() == Some(value)
                    })
            })
            .map(|c| format!("{:?}", c.scenario))
    };
    full.seeds == quick.seeds
        && over.iter().all(|key| axis(full, key) == axis(quick, key))
        && read.iter().all(|coords| {
            let in_full = settings(full, coords);
            in_full.is_some() && in_full == settings(quick, coords)
        })
}

#[test]
fn every_claim_gets_its_expected_verdict_and_every_value_its_text_on_its_quick_run() {
    let families = families();
    let names: Vec<&str> = families.iter().map(|h| h.family.as_str()).collect();
    for family in ["caps", "gem", "mosaic", "chimera", "expertweave"] {
        assert!(names.contains(&family), "{family} has no headlines.toml");
    }
    let mut problems = Vec::new();
    let mut checked = 0;
    let mut prose_families = Vec::new();
    let mut own_documents = Vec::new();
    for family in &families {
        if let (true, Some(doc)) = (family.claims.is_empty(), &family.doc) {
            // A study's runs and values (scenarios/studies): its runs take minutes, so here its
            // scenarios are loaded and its values checked against them, and its document's
            // spans for declaration and use; their texts are what `expertsim reproduce
            // <family>` writes.
            for run in &family.runs {
                let plan = expertsim_scenario::scenario::load(&run.scenario, &run.sets)
                    .unwrap_or_else(|e| panic!("{e}"));
                family
                    .check_against(&run.id, &plan)
                    .unwrap_or_else(|e| panic!("{e}"));
            }
            own_documents.push((doc, family));
            continue;
        }
        let mut quick_values = BTreeMap::new();
        let mut documents = BTreeMap::new();
        let mut plans = BTreeMap::new();
        let mut full_plans = BTreeMap::new();
        for run in &family.runs {
            let mut sets = run.sets.clone();
            sets.extend(run.quick.iter().cloned());
            let plan = expertsim_scenario::scenario::load(&run.scenario, &sets)
                .unwrap_or_else(|e| panic!("{e}"));
            let full_plan = expertsim_scenario::scenario::load(&run.scenario, &run.sets)
                .unwrap_or_else(|e| panic!("{e}"));
            family
                .check_against(&run.id, &plan)
                .unwrap_or_else(|e| panic!("{e}"));
            let all: Vec<usize> = (0..plan.cells.len()).collect();
            let cells = expertsim_scenario::runner::run_cells(
                &plan,
                &strategies::Registry,
                &all,
                None,
                None,
                &|| {},
                &|_, _| Ok(()),
            )
            .unwrap();
            let document = SweepHeader::of(&plan).assemble(cells);
            documents.insert(run.id.clone(), document);
            plans.insert(run.id.clone(), plan);
            full_plans.insert(run.id.clone(), full_plan);
        }
        for value in &family.values {
            let versus = value.versus_run.as_ref().unwrap_or(&value.run);
            match headlines::render_against(value, &documents[&value.run], &documents[versus]) {
                Ok(rendered) => {
                    // The cells read alternate between the value's run and the compared run when
                    // the value has `versus`.
                    let (own, compared): (Vec<_>, Vec<_>) = match value.versus {
                        Some(_) => rendered
                            .cells
                            .iter()
                            .cloned()
                            .enumerate()
                            .partition(|(i, _)| i % 2 == 0),
                        None => (rendered.cells.iter().cloned().enumerate().collect(), vec![]),
                    };
                    let strip = |cells: Vec<(usize, _)>| -> Vec<_> {
                        cells.into_iter().map(|(_, c)| c).collect()
                    };
                    let same =
                        same_cells(
                            &full_plans[&value.run],
                            &plans[&value.run],
                            &value.over,
                            &strip(own),
                        ) && same_cells(&full_plans[versus], &plans[versus], &[], &strip(compared));
                    quick_values.insert(
                        value.id.clone(),
                        QuickRendering {
                            text: rendered.text,
                            same_cells_as_full: same,
                        },
                    );
                }
                Err(e) => problems.push(format!("{}: {e}", family.family)),
            }
        }
        if let Err(e) = family.check_baselines(|id| plans.get(id)) {
            problems.push(e.to_string());
        }
        for claim in &family.claims {
            let versus = claim.versus_run.as_ref().unwrap_or(&claim.run);
            let outcome =
                headlines::evaluate_against(claim, &documents[&claim.run], &documents[versus])
                    .unwrap();
            checked += 1;
            let at = format!("{}/{} ({})", family.family, claim.id, outcome.ours);
            let expected = match (claim.by_construction.is_some(), claim.expect_quick) {
                (false, Some(quick)) => quick,
                _ => outcome.expected,
            };
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
        prose_families.push(FamilyProse {
            headlines: family,
            quick: quick_values,
        });
    }
    let doc_path = Path::new("docs/reproduction.md");
    let doc = std::fs::read_to_string(doc_path).unwrap();
    problems.extend(prose::check_document(doc_path, &doc, &prose_families));
    for (doc_path, family) in own_documents {
        let doc = std::fs::read_to_string(doc_path).unwrap();
        let families = [FamilyProse {
            headlines: family,
            quick: BTreeMap::new(),
        }];
        problems.extend(prose::check_document(doc_path, &doc, &families));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let claims: usize = families.iter().map(|f| f.claims.len()).sum();
    assert_eq!(
        checked, claims,
        "every claim is about one of its family's runs"
    );
}

/// The rule's tolerances as docs/reproduction.md states them are the code's.
#[test]
fn the_documented_verdict_rule_uses_the_codes_tolerances() {
    let doc = std::fs::read_to_string("docs/reproduction.md").unwrap();
    let relative = format!(
        "within {}%",
        expertsim_scenario::headlines::RELATIVE_TOLERANCE * 100.0
    );
    let absolute = format!(
        "within {} points",
        expertsim_scenario::headlines::ABSOLUTE_TOLERANCE_POINTS
    );
    for text in [relative, absolute] {
        assert!(doc.contains(&text), "docs/reproduction.md lacks `{text}`");
    }
}

/// A headlines file of runs and values alone (a study's) names its own document with `doc`:
/// `reproduce` writes that document's spans, asks it for no generated section, leaves the
/// default document alone, and `--papers` skips the file, which quotes no paper.
#[test]
fn reproduce_writes_a_study_file_into_the_document_it_names() {
    let dir = tempfile::tempdir().unwrap();
    let family = dir.path().join("scenarios/studies");
    std::fs::create_dir_all(&family).unwrap();
    std::fs::create_dir_all(dir.path().join("docs")).unwrap();
    let scenario = std::fs::canonicalize("scenarios/expertweave/memory.toml").unwrap();
    std::fs::write(
        family.join(headlines::FILE_NAME),
        format!(
            "doc = \"../../docs/studies.md\"\n\n[[run]]\nid = \"memory\"\nscenario = {:?}\n\
             sets = [\"seeds=[1]\"]\n\n[[value]]\nid = \"kv-virtual-3\"\nrun = \"memory\"\n\
             metric = \"kv_capacity_tokens\"\n\
             cell = {{ \"adapters.memory.kind\" = \"virtual_weight_tensor\", \"adapters.count\" = 3 }}\n\
             decimals = 0\ngrouping = true\nunit = \" tokens\"\n",
            scenario.display().to_string()
        ),
    )
    .unwrap();
    let study = dir.path().join("docs/studies.md");
    let prose = "# Studies\n\nKV: <!-- value:studies/kv-virtual-3 -->stale<!-- /value -->.\n";
    std::fs::write(&study, prose).unwrap();
    let default_doc = dir.path().join("reproduction.md");
    std::fs::write(&default_doc, "untouched\n").unwrap();
    let papers = dir.path().join("papers");
    std::fs::create_dir_all(&papers).unwrap();
    let scenarios = dir.path().join("scenarios").display().to_string();
    let out = dir.path().join("results").display().to_string();
    let papers = papers.display().to_string();
    let doc = default_doc.display().to_string();
    let args = [
        "reproduce",
        "studies",
        "--scenarios",
        &scenarios,
        "--out",
        &out,
        "--doc",
        &doc,
        "--papers",
        &papers,
    ];
    let output = expertsim(&args);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = std::fs::read_to_string(&study).unwrap();
    let written = text
        .strip_prefix("# Studies\n\nKV: <!-- value:studies/kv-virtual-3 -->")
        .and_then(|rest| rest.strip_suffix(" tokens<!-- /value -->.\n"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        written.len() >= 5 && written.chars().all(|c| c.is_ascii_digit() || c == ','),
        "{written}"
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(&format!("studies/kv-virtual-3: {written} tokens")),
        "{stdout}"
    );
    assert_eq!(
        std::fs::read_to_string(&default_doc).unwrap(),
        "untouched\n"
    );
    assert_eq!(expertsim(&args).status.code(), Some(0));
    assert_eq!(
        std::fs::read_to_string(&study).unwrap(),
        text,
        "a second run changes no byte"
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
    // The baseline it names.
    let baseline = &all[all.find("[[baseline]]\nname = \"padding\"").unwrap()..];
    let baseline = &baseline[..baseline.find("\n\n").unwrap() + 1];
    // The value its explanation quotes, and one value of the prose: the virtual weight tensor's
    // KV tokens with 3 adapters.
    let quoted = &all[all
        .find("[[value]]\nid = \"kv-virtual-vs-padding-1\"")
        .unwrap()..];
    let quoted = &quoted[..quoted.find("\n\n").unwrap() + 1];
    let value = format!(
        "{quoted}\n[[value]]\nid = \"kv-virtual-3\"\nrun = \"memory\"\n\
         metric = \"kv_capacity_tokens\"\n\
         cell = {{ \"adapters.memory.kind\" = \"virtual_weight_tensor\", \"adapters.count\" = 3 }}\n\
         decimals = 0\ngrouping = true\nunit = \" tokens\"\n"
    );
    std::fs::write(
        family.join(headlines::FILE_NAME),
        format!(
            "[[run]]\nid = \"memory\"\nscenario = {:?}\nsets = [\"seeds=[1, 2, 3, 4, 5]\"]\n\n\
             {baseline}\n{claim}\n{value}",
            scenario.display().to_string()
        ),
    )
    .unwrap();
    let doc = dir.path().join("reproduction.md");
    let out = dir.path().join("results");
    let prose = "# Reproduction\n\nHand-written prose stays: \
                 <!-- value:expertweave/kv-virtual-3 -->stale<!-- /value --> of KV.\n\n";
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
    let (before, after) = prose.split_once("stale").unwrap();
    assert!(
        text.starts_with(before)
            && text.ends_with("<!-- generated:expertweave:end -->\n\nMore prose.\n")
    );
    // The span now holds the run's number as its value declares it: `ddd,ddd tokens`.
    let written = &text[before.len()..text.find(after).unwrap()];
    let digits = written
        .strip_suffix(" tokens")
        .unwrap_or_else(|| panic!("{written}"));
    assert!(
        digits.len() >= 5
            && digits.chars().all(|c| c.is_ascii_digit() || c == ',')
            && digits.chars().rev().nth(3) == Some(','),
        "{written}"
    );
    assert!(!text.contains("stale | 1 |"));
    assert!(text.contains("| the virtual weight tensor holds more KV cache than padding"));
    // The explanation's placeholder is filled with the run's number.
    let note = &text[text.find("1. kv-virtual-vs-padding: ").unwrap()..];
    let note = &note[..note.find('\n').unwrap()];
    assert!(!note.contains("{value:"), "{note}");
    let gain = note
        .strip_prefix("1. kv-virtual-vs-padding: With one adapter the virtual weight tensor gains ")
        .and_then(|rest| rest.split_once("% over padding"))
        .map(|(number, _)| number)
        .unwrap_or_else(|| panic!("{note}"));
    assert!(gain.parse::<f64>().is_ok_and(|g| g > 0.0), "{note}");
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

    // With the papers' text: a number quoted as the paper's that its paper lacks is refused
    // before anything runs; the paper holding it passes.
    let papers = dir.path().join("papers");
    std::fs::create_dir_all(&papers).unwrap();
    let with_papers = |paper: &str| {
        std::fs::write(papers.join("expertweave.txt"), paper).unwrap();
        let mut args = args(&doc);
        args.extend(["--papers".to_string(), papers.display().to_string()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        expertsim(&args)
    };
    let lacking = with_papers("KV cache capacity up to 22.8% larger.");
    assert_eq!(lacking.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&lacking.stderr);
    assert!(
        stderr.contains("claim kv-virtual-vs-padding paper `+22.8% to +63.4% over the padding-based configuration`: 63.4 is not in"),
        "{stderr}"
    );
    assert!(
        with_papers("between 22.8% and 63.4% more KV cache")
            .status
            .success()
    );
    assert_eq!(std::fs::read_to_string(&doc).unwrap(), text);

    // A span naming a value the family does not declare: refused before anything runs.
    let unknown = dir.path().join("unknown.md");
    let unknown_text = text.replace("expertweave/kv-virtual-3", "expertweave/kv-virtual-4");
    std::fs::write(&unknown, &unknown_text).unwrap();
    let refused = run(&unknown);
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("unknown.md:3: value `expertweave/kv-virtual-4` is not declared"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&unknown).unwrap(), unknown_text);

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

/// Adding a paper preset is one folder: a scenario of the one (serving) simulator and a
/// headlines.toml beside it, under the scenarios folder, plus its generated section's markers in
/// the document. No code names it: `reproduce` finds the folder, runs its run, judges its claim
/// and writes its section, as it does for the five papers.
#[test]
fn a_toy_paper_preset_is_one_folder_that_reproduce_finds() {
    let dir = tempfile::tempdir().unwrap();
    let preset = dir.path().join("scenarios/toy");
    std::fs::create_dir_all(&preset).unwrap();
    let quick = std::fs::read_to_string("scenarios/serving/quick.toml").unwrap();
    std::fs::write(
        preset.join("load.toml"),
        quick
            .replace("name = \"serving-quick\"", "name = \"toy-load\"")
            .replace("seeds = [42]", "seeds = [1, 2, 3, 4, 5]")
            + "\n[sweep]\n\"arrival.rate_per_s\" = [2.0, 16.0]\n",
    )
    .unwrap();
    std::fs::write(
        preset.join(headlines::FILE_NAME),
        "[[run]]\nid = \"load\"\nscenario = \"load.toml\"\n\n\
         [[baseline]]\nname = \"heavy\"\npaper = \"heavy load\"\n\
         requires = { \"arrival.rate_per_s\" = 16.0 }\n\n\
         [[claim]]\nid = \"load-slows\"\nrun = \"load\"\n\
         claim = \"eight times the load lengthens the p99 end-to-end latency\"\n\
         metric = \"e2e_p99_ms\"\nstatistic = \"ratio\"\n\
         cell = { \"arrival.rate_per_s\" = 2.0 }\nversus = { \"arrival.rate_per_s\" = 16.0 }\n\
         direction = \"lower\"\nbaseline = \"heavy\"\n\
         paper = \"slower than under heavy load\"\nexpect = \"reproduced\"\n",
    )
    .unwrap();
    let doc = dir.path().join("reproduction.md");
    std::fs::write(
        &doc,
        "# Toy\n\n<!-- generated:toy:begin -->\n<!-- generated:toy:end -->\n",
    )
    .unwrap();
    let scenarios = dir.path().join("scenarios");
    let out = dir.path().join("results");
    let output = expertsim(&[
        "reproduce",
        "--scenarios",
        scenarios.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--doc",
        doc.to_str().unwrap(),
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = std::fs::read_to_string(&doc).unwrap();
    assert!(
        text.contains("eight times the load lengthens the p99 end-to-end latency"),
        "{text}"
    );
    assert!(text.contains("(of 1 claims)"), "{text}");
    let results = std::fs::read_to_string(out.join("toy/load/results.json")).unwrap();
    assert!(results.contains("\"family\": \"serving\""), "{results}");
}
