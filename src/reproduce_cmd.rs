//! `expertsim reproduce`: runs every run the families' `scenarios/<family>/headlines.toml` name
//! (resuming from cells an interrupted reproduction left, taking a cell an earlier run of the
//! family, or an earlier cell of the run, already ran), renders their figures, evaluates each paper claim and computes each
//! declared value on the results, and rewrites the family's document (docs/reproduction.md, or
//! the one its headlines name with `doc`) between the family's generated markers (a family with
//! claims) and inside its `<!-- value:<family>/<id> -->` spans, so no number of ours in the
//! document is typed by hand. Wall-clock times go to stderr only: a second run writes
//! the same bytes.

use crate::reproduce_runs;
use clap::Args;
use expertsim_scenario::headlines::{self, Claim, Headlines, Outcome, RunSpec, Verdict, prose};
use expertsim_scenario::results::ResultsDocument;
use expertsim_scenario::scenario::ScenarioPlan;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Regenerate the reproduction tables and figures of the named families (all by default).
#[derive(Args)]
pub struct ReproduceArgs {
    /// Families to reproduce: folder names under the scenarios folder that hold a headlines.toml.
    families: Vec<String>,
    /// Where the runs' results and figures go (`<out>/<family>/<run>/`).
    #[arg(long, default_value = "results/reproduce")]
    out: PathBuf,
    /// Run the quick variant of every run (the claims test's) and leave the document alone.
    #[arg(long)]
    quick: bool,
    /// The folder of per-family scenario folders.
    #[arg(long, default_value = "scenarios")]
    scenarios: PathBuf,
    /// The document whose generated sections and value spans are rewritten, for the families
    /// whose headlines name no document of their own (`doc`).
    #[arg(long, default_value = "docs/reproduction.md")]
    doc: PathBuf,
    /// A folder of the papers' text (`<family>.txt`, not in the repository): before running,
    /// check that every number the headlines quote as the paper's occurs in its paper.
    #[arg(long)]
    papers: Option<PathBuf>,
}

/// A family's loaded headlines and the plan of each of its runs.
struct Family {
    headlines: Headlines,
    plans: Vec<ScenarioPlan>,
}

