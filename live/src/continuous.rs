//! A continuous MoE replica of the serving family in live mode (the GEM preset,
//! scenarios/live/gem.toml): the serving simulator runs unchanged (`expertsim_scenario::serving_family::serve`:
//! the expert mapping, the continuous-batching replica, the trace routing) and each engine step
//! is priced by a [`LiveStep`] that predicts with the replica's own step cost
//! (`ReplicaStepCost`, handed over through `serve`'s `StepCosts::Wrapped`) and measures the step
//! on the kernels ([`ExpertParallelMeasure`]): per MoE layer, every virtual GPU runs one MoE
//! launch on the routed tokens its hosted experts receive (`StepWork::routed`, spread over its
//! experts) at its emulated speed, and the layer waits for the slowest (the lock-step barrier is
//! the maximum); the tensor-parallel dense part and head run as each virtual GPU's shard
//! (`DecodeShape::shard`: 1/TP of the outputs and attention heads): per layer a prefill pass over
//! the step's prompt tokens and a decode pass (GEMM and attention over the decode context) over
//! its decoding sequences, whichever it has, as the profile's curves price them
//! (`serving_family::curve_pricing`); again the slowest GPU counts. Under the measured clock the
//! step's duration is the measurement, and its MoE time and per-GPU busy times are the
//! prediction's shares of it (`step::LiveStep`).
//!
//! Dense replicas (the Chimera preset, scenarios/live/chimera.toml: a replica group per model,
//! each replica one GPU; the MOSAIC preset, scenarios/live/mosaic.toml: workers that run their
//! placed sessions one after another, each session a replica, planned first as `expertsim run`
//! plans them, `serving_family::prepared`) run each engine step as its model's decode step on the kernels
//! ([`DenseStep`]): the model scaled down as the dense-decode profile that prices it was
//! measured (`replica.scheduler.profile`; live mode's default scaling without one), every layer
//! one GEMM over the step's rows with attention over their cached tokens, then the head.
//!
//! An MLA replica with adapters (the ExpertWeave preset, scenarios/live/expertweave.toml, one
//! GPU) measures what its prediction prices (`curve_pricing::MlaGemms`): per layer one GEMM of
//! the layer's non-routed width over the step's rows, the head's over the emitting sequences;
//! per MoE layer the rerouting kernel (fused or unfused, as `adapters.rerouting` says) on the
//! step's tokens, their adapters and the instance's expert map, where the memory plan reroutes,
//! then the MoE layer on the routed tokens of every base expert and adapter copy
//! (`RoutedTokens::copies`) as the simulator routed them.

use crate::dense::DenseStep;
use crate::device::{Kernels, even_counts, slot_major_ids};
use crate::step::{LiveSession, LiveStep, Logged, Measure};
use crate::{Clock, Decisions, FamilyRun, LiveError};
use expertsim_scenario::cost::shape::DenseModelShape;
use expertsim_scenario::metrics::RunOutput;
use expertsim_scenario::policies::Policies;
use expertsim_scenario::policies::gate::{AggregationGate, Votes};
use expertsim_scenario::policies::memory::{InstancePlan, MemoryPlan};
use expertsim_scenario::records::DiscardRecords;
use expertsim_scenario::serving::variability::FactorKind;
use expertsim_scenario::serving::{AdapterTokens, StepCost, StepWork};
use expertsim_scenario::serving_family::adapters::AdapterSpec;
use expertsim_scenario::serving_family::config::{SchedulerTable, ServedModel};
use expertsim_scenario::serving_family::live_scale::{LIVE_SCALING, Scaling};
use expertsim_scenario::serving_family::popularity::Popularity;
use expertsim_scenario::serving_family::rerouting::Rerouting;
use expertsim_scenario::serving_family::{
    ReplicaStepCost, ScenarioPolicies, ServingScenario, StepCosts,
};
use kernels::BackendError;
use kernels::reroute::{BASE_MODEL, RerouteProblem, RerouteVariant};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

