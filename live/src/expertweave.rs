//! ExpertWeave in live mode, through the serving layer's step-cost seam: the adapter-memory plan
//! and every instance's replica run unchanged, and each instance's steps are priced by a
//! [`LiveStep`] that predicts with the scenario's step cost (its measured profile's, or the
//! roofline's) and measures the step on the kernels ([`EwMeasure`]): per MoE layer, every token
//! of the step draws its top-k experts from its adapter's routing popularity (the distribution
//! the step costs assume), the rerouting kernel (fused or unfused, as configured) redirects the
//! batch to the adapters' fine-tuned expert copies, and the MoE layer runs on the union of base
//! experts and copies; each layer's dense part and the output head run as GEMMs over the step's
//! tokens.

use crate::device::Kernels;
use crate::step::{LiveSession, LiveStep, Logged, Measure};
use crate::{Clock, Decisions, FamilyRun, LiveError};
use kernels::BackendError;
use kernels::reroute::{BASE_MODEL, RerouteProblem, RerouteVariant};
use rand::RngExt;
use sim::expertweave::config::Rerouting;
use sim::expertweave::{ExpertWeaveScenario, Popularity, plan, serve, simulated_costs};
use sim::policies::Policies;
use sim::policies::memory::{InstancePlan, MemoryPlan};
use sim::rng::SimRng;
use sim::serving::QueuePolicyConfig;
use sim::serving::step::{StepCost, StepWork};
use std::cell::RefCell;
use std::rc::Rc;

/// `top_k` distinct experts drawn from `p` (by inversion, redrawing repeats).
fn draw_experts(p: &[f64], top_k: usize, rng: &mut SimRng, out: &mut Vec<i32>) {
    let start = out.len();
    let top_k = top_k.min(p.iter().filter(|&&x| x > 0.0).count());
    while out.len() - start < top_k {
        let u: f64 = rng.random();
        let mut acc = 0.0;
        let mut pick = p.len() - 1;
        for (e, &x) in p.iter().enumerate() {
            acc += x;
            if u < acc {
                pick = e;
                break;
            }
        }
        if !out[start..].contains(&(pick as i32)) {
            out.push(pick as i32);
        }
    }
}

/// Runs one step of an ExpertWeave instance on the kernels.
pub struct EwMeasure<'a> {
    scenario: &'a ExpertWeaveScenario,
    instance: &'a InstancePlan,
    /// The routing popularity the step costs assume; live tokens draw their experts from it.
    popularity: &'a Popularity,
    routing: SimRng,
}

impl Measure for EwMeasure<'_> {
    fn measure(&mut self, k: &mut Kernels, work: &StepWork<'_>) -> Result<f64, BackendError> {
        let shape = &self.scenario.shape;
        let n = shape.n_routed_experts as usize;
        let top_k = shape.top_k as usize;
        let instance = self.instance;
        let tokens = (work.prefill_tokens + work.decode_tokens) as usize;
        let variant = match self.scenario.cost.rerouting {
            Rerouting::Fused => RerouteVariant::Fused,
            Rerouting::Unfused => RerouteVariant::Unfused,
        };
        let mut total = 0.0;
        for layer in 0..shape.n_layers {
            let out = shape.layer_non_routed_params(layer).div_ceil(shape.hidden) as usize;
            total += k.dense(out, tokens, 0)?;
        }
        total += k.dense(shape.vocab as usize, tokens, 0)?;
        let popularity = self.popularity;
        let use_adapters = instance.adapter_experts && instance.reroutes;
        for moe_layer in 0..shape.n_moe_layers() as usize {
            // Route every token of the step from its adapter's popularity.
            let mut topk_ids = Vec::with_capacity(tokens * top_k);
            let mut adapter_ids = Vec::with_capacity(tokens);
            for entry in work.adapters {
                let a = entry.adapter as usize;
                let row = instance.adapters.iter().position(|&x| x == a);
                let aid = match row {
                    Some(j) if use_adapters => j as i32,
                    _ => BASE_MODEL,
                };
                for _ in 0..entry.tokens {
                    draw_experts(
                        popularity.probabilities(a, moe_layer),
                        top_k,
                        &mut self.routing,
                        &mut topk_ids,
                    );
                    adapter_ids.push(aid);
                }
            }
            // The virtual weight tensor: base experts, then each served adapter's copies.
            let mut expert_map = Vec::with_capacity(instance.adapters.len() * n);
            let mut next_copy = n as i32;
            for &a in &instance.adapters {
                for (e, &tuned) in popularity.tuned(a, moe_layer).iter().enumerate() {
                    if tuned && use_adapters {
                        expert_map.push(next_copy);
                        next_copy += 1;
                    } else {
                        expert_map.push(e as i32);
                    }
                }
            }
            let rerouted: Vec<i32> = topk_ids
                .iter()
                .enumerate()
                .map(|(i, &id)| match adapter_ids[i / top_k] {
                    BASE_MODEL => id,
                    aid => expert_map[aid as usize * n + id as usize],
                })
                .collect();
            if instance.reroutes && !instance.adapters.is_empty() && tokens > 0 {
                total += k.reroute(
                    RerouteProblem {
                        n_experts: n,
                        top_k,
                        max_adapters: instance.adapters.len(),
                        topk_ids,
                        adapter_ids,
                        expert_map,
                    },
                    variant,
                )?;
            }
            let mut counts = vec![0u32; next_copy as usize];
            for id in rerouted {
                counts[id as usize] += 1;
            }
            total += k.moe(moe_layer, &counts, top_k)?;
        }
        Ok(total)
    }
}

