//! Tests of the GEM family as a whole: scenario validation errors, and runs of the serving
//! model with simple mappers defined here (sim cannot depend on strategies).

use super::*;
use crate::cost::moe_layer::SpeedFactors;
use crate::load_cache::LoadCache;
use crate::policies::mapping::{ExpertMapper, LayerMapping, LayerProblem};
use crate::rng::SimRng;
use crate::serving::{QueuePolicy, QueuedRequest};
use crate::time::SimTime;
use std::collections::VecDeque;
use std::path::Path;

/// First come, first served (as the runner's `strategies::queue::Fcfs` for one replica).
#[derive(Default)]
struct Fifo(VecDeque<QueuedRequest>);
impl QueuePolicy for Fifo {
    fn name(&self) -> &'static str {
        "fcfs"
    }
    fn reset(&mut self, _: usize) {
        self.0.clear();
    }
    fn push(&mut self, _: usize, r: QueuedRequest) {
        self.0.push_back(r);
    }
    fn pop(&mut self, _: usize, _: u64) -> Option<QueuedRequest> {
        self.0.pop_front()
    }
    fn len(&self, _: usize) -> usize {
        self.0.len()
    }
}

/// Contiguous blocks by index (the linear mapping), for tests inside sim.
struct Blocks;
impl ExpertMapper for Blocks {
    fn map_layer(&mut self, problem: &LayerProblem<'_>, _: &mut SimRng) -> LayerMapping {
        let per = problem.n_experts / problem.n_gpus();
        let gpus: Vec<usize> = (0..problem.n_experts).map(|e| e / per).collect();
        LayerMapping::from_assignment(&gpus, problem.n_gpus())
    }
}

/// Heaviest mean experts on the fastest GPUs, round-robin from the fastest.
struct HeavyOnFast;
impl ExpertMapper for HeavyOnFast {
    fn map_layer(&mut self, problem: &LayerProblem<'_>, _: &mut SimRng) -> LayerMapping {
        let u = problem.mean_utilization();
        let mut order: Vec<usize> = (0..problem.n_experts).collect();
        order.sort_by(|&a, &b| u[b].total_cmp(&u[a]));
        let g = problem.n_gpus();
        let mut gpus = vec![0; problem.n_experts];
        for (i, &e) in order.iter().enumerate() {
            gpus[e] = g - 1 - (i % g);
        }
        LayerMapping::from_assignment(&gpus, g)
    }
}

fn config(text: &str) -> GemConfig {
    toml::from_str(text).unwrap()
}

fn error(text: &str) -> crate::validate::FieldError {
    config(text)
        .validate(Path::new("."), &mut LoadCache::default())
        .unwrap_err()
}

const SMALL: &str = r#"
model = { name = "mixtral-8x7b" }
workload = { n_requests = 200 }
trace = { observed_steps = 32, unseen_steps = 64 }
"#;

#[test]
fn bad_input_gets_field_errors() {
    let e = error("model = { name = \"gpt-5\" }");
    assert_eq!(e.path, "model.name");
    assert!(e.message.contains("qwen3-30b-a3b") && e.message.contains("gpt-5"));
    let e = error("model = { name = \"mixtral-8x7b\" }\ncluster = { n_gpus = 3 }");
    assert_eq!(e.path, "cluster.n_gpus");
    assert!(
        e.message.contains("does not divide the 8 experts"),
        "{}",
        e.message
    );
    let e = error(
        "model = { name = \"mixtral-8x7b\" }\ncluster = { variability = \"explicit\", speed_factors = [1.0, 0.0, 1.0, 1.0] }",
    );
    assert_eq!(e.path, "cluster.speed_factors[1]");
    assert!(e.message.contains("must lie in [0.001"), "{}", e.message);
    let e = error(
        "model = { name = \"mixtral-8x7b\" }\ncluster = { variability = \"explicit\", speed_factors = [1.0, -0.5, 1.0, 1.0] }",
    );
    assert_eq!(e.path, "cluster.speed_factors[1]");
    let e = error("model = { name = \"mixtral-8x7b\" }\ncluster = { variability = \"explicit\" }");
    assert_eq!(e.path, "cluster.speed_factors");
    let e = error("model = { name = \"mixtral-8x7b\" }\nmapper = { kind = \"gem\", window = 300 }");
    assert_eq!(e.path, "mapper.window");
    let e = error("model = { name = \"mixtral-8x7b\" }\nworkload = { dataset = \"custom\" }");
    assert_eq!(e.path, "workload.prompt_tokens");
    let e = error("model = { name = \"mixtral-8x7b\" }\ntrace = { temporal_correlation = 1.5 }");
    assert_eq!(e.path, "trace.temporal_correlation");
    // 8,388,608 tokens at top-2 are 2^24 assignments, the most an f32 count holds exactly.
    let at = |tokens: u64| {
        format!("model = {{ name = \"mixtral-8x7b\" }}\ntrace = {{ tokens_per_step = {tokens} }}")
    };
    let e = error(&at(8_388_609));
    assert_eq!(e.path, "trace.tokens_per_step");
    assert!(e.message.contains("16777216"), "{}", e.message);
    assert!(
        config(&at(8_388_608))
            .validate(Path::new("."), &mut LoadCache::default())
            .is_ok()
    );
    assert!(toml::from_str::<GemConfig>("model = { name = \"x\" }\nclusterr = {}").is_err());
    assert!(toml::from_str::<GemConfig>("model = { name = \"x\", gpu = \"H200\" }").is_err());
}

