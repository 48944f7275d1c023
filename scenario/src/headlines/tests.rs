use super::*;
use crate::metrics::AcrossSeeds;
use crate::results::{
    CellResult, ResultsDocument, RunResult, ScenarioEcho, SweepAxisEcho, ToolInfo,
};
use serde_json::json;

/// A CAPS-shaped document: selectors x rates, p99 given per cell (one seed).
fn document(p99: &[(&str, i64, f64)]) -> ResultsDocument {
    let per_seed: Vec<(&str, i64, Vec<f64>)> = p99
        .iter()
        .map(|&(kind, rate, value)| (kind, rate, vec![value]))
        .collect();
    seeded_document(&per_seed)
}

/// A CAPS-shaped document: selectors x rates, p99 given per cell and seed (seeds 1, 2, ...).
fn seeded_document(p99: &[(&str, i64, Vec<f64>)]) -> ResultsDocument {
    let n_seeds = p99.first().map_or(1, |(_, _, values)| values.len());
    let cells = p99
        .iter()
        .map(|(kind, rate, values)| CellResult {
            id: format!("{kind}@{rate}"),
            coords: vec![
                ("arrival.rate_per_s".into(), json!(rate)),
                ("scheduler.selector".into(), json!({ "kind": kind })),
            ],
            cost_model: "test".into(),
            runs: values
                .iter()
                .enumerate()
                .map(|(i, &value)| RunResult {
                    seed: i as u64 + 1,
                    scalars: [("e2e_p99_ms".to_string(), value)].into(),
                    details: json!({}),
                })
                .collect(),
            trace: None,
            summary: [("e2e_p99_ms".to_string(), AcrossSeeds::of(values))].into(),
            improvement: None,
        })
        .collect();
    ResultsDocument {
        tool: ToolInfo {
            name: "expertsim".into(),
            version: "0".into(),
        },
        scenario: ScenarioEcho {
            name: "t".into(),
            description: String::new(),
            family: crate::registry::family("serving").unwrap(),
            document: json!({}),
        },
        seeds: (1..=n_seeds as u64).collect(),
        sweep: vec![
            SweepAxisEcho {
                key: "arrival.rate_per_s".into(),
                values: vec![json!(150), json!(300)],
            },
            SweepAxisEcho {
                key: "scheduler.selector".into(),
                values: vec![json!({ "kind": "fcfs" }), json!({ "kind": "gv" })],
            },
        ],
        sweep_only: Vec::new(),
        baseline: None,
        cells,
    }
}

fn claim(text: &str) -> Claim {
    toml::from_str(text).unwrap()
}

const CLAIM: &str = r#"
id = "c"
run = "r"
baseline = "fcfs"
claim = "gv beats fcfs"
metric = "e2e_p99_ms"
statistic = "improvement_pct"
cell = { "scheduler.selector.kind" = "gv" }
versus = { "scheduler.selector.kind" = "fcfs" }
over = "arrival.rate_per_s"
direction = "lower"
paper = "+18% over FCFS"
"#;

/// The baseline `CLAIM` names.
const BASELINE: &str = r#"
[[baseline]]
name = "fcfs"
paper = "FCFS"
requires = { "scheduler.selector.kind" = "fcfs" }
"#;

#[test]
fn a_claim_over_an_axis_holds_only_at_every_point() {
    let doc = document(&[
        ("fcfs", 150, 100.0),
        ("gv", 150, 80.0),
        ("fcfs", 300, 100.0),
        ("gv", 300, 110.0),
    ]);
    let outcome = evaluate(&claim(CLAIM), &doc).unwrap();
    assert_eq!((outcome.holding, outcome.judged), (1, 2));
    assert_eq!(outcome.verdict, Verdict::NotReproduced);
    assert!(!outcome.as_expected());
    assert_eq!(outcome.ours, "-10.0% to +20.0%");

    let mean = claim(&format!("{CLAIM}aggregate = \"mean\"\n"));
    let outcome = evaluate(&mean, &doc).unwrap();
    assert_eq!(outcome.verdict, Verdict::Reproduced, "mean change is -5%");
    assert_eq!(outcome.ours, "+5.0% (mean of +20.0%, -10.0%)");
}

#[test]
fn a_closeness_claim_holds_where_ours_is_within_the_tolerance_of_the_paper() {
    // gv's P99 changes by +1% at 150 and +5% at 300: the paper says "negligible" (0).
    let doc = document(&[
        ("fcfs", 150, 100.0),
        ("gv", 150, 101.0),
        ("fcfs", 300, 100.0),
        ("gv", 300, 105.0),
    ]);
    let close = |value: &str| {
        let text = CLAIM
            .replace("direction = \"lower\"", "direction = \"close\"")
            .replace(
                "statistic = \"improvement_pct\"",
                "statistic = \"change_pct\"",
            );
        claim(&format!("{text}paper_value = {value}\n"))
    };
    let outcome = evaluate(&close("0.0"), &doc).unwrap();
    // +1% is within 2 points of 0, +5% is not: no direction to fall back on.
    assert_eq!((outcome.holding, outcome.judged), (1, 2));
    assert_eq!(outcome.verdict, Verdict::NotReproduced);
    assert_eq!(
        evaluate(&close("[0.0, 4.0]"), &doc).unwrap().verdict,
        Verdict::Reproduced
    );
}

