//! `[placement.calibration]`: MOSAIC's calibration pass (mosaic.txt section 4.1.2) on the
//! serving simulator itself. Before a placed run, each placed model is profiled on a
//! calibration subset of calls drawn from its own class of `[[workload.calls]]` or from the
//! question generator (never the run's calls: its own streams), by a sweep of resident
//! sessions of doubling size on one replica of its group (no load, every call at t = 0; each a
//! run of this family's server, with the group's scheduler, KV cache and step cost); the
//! regression
//! `T = b0 + b1 P O_mean + b2 O_max` fitted to the sweep (`serving::session_regression`)
//! then predicts the session time of all the model's calls from the subset's mean and longest
//! output. Those predictions are `placement.predicted_session_s` for the run, per seed: what the
//! ILP and LPT read.
//!
//! The subset is drawn as the mosaic family draws its calibration questions' slots: `calls`
//! draws of a model with probability proportional to its class's `n_requests` (the run's
//! skill mix), each draw a prompt and an output from that class's lengths (stream
//! "calibration"), then every model topped up to `min_calls_per_model`; each sweep session
//! resamples its model's subset with replacement (stream "calibration-sweep"). With
//! `[workload.questions]` the subset comes from the question generator instead, draw for draw
//! the mosaic family's: `calls` (default the benchmark's calibration questions x 3) slots, each
//! an expert drawn by Table 3's slots, a vote-agreement bucket by its share, the benchmark's
//! prompt and the expert's output times the bucket's length factor; each expert is then
//! predicted at its slots.
//!
//! A pass reads the recruited groups, the subset's draws and the seed, never the placement
//! policy or the gate: the cells of a sweep over those (MOSAIC's four placements x two gates)
//! run the same pass. Each pass is kept by a key written from everything it reads (`pass_key`),
//! so that the other cells of the process reuse it (`PASSES`).

use super::config::{LengthSpec, ServingScenario};
use super::questions::QuestionSpec;
use super::{ScenarioPolicies, run_policies};
use crate::arrivals::{ArrivalSpec, Trace, TraceRow};
use crate::distributions::Categorical;
use crate::policies::Policies;
use crate::records::DiscardRecords;
use crate::rng::{SimRng, stream};
use crate::serving::questions::draw_length;
use crate::serving::session_regression::{SessionRegression, SweepPoint, fit_regression};
use crate::validate::{FieldError, field_error};
use rand::RngExt;
use serde::{Deserialize, Serialize};
use serde_json::json;
use crate::memo::{ExactKey, Memo};
use std::sync::Arc;

/// `[placement.calibration]` as written.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalibrationTable {
    /// Calibration calls drawn over the models in proportion to their classes' `n_requests`
    /// (MOSAIC's calibration questions x 3: 300 for GPQA's 100). With `[workload.questions]`
    /// the default is the benchmark's calibration questions x 3, each call drawn over the
    /// experts by their slots; without, it must be given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls: Option<u32>,
    /// Every placed model is profiled on at least this many calls.
    #[serde(default = "eight")]
    pub min_calls_per_model: u32,
    /// The sweep's sessions have `sweep_min_calls`, twice that, ... up to `sweep_max_calls`.
    #[serde(default = "eight")]
    pub sweep_min_calls: u32,
    #[serde(default = "default_sweep_max")]
    pub sweep_max_calls: u32,
}

fn eight() -> u32 {
    8
}

fn default_sweep_max() -> u32 {
    2048
}

impl CalibrationTable {
    /// Checks the counts: each at least 1, the sweep's smallest session no larger than its
    /// largest; `calls` defaults to `default_calls` (a question workload's calibration
    /// questions x 3) and is required where there is none.
    pub fn validate(&self, default_calls: Option<u32>) -> Result<CalibrationTable, FieldError> {
        let calls = self.calls.or(default_calls).ok_or_else(|| {
            field_error(
                "placement.calibration.calls",
                "missing: give the calibration calls to draw over [[workload.calls]]",
            )
        })?;
        for (key, value) in [
            ("calls", calls),
            ("min_calls_per_model", self.min_calls_per_model),
            ("sweep_min_calls", self.sweep_min_calls),
        ] {
            if value == 0 {
                return Err(field_error(
                    &format!("placement.calibration.{key}"),
                    "must be at least 1, got 0",
                ));
            }
        }
        if self.sweep_min_calls > self.sweep_max_calls {
            return Err(field_error(
                "placement.calibration.sweep_min_calls",
                format!(
                    "must not exceed sweep_max_calls = {}, got {}",
                    self.sweep_max_calls, self.sweep_min_calls
                ),
            ));
        }
        Ok(CalibrationTable {
            calls: Some(calls),
            ..self.clone()
        })
    }