#[test]
fn recorded_trace_must_match_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let trace = trace::ExpertTrace::from_counts(32, 4, 3, vec![1.0; 32 * 4 * 3]);
    trace.save(&dir.path().join("t.trace")).unwrap();
    let e = config(
        "model = { name = \"mixtral-8x7b\" }\ntrace = { path = \"t.trace\", observed_steps = 1 }",
    )
    .validate(dir.path(), &mut LoadCache::default())
    .unwrap_err();
    assert_eq!(e.path, "trace.path");
    assert!(e.message.contains("4 experts per layer") && e.message.contains("has 8"));
    let good = trace::ExpertTrace::from_counts(32, 8, 3, vec![1.0; 32 * 8 * 3]);
    good.save(&dir.path().join("g.trace")).unwrap();
    let scenario = config(
        "model = { name = \"mixtral-8x7b\" }\ntrace = { path = \"g.trace\", observed_steps = 2 }\nworkload = { n_requests = 20 }",
    )
    .validate(dir.path(), &mut LoadCache::default())
    .unwrap();
    let out = simulate(&scenario, 1, &mut Blocks, &mut Fifo::default());
    assert!(out.scalar("e2e_mean_ms").unwrap() > 0.0);
    let e = config("model = { name = \"mixtral-8x7b\" }\ntrace = { path = \"missing.trace\" }")
        .validate(dir.path(), &mut LoadCache::default())
        .unwrap_err();
    assert!(e.message.contains("missing.trace"), "{}", e.message);
}

#[test]
fn serving_reports_every_metric_and_is_deterministic() {
    let scenario = config(SMALL)
        .validate(Path::new("."), &mut LoadCache::default())
        .unwrap();
    let a = simulate(&scenario, 7, &mut Blocks, &mut Fifo::default());
    let b = simulate(&scenario, 7, &mut Blocks, &mut Fifo::default());
    // Bit for bit (the profiling-cost metrics are NaN here, which `==` never equals).
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
    let names: Vec<&str> = a.scalars.iter().map(|(n, _)| n.as_str()).collect();
    let expected: Vec<&str> = METRICS.iter().map(|m| m.name).collect();
    assert_eq!(names, expected);
    // Serving computes every metric but the profiling-cost experiment's (null in results).
    for (name, v) in &a.scalars {
        let profiling = matches!(name.as_str(), "profiling_min" | "profiled_counts");
        assert_eq!(v.is_finite(), !profiling, "{name} = {v}");
    }
    let get = |n| a.scalar(n).unwrap();
    assert!(get("e2e_p99_ms") >= get("e2e_p90_ms") && get("e2e_p90_ms") > 0.0);
    assert!(get("tpot_p99_ms") >= get("tpot_p90_ms") && get("tpot_p90_ms") > 0.0);
    assert!(get("moe_time_share") > 0.0 && get("moe_time_share") < 1.0);
    assert!(get("busy_share_max") <= 1.0 + 1e-9 && get("busy_share_min") > 0.0);
    assert_eq!(get("gap_vs_fastest"), 0.0);
    assert_eq!(
        a.details["deployment"]["mapping"].as_array().unwrap().len(),
        32
    );
    let c = simulate(&scenario, 8, &mut Blocks, &mut Fifo::default());
    assert_ne!(format!("{a:?}"), format!("{c:?}"));
}

