//! What Chimera's length predictor and semantic router (`serving::predictors`) say about each
//! request of the serving family. A serving request is a one-stage workflow: its predicted
//! stage tokens and its predicted total remaining tokens are one prediction of its output length
//! (`PredictorConfig::predict` on the true length drawn at arrival), the attained service of its
//! workflow is 0 (so `mlfq` keeps every request in its top level: FCFS), and LTR's ranking noise
//! is a standard normal draw of its own. Each request also draws a difficulty `d ~ N(0, 1)` and an
//! outcome `u ~ U(0, 1)`, Chimera's workflow model: a replica group whose model has the standalone
//! task score `s_m` (capability `c_m`, `serving::agent_workflows::capability_for_score`) solves it when
//! `u < sigmoid(a (c_m - d))`, and the semantic router's confidence in each group comes from
//! `SemanticRouterConfig::confidences_of`. Each kind of draw has its own stream, so adding one
//! never moves another. A workflow stage (`workflows`) draws instead as the chimera family's
//! stages do: one prediction per replica of its workflow's remaining tokens on that replica's
//! model, one of its own tokens on the chosen replica's, one ranking noise, and the semantic
//! router's confidences once per workflow.

use super::config::ServingScenario;
use crate::rng::{SimRng, stream};
use crate::serving::agent_workflows::{capability_for_score, success_probability};
use crate::serving::predictors::{PredictorConfig, SemanticRouterConfig};
use rand::RngExt;
use rand_distr::{Distribution, StandardNormal};

/// One request's draws.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RequestDraws {
    /// The length predictor's output tokens (stage and total: one stage).
    pub predicted_tokens: f64,
    /// LTR's ranking noise.
    pub rank_noise: f64,
    pub difficulty: f64,
    pub outcome_draw: f64,
}

/// The predictor, the semantic router and their streams for one run.
pub struct Predictions {
    predictor: PredictorConfig,
    semantic_router: Option<SemanticRouterConfig>,
    /// Per replica group: (capability `c_m`, standalone score %), when every group has a score.
    groups: Option<Vec<(f64, f64)>>,
    /// The group of each replica.
    group_of_replica: Vec<usize>,
    rng_predictor: SimRng,
    rng_rank: SimRng,
    rng_difficulty: SimRng,
    rng_router: SimRng,
    group_confidence: Vec<f64>,
}

impl Predictions {
    pub fn new(scenario: &ServingScenario, seed: u64) -> Predictions {
        let groups = scenario
            .groups()
            .map(|(_, r)| {
                r.task_score_pct
                    .map(|score| (capability_for_score(score / 100.0), score))
            })
            .collect::<Option<Vec<_>>>();
        let group_of_replica = scenario
            .groups()
            .enumerate()
            .flat_map(|(g, (_, r))| std::iter::repeat_n(g, r.count))
            .collect();
        Predictions {
            predictor: scenario.predictor.clone(),
            semantic_router: scenario.semantic_router.clone(),
            groups,
            group_of_replica,
            rng_predictor: stream(seed, "predictor"),
            rng_rank: stream(seed, "rank"),
            rng_difficulty: stream(seed, "difficulty"),
            rng_router: stream(seed, "semantic_router"),
            group_confidence: Vec::new(),
        }
    }

    /// The draws of request `id` with `prompt_tokens` input and `output_tokens` true output.
    pub fn draw(&mut self, id: u64, prompt_tokens: u32, output_tokens: u32) -> RequestDraws {
        RequestDraws {
            predicted_tokens: self.predictor.predict(
                u64::from(output_tokens),
                prompt_tokens,
                id,
                &mut self.rng_predictor,
            ),
            rank_noise: StandardNormal.sample(&mut self.rng_rank),
            difficulty: StandardNormal.sample(&mut self.rng_difficulty),
            outcome_draw: self.rng_difficulty.random::<f64>(),
        }
    }

