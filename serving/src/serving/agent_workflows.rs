//! Chimera's agent workload (chimera.txt): APPS-like and MATH-like multi-agent workflows (1, 2
//! or 4 agent stages), per-model workflow output lengths (heavy-tailed, with the paper's means and
//! standard deviations where it gives them), the models they are given for (`MODELS`) and the
//! task-performance model (workflow difficulty vs model capability). The serving family's
//! `[workload.workflow]` draws its workflows here (`serving_family::workflows`).
//!
//! Every constant here is listed with its source in docs/chimera.md.

use crate::cost::shape::DenseModelShape;
use crate::memo::Memo;
use crate::rng::SimRng;
use crate::serving::{PrefixSegment, QueuedRequest, SharedSegments};
use rand::RngExt;
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};

/// The models a Chimera workflow has lengths and task scores for, with the catalogue preset each
/// one is: the paper's six (section 4.2), Ministral3-8B-Instruct its
/// Ministral-3-8B-Instruct-2512 (the card it cites), priced as its text model.
pub const MODELS: &[(&str, &str)] = &[
    ("qwen2.5-1.5b", "qwen2.5-1.5b-instruct"),
    ("qwen2.5-3b", "qwen2.5-3b-instruct"),
    ("qwen2.5-7b", "qwen2.5-7b-instruct"),
    ("qwen2.5-14b", "qwen2.5-14b-instruct"),
    ("llama3.2-3b", "llama-3.2-3b-instruct"),
    ("ministral-8b", "ministral-3-8b-instruct-2512"),
];

/// The shape of the Chimera model called `name` (one of [`MODELS`]), or `None`.
pub fn model_shape(name: &str) -> Option<DenseModelShape> {
    let (_, preset) = MODELS.iter().find(|(known, _)| *known == name)?;
    Some(DenseModelShape::preset(preset).expect("every Chimera model is a catalogue preset"))
}

/// The two task suites of the paper.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dataset {
    /// Code generation (APPS): Planner -> Coder -> QA agent -> Coder.
    Apps,
    /// Math reasoning (MATH): Planner -> Solver -> Verifier -> Solver.
    Math,
}

/// The workflow types of appendix A.1: 4, 2 or 1 stages, chosen uniformly (the paper lets "the
/// user choose"; equal shares are our assumption).
pub const WORKFLOW_STAGE_COUNTS: [u32; 3] = [4, 2, 1];

/// Relative output share of each stage of the 4-stage workflow (planner, coder/solver, QA/verifier,
/// coder/solver); shorter workflows take the prefix. Assumption: the doer writes the most, the
/// second pass revises.
pub const STAGE_WEIGHTS: [f64; 4] = [1.0, 2.0, 1.0, 1.5];

/// Log-normal jitter (sigma) of each stage's share of its workflow's total. Assumption.
pub const STAGE_SHARE_SIGMA: f64 = 0.5;

/// Correlation of a workflow's (log) total output length across models: a long task is long for
/// every model. Assumption.
pub const CROSS_MODEL_LENGTH_CORRELATION: f64 = 0.6;

/// A stage never generates more than this (vLLM `max_tokens`-style cap; Qwen2.5's context is 32K).
pub const MAX_STAGE_TOKENS: u32 = 16_384;

/// Item-response discrimination `a` of the success model `P(success) = sigmoid(a (c_m - d))`, with
/// difficulty `d ~ N(0, 1)`: the logistic approximation of the normal ogive (1.7).
pub const DISCRIMINATION: f64 = 1.7;

/// Tokens of each agent's system prompt. Assumption (a ReAct role prompt).
pub const SYSTEM_PROMPT_TOKENS: u32 = 150;

/// The role of `stage` (0-based) of a workflow of `n_stages` (appendix A.1): 0 the planner, 1
/// the coder / solver, 2 the QA agent / verifier. The 4-stage workflow is planner, coder, QA,
/// coder; the 2-stage one planner, coder; the 1-stage one the coder alone.
pub fn stage_role(n_stages: u32, stage: u32) -> u32 {
    match (n_stages, stage) {
        (1, _) => 1,
        (_, 0) => 0,
        (_, 2) => 2,
        _ => 1,
    }
}