#[test]
fn a_straggler_gpu_slows_serving_and_a_better_mapping_helps() {
    let low = config(SMALL)
        .validate(Path::new("."), &mut LoadCache::default())
        .unwrap();
    let high = config(&format!(
        "{SMALL}\ncluster = {{ variability = \"high\", factors = \"clock\" }}"
    ))
    .validate(Path::new("."), &mut LoadCache::default())
    .unwrap();
    assert_eq!(high.speed_factors, vec![0.88, 1.0, 1.0, 1.0]);
    let e2e = |s: &GemScenario, m: &mut dyn ExpertMapper| {
        simulate(s, 3, m, &mut Fifo::default())
            .scalar("e2e_mean_ms")
            .unwrap()
    };
    let (low_linear, high_linear) = (e2e(&low, &mut Blocks), e2e(&high, &mut Blocks));
    // A 12 % slower clock slows the compute-bound steps only: serving is slower, but less
    // than when the whole GPU (memory bandwidth included) is 12 % slower.
    let uniform = config(&format!(
        "{SMALL}\ncluster = {{ variability = \"high\", bandwidth_share = 1.0, factors = \"clock\" }}"
    ))
    .validate(Path::new("."), &mut LoadCache::default())
    .unwrap();
    let uniform_linear = e2e(&uniform, &mut Blocks);
    assert!(high_linear > low_linear, "{high_linear} vs {low_linear}");
    assert!(
        uniform_linear > high_linear,
        "{uniform_linear} vs {high_linear}"
    );
    assert!(
        uniform_linear > low_linear * 1.03,
        "{uniform_linear} vs {low_linear}"
    );
    // The paper's definition (a throughput factor on the workload): the cap lowers the clock
    // until GPU 0's MoE layer at the workload's load takes 1 / 0.88 as long, at least as deep
    // a cut as the clock-only 0.88, so serving is at least as slow.
    let throughput = config(&format!("{SMALL}\ncluster = {{ variability = \"high\" }}"))
        .validate(Path::new("."), &mut LoadCache::default())
        .unwrap();
    let deployment = Deployment::new(&throughput, 3);
    assert!(deployment.speeds[0].compute <= 0.88 + 1e-9);
    assert_eq!(deployment.speeds[0].bandwidth, 1.0);
    assert_eq!(deployment.speeds[1], SpeedFactors::NOMINAL);
    let throughput_linear = e2e(&throughput, &mut Blocks);
    assert!(
        throughput_linear >= high_linear,
        "{throughput_linear} vs {high_linear}"
    );
    // Keeping the heavy experts off the slow GPU 0 helps under high variability.
    let high_aware = e2e(&high, &mut HeavyOnFast);
    assert!(high_aware < high_linear, "{high_aware} vs {high_linear}");
    // A uniformly slower GPU 0 streams its two experts' weights 12 % slower whichever two
    // they are, and these decode steps are mostly streaming: moving the heavy experts off it
    // changes little either way.
    let uniform_aware = e2e(&uniform, &mut HeavyOnFast);
    assert!(
        (uniform_aware / uniform_linear - 1.0).abs() < 0.02,
        "{uniform_aware} vs {uniform_linear}"
    );
}

#[test]
fn variability_at_scale_experiment_reports_the_gap() {
    let scenario = config(
        "experiment = \"variability_at_scale\"\nmodel = { name = \"mixtral-8x7b\" }\ncluster = { n_gpus = 64 }\nscale = { draws = 500 }",
    )
    .validate(Path::new("."), &mut LoadCache::default())
    .unwrap();
    let out = simulate(&scenario, 1, &mut Blocks, &mut Fifo::default());
    let gap = out.scalar("gap_vs_fastest").unwrap();
    assert!(gap > 0.1 && gap < 0.3, "{gap}");
    // Per draw fastest/slowest - 1 >= 1 - slowest/fastest (x - 1 >= 1 - 1/x for x >= 1), so the
    // means keep that order; swapped or equal names would fail here.
    let vs_slowest = out.scalar("gap_vs_slowest").unwrap();
    assert!(vs_slowest > gap, "{vs_slowest} vs {gap}");
    // No request is served in this experiment: its serving metrics are missing, not 0.
    for name in [
        "e2e_mean_ms",
        "tpot_p90_ms",
        "throughput_tok_s",
        "busy_share_min",
    ] {
        assert!(out.scalar(name).unwrap().is_nan(), "{name}");
    }
    // The expected gap grows with the number of GPUs (more draws, wider extremes).
    let four = config(
        "experiment = \"variability_at_scale\"\nmodel = { name = \"mixtral-8x7b\" }\ncluster = { n_gpus = 4 }\nscale = { draws = 500 }",
    )
    .validate(Path::new("."), &mut LoadCache::default())
    .unwrap();
    let small = simulate(&four, 1, &mut Blocks, &mut Fifo::default())
        .scalar("gap_vs_fastest")
        .unwrap();
    assert!(small > 0.0 && small < gap, "N = 4: {small}, N = 64: {gap}");
}

