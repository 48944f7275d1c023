//! MOSAIC's question workload as the serving family's (`[workload.questions]`, mosaic.txt
//! sections 3-4): each arrival is a benchmark question of `crate::serving::questions` (Table
//! 3's slots shuffled and cut into questions of k = 3 calls, its vote-agreement bucket, its
//! prompt and each expert's output), submitted as three calls addressed to its experts' replica
//! groups. When a question's three calls have finished, the aggregation gate
//! (`policies::gate::AggregationGate`) reads its votes: skipped, the majority answers; else one
//! aggregator call (a gated fan-in) is submitted to the aggregator's group, its prompt the
//! question, the template and the three outputs as generated (cut at `max_prompt_tokens`), its
//! output drawn log-normal times the bucket's length factor, at the instant the last expert call
//! finished, or with `release = "after_experts"` (MOSAIC's stage barrier) once every expert call
//! of the run has. Accuracy is bookkept per question from one uniform draw, comonotone: the
//! majority is right when it is below the bucket's majority accuracy, the aggregator when it is
//! below the aggregator's (Table 1's per-bucket accuracies, `DatasetPreset::bucket_accuracy_pct`).
//! The run's figures are a `recorder::QuestionSummary`.

use super::config::{ReplicaTable, SchedulerTable, ServingScenario, WorkloadTable, served_model};
use crate::arrivals::ArrivalSpec;
use crate::policies::gate::{AggregationGate, GateConfig, Votes};
use crate::recorder::QuestionSummary;
use crate::rng::stream;
use crate::serving::questions::{
    self, Bucket, DATASET_PRESETS, EXPERTS_PER_QUESTION, LengthDist, Question, draw_length,
};
use crate::time::SimTime;
use crate::validate::FieldError;
use rand::RngExt;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::ops::Range;

/// `[workload.questions]`: every arrival a benchmark question recruited to three experts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuestionsTable {
    /// The benchmark (`gpqa`, `mmlu_pro`, `medmcqa`): its question count, prompt mean and
    /// vote-agreement buckets (shares, length weights, accuracies).
    pub dataset: String,
    /// Log-space sigma of the prompt lengths.
    #[serde(default = "d_prompt_sigma")]
    pub prompt_tokens_sigma: f64,
    /// Mean prompt tokens; left out, the benchmark's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_mean: Option<f64>,
    /// Questions served (each arrival one); left out, the benchmark's. A count of its own (a
    /// small live run) needs every expert's `slots`, adding up to 3 x it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub questions: Option<u32>,
    /// Calibration questions (MOSAIC's profiling subset: `[placement.calibration]`'s default
    /// calls are 3 x it); left out, the benchmark's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration_questions: Option<u32>,
    /// The experts, each the model of one replica group, with its slots and outputs.
    pub experts: Vec<ExpertTable>,
    /// The aggregator; none: no aggregation stage (every question's answer is the majority's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregator: Option<AggregatorTable>,
    /// Whether a question skips the aggregator (`none`: never).
    #[serde(default)]
    pub gate: GateConfig,
    /// When an aggregator call is submitted.
    #[serde(default)]
    pub release: Release,
}

fn d_prompt_sigma() -> f64 {
    0.3
}

fn d_template_tokens() -> u32 {
    100
}

fn d_max_prompt_tokens() -> u32 {
    16_384
}

/// A log-normal length by its mean (`{ mean, sigma, max }`), clipped to `[1, max]`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MeanLength {
    pub mean: f64,
    pub sigma: f64,
    pub max: u32,
}

/// `[[workload.questions.experts]]`: one expert model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpertTable {
    /// The model: one replica group's.
    pub model: String,
    /// The `[[replica]]` index of its group, where several groups serve the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<usize>,
    /// Table 3's prompt slots (the calls addressed to it over the benchmark); left out, the
    /// dataset's for the hybrid pool's expert that the model serves (0 where the benchmark
    /// never recruits it), so that one file sweeps `workload.questions.dataset`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots: Option<u32>,
    /// Its outputs before the bucket's length factor.
    pub output_tokens: MeanLength,
}

/// `[workload.questions.aggregator]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AggregatorTable {
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<usize>,
    /// Its outputs before the bucket's length factor.
    pub output_tokens: MeanLength,
    /// Instruction tokens the aggregation template adds to every prompt.
    #[serde(default = "d_template_tokens")]
    pub template_tokens: u32,
    /// The longest aggregator prompt (question, template and outputs cut to it).
    #[serde(default = "d_max_prompt_tokens")]
    pub max_prompt_tokens: u32,
}

/// When a question's aggregator call is submitted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Release {
    /// The instant its last expert call finishes.
    #[default]
    FanIn,
    /// Once every expert call of the run has finished (MOSAIC's stage barrier), in question
    /// order.
    AfterExperts,
}

/// A validated expert: its group's replicas, slots and outputs.
#[derive(Clone, Debug, PartialEq)]
pub struct ExpertCalls {
    pub replicas: Range<usize>,
    pub slots: u32,
    /// Whether `slots` came from the dataset (not written): 0 then means a benchmark that does
    /// not recruit the expert, whose group a placement leaves without sessions.
    pub slots_from_dataset: bool,
    pub output: LengthDist,
}

/// A validated aggregator.
#[derive(Clone, Debug, PartialEq)]
pub struct AggregatorCalls {
    pub replicas: Range<usize>,
    pub output: LengthDist,
    pub template_tokens: u32,
    pub max_prompt_tokens: u32,
}