/// The token streams of the roles' system prompts (`serving::prefix`), apart from the
/// workflows' streams (2 x workflow id for the user message, + 1 for the history).
pub const ROLE_STREAMS: u64 = 1 << 63;

/// Where a model's workflow-total output length comes from.
#[derive(Clone, Copy, Debug, PartialEq)]
enum LengthSource {
    /// The paper's section 4.1 (mean, std).
    Given(f64, f64),
    /// Linear in log(parameters) between Qwen2.5-1.5B and Qwen2.5-14B (the paper shows only
    /// histograms for the other Qwen sizes).
    QwenInterpolated,
    /// `factor` x Qwen2.5-14B's mean and std: appendix A.2 says Llama3B and Ministral8B produce
    /// "significantly longer outputs" without a number; the factor is our assumption.
    LongerThanQwen14b(f64),
}

/// Per-model inputs of one dataset: output-length source and standalone task score (%).
fn model_inputs(dataset: Dataset, model: &str) -> Option<(LengthSource, f64)> {
    use LengthSource::*;
    // Scores: MATH from the Qwen2.5 technical report (instruct models: 55.2 / 65.9 / 75.5 / 80.0),
    // the Llama-3.2-3B-Instruct model card (MATH CoT 48.0) and Mistral's Ministral-8B-2410
    // announcement (54.5, the older Ministral 8B's: our input for the paper's Ministral 3 8B).
    // APPS "% tests passed" has no published per-model number for these
    // models; the values are our assumption (see docs/chimera.md).
    Some(match (dataset, model) {
        (Dataset::Apps, "qwen2.5-1.5b") => (Given(447.0, 1276.0), 15.0),
        (Dataset::Apps, "qwen2.5-3b") => (QwenInterpolated, 21.0),
        (Dataset::Apps, "qwen2.5-7b") => (QwenInterpolated, 30.0),
        (Dataset::Apps, "qwen2.5-14b") => (Given(649.0, 534.0), 37.0),
        (Dataset::Apps, "llama3.2-3b") => (LongerThanQwen14b(2.0), 14.0),
        (Dataset::Apps, "ministral-8b") => (LongerThanQwen14b(2.0), 25.0),
        (Dataset::Math, "qwen2.5-1.5b") => (Given(606.0, 2587.0), 55.2),
        (Dataset::Math, "qwen2.5-3b") => (QwenInterpolated, 65.9),
        (Dataset::Math, "qwen2.5-7b") => (QwenInterpolated, 75.5),
        (Dataset::Math, "qwen2.5-14b") => (Given(709.0, 715.0), 80.0),
        (Dataset::Math, "llama3.2-3b") => (LongerThanQwen14b(2.0), 48.0),
        (Dataset::Math, "ministral-8b") => (LongerThanQwen14b(2.0), 54.5),
        _ => return None,
    })
}

/// User prompt length (log-normal median, sigma) per dataset. Assumption: APPS problem statements
/// with I/O format run to several hundred tokens, MATH problems are short.
pub fn user_prompt_distribution(dataset: Dataset) -> (f64, f64) {
    match dataset {
        Dataset::Apps => (450.0, 0.5),
        Dataset::Math => (90.0, 0.6),
    }
}

/// One model's workflow-level length and performance parameters on one dataset.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ModelWorkload {
    pub model: String,
    /// Mean and std of the workflow-total output tokens over the workflow mix.
    pub total_mean: f64,
    pub total_std: f64,
    /// Log-normal sigma of each workflow type's total (solved so the mix has `total_std`).
    pub sigma: f64,
    /// Standalone task score (%) and the capability `c_m` it implies.
    pub standalone_score: f64,
    pub capability: f64,
}

/// Mean and std of the total for the named model, following its `LengthSource`.
fn total_moments(dataset: Dataset, model: &str, params: f64) -> Option<(f64, f64)> {
    let given = |name: &str| match model_inputs(dataset, name) {
        Some((LengthSource::Given(m, s), _)) => (m, s),
        _ => unreachable!("the Qwen anchors are given"),
    };
    Some(match model_inputs(dataset, model)?.0 {
        LengthSource::Given(m, s) => (m, s),
        LengthSource::QwenInterpolated => {
            let (m0, s0) = given("qwen2.5-1.5b");
            let (m1, s1) = given("qwen2.5-14b");
            let p0 = model_shape("qwen2.5-1.5b")?.params() as f64;
            let p1 = model_shape("qwen2.5-14b")?.params() as f64;
            let t = (params / p0).ln() / (p1 / p0).ln();
            (m0 + t * (m1 - m0), s0 + t * (s1 - s0))
        }
        LengthSource::LongerThanQwen14b(factor) => {
            let (m, s) = given("qwen2.5-14b");
            (factor * m, factor * s)
        }
    })
}