#[test]
fn moderate_setup_is_sorted_and_reproducible() {
    let s = config(&format!(
        "{SMALL}\ncluster = {{ variability = \"moderate\" }}"
    ))
    .validate(Path::new("."), &mut LoadCache::default())
    .unwrap();
    let f = &s.speed_factors;
    assert_eq!(f.len(), 4);
    assert_eq!(f[3], 1.0);
    assert!(f.windows(2).all(|w| w[0] < w[1]), "{f:?}");
    let again = config(&format!(
        "{SMALL}\ncluster = {{ variability = \"moderate\" }}"
    ))
    .validate(Path::new("."), &mut LoadCache::default())
    .unwrap();
    assert_eq!(&again.speed_factors, f);
}

/// Every scenarios/gem/*.toml loads through the real loader in every sweep cell.
#[test]
fn scenario_files_validate_for_every_sweep_value() {
    crate::shipped_scenarios::load_all("gem", 5);
}

#[test]
fn caps_and_gem_price_the_moe_layer_through_the_one_entry_point() {
    // One GPU holding all 8 Mixtral experts: GEM's planning curve and CAPS's `grouped` model
    // both price n tokens spread evenly over the experts through `MoeLayerCost::gpu`, GEM in a
    // CUDA graph, CAPS launched eagerly (never cheaper).
    let gem = config(&format!("{SMALL}\ncluster = {{ n_gpus = 1 }}"))
        .validate(Path::new("."), &mut LoadCache::default())
        .unwrap();
    let deployment = Deployment::new(&gem, 1);
    let caps =
        crate::serving_family::execution::GroupedModel::new(&gem.profile, &gem.shape, &gem.gpu)
            .unwrap();
    let graph = crate::cost::moe_layer::MoeLayerCost::new(
        &gem.gpu,
        &gem.shape,
        crate::cost::kernel::Timing::Graph,
    )
    .with_measured_grouped(&gem.gpu)
    .0;
    let eager = crate::cost::moe_layer::MoeLayerCost::new(
        &gem.gpu,
        &gem.shape,
        crate::cost::kernel::Timing::Eager,
    );
    let e = gem.shape.n_experts;
    let mut checked = 0;
    for per_expert in [1u32, 3, 64, 65, 200, 1024] {
        let tokens = per_expert as usize * e;
        if tokens > deployment.costs.table_limit() {
            continue;
        }
        let rows = crate::cost::moe_layer::ExpertRows::Even {
            tokens: tokens as u64,
            experts: e,
        };
        let nominal = crate::cost::moe_layer::SpeedFactors::NOMINAL;
        let gem_ns = deployment.costs.cost(0, tokens as f64);
        assert_eq!(
            gem_ns,
            graph.gpu(rows, nominal).nanos,
            "{per_expert} rows/expert"
        );
        let load = vec![per_expert as f32; e];
        let caps_ns = caps.moe_nanos(&load);
        assert_eq!(caps_ns, eager.gpu(rows, nominal).nanos);
        checked += 1;
    }
    assert!(checked >= 3, "only {checked} sizes within the GEM table");
}

/// A request as the records sink saw it: (id, arrival, first token, finish, prompt, output).
type Served = (u64, SimTime, SimTime, SimTime, u64, u64);

/// Keeps every finished request's record.
#[derive(Default)]
struct ServedRecords(Vec<Served>);
impl crate::records::RecordSink for ServedRecords {
    fn record(&mut self, r: &crate::records::RequestRecord<'_>) {
        self.0.push((
            r.id,
            r.arrival,
            r.first_token.expect("GEM times every token"),
            r.finish,
            r.prompt_tokens,
            r.output_tokens,
        ));
    }
}

/// One priced step as a GEM step cost sees it: (prefill tokens, decode tokens, sequences
/// emitting, sequences in the step).
type PricedStep = (u64, u64, usize, u64);

