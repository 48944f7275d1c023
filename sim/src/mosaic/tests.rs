//! Unit tests of the MOSAIC family that need a whole scenario: workload synthesis against the
//! paper's Table 3, validation errors, the expert and aggregation stages, determinism.

use super::*;
use crate::policies::gate::GATE_TOLERANCE;
use crate::policies::placement::Session;
use crate::serving::QueuedRequest;
use crate::serving::questions as presets;
use crate::validate::FieldError;
use std::collections::VecDeque;
use std::path::Path;

/// First come, first served per unit (as the runner's `strategies::queue::Fcfs`: submission
/// time, then id; a request refused admission keeps its place at the head).
#[derive(Default)]
pub(super) struct Fifo(Vec<VecDeque<QueuedRequest>>);

impl QueuePolicy for Fifo {
    fn name(&self) -> &'static str {
        "fcfs"
    }
    fn reset(&mut self, n: usize) {
        self.0 = vec![VecDeque::new(); n];
    }
    fn push(&mut self, unit: usize, r: QueuedRequest) {
        let at = self.0[unit].partition_point(|q| (q.submitted, q.id) < (r.submitted, r.id));
        self.0[unit].insert(at, r);
    }
    fn pop(&mut self, unit: usize, _: u64) -> Option<QueuedRequest> {
        self.0[unit].pop_front()
    }
    fn len(&self, unit: usize) -> usize {
        self.0[unit].len()
    }
}

fn config(text: &str) -> MosaicConfig {
    toml::from_str(text).unwrap()
}

fn scenario(text: &str) -> MosaicScenario {
    config(text)
        .validate(Path::new("."), &mut Default::default())
        .unwrap()
}

fn invalid(text: &str) -> FieldError {
    config(text)
        .validate(Path::new("."), &mut Default::default())
        .unwrap_err()
}

const GPQA: &str = "[pool]\npreset = \"hybrid\"\n[dataset]\npreset = \"gpqa\"\n[calibration]\nsweep_max_prompts = 64\n";

/// Model m to worker (first-seen position) mod N: the round-robin baseline, written out here
/// because sim cannot depend on strategies.
struct TestRoundRobin;
impl Placement for TestRoundRobin {
    fn name(&self) -> &'static str {
        "round_robin"
    }
    fn respects_limits(&self) -> bool {
        false
    }
    fn place(&mut self, problem: &PlacementProblem) -> Result<PlacementPlan, PlacementError> {
        let mut workers = vec![Vec::new(); problem.n_workers as usize];
        for (i, m) in problem.models.iter().enumerate() {
            workers[i % problem.n_workers as usize].push(Session {
                model: i,
                prompts: m.prompts,
            });
        }
        Ok(PlacementPlan {
            workers,
            barrier_per_round: false,
            solver: None,
        })
    }
}

/// Every model on every worker, an even split, barriers.
struct TestDataParallel;
impl Placement for TestDataParallel {
    fn name(&self) -> &'static str {
        "data_parallel"
    }
    fn respects_limits(&self) -> bool {
        false
    }
    fn place(&mut self, problem: &PlacementProblem) -> Result<PlacementPlan, PlacementError> {
        Ok(PlacementPlan::data_parallel(problem))
    }
}

struct Infeasible;
impl Placement for Infeasible {
    fn name(&self) -> &'static str {
        "infeasible"
    }
    fn respects_limits(&self) -> bool {
        true
    }
    fn place(&mut self, problem: &PlacementProblem) -> Result<PlacementPlan, PlacementError> {
        PlacementProblem {
            max_models_per_worker: 0,
            ..problem.clone()
        }
        .check_feasible()?;
        unreachable!("K = 0 is infeasible")
    }
}

struct Threshold(f64);
impl AggregationGate for Threshold {
    fn name(&self) -> &'static str {
        "threshold"
    }
    fn skip(&mut self, votes: &Votes) -> bool {
        votes.confidence() >= self.0 - GATE_TOLERANCE
    }
}

