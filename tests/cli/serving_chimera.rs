//! Chimera's headline system in the serving family (issue 19: the general family is the papers'
//! superset, not a fork; issue 28: the chimera family's own server is going). The decisions are
//! checked at the policy boundary: a run of `scenarios/serving/chimera_two_models.toml` (one
//! request per arrival) and of the same two groups serving Chimera's APPS workflows
//! (`[workload.workflow]`, 60 s at 8 workflows per second: stages submitted as earlier ones
//! finish, later stages pinned to their workflow's engine) are recorded call by call at their
//! queue policy and router, and every call is replayed on freshly built policies of the same
//! configuration, which must admit the same request at every pop and send every request to the
//! same engine (the policies are functions of what the serving family hands them, and the STJF
//! queue and Chimera router are exercised: out-of-order admissions, routes past the fastest
//! engine, both engines serving). The workflow preset's inputs are checked against Chimera's
//! values by hand: the models' standalone APPS scores, the length predictor and the semantic
//! router. The serving example itself runs through the binary, an oracle SJF queue is checked
//! against its definition, every queue policy runs on every scheduler kind, and a bad key of a
//! `[[replica]]` group is refused naming it.

use super::common::{expertsim, stderr};
use expertsim_scenario::load_cache::LoadCache;
use expertsim_scenario::serving::predictors::{PredictorConfig, SemanticRouterConfig};
use expertsim_scenario::serving::{EngineState, QueuePolicy, QueuedRequest};
use expertsim_scenario::serving::{RouteRequest, Router};
use expertsim_scenario::serving_family::{ServingConfig, ServingScenario};
use std::path::Path;

/// A scenario file's family tables (the common keys removed).
fn family_tables(path: &str) -> toml::Table {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut table: toml::Table = toml::from_str(&text).unwrap();
    for key in ["name", "description", "family", "seeds", "sweep", "figure"] {
        table.remove(key);
    }
    table
}

fn validated(table: toml::Table) -> ServingScenario {
    let config: ServingConfig = toml::Value::Table(table).try_into().unwrap();
    config
        .validate(Path::new("scenarios/serving"), &mut LoadCache::default())
        .unwrap()
}

fn serving_example() -> ServingScenario {
    validated(family_tables("scenarios/serving/chimera_two_models.toml"))
}

/// The example's two groups serving Chimera's engines' workload: APPS workflows at 8 per second
/// for 60 s, each group vLLM's chunked-prefill engine with prefix caching (the key mapping of
/// docs/unified-model-changes/chimera-preset.md), the task scores the workflow model's.
fn workflow_preset() -> ServingScenario {
    let mut table = family_tables("scenarios/serving/chimera_two_models.toml");
    let engine: toml::Table = toml::from_str(
        "scheduler = { kind = \"sarathi\", chunk_size = 2048 }\nwatermark = 0.0\n\
         prefix_caching = true\nhost_time = \"vllm\"\n",
    )
    .unwrap();
    for group in table["replica"].as_array_mut().unwrap() {
        let group = group.as_table_mut().unwrap();
        group.remove("task_score_pct");
        group.extend(engine.clone());
    }
    table["workload"] = toml::Value::Table(
        toml::from_str("horizon_s = 60.0\nworkflow = { dataset = \"apps\" }\n").unwrap(),
    );
    table["arrival"]["rate_per_s"] = toml::Value::Float(8.0);
    validated(table)
}

#[derive(Clone, Debug, PartialEq)]
enum QueueCall {
    Reset(usize),
    Push(usize, QueuedRequest),
    Pop {
        engine: usize,
        iteration: u64,
        admitted: Option<u64>,
    },
}

/// A queue policy that records every call and its answer.
struct RecordingQueue {
    inner: Box<dyn QueuePolicy>,
    calls: Vec<QueueCall>,
}

impl QueuePolicy for RecordingQueue {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn reset(&mut self, n_engines: usize) {
        self.calls.push(QueueCall::Reset(n_engines));
        self.inner.reset(n_engines);
    }
    fn push(&mut self, engine: usize, request: QueuedRequest) {
        self.calls.push(QueueCall::Push(engine, request));
        self.inner.push(engine, request);
    }
    fn pop(&mut self, engine: usize, iteration: u64) -> Option<QueuedRequest> {
        let admitted = self.inner.pop(engine, iteration);
        self.calls.push(QueueCall::Pop {
            engine,
            iteration,
            admitted: admitted.map(|r| r.id),
        });
        admitted
    }
    fn len(&self, engine: usize) -> usize {
        self.inner.len(engine)
    }
}