fn instance_name(plan: &MemoryPlan, i: usize) -> String {
    format!("instance {i} (adapters {:?})", plan.instances[i].adapters)
}

/// The memory plan, the first line of each run's decision log.
fn plan_line(plan: &MemoryPlan) -> String {
    format!(
        "memory plan: {}; instances: {}",
        serde_json::json!(plan.report),
        serde_json::json!(plan.instances)
    )
}

/// One seed of `scenario` simulated, then live on `kernels`.
pub fn run(
    scenario: &ExpertWeaveScenario,
    seed: u64,
    policies: &dyn Policies,
    kernels: &mut Kernels,
    clock: Clock,
) -> Result<FamilyRun, LiveError> {
    let memory = &scenario.memory;
    let plan = plan(scenario, policies.adapter_memory(memory).as_mut())
        .map_err(|output| LiveError::Unsupported(output.details["error"].to_string()))?;
    if plan.report.out_of_memory {
        return Err(LiveError::Unsupported(
            "the memory plan is out of memory: live mode has no step to run".into(),
        ));
    }
    let kind = policies.adapter_memory(memory).kind();
    let popularity = scenario.popularity();
    let simulated_log = Rc::new(RefCell::new(Vec::new()));
    let mut logged: Vec<Box<dyn StepCost + '_>> = simulated_costs(scenario, &plan, &popularity)
        .into_iter()
        .enumerate()
        .map(|(i, cost)| {
            Box::new(Logged::new(
                instance_name(&plan, i),
                cost,
                simulated_log.clone(),
            )) as Box<dyn StepCost + '_>
        })
        .collect();
    let simulated = serve(
        scenario,
        seed,
        kind,
        &plan,
        policies.queue_policy(&QueuePolicyConfig::Fcfs).as_mut(),
        &mut logged,
        &mut sim::records::DiscardRecords,
    );
    drop(logged);
    let session = LiveSession::new(kernels, clock);
    let mut live_costs: Vec<Box<dyn StepCost + '_>> = simulated_costs(scenario, &plan, &popularity)
        .into_iter()
        .enumerate()
        .map(|(i, cost)| {
            Box::new(LiveStep::new(
                instance_name(&plan, i),
                cost,
                EwMeasure {
                    scenario,
                    instance: &plan.instances[i],
                    popularity: &popularity,
                    routing: sim::rng::stream(seed, &format!("live/expertweave/routing/{i}")),
                },
                session.clone(),
            )) as Box<dyn StepCost + '_>
        })
        .collect();
    let live = serve(
        scenario,
        seed,
        kind,
        &plan,
        policies.queue_policy(&QueuePolicyConfig::Fcfs).as_mut(),
        &mut live_costs,
        &mut sim::records::DiscardRecords,
    );
    drop(live_costs);
    let session = Rc::try_unwrap(session)
        .ok()
        .expect("the live run's step costs are dropped")
        .into_inner();
    let (steps, live_log) = session.finish()?;
    let mut simulated_lines = vec![plan_line(&plan)];
    simulated_lines.extend(std::mem::take(&mut *simulated_log.borrow_mut()));
    let mut live_lines = vec![plan_line(&plan)];
    live_lines.extend(live_log);
    Ok(FamilyRun {
        steps,
        simulated,
        live,
        decisions: Decisions::compare(
            "the adapter-memory plan, then every step's instance, sequences, prefill tokens, \
             decoding sequences, cached tokens and tokens per adapter",
            simulated_lines,
            live_lines,
        ),
        variability: None,
        execution: None,
    })
}