pub fn run(args: ReproduceArgs) -> ExitCode {
    let refuse = |message: String| {
        eprintln!("error: {message}");
        ExitCode::from(2)
    };
    let families = match load_families(&args) {
        Ok(families) => families,
        Err(message) => return refuse(message),
    };
    if let Some(folder) = &args.papers {
        if let Err(message) = check_papers(folder, &families) {
            return refuse(message);
        }
    }
    // Each document the families write: its path, its text and its families' names.
    let mut docs: Vec<(PathBuf, String, Vec<String>)> = Vec::new();
    if !args.quick {
        for (path, members) in documents_of(&args.doc, &families) {
            let names = members.iter().map(|f| f.headlines.family.clone()).collect();
            match read_doc(&path, &members) {
                Ok(text) => docs.push((path, text, names)),
                Err(message) => return refuse(message),
            }
        }
    }
    // Every run of every family on one pool; each family's documents, in its runs' order.
    let root = &args.out;
    let slots: Vec<reproduce_runs::RunSlot> = families
        .iter()
        .enumerate()
        .flat_map(|(f, family)| {
            let name = &family.headlines.family;
            family
                .headlines
                .runs
                .iter()
                .zip(&family.plans)
                .map(move |(spec, plan)| reproduce_runs::RunSlot {
                    family: f,
                    plan,
                    out: root.join(name).join(&spec.id),
                })
        })
        .collect();
    let mut documents = match reproduce_runs::run_all(&slots) {
        Ok(documents) => documents.into_iter(),
        Err((s, err)) => {
            let family = &families[slots[s].family].headlines;
            let run = &family.runs[s - slots
                .iter()
                .position(|x| x.family == slots[s].family)
                .expect("its own slot")];
            eprintln!("error: {}/{}: {err:#}", family.family, run.id);
            return ExitCode::from(1);
        }
    };
    let mut sections = Vec::new();
    let mut rendered_values = BTreeMap::new();
    let mut unexplained = 0;
    for family in &families {
        let documents: Vec<ResultsDocument> = documents
            .by_ref()
            .take(family.headlines.runs.len())
            .collect();
        let mut outcomes = match evaluate_all(&family.headlines, &documents) {
            Ok(outcomes) => outcomes,
            Err(message) => return refuse(message),
        };
        if args.quick {
            for (claim, outcome) in family.headlines.claims.iter().zip(&mut outcomes) {
                if let (None, Some(quick)) = (&claim.by_construction, claim.expect_quick) {
                    outcome.expected = quick;
                }
            }
        }
        let values = match render_values(&family.headlines, &documents) {
            Ok(values) => values,
            Err(message) => return refuse(message),
        };
        for (claim, outcome) in family.headlines.claims.iter().zip(&outcomes) {
            if !outcome.as_expected() {
                unexplained += 1;
                eprintln!(
                    "claim {}/{}: {}",
                    family.headlines.family,
                    claim.id,
                    verdict_text(claim, outcome)
                );
            }
            if let Some(problem) = stability_problem(claim, outcome, args.quick) {
                unexplained += 1;
                eprintln!("claim {}/{}: {problem}", family.headlines.family, claim.id);
            }
        }
        let name = family.headlines.family.clone();
        if family.headlines.claims.is_empty() {
            // A file of runs and values alone (a study's): no claims table, its values listed.
            for (id, text) in &values {
                println!("{name}/{id}: {text}");
            }
        } else {
            let section = section(family, &documents, &outcomes, &values, args.quick);
            println!("{section}");
            sections.push((name.clone(), section));
        }
        rendered_values.insert(name, values);
    }
    for (path, text, names) in docs {
        let own: Vec<(String, String)> = sections
            .iter()
            .filter(|(family, _)| names.contains(family))
            .cloned()
            .collect();
        let updated = replace_sections(&text, &own);
        let updated = match prose::rewrite_spans(&updated, &rendered_values) {
            Ok(updated) => updated,
            Err(message) => return refuse(format!("{}: {message}", path.display())),
        };
        if updated != text {
            if let Err(e) = expertsim_scenario::results::write_atomic(&path, updated.as_bytes()) {
                eprintln!("error: writing {}: {e}", path.display());
                return ExitCode::from(1);
            }
        }
        eprintln!("wrote {}", path.display());
    }
    if unexplained > 0 {
        eprintln!(
            "error: {unexplained} claims do not get the verdict their headlines.toml expects \
             (update `expect` and `known_deviation` to what the runs show)"
        );
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}

/// Why a claim's seed stability disagrees with what it says (`Outcome::stability_problem`);
/// the quick variant runs fewer seeds and is not judged.
fn stability_problem(claim: &Claim, outcome: &Outcome, quick: bool) -> Option<String> {
    if quick {
        None
    } else {
        outcome.stability_problem(claim)
    }
}

/// Loads the headlines of the requested families and every run's scenario, and checks each
/// claim against its run's scenario, before anything runs.
fn load_families(args: &ReproduceArgs) -> Result<Vec<Family>, String> {
    let names = match args.families.is_empty() {
        false => args.families.clone(),
        true => {
            let entries = std::fs::read_dir(&args.scenarios)
                .map_err(|e| format!("cannot read {}: {e}", args.scenarios.display()))?;
            let mut names: Vec<String> = entries
                .flatten()
                .filter(|e| e.path().join(headlines::FILE_NAME).is_file())
                .filter_map(|e| e.file_name().to_str().map(str::to_string))
                .collect();
            names.sort();
            names
        }
    };
    if names.is_empty() {
        return Err(format!(
            "no family folder under {} has a {}",
            args.scenarios.display(),
            headlines::FILE_NAME
        ));
    }
    names
        .iter()
        .map(|name| {
            let path = args.scenarios.join(name).join(headlines::FILE_NAME);
            if !path.is_file() {
                return Err(format!("family {name}: no {}", path.display()));
            }
            let headlines = headlines::load(&path).map_err(|e| e.to_string())?;
            let plans = headlines
                .runs
                .iter()
                .map(|spec| {
                    let plan = expertsim_scenario::scenario::load(
                        &spec.scenario,
                        &sets_of(spec, args.quick),
                    )
                    .map_err(|e| e.to_string())?;
                    headlines
                        .check_against(&spec.id, &plan)
                        .map_err(|e| e.to_string())?;
                    Ok(plan)
                })
                .collect::<Result<Vec<_>, String>>()?;
            headlines
                .check_baselines(|id| {
                    let index = headlines.runs.iter().position(|r| r.id == id)?;
                    plans.get(index)
                })
                .map_err(|e| e.to_string())?;
            Ok(Family { headlines, plans })
        })
        .collect()
}

/// Checks every number the families quote as the paper's against `<folder>/<family>.txt`; a
/// family that quotes no paper (a study's runs and values) is skipped.
fn check_papers(folder: &Path, families: &[Family]) -> Result<(), String> {
    let mut problems = Vec::new();
    for family in families.iter().filter(|f| f.headlines.quotes_paper()) {
        let path = folder.join(format!("{}.txt", family.headlines.family));
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read the paper {}: {e}", path.display()))?;
        problems.extend(prose::check_paper_numbers(&family.headlines, &text));
    }
    match problems.is_empty() {
        true => Ok(()),
        false => Err(problems.join("\nerror: ")),
    }
}

/// A run's overrides: its own, plus its quick ones in quick mode.
fn sets_of(spec: &RunSpec, quick: bool) -> Vec<String> {
    let mut sets = spec.sets.clone();
    if quick {
        sets.extend(spec.quick.iter().cloned());
    }
    sets
}

fn evaluate_all(
    headlines: &Headlines,
    documents: &[ResultsDocument],
) -> Result<Vec<Outcome>, String> {
    headlines
        .claims
        .iter()
        .map(|claim| {
            let index = |id: &str| {
                headlines
                    .runs
                    .iter()
                    .position(|r| r.id == id)
                    .expect("load checked every claim's runs")
            };
            let versus = index(claim.versus_run.as_deref().unwrap_or(&claim.run));
            headlines::evaluate_against(claim, &documents[index(&claim.run)], &documents[versus])
                .map_err(|e| format!("{}: {e}", headlines.path.display()))
        })
        .collect()
}

/// Every declared value's text, computed from its run's results (id -> text).
fn render_values(
    headlines: &Headlines,
    documents: &[ResultsDocument],
) -> Result<BTreeMap<String, String>, String> {
    headlines
        .values
        .iter()
        .map(|value| {
            let index = |id: &str| {
                headlines
                    .runs
                    .iter()
                    .position(|r| r.id == id)
                    .expect("load checked every value's runs")
            };
            let versus = index(value.versus_run.as_deref().unwrap_or(&value.run));
            headlines::render_against(value, &documents[index(&value.run)], &documents[versus])
                .map(|rendered| (value.id.clone(), rendered.text))
                .map_err(|e| format!("{}: {e}", headlines.path.display()))
        })
        .collect()
}

fn verdict_text(claim: &Claim, outcome: &Outcome) -> String {
    let count = match outcome.judged {
        1 => String::new(),
        n => format!(" (direction at {} of {n})", outcome.holding),
    };
    let text = outcome.verdict.text();
    match outcome.as_expected() {
        true => format!("{text}{count}"),
        false => format!(
            "**{text}{count}, but headlines.toml expects {}**{}",
            outcome.expected.text(),
            match &claim.known_deviation {
                Some(why) => format!(": {why}"),
                None => String::new(),
            }
        ),
    }
}

fn begin_marker(family: &str) -> String {
    format!("<!-- generated:{family}:begin -->")
}

fn end_marker(family: &str) -> String {
    format!("<!-- generated:{family}:end -->")
}

/// The documents the families write, each with its families: a family's own `doc`, else
/// `default` (the `--doc` argument), in the order first named; two paths to one file are one
/// document (so that one write does not undo the other's).
fn documents_of<'a>(default: &Path, families: &'a [Family]) -> Vec<(PathBuf, Vec<&'a Family>)> {
    let same_file = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    };
    let mut documents: Vec<(PathBuf, Vec<&Family>)> = Vec::new();
    for family in families {
        let path = family.headlines.doc.as_deref().unwrap_or(default);
        match documents.iter_mut().find(|(p, _)| same_file(p, path)) {
            Some((_, members)) => members.push(family),
            None => documents.push((path.to_path_buf(), vec![family])),
        }
    }
    documents
}