#[test]
fn the_magnitude_decides_between_reproduced_and_direction_only() {
    // gv improves P99 by 20% and 10%.
    let doc = document(&[
        ("fcfs", 150, 100.0),
        ("gv", 150, 80.0),
        ("fcfs", 300, 100.0),
        ("gv", 300, 90.0),
    ]);
    let with = |value: &str| claim(&format!("{CLAIM}paper_value = {value}\n"));
    // Both inside the paper's range.
    let inside = evaluate(&with("[9.0, 21.0]"), &doc).unwrap();
    assert_eq!(inside.verdict, Verdict::Reproduced);
    assert_eq!(inside.distance_text(&with("1.0")), "inside");
    assert_eq!(inside.ratio_text(), "1.00");
    // 10% is 8 points and 44% below 18: outside both tolerances.
    let far = evaluate(&with("18.0"), &doc).unwrap();
    assert_eq!(far.verdict, Verdict::DirectionOnly);
    assert_eq!(far.ratio_text(), "0.56 to 1.11");
    let m = far.magnitude.as_ref().unwrap();
    assert!((m.worst_distance - 8.0).abs() < 1e-9 && !m.within);
    // 2 points absolute: 10% against 12% is within, though 17% off relatively.
    assert_eq!(
        evaluate(&with("[12.0, 20.0]"), &doc).unwrap().verdict,
        Verdict::Reproduced
    );
    // 25% relative: 10% against 13% is 3 points but 23% off.
    assert_eq!(
        evaluate(&with("[13.0, 20.0]"), &doc).unwrap().verdict,
        Verdict::Reproduced
    );
    assert_eq!(
        evaluate(&with("[14.0, 20.0]"), &doc).unwrap().verdict,
        Verdict::DirectionOnly
    );
    // One value per point of the axis.
    let per = evaluate(&with("{ \"150\" = 20.0, \"300\" = 40.0 }"), &doc).unwrap();
    assert_eq!(per.verdict, Verdict::DirectionOnly);
    assert_eq!(per.ratio_text(), "0.25 to 1.00");
    // A claim expecting direction only passes; the same claim now reproduced does not.
    let expecting = claim(&format!(
        "{CLAIM}paper_value = 18.0\nexpect = \"direction_only\"\nknown_deviation = \"why\"\n"
    ));
    assert!(evaluate(&expecting, &doc).unwrap().as_expected());
    let better = document(&[
        ("fcfs", 150, 100.0),
        ("gv", 150, 82.0),
        ("fcfs", 300, 100.0),
        ("gv", 300, 83.0),
    ]);
    let outcome = evaluate(&expecting, &better).unwrap();
    assert_eq!(outcome.verdict, Verdict::Reproduced);
    assert!(
        !outcome.as_expected(),
        "an improved verdict needs its text updated"
    );
}

#[test]
fn a_by_construction_claim_is_an_input_never_reproduced() {
    let doc = document(&[
        ("fcfs", 150, 100.0),
        ("gv", 150, 80.0),
        ("fcfs", 300, 100.0),
        ("gv", 300, 80.0),
    ]);
    let input = claim(&format!(
        "{CLAIM}paper_value = 20.0\nby_construction = \"the latencies are inputs\"\n"
    ));
    let outcome = evaluate(&input, &doc).unwrap();
    assert_eq!(outcome.verdict, Verdict::Input);
    assert!(outcome.as_expected());
}

#[test]
fn an_ambiguous_or_missing_cell_is_an_error() {
    let doc = document(&[("fcfs", 150, 100.0), ("gv", 150, 80.0)]);
    let err = evaluate(&claim(CLAIM), &doc).unwrap_err();
    assert!(err.contains("no cell of t has"), "{err}");
    let unspecific = claim(&CLAIM.replace("over = \"arrival.rate_per_s\"\n", ""));
    let doc = document(&[("fcfs", 150, 1.0), ("gv", 150, 1.0), ("gv", 300, 1.0)]);
    let err = evaluate(&unspecific, &doc).unwrap_err();
    assert!(err.contains("2 cells of t"), "{err}");
}

