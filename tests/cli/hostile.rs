//! The reproducing cases of issue 30 (hostile input, second round), each where it is cheap: exit
//! code 2, one line on stderr naming the field (or flag, or file), and nothing written; and the
//! serving family's KV cache held in every case.

use super::common::{expertsim, stderr};
use std::path::Path;

/// Runs `args` and checks the refusal: exit 2, one line mentioning each of `needles`, and
/// `out` (when given) not created.
fn refused(args: &[&str], out: Option<&Path>, needles: &[&str]) {
    let output = expertsim(args);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    assert!(!err.contains('\u{1b}'), "a raw escape echoed: {err}");
    for needle in needles {
        assert!(
            err.contains(needle),
            "{args:?}: expected {needle:?} in {err}"
        );
    }
    if let Some(out) = out {
        assert!(!out.exists(), "{args:?} wrote {}", out.display());
    }
}

#[test]
fn derived_quantities_are_refused_at_the_field_they_come_from() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = out.to_str().unwrap();
    for (scenario, set, field) in [
        (
            "scenarios/gem/explicit-factors.toml",
            "replica.speed_factors=[1e-300, 1, 1, 1]",
            "replica.speed_factors[0]",
        ),
        (
            "scenarios/live/mosaic.toml",
            "replica.load={kind=\"fixed\", seconds=1e308}",
            "load.seconds",
        ),
        (
            "scenarios/live/mosaic.toml",
            "replica.load={kind=\"fixed\", seconds=9223372036854775807}",
            "load.seconds",
        ),
        (
            "scenarios/live/mosaic.toml",
            "replica.load={kind=\"fixed\", seconds=1e9}",
            "load.seconds",
        ),
        (
            "scenarios/caps/evaluation.toml",
            "arrival.rate_per_s=1e308",
            "arrival.rate_per_s",
        ),
        (
            "scenarios/expertweave/azure_trace.toml",
            "workload.horizon_s=1e-300",
            "workload.horizon_s",
        ),
        (
            "scenarios/serving/esft_adapters.toml",
            "adapters.count=9223372036854775807",
            "adapters.count",
        ),
        (
            "scenarios/studies/caps_x_mapping.toml",
            "experts.mapping=[{kind=\"gem\", restarts=1000000000}]",
            "experts.mapping.restarts",
        ),
        (
            "scenarios/studies/caps_x_mapping.toml",
            "experts.mapping=[{kind=\"gem\", window=1000000000}]",
            "experts.mapping.window",
        ),
        (
            "scenarios/serving/quick.toml",
            "replica.block_size=4294967295",
            "replica.block_size",
        ),
    ] {
        refused(&["validate", scenario, "--set", set], None, &[field]);
        refused(
            &["run", scenario, "--out", o, "--set", set],
            Some(&out),
            &[field],
        );
    }
}

