//! Whole-run tests of the Chimera server with minimal in-crate policies (the real ones live in
//! `strategies`, which `sim` cannot depend on).

use super::*;
use crate::chimera::server::ChimeraServer;
use crate::load_cache::LoadCache;
use crate::serving::predictors::{PredictorConfig, SemanticRouterConfig};
use crate::serving::{EngineState, QueuePolicy, QueuedRequest, RouteRequest, Router, RouterConfig};
use std::collections::VecDeque;
use std::path::Path;

/// FCFS per engine.
#[derive(Default)]
struct Fifo(Vec<VecDeque<QueuedRequest>>);
impl QueuePolicy for Fifo {
    fn name(&self) -> &'static str {
        "fcfs"
    }
    fn reset(&mut self, n: usize) {
        self.0 = vec![VecDeque::new(); n];
    }
    fn push(&mut self, e: usize, r: QueuedRequest) {
        self.0[e].push_back(r);
    }
    fn pop(&mut self, e: usize, _: u64) -> Option<QueuedRequest> {
        self.0[e].pop_front()
    }
    fn len(&self, e: usize) -> usize {
        self.0[e].len()
    }
}

/// Shortest predicted total first (a linear scan; tests only).
#[derive(Default)]
struct ShortestTotal(Vec<Vec<QueuedRequest>>);
impl QueuePolicy for ShortestTotal {
    fn name(&self) -> &'static str {
        "stjf"
    }
    fn reset(&mut self, n: usize) {
        self.0 = vec![Vec::new(); n];
    }
    fn push(&mut self, e: usize, r: QueuedRequest) {
        self.0[e].push(r);
    }
    fn pop(&mut self, e: usize, _: u64) -> Option<QueuedRequest> {
        let q = &mut self.0[e];
        let best = (0..q.len()).min_by(|&a, &b| {
            q[a].predicted_total_tokens
                .total_cmp(&q[b].predicted_total_tokens)
                .then(q[a].id.cmp(&q[b].id))
        })?;
        Some(q.remove(best))
    }
    fn len(&self, e: usize) -> usize {
        self.0[e].len()
    }
}

/// Engines in turn.
#[derive(Default)]
struct Turns(usize, usize);
impl Router for Turns {
    fn name(&self) -> &'static str {
        "round_robin"
    }
    fn reset(&mut self, n: usize) {
        *self = Turns(0, n);
    }
    fn route(&mut self, _: &RouteRequest<'_>, _: &[EngineState]) -> usize {
        self.0 = (self.0 + 1) % self.1;
        self.0
    }
}