#[test]
fn synthesized_slots_and_buckets_match_the_paper_exactly() {
    for name in presets::DATASET_PRESETS {
        let s = scenario(&format!(
            "[pool]\npreset = \"hybrid\"\n[dataset]\npreset = \"{name}\"\n"
        ));
        let preset = presets::dataset(name).unwrap();
        for seed in [0, 1, 2] {
            let w = workload::Workload::synthesize(&s, seed);
            assert_eq!(w.questions.len() as u32, preset.questions);
            for (m, expert) in s.experts.iter().enumerate() {
                let want = preset
                    .slots
                    .iter()
                    .find(|(n, _)| *n == expert.name)
                    .unwrap()
                    .1;
                let got = w
                    .questions
                    .iter()
                    .flat_map(|q| q.experts)
                    .filter(|&e| e == m)
                    .count() as u32;
                assert_eq!(got, want, "{name} {}", expert.name);
                assert_eq!(w.prompts[m].len() as u32, want);
            }
            let unanimous = w.questions.iter().filter(|q| q.bucket == 0).count() as f64;
            let share = 100.0 * unanimous / f64::from(preset.questions);
            // Exact counts: the share is the paper's to the rounding of one question.
            assert!(
                (share - preset.skip_tau1_pct).abs() <= 50.0 / f64::from(preset.questions),
                "{name}: {share}"
            );
        }
    }
}

#[test]
fn disagreement_questions_get_longer_expert_outputs() {
    let s = scenario("[pool]\npreset = \"hybrid\"\n[dataset]\npreset = \"mmlu_pro\"\n");
    let w = workload::Workload::synthesize(&s, 0);
    let mean = |b: usize| {
        let qs: Vec<_> = w.questions.iter().filter(|q| q.bucket == b).collect();
        qs.iter()
            .map(|q| q.output_tokens.iter().map(|&t| f64::from(t)).sum::<f64>() / 3.0)
            .sum::<f64>()
            / qs.len() as f64
    };
    let ratio = mean(2) / mean(0);
    // Configured 2696 / 1064 = 2.53; sampling noise over 323 and 960 questions.
    assert!((2.0..3.1).contains(&ratio), "{ratio}");
}

#[test]
fn validation_names_the_field() {
    let e = invalid(
        "[pool]\npreset = \"hybrid\"\n[dataset]\npreset = \"mmlu_pro\"\n[placement]\nkind = \"ilp\"\nmax_models_per_worker = 1\n",
    );
    assert_eq!(e.path, "placement.max_models_per_worker");
    assert!(
        e.message.contains("infeasible") && e.message.contains("ceil(6/4) = 2"),
        "{}",
        e.message
    );
    let e = invalid(
        "[pool]\npreset = \"hybrid\"\n[dataset]\npreset = \"gpqa\"\nslots = { LlamaR1 = 594, Mistral = 0, Nobody = 1 }\n",
    );
    assert_eq!(e.path, "dataset.slots.Nobody");
    let e = invalid(
        "[pool]\npreset = \"hybrid\"\n[dataset]\npreset = \"gpqa\"\nslots = { LlamaR1 = 500 }\n",
    );
    assert_eq!(e.path, "dataset.slots");
    let e = invalid("[pool]\npreset = \"moe\"\n[dataset]\npreset = \"gpqa\"\n");
    assert_eq!(e.path, "pool.preset");
    let e = invalid(
        "[pool]\npreset = \"hybrid\"\n[dataset]\npreset = \"gpqa\"\n[gate]\nkind = \"threshold\"\ntau = 1.5\n",
    );
    assert_eq!(e.path, "gate.tau");
    let e = invalid(
        "[pool]\npreset = \"hybrid\"\n[dataset]\npreset = \"gpqa\"\n[serving]\ngpu = \"L4\"\n",
    );
    assert!(e.path.starts_with("pool["), "{e:?}");
    for (line, field) in [
        ("block_size = 0", "serving.block_size"),
        ("watermark = 1.0", "serving.watermark"),
        ("load_gbps = 0.0", "serving.load_gbps"),
    ] {
        let e = invalid(&format!(
            "[pool]\npreset = \"hybrid\"\n[dataset]\npreset = \"gpqa\"\n[serving]\n{line}\n"
        ));
        assert_eq!(e.path, field, "{e:?}");
    }
    let e = invalid("[dataset]\npreset = \"gpqa\"\n");
    assert_eq!(e.path, "experts");
    assert!(
        toml::from_str::<MosaicConfig>("[dataset]\npreset = \"gpqa\"\n[bogus]\nx = 1\n").is_err()
    );
}

