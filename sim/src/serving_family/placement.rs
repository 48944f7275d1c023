//! `[placement]`: MOSAIC's expert placement on the serving family. A placement policy
//! (`policies::placement::Placement`: round robin, data parallelism, the ILP, LPT; the
//! `Policies` registry builds it from `placement.policy`) sees one `PlacementProblem` made
//! before the run (per replica group, one model each: its addressed calls, its load time
//! `replica.load` prices, its predicted session time `placement.predicted_session_s`) and
//! returns which of `placement.workers` workers runs which model's sessions, and how many calls
//! each. `planned` turns that plan into the run's replicas: each group gets one replica per
//! session of its model (in worker-major order), each session the plan's count of its model's
//! calls (in arrival order), and `sessions::Sessions` runs each worker's sessions one after
//! another with a load each (and data parallelism's barriers).
//!
//! The predicted session time is given (`placement.predicted_session_s`) or computed per seed
//! by MOSAIC's calibration pass on this family's server (`[placement.calibration]`,
//! `super::session_calibration`). The round-robin and data-parallel policies do not read it.

use super::config::{CallClass, ReplicaGroup, SchedulerTable, ServingScenario};
use super::deployment::Deployment;
use super::session_calibration::CalibrationTable;
use super::sessions::WorkerSessions;
use crate::arrivals::ArrivalSpec;
use crate::policies::placement::{ModelDemand, Placement, PlacementConfig, PlacementProblem};
use crate::validate::{FieldError, field_error, positive};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;

/// `[placement]` as written.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlacementTable {
    /// Workers (one replica's GPUs each) the sessions are placed on.
    pub workers: u32,
    /// The policy: `{ kind = "round_robin" }`, `"data_parallel"`, `"ilp"` (its keys), `"lpt"`.
    pub policy: PlacementConfig,
    /// Per model (as `[[workload.calls]]` names it), its predicted session time for all its
    /// calls, seconds: what the ILP and LPT read.
    #[serde(default)]
    pub predicted_session_s: BTreeMap<String, f64>,
    /// MOSAIC's calibration pass, computing the predicted session times per seed instead.
    #[serde(default)]
    pub calibration: Option<CalibrationTable>,
}

/// `[placement]` validated: per replica group, its predicted session time (0 when not given).
#[derive(Clone, Debug, PartialEq)]
pub struct PlacementSpec {
    pub workers: u32,
    pub policy: PlacementConfig,
    pub predicted_session_s: Vec<f64>,
    /// `[placement.calibration]`: the pass that sets `predicted_session_s` before each run.
    pub calibration: Option<CalibrationTable>,
    /// What that pass measured for the run (`details.placement.calibration`).
    pub calibration_detail: Option<serde_json::Value>,
}