#[derive(Clone, Debug, PartialEq)]
enum RouteCall {
    Reset(usize),
    Route {
        id: u64,
        workflow: u64,
        stage: u32,
        confidence: Vec<f64>,
        predicted_total_tokens: Vec<f64>,
        engines: Vec<EngineState>,
        chosen: usize,
    },
    Done(u64),
}

/// A router that records every call and its answer.
struct RecordingRouter {
    inner: Box<dyn Router>,
    calls: Vec<RouteCall>,
}

impl Router for RecordingRouter {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn reset(&mut self, n_engines: usize) {
        self.calls.push(RouteCall::Reset(n_engines));
        self.inner.reset(n_engines);
    }
    fn route(&mut self, request: &RouteRequest<'_>, engines: &[EngineState]) -> usize {
        let chosen = self.inner.route(request, engines);
        self.calls.push(RouteCall::Route {
            id: request.id,
            workflow: request.workflow,
            stage: request.stage,
            confidence: request.confidence.to_vec(),
            predicted_total_tokens: request.predicted_total_tokens.to_vec(),
            engines: engines.to_vec(),
            chosen,
        });
        chosen
    }
    fn workflow_done(&mut self, workflow: u64) {
        self.calls.push(RouteCall::Done(workflow));
        self.inner.workflow_done(workflow);
    }
}

/// The serving run of `scenario` (seed 1), recorded at its queue policy and router, replayed
/// on freshly built policies of the same configuration.
fn replayed_run(scenario: &ServingScenario) -> Replayed {
    let mut queue = RecordingQueue {
        inner: strategies::queue::build(&scenario.queue),
        calls: Vec::new(),
    };
    let mut router = RecordingRouter {
        inner: strategies::routing::build(&scenario.router),
        calls: Vec::new(),
    };
    let out = expertsim_scenario::serving_family::run_recorded(
        scenario,
        1,
        &mut queue,
        &mut router,
        strategies::mapping::build(&scenario.expert_mapping).as_mut(),
        &mut [],
        None,
        &mut expertsim_scenario::records::DiscardRecords,
        None,
    )
    .unwrap();
    assert!(out.details.get("failed").is_none(), "{}", out.details);
    replay(
        &queue.calls,
        &router.calls,
        &mut *strategies::queue::build(&scenario.queue),
        &mut *strategies::routing::build(&scenario.router),
    )
}

#[test]
fn the_workflow_presets_decisions_replay_on_its_policies() {
    let preset = workflow_preset();

    // Chimera's inputs, by hand: the standalone APPS scores (15 % and 30 %), the noisy length
    // predictor (noise 0.6) and semantic router (noise 1.0), each group a model of its own.
    let groups: Vec<_> = preset.groups().collect();
    assert_eq!(groups.len(), 2);
    let scores: Vec<_> = groups.iter().map(|(_, r)| r.task_score_pct).collect();
    assert_eq!(scores, [Some(15.0), Some(30.0)]);
    assert!(groups[0].0.name().contains("1.5B") && groups[1].0.name().contains("7B"));
    assert_eq!(preset.predictor, PredictorConfig::Noisy { noise: 0.6 });
    assert_eq!(
        preset.semantic_router,
        Some(SemanticRouterConfig::Noisy { noise: 1.0 })
    );

    let replayed = replayed_run(&preset);
    // About 480 workflows of 4, 2 or 1 stages: over a thousand stages. The STJF queue reordered
    // (some request admitted after a later-submitted one); both engines serve; the confidence
    // sent some workflows past the fastest engine; later stages were routed (pinned).
    assert!(
        replayed.pops > 1_000 && replayed.out_of_order > 0,
        "{replayed:?}"
    );
    assert!(replayed.routes > 1_000 && replayed.per_engine.iter().all(|&n| n > 100));
    assert!(replayed.not_fastest > 0, "{replayed:?}");
    assert!(replayed.later_stages > 300, "{replayed:?}");
}

/// The serving example (one-stage requests), recorded and replayed the same way.
#[test]
fn the_serving_examples_decisions_replay_on_its_policies() {
    let replayed = replayed_run(&serving_example());
    assert!(
        replayed.pops >= 4_000 && replayed.out_of_order > 0,
        "{replayed:?}"
    );
    assert!(
        replayed.routes == 4_000 && replayed.not_fastest > 0,
        "{replayed:?}"
    );
    assert_eq!(replayed.later_stages, 0, "{replayed:?}");
}