#[test]
fn input_files_and_their_values_are_checked_before_they_are_used() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = out.to_str().unwrap();
    // A trace with a 4,294,967,295-token request.
    let trace = dir.path().join("big.csv");
    std::fs::write(
        &trace,
        "arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,4294967295,10\n0.5,100,10\n",
    )
    .unwrap();
    let set = format!("arrival.trace.path={:?}", trace.to_str().unwrap());
    refused(
        &[
            "run",
            "scenarios/serving/azure_trace_llama2.toml",
            "--out",
            o,
            "--set",
            &set,
        ],
        Some(&out),
        &["arrival.trace.path", "tokens per request"],
    );
    // A zero-latency profile and one whose latencies are huge.
    let text = std::fs::read_to_string("profiles/measured/amd-epyc_live-tiny-moe.json")
        .unwrap_or_else(|_| {
            std::fs::read_to_string(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("profiles/measured/amd-epyc_live-tiny-moe.json"),
            )
            .unwrap()
        });
    for (name, factor, needle) in [("zero", 0.0, "positive"), ("huge", 1e300, "one hour")] {
        let mut profile: serde_json::Value = serde_json::from_str(&text).unwrap();
        scale_samples(&mut profile, factor);
        let path = dir.path().join(format!("{name}.json"));
        std::fs::write(&path, profile.to_string()).unwrap();
        let set = format!("replica.scheduler.profile={:?}", path.to_str().unwrap());
        refused(
            &["run", "scenarios/live/caps.toml", "--out", o, "--set", &set],
            Some(&out),
            &["replica.scheduler.profile", needle],
        );
    }
    // A scenario file past its ceiling is refused before it is read.
    let big = dir.path().join("big.toml");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(5 << 20)
        .unwrap();
    refused(&["validate", big.to_str().unwrap()], None, &["byte limit"]);
    // A 2^63 integer names its field; a value with a line break or a control byte is refused,
    // the byte escaped.
    let scenario = dir.path().join("s.toml");
    let quick = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/caps/quick.toml"),
    )
    .unwrap()
    .replace("n_requests = 500", "n_requests = 9223372036854775808");
    std::fs::write(&scenario, quick).unwrap();
    refused(
        &["validate", scenario.to_str().unwrap()],
        None,
        &["field `workload.n_requests`", "2^63"],
    );
    refused(
        &[
            "validate",
            "scenarios/caps/quick.toml",
            "--set",
            "workload.n_requests=5\narrival.rate_per_s=-1",
        ],
        None,
        &["line break"],
    );
    refused(
        &[
            "validate",
            "scenarios/caps/quick.toml",
            "--set",
            "work\u{1b}[31mload.x=1",
        ],
        None,
        &["\\u{1b}"],
    );
    // A bad value in a table a sweep replaces ([[replica]] queue, swept as `replica.queue`).
    let two = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/serving/chimera_two_models.toml"),
    )
    .unwrap()
    .replacen(
        "starvation_threshold = 4096",
        "starvation_threshold = nan",
        1,
    );
    std::fs::write(&scenario, two).unwrap();
    refused(
        &["validate", scenario.to_str().unwrap()],
        None,
        &["replica[0].queue", "base value of `replica.queue`"],
    );
    // `reproduce` with an empty headlines.toml reproduces nothing: refused.
    let family = dir.path().join("scenarios/caps");
    std::fs::create_dir_all(&family).unwrap();
    std::fs::write(family.join("headlines.toml"), "").unwrap();
    refused(
        &[
            "reproduce",
            "caps",
            "--quick",
            "--scenarios",
            dir.path().join("scenarios").to_str().unwrap(),
            "--out",
            o,
        ],
        Some(&out),
        &["no [[run]]"],
    );
}