fn config(models: &[&str], rps: f64, duration_s: f64) -> ChimeraConfig {
    let text = format!(
        r#"
[cluster]
models = [{}]
[workload]
dataset = "apps"
rps = {rps}
duration_s = {duration_s}
[queue]
kind = "fcfs"
[routing]
kind = "round_robin"
"#,
        models
            .iter()
            .map(|m| format!("{m:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    toml::from_str(&text).unwrap()
}

fn scenario(config: &ChimeraConfig) -> ChimeraScenario {
    config
        .validate(Path::new("."), &mut LoadCache::default())
        .unwrap()
}

#[test]
fn every_listed_metric_resolves_and_runs_are_deterministic() {
    let s = scenario(&config(&["qwen2.5-1.5b", "qwen2.5-7b"], 4.0, 60.0));
    let a = run::run(&s, 3, &mut Fifo::default(), &mut Turns::default());
    let b = run::run(&s, 3, &mut Fifo::default(), &mut Turns::default());
    assert_eq!(a, b);
    assert_eq!(a.scalars.len(), METRICS.len());
    let c = run::run(&s, 4, &mut Fifo::default(), &mut Turns::default());
    assert_ne!(a, c);
    for name in HEADLINE.iter().chain(HEADLINE_IMPROVEMENTS) {
        assert!(METRICS.iter().any(|m| m.name == *name), "{name}");
    }
    let m = run::simulate(&s, 3, &mut Fifo::default(), &mut Turns::default());
    // Every workflow of the arrival window completes; 1, 2 or 4 stages each.
    assert!(
        m.n_workflows > 150 && m.n_workflows < 330,
        "{}",
        m.n_workflows
    );
    assert!(m.n_requests >= m.n_workflows && m.n_requests <= 4 * m.n_workflows);
    assert!(m.score_pct > 0.0 && m.score_pct < 100.0);
    assert!(m.workflow_latency.mean_ms > 0.0 && m.latency_per_token_ms > 0.0);
    // The replicas recorded every request (stage); a workflow's queueing is the sum of its
    // stages', so both totals are the same time counted two ways.
    assert_eq!(m.requests.completed, m.n_requests);
    let per_workflow = m.workflow_queue_time.mean_ms * m.n_workflows as f64;
    let per_request = m.requests.queueing.mean_ms * m.n_requests as f64;
    assert!(
        (per_workflow - per_request).abs() <= 1e-9 * per_request,
        "{per_workflow} vs {per_request}"
    );
    assert_eq!(m.engines.len(), 2);
    // Round robin alternates every request between the two engines.
    let diff = m.engines[0].requests.abs_diff(m.engines[1].requests);
    assert!(diff <= 1, "{diff}");
}

#[test]
fn more_load_means_more_queueing() {
    let light = scenario(&config(&["qwen2.5-7b"], 1.0, 120.0));
    let heavy = scenario(&config(&["qwen2.5-7b"], 12.0, 120.0));
    let l = run::simulate(&light, 1, &mut Fifo::default(), &mut Turns::default());
    let h = run::simulate(&heavy, 1, &mut Fifo::default(), &mut Turns::default());
    assert!(h.requests.queueing.mean_ms > l.requests.queueing.mean_ms);
    assert!(h.engines[0].mean_batch_size > l.engines[0].mean_batch_size);
    assert!(h.workflow_latency.mean_ms > l.workflow_latency.mean_ms);
}

/// The default engine is vLLM V1's OpenAI-server configuration on a GPU under 70 GiB (the
/// paper's vLLM is a V1 engine, docs/chimera.md): 2048 tokens per step with chunked prefill,
/// 256 sequences. vLLM 0.5's smaller budget (512) chunks the same prompts into more steps, each
/// paying the host's time.
#[test]
fn the_default_engine_is_vllm_v1s_server_budget_and_a_smaller_budget_takes_more_steps() {
    // Without prefix caching, which shortens the prompts the budget chunks.
    let mut v1 = config(&["qwen2.5-1.5b", "qwen2.5-7b"], 10.0, 120.0);
    v1.cluster.prefix_caching = false;
    let s = scenario(&v1);
    for engine in &s.engines {
        let replica = server::replica_config(&engine.cost);
        assert_eq!(replica.max_num_batched_tokens, Some(2048));
        assert!(replica.chunked_prefill);
        assert_eq!(replica.max_num_seqs, 256);
    }
    let mut small = v1.clone();
    small.cluster.max_num_batched_tokens = 512;
    let small = scenario(&small);
    let v1 = run::simulate(&s, 1, &mut Fifo::default(), &mut Turns::default());
    let v0 = run::simulate(&small, 1, &mut Fifo::default(), &mut Turns::default());
    assert_eq!(v1.n_workflows, v0.n_workflows);
    let steps = |m: &ChimeraMetrics| m.engines.iter().map(|e| e.steps).sum::<u64>();
    assert!(steps(&v0) > steps(&v1), "{} vs {}", steps(&v0), steps(&v1));
}

#[test]
fn an_oracle_predictor_hands_the_queue_the_true_remaining_total() {
    let mut c = config(&["qwen2.5-1.5b", "qwen2.5-14b"], 4.0, 30.0);
    c.predictor = PredictorConfig::Oracle;
    let s = scenario(&c);
    let (mut q, mut r) = (Fifo::default(), Turns::default());
    let mut server = ChimeraServer::new(&s, 9, &mut q, &mut r);
    server.record_admissions();
    crate::engine::run(&mut server);
    let records = server.admissions().to_vec();
    assert!(records.len() > 100);
    for a in &records {
        assert_eq!(a.predicted_total_tokens, a.true_remaining_tokens as f64);
        assert!(a.admitted >= a.submitted);
    }
    let m = server.finish();
    assert_eq!(m.predictor_kendall_distance, 0.0);
}

#[test]
fn with_an_oracle_and_one_slot_the_engine_runs_the_shortest_total_first() {
    let mut c = config(&["qwen2.5-7b"], 50.0, 4.0);
    c.predictor = PredictorConfig::Oracle;
    c.cluster.max_batch_size = 1;
    let s = scenario(&c);
    let (mut q, mut r) = (ShortestTotal::default(), Turns::default());
    let mut server = ChimeraServer::new(&s, 2, &mut q, &mut r);
    server.record_admissions();
    crate::engine::run(&mut server);
    let records = server.admissions().to_vec();
    // At every admission, no request that was already waiting had a smaller true total.
    for (i, a) in records.iter().enumerate() {
        for b in &records[i + 1..] {
            if b.submitted < a.admitted {
                assert!(
                    b.true_remaining_tokens >= a.true_remaining_tokens,
                    "{a:?} admitted before shorter {b:?}"
                );
            }
        }
    }
}

#[test]
fn achieved_kendall_distance_tracks_the_noise_knob() {
    let mut distances = vec![];
    for noise in [0.0, 0.3, 0.8, 2.0] {
        let mut c = config(&["qwen2.5-1.5b", "qwen2.5-7b"], 8.0, 120.0);
        c.predictor = PredictorConfig::Noisy { noise };
        let m = run::simulate(
            &scenario(&c),
            5,
            &mut Fifo::default(),
            &mut Turns::default(),
        );
        distances.push(m.predictor_kendall_distance);
    }
    assert_eq!(distances[0], 0.0);
    assert!(distances.windows(2).all(|w| w[0] < w[1]), "{distances:?}");
    assert!(distances[3] > 0.3 && distances[3] < 0.5, "{distances:?}");
    // The proxies: input length and submission order carry little ranking information.
    for (predictor, lo, hi) in [
        (PredictorConfig::Fcfs, 0.4, 0.6),
        (PredictorConfig::InputLength, 0.4, 0.8),
    ] {
        let mut c = config(&["qwen2.5-1.5b", "qwen2.5-7b"], 8.0, 120.0);
        c.predictor = predictor.clone();
        let d = run::simulate(
            &scenario(&c),
            5,
            &mut Fifo::default(),
            &mut Turns::default(),
        )
        .predictor_kendall_distance;
        assert!(d > lo && d < hi, "{predictor:?}: {d}");
    }
}

#[test]
fn router_quality_knob_moves_the_achieved_mean_average_precision() {
    let mut maps = vec![];
    for router in [
        SemanticRouterConfig::Oracle,
        SemanticRouterConfig::Noisy { noise: 0.3 },
        SemanticRouterConfig::Noisy { noise: 2.0 },
        SemanticRouterConfig::Static,
    ] {
        let mut c = config(&["qwen2.5-1.5b", "qwen2.5-7b"], 8.0, 120.0);
        c.semantic_router = router;
        let m = run::simulate(
            &scenario(&c),
            5,
            &mut Fifo::default(),
            &mut Turns::default(),
        );
        maps.push(m.router_map);
    }
    assert_eq!(maps[0], 1.0);
    assert!(maps.windows(2).all(|w| w[0] > w[1]), "{maps:?}");
}

#[test]
fn bad_input_is_a_field_error() {
    let check = |c: ChimeraConfig, path: &str| {
        let e = c
            .validate(Path::new("."), &mut LoadCache::default())
            .unwrap_err();
        assert_eq!(e.path, path, "{e:?}");
    };
    check(config(&["gpt-9"], 1.0, 1.0), "cluster.models[0]");
    check(config(&[], 1.0, 1.0), "cluster.models");
    check(config(&["qwen2.5-7b"], 0.0, 1.0), "workload.rps");
    let mut c = config(&["qwen2.5-7b"], 1.0, 1.0);
    c.workload.duration_s = f64::NAN;
    check(c, "workload.duration_s");
    let mut c = config(&["qwen2.5-14b"], 1.0, 1.0);
    c.cluster.gpu = "L4".into();
    check(c, "cluster.models[0]");
    let mut c = config(&["qwen2.5-7b"], 1.0, 1.0);
    c.cluster.gpu = "TPU".into();
    check(c, "cluster.gpu");
    let mut c = config(&["qwen2.5-7b"], 1.0, 1.0);
    c.routing = RouterConfig::Chimera {
        slack: -1.0,
        margin: 0.0,
    };
    check(c, "routing.slack");
    let mut c = config(&["qwen2.5-7b"], 1.0, 1.0);
    c.predictor = PredictorConfig::Noisy { noise: -0.1 };
    check(c, "predictor.noise");
    // Unknown keys are rejected by the schema.
    let text = "[cluster]\nmodels=[\"qwen2.5-7b\"]\nbogus=1\n[workload]\ndataset=\"apps\"\nrps=1\nduration_s=1\n[queue]\nkind=\"fcfs\"\n[routing]\nkind=\"round_robin\"\n";
    assert!(toml::from_str::<ChimeraConfig>(text).is_err());
    let text = "[cluster]\nmodels=[\"qwen2.5-7b\"]\n[workload]\ndataset=\"apps\"\nrps=1\nduration_s=1\n[queue]\nkind=\"stjf\"\nbogus=2\n[routing]\nkind=\"round_robin\"\n";
    assert!(toml::from_str::<ChimeraConfig>(text).is_err());
}

/// A config whose workflows arrive from the trace at `trace_path` (replayed at `time_scale`).
fn trace_config(trace_path: &Path, time_scale: f64, duration_s: f64) -> ChimeraConfig {
    let text = format!(
        r#"
[cluster]
models = ["qwen2.5-7b"]
[workload]
dataset = "apps"
duration_s = {duration_s}
[arrival]
pattern = "trace"
trace = {{ path = {:?}, time_scale = {time_scale} }}
[queue]
kind = "fcfs"
[routing]
kind = "round_robin"
"#,
        trace_path.display().to_string()
    );
    toml::from_str(&text).unwrap()
}

#[test]
fn a_trace_replays_its_arrival_times_and_prompts_within_the_window() {
    let dir = std::env::temp_dir().join(format!("chimera-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("trace.csv");
    // Arrivals at 10, 10.5, 11 and 15 s of the file's clock; the replay starts at the first.
    std::fs::write(
        &path,
        "arrived_at,num_prefill_tokens,num_decode_tokens\n10,100,7\n10.5,2000,7\n11,30,7\n15,400,7\n",
    )
    .unwrap();
    for (time_scale, expected_times_s) in
        [(1.0, vec![0.0, 0.5, 1.0]), (0.5, vec![0.0, 0.25, 0.5, 2.5])]
    {
        let s = scenario(&trace_config(&path, time_scale, 3.0));
        // The window (3 s) holds the rows replayed before it ends; the rate is theirs.
        assert_eq!(s.rps, expected_times_s.len() as f64 / 3.0);
        let (_, stats) = s.trace_stats().unwrap();
        assert_eq!(stats.requests, expected_times_s.len());
        let (mut q, mut r) = (Fifo::default(), Turns::default());
        let mut server = ChimeraServer::new(&s, 1, &mut q, &mut r);
        server.record_admissions();
        crate::engine::run(&mut server);
        let mut first_stages: Vec<_> = server
            .admissions()
            .iter()
            .filter(|a| a.stage == 0)
            .cloned()
            .collect();
        first_stages.sort_by_key(|a| a.workflow);
        let times: Vec<f64> = first_stages
            .iter()
            .map(|a| a.submitted.as_secs_f64())
            .collect();
        assert_eq!(times, expected_times_s);
        let prompts: Vec<u32> = first_stages
            .iter()
            .map(|a| a.prompt_tokens - crate::serving::agent_workflows::SYSTEM_PROMPT_TOKENS)
            .collect();
        assert_eq!(prompts, [100, 2000, 30, 400][..expected_times_s.len()]);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn arrivals_come_from_workload_rps_or_an_arrival_table_not_both() {
    let error = |c: &ChimeraConfig| {
        c.validate(Path::new("."), &mut LoadCache::default())
            .unwrap_err()
            .path
    };
    let mut neither = config(&["qwen2.5-7b"], 1.0, 1.0);
    neither.workload.rps = None;
    assert_eq!(error(&neither), "workload.rps");
    let mut both = config(&["qwen2.5-7b"], 1.0, 1.0);
    both.arrival = Some(toml::from_str("pattern = \"poisson\"\nrate_per_s = 2.0").unwrap());
    assert_eq!(error(&both), "workload.rps");
    let mut offline = config(&["qwen2.5-7b"], 1.0, 1.0);
    offline.workload.rps = None;
    offline.arrival = Some(toml::from_str("pattern = \"offline\"").unwrap());
    assert_eq!(error(&offline), "arrival.pattern");
    // The same Poisson rate through either table gives the same run.
    let mut table = config(&["qwen2.5-7b"], 2.0, 30.0);
    table.workload.rps = None;
    table.arrival = Some(toml::from_str("pattern = \"poisson\"\nrate_per_s = 2.0").unwrap());
    let a = run::simulate(
        &scenario(&config(&["qwen2.5-7b"], 2.0, 30.0)),
        5,
        &mut Fifo::default(),
        &mut Turns::default(),
    );
    let b = run::simulate(
        &scenario(&table),
        5,
        &mut Fifo::default(),
        &mut Turns::default(),
    );
    assert_eq!(a, b);
}

/// vLLM V1 caches prefixes by default, so Chimera's engines do: a stage's prompt is its role's
/// system prompt, the user message and the earlier stages' outputs (section 3.1), so every
/// request after the first of its role finds the system prompt's blocks cached and the
/// second coder stage of a 4-stage workflow also finds the first coder stage's prompt.
#[test]
fn prefix_caching_is_on_by_default_and_stages_reuse_the_cached_prompts() {
    let on = scenario(&config(&["qwen2.5-1.5b"], 4.0, 120.0));
    assert!(on.engines[0].cost.prefix_caching);
    assert_eq!(
        server::replica_config(&on.engines[0].cost).kv.block_size,
        16
    );
    let mut c = config(&["qwen2.5-1.5b"], 4.0, 120.0);
    c.cluster.prefix_caching = false;
    let off = scenario(&c);
    assert_eq!(
        server::replica_config(&off.engines[0].cost).kv.block_size,
        1
    );
    let a = run::simulate(&on, 1, &mut Fifo::default(), &mut Turns::default());
    let b = run::simulate(&off, 1, &mut Fifo::default(), &mut Turns::default());
    assert_eq!(a.n_workflows, b.n_workflows);
    assert_eq!(b.engines[0].prefix_hit_rate, None);
    // The system prompt alone is 144 of a mean prompt near 850 tokens (17 %); the repeated
    // coder stage adds about a tenth of the prompts.
    let rate = a.engines[0].prefix_hit_rate.unwrap();
    assert!(rate > 0.2 && rate < 0.4, "{rate}");
    assert!(a.engines[0].utilization < b.engines[0].utilization);
}

#[test]
fn stage_roles_follow_appendix_a1() {
    use crate::serving::agent_workflows::stage_role;
    let roles = |n: u32| (0..n).map(|s| stage_role(n, s)).collect::<Vec<_>>();
    // Planner 0, coder / solver 1, QA / verifier 2.
    assert_eq!(roles(4), [0, 1, 2, 1]);
    assert_eq!(roles(2), [0, 1]);
    assert_eq!(roles(1), [1]);
}

#[test]
fn a_bad_prefix_caching_value_names_file_line_and_field() {
    let text = "name = \"x\"\nfamily = \"chimera\"\n[cluster]\nmodels = [\"qwen2.5-7b\"]\nprefix_caching = \"yes\"\n[workload]\ndataset = \"apps\"\nrps = 1\nduration_s = 1\n[queue]\nkind = \"fcfs\"\n[routing]\nkind = \"round_robin\"\n";
    let e = crate::scenario::load_str(Path::new("bad.toml"), text, &[]).expect_err("refused");
    let shown = e.to_string();
    assert!(
        shown.contains("bad.toml:5") && shown.contains("cluster.prefix_caching"),
        "{shown}"
    );
}