#[test]
fn load_reports_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let family = dir.path().join("caps");
    std::fs::create_dir(&family).unwrap();
    std::fs::write(family.join("s.toml"), "").unwrap();
    let path = family.join(FILE_NAME);
    let write = |text: &str| std::fs::write(&path, format!("{text}\n{BASELINE}")).unwrap();

    write(&format!(
        "[[run]]\nid = \"r\"\nscenario = \"s.toml\"\n\n[[claim]]\n{}",
        CLAIM.replace("direction = \"lower\"", "direction = \"down\"")
    ));
    let err = load(&path).unwrap_err().to_string();
    assert!(err.contains("headlines.toml:16:"), "{err}");
    assert!(err.contains("field `claim[0].direction`"), "{err}");

    write(&format!(
        "[[run]]\nid = \"r\"\nscenario = \"missing.toml\"\n\n[[claim]]\n{CLAIM}"
    ));
    let err = load(&path).unwrap_err().to_string();
    assert!(err.contains(":3:1: field `run[0].scenario`"), "{err}");

    write(&format!(
        "[[run]]\nid = \"q\"\nscenario = \"s.toml\"\n\n[[claim]]\n{CLAIM}"
    ));
    let err = load(&path).unwrap_err().to_string();
    assert!(
        err.contains("field `claim[0].run`: no [[run]] has id `r`"),
        "{err}"
    );

    let run = "[[run]]\nid = \"r\"\nscenario = \"s.toml\"\n\n[[claim]]\n";
    write(&format!("{run}{CLAIM}by_construction = \" \"\n"));
    let err = load(&path).unwrap_err().to_string();
    assert!(
        err.contains(
            "field `claim[0].by_construction`: a claim that holds by construction needs its reason"
        ),
        "{err}"
    );
    write(&format!("{run}{CLAIM}by_construction = true\n"));
    assert!(load(&path).is_err(), "the reason is text, not a flag");
    write(&format!("{run}{CLAIM}expect = \"direction_only\"\n"));
    let err = load(&path).unwrap_err().to_string();
    assert!(err.contains("field `claim[0].known_deviation`"), "{err}");
    write(&format!("{run}{CLAIM}known_deviation = \"why\"\n"));
    let err = load(&path).unwrap_err().to_string();
    assert!(err.contains("field `claim[0].expect`"), "{err}");
    write(&format!(
        "{run}{CLAIM}\n[[input]]\nname = \"n\"\nvalue = \"1\"\nhow = \"chosen\"\nsource = \"\"\n"
    ));
    let err = load(&path).unwrap_err().to_string();
    assert!(err.contains("field `input[0].source`"), "{err}");

    write(&format!(
        "[[run]]\nid = \"r\"\nscenario = \"s.toml\"\n\n[[claim]]\n{CLAIM}"
    ));
    let headlines = load(&path).unwrap();
    assert_eq!(headlines.family, "caps");
    assert_eq!(headlines.claims.len(), 1);
    assert_eq!(headlines.claims[0].run, "r");
}

#[test]
fn versus_replaces_every_key_on_its_sweep_axis() {
    let mut doc = document(&[("fcfs", 150, 100.0), ("gv", 150, 80.0)]);
    // The claimed cell names a parameter of its table-valued selector that the compared one lacks.
    doc.cells[1].coords[1].1 = json!({ "kind": "gv", "window": 8 });
    let text = CLAIM
        .replace("over = \"arrival.rate_per_s\"\n", "")
        .replace(
            "cell = { \"scheduler.selector.kind\" = \"gv\" }",
            "cell = { \"scheduler.selector.kind\" = \"gv\", \"scheduler.selector.window\" = 8 }",
        );
    let outcome = evaluate(&claim(&text), &doc).unwrap();
    assert_eq!(
        outcome.points,
        vec![Point {
            cell: 80.0,
            versus: 100.0
        }]
    );
    assert_eq!(outcome.verdict, Verdict::Reproduced);
}

fn value(text: &str) -> Value {
    toml::from_str(text).unwrap()
}

const FCFS_P99: &str = r#"
id = "fcfs-p99"
run = "r"
metric = "e2e_p99_ms"
cell = { "scheduler.selector.kind" = "fcfs" }
over = ["arrival.rate_per_s"]
decimals = 0
unit = " ms"
"#;

#[test]
fn a_value_renders_its_cells_in_its_format() {
    let doc = document(&[
        ("fcfs", 150, 100.0),
        ("gv", 150, 80.0),
        ("fcfs", 300, 110.4),
        ("gv", 300, 121.44),
    ]);
    let rendered = render(&value(FCFS_P99), &doc).unwrap();
    assert_eq!(rendered.text, "100-110 ms");
    assert_eq!(rendered.cells.len(), 2, "one cell per rate");
    let with = |extra: &str| {
        render(&value(&format!("{FCFS_P99}{extra}")), &doc)
            .unwrap()
            .text
    };
    assert_eq!(with("combine = \"mean\"\n"), "105 ms");
    assert_eq!(with("combine = \"each\"\n"), "100 ms, 110 ms");
    // gv against fcfs: -20% at 150, +10% at 300 (lower is better: improvements +20%, -10%).
    let gain = FCFS_P99
        .replace(
            "\"fcfs\" }",
            "\"gv\" }\nversus = { \"scheduler.selector.kind\" = \"fcfs\" }",
        )
        .replace("decimals = 0\nunit = \" ms\"", "decimals = 1\nunit = \"%\"");
    let gain_with = |extra: &str| {
        render(&value(&format!("{gain}{extra}")), &doc)
            .unwrap()
            .text
    };
    assert_eq!(
        gain_with("statistic = \"improvement_pct\"\n"),
        "-10.0% to 20.0%"
    );
    assert_eq!(
        gain_with("statistic = \"improvement_pct\"\nsign = true\n"),
        "-10.0% to +20.0%"
    );
    let ratio = gain.replace("decimals = 1\nunit = \"%\"", "decimals = 2\nunit = \"x\"");
    let ratio = format!("{ratio}statistic = \"ratio\"\ncombine = \"each\"\n");
    assert_eq!(render(&value(&ratio), &doc).unwrap().text, "1.25x, 0.91x");
    // One cell, scaled, grouped.
    let one = |extra: &str| {
        let text = FCFS_P99.replace("over = [\"arrival.rate_per_s\"]\n", "");
        let text = format!("{text}{extra}")
            .replace("\"fcfs\" }", "\"fcfs\", \"arrival.rate_per_s\" = 300 }");
        render(&value(&text), &doc).unwrap().text
    };
    assert_eq!(one("scale = 10000.0\ngrouping = true\n"), "1,104,000 ms");
    assert_eq!(one(""), "110 ms");
    let missing = FCFS_P99.replace("\"fcfs\"", "\"lpt\"");
    let err = render(&value(&missing), &doc).unwrap_err();
    assert!(err.starts_with("value fcfs-p99: no cell of t has"), "{err}");
}