    /// The calibration calls to draw (validated: set).
    pub fn calls(&self) -> u32 {
        self.calls.expect("validated: calls resolved")
    }
}

/// One drawn calibration call.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Call {
    prompt_tokens: u32,
    output_tokens: u32,
}

/// `scenario` (placed, not yet planned) with each group's predicted session time computed by
/// the calibration pass of seed `seed`, and what the pass measured (`details.placement.
/// calibration`: per model its subset's size, mean and longest output, the sweep, the fitted
/// coefficients and the prediction). A scenario without `[placement.calibration]` is returned
/// as it is; `Err` names the model whose calibration session failed and why. A pass another
/// cell of the process already ran with the same inputs is reused (`PASSES`), unless
/// `policies` has no `memo_name`.
pub fn calibrated(
    scenario: &ServingScenario,
    seed: u64,
    policies: &dyn Policies,
) -> Result<ServingScenario, String> {
    let mut out = scenario.clone();
    let Some(spec) = &scenario.placement else {
        return Ok(out);
    };
    let Some(table) = &spec.calibration else {
        return Ok(out);
    };
    let pass = match pass_key(scenario, table, seed, policies) {
        Some(key) => PASSES
            .get_or_compute(&key, || pass(scenario, table, seed, policies))
            .as_ref()
            .clone()?,
        None => pass(scenario, table, seed, policies)?,
    };
    let spec = out.placement.as_mut().expect("placed");
    spec.predicted_session_s = pass.predicted;
    spec.calibration_detail = Some(pass.detail);
    Ok(out)
}

/// What a calibration pass computes: each group's predicted session time (0 for a group not
/// placed) and the pass's record (`details.placement.calibration`).
#[derive(Clone, Debug, PartialEq)]
struct Pass {
    predicted: Vec<f64>,
    detail: serde_json::Value,
}

/// The passes by `pass_key`; a second caller of a pass under way waits for it. It keeps the 64
/// most recently used: a pass's record is a few kB and its key about the size of its groups'
/// scenarios' text (tens of kB), so a few MB at most.
static PASSES: Memo<ExactKey, Result<Pass, String>> = Memo::new(64);

/// Everything `pass` reads: the policies' registry (`None` when it has no `memo_name`: never
/// reused), the seed, the table, the subset's inputs (the question generator's experts, buckets
/// and prompt lengths, or the call classes) and each group's resident session scenario
/// (`session_template`, which has no placement, questions, gate or sessions). The composite
/// parts are their `Debug` text, derived through every type they hold (each field, each float
/// exactly).
fn pass_key(
    scenario: &ServingScenario,
    table: &CalibrationTable,
    seed: u64,
    policies: &dyn Policies,
) -> Option<ExactKey> {
    let registry = policies.memo_name()?;
    let CalibrationTable {
        calls,
        min_calls_per_model,
        sweep_min_calls,
        sweep_max_calls,
    } = table;
    let mut key = ExactKey::new();
    key.str(registry).u64(seed).debug(calls);
    for n in [min_calls_per_model, sweep_min_calls, sweep_max_calls] {
        key.u64(u64::from(*n));
    }
    match &scenario.questions {
        Some(q) => key.debug(&q.experts).debug(&q.buckets).debug(&q.prompt),
        None => key.debug(&scenario.calls),
    };
    key.usize(1 + scenario.other_groups.len());
    for g in 0..1 + scenario.other_groups.len() {
        key.debug(&session_template(scenario, g));
    }
    Some(key)
}

