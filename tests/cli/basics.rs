//! Integration tests of the `expertsim` binary: bad input is refused with a one-line error naming
//! file, line and field (exit 2, nothing written); runs are byte-for-byte deterministic; `run`
//! writes results, figures and per-request CSV; `list` and `validate` work.

use crate::common::{SMALL, assert_refused, expertsim, stderr, write_scenario};
use std::path::Path;

#[test]
fn unknown_field_is_refused_with_its_line() {
    let text = SMALL.replace("n_requests = 200", "n_requests = 200\nn_requestz = 5");
    assert_refused(&text, Some(10), &["n_requestz", "unknown field"]);
}

/// The caps family became the serving simulator's CAPS preset: a file that still names it is
/// refused with the keys to write instead.
#[test]
fn the_retired_caps_family_is_refused_naming_the_new_keys() {
    let text = SMALL.replace("family = \"serving\"", "family = \"caps\"");
    assert_refused(
        &text,
        Some(2),
        &[
            "preset of the serving simulator",
            "replica.batch_former",
            "replica.scheduler.pricing",
            "e2e_*",
        ],
    );
}

/// The gem family became the serving simulator's GEM preset: a file that still names it is
/// refused with the keys to write instead.
#[test]
fn the_retired_gem_family_is_refused_naming_the_new_keys() {
    let text = SMALL.replace("family = \"serving\"", "family = \"gem\"");
    assert_refused(
        &text,
        Some(2),
        &[
            "the gem family is now a preset of the serving simulator",
            "experts.trace",
            "replica.scheduler.profile",
            "itl_*",
        ],
    );
}

/// The chimera family became the serving simulator's Chimera preset: a file that still names it
/// is refused (exit 2) with the keys to write instead.
#[test]
fn the_retired_chimera_family_is_refused_naming_the_new_keys() {
    let text = SMALL.replace("family = \"serving\"", "family = \"chimera\"");
    assert_refused(
        &text,
        Some(2),
        &[
            "the chimera family is now a preset of the serving simulator",
            "replica.models",
            "workload.workflow.dataset",
            "workflow_latency_per_token_ms",
        ],
    );
}

/// The expertweave family became the serving simulator's ExpertWeave preset: a file that still
/// names it is refused (exit 2, the `family` line) with the keys to write instead.
#[test]
fn the_retired_expertweave_family_is_refused_naming_the_new_keys() {
    let text = SMALL.replace("family = \"serving\"", "family = \"expertweave\"");
    assert_refused(
        &text,
        Some(2),
        &[
            "the expertweave family is now a preset of the serving simulator",
            "adapters.memory",
            "replica.gpu_memory_gib",
            "rounded_uniform",
            "replica.scheduler.profile",
        ],
    );
}

#[test]
fn wrong_type_is_refused_with_its_line() {
    let text = SMALL.replace("n_requests = 200", "n_requests = \"many\"");
    assert_refused(&text, Some(9), &["workload.n_requests", "invalid type"]);
}

#[test]
fn top_k_above_expert_count_is_refused() {
    let text = SMALL.replace(
        "name = \"qwen1.5-moe-a2.7b-nf4\"",
        "name = \"qwen1.5-moe-a2.7b-nf4\"\ntop_k = 61",
    );
    assert_refused(
        &text,
        Some(7),
        &["model.top_k", "exceeds the number of routed experts (60)"],
    );
}

#[test]
fn negative_rate_is_refused() {
    let text = SMALL.replace("rate_per_s = 100", "rate_per_s = -5");
    assert_refused(&text, Some(15), &["arrival.rate_per_s", "positive", "-5"]);
}

#[test]
fn unknown_strategy_kind_lists_the_known_ones() {
    let text = SMALL.replace("kind = \"greedy_variance\"", "kind = \"fastest\"");
    assert_refused(
        &text,
        Some(20),
        &[
            "replica.batch_former",
            "fastest",
            "fcfs",
            "greedy_variance",
            "karmarkar_karp",
            "differencing",
        ],
    );
}

#[test]
fn missing_trace_file_is_refused() {
    let text = SMALL.replace(
        "pattern = \"bursty\"\nrate_per_s = 100",
        "pattern = \"trace\"\ntrace = { path = \"no/such/trace.csv\" }",
    );
    assert_refused(
        &text,
        Some(15),
        &["arrival.trace.path", "no/such/trace.csv"],
    );
}

