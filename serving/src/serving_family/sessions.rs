//! Workers that run sessions one after another (MOSAIC's expert stage, `[placement]`): each
//! worker is one GPU set that runs its planned sessions in order, a session being one replica of
//! the serving family (its group's model, scheduler and KV cache) that first loads its model
//! (`replica.load`, priced once per session) and then generates the calls the plan gives it,
//! released to it when its load ends. A session ends when its last call finishes; the worker's
//! next session then starts loading. Under data parallelism's barriers
//! (`PlacementPlan::barrier_per_round`) round `r + 1` starts on every worker only once every
//! worker has finished round `r`, and a session without calls still loads its model; without
//! barriers a session without calls is skipped. With a question workload's aggregator
//! (`WorkerSessions::aggregator`), once every worker is done the aggregator's replica (its GPUs
//! the workers') loads its model and generates the calls the gate released, as MOSAIC's
//! aggregator stage does; it does not run when the gate skipped every question. `Sessions` is
//! the bookkeeping the serving
//! server (`server::ServingServer`) consults: which replica a call goes to, whether it is held,
//! and when each session's load ends; `SessionsSummary` what the run did (each worker's wall and
//! idle time), which `details.sessions` reports.

use super::config::ServingScenario;
use crate::serving::QueuedRequest;
use crate::time::{SimDuration, SimTime};
use serde::Serialize;
use serde_json::json;

/// The session plan a placement made, in replica terms (`placement::planned`): replicas are
/// numbered group by group as always, a group's replicas being its model's sessions in
/// worker-major order.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkerSessions {
    /// Per worker, the replicas of its sessions in the order it runs them.
    pub workers: Vec<Vec<usize>>,
    /// Per replica (session), the calls the plan gives it.
    pub calls: Vec<u64>,
    /// Whether round `r + 1` starts only once every worker finished round `r`.
    pub barrier_per_round: bool,
    /// The aggregator's replica, run on the workers after the expert stage (its calls not
    /// planned: `calls` has 0 for it, and it takes those the gate releases).
    pub aggregator: Option<usize>,
    /// What `details.placement` reports: the policy, the problem it saw, its plan, its solver.
    pub detail: serde_json::Value,
    /// The makespan the plan predicts, where every model has a predicted session time.
    pub predicted_makespan_s: Option<f64>,
    /// The MILP solver's report, where the policy solved one.
    pub solver: Option<crate::policies::placement::SolverReport>,
}

impl WorkerSessions {
    /// The replica the `k`-th call addressed to the group whose replicas are `replicas` goes
    /// to: the group's sessions take the calls in order, each as many as the plan gives it.
    pub fn replica_of(&self, replicas: std::ops::Range<usize>, k: u64) -> usize {
        let mut end = 0;
        let last = replicas.end - 1;
        replicas
            .into_iter()
            .find(|&r| {
                end += self.calls[r];
                k < end
            })
            .unwrap_or(last)
    }
}

/// A replica's rows on the timeline and its model load, where it loaded
/// (`Sessions::timeline_places`).
pub type TimelinePlace = (Vec<usize>, Option<(SimTime, SimTime)>);

/// When one session loaded, generated and ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct SessionTimes {
    pub load_start: SimTime,
    pub generate_start: SimTime,
    pub end: SimTime,
}

/// What the workers did: each one's wall (the end of its last session) and its idle time
/// within the expert stage (barrier waits and the tail after its last session, until the last
/// worker is done), MOSAIC's `gpu_idle_pct` over every worker.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SessionsSummary {
    /// When the last worker finished its last session, seconds.
    pub makespan_s: f64,
    pub worker_walls_s: Vec<f64>,
    pub worker_idle_s: Vec<f64>,
    /// The workers' idle time over workers x makespan, %.
    pub idle_pct: f64,
    /// Sessions that loaded their model, and their loads' total time, seconds.
    pub loads: u32,
    pub load_time_s: f64,
    /// When each barrier released the workers (rounds 1, 2, ...), seconds.
    pub barriers_s: Vec<f64>,
}

/// The sessions of a run in progress.
pub struct Sessions {
    plan: std::sync::Arc<WorkerSessions>,
    /// Per replica, its model load.
    load: Vec<SimDuration>,
    /// Per replica, calls not finished (or refused) yet (the aggregator's: those held for it).
    remaining: Vec<u64>,
    /// Per replica, calls routed to it so far (`route`).
    routed: Vec<u64>,
    /// Per replica, the calls routed to it before its session started generating.
    held: Vec<Vec<QueuedRequest>>,
    /// Per replica, whether its session has started generating, and its times once started.
    generating: Vec<bool>,
    times: Vec<Option<SessionTimes>>,
    /// Per worker, the position of its current (or next) session in its plan.
    next: Vec<usize>,
    /// Per worker, when its last session so far ended (its wall once the run is over).
    worker_end: Vec<SimTime>,
    /// Under barriers: workers done with the current round, the round, the rounds.
    arrived: usize,
    round: usize,
    rounds: usize,
    barriers: Vec<SimTime>,
    /// Workers done with every session (without barriers), and when the last was.
    done: usize,
    expert_end: Option<SimTime>,
    /// Whether the aggregator's start was decided (`start_aggregator`).
    aggregator_decided: bool,
}

