//! The studies of docs/studies.md state mechanisms; these tests hold the mechanisms on smaller
//! runs of the same scenario files, each against a bound derived by hand from the cost model.

use expertsim_scenario::metrics::RunOutput;
use std::path::Path;

/// Runs every cell of a study scenario under `sets` (one seed) and returns each cell's sweep
/// coordinates, rendered as `key=value` strings, with its output.
fn run_study(file: &str, sets: &[&str]) -> Vec<(Vec<String>, RunOutput)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let plan = expertsim_scenario::scenario::load(&path, &sets).unwrap_or_else(|e| panic!("{e}"));
    plan.cells
        .iter()
        .map(|cell| {
            let coords = cell
                .coords
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            let run = expertsim_scenario::runner::run_cell(
                &cell.scenario,
                plan.seeds[0],
                &strategies::Registry,
                None,
                None,
            )
            .unwrap_or_else(|e| panic!("{}: {e}", cell.id));
            (coords, run.output)
        })
        .collect()
}

/// The output of the one cell whose coordinates contain every fragment.
fn cell<'a>(runs: &'a [(Vec<String>, RunOutput)], fragments: &[&str]) -> &'a RunOutput {
    let mut found = runs.iter().filter(|(coords, _)| {
        fragments
            .iter()
            .all(|f| coords.iter().any(|c| c.contains(f)))
    });
    let (_, output) = found
        .next()
        .unwrap_or_else(|| panic!("no cell {fragments:?}"));
    assert!(found.next().is_none(), "several cells match {fragments:?}");
    output
}

fn scalar(output: &RunOutput, name: &str) -> f64 {
    output.scalar(name).unwrap_or_else(|| panic!("no {name}"))
}

const STUDY_B: &str = "scenarios/studies/vllm_vs_sarathi_variability.toml";

/// Study (b)'s trade-off at 10 req/s on uniform GPUs: Sarathi's decode-first chunks keep the
/// running requests' steps short (lower P99 TPOT than vLLM, whose whole-prompt prefill steps
/// stall every decode), and pay with later first tokens (higher P99 TTFT).
#[test]
fn study_b_sarathi_trades_first_token_latency_for_steady_decoding() {
    let runs = run_study(
        STUDY_B,
        &[
            "seeds=[1]",
            "workload.n_requests=600",
            "arrival.rate_per_s=[10.0]",
            "replica.speed_factors=[[1.0, 1.0, 1.0, 1.0]]",
            r#"replica.scheduler=[{ kind = "vllm" }, { kind = "sarathi", chunk_size = 512 }]"#,
        ],
    );
    let vllm = cell(&runs, &["vllm"]);
    let sarathi = cell(&runs, &["sarathi"]);
    assert!(
        scalar(sarathi, "tpot_p99_ms") < scalar(vllm, "tpot_p99_ms"),
        "sarathi P99 TPOT {} vs vllm {}",
        scalar(sarathi, "tpot_p99_ms"),
        scalar(vllm, "tpot_p99_ms")
    );
    assert!(
        scalar(sarathi, "ttft_p99_ms") > scalar(vllm, "ttft_p99_ms"),
        "sarathi P99 TTFT {} vs vllm {}",
        scalar(sarathi, "ttft_p99_ms"),
        scalar(vllm, "ttft_p99_ms")
    );
}

/// Study (b)'s variability mechanism, on Sarathi with 256-token chunks (every step at most 256
/// tokens). A power-capped GPU runs a lower SM clock: at 0.88 of its clock an H100's ridge point
/// on its fitted rates (profiles/rates.json) is 0.88 x 674 TFLOP/s / 2,957 GB/s = 201 FLOP per
/// byte for a dense GEMM and 0.88 x 574 / 1,818 = 278 for a grouped expert GEMM at decode sizes;
/// a bf16 weight GEMM of at most 256 tokens does at most 256 FLOP per weight byte, so the expert
/// GEMMs, most of a step's bytes, stay memory bound and the straggler costs little
/// (`bandwidth_share = 0`: mean TPOT within 2 %; since issue 33 each kernel class is its own
/// kernels, and a prefill chunk's attention, compute bound, and the element-wise kernels' floors
/// follow the clock: +1.4 %). When the slowdown also reaches the memory (`bandwidth_share = 1`),
/// every step waits for the straggler (the TP all-reduce and the EP layer both wait for the
/// slowest GPU): the GPU part of a step stretches by 1 / 0.88 = +13.6 %, the host's part
/// (measured, about 6.3 ms plus 35 us a sequence) does not, so mean TPOT rises by less: between
/// +8 % and +16 % (+11.1 %).
#[test]
fn study_b_clock_only_straggler_spares_memory_bound_steps() {
    let sets = |share: &str| {
        vec![
            "seeds=[1]".to_string(),
            "workload.n_requests=600".to_string(),
            "arrival.rate_per_s=[4.0]".to_string(),
            r#"replica.scheduler=[{ kind = "sarathi", chunk_size = 256 }]"#.to_string(),
            format!("replica.bandwidth_share={share}"),
        ]
    };
    let ratio = |share: &str| {
        let sets = sets(share);
        let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
        let runs = run_study(STUDY_B, &sets);
        let uniform = cell(&runs, &["sarathi", "[1.0, 1.0, 1.0, 1.0]"]);
        let straggler = cell(&runs, &["sarathi", "[0.88, 1.0, 1.0, 1.0]"]);
        scalar(straggler, "tpot_mean_ms") / scalar(uniform, "tpot_mean_ms")
    };
    // Clock only, the 256-token steps' weight GEMMs stay memory bound: mean TPOT moves by
    // batch-order effects and the clock-bound attention and element-wise floors (+1.4 %, +0.4 %,
    // +0.7 % over seeds 1-3 with issue 33's kernel classes and measured host time; -1.2 %,
    // +0.2 %, -0.9 % on issue 27's kernel model), while a slowdown that reaches memory moves it
    // by +11.1 % on seed 1 (+8.6 % and +6.7 % on seeds 2 and 3: the 8-16 % band below holds
    // for seed 1, the seed this test runs).
    let clock_only = ratio("0.0");
    assert!(
        (clock_only - 1.0).abs() < 0.02,
        "clock-only straggler moved mean TPOT by {:+.2} %",
        (clock_only - 1.0) * 100.0
    );
    let uniformly_slower = ratio("1.0");
    assert!(
        (1.08..1.16).contains(&uniformly_slower),
        "a uniformly slower straggler moved mean TPOT by {:+.2} %",
        (uniformly_slower - 1.0) * 100.0
    );
    assert!(
        uniformly_slower - 1.0 > 5.0 * (clock_only - 1.0).abs(),
        "the memory-bound steps were not spared: clock only {:+.2} %, uniformly slower {:+.2} %",
        (clock_only - 1.0) * 100.0,
        (uniformly_slower - 1.0) * 100.0
    );
}