#[test]
fn bad_swept_value_points_at_the_sweep_key() {
    let text = format!("{SMALL}\n[sweep]\n\"arrival.rate_per_s\" = [100, -1]\n");
    assert_refused(&text, Some(27), &["arrival.rate_per_s", "sweep cell"]);
}

#[test]
fn syntax_error_is_refused_with_its_line() {
    let text = SMALL.replace("n_requests = 200", "n_requests = = 200");
    assert_refused(&text, Some(9), &["invalid TOML"]);
}

#[test]
fn bad_set_override_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_scenario(dir.path(), SMALL);
    let output = expertsim(&[
        "validate",
        path.to_str().unwrap(),
        "--set",
        "workload.n_requests=-3",
    ]);
    assert_eq!(output.status.code(), Some(2));
    let err = stderr(&output);
    assert!(
        err.contains("(--set)") && err.contains("workload.n_requests"),
        "{err}"
    );
}

#[test]
fn same_scenario_and_seed_give_identical_result_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_scenario(
        dir.path(),
        &format!(
            "{SMALL}\n[sweep]\n\"replica.batch_former.kind\" = [\"fcfs\", \"random\", \"power_of_d\"]\n"
        ),
    );
    let mut outputs = Vec::new();
    for run in ["a", "b"] {
        let out = dir.path().join(run);
        let output = expertsim(&[
            "run",
            path.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--per-request-csv",
            "--no-figures",
        ]);
        assert!(output.status.success(), "{}", stderr(&output));
        outputs.push(out);
    }
    let read = |dir: &Path, name: &str| {
        std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    assert_eq!(
        read(&outputs[0], "results.json"),
        read(&outputs[1], "results.json")
    );
    for csv in [
        "requests/0000_seed7.csv",
        "requests/0001_seed7.csv",
        "requests/0002_seed7.csv",
    ] {
        let a = read(&outputs[0], csv);
        assert_eq!(a, read(&outputs[1], csv), "{csv}");
        // One header plus one row per request.
        assert_eq!(a.iter().filter(|b| **b == b'\n').count(), 201, "{csv}");
    }
    // A different seed gives a different result (the comparison above is not vacuous).
    let out = dir.path().join("c");
    let output = expertsim(&[
        "run",
        path.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--no-figures",
        "--set",
        "seeds=[8]",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_ne!(
        read(&outputs[0], "results.json"),
        read(&out, "results.json")
    );
}

#[test]
fn quick_caps_run_writes_results_and_figures() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("quick");
    let output = expertsim(&[
        "run",
        "scenarios/caps/quick.toml",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(
        table.contains("greedy_variance") && table.contains("ttft_p99_ms_vs_base"),
        "{table}"
    );
    // One seed gives no confidence interval: the column says "-", not a zero-width interval.
    let mut lines = table.lines().skip(1);
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    let ci = header.iter().position(|h| h.starts_with("±ci95(")).unwrap();
    for row in lines {
        assert_eq!(row.split_whitespace().nth(ci), Some("-"), "{row}");
    }
    let document: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("results.json")).unwrap()).unwrap();
    let cells = document["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 16);
    for cell in cells {
        assert_eq!(
            cell["runs"][0]["scalars"]["completed"], 500.0,
            "every request is served"
        );
        assert_eq!(cell["cost_model"], "analytic-roofline");
        assert!(cell["runs"][0]["scalars"]["e2e_p99_ms"].as_f64().unwrap() > 0.0);
    }
    for name in ["p99_vs_rate.png", "p99_vs_rate.svg"] {
        let bytes = std::fs::read(out.join("figures").join(name)).unwrap();
        assert!(bytes.len() > 1000, "{name} is {} bytes", bytes.len());
    }
}

#[test]
fn list_names_every_batch_selector() {
    let output = expertsim(&["list"]);
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    for kind in [
        "fcfs",
        "random",
        "greedy_variance",
        "greedy_dot_product",
        "norm_minimizing",
        "best_fit",
        "power_of_d",
        "power_of_d_dot",
        "lpt",
        "lpt_balanced",
        "karmarkar_karp",
        "differencing",
    ] {
        assert!(
            text.lines()
                .any(|l| l.split_whitespace().nth(1) == Some(kind)),
            "{kind} missing from:\n{text}"
        );
    }
}

#[test]
fn list_names_every_option_a_scenario_can_name() {
    let output = expertsim(&["list"]);
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    let listed = |group: &str, kind: &str| {
        text.lines().any(|l| {
            let mut words = l.split_whitespace();
            words.next() == Some(group) && words.next() == Some(kind)
        })
    };
    for (group, kinds) in [
        ("scheduler", &["vllm", "sarathi", "orca", "static"][..]),
        (
            "routing",
            &[
                "round_robin",
                "least_outstanding",
                "least_loaded",
                "chimera",
            ],
        ),
        ("predictor", &["noisy", "oracle", "input_length", "fcfs"]),
        ("expert_routing", &["uniform", "zipf"]),
        (
            "arrival",
            &["poisson", "gamma", "bursty", "offline", "trace"],
        ),
        ("family", &["serving"]),
        ("model", &["llama-2-7b", "mixtral-8x7b", "esft-vanilla-16b"]),
        ("gpu", &["H100-SXM", "A100-80GB", "L4", "Ascend-910B"]),
    ] {
        for kind in kinds {
            assert!(listed(group, kind), "{group} {kind} missing from:\n{text}");
        }
    }
    // Every group is headed by the key that names it.
    assert!(
        text.contains("# scheduler: replica.scheduler.kind"),
        "{text}"
    );
}

/// Each key a group heading names (`# group: key (families)`, several keys split by `, ` or
/// ` / `) heads one group only: the routers, policies and built-in alike, are one `routing`
/// group.
#[test]
fn list_names_each_key_in_one_group() {
    let output = expertsim(&["list"]);
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    let mut seen: Vec<(String, String)> = Vec::new();
    for heading in text.lines().filter_map(|l| l.strip_prefix("# ")) {
        let (group, keys) = heading.split_once(": ").expect("`# group: key`");
        let keys = keys.split(" (").next().unwrap();
        for key in keys.split(", ").flat_map(|k| k.split(" / ")) {
            if let Some((other, _)) = seen.iter().find(|(_, k)| k == key) {
                panic!("{key} heads both `{other}` and `{group}`:\n{text}");
            }
            seen.push((group.to_string(), key.to_string()));
        }
    }
    assert!(
        seen.iter()
            .any(|(g, k)| g == "routing" && k == "routing.kind"),
        "{seen:?}"
    );
    let routers: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("routing "))
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(
        routers,
        [
            "round_robin",
            "least_outstanding",
            "least_loaded",
            "chimera"
        ]
    );
}

#[test]
fn weights_that_do_not_fit_are_refused_by_validate_and_run() {
    // Mixtral-8x7B (93.4 GB of bf16 weights) on one 80 GB H100.
    let sets = [
        "--set",
        "replica.gpus=1",
        "--set",
        "replica.expert_parallel=1",
        "--set",
        "replica.tensor_parallel=1",
        "--set",
        "replica.speed_factors=[1.0]",
    ];
    for command in ["validate", "run"] {
        let mut args = vec![command, "scenarios/serving/mixtral_ep4_variability.toml"];
        args.extend(sets);
        let output = expertsim(&args);
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{command}: {err}");
        assert!(
            err.contains("field `replica.gpus`")
                && err.contains("out of memory")
                && err.contains("GB of weights per GPU"),
            "{command}: {err}"
        );
    }
}

#[test]
fn a_run_that_fails_exits_3_naming_its_cause() {
    // ExpertWeave's decode microbenchmark on a 38 GiB device: one merged copy fits (29.26 GiB of
    // weights and the 4.88 GiB reserve in 0.9 x 38 GiB), a copy with an adapter's experts beside
    // it does not, so the padding and virtual-weight-tensor runs fail (out of memory) and the
    // merged ones report.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let output = expertsim(&[
        "run",
        "scenarios/expertweave/rerouting_decode.toml",
        "--no-figures",
        "--out",
        out.to_str().unwrap(),
        "--set",
        "replica.gpu_memory_gib=38",
        "--set",
        "workload.n_requests=[1]",
        "--set",
        "seeds=[1]",
    ]);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(3), "{err}");
    assert!(
        err.contains(
            "error: run failed [adapters.memory.kind = padding, adapters.rerouting = fused, \
             workload.n_requests = 1]"
        ) && err.contains("out of memory"),
        "{err}"
    );
    assert!(err.contains("4 of 6 runs failed"), "{err}");
    // The results are written all the same, the failed cells with their reason.
    let results = std::fs::read_to_string(out.join("results.json")).unwrap();
    assert!(results.contains("\"failed\""));
}