impl Sessions {
    /// The bookkeeping of `plan`, replica `r` loading for `load[r]`.
    pub fn new(plan: std::sync::Arc<WorkerSessions>, load: Vec<SimDuration>) -> Sessions {
        let replicas = plan.calls.len();
        let workers = plan.workers.len();
        Sessions {
            remaining: plan.calls.clone(),
            routed: vec![0; replicas],
            held: vec![Vec::new(); replicas],
            generating: vec![false; replicas],
            times: vec![None; replicas],
            next: vec![0; workers],
            worker_end: vec![SimTime::ZERO; workers],
            arrived: 0,
            round: 0,
            rounds: plan.workers.iter().map(Vec::len).max().unwrap_or(0),
            barriers: Vec::new(),
            done: 0,
            expert_end: None,
            aggregator_decided: false,
            load,
            plan,
        }
    }

    /// The replica the next call addressed to the group whose replicas are `replicas` goes to
    /// (`WorkerSessions::replica_of` with the group's count of calls so far): a question
    /// workload's calls, whose groups interleave.
    pub fn route(&mut self, replicas: std::ops::Range<usize>) -> usize {
        let k = self.routed[replicas.start];
        self.routed[replicas.start] += 1;
        self.plan.replica_of(replicas, k)
    }

    /// Whether replica `r` is the aggregator's.
    pub fn is_aggregator(&self, r: usize) -> bool {
        self.plan.aggregator == Some(r)
    }

    /// When the expert stage ended (the last worker done with its sessions), once it has.
    pub fn expert_end(&self) -> Option<SimTime> {
        self.expert_end
    }

    /// Once the expert stage is over (and every call the gate released by then is held for
    /// the aggregator, so the server calls this after each event's submissions): the
    /// aggregator's session starts loading at the stage's end, if it has calls; `starts` gets
    /// the end of its load.
    pub fn start_aggregator(&mut self, starts: &mut Vec<(usize, SimTime)>) {
        let (Some(r), Some(end), false) = (
            self.plan.aggregator,
            self.expert_end,
            self.aggregator_decided,
        ) else {
            return;
        };
        self.aggregator_decided = true;
        if !self.held[r].is_empty() {
            self.start_session(r, end, starts);
        }
    }

    /// Replica `r`'s session has not started generating: a call routed to it waits.
    pub fn holds(&self, r: usize) -> bool {
        !self.generating[r]
    }

    /// Holds `request` for replica `r` until its session starts generating (the aggregator
    /// counts it as one more call to serve).
    pub fn hold(&mut self, r: usize, request: QueuedRequest) {
        if self.is_aggregator(r) {
            self.remaining[r] += 1;
        }
        self.held[r].push(request);
    }

    /// Every worker starts its first session at time zero; `starts` gets each (replica, end
    /// of its load).
    pub fn start(&mut self, starts: &mut Vec<(usize, SimTime)>) {
        for w in 0..self.plan.workers.len() {
            if self.plan.barrier_per_round {
                self.start_round(w, SimTime::ZERO, starts);
            } else {
                self.worker_free(w, SimTime::ZERO, starts);
            }
        }
    }

    /// Replica `r`'s load ended at `now`: its held calls, to be submitted now; when it has
    /// none left to serve its session ends here (`starts` gets what starts next).
    pub fn released(
        &mut self,
        r: usize,
        now: SimTime,
        starts: &mut Vec<(usize, SimTime)>,
    ) -> Vec<QueuedRequest> {
        self.generating[r] = true;
        if let Some(t) = &mut self.times[r] {
            t.generate_start = now;
        }
        let held = std::mem::take(&mut self.held[r]);
        if self.remaining[r] == 0 && held.is_empty() {
            self.session_end(r, now, starts);
        }
        held
    }

    /// One of replica `r`'s calls finished (or was refused) at `now`: when it was the session's
    /// last and the session is generating, the session ends (`starts` gets what starts next).
    pub fn call_done(&mut self, r: usize, now: SimTime, starts: &mut Vec<(usize, SimTime)>) {
        self.remaining[r] = self.remaining[r].saturating_sub(1);
        if self.remaining[r] == 0 && self.generating[r] {
            self.session_end(r, now, starts);
        }
    }

    fn worker_of(&self, r: usize) -> usize {
        self.plan
            .workers
            .iter()
            .position(|w| w.contains(&r))
            .expect("every session is on a worker")
    }

    fn session_end(&mut self, r: usize, now: SimTime, starts: &mut Vec<(usize, SimTime)>) {
        if let Some(t) = &mut self.times[r] {
            t.end = now;
        }
        if self.is_aggregator(r) {
            return;
        }
        let w = self.worker_of(r);
        self.worker_end[w] = now;
        self.next[w] += 1;
        self.worker_free(w, now, starts);
    }

    /// Worker `w` is free at `now`: it starts its next session (without barriers, skipping
    /// those without calls), waits at the barrier, or is done.
    fn worker_free(&mut self, w: usize, now: SimTime, starts: &mut Vec<(usize, SimTime)>) {
        if self.plan.barrier_per_round {
            self.arrived += 1;
            if self.arrived == self.plan.workers.len() {
                self.arrived = 0;
                self.round += 1;
                if self.round < self.rounds {
                    self.barriers.push(now);
                    for w in 0..self.plan.workers.len() {
                        self.start_round(w, now, starts);
                    }
                } else {
                    self.expert_end = Some(now);
                }
            }
            return;
        }
        let sessions = &self.plan.workers[w];
        while self.next[w] < sessions.len() && self.plan.calls[sessions[self.next[w]]] == 0 {
            self.next[w] += 1;
        }
        if let Some(&r) = sessions.get(self.next[w]) {
            self.start_session(r, now, starts);
        } else {
            self.done += 1;
            if self.done == self.plan.workers.len() {
                self.expert_end = Some(now);
            }
        }
    }