#[test]
fn every_prompt_runs_exactly_once_and_timelines_are_contiguous() {
    let s = scenario(GPQA);
    for placement in [
        &mut TestRoundRobin as &mut dyn Placement,
        &mut TestDataParallel,
    ] {
        let out =
            try_simulate(&s, 0, placement, &mut Threshold(2.0), &mut Fifo::default()).unwrap();
        let sessions = out.details["sessions"].as_array().unwrap();
        let placed: u64 = sessions
            .iter()
            .map(|r| r["prompts"].as_u64().unwrap())
            .sum();
        assert_eq!(placed, 594);
        let makespan = out.scalar("expert_makespan_s").unwrap();
        for line in out.details["timelines"].as_array().unwrap() {
            let segs = line.as_array().unwrap();
            let mut t = 0.0;
            for seg in segs {
                assert!((seg["start_s"].as_f64().unwrap() - t).abs() < 1e-9);
                t = seg["end_s"].as_f64().unwrap();
            }
            assert!((t - makespan).abs() < 1e-9);
        }
        // The recorder's rows time the expert prompts within their sessions: each finishes
        // inside the expert stage (within the histogram's 0.1 %), its first token before its last.
        let ms = |name: &str| out.scalar(name).unwrap();
        assert!(ms("e2e_mean_ms") > 0.0);
        assert!(ms("e2e_p99_ms") <= makespan * 1e3 * 1.001);
        assert!(ms("ttft_mean_ms") <= ms("e2e_mean_ms"));
        assert!(ms("queueing_mean_ms") <= ms("ttft_mean_ms"));
        assert_eq!(out.scalar("skip_pct"), Some(0.0));
        assert_eq!(out.scalar("accuracy_change_pp"), Some(0.0));
    }
}

#[test]
fn the_gate_skips_only_what_it_should_and_shortens_aggregation() {
    let s = scenario(GPQA);
    let full = try_simulate(
        &s,
        1,
        &mut TestRoundRobin,
        &mut Threshold(2.0),
        &mut Fifo::default(),
    )
    .unwrap();
    let unanimous = try_simulate(
        &s,
        1,
        &mut TestRoundRobin,
        &mut Threshold(1.0),
        &mut Fifo::default(),
    )
    .unwrap();
    let aggressive = try_simulate(
        &s,
        1,
        &mut TestRoundRobin,
        &mut Threshold(2.0 / 3.0),
        &mut Fifo::default(),
    )
    .unwrap();
    let buckets = unanimous.details["buckets"].as_array().unwrap();
    assert_eq!(buckets[0]["skipped"], buckets[0]["questions"]);
    assert_eq!(buckets[1]["skipped"], 0);
    assert_eq!(buckets[2]["skipped"], 0);
    let skip = |o: &RunOutput| o.scalar("skip_pct").unwrap();
    assert!((skip(&unanimous) - 100.0 * 74.0 / 198.0).abs() < 1e-9);
    assert!((skip(&aggressive) - 100.0 * 173.0 / 198.0).abs() < 1e-9);
    let agg = |o: &RunOutput| o.scalar("aggregator_s").unwrap();
    assert!(agg(&aggressive) < agg(&unanimous) && agg(&unanimous) < agg(&full));
    // The expert stage does not depend on the gate.
    assert_eq!(
        full.scalar("expert_makespan_s"),
        aggressive.scalar("expert_makespan_s")
    );
}