/// What a replay saw.
#[derive(Debug, Default)]
struct Replayed {
    /// Requests admitted, and those admitted after a later-submitted one on their engine.
    pops: usize,
    out_of_order: usize,
    routes: usize,
    per_engine: [usize; 2],
    /// First requests of a workflow sent to the engine of longer estimated delay.
    not_fastest: usize,
    /// Routes of a workflow's later stages.
    later_stages: usize,
}

/// Replays the recorded calls on `queue` and `router`, asserting every answer is the recorded
/// one (two engines).
fn replay(
    queue_calls: &[QueueCall],
    route_calls: &[RouteCall],
    queue: &mut dyn QueuePolicy,
    router: &mut dyn Router,
) -> Replayed {
    let mut seen = Replayed::default();
    let mut last_admitted = [0u64; 2];
    for call in queue_calls {
        match call {
            QueueCall::Reset(n) => queue.reset(*n),
            QueueCall::Push(engine, request) => queue.push(*engine, *request),
            QueueCall::Pop {
                engine,
                iteration,
                admitted,
            } => {
                let ours = queue.pop(*engine, *iteration).map(|r| r.id);
                assert_eq!(ours, *admitted, "pop {} on engine {engine}", seen.pops);
                if let Some(id) = admitted {
                    seen.pops += 1;
                    seen.out_of_order += usize::from(*id < last_admitted[*engine]);
                    last_admitted[*engine] = *id;
                }
            }
        }
    }
    for call in route_calls {
        match call {
            RouteCall::Reset(n) => router.reset(*n),
            RouteCall::Done(workflow) => router.workflow_done(*workflow),
            RouteCall::Route {
                id,
                workflow,
                stage,
                confidence,
                predicted_total_tokens,
                engines,
                chosen,
            } => {
                let request = RouteRequest {
                    id: *id,
                    workflow: *workflow,
                    stage: *stage,
                    confidence,
                    predicted_total_tokens,
                };
                assert_eq!(router.route(&request, engines), *chosen, "request {id}");
                seen.routes += 1;
                seen.per_engine[*chosen] += 1;
                let delay = |e: usize| engines[e].estimated_delay_ms();
                seen.not_fastest += usize::from(*stage == 0 && delay(*chosen) > delay(1 - *chosen));
                seen.later_stages += usize::from(*stage > 0);
            }
        }
    }
    seen
}