impl PlacementTable {
    /// Checks the table against the validated replica `groups` (the file's `[[replica]]`
    /// tables, `paths[g]` naming each) and `calls`: an offline batch of addressed calls, one
    /// class per group's model, every group addressed, one replica per group as written (the
    /// plan sets the count), continuous scheduling, no adapters; the predicted times named by a
    /// class's model, positive, and given for every model when the policy reads them.
    pub fn validate(
        &self,
        groups: &[ReplicaGroup],
        paths: &[String],
        calls: &[CallClass],
        call_models: &[String],
        arrival: &ArrivalSpec,
        adapters: bool,
    ) -> Result<PlacementSpec, FieldError> {
        if self.workers == 0 {
            return Err(field_error(
                "placement.workers",
                "must be at least 1, got 0",
            ));
        }
        if !matches!(arrival, ArrivalSpec::Offline) {
            return Err(field_error(
                "placement",
                "needs arrival.pattern = \"offline\": a session's calls are all present when \
                 the plan is made and released when the session starts",
            ));
        }
        if calls.is_empty() {
            return Err(field_error(
                "placement",
                "needs [[workload.calls]]: the plan splits each model's addressed calls over \
                 its sessions",
            ));
        }
        if adapters {
            return Err(field_error("placement", "not beside [adapters]"));
        }
        let mut class_of_group = vec![None; groups.len()];
        let mut first = 0;
        for (g, group) in groups.iter().enumerate() {
            let path = &paths[g];
            if group.replica.count != 1 {
                return Err(field_error(
                    &format!("{path}.count"),
                    format!(
                        "is set by the placement plan (one replica per session of {}): leave \
                         it out, got {}",
                        group.model.name(),
                        group.replica.count
                    ),
                ));
            }
            if matches!(group.replica.scheduler, SchedulerTable::Static { .. }) {
                return Err(field_error(
                    &format!("{path}.scheduler"),
                    "a placed session runs continuous batching (vllm, sarathi, orca), not static",
                ));
            }
            for (i, c) in calls.iter().enumerate() {
                if c.replicas.start != first {
                    continue;
                }
                if class_of_group[g].is_some() {
                    return Err(field_error(
                        &format!("workload.calls[{i}].model"),
                        format!(
                            "a second class addressed to {}: with [placement] one class per \
                             model (the plan splits its calls in order)",
                            group.model.name()
                        ),
                    ));
                }
                class_of_group[g] = Some(i);
            }
            if class_of_group[g].is_none() {
                return Err(field_error(
                    &format!("{path}.model"),
                    format!(
                        "no [[workload.calls]] class is addressed to {}: with [placement] every \
                         replica group is a model the plan places",
                        group.model.name()
                    ),
                ));
            }
            first += group.replica.count;
        }
        let calibration = self
            .calibration
            .as_ref()
            .map(CalibrationTable::validate)
            .transpose()?;
        if calibration.is_some() && !self.predicted_session_s.is_empty() {
            return Err(field_error(
                "placement.predicted_session_s",
                "not beside [placement.calibration], which computes each model's predicted \
                 session time: give one or the other",
            ));
        }
        let reads_predictions = calibration.is_none()
            && matches!(
                self.policy,
                PlacementConfig::Ilp { .. } | PlacementConfig::Lpt { .. }
            );
        let mut predicted = vec![0.0; groups.len()];
        for (name, &seconds) in &self.predicted_session_s {
            let path = format!("placement.predicted_session_s.{name}");
            let i = call_models.iter().position(|m| m == name).ok_or_else(|| {
                field_error(
                    &path,
                    format!(
                        "names no [[workload.calls]] model; the classes name {}",
                        call_models.join(", ")
                    ),
                )
            })?;
            let g = class_of_group
                .iter()
                .position(|&c| c == Some(i))
                .expect("every class is a group's");
            // Finite, positive, within the simulated-time ceiling (what the ILP's numbers hold).
            crate::validate::duration(
                &path,
                seconds,
                crate::validate::limits::MAX_SIM_SECONDS_CEILING,
            )?;
            predicted[g] = seconds;
        }
        match self.policy {
            PlacementConfig::Ilp {
                time_limit_s,
                max_models_per_worker: k,
                ..
            } => {
                positive("placement.policy.time_limit_s", time_limit_s)?;
                check_k(k, self.workers, groups.len())?;
            }
            PlacementConfig::Lpt {
                max_models_per_worker: k,
            } => check_k(k, self.workers, groups.len())?,
            _ => {}
        }
        if reads_predictions {
            for (i, name) in call_models.iter().enumerate() {
                if !self.predicted_session_s.contains_key(name) {
                    return Err(field_error(
                        "placement.predicted_session_s",
                        format!(
                            "missing {name} (workload.calls[{i}]): the {} policy reads each \
                             model's predicted session time (or give [placement.calibration] \
                             to compute them)",
                            self.policy.kind()
                        ),
                    ));
                }
            }
        }
        Ok(PlacementSpec {
            workers: self.workers,
            policy: self.policy.clone(),
            predicted_session_s: predicted,
            calibration,
            calibration_detail: None,
        })
    }
}

/// K models per worker over `workers` workers must host every one of the `models`.
fn check_k(k: u32, workers: u32, models: usize) -> Result<(), FieldError> {
    let models = models as u64;
    if u64::from(k) * u64::from(workers) < models {
        return Err(field_error(
            "placement.policy.max_models_per_worker",
            format!(
                "infeasible: {models} models on {workers} workers need K >= ceil({models}/{workers}) \
                 = {}, got {k}",
                models.div_ceil(u64::from(workers))
            ),
        ));
    }
    Ok(())
}

