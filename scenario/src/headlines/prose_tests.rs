use super::prose::*;
use super::*;
use std::collections::BTreeMap;

#[test]
fn numbers_are_told_from_names() {
    let text = "FCFS serves 114-126 req/s on Qwen1.5-MoE-A2.7B, Llama-4-Scout and Mixtral-8x22B \
                (an 8B model, H200, A100-80GB) at 2.54x, +12.7%, 4K requests and 15,706,484,224 B; \
                e2e claim bursty-cv-s1.";
    let found: Vec<&str> = number_tokens(text).into_iter().map(|r| &text[r]).collect();
    assert_eq!(
        found,
        ["114", "126", "2.54x", "12.7", "4K", "15,706,484,224"]
    );
}

#[test]
fn spans_are_found_rewritten_and_refused_when_broken() {
    let doc = "a <!-- value:caps/x -->old<!-- /value --> b\n\
               c <!-- value:gem/y -->keep<!-- /value -->\n";
    let found = spans(doc).unwrap();
    assert_eq!(found.len(), 2);
    assert_eq!(
        (found[1].family.as_str(), found[1].id.as_str()),
        ("gem", "y")
    );
    assert_eq!((found[0].line, found[1].line), (1, 2));
    let caps: BTreeMap<String, String> = [("x".to_string(), "114-126 req/s".to_string())].into();
    let rendered = [("caps".to_string(), caps)].into();
    let once = rewrite_spans(doc, &rendered).unwrap();
    assert_eq!(
        once,
        "a <!-- value:caps/x -->114-126 req/s<!-- /value --> b\n\
         c <!-- value:gem/y -->keep<!-- /value -->\n",
        "only the rendered family's spans change"
    );
    assert_eq!(
        rewrite_spans(&once, &rendered).unwrap(),
        once,
        "a second pass changes nothing"
    );
    let unknown = "<!-- value:caps/z -->1<!-- /value -->\n";
    let err = rewrite_spans(unknown, &rendered).unwrap_err();
    assert!(
        err.starts_with("line 1: value `caps/z` is not declared"),
        "{err}"
    );
    let open = "x\n<!-- value:caps/x -->1\n<!-- /value -->\n";
    assert!(
        spans(open)
            .unwrap_err()
            .starts_with("line 2: value `caps/x` has no")
    );
    let bare = "<!-- value:x -->1<!-- /value -->";
    assert!(spans(bare).unwrap_err().contains("is not `<family>/<id>`"));
    let stray = "1<!-- /value -->";
    assert!(
        spans(stray)
            .unwrap_err()
            .contains("without its opening marker")
    );
}

#[test]
fn placeholders_are_filled_from_rendered_values() {
    let text = "ours is {value:gain} ({value:unknown} stays), {not a placeholder}";
    let rendered = [("gain".to_string(), "+1.1%".to_string())].into();
    assert_eq!(
        fill_placeholders(text, &rendered),
        "ours is +1.1% ({value:unknown} stays), {not a placeholder}"
    );
    let ids: Vec<String> = placeholders(text).into_iter().map(|(id, _)| id).collect();
    assert_eq!(ids, ["gain", "unknown"]);
}