/// Sets every `[x, ns]` sample of a profile's curves to `ns x factor`.
fn scale_samples(value: &mut serde_json::Value, factor: f64) {
    match value {
        serde_json::Value::Object(fields) => {
            for (key, v) in fields.iter_mut() {
                if key == "samples"
                    && let Some(rows) = v.as_array_mut()
                {
                    for row in rows {
                        let ns = row[1].as_f64().unwrap();
                        row[1] = serde_json::json!(ns * factor);
                    }
                } else {
                    scale_samples(v, factor);
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(|v| scale_samples(v, factor)),
        _ => {}
    }
}

#[test]
fn command_line_numbers_and_output_folders_are_refused_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = out.to_str().unwrap();
    let live = |flag: &str, value: &str| {
        refused(
            &[
                "live",
                "scenarios/live/caps.toml",
                "--backend",
                "cpu",
                "--out",
                o,
                flag,
                value,
            ],
            Some(&out),
            &[flag],
        );
    };
    live("--repetitions", "1000000000");
    live("--repetitions", "0");
    live("--decode-context", "100000000");
    live("--probe-points", "1000000000");
    live("--tile", "0");
    refused(
        &[
            "capacity",
            "scenarios/caps/quick.toml",
            "--set",
            "arrival.rate_per_s=150",
            "--slo",
            "e2e_p99_ms=2000",
            "--tolerance",
            "1e-300",
            "--out",
            o,
        ],
        Some(&out),
        &["--tolerance"],
    );
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let f = file.to_str().unwrap();
    refused(
        &[
            "run",
            "scenarios/caps/quick.toml",
            "--no-figures",
            "--out",
            f,
        ],
        None,
        &["--out", "is a file"],
    );
    refused(
        &[
            "run",
            "scenarios/caps/quick.toml",
            "--no-figures",
            "--out",
            "/",
        ],
        None,
        &["root"],
    );
    // A results.json that is a folder, and a symbolic link where figures go.
    let odd = dir.path().join("odd");
    std::fs::create_dir_all(odd.join("results.json")).unwrap();
    refused(
        &[
            "run",
            "scenarios/caps/quick.toml",
            "--out",
            odd.to_str().unwrap(),
        ],
        None,
        &["results.json is not a file"],
    );
    #[cfg(unix)]
    {
        let linked = dir.path().join("linked");
        std::fs::create_dir_all(&linked).unwrap();
        std::os::unix::fs::symlink(dir.path(), linked.join("figures")).unwrap();
        refused(
            &[
                "run",
                "scenarios/caps/quick.toml",
                "--out",
                linked.to_str().unwrap(),
            ],
            None,
            &["symbolic link"],
        );
    }
    // Two scenarios into one folder: the second is refused, the first's results kept.
    let shared = dir.path().join("shared");
    let s = shared.to_str().unwrap();
    let first = expertsim(&[
        "run",
        "scenarios/caps/quick.toml",
        "--no-figures",
        "--out",
        s,
    ]);
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    let before = std::fs::read(shared.join("results.json")).unwrap();
    refused(
        &[
            "run",
            "scenarios/gem/quick.toml",
            "--no-figures",
            "--out",
            s,
        ],
        None,
        &["holds the results of scenario \"caps-quick\""],
    );
    assert_eq!(std::fs::read(shared.join("results.json")).unwrap(), before);
    // A figure name too long for the file system, and two figures of one name.
    let long = "f".repeat(300);
    let set = format!(
        "figure=[{{name={long:?}, metrics=[\"e2e_p99_ms\"], x=\"replica.batch_former.kind\"}}]"
    );
    refused(
        &[
            "run",
            "scenarios/caps/quick.toml",
            "--out",
            o,
            "--set",
            &set,
        ],
        Some(&out),
        &["figure[0].name", "255 bytes"],
    );
    let set = "figure=[{name=\"a\", metrics=[\"e2e_p99_ms\"], x=\"replica.batch_former.kind\"}, \
               {name=\"a\", metrics=[\"e2e_mean_ms\"], x=\"replica.batch_former.kind\"}]";
    refused(
        &["run", "scenarios/caps/quick.toml", "--out", o, "--set", set],
        Some(&out),
        &["figure[1].name"],
    );
}

#[test]
fn merge_trusts_nothing_it_reads() {
    let dir = tempfile::tempdir().unwrap();
    let shard = |name: &str| {
        let path = dir.path().join(name);
        let run = expertsim(&[
            "run",
            "scenarios/caps/quick.toml",
            "--no-figures",
            "--shard",
            "1/1",
            "--out",
            path.to_str().unwrap(),
        ]);
        assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
        path
    };
    let edit_manifest = |path: &Path, edit: &dyn Fn(&mut serde_json::Value)| {
        let file = path.join("partial-1-of-1.json");
        let mut manifest: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        edit(&mut manifest);
        std::fs::write(&file, manifest.to_string()).unwrap();
    };
    let out = dir.path().join("merged");
    let o = out.to_str().unwrap();
    // A shard count of 0 (was a panic in step_by).
    let zero = shard("zero");
    edit_manifest(&zero, &|m| m["shard"]["count"] = 0.into());
    refused(
        &["merge", zero.to_str().unwrap(), "--out", o],
        Some(&out),
        &["shard 1/0"],
    );
    // A scenario name that escapes results/.
    let escape = shard("escape");
    edit_manifest(&escape, &|m| {
        m["header"]["scenario"]["name"] = "../../../escaped".into()
    });
    refused(
        &["merge", escape.to_str().unwrap(), "--no-figures"],
        None,
        &["header.scenario.name"],
    );
    // A cell edited to a value no run reports.
    let edited = shard("edited");
    let cell = edited.join("cells/0.json");
    let mut value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&cell).unwrap()).unwrap();
    value["runs"][0]["scalars"]["e2e_mean_ms"] = (-5.0).into();
    std::fs::write(&cell, value.to_string()).unwrap();
    refused(
        &["merge", edited.to_str().unwrap(), "--out", o],
        Some(&out),
        &["e2e_mean_ms = -5"],
    );
    // A FIFO where a manifest should be: refused at once, not read forever.
    #[cfg(unix)]
    {
        let fifo_dir = dir.path().join("fifo");
        std::fs::create_dir_all(&fifo_dir).unwrap();
        let status = std::process::Command::new("mkfifo")
            .arg(fifo_dir.join("partial-1-of-1.json"))
            .status();
        if status.is_ok_and(|s| s.success()) {
            refused(
                &["merge", fifo_dir.to_str().unwrap(), "--out", o],
                Some(&out),
                &["not a regular file"],
            );
        }
    }
}

