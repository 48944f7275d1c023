//! The README works as written: its "Your first scenario" file, copied out of the README, runs
//! and writes results and a figure; what it says the main job shows is what the generated
//! tables of docs/reproduction.md say.

use crate::common::{expertsim, stderr};
use std::path::Path;

fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap()
}

/// The text of the README's first fenced block of `language` after the heading `heading`.
fn block_after(text: &str, heading: &str, language: &str) -> String {
    let from = text
        .find(heading)
        .unwrap_or_else(|| panic!("README has no {heading:?}"));
    let fence = format!("```{language}\n");
    let start = text[from..]
        .find(&fence)
        .map(|i| from + i + fence.len())
        .unwrap_or_else(|| panic!("no ```{language} block after {heading:?}"));
    let end = start + text[start..].find("```").expect("the block is closed");
    text[start..end].to_string()
}

#[test]
fn the_first_scenario_of_the_readme_runs_as_written() {
    let text = readme();
    let scenario = block_after(&text, "### Your first scenario", "toml");
    assert!(
        scenario.lines().count() <= 8,
        "the first scenario stays short:\n{scenario}"
    );
    // The command the README gives for it names the file it is saved as.
    let commands = block_after(&text, "### Your first scenario", "sh");
    assert!(commands.contains("first.toml"), "{commands}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("first.toml");
    std::fs::write(&path, &scenario).unwrap();
    let out = dir.path().join("out");
    let output = expertsim(&[
        "run",
        path.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(table.contains("ttft_p99_ms"), "{table}");
    assert!(out.join("results.json").is_file());
    // It sweeps a key and names no figure: the headline figure is drawn, and said so.
    assert!(
        out.join("figures/headline.png").is_file(),
        "{}",
        stderr(&output)
    );
    assert!(stderr(&output).contains("has no [[figure]] table"));

    // The numbers the README quotes are this run's.
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let means = |metric: &str, decimals: usize| -> Vec<String> {
        results["cells"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                let v = c["summary"][metric]["mean"].as_f64().unwrap();
                let text = format!("{v:.decimals$}");
                // Thousands separated, as the README writes them.
                match text.split_once('.') {
                    None if text.len() > 3 => {
                        format!("{},{}", &text[..text.len() - 3], &text[text.len() - 3..])
                    }
                    _ => text,
                }
            })
            .collect()
    };
    let listed = |v: Vec<String>| format!("{}, {}, {} and {}", v[0], v[1], v[2], v[3]);
    let quoted = format!(
        "P99 TTFT {} ms, P99 TPOT {} ms",
        listed(means("ttft_p99_ms", 0)),
        listed(means("tpot_p99_ms", 1))
    );
    assert!(
        text.replace('\n', " ").contains(&quoted),
        "README should say `{quoted}`"
    );
    let capacity_out = dir.path().join("capacity");
    let output = expertsim(&[
        "capacity",
        path.to_str().unwrap(),
        "--set",
        "arrival.rate_per_s=10",
        "--slo",
        "ttft_p99_ms=200,tpot_p99_ms=30",
        "--out",
        capacity_out.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let capacity: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(capacity_out.join("capacity.json")).unwrap())
            .unwrap();
    let cell = &capacity["cells"][0];
    let quoted = format!(
        "{:.1} req/s (missed at {:.1}",
        cell["capacity"].as_f64().unwrap(),
        cell["missed_at"].as_f64().unwrap()
    );
    assert!(text.contains(&quoted), "README should say `{quoted}`");
}

/// The README's account of the main job quotes the numbers `expertsim reproduce` writes into
/// docs/reproduction.md (the CAPS section's verdict line and the FCFS throughput it serves).
#[test]
fn the_readme_quotes_the_main_jobs_generated_numbers() {
    let text = readme();
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/reproduction.md"))
            .unwrap();
    let caps = &doc[doc.find("## CAPS").unwrap()..];
    let verdicts = caps
        .lines()
        .find_map(|l| l.strip_prefix("Verdicts: "))
        .expect("the CAPS section has its verdict line");
    // "6 reproduced, 36 direction only, 16 not reproduced, 1 input (of 59 claims).": the
    // counts before " (of", a zero input count left out.
    let counts = verdicts.split(" (of").next().unwrap();
    let counts = counts.strip_suffix(", 0 input").unwrap_or(counts);
    assert!(
        text.contains(counts),
        "README should say `{counts}` (docs/reproduction.md: {verdicts})"
    );
    let span = "<!-- value:caps/fcfs-bursty-throughput-grouped -->";
    let at = caps.find(span).expect("the generated throughput value") + span.len();
    let served = &caps[at..at + caps[at..].find("<!--").unwrap()];
    assert!(
        text.contains(&format!("about {served}")),
        "README should say `about {served}` served"
    );
}