/// Reads the document and checks that every family with claims has its pair of markers and
/// that each value span of its families names a value the family declares.
fn read_doc(path: &Path, families: &[&Family]) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let spans = prose::spans(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    for span in spans {
        let Some(family) = families.iter().find(|f| f.headlines.family == span.family) else {
            continue;
        };
        if !family.headlines.values.iter().any(|v| v.id == span.id) {
            return Err(format!(
                "{}:{}: value `{}/{}` is not declared in {}",
                path.display(),
                span.line,
                span.family,
                span.id,
                family.headlines.path.display()
            ));
        }
    }
    for family in families.iter().filter(|f| !f.headlines.claims.is_empty()) {
        let name = &family.headlines.family;
        let (begin, end) = (begin_marker(name), end_marker(name));
        match (text.find(&begin), text.find(&end)) {
            (Some(b), Some(e)) if b < e => {}
            _ => {
                return Err(format!(
                    "{} lacks the lines `{begin}` and `{end}` (in that order) where the {name} \
                     tables go",
                    path.display()
                ));
            }
        }
    }
    Ok(text)
}

/// `text` with everything between each family's markers replaced by its section.
fn replace_sections(text: &str, sections: &[(String, String)]) -> String {
    let mut text = text.to_string();
    for (family, section) in sections {
        let (begin, end) = (begin_marker(family), end_marker(family));
        let start = text.find(&begin).expect("read_doc checked the markers") + begin.len();
        let stop = text.find(&end).expect("read_doc checked the markers");
        text.replace_range(start..stop, &format!("\n{section}"));
    }
    text
}

