//! Multi-stage agent workflows as the serving family's workload (`[workload.workflow]`,
//! Chimera's section 3.1 and appendix A.1): each arrival is a workflow of 4, 2 or 1 stages drawn
//! by `serving::agent_workflows::WorkflowGenerator` (one `ModelWorkload` per replica group: the
//! group's model's output lengths and task score on the dataset). A stage's request is submitted
//! the instant the previous stage finishes (a closed loop: later stages enter only as fast as
//! the replicas finish earlier ones); its prompt is its role's system prompt, the workflow's user
//! message and every earlier stage's output, in that order, given to a prefix-caching replica as
//! three token streams (`prefix`: the role's, shared by every workflow; the user message's and
//! the history's, the workflow's own, so a later stage finds the earlier prompt cached). Its true
//! output length is the workflow's for the model of the replica it is routed to. A finished
//! workflow records its end-to-end latency (arrival to its last stage's finish), the queueing
//! of its stages summed, its latency per output token and its outcome (`u < sigmoid(1.7 (c̄ -
//! d))`, `c̄` the mean capability of the models that served its stages): `WorkflowSummary`.
//! The quality of the learned components is measured as the chimera family measures it: the
//! length predictor's Kendall tau distance over the first `KENDALL_SAMPLE` stages, the semantic
//! router's macro mean average precision over the first `MAP_SAMPLE` workflows.

use crate::recorder::WorkflowSummary;
use crate::recorder::ranking::{average_precision, kendall_tau_distance};
use crate::rng::SimRng;
use crate::serving::agent_workflows::{SYSTEM_PROMPT_TOKENS, Workflow, WorkflowGenerator};
use crate::serving::{PrefixSegment, QueuedRequest, SharedSegments};
use crate::time::SimTime;
use rustc_hash::FxHashMap;

/// Stages whose predicted remaining tokens the predictor's Kendall tau distance is measured on
/// (the first ones: the measure is exact, O(n^2)).
pub const KENDALL_SAMPLE: usize = 2_000;

/// Workflows whose confidences the semantic router's mean average precision is measured on.
pub const MAP_SAMPLE: usize = 20_000;

/// One workflow in flight.
#[derive(Clone, Debug)]
pub struct WorkflowRun {
    pub workflow: Workflow,
    pub arrival: SimTime,
    /// The stage to submit next (the one in flight once submitted).
    pub next_stage: u32,
    /// Output tokens of the finished stages: the next stage's history.
    pub history: u32,
    /// The same, as the workflow's attained service (MLFQ).
    pub generated: u64,
    /// The semantic router's confidence in each replica group's model (empty without it).
    pub confidence: Vec<f64>,
    queue_ns: u64,
    capability_sum: f64,
}

impl WorkflowRun {
    /// The next stage's prompt: its role's system prompt, the user message, the history.
    pub fn prompt_tokens(&self) -> u32 {
        SYSTEM_PROMPT_TOKENS
            .saturating_add(self.workflow.user_prompt_tokens)
            .saturating_add(self.history)
    }
}

/// The workflows of one run: their draws, the ones in flight and the finished ones' figures.
pub struct Workflows<'a> {
    generator: &'a WorkflowGenerator,
    rng: SimRng,
    runs: FxHashMap<u64, WorkflowRun>,
    next: u64,
    summary: WorkflowSummary,
    per_token_sum_ms: f64,
    successes: u64,
    /// The predictor's estimates and the truths of the first `KENDALL_SAMPLE` stages.
    kendall_predicted: Vec<f64>,
    kendall_truth: Vec<f64>,
    /// Per replica group, the confidences and outcomes of the first `MAP_SAMPLE` workflows.
    map_scores: Vec<Vec<f64>>,
    map_labels: Vec<Vec<bool>>,
}