/// A validated `[workload.questions]`.
#[derive(Clone, Debug, PartialEq)]
pub struct QuestionSpec {
    pub dataset: &'static str,
    pub questions: u32,
    /// The benchmark's calibration questions (MOSAIC's profiling subset, Table 3).
    pub calibration_questions: u32,
    pub prompt: LengthDist,
    pub buckets: [Bucket; 3],
    pub experts: Vec<ExpertCalls>,
    pub aggregator: Option<AggregatorCalls>,
    pub gate: GateConfig,
    pub release: Release,
}

fn field_error(path: &str, message: impl Into<String>) -> FieldError {
    FieldError {
        path: path.to_string(),
        message: message.into(),
    }
}

fn mean_length(at: &str, l: &MeanLength) -> Result<LengthDist, FieldError> {
    if !(l.mean.is_finite() && l.mean > 0.0) {
        return Err(field_error(
            &format!("{at}.mean"),
            format!("must be a positive number, got {}", l.mean),
        ));
    }
    if !(l.sigma.is_finite() && l.sigma >= 0.0) {
        return Err(field_error(
            &format!("{at}.sigma"),
            format!("must be finite and >= 0, got {}", l.sigma),
        ));
    }
    if l.max == 0 {
        return Err(field_error(
            &format!("{at}.max"),
            "must be at least 1, got 0",
        ));
    }
    Ok(LengthDist {
        mean: l.mean,
        sigma: l.sigma,
        max: l.max,
    })
}