#[test]
fn runs_are_deterministic_and_seeds_differ() {
    let s = scenario(GPQA);
    let a = simulate(
        &s,
        7,
        &mut TestRoundRobin,
        &mut Threshold(1.0),
        &mut Fifo::default(),
    );
    let b = simulate(
        &s,
        7,
        &mut TestRoundRobin,
        &mut Threshold(1.0),
        &mut Fifo::default(),
    );
    assert_eq!(
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&b).unwrap()
    );
    let c = simulate(
        &s,
        8,
        &mut TestRoundRobin,
        &mut Threshold(1.0),
        &mut Fifo::default(),
    );
    assert_ne!(a.scalar("expert_makespan_s"), c.scalar("expert_makespan_s"));
    assert_eq!(a.scalars.len(), METRICS.len());
    for (got, want) in a.scalars.iter().zip(METRICS) {
        assert_eq!(got.0, want.name);
    }
}

#[test]
fn a_failing_policy_is_an_error_not_a_panic() {
    let s = scenario(GPQA);
    let err = try_simulate(
        &s,
        0,
        &mut Infeasible,
        &mut Threshold(1.0),
        &mut Fifo::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("infeasible"), "{err}");
    let out = simulate(
        &s,
        0,
        &mut Infeasible,
        &mut Threshold(1.0),
        &mut Fifo::default(),
    );
    assert!(out.scalars.iter().all(|(_, v)| v.is_nan()));
    assert!(
        out.details["error"]
            .as_str()
            .unwrap()
            .contains("infeasible")
    );
}

#[test]
fn calibration_regression_predicts_held_out_sessions() {
    let s = scenario(
        "[pool]\npreset = \"hybrid\"\n[dataset]\npreset = \"mmlu_pro\"\n[calibration]\nsweep_max_prompts = 512\n",
    );
    let regressions = workload::calibrate(&s, 0, &mut Fifo::default());
    let w = workload::Workload::synthesize(&s, 0);
    for (m, r) in regressions.iter().enumerate() {
        let r = r.as_ref().unwrap();
        let actual = server::run_session(
            m,
            &s.experts[m].serving,
            &w.prompts[m],
            &mut SimulatedPricing::of(&s),
            &mut Fifo::default(),
        )
        .generate_s();
        let predicted = r.predict_s(s.dataset.slots[m]);
        let error = (predicted - actual).abs() / actual;
        // The regression extrapolates from <= 512-prompt sweeps to the full test session.
        assert!(
            error < 0.35,
            "{}: predicted {predicted}, simulated {actual}",
            s.experts[m].name
        );
    }
}

/// Every scenarios/mosaic/*.toml loads through the real loader in every cell of its sweep's
/// cartesian product.
#[test]
fn shipped_scenarios_validate_for_every_sweep_value() {
    crate::shipped_scenarios::load_all("mosaic", 4);
}

/// A load is the model's bf16 weights over the load path (0.4 GB/s by default): Qwen2.5-7B's
/// 7.61 B parameters (model card) are 15.22 GB, 38.05 s; GLM-4-9B's 9.40 B, 47.0 s (within the
/// rounding of the published counts); a scenario's `load_gbps` scales every load.
#[test]
fn a_load_is_the_weights_over_the_load_path() {
    let load =
        |s: &MosaicScenario, name: &str| s.experts.iter().find(|e| e.name == name).unwrap().load_s;
    let s = scenario(GPQA);
    assert!((load(&s, "Qwen") - 2.0 * 7.61e9 / 0.4e9).abs() < 0.1);
    assert!((load(&s, "GLM") - 2.0 * 9.40e9 / 0.4e9).abs() < 0.1);
    let faster = scenario(&format!("{GPQA}[serving]\nload_gbps = 0.8\n"));
    assert!((load(&faster, "Qwen") - load(&s, "Qwen") / 2.0).abs() < 1e-9);
}