/// A family `caps` with one run, two values (one used by a span, one by a claim's explanation),
/// a claim, and prose declarations; its input file sets rates 150 and 300.
fn fixture(dir: &std::path::Path, extra: &str) -> Headlines {
    let family = dir.join("caps");
    std::fs::create_dir_all(&family).unwrap();
    std::fs::write(family.join("s.toml"), "rate_per_s = [150, 300]\n").unwrap();
    let text = format!(
        r#"[[run]]
id = "r"
scenario = "s.toml"

[[baseline]]
name = "fcfs"
paper = "FCFS"
requires = {{ "scheduler.selector.kind" = "fcfs" }}

[[claim]]
id = "c"
run = "r"
baseline = "fcfs"
claim = "gv beats fcfs"
metric = "latency_p99_ms"
statistic = "improvement_pct"
cell = {{ "scheduler.selector.kind" = "gv" }}
versus = {{ "scheduler.selector.kind" = "fcfs" }}
direction = "lower"
paper = "+46.9% over FCFS"
paper_value = 46.9
expect = "direction_only"
known_deviation = "ours is {{value:gain}} against the paper's 46.9%."

[[value]]
id = "fcfs-p99"
run = "r"
metric = "latency_p99_ms"
cell = {{ "scheduler.selector.kind" = "fcfs" }}
decimals = 0
unit = " ms"

[[value]]
id = "gain"
run = "r"
metric = "latency_p99_ms"
cell = {{ "scheduler.selector.kind" = "gv" }}
versus = {{ "scheduler.selector.kind" = "fcfs" }}
statistic = "improvement_pct"
decimals = 1
sign = true
unit = "%"
{extra}
[prose]
paper = ["paper: 3031.6 ms", "the paper's 46.9%"]

[prose.inputs]
"s.toml" = ["rates 150 and 300 req/s"]
"#
    );
    let path = family.join(FILE_NAME);
    std::fs::write(&path, text).unwrap();
    load(&path).unwrap_or_else(|e| panic!("{e}"))
}

const DOC: &str = "# Reproduction

The rule's 25% is outside every family's prose.

## CAPS

FCFS's P99 is <!-- value:caps/fcfs-p99 -->100 ms<!-- /value --> (paper: 3031.6 ms) at
rates 150 and 300 req/s; see Figure 3, Figures 9, 5 and 6, and section 3.3.4.

1. A list item; `--set n=5` is code; [a link](docs/x2.md).

<!-- generated:caps:begin -->
| 1 | 2 |
<!-- generated:caps:end -->

```sh
# a shell comment, not a heading
```

## Other

99 bottles.
";

fn quick(fcfs: &str, gain: &str, same: bool) -> BTreeMap<String, QuickRendering> {
    [("fcfs-p99", fcfs), ("gain", gain)]
        .into_iter()
        .map(|(id, text)| {
            let rendering = QuickRendering {
                text: text.into(),
                same_cells_as_full: same,
            };
            (id.to_string(), rendering)
        })
        .collect()
}

fn check(headlines: &Headlines, doc: &str, quick: BTreeMap<String, QuickRendering>) -> Vec<String> {
    let families = [FamilyProse { headlines, quick }];
    check_document(std::path::Path::new("doc.md"), doc, &families)
}

#[test]
fn clean_prose_passes() {
    let dir = tempfile::tempdir().unwrap();
    let headlines = fixture(dir.path(), "");
    assert_eq!(
        check(&headlines, DOC, quick("100 ms", "+3.0%", true)),
        Vec::<String>::new()
    );
}

#[test]
fn a_span_that_disagrees_with_the_run_fails() {
    let dir = tempfile::tempdir().unwrap();
    let headlines = fixture(dir.path(), "");
    let problems = check(&headlines, DOC, quick("104 ms", "+3.0%", true));
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with(
            "doc.md:7: value `caps/fcfs-p99` says `100 ms`, but its run gives `104 ms`"
        ),
        "{}",
        problems[0]
    );
}

#[test]
fn a_span_naming_an_unknown_value_or_family_fails() {
    let dir = tempfile::tempdir().unwrap();
    let headlines = fixture(dir.path(), "");
    let doc = DOC.replace("caps/fcfs-p99", "caps/fcfs-p50");
    let problems = check(&headlines, &doc, quick("100 ms", "+3.0%", true));
    assert!(
        problems
            .iter()
            .any(|p| p.contains("doc.md:7: value `caps/fcfs-p50` is not declared")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.contains("value `fcfs-p99` is used by no span")),
        "{problems:?}"
    );
    let doc = DOC.replace("caps/fcfs-p99", "gem/fcfs-p99");
    let problems = check(&headlines, &doc, quick("100 ms", "+3.0%", true));
    assert!(
        problems
            .iter()
            .any(|p| p.contains("value `gem/fcfs-p99`: no such family")),
        "{problems:?}"
    );
}