/// Runs one engine step of an expert-parallel replica on the kernels: the MoE layers per
/// virtual GPU, then the dense part.
pub struct ExpertParallelMeasure<'a> {
    speeds: &'a [f64],
    experts_per_gpu: usize,
    tensor_parallel: usize,
    /// An MLA model's layers as GEMMs of their own widths (`None`: the per-layer curves' layer).
    mla: Option<MlaLayers>,
    /// With adapters (one GPU), the rerouting and the adapter copies.
    adapters: Option<AdapterKernels<'a>>,
}

/// An MLA model's dense part as its prediction prices it: per layer one GEMM of its non-routed
/// width, and the head's.
struct MlaLayers {
    widths: Vec<usize>,
    vocab: usize,
}

/// What the rerouting kernel needs of an adapter replica: its instance, the adapters'
/// fine-tuned experts and the configured variant.
struct AdapterKernels<'a> {
    instance: &'a InstancePlan,
    popularity: Popularity,
    variant: RerouteVariant,
    n_experts: usize,
}

impl AdapterKernels<'_> {
    /// One MoE layer's rerouting problem for the step's tokens per adapter (`adapters`), the
    /// router's choices `base_ids` (tokens per base expert, a copy's counted on its expert).
    fn problem(
        &self,
        layer: usize,
        adapters: &[AdapterTokens],
        base_ids: &[u32],
        top_k: usize,
    ) -> RerouteProblem {
        let instance = self.instance;
        let use_copies = instance.adapter_experts && instance.reroutes;
        let tokens = adapters.iter().map(|a| a.tokens as usize).sum::<usize>();
        let mut adapter_ids = Vec::with_capacity(tokens);
        for entry in adapters {
            let row = instance
                .adapters
                .iter()
                .position(|&a| a == entry.adapter as usize);
            let id = match row {
                Some(j) if use_copies => j as i32,
                _ => BASE_MODEL,
            };
            adapter_ids.extend(std::iter::repeat_n(id, entry.tokens as usize));
        }
        let mut expert_map = Vec::with_capacity(instance.adapters.len() * self.n_experts);
        let mut next_copy = self.n_experts as i32;
        for &a in &instance.adapters {
            for (e, &tuned) in self.popularity.tuned(a, layer).iter().enumerate() {
                if tuned && use_copies {
                    expert_map.push(next_copy);
                    next_copy += 1;
                } else {
                    expert_map.push(e as i32);
                }
            }
        }
        RerouteProblem {
            n_experts: self.n_experts,
            top_k,
            max_adapters: instance.adapters.len(),
            topk_ids: slot_major_ids(base_ids, tokens, top_k),
            adapter_ids,
            expert_map,
        }
    }
}