/// The calibration pass itself: the subset, each placed group's sweep of resident sessions,
/// the fit and its prediction.
fn pass(
    scenario: &ServingScenario,
    table: &CalibrationTable,
    seed: u64,
    policies: &dyn Policies,
) -> Result<Pass, String> {
    let (groups, subset) = match &scenario.questions {
        Some(questions) => question_subset(questions, table, seed),
        None => class_subset(scenario, table, seed),
    };
    let mut sweep_rng = stream(seed, "calibration-sweep");
    let mut predicted = vec![0.0; 1 + scenario.other_groups.len()];
    let mut detail = Vec::with_capacity(groups.len());
    for (&(g, prompts), calls) in groups.iter().zip(&subset) {
        let name = scenario.group(g).model.name().to_string();
        let template = session_template(scenario, g);
        let mut sweep = Vec::new();
        let mut size = table.sweep_min_calls;
        while size <= table.sweep_max_calls {
            let sample: Vec<Call> = (0..size)
                .map(|_| calls[sweep_rng.random_range(0..calls.len())])
                .collect();
            let session_s = session_s(&template, &sample, seed, policies)
                .map_err(|reason| format!("calibration of {name}: {reason}"))?;
            let tokens: u64 = sample.iter().map(|c| u64::from(c.output_tokens)).sum();
            sweep.push(SweepPoint {
                prompts: size,
                mean_output: tokens as f64 / f64::from(size),
                max_output: sample.iter().map(|c| c.output_tokens).max().unwrap_or(0),
                session_s,
                tokens_per_s: tokens as f64 / session_s,
            });
            match size.checked_mul(2) {
                Some(next) => size = next,
                None => break,
            }
        }
        let tokens: u64 = calls.iter().map(|c| u64::from(c.output_tokens)).sum();
        let regression = SessionRegression {
            coefficients: fit_regression(&sweep),
            mean_output: tokens as f64 / calls.len() as f64,
            max_output: calls.iter().map(|c| c.output_tokens).max().unwrap_or(0),
            calibration_prompts: calls.len() as u32,
            sweep,
        };
        let seconds = regression.predict_s(prompts);
        detail.push(json!({
            "model": name,
            "calls": regression.calibration_prompts,
            "mean_output": regression.mean_output,
            "max_output": regression.max_output,
            "coefficients": regression.coefficients,
            "sweep": regression.sweep,
            "predicted_session_s": seconds,
        }));
        predicted[g] = seconds;
    }
    Ok(Pass {
        predicted,
        detail: json!(detail),
    })
}

/// The placed models, each `(its group, the calls the run gives it)`, and their calibration
/// subsets, for a file of `[[workload.calls]]`: `calls` draws of a group with probability
/// proportional to its class's `n_requests`, each a prompt and an output from the class's
/// lengths, then every group topped up to `min_calls_per_model` (stream "calibration").
fn class_subset(
    scenario: &ServingScenario,
    table: &CalibrationTable,
    seed: u64,
) -> (Vec<(usize, u32)>, Vec<Vec<Call>>) {
    // Each group's class of calls (with [placement], one per group, at its one replica).
    let classes: Vec<_> = (0..1 + scenario.other_groups.len())
        .map(|g| {
            scenario
                .calls
                .iter()
                .find(|c| c.replicas.start == g)
                .expect("validated: every placed group has its class")
        })
        .collect();
    let draw = |g: usize, rng: &mut SimRng, subset: &mut Vec<Vec<Call>>| {
        let length = |spec: &LengthSpec, rng: &mut SimRng| match spec {
            LengthSpec::Distribution(d) => d.sample(rng),
            LengthSpec::Trace => unreachable!("validated: addressed calls draw their lengths"),
        };
        let prompt_tokens = length(&classes[g].prompt_tokens, rng);
        let output_tokens = length(&classes[g].output_tokens, rng);
        subset[g].push(Call {
            prompt_tokens,
            output_tokens,
        });
    };
    let mut rng = stream(seed, "calibration");
    let shares: Vec<f64> = classes.iter().map(|c| c.n_requests as f64).collect();
    let models = Categorical::new(&shares).expect("validated: the classes have calls");
    let mut subset: Vec<Vec<Call>> = vec![Vec::new(); classes.len()];
    for _ in 0..table.calls() {
        let g = models.sample(&mut rng);
        draw(g, &mut rng, &mut subset);
    }
    for g in 0..classes.len() {
        while subset[g].len() < table.min_calls_per_model as usize {
            draw(g, &mut rng, &mut subset);
        }
    }
    let groups = classes
        .iter()
        .enumerate()
        .map(|(g, c)| (g, c.n_requests as u32))
        .collect();
    (groups, subset)
}

