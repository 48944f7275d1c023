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
//! With `[workload.questions]` (MOSAIC's run whole) the placed models are the experts' groups,
//! given to the policy in the order the seed's questions first recruit them (MOSAIC's
//! first-seen order, which round robin deals in), each expert's calls taken by its sessions in
//! question order; the aggregator's group runs on the workers once every worker is done, after
//! loading its model (`sessions::Sessions`), so that `aggregator_s` includes its load as
//! MOSAIC's does.
//!
//! The predicted session time is given (`placement.predicted_session_s`) or computed per seed
//! by MOSAIC's calibration pass on this family's server (`[placement.calibration]`,
//! `super::session_calibration`). The round-robin and data-parallel policies do not read it.

use super::config::{CallClass, ReplicaGroup, SchedulerTable, ServingScenario};
use super::deployment::Deployment;
use super::questions::QuestionSpec;
use super::session_calibration::CalibrationTable;
use super::sessions::WorkerSessions;
use crate::arrivals::ArrivalSpec;
use crate::policies::placement::{ModelDemand, Placement, PlacementConfig, PlacementProblem};
use crate::serving::questions::EXPERTS_PER_QUESTION;
use crate::validate::{FieldError, field_error};
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
    /// With `[workload.questions]` and an aggregator: its replica group, which runs on the
    /// workers after the expert stage (not placed by the policy).
    pub aggregator: Option<usize>,
}