/// `within` keeps some values of an `over` axis: the range over the rates it lists only, in the
/// axis's order; a value the axis lacks is an error naming it.
#[test]
fn a_value_within_some_axis_values_reads_only_those() {
    let doc = document(&[
        ("fcfs", 150, 100.0),
        ("gv", 150, 80.0),
        ("fcfs", 300, 110.4),
        ("gv", 300, 121.44),
    ]);
    let within = |kept: &str| {
        let text = format!(
            "{FCFS_P99}within = {{ \"arrival.rate_per_s\" = {kept} }}\ncombine = \"each\"\n"
        );
        render(&value(&text), &doc)
    };
    let only = within("[300]").unwrap();
    assert_eq!(only.text, "110 ms");
    assert_eq!(only.cells.len(), 1, "one rate read");
    assert_eq!(within("[300, 150]").unwrap().text, "100 ms, 110 ms");
    let err = within("[200]").unwrap_err();
    assert!(
        err.contains("value fcfs-p99: within `arrival.rate_per_s`: 200 is not a value of the axis"),
        "{err}"
    );
}

#[test]
fn load_refuses_within_off_the_over_keys_or_empty() {
    let dir = tempfile::tempdir().unwrap();
    let family = dir.path().join("caps");
    std::fs::create_dir(&family).unwrap();
    std::fs::write(family.join("s.toml"), "rate = [150, 300]\n").unwrap();
    let path = family.join(FILE_NAME);
    let load_text = |extra: &str| {
        let text =
            format!("[[run]]\nid = \"r\"\nscenario = \"s.toml\"\n\n[[value]]\n{FCFS_P99}{extra}");
        std::fs::write(&path, text).unwrap();
        load(&path).map_err(|e| e.to_string())
    };
    let err = load_text("within = { \"scheduler.selector\" = [{ kind = \"gv\" }] }\n").unwrap_err();
    assert!(
        err.contains("field `value[0].within.scheduler.selector`: `scheduler.selector` is not one of the value's `over` keys"),
        "{err}"
    );
    let err = load_text("within = { \"arrival.rate_per_s\" = [] }\n").unwrap_err();
    assert!(
        err.contains("field `value[0].within.arrival.rate_per_s`"),
        "{err}"
    );
    assert!(err.contains("a non-empty array"), "{err}");
    assert!(load_text("within = { \"arrival.rate_per_s\" = [150] }\n").is_ok());
}

#[test]
fn a_number_format_writes_ranges_signs_and_no_negative_zero() {
    let format = |decimals, sign, unit: &str| NumberFormat {
        decimals,
        sign,
        grouping: false,
        unit: unit.into(),
    };
    assert_eq!(format(1, true, "%").text(-0.04), "+0.0%");
    assert_eq!(format(1, false, "").text(-0.04), "0.0");
    assert_eq!(format(1, false, "").range(4.91, 5.49), "4.9-5.5");
    assert_eq!(format(1, false, "").range(4.91, 4.94), "4.9");
    assert_eq!(format(0, false, "%").range(-23.0, -16.0), "-23% to -16%");
    assert_eq!(format(2, false, "x").range(0.834, 1.04), "0.83-1.04x");
    assert_eq!(
        NumberFormat {
            grouping: true,
            ..format(1, true, "")
        }
        .text(-1234567.89),
        "-1,234,567.9"
    );
}

