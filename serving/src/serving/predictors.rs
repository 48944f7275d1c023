//! Chimera's two learned components as the serving layer draws them: the length predictor
//! (`PredictorConfig`: a request's remaining workflow tokens, what the length-aware queues and the
//! Chimera router's activity monitor read) and the semantic router (`SemanticRouterConfig`: each
//! model's confidence that it solves a workflow), with the defaults the paper's quality levels
//! give (docs/chimera.md).

use super::agent_workflows::{ModelWorkload, Workflow, success_probability};
use crate::rng::SimRng;
use crate::validate::{FieldError, non_negative};
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};

/// The length predictor's default log-normal noise: the level whose Kendall tau distance on this
/// workload lands in the range of the paper's QRF (0.12-0.27, Table 3); the run reports the
/// distance it achieves.
pub fn default_predictor() -> PredictorConfig {
    PredictorConfig::Noisy { noise: 0.6 }
}

/// The semantic router's default difficulty-estimate noise (the run reports the mean average
/// precision it achieves; the paper's ModernBERT-large reaches 0.52 on APPS, 0.74 on MATH).
pub fn default_semantic_router() -> SemanticRouterConfig {
    SemanticRouterConfig::Noisy { noise: 1.0 }
}

/// How the semantic router's confidence `q[m]` is produced.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum SemanticRouterConfig {
    /// A learned router: `q[m] = sigmoid(a (c_m - d_hat))` with the difficulty estimate
    /// `d_hat = d + noise * eps` (`eps ~ N(0, 1)` per workflow); quality falls as `noise` grows.
    Noisy { noise: f64 },
    /// Ground truth: `q[m]` is 1 when model m solves the workflow, else 0.
    Oracle,
    /// No router: every request gets each model's standalone score (no per-query information).
    Static,
}

impl SemanticRouterConfig {
    /// The noise's range; the error names `path.noise`.
    pub fn validate(&self, path: &str) -> Result<(), FieldError> {
        if let SemanticRouterConfig::Noisy { noise } = self {
            non_negative(&format!("{path}.noise"), *noise)?;
        }
        Ok(())
    }

    /// The confidence of each model (index into `models`) for `workflow`.
    pub fn confidences(
        &self,
        workflow: &Workflow,
        models: &[ModelWorkload],
        rng: &mut SimRng,
        out: &mut Vec<f64>,
    ) {
        self.confidences_of(
            workflow.difficulty,
            workflow.outcome_draw,
            models.iter().map(|m| (m.capability, m.standalone_score)),
            rng,
            out,
        );
    }

    /// The confidence of each model, given as (capability `c_m`, standalone score in %), for a
    /// query of `difficulty` whose outcome draw is `outcome_draw` (a model succeeds when the
    /// draw falls below its success probability): one difficulty estimate drawn from `rng` per
    /// query for `Noisy`, no draw otherwise.
    pub fn confidences_of(
        &self,
        difficulty: f64,
        outcome_draw: f64,
        models: impl Iterator<Item = (f64, f64)>,
        rng: &mut SimRng,
        out: &mut Vec<f64>,
    ) {
        out.clear();
        match self {
            SemanticRouterConfig::Noisy { noise } => {
                let eps: f64 = StandardNormal.sample(rng);
                let estimate = difficulty + noise * eps;
                out.extend(models.map(|(c, _)| success_probability(c, estimate)));
            }
            SemanticRouterConfig::Oracle => out.extend(models.map(|(c, _)| {
                if outcome_draw < success_probability(c, difficulty) {
                    1.0
                } else {
                    0.0
                }
            })),
            SemanticRouterConfig::Static => out.extend(models.map(|(_, score)| score / 100.0)),
        }
    }
}

/// How the length predictor's estimate `y_hat` of a request's remaining workflow tokens (and of
/// its own stage's tokens) is produced.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum PredictorConfig {
    /// A learned regressor: the truth times `exp(noise * eps)`, `eps ~ N(0, 1)` per prediction.
    Noisy { noise: f64 },
    /// The true remaining tokens.
    Oracle,
    /// Proxy: the request's input length.
    InputLength,
    /// Proxy: the submission order (turns every length-based policy into FCFS).
    Fcfs,
}

impl PredictorConfig {
    /// The noise's range; the error names `path.noise`.
    pub fn validate(&self, path: &str) -> Result<(), FieldError> {
        if let PredictorConfig::Noisy { noise } = self {
            non_negative(&format!("{path}.noise"), *noise)?;
        }
        Ok(())
    }

    /// The prediction for a request whose truth is `truth` tokens, with `prompt_tokens` input
    /// tokens, submitted as the `sequence`-th request.
    pub fn predict(&self, truth: u64, prompt_tokens: u32, sequence: u64, rng: &mut SimRng) -> f64 {
        match self {
            PredictorConfig::Noisy { noise } => {
                let eps: f64 = StandardNormal.sample(rng);
                truth as f64 * (noise * eps).exp()
            }
            PredictorConfig::Oracle => truth as f64,
            PredictorConfig::InputLength => f64::from(prompt_tokens),
            PredictorConfig::Fcfs => sequence as f64,
        }
    }
}