fn cell_text(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

/// The generated Markdown of one family: its runs, then one row per claim, then the known
/// deviations' explanations.
fn section(
    family: &Family,
    documents: &[ResultsDocument],
    outcomes: &[Outcome],
    values: &BTreeMap<String, String>,
    quick: bool,
) -> String {
    let name = &family.headlines.family;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<!-- Written by `expertsim reproduce {name}` from {}; edit that file, not this table. -->",
        family.headlines.path.display()
    );
    if quick {
        let _ = writeln!(out, "(quick variant: smaller runs than the reproduction)");
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "| run | scenario | overrides | cells x seeds |");
    let _ = writeln!(out, "|---|---|---|---|");
    for (spec, document) in family.headlines.runs.iter().zip(documents) {
        let sets = sets_of(spec, quick);
        let overrides = match sets.is_empty() {
            true => "none".to_string(),
            false => sets
                .iter()
                .map(|s| format!("`--set {}`", cell_text(s)))
                .collect::<Vec<_>>()
                .join(" "),
        };
        let _ = writeln!(
            out,
            "| {} | `{}` | {overrides} | {} x {} |",
            spec.id,
            spec.scenario.display(),
            document.cells.len(),
            document.seeds.len()
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "| claim | run | baseline | paper | paper value | ours | ours over seeds | ours / paper | \
         off by | verdict | seeds with the verdict |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|");
    let mut notes: Vec<(&str, String)> = Vec::new();
    for (claim, outcome) in family.headlines.claims.iter().zip(outcomes) {
        let mut verdict = verdict_text(claim, outcome);
        let mut why = match (&claim.by_construction, &claim.known_deviation) {
            (Some(reason), _) => Some(format!("by construction: {}", reason.trim())),
            (None, Some(deviation)) if outcome.verdict != Verdict::Reproduced => {
                Some(deviation.trim().to_string())
            }
            _ => None,
        };
        for (what, reason) in [
            ("seed-sensitive", &claim.seed_sensitive),
            ("not yet the paper's baseline", &claim.baseline_mismatch),
        ] {
            if let Some(reason) = reason {
                let line = format!("{what}: {}", reason.trim());
                why = Some(match why {
                    Some(why) => format!("{why} ({line})"),
                    None => line,
                });
            }
        }
        let why = why.map(|why| prose::fill_placeholders(&why, values));
        if let Some(why) = why {
            notes.push((&claim.id, why));
            verdict = format!("{verdict}, see [{}]", notes.len());
        }
        let run = match &claim.versus_run {
            Some(versus) => format!("{} vs {versus}", claim.run),
            None => claim.run.clone(),
        };
        let (agreeing, seeds) = outcome.seed_agreement();
        let seed_sensitive = match claim.seed_sensitive {
            Some(_) => " (seed-sensitive)",
            None => "",
        };
        let _ = writeln!(
            out,
            "| {} | {run} | {} | {} | {} | {} | {} | {} | {} | {} | {agreeing} of {seeds}{seed_sensitive} |",
            cell_text(&claim.claim),
            claim.baseline,
            cell_text(&claim.paper),
            paper_value_text(claim),
            outcome.ours,
            outcome.seed_spread_text(claim),
            outcome.ratio_text(),
            outcome.distance_text(claim),
            cell_text(&verdict)
        );
    }
    let _ = writeln!(out);
    let count = |v: Verdict| outcomes.iter().filter(|o| o.verdict == v).count();
    let _ = writeln!(
        out,
        "Verdicts: {} reproduced, {} direction only, {} not reproduced, {} input (of {} claims).",
        count(Verdict::Reproduced),
        count(Verdict::DirectionOnly),
        count(Verdict::NotReproduced),
        count(Verdict::Input),
        outcomes.len()
    );
    if !quick {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "Stable over seeds (at least {} of {} seeds, judged alone, give the verdict of the \
             seed means): {} of {} claims; the others say why they are seed-sensitive.",
            headlines::STABLE_SEEDS,
            headlines::SEEDS_FOR_STABILITY,
            outcomes.iter().filter(|o| o.seed_stable()).count(),
            outcomes.len()
        );
    }
    if !notes.is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(out, "Why a claim is short of reproduced, or an input:");
        let _ = writeln!(out);
        for (i, (id, why)) in notes.iter().enumerate() {
            let _ = writeln!(out, "{}. {id}: {why}", i + 1);
        }
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "#### The paper's baselines");
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "| baseline | the paper's words | its scenario | what the compared cell writes |"
    );
    let _ = writeln!(out, "|---|---|---|---|");
    for baseline in &family.headlines.baselines {
        let requires = baseline
            .requires
            .iter()
            .map(|(k, v)| format!("`{k} = {}`", cell_text(&v.to_string())))
            .collect::<Vec<_>>()
            .join(", ");
        let scenario = match &baseline.scenario {
            Some(path) => format!("`{}`", path.display()),
            None => "the claim's run".into(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {scenario} | {requires} |",
            baseline.name,
            cell_text(&baseline.paper)
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "#### Inputs we chose or fitted");
    let _ = writeln!(out);
    if family.headlines.inputs.is_empty() {
        let _ = writeln!(out, "None listed.");
    } else {
        let _ = writeln!(out, "| input | value | how | the paper's sentence |");
        let _ = writeln!(out, "|---|---|---|---|");
        for input in &family.headlines.inputs {
            let filled = |text: &str| cell_text(&prose::fill_placeholders(text, values));
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                filled(&input.name),
                filled(&input.value),
                filled(&input.how),
                filled(&input.source)
            );
        }
    }
    out
}

/// The paper's number as the table shows it.
fn paper_value_text(claim: &Claim) -> String {
    use expertsim_scenario::headlines::{PaperNumber, PaperValue};
    let number = |n: &PaperNumber| {
        let unit = match claim.statistic {
            headlines::Statistic::Ratio => "x",
            headlines::Statistic::ImprovementPct | headlines::Statistic::ChangePct => "%",
            _ => "",
        };
        match n {
            PaperNumber::One(v) => format!("{v}{unit}"),
            PaperNumber::Range([a, b]) => format!("{a}{unit} to {b}{unit}"),
        }
    };
    match &claim.paper_value {
        None => "none (a direction)".into(),
        Some(PaperValue::Same(n)) => number(n),
        Some(PaperValue::PerPoint(map)) => map
            .iter()
            .map(|(k, n)| format!("{k}: {}", number(n)))
            .collect::<Vec<_>>()
            .join("; "),
    }
}