    /// The semantic router's confidence in each replica's model for `request`, into `out` (one
    /// per replica); empty without Chimera routing. Replicas of a group without a task score
    /// (a cluster of one model) all get 0: equal confidences, the router's choice falls to the
    /// load estimate.
    pub fn confidences(&mut self, request: &RequestDraws, out: &mut Vec<f64>) {
        out.clear();
        let Some(router) = &self.semantic_router else {
            return;
        };
        match &self.groups {
            Some(groups) => {
                router.confidences_of(
                    request.difficulty,
                    request.outcome_draw,
                    groups.iter().copied(),
                    &mut self.rng_router,
                    &mut self.group_confidence,
                );
                out.extend(
                    self.group_of_replica
                        .iter()
                        .map(|&g| self.group_confidence[g]),
                );
            }
            None => out.resize(self.group_of_replica.len(), 0.0),
        }
    }

    /// The predictor's estimate for a request (`id`, `prompt_tokens` input tokens) whose truth
    /// is `truth` tokens, from the predictor's stream: a workflow stage asks it for its
    /// workflow's remaining tokens on each replica's model and then for its own tokens on the
    /// chosen one (`workflows`), as the chimera family does.
    pub fn predict(&mut self, truth: u64, prompt_tokens: u32, id: u64) -> f64 {
        self.predictor
            .predict(truth, prompt_tokens, id, &mut self.rng_predictor)
    }

    /// LTR's ranking noise of a workflow stage, from the ranking stream.
    pub fn rank_noise(&mut self) -> f64 {
        StandardNormal.sample(&mut self.rng_rank)
    }

    /// The semantic router's confidence in each replica group's model for a workflow of
    /// `difficulty` whose outcome draw is `outcome_draw`, into `out` (one per group); empty
    /// without Chimera routing.
    pub fn group_confidences(&mut self, difficulty: f64, outcome_draw: f64, out: &mut Vec<f64>) {
        out.clear();
        let (Some(router), Some(groups)) = (&self.semantic_router, &self.groups) else {
            return;
        };
        router.confidences_of(
            difficulty,
            outcome_draw,
            groups.iter().copied(),
            &mut self.rng_router,
            out,
        );
    }

    /// Whether every replica group has a task score (`solves` answers).
    pub fn scores_tasks(&self) -> bool {
        self.groups.is_some()
    }

    /// Whether replica `replica`'s model solves `request`, when every group has a task score.
    pub fn solves(&self, replica: usize, request: &RequestDraws) -> Option<bool> {
        let (capability, _) = self.groups.as_ref()?[self.group_of_replica[replica]];
        Some(request.outcome_draw < success_probability(capability, request.difficulty))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The noisy predictor is the truth times `exp(noise x eps)`: over many requests the log
    /// ratio has mean 0 and standard deviation `noise`; the oracle is the truth.
    #[test]
    fn the_noisy_predictor_has_the_stated_log_normal_error() {
        let noise = 0.6;
        let mut p = Predictions {
            predictor: PredictorConfig::Noisy { noise },
            semantic_router: None,
            groups: None,
            group_of_replica: vec![0],
            rng_predictor: stream(1, "predictor"),
            rng_rank: stream(1, "rank"),
            rng_difficulty: stream(1, "difficulty"),
            rng_router: stream(1, "semantic_router"),
            group_confidence: Vec::new(),
        };
        let n = 100_000;
        let logs: Vec<f64> = (0..n)
            .map(|id| (p.draw(id, 100, 300).predicted_tokens / 300.0).ln())
            .collect();
        let mean = logs.iter().sum::<f64>() / n as f64;
        let sd = (logs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64).sqrt();
        assert!(mean.abs() < 0.01, "{mean}");
        assert!((sd - noise).abs() < 0.01, "{sd}");
        p.predictor = PredictorConfig::Oracle;
        assert_eq!(p.draw(7, 100, 300).predicted_tokens, 300.0);
    }
}