/// The hybrid pool on GPQA with `[serving] measured = "vidur/a100"`, looked for from the crate's
/// folder (the repository's `profiles/` is one folder up).
fn measured_scenario() -> MosaicScenario {
    config(&format!("{GPQA}[serving]\nmeasured = \"vidur/a100\"\n"))
        .validate(
            Path::new(env!("CARGO_MANIFEST_DIR")),
            &mut Default::default(),
        )
        .unwrap()
}

/// With a measured set, an expert's step goes through the one step-cost seam as
/// `serving::MeasuredStepCost`: the price of `MeasuredDenseStep::price` on the same tokens,
/// which for LlamaR1 (DeepSeek-R1-Distill-Llama-8B, Meta-Llama-3-8B's layer) is by hand the
/// measured A100 kernels at 8 rows plus the roofline's attention and head plus the 4 ms host
/// overhead. Qwen2.5-7B's shape is in no profile: its MLP is scaled.
#[test]
fn a_measured_step_is_the_measured_operations_of_the_same_tokens() {
    use crate::cost::measured_steps::StepOperation;
    use crate::cost::op_profile::Operation;
    use crate::cost::roofline::StepTokens;
    use crate::serving::{CostSource, StepWork};
    use crate::time::SimDuration;

    let s = measured_scenario();
    let index = |name: &str| s.experts.iter().position(|e| e.name == name).unwrap();
    let llama = index("LlamaR1");
    // 8 decoding sequences holding 1,000 tokens each (no prefill: no per-sequence terms).
    let work = StepWork {
        requests: 8,
        decode_tokens: 8,
        context_tokens: 8_000,
        ..StepWork::default()
    };
    let time = SimulatedPricing::of(&s).steps(0, llama).price(&work);
    let measured = s.experts[llama].serving.dense.measured.as_ref().unwrap();
    let (price, sources) = measured.price(&StepTokens {
        rows: 8,
        sequences: 8,
        context_tokens: 8_000,
        prefill_square: 0.0,
    });
    assert_eq!(time.duration, SimDuration(price.nanos.round() as u64));
    assert_eq!(time.breakdown.op_sources, Some(sources));
    assert_eq!(time.source, CostSource::Measured);

    // By hand: per layer Meta-Llama-3-8B's measured kernels at 8 tokens; the attention reads
    // 8,000 x 2 x 2 B x 8 KV heads x 128 = 32.8 MB per layer against 4 x 4096 FLOPs per cached
    // token, one kernel group on the A100's rates; the head streams 128,256 x 4096 bf16
    // weights against 64 padded rows.
    let set = crate::cost::measured_steps::MeasuredSet::load(
        "vidur/a100",
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles/vidur/a100"),
    )
    .unwrap();
    let llama3 = set
        .ops
        .profiles
        .iter()
        .find(|p| p.model == "meta-llama/Meta-Llama-3-8B")
        .unwrap();
    let layer_ops: f64 = Operation::ALL[1..]
        .iter()
        .map(|&op| llama3.series(op, 1).unwrap().nanos_at(8).unwrap())
        .sum();
    let r = set.ops.roofline;
    let attention = r.op(8_000.0 * 4096.0, 4.0 * 4096.0 * 8_000.0).nanos();
    let head = r
        .op(128_256.0 * 4096.0 * 2.0, 2.0 * 128_256.0 * 4096.0 * 64.0)
        .nanos();
    let by_hand = 32.0 * (layer_ops + attention) + head + 4e6;
    assert!(
        (price.nanos - by_hand).abs() < 1e-3,
        "{} vs {by_hand}",
        price.nanos
    );

    // LlamaR1's MLP is Meta-Llama-3-8B's (measured); Qwen2.5-7B's (hidden 3584, intermediate
    // 18944) is scaled from the nearest measured MLP.
    let record = |name: &str| {
        s.experts[index(name)]
            .serving
            .dense
            .measured
            .as_ref()
            .unwrap()
            .record
            .sources()
    };
    assert_eq!(
        record("LlamaR1").get(StepOperation::Mlp),
        Some(CostSource::Measured)
    );
    for qwen in ["Qwen", "QwenR1"] {
        assert_eq!(
            record(qwen).get(StepOperation::Mlp),
            Some(CostSource::Scaled),
            "{qwen}"
        );
    }
    // The aggregator (QwenR1 over the 4 workers) adds two measured all-reduces per layer.
    let aggregator = s.aggregator.serving.dense.measured.as_ref().unwrap();
    assert_eq!(aggregator.record.tensor_parallel, 4);
    assert_eq!(
        aggregator.record.sources().get(StepOperation::AllReduce),
        Some(CostSource::Measured)
    );
    assert_eq!(s.cost_source(), "measured-operations:vidur/a100:A100-80GB");
}