/// The example runs (two queue policies x four routers), each replica group reports its model,
/// and the task score rises with the latency slack Chimera's router may spend on the stronger
/// model.
#[test]
fn the_serving_chimera_example_runs_through_the_binary() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let output = expertsim(&[
        "run",
        "scenarios/serving/chimera_two_models.toml",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let cells = results["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 8);
    let score = |c: usize| {
        cells[c]["runs"][0]["details"]["task_score_pct"]
            .as_f64()
            .unwrap()
    };
    for (c, cell) in cells.iter().enumerate() {
        let details = &cell["runs"][0]["details"];
        // The queue axis is the outer one: fcfs, then stjf (set in every replica group).
        assert_eq!(details["queue"], if c < 4 { "fcfs" } else { "stjf" });
        assert_eq!(details["deployment"].as_array().unwrap().len(), 2);
    }
    // Routers: least_loaded, chimera at slack 0, 0.5, 2.
    for base in [0, 4] {
        assert!(
            score(base + 3) > score(base + 1),
            "{} vs {}",
            score(base + 3),
            score(base + 1)
        );
    }
}

/// One request at a time (`max_num_seqs = 1`) on one replica, outputs of 1 to 512 tokens
/// arriving faster than they are served, the length predictor an oracle.
const ONE_SLOT: &str = r#"
name = "serving-one-slot"
description = "one sequence at a time, length-aware queue"
family = "serving"
seeds = [5]

[model]
name = "llama-2-7b"

[replica]
scheduler = { kind = "orca" }
max_num_seqs = 1
queue = { kind = "sjf" }

[predictor]
kind = "oracle"

[workload]
n_requests = 300
prompt_tokens = { kind = "fixed", value = 64 }
output_tokens = { kind = "uniform", low = 1, high = 512 }

[arrival]
pattern = "poisson"
rate_per_s = 5.0
"#;

/// (arrival s, admission s, output tokens) of each request of `queue`'s run.
fn one_slot_run(queue: &str) -> Vec<(f64, f64, f64)> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("one_slot.toml");
    std::fs::write(
        &path,
        ONE_SLOT.replace(r#"queue = { kind = "sjf" }"#, queue),
    )
    .unwrap();
    let out = dir.path().join("out");
    let output = expertsim(&[
        "run",
        path.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--per-request-csv",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let csv = std::fs::read_dir(out.join("requests"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    // Plain numbers and names: no field is quoted.
    let text = std::fs::read_to_string(csv).unwrap();
    let mut lines = text.lines();
    let headers: Vec<&str> = lines.next().unwrap().split(',').collect();
    let column = |name: &str| headers.iter().position(|h| *h == name).unwrap();
    let (arrival, queueing, output) = (
        column("arrival_s"),
        column("queueing_ms"),
        column("output_tokens"),
    );
    lines
        .map(|line| {
            let r: Vec<&str> = line.split(',').collect();
            let at: f64 = r[arrival].parse().unwrap();
            let waited: f64 = r[queueing].parse().unwrap();
            (at, at + waited * 1e-3, r[output].parse().unwrap())
        })
        .collect()
}

/// With exact predictions and one slot, SJF admits, whenever the slot frees, the shortest of
/// the requests then waiting: no request admitted later that was already waiting is shorter.
/// FCFS on the same arrivals waits longer on average (non-preemptive SJF minimises the mean
/// wait of a single server among orders that ignore nothing but the lengths).
#[test]
fn an_oracle_sjf_queue_admits_the_shortest_waiting_request() {
    let sjf = one_slot_run(r#"queue = { kind = "sjf" }"#);
    assert_eq!(sjf.len(), 300);
    let mut order = sjf.clone();
    order.sort_by(|a, b| a.1.total_cmp(&b.1));
    let mut reordered = 0;
    for (i, a) in order.iter().enumerate() {
        for b in &order[i + 1..] {
            if b.0 < a.1 - 1e-6 {
                assert!(b.2 >= a.2, "{a:?} admitted before the shorter {b:?}");
                reordered += usize::from(b.0 < a.0);
            }
        }
    }
    assert!(reordered > 0, "the queue never reordered");
    let fcfs = one_slot_run(r#"queue = { kind = "fcfs" }"#);
    let mean_wait = |run: &[(f64, f64, f64)]| {
        run.iter()
            .map(|(at, admitted, _)| admitted - at)
            .sum::<f64>()
            / run.len() as f64
    };
    assert!(
        mean_wait(&sjf) < mean_wait(&fcfs),
        "{} vs {}",
        mean_wait(&sjf),
        mean_wait(&fcfs)
    );
}

/// Every queue policy of `strategies::queue` on every scheduler kind (each admits from the
/// queue): every cell serves every request and passes the run's conservation and Little's-law
/// checks (a failed check reports `details.failed` and no number).
#[test]
fn every_queue_policy_runs_on_every_scheduler_kind() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("grid.toml");
    let grid = ONE_SLOT
        .replace("max_num_seqs = 1", "max_num_seqs = 16")
        .replace("kind = \"oracle\"", "kind = \"noisy\"\nnoise = 0.6")
        + r#"
[sweep]
"replica.queue" = [
  { kind = "fcfs" },
  { kind = "sjf" },
  { kind = "stjf", starvation_threshold = 64, quantum = 8 },
  { kind = "mlfq" },
  { kind = "ltr", noise = 0.5 },
]
"replica.scheduler" = [{ kind = "vllm" }, { kind = "sarathi", chunk_size = 256 }, { kind = "orca" }]
"#;
    std::fs::write(&path, grid).unwrap();
    let out = dir.path().join("out");
    let output = expertsim(&[
        "run",
        path.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let cells = results["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 15);
    let mut queues = std::collections::BTreeSet::new();
    for cell in cells {
        let run = &cell["runs"][0];
        assert!(run["details"].get("failed").is_none(), "{}", run["details"]);
        assert_eq!(run["scalars"]["completed"], 300.0, "{}", cell);
        queues.insert(run["details"]["queue"].as_str().unwrap().to_string());
    }
    assert_eq!(queues.len(), 5);
}

/// A bad key in the second `[[replica]]` group exits 2 naming the file, its line and the
/// group's key, with nothing written.
#[test]
fn a_bad_key_in_a_replica_group_exits_2_naming_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("groups.toml");
    let text = ONE_SLOT.replace(
        "[model]\nname = \"llama-2-7b\"\n\n[replica]\n",
        "[[replica]]\nmodel = \"llama-2-7b\"\n\n[[replica]]\nmodel = \"llama-2-7b\"\ncuont = 2\n",
    );
    assert!(text.contains("cuont"));
    std::fs::write(&path, text).unwrap();
    let out = dir.path().join("out");
    let output = expertsim(&[
        "run",
        path.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert!(
        err.contains("groups.toml:12") && err.contains("replica[1].cuont"),
        "{err}"
    );
    assert!(!out.exists());
}