#[test]
fn a_missing_family_is_refused_with_the_families_and_a_line() {
    let text = SMALL.replace("family = \"serving\"\n", "");
    assert_refused(&text, Some(1), &["field `family`", "serving"]);
}

#[test]
fn every_shipped_scenario_validates() {
    let files = expertsim_scenario::scenario::scenario_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios"),
    )
    .unwrap();
    assert!(files.len() >= 5, "found only {files:?}");
    for path in files {
        let output = expertsim(&["validate", path.to_str().unwrap()]);
        assert!(
            output.status.success(),
            "{}: {}",
            path.display(),
            stderr(&output)
        );
    }
}

#[test]
fn a_profile_is_found_by_name_and_an_unknown_name_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let named = SMALL.replace(
        "pricing = \"cv\" }",
        "pricing = \"cv\", profile = \"l4_qwen1.5-moe-a2.7b\" }",
    );
    let path = write_scenario(dir.path(), &named);
    let output = expertsim(&["validate", path.to_str().unwrap()]);
    assert!(output.status.success(), "{}", stderr(&output));
    let unknown = named.replace("l4_qwen1.5-moe-a2.7b", "no_such_profile");
    std::fs::write(&path, unknown).unwrap();
    let output = expertsim(&["validate", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    let err = stderr(&output);
    assert!(
        err.contains("replica.scheduler.profile")
            && err.contains("no profile named `no_such_profile`"),
        "{err}"
    );
}

#[test]
fn per_request_csv_has_one_schema_for_every_family_that_serves_requests() {
    let dir = tempfile::tempdir().unwrap();
    for (scenario, family, sets) in [
        (
            "scenarios/caps/quick.toml",
            "serving",
            vec!["arrival.rate_per_s=150"],
        ),
        (
            "scenarios/gem/quick.toml",
            "serving",
            vec!["experts.mapping.kind=linear"],
        ),
        (
            "scenarios/chimera/quick.toml",
            "serving",
            vec!["workload.horizon_s=10"],
        ),
        (
            // ExpertWeave's preset of the serving family.
            "scenarios/expertweave/serving_overhead.toml",
            "serving",
            vec![
                "seeds=[1]",
                "workload.horizon_s=30",
                "adapters.count=[5]",
                "arrival.rate_per_s=[1.0]",
            ],
        ),
    ] {
        let out = dir.path().join(scenario.replace('/', "_"));
        let mut args = vec![
            "run",
            scenario,
            "--out",
            out.to_str().unwrap(),
            "--per-request-csv",
            "--no-figures",
        ];
        for set in &sets {
            args.extend(["--set", set]);
        }
        let output = expertsim(&args);
        assert!(output.status.success(), "{family}: {}", stderr(&output));
        let text = std::fs::read_to_string(out.join("requests/0000_seed1.csv"))
            .or_else(|_| std::fs::read_to_string(out.join("requests/0000_seed42.csv")))
            .unwrap_or_else(|e| panic!("{family}: {e}"));
        let mut lines = text.lines();
        let header = lines.next().unwrap();
        assert!(
            header.starts_with(
                "family,request_id,arrival_s,first_token_s,finish_s,prompt_tokens,output_tokens,e2e_ms"
            ),
            "{family}: {header}"
        );
        let rows: Vec<&str> = lines.collect();
        assert!(!rows.is_empty(), "{family}: no rows");
        for row in &rows {
            let cells: Vec<&str> = row.split(',').collect();
            assert_eq!(cells[0], family);
            assert_eq!(cells.len(), header.split(',').count(), "{family}: {row}");
            // e2e is finish - arrival, and finishing never precedes arriving (or the first token).
            let (arrival, finish): (f64, f64) =
                (cells[2].parse().unwrap(), cells[4].parse().unwrap());
            let e2e_ms: f64 = cells[7].parse().unwrap();
            assert!(
                (e2e_ms - (finish - arrival) * 1e3).abs() < 1e-3,
                "{family}: {row}"
            );
            if let Ok(first) = cells[3].parse::<f64>() {
                assert!(arrival <= first && first <= finish, "{family}: {row}");
            }
        }
    }
}

#[test]
fn an_unwritable_output_folder_is_refused_before_any_cell_runs() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"").unwrap();
    let out = file.join("out");
    let output = expertsim(&[
        "run",
        "scenarios/gem/quick.toml",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(
        err.contains("--out") && err.contains("nothing was run"),
        "{err}"
    );
    assert!(!err.contains("rerunning"), "{err}");
}

#[test]
fn validate_recognises_a_claims_file() {
    let output = expertsim(&["validate", "scenarios/caps/headlines.toml"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("claims file"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn profiles_load_by_name_in_every_family_that_takes_one() {
    for (scenario, field, name) in [
        (
            "scenarios/live/caps.toml",
            "replica.scheduler.profile",
            "amd-epyc_live-tiny-moe",
        ),
        (
            "scenarios/live/gem.toml",
            "replica.scheduler.profile",
            "amd-epyc_live-tiny-moe",
        ),
        (
            "scenarios/live/mosaic.toml",
            "replica.scheduler.profile",
            "amd-epyc_mosaic-live-dense",
        ),
        (
            "scenarios/live/expertweave.toml",
            "replica.scheduler.profile",
            "amd-epyc_live-tiny-moe-ffn32",
        ),
    ] {
        let set = format!("{field}={name}");
        let output = expertsim(&["validate", scenario, "--set", &set]);
        assert!(output.status.success(), "{scenario}: {}", stderr(&output));
        let set = format!("{field}=no-such-profile");
        let output = expertsim(&["validate", scenario, "--set", &set]);
        assert_eq!(output.status.code(), Some(2), "{scenario}");
        let err = stderr(&output);
        // A file of [[replica]] groups names the first group's field.
        let first_group = field.replacen("replica.", "replica[0].", 1);
        assert!(
            (err.contains(&format!("field `{field}`"))
                || err.contains(&format!("field `{first_group}`")))
                && err.contains("no profile named"),
            "{scenario}: {err}"
        );
    }
}

#[test]
fn a_trace_run_writes_what_its_replay_offered_and_validate_prints_it() {
    let dir = tempfile::tempdir().unwrap();
    // Gaps of 1 s and 3 s between the three replayed rows (the fourth is past n_requests):
    // span 4 s, rate (3 - 1) / 4 = 0.5 req/s, gap CV = stddev(1, 3) / mean = sqrt(2) / 2.
    std::fs::write(
        dir.path().join("t.csv"),
        "timestamp,prompt_tokens,output_tokens\n5,10,1\n6,30,1\n9,20,1\n50,999,1\n",
    )
    .unwrap();
    let text = SMALL
        .replace(
            "pattern = \"bursty\"\nrate_per_s = 100",
            "pattern = \"trace\"\ntrace = { path = \"t.csv\" }",
        )
        .replace("n_requests = 200", "n_requests = 3");
    let scenario = write_scenario(dir.path(), &text);
    let out = dir.path().join("out");
    let validated = expertsim(&["validate", scenario.to_str().unwrap()]);
    assert!(validated.status.success(), "{}", stderr(&validated));
    let printed = String::from_utf8_lossy(&validated.stdout);
    assert!(
        printed.contains("3 requests over 4.0 s, mean rate 0.500 req/s, inter-arrival CV 0.71"),
        "{printed}"
    );
    let run = expertsim(&[
        "run",
        scenario.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--no-figures",
    ]);
    assert!(run.status.success(), "{}", stderr(&run));
    let results: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("results.json")).unwrap()).unwrap();
    let trace = &results["cells"][0]["trace"];
    assert_eq!(trace["file"], "t.csv");
    assert_eq!(trace["requests"], 3);
    assert_eq!(trace["span_s"], 4.0);
    assert_eq!(trace["mean_rate_per_s"], 0.5);
    assert!((trace["interarrival_cv"].as_f64().unwrap() - 2f64.sqrt() / 2.0).abs() < 1e-12);
    assert_eq!(trace["prompt_tokens"]["mean"], 20.0);
    assert_eq!(trace["prompt_tokens"]["p50"], 20);
    assert_eq!(trace["prompt_tokens"]["max"], 30);
}