/// The same for a question workload, as the mosaic family draws MOSAIC's calibration
/// questions: `calls` slots (the benchmark's calibration questions x 3), each an expert drawn
/// by Table 3's slots, a vote-agreement bucket drawn by its share, a prompt from the
/// benchmark's prompts and an output from the expert's lengths times the bucket's length
/// factor; then every expert topped up to `min_calls_per_model` (stream "calibration"). The
/// placed models are the experts in the file's order, each predicted at its slots.
fn question_subset(
    questions: &QuestionSpec,
    table: &CalibrationTable,
    seed: u64,
) -> (Vec<(usize, u32)>, Vec<Vec<Call>>) {
    let slots: Vec<f64> = questions
        .experts
        .iter()
        .map(|e| f64::from(e.slots))
        .collect();
    let experts = Categorical::new(&slots).expect("validated: the slots add up to 3 x questions");
    let buckets = Categorical::new(&questions.buckets.each_ref().map(|b| b.share_pct))
        .expect("validated: the bucket shares add up to 100");
    let draw = |m: usize, rng: &mut SimRng, subset: &mut Vec<Vec<Call>>| {
        let bucket = buckets.sample(rng);
        let prompt_tokens = draw_length(&questions.prompt, 1.0, rng);
        let factor = questions.buckets[bucket].length_factor;
        let output_tokens = draw_length(&questions.experts[m].output, factor, rng);
        subset[m].push(Call {
            prompt_tokens,
            output_tokens,
        });
    };
    let mut rng = stream(seed, "calibration");
    let mut subset: Vec<Vec<Call>> = vec![Vec::new(); questions.experts.len()];
    for _ in 0..table.calls() {
        let m = experts.sample(&mut rng);
        draw(m, &mut rng, &mut subset);
    }
    for (m, e) in questions.experts.iter().enumerate() {
        while e.slots > 0 && subset[m].len() < table.min_calls_per_model as usize {
            draw(m, &mut rng, &mut subset);
        }
    }
    // The experts the benchmark recruits (an expert without slots has no session to predict).
    questions
        .experts
        .iter()
        .zip(subset)
        .filter(|(e, _)| e.slots > 0)
        .map(|(e, calls)| ((e.replicas.start, e.slots), calls))
        .unzip()
}

/// Group `g` alone as a resident calibration session runs it: one replica, its model already
/// loaded, no placement, sessions, questions, workflow, experiment, adapters or horizon, no
/// record files; its calls come from a trace (`session_s` sets it).
fn session_template(scenario: &ServingScenario, g: usize) -> ServingScenario {
    let mut one = scenario.group(g);
    one.placement = None;
    one.sessions = None;
    one.questions = None;
    one.workflow = None;
    one.experiment = None;
    one.adapters = None;
    one.horizon = None;
    one.per_request_csv = false;
    one.trace_events = false;
    one.timeline = false;
    one.replica.count = 1;
    one.replica.load = None;
    one.prompt_tokens = LengthSpec::Trace;
    one.output_tokens = LengthSpec::Trace;
    one
}

/// The generation time of `calls` as one resident session (`template`, `session_template`'s):
/// every call submitted at t = 0 in order (an offline trace of them), served by this family's
/// server with the scenario's policies; the last finish.
fn session_s(
    template: &ServingScenario,
    calls: &[Call],
    seed: u64,
    policies: &dyn Policies,
) -> Result<f64, String> {
    let mut one = template.clone();
    one.n_requests = calls.len();
    let rows = calls
        .iter()
        .map(|c| TraceRow {
            timestamp_s: 0.0,
            prompt_tokens: Some(c.prompt_tokens),
            output_tokens: Some(c.output_tokens),
        })
        .collect();
    let trace = Trace::of_rows("calibration session", rows).ok_or("an empty session")?;
    one.arrival = ArrivalSpec::Trace {
        trace: Arc::new(trace),
        time_scale: 1.0,
    };
    let mut p = ScenarioPolicies::of(&one, policies);
    let run = run_policies(&one, seed, &mut p, &mut DiscardRecords, None)?;
    match run.scalar("makespan_s") {
        Some(s) if s.is_finite() && s > 0.0 => Ok(s),
        _ => Err(run.details["failed"]
            .as_str()
            .unwrap_or("the session reported no makespan")
            .to_string()),
    }
}

#[cfg(test)]
mod tests {
    //! The calibration pass against numbers worked out from independent runs: each sweep point
    //! is exactly a resident replica's offline run of its calls, two points give the line the
    //! regression must pass through, the plan reads the prediction, and the session rows of
    //! the placed run follow from its workers' record; a bad `[placement.calibration]` is
    //! refused naming its field (its file and line: `expertsim-scenario`'s loader checks).