impl Measure for ExpertParallelMeasure<'_> {
    fn measure(&mut self, k: &mut Kernels, work: &StepWork<'_>) -> Result<f64, BackendError> {
        let routed = work
            .routed
            .expect("an MoE step carries its routed tokens per layer and GPU");
        let top_k = k.shape().top_k;
        let g_count = self.speeds.len();
        let rows = (work.prefill_tokens + work.decode_tokens) as usize;
        let mut moe = 0.0;
        for (layer, row) in routed.per_gpu.chunks_exact(g_count).enumerate() {
            if let Some(adapters) = &self.adapters {
                // One GPU: every base expert's tokens, then every copy's, as routed.
                let n = adapters.n_experts;
                let per_expert = &routed.per_expert[layer * n..][..n];
                let copies = routed.copies.get(layer).map_or(&[][..], |c| &c[..]);
                if adapters.instance.reroutes && !adapters.instance.adapters.is_empty() && rows > 0
                {
                    // The rerouting reads the router's choices: the base expert of every copy.
                    let mut base = per_expert.to_vec();
                    for c in copies {
                        base[c.expert as usize] += c.tokens;
                    }
                    let problem = adapters.problem(layer, work.adapters, &base, top_k);
                    moe += k.reroute(problem, adapters.variant)?;
                }
                let mut counts = per_expert.to_vec();
                counts.extend(copies.iter().map(|c| c.tokens));
                moe += k.moe_at_speed(layer, &counts, top_k, self.speeds[0])?;
                continue;
            }
            let mut slowest = 0.0f64;
            for (&tokens, &speed) in row.iter().zip(self.speeds) {
                let counts = even_counts(tokens, self.experts_per_gpu);
                slowest = slowest.max(k.moe_at_speed(layer, &counts, top_k, speed)?);
            }
            moe += slowest;
        }
        let (prefill, decode) = (work.prefill_tokens as usize, work.decode_tokens as usize);
        let emitting = work.batch.iter().filter(|s| s.step_emits()).count();
        if let Some(mla) = &self.mla {
            let tp = self.tensor_parallel.max(1);
            let mut dense = 0.0f64;
            for &speed in self.speeds {
                let mut t = 0.0;
                for &width in &mla.widths {
                    if rows > 0 {
                        t += k.decode_step_at_speed(
                            k.dense_shape(width.div_ceil(tp)),
                            rows,
                            0,
                            speed,
                        )?;
                    }
                }
                if emitting > 0 {
                    let head = k.dense_shape(mla.vocab.div_ceil(tp));
                    t += k.decode_step_at_speed(head, emitting, 0, speed)?;
                }
                dense = dense.max(t);
            }
            return Ok(moe + dense);
        }
        let context = k.decode_context();
        let block = k
            .dense_shape(k.dense_out_features())
            .shard(self.tensor_parallel);
        let head = k.dense_shape(k.shape().vocab).shard(self.tensor_parallel);
        let mut dense = 0.0f64;
        for &speed in self.speeds {
            let mut t = 0.0;
            for _ in 0..routed.layers {
                t += k.decode_step_at_speed(block, prefill, 0, speed)?;
                t += k.decode_step_at_speed(block, decode, context, speed)?;
            }
            t += k.decode_step_at_speed(head, emitting, 0, speed)?;
            dense = dense.max(t);
        }
        Ok(moe + dense)
    }
}

/// Whether live mode runs `scenario` as a continuous MoE replica: one replica of one
/// expert-parallel group (`replica.gpus = expert_parallel`) of an MoE model, a continuous
/// scheduler kind, clock speed factors (live mode emulates a slow GPU by repeating its work),
/// adapters only on an MLA model on one GPU and served (not a plan-only run); or why not.
pub fn check(scenario: &ServingScenario) -> Result<(), LiveError> {
    if dense(scenario) {
        return check_dense(scenario);
    }
    let r = &scenario.replica;
    let mla = matches!(scenario.model, ServedModel::Mla(_));
    let why = if scenario.replica_count() != 1 {
        Some("one replica (replica.count = 1, one [replica] group)")
    } else if matches!(scenario.model, ServedModel::Dense(_)) {
        Some("an MoE model (model.name)")
    } else if mla && r.gpus != 1 {
        Some("an MLA model (ExpertWeave's) on one GPU (replica.gpus = 1)")
    } else if mla && r.curves.as_ref().is_none_or(|c| c.mla.is_none()) {
        Some("an MLA model priced from a profile of its widths (replica.scheduler.profile)")
    } else if matches!(r.scheduler, SchedulerTable::Static { .. }) {
        Some("a continuous scheduler kind (replica.scheduler.kind)")
    } else if r.gpus != r.expert_parallel {
        Some("one expert-parallel group (replica.gpus = replica.expert_parallel)")
    } else if r.speed_factors_kind != FactorKind::Clock {
        Some("clock speed factors (replica.speed_factors_kind = \"clock\")")
    } else if scenario.adapters.as_ref().is_some_and(|a| a.plan_only) {
        Some("a served run (adapters.plan_only = false)")
    } else {
        None
    };
    match why {
        None => Ok(()),
        Some(needs) => Err(LiveError::Unsupported(format!(
            "live mode runs a continuous MoE replica of the serving family with {needs} \
             (scenarios/live/gem.toml, scenarios/live/expertweave.toml), or the CAPS preset \
             (scenarios/live/caps.toml)"
        ))),
    }
}