/// A study's headlines: runs and values without claims, baselines or a paper, writing their
/// spans into a document of their own named by `doc` (relative to the headlines file).
#[test]
fn load_takes_a_file_of_runs_and_values_naming_its_own_document() {
    let dir = tempfile::tempdir().unwrap();
    let family = dir.path().join("studies");
    std::fs::create_dir(&family).unwrap();
    std::fs::write(family.join("s.toml"), "rate = [150, 300]\n").unwrap();
    std::fs::create_dir(dir.path().join("docs")).unwrap();
    std::fs::write(dir.path().join("docs/studies.md"), "# Studies\n").unwrap();
    let path = family.join(FILE_NAME);
    let load_text = |text: &str| {
        std::fs::write(&path, text).unwrap();
        load(&path).map_err(|e| e.to_string())
    };
    let run = "[[run]]\nid = \"r\"\nscenario = \"s.toml\"\n";
    let loaded = load_text(&format!(
        "doc = \"../docs/studies.md\"\n{run}\n[[value]]\n{FCFS_P99}"
    ))
    .unwrap();
    assert_eq!(
        loaded.doc.as_deref(),
        Some(family.join("../docs/studies.md").as_path())
    );
    assert!(loaded.claims.is_empty() && loaded.baselines.is_empty());
    assert!(!loaded.quotes_paper());
    assert_eq!(loaded.values.len(), 1);
    let err = load_text(&format!(
        "doc = \"../docs/missing.md\"\n{run}\n[[value]]\n{FCFS_P99}"
    ))
    .unwrap_err();
    assert!(
        err.contains("headlines.toml:1:1: field `doc`: no document at"),
        "{err}"
    );
    assert!(err.contains("missing.md"), "{err}");
    let err = load_text(&format!("doc = 3\n{run}")).unwrap_err();
    assert!(err.contains("field `doc`"), "{err}");
    let default_doc = load_text(&format!("{run}\n[[value]]\n{FCFS_P99}")).unwrap();
    assert_eq!(default_doc.doc, None);
    let quoting = load_text(&format!(
        "{run}\n[[value]]\n{FCFS_P99}\n[prose]\npaper = [\"up to 16.5%\"]\n"
    ))
    .unwrap();
    assert!(quoting.quotes_paper());
}

#[test]
fn load_refuses_a_value_declared_twice_or_without_its_statistic() {
    let dir = tempfile::tempdir().unwrap();
    let family = dir.path().join("caps");
    std::fs::create_dir(&family).unwrap();
    std::fs::write(family.join("s.toml"), "rate = [150, 300]\n").unwrap();
    let path = family.join(FILE_NAME);
    let run = "[[run]]\nid = \"r\"\nscenario = \"s.toml\"\n";
    let load_text = |text: &str| {
        std::fs::write(&path, format!("{run}{text}\n{BASELINE}")).unwrap();
        load(&path).map_err(|e| e.to_string())
    };
    let twice = load_text(&format!("\n[[value]]\n{FCFS_P99}\n[[value]]\n{FCFS_P99}")).unwrap_err();
    assert!(
        twice.contains("field `value[1].id`: value id `fcfs-p99` is declared twice"),
        "{twice}"
    );
    let versus = FCFS_P99.replace(
        "decimals",
        "versus = { \"scheduler.selector.kind\" = \"gv\" }\ndecimals",
    );
    let err = load_text(&format!("\n[[value]]\n{versus}")).unwrap_err();
    assert!(err.contains("field `value[0].statistic`"), "{err}");
    let err = load_text(&format!(
        "\n[[value]]\n{}",
        FCFS_P99.replace("run = \"r\"", "run = \"q\"")
    ))
    .unwrap_err();
    assert!(
        err.contains("field `value[0].run`: no [[run]] has id `q`"),
        "{err}"
    );
    let unknown = format!(
        "\n[[claim]]\n{CLAIM}expect = \"direction_only\"\nknown_deviation = \"ours is {{value:nope}}\"\n"
    );
    let err = load_text(&unknown).unwrap_err();
    assert!(err.contains("`{value:nope}` names no [[value]]"), "{err}");
    let input =
        "\n[[input]]\nname = \"n\"\nvalue = \"1\"\nhow = \"else {value:nope}\"\nsource = \"s\"\n";
    let err = load_text(input).unwrap_err();
    assert!(
        err.contains("field `input[0].how`: `{value:nope}` names no [[value]]"),
        "{err}"
    );
    let err = load_text("\n[prose]\npaper = [\"no number here\"]\n").unwrap_err();
    assert!(err.contains("field `prose.paper[0]`"), "{err}");
    let err = load_text("\n[prose.inputs]\n\"missing.toml\" = [\"rate 150\"]\n").unwrap_err();
    assert!(err.contains("no file at"), "{err}");
    let ok = load_text(&format!(
        "\n[[value]]\n{FCFS_P99}\n[prose.inputs]\n\"s.toml\" = [\"rate 150\"]\n"
    ))
    .unwrap();
    assert_eq!(ok.values.len(), 1);
    assert_eq!(
        ok.prose.inputs.keys().next().unwrap(),
        &family.join("s.toml")
    );
}