/// A measured set must exist, be of `serving.gpu`, and not stand beside `serving.profile`.
#[test]
fn a_bad_measured_set_names_the_field() {
    let with = |extra: &str| {
        config(&format!("{GPQA}[serving]\n{extra}"))
            .validate(
                Path::new(env!("CARGO_MANIFEST_DIR")),
                &mut Default::default(),
            )
            .unwrap_err()
    };
    let e = with("measured = \"vidur/b200\"\n");
    assert_eq!(e.path, "serving.measured");
    assert!(
        e.message.contains("no measured profile set"),
        "{}",
        e.message
    );
    let e = with("measured = \"vidur/a100\"\ngpu = \"H100-SXM\"\n");
    assert_eq!(e.path, "serving.measured");
    assert!(
        e.message
            .contains("measured on A100-80GB, but serving.gpu is H100-SXM"),
        "{}",
        e.message
    );
    let e = with("measured = \"vidur/a100\"\nprofile = \"decode.json\"\n");
    assert_eq!(e.path, "serving.measured");
    assert!(e.message.contains("second cost source"), "{}", e.message);
}

/// The workers' spread: the fastest wall is the earliest-finishing worker that ran a session
/// (a worker without sessions does not count), the ratio the slowest over it; Figure 2b's
/// round-robin walls give its 2620 / 165, and ranked longest first 2620 / 2546 / 430 / 165.
#[test]
fn the_worker_spread_is_slowest_over_fastest_among_workers_that_ran() {
    let stage = |walls: Vec<f64>| ExpertStage {
        makespan_s: walls.iter().copied().fold(0.0, f64::max),
        timelines: vec![Vec::new(); walls.len()],
        sessions: Vec::new(),
        loads: 0,
        load_time_s: 0.0,
        idle_pct: 0.0,
        worker_walls_s: walls,
        output_tokens: 0,
    };
    let figure_2b = stage(vec![430.0, 2620.0, 165.0, 2546.0, 0.0]);
    assert_eq!(figure_2b.fastest_worker_s(), 165.0);
    assert_eq!(figure_2b.worker_wall_ratio(), 2620.0 / 165.0);
    let ranked: Vec<f64> = (1..=5).map(|r| figure_2b.worker_wall_ranked_s(r)).collect();
    assert_eq!(ranked, [2620.0, 2546.0, 430.0, 165.0, 0.0]);
    assert_eq!(figure_2b.worker_wall_ranked_s(0), 0.0);
    let together = stage(vec![7.0, 7.0]);
    assert_eq!(together.worker_wall_ratio(), 1.0);
    let idle = stage(vec![0.0, 0.0]);
    assert_eq!(
        (idle.fastest_worker_s(), idle.worker_wall_ratio()),
        (0.0, 0.0)
    );
}