impl ModelWorkload {
    /// The parameters of `model` (one of the `MODELS` names) on `dataset`.
    pub fn new(dataset: Dataset, model: &str) -> Option<ModelWorkload> {
        let params = model_shape(model)?.params() as f64;
        let (total_mean, total_std) = total_moments(dataset, model, params)?;
        let score = model_inputs(dataset, model)?.1;
        Some(ModelWorkload {
            model: model.to_string(),
            total_mean,
            total_std,
            sigma: mixture_sigma(total_mean, total_std),
            standalone_score: score,
            capability: capability_for_score(score / 100.0),
        })
    }
}

/// Mean stage count of the workflow mix.
fn mean_stages() -> f64 {
    WORKFLOW_STAGE_COUNTS
        .iter()
        .map(|&n| f64::from(n))
        .sum::<f64>()
        / WORKFLOW_STAGE_COUNTS.len() as f64
}

/// The log-normal sigma of each workflow type's total such that the mix (type n has mean
/// `mean * n / mean_stages`, all types the same coefficient of variation) has standard deviation
/// `std`: `E[mean_n^2] (1 + cv^2) - mean^2 = std^2`. Zero when the type mix alone already exceeds
/// the target spread.
pub fn mixture_sigma(mean: f64, std: f64) -> f64 {
    let n_bar = mean_stages();
    let second_moment = WORKFLOW_STAGE_COUNTS
        .iter()
        .map(|&n| (f64::from(n) / n_bar).powi(2))
        .sum::<f64>()
        / WORKFLOW_STAGE_COUNTS.len() as f64;
    let cv2 = ((std * std + mean * mean) / (second_moment * mean * mean) - 1.0).max(0.0);
    (1.0 + cv2).ln().sqrt()
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// `E_d[sigmoid(a (c - d))]` for `d ~ N(0, 1)` (Simpson's rule on [-8, 8]).
pub fn expected_success(capability: f64) -> f64 {
    let n = 800;
    let h = 16.0 / n as f64;
    let f = |i: usize| {
        let d = -8.0 + i as f64 * h;
        (-0.5 * d * d).exp() / (2.0 * std::f64::consts::PI).sqrt()
            * sigmoid(DISCRIMINATION * (capability - d))
    };
    let mut sum = f(0) + f(n);
    for i in 1..n {
        sum += if i % 2 == 1 { 4.0 } else { 2.0 } * f(i);
    }
    sum * h / 3.0
}

/// The capabilities `capability_for_score` found, by the score's bits: a bisection costs 160,000
/// exponentials, and every Chimera cell (its validation, then each seed's predictions) asks it
/// for the same few task scores.
static CAPABILITIES: Memo<u64, f64> = Memo::new(64);

/// The capability whose expected success over the difficulty distribution is `score` (in (0, 1)),
/// by bisection (`CAPABILITIES` keeps each score's).
pub fn capability_for_score(score: f64) -> f64 {
    *CAPABILITIES.get_or_compute(&score.to_bits(), || bisect_capability(score))
}

/// `capability_for_score` computed.
fn bisect_capability(score: f64) -> f64 {
    let (mut lo, mut hi) = (-20.0, 20.0);
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        if expected_success(mid) < score {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// The probability that a model of `capability` solves a workflow of `difficulty`.
pub fn success_probability(capability: f64, difficulty: f64) -> f64 {
    sigmoid(DISCRIMINATION * (capability - difficulty))
}

/// One generated workflow: its stages, prompt, difficulty and per-model true output lengths.
#[derive(Clone, Debug, PartialEq)]
pub struct Workflow {
    pub n_stages: u32,
    pub user_prompt_tokens: u32,
    pub difficulty: f64,
    /// Uniform draw coupling the outcomes: the workflow succeeds on capability `c` when
    /// `outcome_draw < success_probability(c, difficulty)`, so a stronger model succeeds whenever
    /// a weaker one does.
    pub outcome_draw: f64,
    /// Output tokens per (model, stage), model-major: `stage_tokens[m * n_stages + s]`.
    pub stage_tokens: Vec<u32>,
}

impl Workflow {
    /// The segments of the prompt of `request` (one of this workflow's stages) as the paper's
    /// section 3.1 builds it: "the stage-i system prompt, the user message, and the accumulated
    /// history from prior stages", in that order: its role's system prompt (stream
    /// `ROLE_STREAMS + role`, the same for every stage of that role of every workflow), the
    /// workflow's user message (stream `2 x workflow`) and its history (stream
    /// `2 x workflow + 1`; a later stage's history extends an earlier one's).
    pub fn prompt_segments(&self, request: &QueuedRequest) -> [PrefixSegment; 3] {
        let user = self.user_prompt_tokens;
        let history = request
            .prompt_tokens
            .saturating_sub(SYSTEM_PROMPT_TOKENS + user);
        [
            PrefixSegment {
                stream: ROLE_STREAMS + u64::from(stage_role(self.n_stages, request.stage)),
                tokens: SYSTEM_PROMPT_TOKENS,
            },
            PrefixSegment {
                stream: 2 * request.workflow,
                tokens: user,
            },
            PrefixSegment {
                stream: 2 * request.workflow + 1,
                tokens: history,
            },
        ]
    }

    /// How many of `prompt_segments(request)`, from the first, other requests may share
    /// (`AdmitHook::prefix`). In flight beside it, the role's system prompt alone: the
    /// workflow's stages run one after another (the next submitted once this one has
    /// finished), and another workflow's prompt differs from the system prompt on. Later, all
    /// three when a later stage has the same role (its prompt extends this one's), else the
    /// system prompt alone.
    pub fn shared_segments(&self, request: &QueuedRequest) -> SharedSegments {
        let role = stage_role(self.n_stages, request.stage);
        let recurs = (request.stage + 1..self.n_stages)
            .any(|later| stage_role(self.n_stages, later) == role);
        SharedSegments {
            later: if recurs { 3 } else { 1 },
            beside: 1,
        }
    }

    /// Output tokens of `stage` were it served by model `model`.
    pub fn tokens(&self, model: usize, stage: u32) -> u32 {
        self.stage_tokens[model * self.n_stages as usize + stage as usize]
    }
    /// The true remaining total on `model` from `stage` on (the oracle STJF priority).
    pub fn remaining_total(&self, model: usize, stage: u32) -> u64 {
        (stage..self.n_stages)
            .map(|s| u64::from(self.tokens(model, s)))
            .sum()
    }
    /// Whether the workflow succeeds when served with the given mean capability.
    pub fn succeeds(&self, capability: f64) -> bool {
        self.outcome_draw < success_probability(capability, self.difficulty)
    }
}

/// Draws workflows for a fixed dataset and model list.
#[derive(Clone, Debug)]
pub struct WorkflowGenerator {
    pub dataset: Dataset,
    pub models: Vec<ModelWorkload>,
}

fn log_normal(rng: &mut SimRng, median: f64, sigma: f64) -> f64 {
    let z: f64 = StandardNormal.sample(rng);
    median * (sigma * z).exp()
}

impl WorkflowGenerator {
    /// Draws one workflow. Per workflow: the type, the user prompt, the difficulty, the outcome
    /// draw, a shared length factor, then per model a length factor and the stage shares.
    pub fn generate(&self, rng: &mut SimRng) -> Workflow {
        let n_stages = WORKFLOW_STAGE_COUNTS[rng.random_range(0..WORKFLOW_STAGE_COUNTS.len())];
        let (median, sigma) = user_prompt_distribution(self.dataset);
        let user_prompt_tokens = log_normal(rng, median, sigma).round().clamp(1.0, 32_768.0) as u32;
        let difficulty: f64 = StandardNormal.sample(rng);
        let outcome_draw: f64 = rng.random::<f64>();
        let shared: f64 = StandardNormal.sample(rng);
        let rho = CROSS_MODEL_LENGTH_CORRELATION;
        let n_bar = mean_stages();
        let mut stage_tokens = Vec::with_capacity(self.models.len() * n_stages as usize);
        let mut shares = [0.0f64; 4];
        for model in &self.models {
            let own: f64 = StandardNormal.sample(rng);
            let z = rho * shared + (1.0 - rho * rho).sqrt() * own;
            let mean = model.total_mean * f64::from(n_stages) / n_bar;
            let mu = mean.ln() - 0.5 * model.sigma * model.sigma;
            let total = (mu + model.sigma * z).exp();
            let mut share_sum = 0.0;
            for (s, share) in shares.iter_mut().take(n_stages as usize).enumerate() {
                *share = STAGE_WEIGHTS[s] * log_normal(rng, 1.0, STAGE_SHARE_SIGMA);
                share_sum += *share;
            }
            for share in shares.iter().take(n_stages as usize) {
                let tokens = (total * share / share_sum).round();
                stage_tokens.push(tokens.clamp(1.0, f64::from(MAX_STAGE_TOKENS)) as u32);
            }
        }
        Workflow {
            n_stages,
            user_prompt_tokens,
            difficulty,
            outcome_draw,
            stage_tokens,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::stream;

    #[test]
    fn capability_reproduces_the_standalone_score() {
        for score in [0.15, 0.552, 0.8] {
            let c = capability_for_score(score);
            assert!((expected_success(c) - score).abs() < 1e-9, "{score}");
        }
        assert!(capability_for_score(0.8) > capability_for_score(0.55));
    }

    #[test]
    fn interpolated_qwen_lengths_lie_between_the_anchors() {
        let small = ModelWorkload::new(Dataset::Apps, "qwen2.5-1.5b").unwrap();
        let mid = ModelWorkload::new(Dataset::Apps, "qwen2.5-7b").unwrap();
        let big = ModelWorkload::new(Dataset::Apps, "qwen2.5-14b").unwrap();
        assert!(small.total_mean < mid.total_mean && mid.total_mean < big.total_mean);
        assert!(ModelWorkload::new(Dataset::Apps, "unknown").is_none());
    }

    /// The generated workflow totals have the paper's mean and standard deviation (section 4.1).
    #[test]
    fn generated_totals_match_the_paper_moments() {
        for (dataset, model, mean, std) in [
            (Dataset::Apps, "qwen2.5-14b", 649.0, 534.0),
            (Dataset::Math, "qwen2.5-14b", 709.0, 715.0),
            (Dataset::Apps, "qwen2.5-1.5b", 447.0, 1276.0),
        ] {
            let generator = WorkflowGenerator {
                dataset,
                models: vec![ModelWorkload::new(dataset, model).unwrap()],
            };
            let mut rng = stream(7, "workflows");
            let n = 200_000;
            let totals: Vec<f64> = (0..n)
                .map(|_| generator.generate(&mut rng).remaining_total(0, 0) as f64)
                .collect();
            let m = totals.iter().sum::<f64>() / n as f64;
            let s = (totals.iter().map(|t| (t - m).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt();
            assert!((m - mean).abs() / mean < 0.05, "{model} mean {m} vs {mean}");
            assert!((s - std).abs() / std < 0.20, "{model} std {s} vs {std}");
        }
    }

    #[test]
    fn stronger_models_succeed_whenever_weaker_ones_do() {
        let generator = WorkflowGenerator {
            dataset: Dataset::Math,
            models: vec![
                ModelWorkload::new(Dataset::Math, "qwen2.5-1.5b").unwrap(),
                ModelWorkload::new(Dataset::Math, "qwen2.5-14b").unwrap(),
            ],
        };
        let mut rng = stream(1, "workflows");
        let (mut weak, mut strong) = (0, 0);
        for _ in 0..20_000 {
            let w = generator.generate(&mut rng);
            let a = w.succeeds(generator.models[0].capability);
            let b = w.succeeds(generator.models[1].capability);
            assert!(!a || b);
            weak += a as u32;
            strong += b as u32;
        }
        let weak = f64::from(weak) / 20_000.0;
        let strong = f64::from(strong) / 20_000.0;
        assert!((weak - 0.552).abs() < 0.02, "{weak}");
        assert!((strong - 0.80).abs() < 0.02, "{strong}");
    }
}