#[test]
fn a_quick_run_reading_other_cells_needs_its_own_expected_text() {
    let dir = tempfile::tempdir().unwrap();
    // Without `quick` texts: both values need one.
    let headlines = fixture(dir.path(), "");
    let problems = check(&headlines, DOC, quick("90 ms", "+2.0%", false));
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems[0].contains("declare quick = \"90 ms\""),
        "{problems:?}"
    );
    // With them, the document's text is not compared with the quick run's.
    let dir = tempfile::tempdir().unwrap();
    let with_quick = fixture(dir.path(), "quick = \"+2.0%\"\n");
    let problems = check(&with_quick, DOC, quick("100 ms", "+2.0%", false));
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("value `fcfs-p99`: its quick run reads other cells"));
    let problems = check(&with_quick, DOC, quick("100 ms", "+2.5%", false));
    assert!(
        problems
            .iter()
            .any(|p| p.contains("its quick run gives `+2.5%`, not quick = \"+2.0%\"")),
        "{problems:?}"
    );
    // A `quick` text where the quick run is the full run is refused.
    let problems = check(&with_quick, DOC, quick("100 ms", "+2.0%", true));
    assert!(
        problems
            .iter()
            .any(|p| p.contains("value `gain` declares a `quick` text")),
        "{problems:?}"
    );
}

#[test]
fn an_undeclared_number_in_the_prose_or_an_explanation_fails() {
    let dir = tempfile::tempdir().unwrap();
    let headlines = fixture(dir.path(), "");
    let doc = DOC.replace(
        "(paper: 3031.6 ms)",
        "(paper: 3031.6 ms, ours about 117 req/s)",
    );
    let problems = check(&headlines, &doc, quick("100 ms", "+3.0%", true));
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with("doc.md:7: `117` in the caps prose is in no value span"),
        "{problems:?}"
    );
    // A number the next line breaks away from its declared phrase is still covered.
    let doc = DOC.replace(
        "(paper: 3031.6 ms) at\nrates",
        "(paper:\n3031.6 ms) at rates",
    );
    assert_eq!(
        check(&headlines, &doc, quick("100 ms", "+3.0%", true)),
        Vec::<String>::new()
    );
    // In a claim's explanation, outside its placeholders.
    let dir = tempfile::tempdir().unwrap();
    let path = fixture(dir.path(), "").path;
    let text = std::fs::read_to_string(&path).unwrap().replace(
        "against the paper's 46.9%.",
        "against the paper's 46.9% (ours was 1.5%).",
    );
    std::fs::write(&path, text).unwrap();
    let headlines = load(&path).unwrap();
    let problems = check(&headlines, DOC, quick("100 ms", "+3.0%", true));
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].contains("claim c known_deviation: `1.5` in the caps prose"),
        "{problems:?}"
    );
}

#[test]
fn a_declared_phrase_must_be_in_the_prose_and_an_input_in_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let headlines = fixture(dir.path(), "");
    let doc = DOC.replace("rates 150 and 300 req/s", "rates 150 and 301 req/s");
    let problems = check(&headlines, &doc, quick("100 ms", "+3.0%", true));
    assert!(
        problems
            .iter()
            .any(|p| p.contains("`301` in the caps prose")),
        "{problems:?}"
    );
    assert!(
        problems.iter().any(
            |p| p.contains("[prose] phrase `rates 150 and 300 req/s` is not in the caps prose")
        ),
        "{problems:?}"
    );
    std::fs::write(dir.path().join("caps/s.toml"), "rate_per_s = [150, 250]\n").unwrap();
    let problems = check(&headlines, DOC, quick("100 ms", "+3.0%", true));
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].contains("input phrase `rates 150 and 300 req/s`: 300 is not a number of"),
        "{problems:?}"
    );
}

