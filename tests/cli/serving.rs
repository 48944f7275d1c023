//! The serving family through the binary: a bad combination (EP over the GPUs, adapters on a
//! model without ESFT adapters) exits 2 naming the file, line and keys with nothing written; `--trace-events` writes Trace Event Format JSON with one track per
//! replica beside the per-request CSV; `expertsim capacity` searches its `arrival.rate_per_s`.

use super::common::{assert_refused, expertsim, stderr};

const TWO_REPLICAS: &str = r#"
name = "serving-cli"
description = "two Llama-2-7B replicas"
family = "serving"
seeds = [3]

[model]
name = "llama-2-7b"

[replica]
count = 2

[routing]
kind = "least_outstanding"

[workload]
n_requests = 200
prompt_tokens = { kind = "uniform", low = 64, high = 1024 }
output_tokens = { kind = "zipf", min = 1, max = 256, exponent = 1.1 }

[arrival]
pattern = "gamma"
rate_per_s = 10.0
cv = 2.0
"#;

#[test]
fn expert_parallelism_that_does_not_divide_the_gpus_exits_2_naming_the_keys() {
    let text = TWO_REPLICAS
        .replace(r#"name = "llama-2-7b""#, r#"name = "mixtral-8x7b""#)
        .replace("count = 2", "count = 2\ngpus = 4\nexpert_parallel = 3");
    assert_refused(
        &text,
        Some(13),
        &["replica.expert_parallel", "replica.gpus"],
    );
}

/// ESFT adapters on an MoE model they were not fine-tuned from exit 2 naming `adapters` and
/// `model.name`, nothing written.
#[test]
fn adapters_on_a_model_without_esft_adapters_exit_2_naming_the_keys() {
    let text = TWO_REPLICAS
        .replace(r#"name = "llama-2-7b""#, r#"name = "mixtral-8x7b""#)
        .replace("count = 2", "count = 2\ngpus = 2\nexpert_parallel = 2")
        + "\n[adapters]\ncount = 2\nmemory = { kind = \"virtual_weight_tensor\" }\n";
    assert_refused(&text, None, &["adapters", "model.name"]);
}

#[test]
fn trace_events_hold_one_track_per_replica_and_a_slice_per_step() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("two.toml");
    std::fs::write(&path, TWO_REPLICAS).unwrap();
    let out = dir.path().join("out");
    let output = expertsim(&[
        "run",
        path.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--no-figures",
        "--per-request-csv",
        "--trace-events",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = std::fs::read_to_string(out.join("trace_events/0000_seed3.json")).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let threads: Vec<&str> = events
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(threads, ["replica 0", "replica 1"]);
    let steps: Vec<&serde_json::Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    assert!(steps.iter().any(|e| e["tid"] == 0) && steps.iter().any(|e| e["tid"] == 1));
    for step in &steps {
        assert!(step["dur"].as_f64().unwrap() > 0.0);
        let a = &step["args"];
        assert!(a["prefill_tokens"].as_u64().unwrap() + a["decode_tokens"].as_u64().unwrap() > 0);
    }
    // Every request's prompt is prefilled in the slices: no preemption at this load.
    let prefilled: u64 = steps
        .iter()
        .map(|e| e["args"]["prefill_tokens"].as_u64().unwrap())
        .sum();
    let csv = std::fs::read_to_string(out.join("requests/0000_seed3.csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(
        &header[header.len() - 7..],
        [
            "replica",
            "queueing_ms",
            "ttft_ms",
            "tpot_ms",
            "topic",
            "step",
            "start_s"
        ]
    );
    let prompt_col = header.iter().position(|&c| c == "prompt_tokens").unwrap();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 200);
    let prompts: u64 = rows
        .iter()
        .map(|r| r[prompt_col].parse::<u64>().unwrap())
        .sum();
    assert_eq!(prefilled, prompts);
    assert_eq!(doc["otherData"]["events_dropped"], 0);
}

#[test]
fn capacity_searches_the_arrival_rate() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("two.toml");
    std::fs::write(&path, TWO_REPLICAS).unwrap();
    let out = dir.path().join("cap");
    let output = expertsim(&[
        "capacity",
        path.to_str().unwrap(),
        "--slo",
        "ttft_p99_ms=500,tpot_p99_ms=40",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("capacity.json")).unwrap()).unwrap();
    let capacity = report["cells"][0]["capacity"].as_f64().unwrap();
    assert!(capacity > 0.0, "{report}");
}