    use super::super::tests::{Fifo, Linear, Turns, resident_makespan_s, scenario};
    use super::super::{Serving, TABLE};
    use crate::family::Family;
    use crate::policies::Policies;
    use crate::policies::placement::{
        Placement, PlacementError, PlacementPlan, PlacementProblem, Session,
    };
    use crate::recorder::ServingSummary;
    use crate::records::DiscardRecords;
    use crate::serving::questions::draw_length;

    /// Each model on its own worker (the plan round robin makes of two models on two workers).
    struct OneEach;
    impl Placement for OneEach {
        fn name(&self) -> &'static str {
            "one_each"
        }
        fn respects_limits(&self) -> bool {
            false
        }
        fn place(&mut self, p: &PlacementProblem) -> Result<PlacementPlan, PlacementError> {
            Ok(PlacementPlan {
                workers: p
                    .models
                    .iter()
                    .enumerate()
                    .map(|(model, m)| {
                        vec![Session {
                            model,
                            prompts: m.prompts,
                        }]
                    })
                    .collect(),
                barrier_per_round: false,
                solver: None,
            })
        }
    }

    /// The test's policies (the `strategies` crate is out of this crate's reach): FCFS, replicas
    /// in turn, the linear mapping, `OneEach`.
    struct TestPolicies;
    impl Policies for TestPolicies {
        fn batch_selector(
            &self,
            _: &crate::policies::batch::BatchSelectorConfig,
        ) -> Box<dyn crate::policies::batch::BatchSelector> {
            unreachable!("continuous replicas only")
        }
        fn expert_mapper(
            &self,
            _: &crate::policies::mapping::MapperConfig,
        ) -> Box<dyn crate::policies::mapping::ExpertMapper> {
            Box::new(Linear)
        }
        fn placement(&self, _: &crate::policies::placement::PlacementConfig) -> Box<dyn Placement> {
            Box::new(OneEach)
        }
        fn aggregation_gate(
            &self,
            _: &crate::policies::gate::GateConfig,
        ) -> Box<dyn crate::policies::gate::AggregationGate> {
            unreachable!("no questions")
        }
        fn queue_policy(
            &self,
            _: &crate::serving::QueuePolicyConfig,
        ) -> Box<dyn crate::serving::QueuePolicy> {
            Box::new(Fifo::default())
        }
        fn router(&self, _: &crate::serving::RouterConfig) -> Box<dyn crate::serving::Router> {
            Box::new(Turns::default())
        }
        fn adapter_memory(
            &self,
            _: &crate::policies::memory::MemoryConfig,
        ) -> Box<dyn crate::policies::memory::AdapterMemory> {
            unreachable!("no adapters")
        }
    }

    /// `TestPolicies` under a registry name: the passes it runs are kept and reused.
    struct NamedPolicies;
    impl Policies for NamedPolicies {
        fn batch_selector(
            &self,
            c: &crate::policies::batch::BatchSelectorConfig,
        ) -> Box<dyn crate::policies::batch::BatchSelector> {
            TestPolicies.batch_selector(c)
        }
        fn expert_mapper(
            &self,
            c: &crate::policies::mapping::MapperConfig,
        ) -> Box<dyn crate::policies::mapping::ExpertMapper> {
            TestPolicies.expert_mapper(c)
        }
        fn placement(&self, c: &crate::policies::placement::PlacementConfig) -> Box<dyn Placement> {
            TestPolicies.placement(c)
        }
        fn aggregation_gate(
            &self,
            c: &crate::policies::gate::GateConfig,
        ) -> Box<dyn crate::policies::gate::AggregationGate> {
            TestPolicies.aggregation_gate(c)
        }
        fn queue_policy(
            &self,
            c: &crate::serving::QueuePolicyConfig,
        ) -> Box<dyn crate::serving::QueuePolicy> {
            TestPolicies.queue_policy(c)
        }
        fn router(&self, c: &crate::serving::RouterConfig) -> Box<dyn crate::serving::Router> {
            TestPolicies.router(c)
        }
        fn adapter_memory(
            &self,
            c: &crate::policies::memory::MemoryConfig,
        ) -> Box<dyn crate::policies::memory::AdapterMemory> {
            TestPolicies.adapter_memory(c)
        }
        fn memo_name(&self) -> Option<&'static str> {
            Some("session_calibration::tests::NamedPolicies")
        }
    }

    /// Llama-2-7B (load 10 s, 16 calls of 300 + 40 tokens) and Qwen2.5-7B (load 5 s, 3 calls
    /// of 200 + 60) on H100 workers, calibrated by sessions of 4 and 8 calls.
    fn calibrated_text() -> String {
        super::super::fixtures::calibrated()
    }

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-6 * b.abs().max(1.0), "{a} != {b}");
    }

    #[test]
    fn the_sweep_is_resident_sessions_and_the_fit_predicts_through_them() {
        let s = scenario(&calibrated_text()).unwrap();
        let run = Serving::run(&s, 0, &TestPolicies, &mut DiscardRecords)
            .unwrap()
            .output;
        let cal = &run.details["placement"]["calibration"];
        let models = &run.details["placement"]["models"];
        for (g, model, calls, prompt, output) in [
            (0, "llama-2-7b", 16.0, 300, 40),
            (1, "qwen2.5-7b-instruct", 3.0, 200, 60),
        ] {
            let c = &cal[g];
            assert_eq!(c["model"], s.group(g).model.name());
            // 20 draws over 16 : 3, each model topped up to 8.
            assert!(c["calls"].as_u64().unwrap() >= 8, "{c}");
            assert_eq!(c["mean_output"].as_f64(), Some(f64::from(output)));
            assert_eq!(c["max_output"].as_u64(), Some(u64::from(output)));
            // Each sweep point is a resident replica's offline run of its calls.
            let t4 = resident_makespan_s(model, 4, prompt, output);
            let t8 = resident_makespan_s(model, 8, prompt, output);
            let sweep = c["sweep"].as_array().unwrap();
            assert_eq!(sweep.len(), 2);
            close(sweep[0]["session_s"].as_f64().unwrap(), t4);
            close(sweep[1]["session_s"].as_f64().unwrap(), t8);
            assert_eq!(sweep[1]["prompts"], 8);
            // Equal lengths: O_max cannot be told from the intercept, b2 = 0, and the line
            // through the two points gives P calls: t4 + (P - 4) / 4 x (t8 - t4).
            assert_eq!(c["coefficients"][2].as_f64(), Some(0.0));
            let predicted = t4 + (calls - 4.0) / 4.0 * (t8 - t4);
            close(c["predicted_session_s"].as_f64().unwrap(), predicted);
            // The plan's problem reads it.
            close(
                models[g]["predicted_session_s"].as_f64().unwrap(),
                predicted,
            );
        }
        assert!(run.details["placement"]["solver"].is_null());
    }

    #[test]
    fn the_session_rows_follow_the_workers_record() {
        let s = scenario(&calibrated_text()).unwrap();
        let run = Serving::run(&s, 0, &TestPolicies, &mut DiscardRecords)
            .unwrap()
            .output;
        let sessions = &run.details["sessions"];
        let walls: Vec<f64> = sessions["worker_walls_s"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_f64().unwrap())
            .collect();
        let (slow, fast) = (walls[0].max(walls[1]), walls[0].min(walls[1]));
        let row = |name: &str| run.scalar(name).unwrap();
        close(row("gpu_idle_pct"), sessions["idle_pct"].as_f64().unwrap());
        // Two workers, one session each: the faster idles until the slower is done.
        close(row("gpu_idle_pct"), 100.0 * (slow - fast) / (2.0 * slow));
        close(row("fastest_worker_s"), fast);
        close(row("worker_wall_ratio"), slow / fast);
        close(row("worker_wall_rank2_s"), fast);
        assert_eq!(row("worker_wall_rank3_s"), 0.0);
        assert_eq!(row("model_loads"), 2.0);
        close(row("load_time_s"), 15.0);
        close(
            row("expert_tokens_per_s"),
            f64::from(16 * 40 + 3 * 60) / slow,
        );
        // Each worker's predicted time is its load plus its model's predicted session.
        let cal = &run.details["placement"]["calibration"];
        let predicted = (10.0 + cal[0]["predicted_session_s"].as_f64().unwrap())
            .max(5.0 + cal[1]["predicted_session_s"].as_f64().unwrap());
        close(row("predicted_makespan_s"), predicted);
        close(
            row("prediction_error_pct"),
            100.0 * (slow - predicted) / predicted,
        );
        assert_eq!(
            (row("ilp_status"), row("ilp_gap"), row("ilp_nodes")),
            (0.0, 0.0, 0.0)
        );
        // Without [placement] every session row is null.
        let plain = ServingSummary::default();
        for name in [
            "gpu_idle_pct",
            "fastest_worker_s",
            "worker_wall_ratio",
            "worker_wall_rank2_s",
            "worker_wall_rank3_s",
            "model_loads",
            "load_time_s",
            "expert_tokens_per_s",
            "predicted_makespan_s",
            "prediction_error_pct",
            "ilp_status",
            "ilp_gap",
            "ilp_nodes",
        ] {
            let m = TABLE.iter().find(|m| m.name == name).expect(name);
            assert!((m.value)(&plain).is_nan(), "{name}");
        }
    }

    /// GPQA's questions on two experts, each a placed group: outputs of one length before the
    /// bucket's factor, so every calibration output is that length times one bucket's factor.
    fn questions_calibrated() -> String {
        use super::super::fixtures::{TWO_LOADING_MODELS, gpqa, offline_on_two_workers};
        let length = |mean: f64| format!("{{ mean = {mean:.1}, sigma = 0.0, max = 100000 }}");
        format!(
            "{TWO_LOADING_MODELS}{}{}[placement.calibration]\nsweep_max_calls = 16\n",
            gpqa("", &length(1000.0), &length(20.0)),
            offline_on_two_workers("round_robin")
        )
    }

    #[test]
    fn placed_questions_calibrate_on_calls_drawn_from_the_question_generator() {
        let s = scenario(&questions_calibrated()).unwrap();
        let questions = s.questions.as_ref().unwrap();
        let out = super::calibrated(&s, 0, &TestPolicies).unwrap();
        let spec = out.placement.as_ref().unwrap();
        let detail = spec.calibration_detail.as_ref().unwrap();
        // GPQA's 100 calibration questions x 3 calls, drawn over the experts by their slots
        // (300 : 294, so neither needs the top-up to 8).
        let calls: Vec<u64> = (0..2)
            .map(|e| detail[e]["calls"].as_u64().unwrap())
            .collect();
        assert_eq!(calls.iter().sum::<u64>(), 300, "{detail}");
        assert!(calls.iter().all(|&n| n > 100), "{calls:?}");
        // Each output is the expert's length times a drawn bucket's factor: the longest is the
        // 1:1:1 bucket's, the mean lies strictly between the shortest and the longest (a mix of
        // buckets, not the expert's length alone).
        let factors: Vec<f64> = questions.buckets.iter().map(|b| b.length_factor).collect();
        let (low, high) = factors
            .iter()
            .fold((f64::MAX, 0.0_f64), |(l, h), &f| (l.min(f), h.max(f)));
        assert!(high > low, "{factors:?}");
        let mut rng = crate::rng::stream(0, "unused");
        for (e, mean) in [(0, 1000.0), (1, 20.0)] {
            let dist = crate::serving::questions::LengthDist {
                mean,
                sigma: 0.0,
                max: 100_000,
            };
            let mut at = |f: f64| f64::from(draw_length(&dist, f, &mut rng));
            assert_eq!(detail[e]["max_output"].as_f64(), Some(at(high)), "{e}");
            let mean_output = detail[e]["mean_output"].as_f64().unwrap();
            assert!(
                mean_output > at(low) && mean_output < at(high),
                "{e}: {mean_output}"
            );
            // The prediction is the fit evaluated at the expert's slots, and the plan reads it.
            let c: Vec<f64> = (0..3)
                .map(|i| detail[e]["coefficients"][i].as_f64().unwrap())
                .collect();
            let slots = [300.0, 294.0][e];
            let predicted = detail[e]["predicted_session_s"].as_f64().unwrap();
            let line = c[0] + c[1] * slots * mean_output + c[2] * at(high);
            if line > 0.0 {
                close(predicted, line);
            }
            close(spec.predicted_session_s[e], predicted);
            assert!(predicted > 0.0);
        }
        // Another seed draws another subset.
        let other = super::calibrated(&s, 1, &TestPolicies).unwrap();
        assert_ne!(
            other
                .placement
                .as_ref()
                .unwrap()
                .calibration_detail
                .as_ref(),
            Some(detail)
        );
    }

    #[test]
    fn a_kept_pass_is_the_pass_run_afresh() {
        let s = scenario(&questions_calibrated()).unwrap();
        let table = s.placement.as_ref().unwrap().calibration.clone().unwrap();
        // Seed 7: no other test keeps a pass of this scenario.
        let key = super::pass_key(&s, &table, 7, &NamedPolicies).unwrap();
        assert!(super::PASSES.get(&key).is_none());
        let fresh = super::calibrated(&s, 7, &TestPolicies).unwrap();
        assert!(super::PASSES.get(&key).is_none(), "unnamed: not kept");
        let kept = super::calibrated(&s, 7, &NamedPolicies).unwrap();
        assert!(super::PASSES.get(&key).is_some(), "named: kept");
        let reused = super::calibrated(&s, 7, &NamedPolicies).unwrap();
        for out in [&kept, &reused] {
            let (a, b) = (fresh.placement.as_ref(), out.placement.as_ref());
            assert_eq!(a.unwrap().calibration_detail, b.unwrap().calibration_detail);
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&a.unwrap().predicted_session_s),
                bits(&b.unwrap().predicted_session_s)
            );
        }
    }

    #[test]
    fn the_pass_key_changes_with_what_the_pass_reads_and_with_nothing_else() {
        use crate::policies::gate::GateConfig;
        use crate::policies::placement::PlacementConfig;
        let s = scenario(&questions_calibrated()).unwrap();
        let table = s.placement.as_ref().unwrap().calibration.clone().unwrap();
        let key = |s: &super::ServingScenario, table: &super::CalibrationTable, seed: u64| {
            super::pass_key(s, table, seed, &NamedPolicies).unwrap()
        };
        let base = key(&s, &table, 0);
        // Policies without a registry name are never reused.
        assert_eq!(super::pass_key(&s, &table, 0, &TestPolicies), None);
        // The placement policy and the gate: not read, so the same pass.
        let mut other = s.clone();
        other.placement.as_mut().unwrap().policy = PlacementConfig::DataParallel;
        other.questions.as_mut().unwrap().gate = GateConfig::Threshold { tau: 0.6667 };
        assert_eq!(key(&other, &table, 0), base);
        // The seed, the table, an expert's lengths, a group's replica: another pass.
        assert_ne!(key(&s, &table, 1), base);
        let mut wider = table.clone();
        wider.sweep_max_calls *= 2;
        assert_ne!(key(&s, &wider, 0), base);
        let mut longer = s.clone();
        longer.questions.as_mut().unwrap().experts[1].output.mean += 1.0;
        assert_ne!(key(&longer, &table, 0), base);
        let mut narrower = s.clone();
        narrower.other_groups[0].replica.max_num_seqs /= 2;
        assert_ne!(key(&narrower, &table, 0), base);
    }

    #[test]
    fn a_calibration_run_is_the_same_run_to_run() {
        let s = scenario(&calibrated_text()).unwrap();
        let once = Serving::run(&s, 3, &TestPolicies, &mut DiscardRecords).unwrap();
        let again = Serving::run(&s, 3, &TestPolicies, &mut DiscardRecords).unwrap();
        assert_eq!(once.output.details, again.output.details);
    }

    #[test]
    fn a_bad_calibration_is_refused_naming_its_field() {
        let refused = |from: &str, to: &str, field: &str| {
            let e = scenario(&calibrated_text().replacen(from, to, 1)).expect_err(to);
            assert_eq!(e.path, field, "{to}: {e:?}");
        };
        refused("calls = 20", "calls = 0", "placement.calibration.calls");
        // Without a question workload the calls are not defaulted.
        refused("calls = 20\n", "", "placement.calibration.calls");
        refused(
            "sweep_min_calls = 4",
            "sweep_min_calls = 0",
            "placement.calibration.sweep_min_calls",
        );
        refused(
            "sweep_min_calls = 4",
            "sweep_min_calls = 16",
            "placement.calibration.sweep_min_calls",
        );
        refused(
            "calls = 20",
            "calls = 20\nmin_calls_per_model = 0",
            "placement.calibration.min_calls_per_model",
        );
        refused(
            "policy = { kind = \"ilp\" }",
            "policy = { kind = \"ilp\" }\npredicted_session_s = { \"llama-2-7b\" = 1.0 }",
            "placement.predicted_session_s",
        );
    }
}