/// Every step costs 1 ms; records what it was asked to price, and checks the routing: per
/// layer, the experts receive `tokens x top_k` token-expert assignments and each GPU the sum
/// over the experts it hosts (linear mapping: GPU g hosts experts 2g and 2g + 1 of 8).
#[derive(Default)]
struct OneMillisecond(Vec<PricedStep>);
impl crate::serving::StepCost for OneMillisecond {
    fn price(&mut self, w: &crate::serving::StepWork<'_>) -> crate::serving::StepTime {
        let routed = w.routed.expect("GEM steps carry their routing");
        let tokens = (w.prefill_tokens + w.decode_tokens) as u32;
        for layer in 0..routed.layers {
            let experts = &routed.per_expert[layer * 8..][..8];
            let gpus = &routed.per_gpu[layer * 4..][..4];
            assert_eq!(experts.iter().sum::<u32>(), 2 * tokens, "layer {layer}");
            for g in 0..4 {
                assert_eq!(
                    gpus[g],
                    experts[2 * g] + experts[2 * g + 1],
                    "layer {layer}"
                );
            }
            assert!(
                experts.iter().all(|&n| n <= tokens),
                "top-2 routes a token to 2 experts"
            );
        }
        let emitting = w.batch.iter().filter(|s| s.step_emits()).count();
        self.0
            .push((w.prefill_tokens, w.decode_tokens, emitting, w.requests));
        crate::serving::StepTime {
            duration: crate::time::SimDuration(1_000_000),
            breakdown: crate::serving::StepBreakdown {
                moe_ns: 500_000.0,
                per_gpu_busy_ns: vec![250_000.0; 4],
                ..Default::default()
            },
            source: crate::serving::CostSource::Analytic,
        }
    }
}

/// Writes `rows` (timestamp, prompt, output) as a trace CSV in `dir`.
fn trace_csv(dir: &Path, rows: &[(f64, u32, u32)]) {
    let mut text = String::from("timestamp,prompt_tokens,output_tokens\n");
    for (t, p, o) in rows {
        text.push_str(&format!("{t},{p},{o}\n"));
    }
    std::fs::write(dir.join("requests.csv"), text).unwrap();
}

#[test]
fn a_gem_step_on_the_replica_follows_a_hand_worked_schedule() {
    // vLLM V1 with a budget of 8 tokens per step, 1 ms steps. A: prompt 20, output 2; B:
    // prompt 3, output 1; both at t = 0 (A first).
    // s1 [0, 1 ms]: A's first chunk of 8; B waits (no budget left).       prefill 8
    // s2 [1, 2 ms]: A's second chunk of 8.                                  prefill 8
    // s3 [2, 3 ms]: A's last 4 (emits its first token) and B's whole prompt of 3 in the 4
    //               tokens left (emits, B is done).                          prefill 7, 2 emit
    // s4 [3, 4 ms]: A decodes its second token and is done.                 decode 1, 1 emits
    // So: B's first token and finish at 3 ms; A's first token at 3 ms, finish at 4 ms. TTFT
    // mean 3 ms, one inter-token gap of 1 ms (A's), e2e mean (3 + 4) / 2 = 3.5 ms, makespan
    // 4 ms, 3 tokens / 4 ms = 750 tokens/s; MoE share 0.5; each GPU busy 1 ms of 4.
    let dir = tempfile::tempdir().unwrap();
    trace_csv(dir.path(), &[(0.0, 20, 2), (0.0, 3, 1)]);
    let scenario = config(
        "model = { name = \"mixtral-8x7b\" }\n\
         serving = { max_num_seqs = 8, max_num_batched_tokens = 8 }\n\
         trace = { observed_steps = 4, unseen_steps = 4 }\n\
         arrival = { pattern = \"trace\", trace = { path = \"requests.csv\" } }",
    )
    .validate(dir.path(), &mut LoadCache::default())
    .unwrap();
    assert_eq!(scenario.n_requests, 2);
    let deployment = Deployment::new(&scenario, 1);
    let (mut cost, mut served) = (OneMillisecond::default(), ServedRecords::default());
    let out = serve_on(
        &scenario,
        1,
        &mut Blocks,
        &mut Fifo::default(),
        &deployment,
        &mut cost,
        &mut served,
    );
    assert_eq!(
        cost.0,
        vec![(8, 0, 0, 1), (8, 0, 0, 1), (7, 0, 2, 2), (0, 1, 1, 1)]
    );
    let ms = |n: u64| SimTime(n * 1_000_000);
    assert_eq!(
        served.0,
        vec![
            (1, ms(0), ms(3), ms(3), 3, 1),
            (0, ms(0), ms(3), ms(4), 20, 2)
        ]
    );
    let get = |n| out.scalar(n).unwrap();
    assert_eq!(get("ttft_mean_ms"), 3.0);
    assert_eq!(get("tpot_mean_ms"), 1.0);
    assert_eq!(get("e2e_mean_ms"), 3.5);
    assert_eq!(get("makespan_s"), 0.004);
    assert_eq!(get("throughput_tok_s"), 750.0);
    assert_eq!(get("mean_step_ms"), 1.0);
    assert_eq!(get("moe_time_share"), 0.5);
    assert_eq!(get("busy_share_min"), 0.25);
    assert_eq!(get("busy_share_max"), 0.25);
}