#[test]
fn paper_numbers_must_be_in_the_papers_text() {
    let dir = tempfile::tempdir().unwrap();
    let headlines = fixture(dir.path(), "");
    let paper = "P99 of 3,031.60 ms; the gain was 46.9% overall.";
    assert_eq!(check_paper_numbers(&headlines, paper), Vec::<String>::new());
    let problems = check_paper_numbers(&headlines, "P99 of 3031.6 ms; the gain was 46.8%.");
    assert_eq!(
        problems.len(),
        2,
        "the claim's paper text and the prose phrase: {problems:?}"
    );
    assert!(
        problems[0].contains("claim c paper `+46.9% over FCFS`: 46.9 is not in the paper's text")
    );
}

#[test]
fn family_sections_are_the_level_two_sections_holding_the_markers() {
    let sections = family_sections(DOC);
    assert_eq!(sections.len(), 1);
    let (family, range) = &sections[0];
    assert_eq!(family, "caps");
    assert!(
        DOC[range.clone()].starts_with("## CAPS")
            && DOC[range.clone()].ends_with("# a shell comment, not a heading\n```\n\n")
    );
}

#[test]
fn a_marker_in_code_is_text_and_a_stray_close_anywhere_is_refused() {
    let doc = "Write `<!-- value:<family>/<id> -->text<!-- /value -->` for a span:\n\
               ```\n<!-- value:caps/x -->1<!-- /value -->\n```\n\
               <!-- value:caps/y -->2<!-- /value -->\n";
    let found = spans(doc).unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].id.as_str(), found[0].line), ("y", 5));
    let stray = format!("{doc}and 3<!-- /value --> after it\n");
    assert!(spans(&stray).unwrap_err().starts_with("line 6: "));
}

/// A study's headlines (runs and values, no claims, no paper) in a document without a generated
/// section: its spans are checked (declared, used, as the run gives them), no section is asked
/// for, and the document's other numbers are its own prose.
#[test]
fn a_document_of_values_alone_needs_no_generated_section() {
    let dir = tempfile::tempdir().unwrap();
    let family = dir.path().join("studies");
    std::fs::create_dir_all(&family).unwrap();
    std::fs::write(family.join("s.toml"), "rate_per_s = [150, 300]\n").unwrap();
    let path = family.join(FILE_NAME);
    std::fs::write(
        &path,
        "[[run]]\nid = \"r\"\nscenario = \"s.toml\"\n\n[[value]]\nid = \"p99\"\nrun = \"r\"\n\
         metric = \"latency_p99_ms\"\ndecimals = 0\nunit = \" ms\"\n",
    )
    .unwrap();
    let headlines = load(&path).unwrap_or_else(|e| panic!("{e}"));
    let doc = "# Studies\n\n## Study (a)\n\n1,500 requests; P99 \
               <!-- value:studies/p99 -->100 ms<!-- /value -->.\n";
    let quick = |text: &str| -> BTreeMap<String, QuickRendering> {
        [(
            "p99".to_string(),
            QuickRendering {
                text: text.into(),
                same_cells_as_full: true,
            },
        )]
        .into()
    };
    let families = [FamilyProse {
        headlines: &headlines,
        quick: quick("100 ms"),
    }];
    let path = std::path::Path::new("studies.md");
    assert_eq!(check_document(path, doc, &families), Vec::<String>::new());
    let families = [FamilyProse {
        headlines: &headlines,
        quick: quick("104 ms"),
    }];
    let problems = check_document(path, doc, &families);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("says `100 ms`, but its run gives `104 ms`"));
    let unused = check_document(path, "# Studies\n\nNo spans.\n", &families);
    assert_eq!(unused.len(), 1, "{unused:?}");
    assert!(unused[0].contains("value `p99` is used by no span of studies.md"));
}