#[test]
fn a_pooled_axis_adds_its_values_as_more_points() {
    // Two datasets: gv gains 20% and 10% on the first, loses 10% at 300 on the second.
    let mut doc = document(&[
        ("fcfs", 150, 100.0),
        ("gv", 150, 80.0),
        ("fcfs", 300, 100.0),
        ("gv", 300, 90.0),
    ]);
    let second = document(&[
        ("fcfs", 150, 100.0),
        ("gv", 150, 90.0),
        ("fcfs", 300, 100.0),
        ("gv", 300, 110.0),
    ]);
    for (cell, dataset) in doc.cells.iter_mut().map(|c| (c, "a")) {
        cell.coords
            .push(("workload.dataset".into(), json!(dataset)));
    }
    doc.cells.extend(second.cells.into_iter().map(|mut c| {
        c.id.push_str("@b");
        c.coords.push(("workload.dataset".into(), json!("b")));
        c
    }));
    doc.sweep.push(SweepAxisEcho {
        key: "workload.dataset".into(),
        values: vec![json!("a"), json!("b")],
    });
    // Without the pool the claim's cells are ambiguous.
    assert!(evaluate(&claim(CLAIM), &doc).is_err());
    let pooled = claim(&format!(
        "{CLAIM}pool = [\"workload.dataset\"]\naggregate = \"mean\"\npaper_value = 7.5\n"
    ));
    let outcome = evaluate(&pooled, &doc).unwrap();
    // The mean of +20, +10, +10 and -10 over both axes.
    assert_eq!(
        outcome.ours,
        "+7.5% (mean of +20.0%, +10.0%, +10.0%, -10.0%)"
    );
    assert_eq!(outcome.verdict, Verdict::Reproduced);
    // The paper's "up to": the best point.
    let best = claim(&format!(
        "{CLAIM}pool = [\"workload.dataset\"]\naggregate = \"best\"\npaper_value = 16.5\n"
    ));
    let outcome = evaluate(&best, &doc).unwrap();
    assert_eq!(
        outcome.ours,
        "+20.0% (best of +20.0%, +10.0%, +10.0%, -10.0%)"
    );
    assert_eq!(
        outcome.verdict,
        Verdict::Reproduced,
        "20 is 3.5 points above 16.5"
    );
    let every = claim(&format!("{CLAIM}pool = [\"workload.dataset\"]\n"));
    let outcome = evaluate(&every, &doc).unwrap();
    assert_eq!((outcome.holding, outcome.judged), (3, 4));
}

#[test]
fn each_seed_is_judged_alone_and_four_of_five_make_a_verdict_stable() {
    // gv's P99 against fcfs's 100 at 150 and 300 req/s, per seed: seed 5 alone reverses the
    // direction at 300 req/s.
    let doc = |last: f64| {
        seeded_document(&[
            ("fcfs", 150, vec![100.0; 5]),
            ("gv", 150, vec![80.0, 82.0, 84.0, 86.0, 88.0]),
            ("fcfs", 300, vec![100.0; 5]),
            ("gv", 300, vec![70.0, 75.0, 80.0, 85.0, last]),
        ])
    };
    let outcome = evaluate(&claim(CLAIM), &doc(110.0)).unwrap();
    assert_eq!(outcome.verdict, Verdict::Reproduced);
    let verdicts: Vec<Verdict> = outcome.seeds.iter().map(|s| s.verdict).collect();
    assert_eq!(verdicts[4], Verdict::NotReproduced);
    assert_eq!(outcome.seed_agreement(), (4, 5));
    assert!(outcome.seed_stable());
    assert_eq!(
        outcome.seed_spread_text(&claim(CLAIM)),
        "+12.0% to +20.0%; -10.0% to +30.0%"
    );
    // Two seeds reversing: 3 of 5 agree, unstable.
    let mut unstable = doc(110.0);
    let gv300 = unstable
        .cells
        .iter_mut()
        .find(|c| c.id == "gv@300")
        .unwrap();
    gv300.runs[3].scalars.insert("e2e_p99_ms".into(), 120.0);
    let outcome = evaluate(&claim(CLAIM), &unstable).unwrap();
    assert_eq!(outcome.seed_agreement(), (3, 5));
    assert!(!outcome.seed_stable());
    // Fewer than five seeds are never enough to call a verdict stable.
    let few = document(&[
        ("fcfs", 150, 100.0),
        ("gv", 150, 80.0),
        ("fcfs", 300, 100.0),
        ("gv", 300, 80.0),
    ]);
    let outcome = evaluate(&claim(CLAIM), &few).unwrap();
    assert_eq!(outcome.seed_agreement(), (1, 1));
    assert!(!outcome.seed_stable());
}

