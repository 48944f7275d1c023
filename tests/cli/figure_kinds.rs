//! Integration tests of the `[[figure]]` kinds: a bad kind or a missing or misplaced figure key is
//! refused at load time with file, line and field (exit 2); the quick GEM, MOSAIC and Chimera
//! scenarios render their paper-specific figures, and the MOSAIC timeline has one row per worker
//! with segments that tile the run.

use crate::common::expertsim;
use std::path::Path;

/// A GEM scenario sweeping the mapper, followed by `figure` (a `[[figure]]` table).
fn gem_with(figure: &str) -> String {
    format!(
        r#"name = "figure-check"
family = "serving"
seeds = [1]

[model]
name = "mixtral-8x7b"

[replica]
gpu = "H200"
gpus = 4
tensor_parallel = 4
expert_parallel = 4

[replica.scheduler]
kind = "sarathi"
kv = "unbounded"

[experts]
mapping = {{ kind = "linear" }}
trace = {{ observed_steps = 16, unseen_steps = 16 }}

[workload]
n_requests = 20
dataset = "sharegpt"

[arrival]
pattern = "offline"

[sweep]
"experts.mapping.kind" = ["linear", "gem"]

[report]
compare = "experts.mapping.kind"
baseline = "linear"

{figure}"#
    )
}

/// Line (1-based) of the first line of `text` that contains `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .expect("needle in text")
        + 1
}

/// `validate` refuses `text` with exit 2, one line starting `<file>:<line>:`, naming `field`
/// and containing `message`.
fn assert_refused(text: &str, line: usize, field: &str, message: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("scenario.toml");
    std::fs::write(&path, text).unwrap();
    let output = expertsim(&["validate", path.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(2), "stderr: {err}");
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "one line expected: {err}"
    );
    let prefix = format!("error: {}:{line}:", path.display());
    assert!(err.starts_with(&prefix), "expected {prefix:?} in: {err}");
    assert!(
        err.contains(&format!("field `{field}`")),
        "field {field} in: {err}"
    );
    assert!(err.contains(message), "{message:?} in: {err}");
}

#[test]
fn an_unknown_figure_kind_is_refused_naming_the_field() {
    let text = gem_with("[[figure]]\nname = \"f\"\nkind = \"pie\"\n");
    assert_refused(
        &text,
        line_of(&text, "kind = \"pie\""),
        "figure[0].kind",
        "pie",
    );
}

#[test]
fn a_metric_figure_without_x_is_refused() {
    let text = gem_with("[[figure]]\nname = \"f\"\nmetrics = [\"e2e_mean_ms\"]\n");
    assert_refused(
        &text,
        line_of(&text, "[[figure]]"),
        "figure[0].x",
        "is required",
    );
}

#[test]
fn a_frontier_needs_exactly_two_metrics() {
    let text =
        gem_with("[[figure]]\nname = \"f\"\nkind = \"frontier\"\nmetrics = [\"e2e_mean_ms\"]\n");
    assert_refused(
        &text,
        line_of(&text, "metrics = [\"e2e_mean_ms\"]"),
        "figure[0].metrics",
        "exactly two",
    );
}

#[test]
fn a_key_the_kind_does_not_use_is_refused() {
    let text = gem_with(
        "[[figure]]\nname = \"f\"\nkind = \"gem_staircase\"\nx = \"experts.mapping.kind\"\n",
    );
    assert_refused(
        &text,
        line_of(&text, "x = \"experts.mapping.kind\""),
        "figure[0].x",
        "not used by figures of kind `gem_staircase`",
    );
}