#[test]
fn littles_law_holds_on_the_replica_in_a_gem_run() {
    // Poisson arrivals at 20/s into Mixtral-8x7B on four H200s: over a run that starts and ends
    // empty, the replica's time-average population equals the completion rate times the mean
    // time in system (L = lambda W), and the time in system is the end-to-end latency.
    let scenario = config(&format!(
        "{SMALL}\narrival = {{ pattern = \"poisson\", rate_per_s = 20.0 }}"
    ))
    .validate(Path::new("."), &mut LoadCache::default())
    .unwrap();
    let out = simulate(&scenario, 2, &mut Blocks, &mut Fifo::default());
    let replica = &out.details["replica"];
    let completed = replica["completed"].as_f64().unwrap();
    assert_eq!(completed, 200.0);
    let end_s = out.scalar("makespan_s").unwrap();
    let l = replica["mean_in_system"].as_f64().unwrap();
    let w_s = replica["mean_sojourn_ns"].as_f64().unwrap() / 1e9;
    let lambda = completed / end_s;
    assert!(
        (l - lambda * w_s).abs() <= 1e-9 * l,
        "L {l} vs lambda W {}",
        lambda * w_s
    );
    assert!(
        l > 1.0,
        "the replica holds more than one request on average: {l}"
    );
    // The e2e histogram keeps 3 significant digits.
    let e2e_s = out.scalar("e2e_mean_ms").unwrap() / 1e3;
    assert!(
        (e2e_s - w_s).abs() <= 1e-3 * w_s,
        "e2e {e2e_s} s vs W {w_s} s"
    );
}

#[test]
fn gem_replays_the_azure_traces_first_rows() {
    // The committed Azure traces' first rows (scenarios/traces/), replayed at half speed: each
    // request arrives at its row's time x 0.5 (the files start at 0) with the row's lengths.
    let traces = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/traces");
    let cases = [
        (
            "azure_conv_2023.csv",
            [
                (0.0, 374, 44),
                (4.314579, 396, 109),
                (4.541877, 879, 55),
                (4.710427, 91, 16),
            ],
        ),
        (
            "azure_code_2023.csv",
            [
                (0.0, 4808, 10),
                (0.052, 3180, 8),
                (0.098189, 110, 27),
                (0.140684, 7433, 14),
            ],
        ),
    ];
    for (file, rows) in cases {
        let scenario = config(&format!(
            "model = {{ name = \"mixtral-8x7b\" }}\n\
             workload = {{ n_requests = 4 }}\n\
             trace = {{ observed_steps = 32, unseen_steps = 64 }}\n\
             arrival = {{ pattern = \"trace\", trace = {{ path = \"{file}\", time_scale = 0.5 }} }}"
        ))
        .validate(&traces, &mut LoadCache::default())
        .unwrap();
        let deployment = Deployment::new(&scenario, 1);
        let mut served = ServedRecords::default();
        serve_on(
            &scenario,
            1,
            &mut Blocks,
            &mut Fifo::default(),
            &deployment,
            &mut CurveStepCost::new(&scenario, &deployment),
            &mut served,
        );
        let mut got: Vec<(u64, SimTime, u64, u64)> = served
            .0
            .iter()
            .map(|&(id, arrival, _, _, prompt, output)| (id, arrival, prompt, output))
            .collect();
        got.sort_unstable();
        let expected: Vec<(u64, SimTime, u64, u64)> = rows
            .iter()
            .enumerate()
            .map(|(i, &(t, p, o))| (i as u64, SimTime::from_secs_f64(t * 0.5), p, o))
            .collect();
        assert_eq!(got, expected, "{file}");
    }
}
