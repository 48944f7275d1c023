//! A continuous MoE replica of the serving family in live mode (the GEM preset,
//! scenarios/live/gem.toml): the serving simulator runs unchanged (`sim::serving_family::serve`:
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

use crate::device::{Kernels, even_counts};
use crate::step::{LiveSession, LiveStep, Logged, Measure};
use crate::{Clock, Decisions, FamilyRun, LiveError};
use kernels::BackendError;
use sim::metrics::RunOutput;
use sim::policies::Policies;
use sim::records::DiscardRecords;
use sim::serving::variability::FactorKind;
use sim::serving::{StepCost, StepWork};
use sim::serving_family::config::{SchedulerTable, ServedModel};
use sim::serving_family::{ReplicaStepCost, ScenarioPolicies, ServingScenario, StepCosts};
use std::cell::RefCell;
use std::rc::Rc;

/// Runs one engine step of an expert-parallel replica on the kernels: the MoE layers per
/// virtual GPU, then the dense part.
pub struct ExpertParallelMeasure<'a> {
    speeds: &'a [f64],
    experts_per_gpu: usize,
    tensor_parallel: usize,
}

impl Measure for ExpertParallelMeasure<'_> {
    fn measure(&mut self, k: &mut Kernels, work: &StepWork<'_>) -> Result<f64, BackendError> {
        let routed = work
            .routed
            .expect("an MoE step carries its routed tokens per layer and GPU");
        let top_k = k.shape().top_k;
        let g_count = self.speeds.len();
        let mut moe = 0.0;
        for (layer, row) in routed.per_gpu.chunks_exact(g_count).enumerate() {
            let mut slowest = 0.0f64;
            for (&tokens, &speed) in row.iter().zip(self.speeds) {
                let counts = even_counts(tokens, self.experts_per_gpu);
                slowest = slowest.max(k.moe_at_speed(layer, &counts, top_k, speed)?);
            }
            moe += slowest;
        }
        let (prefill, decode) = (work.prefill_tokens as usize, work.decode_tokens as usize);
        let emitting = work.batch.iter().filter(|s| s.step_emits()).count();
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
/// no adapters; or why not.
pub fn check(scenario: &ServingScenario) -> Result<(), LiveError> {
    let r = &scenario.replica;
    let why = if scenario.replica_count() != 1 {
        Some("one replica (replica.count = 1, one [replica] group)")
    } else if !matches!(scenario.model, ServedModel::Moe(_)) {
        Some("an MoE model (model.name)")
    } else if matches!(r.scheduler, SchedulerTable::Static { .. }) {
        Some("a continuous scheduler kind (replica.scheduler.kind)")
    } else if r.gpus != r.expert_parallel {
        Some("one expert-parallel group (replica.gpus = replica.expert_parallel)")
    } else if r.speed_factors_kind != FactorKind::Clock {
        Some("clock speed factors (replica.speed_factors_kind = \"clock\")")
    } else if scenario.adapters.is_some() {
        Some("no adapters")
    } else {
        None
    };
    match why {
        None => Ok(()),
        Some(needs) => Err(LiveError::Unsupported(format!(
            "live mode runs a continuous MoE replica of the serving family with {needs} \
             (scenarios/live/gem.toml), or the CAPS preset (scenarios/live/caps.toml)"
        ))),
    }
}

/// One seed of `scenario` served with its replica's steps priced by `wrap` around its own step
/// cost.
fn serve<'w>(
    scenario: &'w ServingScenario,
    seed: u64,
    policies: &dyn Policies,
    mut wrap: impl FnMut(usize, ReplicaStepCost) -> Box<dyn StepCost + 'w> + 'w,
) -> Result<RunOutput, LiveError> {
    let mut p = ScenarioPolicies::of(scenario, policies);
    let mut sink = DiscardRecords;
    sim::serving_family::serve(
        scenario,
        seed,
        &mut *p.queue,
        &mut *p.router,
        &mut *p.mapper,
        &mut p.selectors,
        None,
        &mut sink,
        None,
        Some(StepCosts::Wrapped(Box::new(move |r, own| wrap(r, own)))),
    )
    .map_err(LiveError::Unsupported)
}

const ENGINE: &str = "engine";

/// One seed of `scenario` simulated, then live on `kernels`.
pub fn run(
    scenario: &ServingScenario,
    seed: u64,
    policies: &dyn Policies,
    kernels: &mut Kernels,
    clock: Clock,
) -> Result<FamilyRun, LiveError> {
    check(scenario)?;
    let r = &scenario.replica;
    let simulated_log = Rc::new(RefCell::new(Vec::new()));
    let log = simulated_log.clone();
    let simulated = serve(scenario, seed, policies, move |_, own| {
        Box::new(Logged::new(ENGINE, own, log.clone()))
    })?;
    let variability = kernels.variability_emulation(&r.speed_factors);
    let experts = scenario.model.experts().expect("check found an MoE model");
    let session = LiveSession::new(kernels, clock);
    let live_session = session.clone();
    let live = serve(scenario, seed, policies, move |_, own| {
        Box::new(LiveStep::new(
            ENGINE,
            own,
            ExpertParallelMeasure {
                speeds: &r.speed_factors,
                experts_per_gpu: (experts.n_experts / r.expert_parallel).max(1),
                tensor_parallel: r.tensor_parallel,
            },
            live_session.clone(),
        ))
    })?;
    let session = Rc::try_unwrap(session)
        .ok()
        .expect("the live run's step cost is dropped")
        .into_inner();
    let (steps, live_log) = session.finish()?;
    let simulated_lines = std::mem::take(&mut *simulated_log.borrow_mut());
    Ok(FamilyRun {
        steps,
        simulated,
        live,
        decisions: Decisions::compare(
            "every engine step's sequences, prefill tokens, decoding sequences, cached tokens \
             and routed tokens per (layer, GPU)",
            simulated_lines,
            live_log,
        ),
        variability: Some(variability),
        execution: None,
    })
}