/// Whether every replica group of `scenario` serves a dense model.
fn dense(scenario: &ServingScenario) -> bool {
    scenario
        .groups()
        .all(|(model, _)| matches!(model, ServedModel::Dense(_)))
}

/// Whether live mode runs `scenario`'s dense replicas: each on one GPU at full speed, with a
/// continuous scheduler kind; or why not.
fn check_dense(scenario: &ServingScenario) -> Result<(), LiveError> {
    for (_, r) in scenario.groups() {
        let why = if r.gpus != 1 {
            Some("one GPU per replica (replica.gpus = 1)")
        } else if matches!(r.scheduler, SchedulerTable::Static { .. }) {
            Some("a continuous scheduler kind (replica.scheduler.kind)")
        } else if r.speed_factors.iter().any(|&f| f != 1.0) {
            Some("GPUs at full speed (no replica.speed_factors)")
        } else {
            None
        };
        if let Some(needs) = why {
            return Err(LiveError::Unsupported(format!(
                "live mode runs dense replicas of the serving family with {needs} \
                 (scenarios/live/chimera.toml, scenarios/live/mosaic.toml)"
            )));
        }
    }
    Ok(())
}

/// A question workload's aggregation gate with each decision logged, in the order the
/// questions fan in: the fan-in's place, the question it decides, its votes and whether the
/// question skipped the aggregator.
struct LoggedGate {
    inner: Box<dyn AggregationGate>,
    log: Arc<Mutex<Vec<String>>>,
}

impl AggregationGate for LoggedGate {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn skip(&mut self, votes: &Votes) -> bool {
        self.inner.skip(votes)
    }

    fn decide(&mut self, question: usize, votes: &Votes) -> bool {
        let skip = self.inner.decide(question, votes);
        let mut log = self.log.lock().expect("the gate's log is not poisoned");
        let line = format!(
            "gate: fan-in {}, question {question}, {} of {} votes agree: {}",
            log.len(),
            votes.plurality,
            votes.k,
            if skip { "skipped" } else { "aggregated" }
        );
        log.push(line);
        skip
    }
}

/// One seed of `scenario` served (its adapters placed as `plan` says, a question workload's
/// calls gated by the policies' gate) with its replica's steps priced by `wrap` around its own
/// step cost; beside the run, the gate's decisions in order (`LoggedGate`; none without a
/// question workload).
fn serve<'w>(
    scenario: &'w ServingScenario,
    seed: u64,
    policies: &dyn Policies,
    plan: Option<&MemoryPlan>,
    mut wrap: impl FnMut(usize, ReplicaStepCost) -> Box<dyn StepCost + 'w> + 'w,
) -> Result<(RunOutput, Vec<String>), LiveError> {
    let mut p = ScenarioPolicies::of(scenario, policies);
    let mut sink = DiscardRecords;
    let log = Arc::new(Mutex::new(Vec::new()));
    let gate = p.gate.take().map(|inner| {
        Box::new(LoggedGate {
            inner,
            log: Arc::clone(&log),
        }) as Box<dyn AggregationGate>
    });
    let out = expertsim_scenario::serving_family::serve_gated(
        scenario,
        seed,
        &mut *p.queue,
        &mut *p.router,
        &mut *p.mapper,
        &mut p.selectors,
        plan,
        gate,
        &mut sink,
        None,
        Some(StepCosts::Wrapped(Box::new(move |r, own| wrap(r, own)))),
    )
    .map_err(LiveError::Unsupported)?;
    let decisions = std::mem::take(&mut *log.lock().expect("the gate's log is not poisoned"));
    Ok((out, decisions))
}

const ENGINE: &str = "engine";