/// The placement problem of `scenario` (its groups as written, one replica each): per group
/// in group order, its calls, its load and its predicted session.
pub fn problem(scenario: &ServingScenario, spec: &PlacementSpec) -> PlacementProblem {
    let models = scenario
        .groups()
        .enumerate()
        .map(|(g, (model, replica))| {
            let prompts = scenario
                .calls
                .iter()
                .find(|c| c.replicas.start == g)
                .map_or(0, |c| c.n_requests as u32);
            let load_s = match (&replica.load, Deployment::new(&scenario.group(g), None)) {
                (Some(load), Ok(d)) => load.duration(d.weights_per_gpu_bytes).as_secs_f64(),
                _ => 0.0,
            };
            let predicted = spec.predicted_session_s[g];
            ModelDemand {
                name: model.name().to_string(),
                prompts,
                load_s,
                predicted_session_s: predicted,
                per_prompt_s: predicted / f64::from(prompts.max(1)),
                replica_cap: PlacementProblem::replica_cap(predicted, load_s, spec.workers),
            }
        })
        .collect();
    PlacementProblem {
        models,
        n_workers: spec.workers,
        max_models_per_worker: spec.policy.max_models_per_worker().unwrap_or(spec.workers),
    }
}

/// `scenario` with its sessions planned by `placement`: each group's `count` the sessions of
/// its model in the plan, the calls' replica ranges renumbered, and `sessions` set; `Err` when
/// the policy finds no plan or breaks its own limits. A scenario without `[placement]` is
/// returned as it is.
pub fn planned(
    scenario: &ServingScenario,
    placement: &mut dyn Placement,
) -> Result<ServingScenario, String> {
    let mut planned = scenario.clone();
    let Some(spec) = &scenario.placement else {
        return Ok(planned);
    };
    let problem = problem(scenario, spec);
    let plan = placement.place(&problem).map_err(|e| e.to_string())?;
    plan.check(&problem, placement.respects_limits())
        .map_err(|v| format!("placement {}: {v}", placement.name()))?;
    let groups = problem.models.len();
    // Each group's sessions, worker-major: (worker, position in its plan, calls).
    let mut sessions: Vec<Vec<(usize, usize, u32)>> = vec![Vec::new(); groups];
    for (w, worker) in plan.workers.iter().enumerate() {
        for (i, s) in worker.iter().enumerate() {
            sessions[s.model].push((w, i, s.prompts));
        }
    }
    // Each group's class of calls (one each, at its one replica as written).
    let class_of: Vec<Option<usize>> = (0..groups)
        .map(|g| scenario.calls.iter().position(|c| c.replicas.start == g))
        .collect();
    let mut workers: Vec<Vec<(usize, usize)>> = vec![Vec::new(); plan.workers.len()];
    let mut calls = Vec::new();
    let mut first = 0;
    for (g, group) in sessions.iter().enumerate() {
        for &(w, i, prompts) in group {
            workers[w].push((i, calls.len()));
            calls.push(u64::from(prompts));
        }
        let count = group.len();
        if g == 0 {
            planned.replica.count = count;
        } else {
            planned.other_groups[g - 1].replica.count = count;
        }
        if let Some(c) = class_of[g] {
            planned.calls[c].replicas = first..first + count;
        }
        first += count;
    }
    let workers: Vec<Vec<usize>> = workers
        .into_iter()
        .map(|mut w| {
            w.sort_unstable();
            w.into_iter().map(|(_, r)| r).collect()
        })
        .collect();
    let mut detail = json!({
        "policy": placement.name(),
        "workers": spec.workers,
        "models": problem.models,
        "plan": plan.workers.iter().map(|w| w.iter().map(|s| json!({
            "model": problem.models[s.model].name,
            "calls": s.prompts,
        })).collect::<Vec<_>>()).collect::<Vec<_>>(),
        "barrier_per_round": plan.barrier_per_round,
        "predicted_makespan_s": problem.predicted_makespan_s(&plan),
        "solver": plan.solver.as_ref().map(|s| json!({
            "status": s.status,
            "objective_s": s.objective_s,
            "bound_s": s.bound_s,
            "gap": s.gap,
            "nodes": s.nodes,
        })),
    });
    if let Some(calibration) = &spec.calibration_detail {
        detail["calibration"] = calibration.clone();
    }
    // The plan's prediction where every model has one (given or calibrated).
    let predicted_makespan_s = problem
        .models
        .iter()
        .all(|m| m.predicted_session_s > 0.0)
        .then(|| problem.predicted_makespan_s(&plan));
    planned.sessions = Some(Arc::new(WorkerSessions {
        workers,
        calls,
        barrier_per_round: plan.barrier_per_round,
        detail,
        predicted_makespan_s,
        solver: plan.solver.clone(),
    }));
    Ok(planned)
}