/// What every `[placement]` needs: a worker, an offline batch, no adapters.
fn check_common(
    table: &PlacementTable,
    arrival: &ArrivalSpec,
    adapters: bool,
) -> Result<(), FieldError> {
    if table.workers == 0 {
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
    if adapters {
        return Err(field_error("placement", "not beside [adapters]"));
    }
    Ok(())
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
        check_common(self, arrival, adapters)?;
        if calls.is_empty() {
            return Err(field_error(
                "placement",
                "needs [[workload.calls]] or [workload.questions]: the plan splits each \
                 model's addressed calls over its sessions",
            ));
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
        // The placed models: each class's, at its group.
        let placed: Vec<Placed> = call_models
            .iter()
            .enumerate()
            .map(|(i, name)| Placed {
                model: name.clone(),
                group: class_of_group
                    .iter()
                    .position(|&c| c == Some(i))
                    .expect("every class is a group's"),
                origin: format!("workload.calls[{i}]"),
            })
            .collect();
        self.spec(&placed, groups.len(), None, "[[workload.calls]]", None)
    }

    /// Checks the table against a question workload (`[workload.questions]`, validated as
    /// `questions`) on `scenario`'s replica groups (`paths[g]` naming each): an offline batch,
    /// one replica per group as written, each expert its own group with slots, the aggregator's
    /// group its own too and no wider than the workers; the predicted times named by an
    /// expert's model as the file writes it (`names[i]`, expert `i`'s).
    pub fn validate_questions(
        &self,
        scenario: &ServingScenario,
        paths: &[String],
        questions: &QuestionSpec,
        names: &[String],
    ) -> Result<PlacementSpec, FieldError> {
        check_common(self, &scenario.arrival, scenario.adapters.is_some())?;
        let groups: Vec<_> = scenario.groups().collect();
        for (g, (model, replica)) in groups.iter().enumerate() {
            if replica.count != 1 {
                return Err(field_error(
                    &format!("{}.count", paths[g]),
                    format!(
                        "is set by the placement plan (one replica per session of {}): leave \
                         it out, got {}",
                        model.name(),
                        replica.count
                    ),
                ));
            }
        }
        let mut role: Vec<Option<String>> = vec![None; groups.len()];
        let mut placed = Vec::with_capacity(questions.experts.len());
        for (i, e) in questions.experts.iter().enumerate() {
            let at = format!("workload.questions.experts[{i}]");
            let g = e.replicas.start;
            if let Some(other) = &role[g] {
                return Err(field_error(
                    &format!("{at}.group"),
                    format!(
                        "replica group {g} is already {other}'s: with [placement] each expert \
                         is a replica group of its own (its sessions)"
                    ),
                ));
            }
            if e.slots == 0 && e.slots_from_dataset {
                // The benchmark never recruits it (Table 3): its group gets no session.
                role[g] = Some(at);
                continue;
            }
            if e.slots == 0 {
                return Err(field_error(
                    &format!("{at}.slots"),
                    "is 0: a placed expert has calls (leave out an expert the benchmark never \
                     recruits)",
                ));
            }
            role[g] = Some(at.clone());
            placed.push(Placed {
                model: names[i].clone(),
                group: g,
                origin: at,
            });
        }
        let aggregator = match &questions.aggregator {
            None => None,
            Some(a) => {
                let at = "workload.questions.aggregator";
                let g = a.replicas.start;
                if let Some(other) = &role[g] {
                    return Err(field_error(
                        &format!("{at}.group"),
                        format!(
                            "replica group {g} is {other}'s: with [placement] the aggregator \
                             runs on the workers after the expert stage, as a replica group of \
                             its own"
                        ),
                    ));
                }
                let worker_gpus = placed
                    .iter()
                    .map(|p| groups[p.group].1.gpus)
                    .max()
                    .unwrap_or(1);
                let workers_gpus = u64::from(self.workers) * worker_gpus as u64;
                if groups[g].1.gpus as u64 > workers_gpus {
                    return Err(field_error(
                        &format!("{}.gpus", paths[g]),
                        format!(
                            "is {}: the aggregator runs on the workers' GPUs, {} workers x {} \
                             = {workers_gpus}",
                            groups[g].1.gpus, self.workers, worker_gpus
                        ),
                    ));
                }
                role[g] = Some(at.to_string());
                Some(g)
            }
        };
        if let Some(g) = role.iter().position(Option::is_none) {
            return Err(field_error(
                &format!("{}.model", paths[g]),
                format!(
                    "no expert of [workload.questions] and not its aggregator: with \
                     [placement] every replica group is an expert the plan places or the \
                     aggregator ({} here)",
                    groups[g].0.name()
                ),
            ));
        }
        self.spec(
            &placed,
            groups.len(),
            aggregator,
            "[[workload.questions.experts]]",
            Some(questions.calibration_questions * EXPERTS_PER_QUESTION as u32),
        )
    }

    /// The spec of `placed` models among `groups` groups: the predicted times (each named by
    /// one placed model, finite, positive; every model's where the policy reads them), the
    /// policy's K and node budget, the calibration pass (its calls `calibration_calls` unless
    /// written).
    fn spec(
        &self,
        placed: &[Placed],
        groups: usize,
        aggregator: Option<usize>,
        listed_in: &str,
        calibration_calls: Option<u32>,
    ) -> Result<PlacementSpec, FieldError> {
        let calibration = self
            .calibration
            .as_ref()
            .map(|c| c.validate(calibration_calls))
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
        let mut predicted = vec![0.0; groups];
        for (name, &seconds) in &self.predicted_session_s {
            let path = format!("placement.predicted_session_s.{name}");
            let named: Vec<&Placed> = placed.iter().filter(|p| &p.model == name).collect();
            let g = match named.as_slice() {
                [one] => one.group,
                [] => {
                    return Err(field_error(
                        &path,
                        format!(
                            "names no {listed_in} model; they name {}",
                            placed
                                .iter()
                                .map(|p| p.model.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ));
                }
                _ => {
                    return Err(field_error(
                        &path,
                        format!(
                            "{} placed groups serve {name}: a prediction names one model",
                            named.len()
                        ),
                    ));
                }
            };
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
                node_limit,
                max_models_per_worker: k,
                ..
            } => {
                if node_limit == 0 {
                    return Err(field_error(
                        "placement.policy.node_limit",
                        "must be at least 1 (branch-and-bound nodes), got 0",
                    ));
                }
                check_k(k, self.workers, placed.len())?;
            }
            PlacementConfig::Lpt {
                max_models_per_worker: k,
            } => check_k(k, self.workers, placed.len())?,
            _ => {}
        }
        if reads_predictions {
            for p in placed {
                if !self.predicted_session_s.contains_key(&p.model) {
                    return Err(field_error(
                        "placement.predicted_session_s",
                        format!(
                            "missing {} ({}): the {} policy reads each model's predicted \
                             session time (or give [placement.calibration] to compute them)",
                            p.model,
                            p.origin,
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
            aggregator,
            calibration,
            calibration_detail: None,
        })
    }
}

/// A model the policy places: its name, its replica group, where the file lists it.
struct Placed {
    model: String,
    group: usize,
    origin: String,
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

/// The replica groups the policy places, in the order it sees them: with a question workload
/// its experts' groups in the order the questions of `seed` first recruit them (MOSAIC's
/// first-seen order), else every group in file order.
fn placed_groups(scenario: &ServingScenario, seed: u64) -> Vec<usize> {
    match &scenario.questions {
        Some(q) => super::questions::first_seen(q, seed)
            .into_iter()
            .map(|e| q.experts[e].replicas.start)
            .collect(),
        None => (0..1 + scenario.other_groups.len()).collect(),
    }
}

/// The placement problem of `scenario` (its groups as written, one replica each) for `seed`:
/// per placed group (`placed_groups`), its calls (its class's, or its expert's slots), its load
/// and its predicted session.
pub fn problem(scenario: &ServingScenario, spec: &PlacementSpec, seed: u64) -> PlacementProblem {
    let groups: Vec<_> = scenario.groups().collect();
    let models = placed_groups(scenario, seed)
        .into_iter()
        .map(|g| {
            let (model, replica) = groups[g];
            let prompts = match &scenario.questions {
                Some(q) => q
                    .experts
                    .iter()
                    .find(|e| e.replicas.start == g)
                    .map_or(0, |e| e.slots),
                None => scenario
                    .calls
                    .iter()
                    .find(|c| c.replicas.start == g)
                    .map_or(0, |c| c.n_requests as u32),
            };
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

/// `scenario` with its sessions planned by `placement` for `seed`: each placed group's `count`
/// the sessions of its model in the plan, the aggregator's group one replica (run after the
/// expert stage), the calls' replica ranges renumbered, and `sessions` set; `Err` when the
/// policy finds no plan or breaks its own limits. A scenario without `[placement]` is
/// returned as it is.
pub fn planned(
    scenario: &ServingScenario,
    placement: &mut dyn Placement,
    seed: u64,
) -> Result<ServingScenario, String> {
    let mut planned = scenario.clone();
    let Some(spec) = &scenario.placement else {
        return Ok(planned);
    };
    let problem = problem(scenario, spec, seed);
    let plan = placement.place(&problem).map_err(|e| e.to_string())?;
    plan.check(&problem, placement.respects_limits())
        .map_err(|v| format!("placement {}: {v}", placement.name()))?;
    let order = placed_groups(scenario, seed);
    let groups = 1 + scenario.other_groups.len();
    // Each group's sessions, worker-major: (worker, position in its plan, calls).
    let mut sessions: Vec<Vec<(usize, usize, u32)>> = vec![Vec::new(); groups];
    for (w, worker) in plan.workers.iter().enumerate() {
        for (i, s) in worker.iter().enumerate() {
            sessions[order[s.model]].push((w, i, s.prompts));
        }
    }
    let mut workers: Vec<Vec<(usize, usize)>> = vec![Vec::new(); plan.workers.len()];
    let mut calls = Vec::new();
    // Each group's replicas once planned (as written, group `g` is replica `g`).
    let mut ranges = Vec::with_capacity(groups);
    let mut aggregator = None;
    for (g, group) in sessions.iter().enumerate() {
        let first = calls.len();
        if spec.aggregator == Some(g) {
            // The aggregator's one replica, its calls counted as the gate releases them.
            aggregator = Some(first);
            calls.push(0);
        }
        for &(w, i, prompts) in group {
            workers[w].push((i, calls.len()));
            calls.push(u64::from(prompts));
        }
        let count = calls.len() - first;
        if g == 0 {
            planned.replica.count = count;
        } else {
            planned.other_groups[g - 1].replica.count = count;
        }
        ranges.push(first..first + count);
    }
    for c in &mut planned.calls {
        c.replicas = ranges[c.replicas.start].clone();
    }
    if let Some(q) = &mut planned.questions {
        for e in &mut q.experts {
            e.replicas = ranges[e.replicas.start].clone();
        }
        if let Some(a) = &mut q.aggregator {
            a.replicas = ranges[a.replicas.start].clone();
        }
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
        aggregator,
        detail,
        predicted_makespan_s,
        solver: plan.solver.clone(),
    }));
    Ok(planned)
}