    /// Under barriers, worker `w` starts its session of the current round at `now`, or (with
    /// none) goes straight to the next barrier.
    fn start_round(&mut self, w: usize, now: SimTime, starts: &mut Vec<(usize, SimTime)>) {
        match self.plan.workers[w].get(self.next[w]) {
            Some(&r) => self.start_session(r, now, starts),
            None => self.worker_free(w, now, starts),
        }
    }

    fn start_session(&mut self, r: usize, now: SimTime, starts: &mut Vec<(usize, SimTime)>) {
        let loaded = now + self.load[r];
        self.times[r] = Some(SessionTimes {
            load_start: now,
            generate_start: loaded,
            end: loaded,
        });
        starts.push((r, loaded));
    }

    /// What the workers did, once the run is over.
    pub fn summary(&self) -> SessionsSummary {
        let walls: Vec<f64> = self.worker_end.iter().map(|t| t.as_secs_f64()).collect();
        let makespan_s = walls.iter().copied().fold(0.0, f64::max);
        let mut loads = 0;
        let mut load_time_s = 0.0;
        let idle: Vec<f64> = self
            .plan
            .workers
            .iter()
            .map(|sessions| {
                let busy: f64 = sessions
                    .iter()
                    .filter_map(|&r| self.times[r])
                    .map(|t| (t.end - t.load_start).as_secs_f64())
                    .sum();
                makespan_s - busy
            })
            .collect();
        // The expert stage's loads (the aggregator's is its stage's).
        for (r, t) in self.times.iter().enumerate() {
            if let Some(t) = t
                && !self.is_aggregator(r)
            {
                loads += 1;
                load_time_s += (t.generate_start - t.load_start).as_secs_f64();
            }
        }
        let workers = self.plan.workers.len() as f64;
        SessionsSummary {
            makespan_s,
            idle_pct: if makespan_s > 0.0 {
                100.0 * idle.iter().sum::<f64>() / (workers * makespan_s)
            } else {
                0.0
            },
            worker_walls_s: walls,
            worker_idle_s: idle,
            loads,
            load_time_s,
            barriers_s: self.barriers.iter().map(|t| t.as_secs_f64()).collect(),
        }
    }

    /// The timeline's rows (`worker w`) and each replica's place on them: a session on its
    /// worker's row with its load as it ran (none when it did not run), the aggregator's on
    /// every worker's.
    pub fn timeline_places(&self) -> (Vec<String>, Vec<TimelinePlace>) {
        let workers = self.plan.workers.len();
        let places = (0..self.plan.calls.len())
            .map(|r| {
                let rows = if self.is_aggregator(r) {
                    (0..workers).collect()
                } else {
                    let on = |w: &Vec<usize>| w.contains(&r);
                    self.plan.workers.iter().position(on).into_iter().collect()
                };
                (
                    rows,
                    self.times[r].map(|t| (t.load_start, t.generate_start)),
                )
            })
            .collect();
        (
            (0..workers).map(|w| format!("worker {w}")).collect(),
            places,
        )
    }

    /// `details.sessions`: the summary, and per worker its sessions (replica, model, calls,
    /// load start, generation start, end; seconds) in the order it ran them.
    pub fn detail(&self, scenario: &ServingScenario) -> serde_json::Value {
        let models: Vec<&str> = scenario
            .groups()
            .flat_map(|(model, r)| std::iter::repeat_n(model.name(), r.count))
            .collect();
        let workers: Vec<serde_json::Value> = self
            .plan
            .workers
            .iter()
            .map(|sessions| {
                sessions
                    .iter()
                    .filter_map(|&r| self.times[r].map(|t| (r, t)))
                    .map(|(r, t)| {
                        json!({
                            "replica": r,
                            "model": models[r],
                            "calls": self.plan.calls[r],
                            "load_start_s": t.load_start.as_secs_f64(),
                            "generate_start_s": t.generate_start.as_secs_f64(),
                            "end_s": t.end.as_secs_f64(),
                        })
                    })
                    .collect()
            })
            .collect();
        let mut detail = serde_json::to_value(self.summary()).expect("serializable");
        detail["workers"] = json!(workers);
        // The aggregator's session on the workers, when it ran.
        if let Some(r) = self.plan.aggregator
            && let Some(t) = self.times[r]
        {
            detail["aggregator"] = json!({
                "replica": r,
                "model": models[r],
                "calls": self.routed[r],
                "load_start_s": t.load_start.as_secs_f64(),
                "generate_start_s": t.generate_start.as_secs_f64(),
                "end_s": t.end.as_secs_f64(),
            });
        }
        detail
    }
}

#[cfg(test)]
mod tests {
    //! Sessions against schedules worked out by hand: on one worker the second session starts
    //! at the first's last finish and generates after its own load, each session's generation
    //! exactly a resident replica's run of the same calls; a barrier holds a fast worker, and a
    //! worker without calls of a model still loads it; a bad `[placement]` is refused naming
    //! its field (its file and line: `expertsim-scenario`'s loader checks).