#[test]
fn a_claim_says_seed_sensitive_exactly_when_its_verdict_is_unstable() {
    // The rule `reproduce` applies to every family's claims: seed 5 alone reverses the
    // direction at 300 req/s (4 of 5 agree, stable); seeds 4 and 5 do (3 of 5, unstable).
    let doc = |fourth: f64| {
        seeded_document(&[
            ("fcfs", 150, vec![100.0; 5]),
            ("gv", 150, vec![80.0; 5]),
            ("fcfs", 300, vec![100.0; 5]),
            ("gv", 300, vec![70.0, 75.0, 80.0, fourth, 110.0]),
        ])
    };
    let plain = claim(CLAIM);
    let said = claim(&format!("{CLAIM}seed_sensitive = \"one seed's draw\"\n"));
    let stable = evaluate(&plain, &doc(85.0)).unwrap();
    let unstable = evaluate(&plain, &doc(120.0)).unwrap();
    assert!(stable.seed_stable() && !unstable.seed_stable());
    assert_eq!(stable.stability_problem(&plain), None);
    assert_eq!(unstable.stability_problem(&said), None);
    let missing = unstable.stability_problem(&plain).unwrap();
    assert!(
        missing.contains("3 of 5 seeds give its verdict (reproduced), fewer than 4 of 5")
            && missing.contains("`seed_sensitive`"),
        "{missing}"
    );
    let stale = stable.stability_problem(&said).unwrap();
    assert!(
        stale.contains("4 of 5 seeds") && stale.contains("delete `seed_sensitive`"),
        "{stale}"
    );
}

#[test]
fn a_claim_compared_with_another_run_reads_its_cell_there() {
    let own = document(&[("gv", 150, 80.0), ("gv", 300, 90.0)]);
    let other = document(&[("fcfs", 150, 100.0), ("fcfs", 300, 100.0)]);
    let text = format!("{CLAIM}versus_run = \"other\"\n");
    let claim = claim(&text);
    let err = evaluate(&claim, &own).unwrap_err();
    assert!(err.contains("its compared cell is in run `other`"), "{err}");
    let outcome = evaluate_against(&claim, &own, &other).unwrap();
    assert_eq!(outcome.ours, "+10.0% to +20.0%");
    assert_eq!(outcome.points[0].versus, 100.0);
}

#[test]
fn load_refuses_an_undefined_baseline_or_a_paper_sentence_not_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let family = dir.path().join("caps");
    std::fs::create_dir(&family).unwrap();
    std::fs::write(family.join("s.toml"), "rate = [150, 300]\n").unwrap();
    let path = family.join(FILE_NAME);
    let baseline = "[[baseline]]\nname = \"fcfs\"\npaper = \"FCFS\"\nrequires = { \"scheduler.selector.kind\" = \"fcfs\" }\n";
    let load_text = |text: &str| {
        std::fs::write(
            &path,
            format!("[[run]]\nid = \"r\"\nscenario = \"s.toml\"\n{text}"),
        )
        .unwrap();
        load(&path).map_err(|e| e.to_string())
    };
    let ok = load_text(&format!("{baseline}[[claim]]\n{CLAIM}")).unwrap();
    assert_eq!(ok.baselines[0].name, "fcfs");
    let err = load_text(&format!("[[claim]]\n{CLAIM}")).unwrap_err();
    assert!(
        err.contains("field `claim[0].baseline`: no [[baseline]] is named `fcfs`"),
        "{err}"
    );
    let unnamed = CLAIM.replace("+18% over FCFS", "+18%");
    let err = load_text(&format!("{baseline}[[claim]]\n{unnamed}")).unwrap_err();
    assert!(
        err.contains("field `claim[0].paper`: does not name its baseline `fcfs`"),
        "{err}"
    );
    let twice = load_text(&format!("{baseline}{baseline}")).unwrap_err();
    assert!(
        twice.contains("baseline `fcfs` is defined twice"),
        "{twice}"
    );
    let nothing = baseline.replace(
        "requires = { \"scheduler.selector.kind\" = \"fcfs\" }",
        "requires = {}",
    );
    let err = load_text(&nothing).unwrap_err();
    assert!(err.contains("field `baseline[0].requires`"), "{err}");
}

/// Every family's headlines and the plans of its reproduction runs (full `sets`).
fn family_plans() -> Vec<(Headlines, Vec<crate::scenario::ScenarioPlan>)> {
    let scenarios = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    ["caps", "gem", "mosaic", "chimera", "expertweave"]
        .iter()
        .map(|family| {
            let headlines =
                load(&scenarios.join(family).join(FILE_NAME)).unwrap_or_else(|e| panic!("{e}"));
            let plans = headlines
                .runs
                .iter()
                .map(|run| {
                    crate::scenario::load(&run.scenario, &run.sets)
                        .unwrap_or_else(|e| panic!("{e}"))
                })
                .collect();
            (headlines, plans)
        })
        .collect()
}

fn plan_of<'a>(
    headlines: &Headlines,
    plans: &'a [crate::scenario::ScenarioPlan],
) -> impl Fn(&str) -> Option<&'a crate::scenario::ScenarioPlan> {
    let ids: Vec<String> = headlines.runs.iter().map(|r| r.id.clone()).collect();
    move |id| ids.iter().position(|r| r == id).map(|i| &plans[i])
}

#[test]
fn every_claim_compares_with_the_baseline_its_paper_sentence_names() {
    for (headlines, plans) in family_plans() {
        headlines
            .check_baselines(plan_of(&headlines, &plans))
            .unwrap_or_else(|e| panic!("{e}"));
        for run in &headlines.runs {
            let seeds = &plans[headlines.runs.iter().position(|r| r.id == run.id).unwrap()].seeds;
            assert!(
                seeds.len() >= SEEDS_FOR_STABILITY,
                "{}/{}: the reproduction runs {} seeds; the stability of a verdict needs {}",
                headlines.family,
                run.id,
                seeds.len(),
                SEEDS_FOR_STABILITY
            );
        }
    }
}