/// The replicas of the group serving `model` (`group`: its `[[replica]]` index, needed where
/// several groups serve it).
fn group_of(
    at: &str,
    model: &str,
    group: Option<usize>,
    scenario: &ServingScenario,
) -> Result<Range<usize>, FieldError> {
    let served = served_model(&format!("{at}.model"), model)?;
    let name = served.name();
    let mut ranges = Vec::new();
    let mut first = 0;
    for (m, r) in scenario.groups() {
        ranges.push((m.name(), first..first + r.count));
        first += r.count;
    }
    if let Some(g) = group {
        return match ranges.get(g) {
            None => Err(field_error(
                &format!("{at}.group"),
                format!("is {g}; the scenario has {} replica groups", ranges.len()),
            )),
            Some((m, _)) if *m != name => Err(field_error(
                &format!("{at}.model"),
                format!("is {model}; replica group {g} serves {m}"),
            )),
            Some((_, range)) => Ok(range.clone()),
        };
    }
    let serving: Vec<_> = ranges.iter().filter(|(m, _)| *m == name).collect();
    match serving.as_slice() {
        [(_, range)] => Ok(range.clone()),
        [] => Err(field_error(
            &format!("{at}.model"),
            format!(
                "no replica group serves {model}; the groups serve {}",
                ranges
                    .iter()
                    .map(|(m, _)| *m)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
        _ => Err(field_error(
            &format!("{at}.group"),
            format!(
                "missing: {} replica groups serve {model}; name one by its [[replica]] index",
                serving.len()
            ),
        )),
    }
}

/// `[workload.questions]` validated against the scenario's replica groups (`tables`, in
/// order) and the rest of `[workload]`; errors name the field.
pub fn validate(
    table: &QuestionsTable,
    w: &WorkloadTable,
    tables: &[(String, &ReplicaTable)],
    scenario: &ServingScenario,
) -> Result<QuestionSpec, FieldError> {
    let at = "workload.questions";
    let preset = questions::dataset(&table.dataset).ok_or_else(|| {
        field_error(
            &format!("{at}.dataset"),
            format!(
                "unknown dataset {:?}; known datasets: {}",
                table.dataset,
                DATASET_PRESETS.join(", ")
            ),
        )
    })?;
    let beside = |key: &str, why: &str| field_error(key, format!("not with {at}: {why}"));
    let drawn = "the questions draw every call's lengths";
    if w.prompt_tokens.is_some() {
        return Err(beside("workload.prompt_tokens", drawn));
    }
    if w.output_tokens.is_some() {
        return Err(beside("workload.output_tokens", drawn));
    }
    if w.dataset.is_some() {
        return Err(beside("workload.dataset", drawn));
    }
    if !w.calls.is_empty() {
        return Err(beside(
            "workload.calls",
            "the questions address their own calls",
        ));
    }
    if w.workflow.is_some() {
        return Err(beside("workload.workflow", "one workload at a time"));
    }
    if w.horizon_s.is_some() {
        return Err(beside(
            "workload.horizon_s",
            "every question of the benchmark is served (give workload.n_requests)",
        ));
    }
    if matches!(scenario.arrival, ArrivalSpec::Trace { .. }) {
        return Err(beside(
            "arrival.pattern",
            "a trace's rows are requests, not questions",
        ));
    }
    if scenario.router_kind == "chimera" {
        return Err(beside(
            "routing.kind",
            "addressed calls go to their model's group",
        ));
    }
    if scenario.adapters.is_some() {
        return Err(beside("adapters", "the questions draw no adapter"));
    }
    for (path, t) in tables {
        if matches!(t.scheduler, SchedulerTable::Static { .. }) {
            return Err(beside(
                &format!("{path}.scheduler.kind"),
                "the calls need a continuous kind (vllm, sarathi, orca)",
            ));
        }
    }
    let positive = |key: &str, value: Option<u32>, benchmark: u32| match value {
        Some(0) => Err(field_error(
            &format!("{at}.{key}"),
            "must be a positive number, got 0",
        )),
        Some(n) => Ok(n),
        None => Ok(benchmark),
    };
    let count = positive("questions", table.questions, preset.questions)?;
    let calibration_questions = positive(
        "calibration_questions",
        table.calibration_questions,
        preset.calibration_questions,
    )?;
    let prompt_mean = match table.prompt_tokens_mean {
        Some(mean) if !(mean.is_finite() && mean > 0.0) => {
            return Err(field_error(
                &format!("{at}.prompt_tokens_mean"),
                format!("must be a positive number, got {mean}"),
            ));
        }
        Some(mean) => mean,
        None => preset.prompt_tokens_mean,
    };
    if scenario.n_requests != count as usize {
        let whose = match table.questions {
            Some(_) => format!("{at}.questions is {count}"),
            None => format!("{} has {count} questions", preset.name),
        };
        return Err(field_error(
            "workload.n_requests",
            format!(
                "is {}; {whose} (each arrival is one)",
                scenario.n_requests
            ),
        ));
    }
    if !(table.prompt_tokens_sigma.is_finite() && table.prompt_tokens_sigma >= 0.0) {
        return Err(field_error(
            &format!("{at}.prompt_tokens_sigma"),
            format!("must be finite and >= 0, got {}", table.prompt_tokens_sigma),
        ));
    }
    if table.experts.is_empty() {
        return Err(field_error(
            &format!("{at}.experts"),
            "needs at least one [[workload.questions.experts]]",
        ));
    }
    let mut experts = Vec::with_capacity(table.experts.len());
    for (i, e) in table.experts.iter().enumerate() {
        let at = format!("{at}.experts[{i}]");
        let replicas = group_of(&at, &e.model, e.group, scenario)?;
        let slots = match e.slots {
            Some(slots) => slots,
            None => {
                let model = served_model(&format!("{at}.model"), &e.model)?;
                let name = model.name();
                let listed = table
                    .experts
                    .iter()
                    .filter(|o| served_model(&at, &o.model).is_ok_and(|m| m.name() == name))
                    .count();
                // The hybrid pool's catalogue key of the model, as the file may name it otherwise.
                let key = questions::HYBRID_MODELS
                    .iter()
                    .map(|(_, m)| *m)
                    .find(|m| served_model(&at, m).is_ok_and(|s| s.name() == name));
                match key.and_then(|k| preset.slots_of(k)) {
                    Some(slots) if listed == 1 => slots,
                    Some(_) => {
                        return Err(field_error(
                            &format!("{at}.slots"),
                            format!(
                                "missing: {listed} experts are served by {name}, so {}'s \
                                 Table 3 slots name none of them; give each its slots",
                                preset.name
                            ),
                        ));
                    }
                    None => {
                        return Err(field_error(
                            &format!("{at}.slots"),
                            format!(
                                "missing: {name} serves none of the hybrid pool's experts \
                                 whose slots {} gives (Table 3: {}); give its slots",
                                preset.name,
                                questions::HYBRID_MODELS
                                    .iter()
                                    .map(|(_, m)| *m)
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        ));
                    }
                }
            }
        };
        experts.push(ExpertCalls {
            replicas,
            slots,
            slots_from_dataset: e.slots.is_none(),
            output: mean_length(&format!("{at}.output_tokens"), &e.output_tokens)?,
        });
    }
    let slots: u64 = experts.iter().map(|e| u64::from(e.slots)).sum();
    let needed = EXPERTS_PER_QUESTION as u64 * u64::from(count);
    if slots != needed {
        return Err(field_error(
            &format!("{at}.experts"),
            format!(
                "the slots add up to {slots}; {count} questions x {EXPERTS_PER_QUESTION} calls = {needed}"
            ),
        ));
    }
    let aggregator = match &table.aggregator {
        None => None,
        Some(a) => {
            let at = format!("{at}.aggregator");
            for (key, value) in [
                ("max_prompt_tokens", a.max_prompt_tokens),
                ("output_tokens.max", a.output_tokens.max),
            ] {
                if value == 0 {
                    return Err(field_error(
                        &format!("{at}.{key}"),
                        "must be at least 1, got 0",
                    ));
                }
            }
            Some(AggregatorCalls {
                replicas: group_of(&at, &a.model, a.group, scenario)?,
                output: mean_length(&format!("{at}.output_tokens"), &a.output_tokens)?,
                template_tokens: a.template_tokens,
                max_prompt_tokens: a.max_prompt_tokens,
            })
        }
    };
    if let GateConfig::Threshold { tau } = table.gate {
        if !(tau.is_finite() && (0.0..=1.0).contains(&tau)) {
            return Err(field_error(
                &format!("{at}.gate.tau"),
                format!("must be in [0, 1], got {tau}"),
            ));
        }
        if aggregator.is_none() {
            return Err(field_error(
                &format!("{at}.gate"),
                "gates the aggregator: give [workload.questions.aggregator]",
            ));
        }
    }
    if table.release == Release::AfterExperts && aggregator.is_none() {
        return Err(field_error(
            &format!("{at}.release"),
            "releases aggregator calls: give [workload.questions.aggregator]",
        ));
    }
    Ok(QuestionSpec {
        dataset: preset.name,
        questions: count,
        calibration_questions,
        prompt: questions::prompt_lengths(prompt_mean, table.prompt_tokens_sigma),
        buckets: questions::buckets(count, &preset.bucket_files()),
        experts,
        aggregator,
        gate: table.gate.clone(),
        release: table.release,
    })
}

/// The questions of `spec` for `seed` (`crate::serving::questions::synthesize`, as the mosaic
/// family draws them: the experts' outputs unscaled, the mosaic family's `*_output_scale` of 1).
fn synthesize(spec: &QuestionSpec, seed: u64) -> Vec<Question> {
    let slots: Vec<u32> = spec.experts.iter().map(|e| e.slots).collect();
    let outputs: Vec<LengthDist> = spec.experts.iter().map(|e| e.output).collect();
    questions::synthesize(&slots, &spec.buckets, &spec.prompt, &outputs, |_| 1.0, seed)
}

/// The experts (indices into `spec.experts`) in the order the questions of `seed` first
/// recruit them (`crate::serving::questions::first_seen`): the order `[placement]` gives the
/// models to its policy, so that round robin deals them as MOSAIC's baseline does.
pub fn first_seen(spec: &QuestionSpec, seed: u64) -> Vec<usize> {
    questions::first_seen(&synthesize(spec, seed))
}

/// A call to submit: the replicas it may go to (one group's), its lengths.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    pub replicas: Range<usize>,
    pub prompt_tokens: u32,
    pub output_tokens: u32,
    question: usize,
    aggregator: bool,
}

/// The questions of one run: their draws, the calls in flight and the figures.
pub struct Questions<'a> {
    spec: &'a QuestionSpec,
    questions: Vec<Question>,
    /// Per question: its aggregator output and its accuracy draw (drawn for every question,
    /// skipped or not, so a gate changes nothing else).
    aggregator_outputs: Vec<u32>,
    accuracy_draws: Vec<f64>,
    /// The next question to arrive.
    next: usize,
    /// Per question: expert calls not finished, and their outputs so far.
    pending: Vec<u8>,
    expert_tokens: Vec<u64>,
    /// Each submitted call's question and whether it is the aggregator's.
    calls: FxHashMap<u64, (usize, bool)>,
    expert_calls_left: u64,
    /// Questions whose aggregator call waits for the stage barrier.
    held: Vec<usize>,
    ready: VecDeque<Call>,
    /// Questions answered (skipped, or their aggregator call finished).
    answered: u64,
    summary: QuestionSummary,
}

impl<'a> Questions<'a> {
    /// The run's questions for `seed` (`crate::serving::questions::synthesize`, as the mosaic
    /// family draws them), then per question its aggregator output and accuracy draw (streams
    /// "aggregator", "accuracy", the mosaic family's).
    pub fn new(spec: &'a QuestionSpec, seed: u64) -> Questions<'a> {
        let questions = synthesize(spec, seed);
        let mut aggregator_rng = stream(seed, "aggregator");
        let mut accuracy_rng = stream(seed, "accuracy");
        let mut aggregator_outputs = Vec::with_capacity(questions.len());
        let mut accuracy_draws = Vec::with_capacity(questions.len());
        for q in &questions {
            let factor = spec.buckets[q.bucket].length_factor;
            aggregator_outputs.push(
                spec.aggregator
                    .as_ref()
                    .map_or(0, |a| draw_length(&a.output, factor, &mut aggregator_rng)),
            );
            accuracy_draws.push(accuracy_rng.random());
        }
        let n = questions.len();
        Questions {
            spec,
            questions,
            aggregator_outputs,
            accuracy_draws,
            next: 0,
            pending: vec![EXPERTS_PER_QUESTION as u8; n],
            expert_tokens: vec![0; n],
            calls: FxHashMap::default(),
            expert_calls_left: (EXPERTS_PER_QUESTION * n) as u64,
            held: Vec::new(),
            ready: VecDeque::new(),
            answered: 0,
            summary: QuestionSummary {
                questions: n as u64,
                buckets: spec
                    .buckets
                    .each_ref()
                    .map(|b| (b.plurality, Default::default())),
                ..QuestionSummary::default()
            },
        }
    }

    /// The next question arrives: its three expert calls, in recruitment order.
    pub fn arrive(&mut self) -> [Call; EXPERTS_PER_QUESTION] {
        let q = self.next;
        self.next += 1;
        let question = &self.questions[q];
        std::array::from_fn(|i| Call {
            replicas: self.spec.experts[question.experts[i]].replicas.clone(),
            prompt_tokens: question.prompt_tokens,
            output_tokens: question.output_tokens[i],
            question: q,
            aggregator: false,
        })
    }

    /// `call` is submitted as request `id`.
    pub fn submitted(&mut self, id: u64, call: &Call) {
        self.calls.insert(id, (call.question, call.aggregator));
    }

    /// Request `id` finished at `now` with `output` tokens (0: refused at admission). The last
    /// expert call of a question reads the gate: skipped, the question is answered; else its
    /// aggregator call is ready (`pop_ready`) now, or held for the stage barrier.
    pub fn call_done(
        &mut self,
        id: u64,
        output: u32,
        now: SimTime,
        gate: &mut dyn AggregationGate,
    ) {
        let (q, aggregator) = self.calls.remove(&id).expect("a question's call");
        self.summary.last_finish = self.summary.last_finish.max(now);
        if aggregator {
            self.answered += 1;
            return;
        }
        self.expert_tokens[q] += u64::from(output);
        self.pending[q] -= 1;
        self.expert_calls_left -= 1;
        if self.expert_calls_left == 0 {
            self.summary.expert_end = now;
        }
        if self.pending[q] == 0 {
            self.fan_in(q, gate);
        }
        if self.expert_calls_left == 0 {
            self.held.sort_unstable();
            for q in std::mem::take(&mut self.held) {
                let call = self.aggregator_call(q);
                self.ready.push_back(call);
            }
        }
    }

    /// Question `q`'s experts have all answered: the gate, the accuracy, the aggregator call.
    fn fan_in(&mut self, q: usize, gate: &mut dyn AggregationGate) {
        let b = self.questions[q].bucket;
        let bucket = &self.spec.buckets[b];
        let u = self.accuracy_draws[q];
        let majority_ok = u < bucket.majority_accuracy;
        let aggregator_ok = u < bucket.aggregator_accuracy;
        // Without an aggregator every answer is the majority's.
        let skip = self.spec.aggregator.is_none()
            || gate.decide(
                q,
                &Votes {
                    k: EXPERTS_PER_QUESTION as u32,
                    plurality: bucket.plurality,
                },
            );
        let s = &mut self.summary;
        let row = &mut s.buckets[b].1;
        row.questions += 1;
        row.majority_correct += u64::from(majority_ok);
        row.aggregator_correct += u64::from(aggregator_ok);
        s.baseline_correct += u64::from(aggregator_ok);
        s.correct += u64::from(if skip { majority_ok } else { aggregator_ok });
        if skip {
            s.skipped += 1;
            row.skipped += 1;
            self.answered += 1;
        } else if self.spec.release == Release::AfterExperts {
            // Released with the rest once the run's last expert call has finished (maybe
            // this one: `call_done` releases after the fan-in).
            self.held.push(q);
        } else {
            let call = self.aggregator_call(q);
            self.ready.push_back(call);
        }
    }

    /// Question `q`'s aggregator call: the question, the template and its experts' outputs,
    /// cut at the longest prompt.
    fn aggregator_call(&mut self, q: usize) -> Call {
        let a = self.spec.aggregator.as_ref().expect("an aggregator");
        let prompt = u64::from(self.questions[q].prompt_tokens)
            + u64::from(a.template_tokens)
            + self.expert_tokens[q];
        self.summary.aggregated += 1;
        Call {
            replicas: a.replicas.clone(),
            prompt_tokens: prompt.min(u64::from(a.max_prompt_tokens)) as u32,
            output_tokens: self.aggregator_outputs[q],
            question: q,
            aggregator: true,
        }
    }

    /// The next aggregator call to submit now, if any.
    pub fn pop_ready(&mut self) -> Option<Call> {
        self.ready.pop_front()
    }

    /// Questions not answered yet (none once a run has drained).
    pub fn in_flight(&self) -> u64 {
        self.summary.questions - self.answered
    }

    /// The run's figures.
    pub fn summary(&self) -> QuestionSummary {
        self.summary.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::scenario;
    use super::*;

    /// A gate that skips the unanimous questions only (tau = 1).
    struct Unanimous;
    impl AggregationGate for Unanimous {
        fn name(&self) -> &'static str {
            "unanimous"
        }
        fn skip(&mut self, votes: &Votes) -> bool {
            votes.plurality == votes.k
        }
    }

    fn spec(release: Release) -> QuestionSpec {
        let preset = questions::dataset("gpqa").unwrap();
        let length = |mean| LengthDist {
            mean,
            sigma: 0.45,
            max: 32_768,
        };
        QuestionSpec {
            dataset: "gpqa",
            questions: preset.questions,
            calibration_questions: preset.calibration_questions,
            prompt: preset.prompt(0.3),
            buckets: questions::buckets(preset.questions, &preset.bucket_files()),
            experts: [(0..1, 429), (1..2, 158), (2..3, 4), (3..4, 3)]
                .into_iter()
                .map(|(replicas, slots)| ExpertCalls {
                    replicas,
                    slots,
                    slots_from_dataset: false,
                    output: length(1000.0),
                })
                .collect(),
            aggregator: Some(AggregatorCalls {
                replicas: 4..5,
                output: length(1500.0),
                template_tokens: 100,
                max_prompt_tokens: 16_384,
            }),
            gate: GateConfig::Threshold { tau: 1.0 },
            release,
        }
    }

    /// A question's aggregator call is ready the instant its third expert call finishes, with
    /// the question's prompt + 100 + the three outputs as generated; a unanimous question under
    /// tau = 1 makes none; with the stage barrier, calls wait for the run's last expert call.
    #[test]
    fn the_fan_in_submits_the_aggregator_call_with_the_three_outputs() {
        let spec = spec(Release::FanIn);
        let mut questions = Questions::new(&spec, 3);
        let t = SimTime::from_secs_f64;
        let mut id = 0;
        let mut fed = |questions: &mut Questions, outputs: [u32; 3], end: f64| {
            let calls = questions.arrive();
            let q = calls[0].question;
            for (call, output) in calls.iter().zip(outputs) {
                questions.submitted(id, call);
                questions.call_done(id, output, t(end), &mut Unanimous);
                id += 1;
            }
            q
        };
        // Find a question of the 2:1 bucket and one of 3:0.
        let q = fed(&mut questions, [10, 20, 30], 5.0);
        let bucket = questions.questions[q].bucket;
        let prompt = questions.questions[q].prompt_tokens;
        match bucket {
            0 => assert_eq!(
                questions.pop_ready(),
                None,
                "a unanimous question is skipped"
            ),
            _ => {
                let call = questions.pop_ready().expect("an aggregator call");
                assert_eq!(call.replicas, 4..5);
                assert_eq!(call.prompt_tokens, prompt + 100 + 60);
                assert_eq!(call.output_tokens, questions.aggregator_outputs[q]);
            }
        }
        let summary = questions.summary();
        assert_eq!(summary.skipped, u64::from(bucket == 0));
        assert_eq!(summary.last_finish, t(5.0));
        // Every question: skipped exactly when unanimous, and the aggregator's call per other.
        let mut skipped = u64::from(bucket == 0);
        let mut aggregated = u64::from(bucket != 0);
        while questions.next < questions.questions.len() {
            let q = fed(&mut questions, [1, 1, 1], 6.0);
            let unanimous = questions.questions[q].bucket == 0;
            skipped += u64::from(unanimous);
            aggregated += u64::from(questions.pop_ready().is_some());
            assert!(questions.pop_ready().is_none());
        }
        let summary = questions.summary();
        assert_eq!(summary.skipped, skipped);
        assert_eq!(u64::from(spec.buckets[0].questions), skipped);
        assert_eq!(summary.aggregated, aggregated);
        assert_eq!(skipped + aggregated, 198);
        assert_eq!(summary.expert_end, t(6.0));
        assert_eq!(questions.in_flight(), aggregated);

        // The barrier: no call before the last expert call, then all in question order.
        let spec = self::spec(Release::AfterExperts);
        let mut questions = Questions::new(&spec, 3);
        let mut id = 1000;
        let mut order = Vec::new();
        for q in 0..198 {
            let calls = questions.arrive();
            for call in &calls {
                questions.submitted(id, call);
                questions.call_done(id, 1, t(1.0 + q as f64), &mut Unanimous);
                id += 1;
            }
            if q < 197 {
                assert!(questions.pop_ready().is_none(), "question {q}");
            }
        }
        while let Some(call) = questions.pop_ready() {
            order.push(call.question);
        }
        assert_eq!(
            order.len() as u64,
            aggregated,
            "the same questions aggregate"
        );
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
        // The last aggregated question fans in after every other expert call: released with
        // the others, in its place.
        let mut questions = Questions::new(&spec, 3);
        let last = (0..198)
            .rev()
            .find(|&q| questions.questions[q].bucket != 0)
            .expect("an aggregated question");
        let mut calls: Vec<Call> = (0..198).flat_map(|_| questions.arrive()).collect();
        let tail: Vec<Call> = calls
            .iter()
            .filter(|c| c.question == last)
            .cloned()
            .collect();
        calls.retain(|c| c.question != last);
        for (i, call) in calls.iter().chain(&tail).enumerate() {
            questions.submitted(i as u64, call);
            questions.call_done(i as u64, 1, t(1.0), &mut Unanimous);
        }
        let order: Vec<usize> = std::iter::from_fn(|| questions.pop_ready())
            .map(|c| c.question)
            .collect();
        assert_eq!(order.len() as u64, aggregated);
        assert_eq!(order.last(), Some(&last), "in its place, not first");
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
    }

    /// The accuracy bookkeeping: comonotone, from one draw per question; the skipped questions
    /// count the majority's answer, the others the aggregator's, the baseline every question's
    /// aggregator answer.
    #[test]
    fn accuracy_follows_the_draws_and_the_gate() {
        let spec = spec(Release::FanIn);
        let mut questions = Questions::new(&spec, 11);
        let mut id = 0;
        while questions.next < questions.questions.len() {
            for call in questions.arrive() {
                questions.submitted(id, &call);
                questions.call_done(id, 1, SimTime::ZERO, &mut Unanimous);
                id += 1;
            }
        }
        let (mut correct, mut baseline) = (0, 0);
        for (q, question) in questions.questions.iter().enumerate() {
            let b = &spec.buckets[question.bucket];
            let u = questions.accuracy_draws[q];
            let agg = u < b.aggregator_accuracy;
            baseline += u64::from(agg);
            correct += u64::from(if question.bucket == 0 {
                u < b.majority_accuracy
            } else {
                agg
            });
        }
        let s = questions.summary();
        assert_eq!((s.correct, s.baseline_correct), (correct, baseline));
        let per_bucket: u64 = s.buckets.iter().map(|(_, row)| row.questions).sum();
        assert_eq!(per_bucket, 198);
    }

    /// MOSAIC's GPQA cell on five H100 groups: the four recruited experts (one replica each,
    /// short outputs so the run is cheap) and the aggregator, a second DeepSeek-R1-Distill-
    /// Qwen-7B group at TP = 2 (named by its index: two groups serve that model).
    const GPQA: &str = r#"
[model]
name = "deepseek-r1-distill-llama-8b"
[[replica]]
gpu = "H100-SXM"
[[replica]]
model = "deepseek-r1-distill-qwen-7b"
gpu = "H100-SXM"
[[replica]]
model = "gemma-2-9b-it"
gpu = "H100-SXM"
[[replica]]
model = "exaone-3.5-7.8b-instruct"
gpu = "H100-SXM"
[[replica]]
model = "deepseek-r1-distill-qwen-7b"
gpu = "H100-SXM"
gpus = 2
tensor_parallel = 2
[workload]
n_requests = 198
[workload.questions]
dataset = "gpqa"
gate = { kind = "threshold", tau = 1.0 }
[[workload.questions.experts]]
model = "deepseek-r1-distill-llama-8b"
slots = 429
output_tokens = { mean = 20.0, sigma = 0.5, max = 200 }
[[workload.questions.experts]]
model = "deepseek-r1-distill-qwen-7b"
group = 1
slots = 158
output_tokens = { mean = 20.0, sigma = 0.5, max = 200 }
[[workload.questions.experts]]
model = "gemma-2-9b-it"
slots = 4
output_tokens = { mean = 10.0, sigma = 0.5, max = 200 }
[[workload.questions.experts]]
model = "exaone-3.5-7.8b-instruct"
slots = 3
output_tokens = { mean = 10.0, sigma = 0.5, max = 200 }
[workload.questions.aggregator]
model = "deepseek-r1-distill-qwen-7b"
group = 4
output_tokens = { mean = 15.0, sigma = 0.6, max = 200 }
[arrival]
pattern = "offline"
"#;

    /// Each finished request: id, submission, finish, prompt and output tokens, replica.
    #[derive(Default)]
    struct Calls(Vec<(u64, SimTime, SimTime, u32, u32, u64)>);
    impl crate::records::RecordSink for Calls {
        fn record(&mut self, r: &crate::records::RequestRecord<'_>) {
            let crate::records::Extra::Count(replica) = r.extra[0] else {
                panic!("the first column is the replica");
            };
            self.0.push((
                r.id,
                r.arrival,
                r.finish,
                r.prompt_tokens as u32,
                r.output_tokens as u32,
                replica,
            ));
        }
    }

    fn serve(
        s: &ServingScenario,
        gate: Box<dyn AggregationGate>,
    ) -> (Calls, crate::metrics::RunOutput) {
        use super::super::tests::{Fifo, Linear, Turns};
        let mut p = super::super::ScenarioPolicies {
            queue: Box::new(Fifo::default()),
            router: Box::new(Turns::default()),
            mapper: Box::new(Linear),
            selectors: Vec::new(),
            memory: None,
            gate: Some(gate),
        };
        let mut calls = Calls::default();
        let out = super::super::run_policies(s, 5, &mut p, &mut calls, None).unwrap();
        assert!(out.details.get("failed").is_none(), "{}", out.details);
        (calls, out)
    }

    /// A gate that never skips.
    struct Never;
    impl AggregationGate for Never {
        fn name(&self) -> &'static str {
            "none"
        }
        fn skip(&mut self, _: &Votes) -> bool {
            false
        }
    }

    /// The run by hand: the 594 expert calls are requests 0-593, question q's three calls
    /// 3q..3q+2 with its prompt and its drawn outputs, each on its expert's replica; each
    /// aggregator call arrives at its question's last expert finish with its prompt the
    /// question's plus 100 plus the three outputs, on the aggregator's replica; the unanimous
    /// questions (tau = 1) make none. The metrics follow from the records; with the stage
    /// barrier every aggregator call arrives at the last expert call's finish.
    #[test]
    fn a_question_run_fans_in_to_gated_aggregator_calls() {
        let s = scenario(GPQA).unwrap();
        let spec = s.questions.as_ref().unwrap();
        let slots: Vec<u32> = spec.experts.iter().map(|e| e.slots).collect();
        let outputs: Vec<LengthDist> = spec.experts.iter().map(|e| e.output).collect();
        let drawn =
            questions::synthesize(&slots, &spec.buckets, &spec.prompt, &outputs, |_| 1.0, 5);
        let (calls, out) = serve(&s, Box::new(Unanimous));
        let mut expert = calls.0.clone();
        expert.retain(|c| c.0 < 594);
        expert.sort_by_key(|c| c.0);
        assert_eq!(expert.len(), 594);
        let mut expected = Vec::new();
        for (q, question) in drawn.iter().enumerate() {
            let three = &expert[3 * q..3 * q + 3];
            for (i, c) in three.iter().enumerate() {
                assert_eq!(c.1, SimTime::ZERO);
                assert_eq!(c.3, question.prompt_tokens);
                assert_eq!(c.4, question.output_tokens[i]);
                assert_eq!(c.5 as usize, question.experts[i], "expert m is replica m");
            }
            if question.bucket != 0 {
                let fan_in = three.iter().map(|c| c.2).max().unwrap();
                let tokens: u32 = three.iter().map(|c| c.4).sum();
                expected.push((fan_in, question.prompt_tokens + 100 + tokens));
            }
        }
        let mut aggregator: Vec<(SimTime, u32)> = calls
            .0
            .iter()
            .filter(|c| c.0 >= 594)
            .inspect(|c| assert_eq!(c.5, 4, "the aggregator's replica"))
            .map(|c| (c.1, c.3))
            .collect();
        aggregator.sort();
        expected.sort();
        assert_eq!(aggregator, expected);
        let skipped = drawn.iter().filter(|q| q.bucket == 0).count();
        assert_eq!(skipped, 74, "GPQA's 37.37 % of 198");
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
        assert!(close(out.scalar("skip_pct").unwrap(), 100.0 * 74.0 / 198.0));
        let expert_end = expert.iter().map(|c| c.2).max().unwrap().as_secs_f64();
        let end = calls.0.iter().map(|c| c.2).max().unwrap().as_secs_f64();
        assert!(close(out.scalar("expert_makespan_s").unwrap(), expert_end));
        assert!(close(out.scalar("end_to_end_s").unwrap(), end));
        assert!(close(out.scalar("aggregator_s").unwrap(), end - expert_end));
        assert_eq!(out.details["questions"]["aggregated"], 124);

        // Without the gate every question is aggregated; the accuracy change is then 0.
        let (calls, out) = serve(&s, Box::new(Never));
        assert_eq!(calls.0.len(), 594 + 198);
        assert_eq!(out.scalar("skip_pct"), Some(0.0));
        assert_eq!(out.scalar("accuracy_change_pp"), Some(0.0));

        // The stage barrier: every aggregator call at the last expert call's finish.
        let barrier = scenario(&GPQA.replace(
            "dataset = \"gpqa\"",
            "dataset = \"gpqa\"\nrelease = \"after_experts\"",
        ))
        .unwrap();
        let (calls, out) = serve(&barrier, Box::new(Unanimous));
        let expert_end = calls
            .0
            .iter()
            .filter(|c| c.0 < 594)
            .map(|c| c.2)
            .max()
            .unwrap();
        let aggregator: Vec<_> = calls.0.iter().filter(|c| c.0 >= 594).collect();
        assert_eq!(aggregator.len(), 124);
        assert!(aggregator.iter().all(|c| c.1 == expert_end));
        assert!(close(
            out.scalar("expert_makespan_s").unwrap(),
            expert_end.as_secs_f64()
        ));
        // The same accuracy as the fan-in run: the draws are per question.
        let (_, fan_in) = serve(&s, Box::new(Unanimous));
        assert_eq!(out.scalar("accuracy_pct"), fan_in.scalar("accuracy_pct"));

        // Run without its gate (`run_recorded`), a question workload reports why, no number.
        let ungated = super::super::tests::run(&s, 5);
        assert!(
            ungated.details.get("failed").is_some(),
            "{}",
            ungated.details
        );
    }

    #[test]
    fn a_question_workload_is_refused_naming_the_field() {
        let refused = |from: &str, to: &str, field: &str| {
            assert!(GPQA.contains(from), "{from}");
            let e = scenario(&GPQA.replacen(from, to, 1)).expect_err(to);
            assert_eq!(e.path, field, "{to}: {e:?}");
        };
        refused(
            "dataset = \"gpqa\"",
            "dataset = \"hle\"",
            "workload.questions.dataset",
        );
        refused(
            "n_requests = 198",
            "n_requests = 197",
            "workload.n_requests",
        );
        refused("slots = 3\n", "slots = 4\n", "workload.questions.experts");
        refused("group = 4\n", "", "workload.questions.aggregator.group");
        refused(
            "group = 4\n",
            "group = 7\n",
            "workload.questions.aggregator.group",
        );
        refused(
            "group = 1\n",
            "group = 2\n",
            "workload.questions.experts[1].model",
        );
        refused("tau = 1.0", "tau = 1.5", "workload.questions.gate.tau");
        refused(
            "mean = 20.0",
            "mean = -1.0",
            "workload.questions.experts[0].output_tokens.mean",
        );
        refused(
            "n_requests = 198\n",
            "n_requests = 198\nprompt_tokens = { kind = \"fixed\", value = 5 }\n",
            "workload.prompt_tokens",
        );
        refused(
            "model = \"gemma-2-9b-it\"\nslots",
            "model = \"llama-2-7b\"\nslots",
            "workload.questions.experts[2].model",
        );
        let text = GPQA.replacen("[workload.questions.aggregator]", "[unused]", 1);
        let text = text.replacen(
            "model = \"deepseek-r1-distill-qwen-7b\"\ngroup = 4\n",
            "",
            1,
        );
        let text = text.replacen(
            "output_tokens = { mean = 15.0, sigma = 0.6, max = 200 }\n",
            "",
            1,
        );
        let text = text.replacen("[unused]\n", "", 1);
        let e = scenario(&text).expect_err("a gate without an aggregator");
        assert_eq!(e.path, "workload.questions.gate");
        // A question count, calibration questions and a prompt mean of the file's own: each
        // refused unless a positive number.
        let own = "dataset = \"gpqa\"\n";
        for (to, field) in [
            ("questions = 0\n", "workload.questions.questions"),
            (
                "calibration_questions = 0\n",
                "workload.questions.calibration_questions",
            ),
            (
                "prompt_tokens_mean = 0.0\n",
                "workload.questions.prompt_tokens_mean",
            ),
            (
                "prompt_tokens_mean = -24.0\n",
                "workload.questions.prompt_tokens_mean",
            ),
            (
                "prompt_tokens_mean = nan\n",
                "workload.questions.prompt_tokens_mean",
            ),
            (
                "prompt_tokens_mean = inf\n",
                "workload.questions.prompt_tokens_mean",
            ),
            // Its own count: workload.n_requests (198 here) must be it.
            ("questions = 6\n", "workload.n_requests"),
        ] {
            refused(own, &format!("{own}{to}"), field);
        }
        // With the count matched, the slots must cut into that many questions.
        let six = GPQA
            .replacen("n_requests = 198", "n_requests = 6", 1)
            .replacen(own, &format!("{own}questions = 6\n"), 1);
        let e = scenario(&six).expect_err("the benchmark's slots for 6 questions");
        assert_eq!(e.path, "workload.questions.experts", "{e:?}");
        assert!(e.message.contains("6 questions x 3 calls = 18"), "{e:?}");
    }

    /// GPQA's experts with slots for `questions` questions (6 / 6 / 3 / 3 x questions / 6).
    fn own_questions(text: &str, questions: u32) -> String {
        let part = |n: u32| questions * n / 6;
        text.replacen("slots = 429", &format!("slots = {}", part(6)), 1)
            .replacen("slots = 158", &format!("slots = {}", part(6)), 1)
            .replacen("slots = 4\n", &format!("slots = {}\n", part(3)), 1)
            .replacen("slots = 3\n", &format!("slots = {}\n", part(3)), 1)
    }

    /// `questions`, `calibration_questions` and `prompt_tokens_mean` of the file's own replace
    /// the benchmark's: the spec's count, calibration questions (the calibration pass's default
    /// calls are 3 x them) and prompt mean; the buckets cut that many questions; a run serves
    /// that many questions of three calls; `workload.n_requests` defaults to the count.
    #[test]
    fn a_question_workload_takes_its_own_count_calibration_questions_and_prompt_mean() {
        let text = own_questions(
            &GPQA.replacen("n_requests = 198\n", "", 1).replacen(
                "dataset = \"gpqa\"\n",
                "dataset = \"gpqa\"\nquestions = 12\ncalibration_questions = 5\n\
                 prompt_tokens_mean = 24.0\n",
                1,
            ),
            12,
        );
        let s = scenario(&text).unwrap();
        assert_eq!(s.n_requests, 12);
        let spec = s.questions.as_ref().unwrap();
        assert_eq!((spec.questions, spec.calibration_questions), (12, 5));
        assert_eq!(spec.prompt.mean, 24.0);
        assert_eq!(spec.prompt.max, 96);
        assert_eq!(spec.buckets.iter().map(|b| b.questions).sum::<u32>(), 12);
        let drawn = synthesize(spec, 5);
        assert_eq!(drawn.len(), 12);
        let mean =
            drawn.iter().map(|q| f64::from(q.prompt_tokens)).sum::<f64>() / drawn.len() as f64;
        assert!((12.0..48.0).contains(&mean), "prompt mean {mean}");
        let (calls, out) = serve(&s, Box::new(Unanimous));
        let experts = calls.0.iter().filter(|c| c.0 < 36).count();
        assert_eq!(experts, 36);
        assert_eq!(out.details["questions"]["questions"], 12);
        // Left out, the benchmark's.
        let benchmark = scenario(GPQA).unwrap();
        let spec = benchmark.questions.as_ref().unwrap();
        assert_eq!((spec.questions, spec.calibration_questions), (198, 100));
        assert_eq!(spec.prompt.mean, 300.0);
    }
}