/// A serving run's scalars (one cell, one seed) with `sets` on serving/quick.toml.
fn serving(sets: &[&str]) -> serde_json::Map<String, serde_json::Value> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let mut args = vec![
        "run",
        "scenarios/serving/quick.toml",
        "--no-figures",
        "--out",
        out.to_str().unwrap(),
    ];
    for set in sets {
        args.extend(["--set", set]);
    }
    let run = expertsim(&args);
    assert_eq!(run.status.code(), Some(0), "{sets:?}: {}", stderr(&run));
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    doc["cells"][0]["runs"][0]["scalars"]
        .as_object()
        .unwrap()
        .clone()
}

#[test]
fn the_serving_family_holds_its_kv_cache() {
    let get = |s: &serde_json::Map<String, serde_json::Value>, k: &str| s[k].as_f64().unwrap();
    // Prompts longer than the cache (111,625 tokens) are refused at admission, named in `refused`.
    let long = serving(&[
        "workload.n_requests=5",
        "workload.prompt_tokens={kind=\"fixed\",value=1048576}",
    ]);
    assert_eq!(get(&long, "refused"), 5.0);
    assert_eq!(get(&long, "completed"), 0.0);
    // A prompt past replica.max_model_len is refused; one within it is served.
    let capped = serving(&["workload.n_requests=20", "replica.max_model_len=512"]);
    assert_eq!(get(&capped, "refused"), 20.0);
    let fits = serving(&["workload.n_requests=20", "replica.max_model_len=600"]);
    assert_eq!(get(&fits, "refused"), 0.0);
    assert_eq!(get(&fits, "completed"), 20.0);
    // One request of 300,000 output tokens (was 269 % of the cache): stopped at the cache.
    let one = serving(&[
        "workload.n_requests=1",
        "workload.output_tokens={kind=\"fixed\",value=300000}",
        "limits.max_tokens_per_request=1e6",
    ]);
    assert_eq!(get(&one, "completed"), 1.0);
    assert!(get(&one, "kv_used_max") <= 1.0, "{one:?}");
    // Requests that together outgrow a small cache are preempted (vllm and sarathi recompute),
    // and the cache is never passed, whatever the scheduler kind.
    let tight = [
        "replica.gpu_memory_utilization=0.19",
        "workload.output_tokens={kind=\"fixed\",value=1500}",
        "arrival.rate_per_s=50",
        "workload.n_requests=40",
    ];
    for (scheduler, preempts) in [
        ("replica.scheduler={kind=\"vllm\"}", true),
        ("replica.scheduler={kind=\"sarathi\"}", true),
        ("replica.scheduler={kind=\"orca\"}", false),
        ("replica.scheduler={kind=\"static\"}", false),
    ] {
        let mut sets = tight.to_vec();
        sets.extend([scheduler, "replica.max_num_seqs=32"]);
        let run = serving(&sets);
        assert_eq!(get(&run, "completed"), 40.0, "{scheduler}");
        assert!(get(&run, "kv_used_max") <= 1.0, "{scheduler}: {run:?}");
        assert_eq!(
            get(&run, "preemptions") > 0.0,
            preempts,
            "{scheduler}: {run:?}"
        );
    }
}

#[test]
fn an_expertweave_offline_batch_refuses_a_bad_count_by_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = out.to_str().unwrap();
    let decode = "scenarios/expertweave/rerouting_decode.toml";
    for (scenario, set, needles) in [
        (
            decode,
            "workload.n_requests=0",
            &["workload.n_requests", "at least 1"][..],
        ),
        (
            decode,
            "workload.n_requests=1000001",
            &["workload.n_requests", "max_requests"][..],
        ),
        // Offline has no horizon (a rate may have both: at most n_requests before the horizon).
        (
            decode,
            "workload.horizon_s=10",
            &["workload.horizon_s", "offline"][..],
        ),
    ] {
        refused(&["validate", scenario, "--set", set], None, needles);
        refused(
            &["run", scenario, "--out", o, "--set", set],
            Some(&out),
            needles,
        );
    }
}