/// The rerouting inputs of an adapter replica serving `instance` of `spec`'s adapters.
fn adapter_kernels<'a>(
    shape: &expertsim_scenario::cost::shape::MlaMoeShape,
    spec: &AdapterSpec,
    instance: &'a InstancePlan,
) -> Result<AdapterKernels<'a>, LiveError> {
    if instance.adapters.iter().any(|&a| a >= spec.adapters.len()) {
        return Err(LiveError::Unsupported(
            "the memory plan names an adapter the scenario does not serve".into(),
        ));
    }
    Ok(AdapterKernels {
        instance,
        popularity: Popularity::of(shape, &spec.adapters, spec.expert_zipf_s),
        variant: match spec.rerouting {
            Rerouting::Fused => RerouteVariant::Fused,
            Rerouting::Unfused => RerouteVariant::Unfused,
        },
        n_experts: shape.n_routed_experts as usize,
    })
}

/// One engine of a dense cluster as live mode runs it: its name in the decision log, its
/// model and the scaling it runs at.
struct DenseEngine {
    name: String,
    shape: DenseModelShape,
    scaling: Scaling,
}

/// Every replica of `scenario`'s dense groups, numbered as the serving family numbers them
/// (group by group; placed, a group's replicas are its model's sessions).
fn dense_engines(scenario: &ServingScenario) -> Vec<DenseEngine> {
    let mut engines = Vec::new();
    for (model, r) in scenario.groups() {
        let ServedModel::Dense(shape) = model else {
            continue;
        };
        let scaling = r.dense_profile.as_ref().map_or(LIVE_SCALING, |p| p.scaling);
        for _ in 0..r.count {
            engines.push(DenseEngine {
                name: format!("engine {} ({})", engines.len(), model.name()),
                shape: shape.clone(),
                scaling,
            });
        }
    }
    engines
}

/// One seed of dense `scenario` simulated, then live on `kernels`: every replica's steps
/// predicted by its own step cost and measured as its scaled-down model's decode step.
fn run_dense(
    scenario: &ServingScenario,
    seed: u64,
    policies: &dyn Policies,
    kernels: &mut Kernels,
    clock: Clock,
) -> Result<FamilyRun, LiveError> {
    let engines = Rc::new(dense_engines(scenario));
    let simulated_log = Rc::new(RefCell::new(Vec::new()));
    let (log, names) = (simulated_log.clone(), engines.clone());
    let (simulated, simulated_gate) = serve(scenario, seed, policies, None, move |r, own| {
        Box::new(Logged::new(names[r].name.clone(), own, log.clone()))
    })?;
    simulated_log.borrow_mut().extend(simulated_gate);
    let session = LiveSession::new(kernels, clock);
    let (live_session, live_engines) = (session.clone(), engines.clone());
    let (live, live_gate) = serve(scenario, seed, policies, None, move |r, own| {
        let e = &live_engines[r];
        Box::new(LiveStep::new(
            e.name.clone(),
            own,
            DenseStep::of(&e.shape, e.scaling),
            live_session.clone(),
        ))
    })?;
    let run = finished(
        session,
        &simulated_log,
        (simulated, live),
        live_gate,
        if scenario.questions.is_some() {
            "every engine step in the order the engines started them (the engine, its \
             sequences, prefill tokens, decoding sequences and cached tokens; the aggregator's \
             group among them), then every decision of the aggregation gate in the order the \
             questions fanned in, each naming its question"
        } else {
            "every engine step in the order the engines started them: the engine, its \
             sequences, prefill tokens, decoding sequences and cached tokens"
        },
    )?;

    Ok(FamilyRun {
        execution: Some(format!(
            "each engine's model runs scaled down: {}; a layer is one GEMM over hidden with \
             attention over the step's cached tokens spread evenly over its rows{}",
            engines[0].scaling.describe(),
            if scenario.sessions.is_some() {
                "; each placed session's model load is priced (replica.load), not copied"
            } else {
                ""
            }
        )),
        ..run
    })
}