#[test]
fn a_select_value_that_is_not_swept_is_refused() {
    let text = gem_with(
        "[[figure]]\nname = \"f\"\nkind = \"gem_staircase\"\nselect = { \"experts.mapping.kind\" = \"eplb\" }\n",
    );
    let err = {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("scenario.toml");
        std::fs::write(&path, &text).unwrap();
        let output = expertsim(&["validate", path.to_str().unwrap()]);
        assert_eq!(output.status.code(), Some(2));
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    assert!(
        err.contains("figure[0].select.experts.mapping.kind"),
        "{err}"
    );
    assert!(
        err.contains("`eplb` is not among the swept values"),
        "{err}"
    );
}

fn run_quick(scenario: &str, out: &Path) -> serde_json::Value {
    let output = expertsim(&["run", scenario, "--out", out.to_str().unwrap()]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = std::fs::read_to_string(out.join("results.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn svg(out: &Path, name: &str) -> String {
    std::fs::read_to_string(out.join("figures").join(format!("{name}.svg")))
        .unwrap_or_else(|e| panic!("{name}.svg: {e}"))
}

/// Runs the CAPS quick scenario with `figure` (a `[[figure]]` table) appended to it; the quick
/// scenario may carry figures of its own. Returns the folder (kept alive) and the run's output.
fn caps_quick_with(figure: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("caps.toml");
    let base = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/caps/quick.toml"),
    )
    .unwrap();
    std::fs::write(&scenario, format!("{base}{figure}")).unwrap();
    let out = dir.path().join("out");
    run_quick(scenario.to_str().unwrap(), &out);
    (dir, out)
}

#[test]
fn gem_quick_renders_reduction_expert_load_and_staircase() {
    let dir = tempfile::tempdir().unwrap();
    let results = run_quick("scenarios/gem/quick.toml", dir.path());
    // The serving family's expert detail: what each GPU receives is what its hosted experts
    // receive, step by step (a 1-slot-per-expert mapping: no replicas to split).
    for cell in results["cells"].as_array().unwrap() {
        let experts = &cell["runs"][0]["details"]["deployment"][0]["experts"];
        let detail = &experts["detail_layer"];
        let slots: Vec<Vec<usize>> = serde_json::from_value(detail["slots"].clone()).unwrap();
        let steps = detail["expert_tokens"].as_array().unwrap();
        assert_eq!(steps.len(), 25, "{}", cell["id"]);
        for (step, gpus) in steps.iter().zip(detail["gpu_tokens"].as_array().unwrap()) {
            for (g, hosted) in slots.iter().enumerate() {
                let want: f64 = hosted.iter().map(|&e| step[e].as_f64().unwrap()).sum();
                assert!((gpus[g].as_f64().unwrap() - want).abs() < 1e-3);
            }
        }
        assert_eq!(experts["staircase"].as_array().unwrap().len(), 4);
    }
    let load = svg(dir.path(), "expert_load");
    // One column of panels per selected mapping, GPU 0 the slow one.
    for mapping in ["linear:", "eplb:", "gem:"] {
        assert!(load.contains(mapping), "{mapping}");
    }
    assert!(!load.contains("round_robin:"));
    assert!(load.contains("GPU0 (0.88x)"));
    assert!(svg(dir.path(), "staircase").contains("GPU3 (speed 1.00)"));
    assert!(svg(dir.path(), "e2e_reduction").contains("improvement over linear"));
}

#[test]
fn mosaic_quick_timeline_has_one_row_per_worker_tiling_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let results = run_quick("scenarios/mosaic/quick.toml", dir.path());
    for cell in results["cells"].as_array().unwrap() {
        let run = &cell["runs"][0];
        let end = run["scalars"]["makespan_s"].as_f64().unwrap();
        let expert_end = run["scalars"]["expert_makespan_s"].as_f64().unwrap();
        let rows = run["details"]["timeline"]["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 4, "N = 4 workers");
        let sessions = run["details"]["sessions"]["workers"].as_array().unwrap();
        for (row, worker) in rows.iter().zip(sessions) {
            // Segments follow each other without gaps from 0 to the run's end.
            let mut at = 0.0;
            let mut loads = 0;
            for segment in row["segments"].as_array().unwrap() {
                let start = segment["start_s"].as_f64().unwrap();
                assert!((start - at).abs() < 1e-9, "gap at {at} in {row}");
                at = segment["end_s"].as_f64().unwrap();
                if segment["kind"] == "load" && start < expert_end {
                    loads += 1;
                }
            }
            assert!((at - end).abs() < 1e-9, "{at} vs the run's end {end}");
            // One load per session the worker ran in the expert stage.
            assert_eq!(loads, worker.as_array().unwrap().len(), "{row}");
        }
    }
    let timeline = svg(dir.path(), "timeline");
    for w in 0..4 {
        assert!(timeline.contains(&format!("worker {w}")), "row worker {w}");
    }
    assert!(!timeline.contains("worker 4"));
    for panel in ["round_robin: expert stage", "ilp: expert stage"] {
        assert!(timeline.contains(panel), "{panel}");
    }
    assert!(timeline.contains("DeepSeek-R1-Distill-Llama-8B"));
}

#[test]
fn a_timeline_figure_without_the_recorded_timeline_is_refused() {
    let text = gem_with("[[figure]]\nname = \"t\"\nkind = \"timeline\"\n");
    assert_refused(
        &text,
        line_of(&text, "kind = \"timeline\""),
        "figure[0].kind",
        "[output] timeline = true",
    );
}

#[test]
fn a_decode_curve_figure_without_the_recorded_curves_is_refused() {
    let text = gem_with("[[figure]]\nname = \"d\"\nkind = \"decode_curve\"\n");
    assert_refused(
        &text,
        line_of(&text, "kind = \"decode_curve\""),
        "figure[0].kind",
        "[output] decode_curves = true",
    );
}

/// MOSAIC's Figure 3b from scenarios/mosaic/decode_curves.toml: one curve per expert of the
/// default pool, the batch doubling from 1 to the group's cap; the step grows with the batch
/// while the tokens per second rise less than in proportion (a step of one sequence is the
/// weights' read and the host time, which a larger batch shares); the figure has both panels
/// and a line per model.
#[test]
fn mosaic_decode_curves_draw_each_experts_step_and_throughput_against_the_batch() {
    let dir = tempfile::tempdir().unwrap();
    let results = run_quick("scenarios/mosaic/decode_curves.toml", dir.path());
    let curves = results["cells"][0]["runs"][0]["details"]["decode_curves"]
        .as_array()
        .unwrap();
    assert_eq!(curves.len(), 6);
    for curve in curves {
        assert_eq!(curve["gpu"], "A100-80GB");
        assert_eq!(curve["context_tokens"], 1024);
        let points = curve["points"].as_array().unwrap();
        assert_eq!(points[0]["batch"], 1);
        // The step never shortens; over the doubling batches the tokens per second rise (the
        // cap's point need not: Gemma's, 151 sequences, emits fewer than 128 do).
        let (mut ms, mut tps) = (0.0, 0.0);
        for (i, p) in points.iter().enumerate() {
            let (m, t) = (
                p["step_ms"].as_f64().unwrap(),
                p["tokens_per_s"].as_f64().unwrap(),
            );
            assert!(m >= ms, "{curve}");
            if i + 1 < points.len() {
                assert!(t > tps, "{curve}");
            }
            (ms, tps) = (m, t);
        }
        // The one-sequence step: more than the 4 ms host time, and a batch of b sequences
        // emits fewer than b times its tokens per second.
        let one = &points[0];
        assert!(one["step_ms"].as_f64().unwrap() > 4.0);
        let last = points.last().unwrap();
        assert!(
            last["tokens_per_s"].as_f64().unwrap()
                < last["batch"].as_f64().unwrap() * one["tokens_per_s"].as_f64().unwrap()
        );
    }
    let figure = svg(dir.path(), "decode_curves");
    for text in [
        "decode step latency (ms)",
        "decode throughput (tokens/s)",
        "Qwen2.5-7B-Instruct",
        "gemma-2-9b-it",
        "DeepSeek-R1-Distill-Llama-8B",
    ] {
        assert!(figure.contains(text), "{text}");
    }
    assert!(dir.path().join("figures/decode_curves.png").is_file());
}

#[test]
fn chimera_quick_renders_the_frontier_per_system() {
    let dir = tempfile::tempdir().unwrap();
    run_quick("scenarios/chimera/quick.toml", dir.path());
    let frontier = svg(dir.path(), "frontier");
    for system in [
        "fcfs + least_loaded",
        "fcfs + chimera",
        "stjf + least_loaded",
        "stjf + chimera",
    ] {
        assert!(frontier.contains(system), "{system}");
    }
}

#[test]
fn with_improvement_is_refused_outside_metric_figures() {
    let text = gem_with(
        "[[figure]]\nname = \"f\"\nkind = \"improvement\"\nmetrics = [\"e2e_mean_ms\"]\nx = \"experts.mapping.kind\"\nwith_improvement = true\n",
    );
    assert_refused(
        &text,
        line_of(&text, "with_improvement"),
        "figure[0].with_improvement",
        "not used by figures of kind `improvement`",
    );
}

/// The CAPS quick scenario's figures read without the code: labelled x axis (not the raw key),
/// a legend title, the whisker caption with the seed count; a `with_improvement` metric figure
/// adds a row of changes against the baseline whose y axis includes 0.
#[test]
fn metric_figures_carry_axis_labels_legend_title_and_caption() {
    let figure = "\n[[figure]]\nname = \"p99\"\nmetrics = [\"e2e_p99_ms\"]\n\
                  x = \"arrival.rate_per_s\"\nseries = \"replica.batch_former.kind\"\n\
                  panels = \"arrival.pattern\"\nwith_improvement = true\n";
    let (_dir, out) = caps_quick_with(figure);
    let text = svg(&out, "p99");
    assert!(text.contains("arrival rate (requests/s)"), "no x label");
    assert!(!text.contains("rate_per_s"), "raw key on an axis");
    assert!(text.contains("batch selector"), "no legend title");
    assert!(
        text.contains("one seed per point: no confidence interval"),
        "no caption"
    );
    assert!(
        text.contains("P99 end-to-end latency: change vs fcfs (%)"),
        "no improvement row"
    );
    assert!(text.contains("improvement over fcfs (%)"));
}

/// A metric figure without a series key has one series per panel, named by the panel's title:
/// it gets no legend, so the metric's raw key shows nowhere.
#[test]
fn a_metric_figure_without_series_has_no_legend_of_raw_keys() {
    let figure = "\n[[figure]]\nname = \"p99\"\nmetrics = [\"e2e_p99_ms\"]\n\
                  x = \"arrival.rate_per_s\"\npanels = \"arrival.pattern\"\n";
    let (_dir, out) = caps_quick_with(figure);
    // The sweep key left over (the batch former) gives a file per value.
    let text = svg(&out, "p99_batch_former-fcfs");
    assert!(text.contains("P99 end-to-end latency (ms)"), "no title");
    assert!(
        !text.contains("e2e_p99_ms"),
        "a raw metric key in the legend"
    );
}

/// ExpertWeave's memory scenario has cells that run out of memory (merged weights at 2 and 3
/// adapters): the figure names them once, in its caption, and no panel title carries the note
/// (a long title overflowed its panel's left edge).
#[test]
fn cells_out_of_memory_are_named_once_in_the_caption() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/expertweave/memory.toml");
    let out = dir.path().join("out");
    run_quick(scenario.to_str().unwrap(), &out);
    let text = svg(&out, "memory_vs_adapters");
    let note = "out of memory, left out: 2 merged, 3 merged";
    assert_eq!(text.matches(note).count(), 1, "{text}");
    assert!(
        !text.contains("OOM, left out"),
        "a panel title still carries the note"
    );
}

#[test]
fn a_sweep_narrowed_to_the_baseline_skips_its_improvement_figure_and_succeeds() {
    // Study (a) narrowed to its baseline mapping (as `reproduce studies` runs its one-token
    // variant): the improvement-vs-linear figure has no cell to draw, which is a note, not a
    // failure; the metric figure is still drawn and results.json written.
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("run");
    let output = expertsim(&[
        "run",
        "scenarios/studies/caps_x_mapping.toml",
        "--out",
        dir.to_str().unwrap(),
        "--set",
        "seeds=[1]",
        "--set",
        "workload.n_requests=20",
        "--set",
        "replica.batch_former=[{ kind = \"fcfs\" }]",
        "--set",
        "experts.mapping=[{ kind = \"linear\" }]",
        "--set",
        "replica.speed_factors=[[1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]]",
    ]);
    let err = crate::common::stderr(&output);
    assert!(output.status.success(), "{err}");
    assert!(
        err.contains("study_caps_x_mapping_vs_linear not drawn: no data among the cells"),
        "{err}"
    );
    assert!(dir.join("results.json").exists());
    let drawn: Vec<String> = std::fs::read_dir(dir.join("figures"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(drawn.iter().any(|f| f.ends_with(".png")), "{drawn:?}");
    assert!(!drawn.iter().any(|f| f.contains("vs_linear")), "{drawn:?}");
}