    use super::super::placement::planned;
    use super::super::tests::{Fifo, Linear, Turns, resident_makespan_s, run, scenario};
    use crate::metrics::RunOutput;
    use crate::policies::placement::{
        Placement, PlacementError, PlacementPlan, PlacementProblem, Session,
    };
    use crate::time::SimTime;

    /// A placement that returns the plan it was given (the `strategies` crate's policies are
    /// out of this crate's reach).
    struct Given(PlacementPlan);
    impl Placement for Given {
        fn name(&self) -> &'static str {
            "given"
        }
        fn respects_limits(&self) -> bool {
            false
        }
        fn place(&mut self, _: &PlacementProblem) -> Result<PlacementPlan, PlacementError> {
            Ok(self.0.clone())
        }
    }

    /// Llama-2-7B (load 10 s) and Qwen2.5-7B (load 5 s) on H100s, 4 Llama calls then 3 Qwen
    /// calls of fixed lengths, offline, on two workers.
    fn placed_text() -> String {
        super::super::fixtures::placed()
    }

    fn placed(plan: Vec<Vec<(usize, u32)>>, barrier: bool) -> RunOutput {
        let plan = PlacementPlan {
            workers: plan
                .into_iter()
                .map(|w| {
                    w.into_iter()
                        .map(|(model, prompts)| Session { model, prompts })
                        .collect()
                })
                .collect(),
            barrier_per_round: barrier,
            solver: None,
        };
        let s =
            planned(&scenario(&placed_text()).unwrap(), &mut Given(plan), 0).expect("a valid plan");
        run(&s, 0)
    }

    fn session(out: &RunOutput, w: usize, i: usize) -> (f64, f64, f64, u64) {
        let s = &out.details["sessions"]["workers"][w][i];
        (
            s["load_start_s"].as_f64().unwrap(),
            s["generate_start_s"].as_f64().unwrap(),
            s["end_s"].as_f64().unwrap(),
            s["calls"].as_u64().unwrap(),
        )
    }

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 2e-9, "{a} != {b}");
    }

    #[test]
    fn a_workers_sessions_run_one_after_another_each_loading_its_model() {
        // Worker 0: 3 Llama calls; worker 1: the 4th Llama call, then the 3 Qwen calls.
        let out = placed(vec![vec![(0, 3)], vec![(0, 1), (1, 3)]], false);
        let llama3 = resident_makespan_s("llama-2-7b", 3, 300, 40);
        let llama1 = resident_makespan_s("llama-2-7b", 1, 300, 40);
        let qwen3 = resident_makespan_s("qwen2.5-7b-instruct", 3, 200, 60);
        let (l0, g0, e0, c0) = session(&out, 0, 0);
        assert_eq!((l0, g0, c0), (0.0, 10.0, 3));
        close(e0, 10.0 + llama3);
        let (l1, g1, e1, c1) = session(&out, 1, 0);
        assert_eq!((l1, g1, c1), (0.0, 10.0, 1));
        close(e1, 10.0 + llama1);
        // The second session loads from the first's last finish, then generates its calls.
        let (l2, g2, e2, c2) = session(&out, 1, 1);
        assert_eq!((l2, c2), (e1, 3));
        close(g2, e1 + 5.0);
        close(e2, g2 + qwen3);
        let summary = &out.details["sessions"];
        close(summary["worker_walls_s"][0].as_f64().unwrap(), e0);
        close(summary["worker_walls_s"][1].as_f64().unwrap(), e2);
        assert_eq!(summary["loads"], 3);
        close(summary["load_time_s"].as_f64().unwrap(), 25.0);
        // Each session is a replica serving exactly the plan's calls, timed from its release.
        let completed = |r: usize| out.details["replicas"][r]["metrics"]["completed"].as_f64();
        assert_eq!(
            [completed(0), completed(1), completed(2)],
            [Some(3.0), Some(1.0), Some(3.0)]
        );
        let makespan = out.scalar("makespan_s").unwrap();
        close(makespan, e0.max(e2));
        let idle: f64 = (0..2)
            .map(|w| summary["worker_idle_s"][w].as_f64().unwrap())
            .sum();
        close(
            summary["idle_pct"].as_f64().unwrap(),
            100.0 * idle / (2.0 * makespan),
        );
    }

    #[test]
    fn a_barrier_holds_a_fast_worker_and_an_idle_one_still_loads() {
        // Data parallelism: Llama's 4 calls 3 / 1, then Qwen's 3 calls 3 / 0.
        let out = placed(vec![vec![(0, 3), (1, 3)], vec![(0, 1), (1, 0)]], true);
        let (_, _, slow_end, _) = session(&out, 0, 0);
        let (_, _, fast_end, _) = session(&out, 1, 0);
        assert!(fast_end < slow_end, "worker 1 has fewer calls");
        // Round 1 starts on both workers at the slow worker's end: the barrier.
        for w in 0..2 {
            let (load, generate, _, _) = session(&out, w, 1);
            assert_eq!(load, slow_end);
            close(generate, slow_end + 5.0);
        }
        close(
            out.details["sessions"]["barriers_s"][0].as_f64().unwrap(),
            slow_end,
        );
        // Worker 1's Qwen session has no call, and loads all the same.
        let (_, generate, end, calls) = session(&out, 1, 1);
        assert_eq!((calls, end), (0, generate));
        assert_eq!(out.details["sessions"]["loads"], 4);
        // Its idle time: the wait at the barrier and the tail after its empty session.
        let (_, _, last, _) = session(&out, 0, 1);
        close(
            out.details["sessions"]["worker_idle_s"][1]
                .as_f64()
                .unwrap(),
            (slow_end - fast_end) + (last - end),
        );
        // Without the barrier the empty session is skipped and the fast worker goes on.
        let free = placed(vec![vec![(0, 3), (1, 3)], vec![(0, 1), (1, 0)]], false);
        assert_eq!(
            free.details["sessions"]["workers"][1]
                .as_array()
                .unwrap()
                .len(),
            1
        );
        assert_eq!(session(&free, 0, 1).0, slow_end);
    }

    /// `details.timeline`'s rows as (kind, model, start, end), checking that they tile
    /// [0, `end`] without a gap.
    fn timeline_rows(out: &RunOutput, end: f64) -> Vec<Vec<(String, String, f64, f64)>> {
        let rows = out.details["timeline"]["rows"]
            .as_array()
            .expect("a timeline");
        rows.iter()
            .map(|row| {
                let segments: Vec<(String, String, f64, f64)> = row["segments"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|s| {
                        (
                            s["kind"].as_str().unwrap().to_string(),
                            s["model"].as_str().unwrap_or("").to_string(),
                            s["start_s"].as_f64().unwrap(),
                            s["end_s"].as_f64().unwrap(),
                        )
                    })
                    .collect();
                let mut at = 0.0;
                for (_, _, start, stop) in &segments {
                    close(*start, at);
                    assert!(stop > start, "an empty segment in {row}");
                    at = *stop;
                }
                close(at, end);
                segments
            })
            .collect()
    }

    #[test]
    fn the_timeline_has_each_workers_loads_runs_and_idle_time_as_its_sessions_ran() {
        // Data parallelism as in the barrier test: worker 1 waits at the barrier, then loads
        // Qwen for no call and idles to the end.
        let plan = vec![vec![(0, 3), (1, 3)], vec![(0, 1), (1, 0)]];
        let given = PlacementPlan {
            workers: plan
                .iter()
                .map(|w| {
                    w.iter()
                        .map(|&(model, prompts)| Session { model, prompts })
                        .collect()
                })
                .collect(),
            barrier_per_round: true,
            solver: None,
        };
        let text = format!("{}[output]\ntimeline = true\n", placed_text());
        let s = planned(&scenario(&text).unwrap(), &mut Given(given), 0).unwrap();
        let out = run(&s, 0);
        let end = out.scalar("makespan_s").unwrap();
        let rows = timeline_rows(&out, end);
        let labels: Vec<&str> = out.details["timeline"]["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["label"].as_str().unwrap())
            .collect();
        assert_eq!(labels, ["worker 0", "worker 1"]);
        assert_eq!(out.details["timeline"]["resolution_s"], 0.0);
        let model = |i: usize| {
            out.details["sessions"]["workers"][0][i]["model"]
                .as_str()
                .unwrap()
                .to_string()
        };
        let (llama, qwen) = (&model(0), &model(1));
        let shape = |row: &[(String, String, f64, f64)]| -> Vec<(String, String)> {
            row.iter()
                .map(|(k, m, _, _)| (k.clone(), m.clone()))
                .collect()
        };
        let pair = |k: &str, m: &str| (k.to_string(), m.to_string());
        assert_eq!(
            shape(&rows[0]),
            [
                pair("load", llama),
                pair("run", llama),
                pair("load", qwen),
                pair("run", qwen)
            ]
        );
        assert_eq!(
            shape(&rows[1]),
            [
                pair("load", llama),
                pair("run", llama),
                pair("idle", ""),
                pair("load", qwen),
                pair("idle", "")
            ]
        );
        // Every load and run is its session's, to the nanosecond.
        for (w, i, load, run) in [(0, 0, 0, 1), (0, 1, 2, 3), (1, 0, 0, 1)] {
            let (load_start, generate_start, session_end, _) = session(&out, w, i);
            assert_eq!(
                (rows[w][load].2, rows[w][load].3),
                (load_start, generate_start)
            );
            assert_eq!(
                (rows[w][run].2, rows[w][run].3),
                (generate_start, session_end)
            );
        }
        // The empty session's load after the barrier, and the idle time before and after it.
        let (load_start, generate_start, _, calls) = session(&out, 1, 1);
        assert_eq!(calls, 0);
        assert_eq!((rows[1][3].2, rows[1][3].3), (load_start, generate_start));
        // Without the key the run is the same and its details have no timeline.
        let plain = placed(plan, true);
        assert!(plain.details.get("timeline").is_none());
        let bits = |o: &RunOutput| -> Vec<(String, u64)> {
            o.scalars
                .iter()
                .map(|(n, v)| (n.clone(), v.to_bits()))
                .collect()
        };
        assert_eq!(bits(&plain), bits(&out));
        let mut details = out.details.clone();
        details.as_object_mut().unwrap().remove("timeline");
        assert_eq!(plain.details, details);
    }

    #[test]
    fn a_resident_replicas_timeline_is_its_load_then_its_busy_steps_and_idle_gaps() {
        // One H100 loading Llama-2-7B for 10 s, 40 Poisson arrivals at 0.2 a second: the
        // replica runs, empties, idles until the next arrival, and so on.
        let text = "[model]\nname = \"llama-2-7b\"\n[replica]\ngpu = \"H100-SXM\"\n\
                    load = { kind = \"fixed\", seconds = 10.0 }\n[workload]\nn_requests = 40\n\
                    prompt_tokens = { kind = \"fixed\", value = 100 }\n\
                    output_tokens = { kind = \"fixed\", value = 20 }\n[arrival]\n\
                    pattern = \"poisson\"\nrate_per_s = 0.2\n[output]\ntimeline = true\n";
        let out = run(&scenario(text).unwrap(), 0);
        let end = out.scalar("makespan_s").unwrap();
        let rows = timeline_rows(&out, end);
        assert_eq!(out.details["timeline"]["rows"][0]["label"], "replica 0");
        let row = &rows[0];
        assert_eq!((row[0].0.as_str(), row[0].2, row[0].3), ("load", 0.0, 10.0));
        let runs = row.iter().filter(|s| s.0 == "run").count();
        let idles = row.iter().filter(|s| s.0 == "idle").count();
        assert!(
            runs > 5 && idles + 1 >= runs,
            "{runs} runs, {idles} idle gaps"
        );
        // Runs and idle gaps alternate after the load (steps back to back are one run).
        for pair in row[1..].windows(2) {
            assert_ne!(pair[0].0, pair[1].0, "{row:?}");
        }
        assert_eq!(
            row.last().unwrap().0,
            "run",
            "the run ends with its last step"
        );
    }

    /// GPQA's 198 questions recruited to two experts (Llama-2-7B, 300 slots, loading 10 s;
    /// Qwen2.5-7B, 294 slots, 5 s; short outputs so the run is cheap) on two H100 workers, the
    /// aggregator DeepSeek-R1-Distill-Qwen-7B at TP = 2 (the two workers' GPUs, loading 7 s),
    /// released after the expert stage.
    fn questions() -> String {
        super::super::fixtures::placed_questions()
    }

    /// Each finished request: its replica and when it was submitted.
    #[derive(Default)]
    struct Submitted(Vec<(u64, SimTime)>);
    impl crate::records::RecordSink for Submitted {
        fn record(&mut self, r: &crate::records::RequestRecord<'_>) {
            let crate::records::Extra::Count(replica) = r.extra[0] else {
                panic!("the first column is the replica");
            };
            self.0.push((replica, r.arrival));
        }
    }

    /// A gate by plurality: skips a question whose plurality (of k = 3 votes) is at least the
    /// given one (3: tau = 1; 1: every question).
    struct AtLeast(u32);
    impl crate::policies::gate::AggregationGate for AtLeast {
        fn name(&self) -> &'static str {
            "at_least"
        }
        fn skip(&mut self, votes: &crate::policies::gate::Votes) -> bool {
            votes.plurality >= self.0
        }
    }

    /// Round robin (each worker all the calls of the model it is dealt, in the order the
    /// problem lists them) planned and served for `seed` under `gate`.
    fn served_questions(seed: u64, gate: u32) -> (Vec<usize>, Submitted, RunOutput) {
        let s = scenario(&questions()).unwrap();
        let order = super::super::questions::first_seen(s.questions.as_ref().unwrap(), seed);
        let slots = [300, 294];
        let plan = PlacementPlan {
            workers: (0..2)
                .map(|w| {
                    vec![Session {
                        model: w,
                        prompts: slots[order[w]],
                    }]
                })
                .collect(),
            barrier_per_round: false,
            solver: None,
        };
        let planned = planned(&s, &mut Given(plan), seed).expect("a valid plan");
        let mut p = super::super::ScenarioPolicies {
            queue: Box::new(Fifo::default()),
            router: Box::new(Turns::default()),
            mapper: Box::new(Linear),
            selectors: Vec::new(),
            memory: None,
            gate: Some(Box::new(AtLeast(gate))),
        };
        let mut records = Submitted::default();
        let out = super::super::run_policies(&planned, seed, &mut p, &mut records, None).unwrap();
        assert!(out.details.get("failed").is_none(), "{}", out.details);
        (order, records, out)
    }

    #[test]
    fn questions_run_on_the_workers_then_the_aggregator_reloads_on_them() {
        // Seeds whose questions first recruit Qwen (expert 1) and Llama: the problem lists the
        // models in that order, so round robin deals Qwen to worker 0 there.
        let order_of = |seed| {
            let s = scenario(&questions()).unwrap();
            super::super::questions::first_seen(s.questions.as_ref().unwrap(), seed)
        };
        let qwen_first = (0..64).find(|&seed| order_of(seed) == [1, 0]).unwrap();
        assert!((0..64).any(|seed| order_of(seed) == [0, 1]));
        let (order, records, out) = served_questions(qwen_first, 3);
        assert_eq!(order, [1, 0]);
        let written = scenario(&questions()).unwrap();
        let names: Vec<&str> = written.groups().map(|(m, _)| m.name()).collect();
        let loads = [10.0, 5.0];
        assert_eq!(out.details["placement"]["models"][0]["name"], names[1]);
        // Each worker: one session of the model it was dealt, loading from 0, all its calls.
        let sessions = &out.details["sessions"];
        let mut expert_end: f64 = 0.0;
        for (w, &e) in order.iter().enumerate() {
            let (load, generate, end, calls) = session(&out, w, 0);
            assert_eq!(sessions["workers"][w][0]["model"], names[e]);
            assert_eq!((load, generate), (0.0, loads[e]));
            assert_eq!(calls, [300, 294][e]);
            expert_end = expert_end.max(end);
        }
        close(out.scalar("expert_makespan_s").unwrap(), expert_end);
        // The expert stage's loads only: two, 15 s.
        assert_eq!(sessions["loads"], 2);
        close(sessions["load_time_s"].as_f64().unwrap(), 15.0);
        // The aggregator: loads on the workers from the stage's end, generates 7 s later the
        // 124 questions tau = 1 does not skip (GPQA's 74 of 198 unanimous), all submitted
        // then; its last finish ends the run.
        let agg = &sessions["aggregator"];
        assert_eq!(agg["replica"], 2);
        assert_eq!(agg["calls"], 124);
        close(agg["load_start_s"].as_f64().unwrap(), expert_end);
        let generate = agg["generate_start_s"].as_f64().unwrap();
        close(generate, expert_end + 7.0);
        let end = agg["end_s"].as_f64().unwrap();
        close(out.scalar("end_to_end_s").unwrap(), end);
        close(out.scalar("aggregator_s").unwrap(), 7.0 + (end - generate));
        let t = SimTime::from_secs_f64;
        let on = |r: u64| records.0.iter().filter(move |c| c.0 == r);
        assert_eq!(on(2).count(), 124);
        assert!(on(2).all(|c| c.1 == t(generate)));
        // Each expert call is submitted when its session (expert e's group, replica e) starts
        // generating.
        for (e, (&load, slots)) in loads.iter().zip([300, 294]).enumerate() {
            assert_eq!(on(e as u64).count(), slots);
            assert!(on(e as u64).all(|c| c.1 == t(load)));
        }
        // A gate that skips every question: the aggregator never loads.
        let (_, records, out) = served_questions(qwen_first, 1);
        assert!(out.details["sessions"].get("aggregator").is_none());
        assert_eq!(records.0.len(), 594);
        assert_eq!(out.scalar("aggregator_s"), Some(0.0));
        close(
            out.scalar("end_to_end_s").unwrap(),
            out.scalar("expert_makespan_s").unwrap(),
        );
    }

    /// The hybrid pool's six experts without slots or a question count, the aggregator beside:
    /// the benchmark's Table 3 gives both, so one file sweeps `workload.questions.dataset`.
    fn hybrid(dataset: &str) -> String {
        let mut text = String::new();
        let models = crate::serving::questions::HYBRID_MODELS.map(|(_, m)| m);
        for model in models.iter().chain(["deepseek-r1-distill-qwen-7b"].iter()) {
            text += &format!(
                "[[replica]]\nmodel = \"{model}\"\ngpu = \"H100-SXM\"\n\
                 load = {{ kind = \"fixed\", seconds = 1.0 }}\n"
            );
        }
        text += &format!(
            "[workload]\n[workload.questions]\ndataset = \"{dataset}\"\n\
             release = \"after_experts\"\ngate = {{ kind = \"none\" }}\n"
        );
        for (g, model) in models.iter().enumerate() {
            text += &format!(
                "[[workload.questions.experts]]\nmodel = \"{model}\"\ngroup = {g}\n\
                 output_tokens = {{ mean = 10.0, sigma = 0.5, max = 100 }}\n"
            );
        }
        text + "[workload.questions.aggregator]\nmodel = \"deepseek-r1-distill-qwen-7b\"\n\
                group = 6\noutput_tokens = { mean = 10.0, sigma = 0.5, max = 100 }\n\
                [arrival]\npattern = \"offline\"\n[placement]\nworkers = 4\n\
                policy = { kind = \"round_robin\" }\n"
    }

    #[test]
    fn a_benchmark_gives_its_slots_and_questions_and_an_unrecruited_expert_no_session() {
        for (dataset, questions, slots) in [
            ("mmlu_pro", 2100, [1070, 1428, 1632, 547, 667, 956]),
            ("gpqa", 198, [429, 158, 4, 3, 0, 0]),
        ] {
            let s = scenario(&hybrid(dataset)).unwrap();
            assert_eq!(s.n_requests, questions, "{dataset}");
            let q = s.questions.as_ref().unwrap();
            let got: Vec<u32> = q.experts.iter().map(|e| e.slots).collect();
            assert_eq!(got, slots, "{dataset}");
        }
        // GPQA on four workers: the four recruited experts one session each, GLM's and Qwen's
        // groups none; every question's three calls served, then 198 aggregator calls.
        let s = scenario(&hybrid("gpqa")).unwrap();
        let order = super::super::questions::first_seen(s.questions.as_ref().unwrap(), 0);
        assert_eq!(order.len(), 4);
        let slots = [429, 158, 4, 3];
        let plan = PlacementPlan {
            workers: (0..4)
                .map(|w| {
                    vec![Session {
                        model: w,
                        prompts: slots[order[w]],
                    }]
                })
                .collect(),
            barrier_per_round: false,
            solver: None,
        };
        let planned = planned(&s, &mut Given(plan), 0).expect("a valid plan");
        let counts: Vec<usize> = planned.groups().map(|(_, r)| r.count).collect();
        assert_eq!(counts, [1, 1, 1, 1, 0, 0, 1]);
        let mut p = super::super::ScenarioPolicies {
            queue: Box::new(Fifo::default()),
            router: Box::new(Turns::default()),
            mapper: Box::new(Linear),
            selectors: Vec::new(),
            memory: None,
            gate: Some(Box::new(AtLeast(4))),
        };
        let mut records = Submitted::default();
        let out = super::super::run_policies(&planned, 0, &mut p, &mut records, None).unwrap();
        assert!(out.details.get("failed").is_none(), "{}", out.details);
        assert_eq!(records.0.len(), 594 + 198);
        assert_eq!(out.details["sessions"]["loads"], 4);
        // Written as 0, an expert is still refused (leave it out).
        let e = scenario(&hybrid("gpqa").replacen("group = 4\n", "group = 4\nslots = 0\n", 1))
            .expect_err("written 0");
        assert_eq!(e.path, "workload.questions.experts[4].slots", "{e:?}");
        // A model outside the hybrid pool needs its slots.
        let e = scenario(&hybrid("gpqa").replace("glm-4-9b", "llama-2-7b")).expect_err("no slots");
        assert_eq!(e.path, "workload.questions.experts[4].slots", "{e:?}");
    }

    #[test]
    fn placed_questions_are_refused_naming_the_field() {
        let refused = |from: &str, to: &str, field: &str| {
            let text = questions().replacen(from, to, 1);
            assert_ne!(text, questions(), "{from}");
            let e = scenario(&text).expect_err(to);
            assert_eq!(e.path, field, "{to}: {e:?}");
        };
        // The aggregator on an expert's group.
        refused(
            "model = \"deepseek-r1-distill-qwen-7b\"\noutput_tokens",
            "model = \"qwen2.5-7b-instruct\"\noutput_tokens",
            "workload.questions.aggregator.group",
        );
        // Wider than the two workers.
        refused(
            "gpus = 2\ntensor_parallel = 2",
            "gpus = 4\ntensor_parallel = 4",
            "replica[2].gpus",
        );
        // A group neither an expert nor the aggregator.
        refused(
            "[workload]",
            "[[replica]]\nmodel = \"glm-4-9b\"\ngpu = \"H100-SXM\"\n[workload]",
            "replica[3].model",
        );
        // An expert the benchmark never recruits.
        let glm = "[[workload.questions.experts]]\nmodel = \"glm-4-9b\"\nslots = 0\n\
                   output_tokens = { mean = 20.0, sigma = 0.5, max = 200 }\n\
                   [workload.questions.aggregator]";
        refused(
            "[workload.questions.aggregator]",
            glm,
            "workload.questions.experts[2].model",
        );
        let with_glm = questions().replacen(
            "[workload]",
            "[[replica]]\nmodel = \"glm-4-9b\"\ngpu = \"H100-SXM\"\n[workload]",
            1,
        );
        let e = scenario(&with_glm.replacen("[workload.questions.aggregator]", glm, 1))
            .expect_err("no slots");
        assert_eq!(e.path, "workload.questions.experts[2].slots", "{e:?}");
        refused("gpus = 2\n", "gpus = 2\ncount = 2\n", "replica[2].count");
        // A prediction for the aggregator, which the policy does not place.
        refused(
            "policy = { kind = \"round_robin\" }",
            "policy = { kind = \"round_robin\" }\n\
             predicted_session_s = { \"deepseek-r1-distill-qwen-7b\" = 10.0 }",
            "placement.predicted_session_s.deepseek-r1-distill-qwen-7b",
        );
        refused(
            "policy = { kind = \"round_robin\" }",
            "policy = { kind = \"ilp\" }\npredicted_session_s = { \"llama-2-7b\" = 10.0 }",
            "placement.predicted_session_s",
        );
    }

    #[test]
    fn a_bad_placement_is_refused_naming_its_field() {
        let refused = |from: &str, to: &str, field: &str| {
            let e = scenario(&placed_text().replacen(from, to, 1)).expect_err(to);
            assert_eq!(e.path, field, "{to}: {e:?}");
        };
        refused("workers = 2", "workers = 0", "placement.workers");
        refused(
            "pattern = \"offline\"",
            "pattern = \"poisson\"\nrate_per_s = 1.0",
            "placement",
        );
        refused(
            "gpu = \"H100-SXM\"\nload = { kind = \"fixed\", seconds = 5.0 }",
            "gpu = \"H100-SXM\"\ncount = 2\nload = { kind = \"fixed\", seconds = 5.0 }",
            "replica[1].count",
        );
        refused(
            "policy = { kind = \"round_robin\" }",
            "policy = { kind = \"ilp\" }",
            "placement.predicted_session_s",
        );
        refused(
            "policy = { kind = \"round_robin\" }",
            "policy = { kind = \"round_robin\" }\npredicted_session_s = { \"mixtral\" = 1.0 }",
            "placement.predicted_session_s.mixtral",
        );
        refused(
            "policy = { kind = \"round_robin\" }",
            "policy = { kind = \"round_robin\" }\npredicted_session_s = { \"llama-2-7b\" = 0.0 }",
            "placement.predicted_session_s.llama-2-7b",
        );
        refused(
            "policy = { kind = \"round_robin\" }",
            "policy = { kind = \"lpt\", max_models_per_worker = 0 }",
            "placement.policy.max_models_per_worker",
        );
        refused(
            "policy = { kind = \"round_robin\" }",
            "policy = { kind = \"round_robin\" }\npredicted_session_s = { \"llama-2-7b\" = 1e300 }",
            "placement.predicted_session_s.llama-2-7b",
        );
        // A group no class addresses.
        refused(
            "[workload]",
            "[[replica]]\nmodel = \"glm-4-9b\"\ngpu = \"H100-SXM\"\n[workload]",
            "replica[2].model",
        );
    }
}