/// One seed of `scenario` simulated, then live on `kernels`.
pub fn run(
    scenario: &ServingScenario,
    seed: u64,
    policies: &dyn Policies,
    kernels: &mut Kernels,
    clock: Clock,
) -> Result<FamilyRun, LiveError> {
    check(scenario)?;
    // `[placement]` (MOSAIC's workers): the sessions calibrated and planned as `expertsim run`
    // plans them.
    let prepared = expertsim_scenario::serving_family::prepared(scenario, seed, policies)
        .map_err(LiveError::Unsupported)?;
    let scenario = prepared.as_ref().unwrap_or(scenario);
    if dense(scenario) {
        return run_dense(scenario, seed, policies, kernels, clock);
    }
    let r = &scenario.replica;
    let plan = {
        let mut planner = ScenarioPolicies::of(scenario, policies);
        expertsim_scenario::serving_family::plan(scenario, planner.memory())
            .map_err(LiveError::Unsupported)?
    };
    if plan.as_ref().is_some_and(|p| p.report.out_of_memory) {
        return Err(LiveError::Unsupported(
            "the memory plan is out of memory: live mode has no step to run".into(),
        ));
    }
    let simulated_log = Rc::new(RefCell::new(Vec::new()));
    let log = simulated_log.clone();
    let (simulated, _) = serve(scenario, seed, policies, plan.as_ref(), move |_, own| {
        Box::new(Logged::new(ENGINE, own, log.clone()))
    })?;
    let variability = kernels.variability_emulation(&r.speed_factors);
    let experts = scenario.model.experts().expect("check found an MoE model");
    let mla = match &scenario.model {
        ServedModel::Mla(shape) => Some(MlaLayers {
            widths: (0..shape.n_layers)
                .map(|l| shape.layer_non_routed_params(l).div_ceil(shape.hidden) as usize)
                .collect(),
            vocab: shape.vocab as usize,
        }),
        _ => None,
    };
    let adapters = match (&scenario.model, &scenario.adapters, &plan) {
        (ServedModel::Mla(shape), Some(spec), Some(plan)) => {
            Some(adapter_kernels(shape, spec, &plan.instances[0])?)
        }
        _ => None,
    };
    let session = LiveSession::new(kernels, clock);
    let live_session = session.clone();
    let mut adapters = Some(adapters);
    let mut mla = Some(mla);
    let (live, _) = serve(scenario, seed, policies, plan.as_ref(), move |_, own| {
        Box::new(LiveStep::new(
            ENGINE,
            own,
            ExpertParallelMeasure {
                speeds: &r.speed_factors,
                experts_per_gpu: (experts.n_experts / r.expert_parallel).max(1),
                tensor_parallel: r.tensor_parallel,
                mla: mla.take().flatten(),
                adapters: adapters.take().flatten(),
            },
            live_session.clone(),
        ))
    })?;
    let run = finished(
        session,
        &simulated_log,
        (simulated, live),
        Vec::new(),
        "every engine step's sequences, prefill tokens, decoding sequences, cached tokens and \
         routed tokens per (layer, GPU)",
    )?;
    Ok(FamilyRun {
        variability: Some(variability),
        ..run
    })
}