impl<'a> Workflows<'a> {
    /// Workflows drawn by `generator` from `rng` (the stream `workflows`, as the chimera family
    /// draws them).
    pub fn new(generator: &'a WorkflowGenerator, rng: SimRng) -> Workflows<'a> {
        Workflows {
            generator,
            rng,
            runs: FxHashMap::default(),
            next: 0,
            summary: WorkflowSummary::default(),
            per_token_sum_ms: 0.0,
            successes: 0,
            kendall_predicted: Vec::new(),
            kendall_truth: Vec::new(),
            map_scores: vec![Vec::new(); generator.models.len()],
            map_labels: vec![Vec::new(); generator.models.len()],
        }
    }

    /// A workflow arrives at `now`: drawn (a trace's prompt, when the arrival has one, replaces
    /// the drawn user message; drawn all the same, so the stream's later draws stay put).
    /// Returns its id.
    pub fn arrive(&mut self, now: SimTime, user_prompt: Option<u32>) -> u64 {
        let mut workflow = self.generator.generate(&mut self.rng);
        if let Some(tokens) = user_prompt {
            workflow.user_prompt_tokens = tokens.max(1);
        }
        self.insert(now, workflow)
    }

    /// `workflow` arrives at `now`; returns its id.
    pub fn insert(&mut self, now: SimTime, workflow: Workflow) -> u64 {
        let id = self.next;
        self.next += 1;
        self.runs.insert(
            id,
            WorkflowRun {
                workflow,
                arrival: now,
                next_stage: 0,
                history: 0,
                generated: 0,
                confidence: Vec::new(),
                queue_ns: 0,
                capability_sum: 0.0,
            },
        );
        id
    }

    pub fn run(&self, id: u64) -> &WorkflowRun {
        self.runs.get(&id).expect("a workflow in flight")
    }

    pub fn run_mut(&mut self, id: u64) -> &mut WorkflowRun {
        self.runs.get_mut(&id).expect("a workflow in flight")
    }

    /// Workflow `id`'s semantic-router confidences were drawn (`WorkflowRun::confidence`): the
    /// first `MAP_SAMPLE` workflows' join the router's precision sample, each group's against
    /// whether its model solves the workflow.
    pub fn confidences_drawn(&mut self, id: u64) {
        if id as usize >= MAP_SAMPLE {
            return;
        }
        let run = self.runs.get(&id).expect("a workflow in flight");
        for (g, &confidence) in run.confidence.iter().enumerate() {
            self.map_scores[g].push(confidence);
            self.map_labels[g].push(run.workflow.succeeds(self.generator.models[g].capability));
        }
    }

    /// A stage was routed with `predicted` remaining workflow tokens on its replica's model,
    /// whose truth is `truth`: the first `KENDALL_SAMPLE` join the predictor's ranking sample.
    pub fn predicted(&mut self, predicted: f64, truth: u64) {
        if self.kendall_predicted.len() < KENDALL_SAMPLE {
            self.kendall_predicted.push(predicted);
            self.kendall_truth.push(truth as f64);
        }
    }

    /// The capability `c_m` of replica group `group`'s model.
    pub fn capability(&self, group: usize) -> f64 {
        self.generator.models[group].capability
    }

    /// The segments `request`'s prompt is made of (`AdmitHook::prefix`): its workflow's
    /// `Workflow::prompt_segments`, as the chimera family's server builds them.
    pub fn prefix(
        &self,
        request: &QueuedRequest,
        segments: &mut Vec<PrefixSegment>,
    ) -> SharedSegments {
        let run = self.run(request.workflow);
        segments.extend(run.workflow.prompt_segments(request));
        run.workflow.shared_segments(request)
    }

    /// `request` entered a step for the first time at `now`: its wait joins its workflow's.
    pub fn admitted(&mut self, now: SimTime, request: &QueuedRequest) {
        self.run_mut(request.workflow).queue_ns += (now - request.submitted).0;
    }

    /// The stage in flight of workflow `id` finished at `now` with `output` tokens on a model
    /// of `capability`. True when the workflow has a next stage (to submit now); else it is
    /// finished and recorded.
    pub fn stage_done(&mut self, id: u64, output: u32, capability: f64, now: SimTime) -> bool {
        let run = self.run_mut(id);
        run.generated += u64::from(output);
        run.history = run.history.saturating_add(output);
        run.capability_sum += capability;
        run.next_stage += 1;
        if run.next_stage < run.workflow.n_stages {
            return true;
        }
        let run = self.runs.remove(&id).expect("a workflow in flight");
        let latency = (now - run.arrival).0;
        let s = &mut self.summary;
        s.e2e.record(latency);
        s.queueing.record(run.queue_ns);
        s.completed += 1;
        s.last_finish = s.last_finish.max(now);
        self.per_token_sum_ms += latency as f64 * 1e-6 / run.generated.max(1) as f64;
        let capability = run.capability_sum / f64::from(run.workflow.n_stages);
        self.successes += u64::from(run.workflow.succeeds(capability));
        false
    }

    /// Workflow `id` cannot go on (its next stage's prompt is past what its replica takes):
    /// dropped, counted as abandoned (no latency, no outcome).
    pub fn abandon(&mut self, id: u64) {
        self.runs.remove(&id).expect("a workflow in flight");
        self.summary.abandoned += 1;
    }

    /// Workflows still in flight (none once a run has drained).
    pub fn in_flight(&self) -> usize {
        self.runs.len()
    }

    /// The share of finished workflows that succeeded, % (`summary`'s `score_pct` without the
    /// ranking measures).
    pub fn score_pct(&self) -> f64 {
        100.0 * self.successes as f64 / self.summary.completed.max(1) as f64
    }

    /// The finished workflows' figures.
    pub fn summary(&self) -> WorkflowSummary {
        let n = self.summary.completed.max(1) as f64;
        let precisions: Vec<f64> = self
            .map_scores
            .iter()
            .zip(&self.map_labels)
            .filter_map(|(scores, labels)| average_precision(scores, labels))
            .collect();
        WorkflowSummary {
            latency_per_token_ms: self.per_token_sum_ms / n,
            score_pct: self.score_pct(),
            router_map: if precisions.is_empty() {
                f64::NAN
            } else {
                precisions.iter().sum::<f64>() / precisions.len() as f64
            },
            predictor_kendall_distance: kendall_tau_distance(
                &self.kendall_predicted,
                &self.kendall_truth,
            )
            .unwrap_or(f64::NAN),
            ..self.summary.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::stream;
    use crate::serving::agent_workflows::{Dataset, ModelWorkload, ROLE_STREAMS};

    fn request(workflow: u64, stage: u32, prompt_tokens: u32, submitted: SimTime) -> QueuedRequest {
        QueuedRequest {
            id: 0,
            workflow,
            stage,
            submitted,
            workflow_arrival: SimTime::ZERO,
            enqueued_iteration: 0,
            prompt_tokens,
            predicted_stage_tokens: 0.0,
            predicted_total_tokens: 0.0,
            attained_service: 0,
            rank_noise: 0.0,
            topic: 0,
        }
    }

    /// The semantic router's precision and the predictor's ranking distance by hand: two groups,
    /// a workflow every model solves (confidences 0.9 / 0.2) and one none does (0.1 / 0.8):
    /// average precision 1 on the first group, 1/2 on the second, mean 0.75; predictions 10,
    /// 20, 30 against truths 100, 200, 50: two of three pairs discordant. Neither without its
    /// samples.
    #[test]
    fn the_router_precision_and_the_predictor_distance_are_measured_on_their_samples() {
        let generator = WorkflowGenerator {
            dataset: Dataset::Apps,
            models: vec![
                ModelWorkload::new(Dataset::Apps, "qwen2.5-1.5b").unwrap(),
                ModelWorkload::new(Dataset::Apps, "qwen2.5-14b").unwrap(),
            ],
        };
        let mut workflows = Workflows::new(&generator, stream(1, "workflows"));
        let empty = workflows.summary();
        assert!(empty.router_map.is_nan() && empty.predictor_kendall_distance.is_nan());
        for (difficulty, confidence) in [(-10.0, [0.9, 0.2]), (10.0, [0.1, 0.8])] {
            let id = workflows.insert(
                SimTime::ZERO,
                Workflow {
                    n_stages: 1,
                    user_prompt_tokens: 100,
                    difficulty,
                    outcome_draw: 0.5,
                    stage_tokens: vec![10, 10],
                },
            );
            workflows.run_mut(id).confidence = confidence.to_vec();
            workflows.confidences_drawn(id);
        }
        for (predicted, truth) in [(10.0, 100), (20.0, 200), (30.0, 50)] {
            workflows.predicted(predicted, truth);
        }
        let summary = workflows.summary();
        assert!(
            (summary.router_map - 0.75).abs() < 1e-12,
            "{}",
            summary.router_map
        );
        assert!((summary.predictor_kendall_distance - 2.0 / 3.0).abs() < 1e-12);
    }

    /// A two-stage workflow by hand (user message 100 tokens, stages of 30 and 50 tokens):
    /// stage 0's prompt is 150 + 100, stage 1's 150 + 100 + 30 in the segments planner role,
    /// user message, 30 history tokens (coder role); its latency is arrival to the second
    /// finish, per output token over 80 tokens, its queueing the two waits summed.
    #[test]
    fn a_two_stage_workflow_carries_its_history_and_records_its_latency() {
        let generator = WorkflowGenerator {
            dataset: Dataset::Apps,
            models: vec![ModelWorkload::new(Dataset::Apps, "qwen2.5-1.5b").unwrap()],
        };
        let mut workflows = Workflows::new(&generator, stream(1, "workflows"));
        let t = SimTime::from_secs_f64;
        let id = workflows.insert(
            t(1.0),
            Workflow {
                n_stages: 2,
                user_prompt_tokens: 100,
                difficulty: -10.0,
                outcome_draw: 0.5,
                stage_tokens: vec![30, 50],
            },
        );
        assert_eq!(workflows.run(id).prompt_tokens(), 250);
        workflows.admitted(t(1.5), &request(id, 0, 250, t(1.0)));
        assert!(workflows.stage_done(id, 30, 0.0, t(3.0)));
        let run = workflows.run(id);
        assert_eq!((run.next_stage, run.history, run.generated), (1, 30, 30));
        assert_eq!(run.prompt_tokens(), 280);
        let mut segments = Vec::new();
        workflows.prefix(&request(id, 1, 280, t(3.0)), &mut segments);
        let tokens: Vec<u32> = segments.iter().map(|s| s.tokens).collect();
        assert_eq!(tokens, [150, 100, 30]);
        assert_eq!(
            segments[0].stream,
            ROLE_STREAMS + 1,
            "the coder's role prompt"
        );
        assert_eq!(
            (segments[1].stream, segments[2].stream),
            (2 * id, 2 * id + 1)
        );
        workflows.admitted(t(3.25), &request(id, 1, 280, t(3.0)));
        assert!(!workflows.stage_done(id, 50, 0.0, t(5.0)));
        assert_eq!(workflows.in_flight(), 0);
        let s = workflows.summary();
        assert_eq!(s.completed, 1);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9 * b;
        assert!(close(s.e2e.mean_ms(), 4000.0), "{}", s.e2e.mean_ms());
        assert!(
            close(s.queueing.mean_ms(), 750.0),
            "{}",
            s.queueing.mean_ms()
        );
        assert!(
            close(s.latency_per_token_ms, 50.0),
            "{}",
            s.latency_per_token_ms
        );
        assert_eq!(s.score_pct, 100.0, "difficulty -10 is solved by any model");
    }
}