#[test]
fn the_baseline_check_fails_on_a_compared_cell_that_is_not_the_baseline() {
    let (mut mosaic, plans) = family_plans()
        .into_iter()
        .find(|(h, _)| h.family == "mosaic")
        .unwrap();
    let index = mosaic
        .claims
        .iter()
        .position(|c| c.id == "mosaic-end-to-end")
        .unwrap();
    // The comparison this claim made before issue 29: round-robin with the tau = 1 gate, a
    // cell of evaluation.toml, which skips the unanimous questions.
    let claim = &mut mosaic.claims[index];
    claim.versus_run = None;
    claim.versus = toml::toml! { "placement.policy.kind" = "round_robin"
    "workload.questions.gate.tau" = 1.0 };
    let err = mosaic
        .check_baselines(plan_of(&mosaic, &plans))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!("field `claim[{index}].versus`"))
            && err.contains("round-robin-full-aggregation")
            && err.contains("evaluation_no_gate.toml")
            && err.contains("gate.kind = \"threshold\", the baseline \"none\""),
        "{err}"
    );
    // Marked as a known mismatch it passes; the mark on a claim that does compare with its
    // baseline fails.
    mosaic.claims[index].baseline_mismatch = Some("not yet".into());
    mosaic
        .check_baselines(plan_of(&mosaic, &plans))
        .unwrap_or_else(|e| panic!("{e}"));
    let other = mosaic
        .claims
        .iter()
        .position(|c| c.id == "ilp-expert-stage")
        .unwrap();
    mosaic.claims[other].baseline_mismatch = Some("stale".into());
    let err = mosaic
        .check_baselines(plan_of(&mosaic, &plans))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!("claim[{other}].baseline_mismatch")) && err.contains("delete"),
        "{err}"
    );
}

#[test]
fn the_baseline_check_fails_on_a_compared_cell_of_another_system() {
    let (mosaic, mut plans) = family_plans()
        .into_iter()
        .find(|(h, _)| h.family == "mosaic")
        .unwrap();
    let index = mosaic
        .claims
        .iter()
        .position(|c| c.id == "mosaic-end-to-end")
        .unwrap();
    let no_gate = mosaic
        .runs
        .iter()
        .position(|r| r.id == "evaluation-no-gate")
        .unwrap();
    // The baseline run on other GPUs: its cells are still round-robin without the gate, but
    // the claim would compare two systems. A key the claimed cell's scenario leaves to its
    // default counts as a difference too (the comparison would rest on that default).
    for (edit, key) in [
        ("gpu = \"H100-SXM\"", "serving.gpu"),
        ("step_overhead_ms = 4.0", "serving.step_overhead_ms"),
    ] {
        let mut changed = plans.clone();
        let serving = changed[no_gate]
            .document
            .entry("serving")
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        let (k, v) = edit.split_once(" = ").unwrap();
        serving
            .as_table_mut()
            .unwrap()
            .insert(k.into(), v.parse::<toml::Value>().unwrap());
        let err = mosaic
            .check_baselines(plan_of(&mosaic, &changed))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("field `claim[{index}].versus`"))
                && err.contains(&format!("differ in {key}"))
                && err.contains("evaluation_no_gate.toml"),
            "{edit}: {err}"
        );
    }
    // Seeds, names and figures are not the system: the check lets them differ.
    plans[no_gate]
        .document
        .insert("name".into(), "renamed".into());
    mosaic
        .check_baselines(plan_of(&mosaic, &plans))
        .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn a_value_over_seeds_spans_each_seed_and_reads_another_run_with_versus_run() {
    let own = seeded_document(&[
        ("gv", 150, vec![80.0, 90.0, 95.0]),
        ("gv", 300, vec![70.0, 60.0, 50.0]),
    ]);
    let other = seeded_document(&[
        ("fcfs", 150, vec![100.0, 100.0, 100.0]),
        ("fcfs", 300, vec![100.0, 100.0, 100.0]),
    ]);
    let text = r#"
id = "gain"
run = "r"
metric = "e2e_p99_ms"
cell = { "scheduler.selector.kind" = "gv", "arrival.rate_per_s" = 150 }
versus_run = "other"
versus = { "scheduler.selector.kind" = "fcfs" }
statistic = "improvement_pct"
decimals = 0
unit = "%"
"#;
    let err = render(&value(text), &own).unwrap_err();
    assert!(err.contains("its compared cell is in run `other`"), "{err}");
    assert_eq!(
        render_against(&value(text), &own, &other).unwrap().text,
        "12%"
    );
    let seeds = value(&format!("{text}over_seeds = true\n"));
    assert_eq!(render_against(&seeds, &own, &other).unwrap().text, "5-20%");
}