/// Where both paths end: the live session's steps and log (then `live_gate`, the live run's
/// gate decisions), compared with the simulated run's log (`compared` says what a line holds),
/// beside the two runs' outputs.
fn finished(
    session: Rc<RefCell<LiveSession<'_>>>,
    simulated_log: &RefCell<Vec<String>>,
    (simulated, live): (RunOutput, RunOutput),
    live_gate: Vec<String>,
    compared: &str,
) -> Result<FamilyRun, LiveError> {
    let session = Rc::try_unwrap(session)
        .ok()
        .expect("the live run's step costs are dropped")
        .into_inner();
    let (steps, mut live_log) = session.finish()?;
    live_log.extend(live_gate);
    let simulated_lines = std::mem::take(&mut *simulated_log.borrow_mut());
    Ok(FamilyRun {
        steps,
        simulated,
        live,
        decisions: Decisions::compare(compared, simulated_lines, live_log),
        variability: None,
        execution: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use expertsim_scenario::cost::shape::MlaMoeShape;
    use expertsim_scenario::policies::memory::device::KvCapacity;

    #[test]
    fn the_rerouting_problem_follows_the_steps_adapters_and_the_instances_copies() {
        // live-tiny-mla with 3 adapters; a step of 2 tokens of adapter 2 and 1 of adapter 0,
        // each choosing 6 of 64 experts: 18 choices, 6 on each of experts 0, 1 and 2.
        let shape = MlaMoeShape::preset("live-tiny-mla").unwrap();
        let spec: expertsim_scenario::serving_family::adapters::AdaptersTable =
            serde_json::from_value(
                serde_json::json!({ "count": 3, "memory": { "kind": "virtual_weight_tensor" } }),
            )
            .unwrap();
        let spec = spec.validate(&shape, &Default::default()).unwrap();
        let instance = |reroutes: bool| InstancePlan {
            adapters: vec![0, 1, 2],
            reroutes,
            adapter_experts: reroutes,
            n_devices: 1,
            weight_bytes: 0,
            kv: KvCapacity {
                kv_bytes: 0,
                kv_tokens: 0,
                out_of_memory: false,
            },
        };
        let step = [
            AdapterTokens {
                adapter: 2,
                tokens: 2,
            },
            AdapterTokens {
                adapter: 0,
                tokens: 1,
            },
        ];
        let mut base = vec![0u32; 64];
        base[..3].fill(6);
        let weave = instance(true);
        let k = adapter_kernels(&shape, &spec, &weave).unwrap();
        let p = k.problem(1, &step, &base, 6);
        assert_eq!((p.n_experts, p.top_k, p.max_adapters), (64, 6, 3));
        assert_eq!(p.adapter_ids, vec![2, 2, 0]);
        assert_eq!(p.topk_ids.len(), 18);
        assert_eq!(p.topk_ids.iter().filter(|&&e| e == 1).count(), 6);
        // The expert map: each adapter's fine-tuned experts of the layer get the next copies
        // (64, 65, ... in adapter order), the others stay themselves.
        let tuned: usize = (0..3)
            .map(|a| k.popularity.tuned(a, 1).iter().filter(|&&t| t).count())
            .sum();
        assert!(tuned > 0);
        assert_eq!(p.expert_map.len(), 3 * 64);
        let copies: Vec<i32> = p.expert_map.iter().copied().filter(|&e| e >= 64).collect();
        assert_eq!(copies, (64..64 + tuned as i32).collect::<Vec<_>>());
        for (a, row) in p.expert_map.chunks(64).enumerate() {
            for (e, &id) in row.iter().enumerate() {
                assert_eq!(
                    id >= 64,
                    k.popularity.tuned(a, 1)[e],
                    "adapter {a} expert {e}"
                );
            }
        }
        // An instance that does not reroute (base only) sends every token to the base model.
        let base_only = instance(false);
        let k = adapter_kernels(&shape, &spec, &base_only).unwrap();
        let p = k.problem(1, &step, &base, 6);
        assert!(p.adapter_ids.iter().all(|&a| a == BASE_MODEL));
        assert!(
            p.expert_map
                .iter()
                .enumerate()
                .all(|(i, &e)| e == (i % 64) as i32)
        );
    }

    struct Unanimous;

    impl AggregationGate for Unanimous {
        fn name(&self) -> &'static str {
            "unanimous"
        }
        fn skip(&mut self, votes: &Votes) -> bool {
            votes.plurality == votes.k
        }
    }

    #[test]
    fn the_gate_log_names_each_decided_question() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut gate = LoggedGate {
            inner: Box::new(Unanimous),
            log: Arc::clone(&log),
        };
        assert!(gate.decide(4, &Votes { k: 3, plurality: 3 }));
        assert!(!gate.decide(1, &Votes { k: 3, plurality: 2 }));
        assert_eq!(
            *log.lock().unwrap(),
            [
                "gate: fan-in 0, question 4, 3 of 3 votes agree: skipped",
                "gate: fan-in 1, question 1, 2 of 3 votes agree: aggregated",
            ]
        );
    }
}
