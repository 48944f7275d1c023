//! chimera: Chimera's load balancer (chimera.txt Algorithm 1, section 3.6). For a workflow's first
//! request: estimate each engine's delay from the activity monitor, `L[m] = P_m x
//! decode_ms_per_token / max_batch_size`; take the fastest engine; walk the engines by descending
//! router confidence and stop at the first within the latency slack, `L[m] <= (1 + slack) x
//! L_fast`, switching to it only if its confidence beats the fastest's by at least `margin`. Later
//! requests of the workflow reuse that engine (execution locality).

use expertsim_serving::serving::{EngineState, RouteRequest, Router};
use std::collections::HashMap;

/// Slack-bounded, confidence-ranked, sticky dispatcher.
#[derive(Debug)]
pub struct ChimeraDispatcher {
    slack: f64,
    margin: f64,
    /// Workflow (program id) -> engine; the assignment map `A`.
    assignments: HashMap<u64, usize>,
    order: Vec<usize>,
}

impl ChimeraDispatcher {
    pub fn new(slack: f64, margin: f64) -> ChimeraDispatcher {
        ChimeraDispatcher {
            slack,
            margin,
            assignments: HashMap::new(),
            order: Vec::new(),
        }
    }

    /// Algorithm 1, lines 4-22: the engine for a workflow's first request.
    pub fn select(&mut self, confidence: &[f64], engines: &[EngineState]) -> usize {
        let delay = |e: usize| engines[e].estimated_delay_ms();
        let mut fast = 0;
        for e in 1..engines.len() {
            if delay(e) < delay(fast) {
                fast = e;
            }
        }
        let bound = (1.0 + self.slack) * delay(fast);
        let mut chosen = fast;
        self.order.clear();
        self.order.extend(0..engines.len());
        // Descending confidence; ties to the lower index (stable sort).
        self.order
            .sort_by(|&a, &b| confidence[b].total_cmp(&confidence[a]));
        for &e in &self.order {
            if delay(e) <= bound {
                if confidence[e] >= confidence[fast] + self.margin {
                    chosen = e;
                }
                break;
            }
        }
        chosen
    }
}

impl Router for ChimeraDispatcher {
    fn name(&self) -> &'static str {
        "chimera"
    }
    fn reset(&mut self, _n_engines: usize) {
        self.assignments.clear();
    }
    fn route(&mut self, request: &RouteRequest<'_>, engines: &[EngineState]) -> usize {
        if let Some(&engine) = self.assignments.get(&request.workflow) {
            return engine;
        }
        let engine = self.select(request.confidence, engines);
        self.assignments.insert(request.workflow, engine);
        engine
    }
    fn workflow_done(&mut self, workflow: u64) {
        self.assignments.remove(&workflow);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::testutil::engine;
    use rand::RngExt;

    fn request<'a>(workflow: u64, stage: u32, confidence: &'a [f64]) -> RouteRequest<'a> {
        RouteRequest {
            id: workflow * 4 + u64::from(stage),
            workflow,
            stage,
            confidence,
            predicted_total_tokens: &[100.0; 4],
        }
    }

    /// Random loads and confidences: the chosen engine is never slower than (1 + slack) x the
    /// fastest, is the most confident engine within the slack whenever that one clears the
    /// margin, and otherwise the fastest.
    #[test]
    fn never_picks_an_engine_outside_the_slack() {
        let mut rng = expertsim_serving::rng::stream(3, "test");
        for slack in [0.0, 0.1, 0.5, 2.0] {
            let mut d = ChimeraDispatcher::new(slack, 0.05);
            for workflow in 0..2_000 {
                let n = rng.random_range(2..5usize);
                let engines: Vec<EngineState> = (0..n)
                    .map(|m| engine(m, 0, 0, rng.random_range(0.0..10_000.0)))
                    .collect();
                let confidence: Vec<f64> = (0..n).map(|_| rng.random::<f64>()).collect();
                let chosen = d.route(&request(workflow, 0, &confidence), &engines);
                let delays: Vec<f64> = engines.iter().map(|e| e.estimated_delay_ms()).collect();
                let fastest = delays.iter().cloned().fold(f64::INFINITY, f64::min);
                assert!(
                    delays[chosen] <= (1.0 + slack) * fastest,
                    "slack {slack}: chose {chosen} with {delays:?}"
                );
                let fast = delays.iter().position(|&x| x == fastest).unwrap();
                let best_within = (0..n)
                    .filter(|&e| delays[e] <= (1.0 + slack) * fastest)
                    .max_by(|&a, &b| confidence[a].total_cmp(&confidence[b]).then(b.cmp(&a)))
                    .unwrap();
                let expected = if confidence[best_within] >= confidence[fast] + 0.05 {
                    best_within
                } else {
                    fast
                };
                assert_eq!(chosen, expected);
            }
        }
    }

    #[test]
    fn keeps_a_workflow_on_its_first_engine() {
        let mut d = ChimeraDispatcher::new(0.5, 0.05);
        d.reset(2);
        let idle = [engine(0, 0, 0, 0.0), engine(1, 0, 0, 0.0)];
        // Both idle: the more confident engine 1 is within the slack.
        assert_eq!(d.route(&request(7, 0, &[0.2, 0.9]), &idle), 1);
        // Engine 1 becomes far slower and less confident: stage 1 stays on it anyway.
        let busy = [engine(0, 0, 0, 0.0), engine(1, 50, 50, 1e9)];
        for stage in 1..4 {
            assert_eq!(d.route(&request(7, stage, &[0.9, 0.1]), &busy), 1);
        }
        // A new workflow sees the load: engine 1 is outside the slack.
        assert_eq!(d.route(&request(8, 0, &[0.2, 0.9]), &busy), 0);
        // Once done, workflow 7's assignment is forgotten.
        d.workflow_done(7);
        assert_eq!(d.route(&request(7, 0, &[0.2, 0.9]), &busy), 0);
    }

    /// One model on every engine (the serving family's homogeneous cluster): equal
    /// confidences never clear a positive margin, so the dispatcher picks the engine of least
    /// estimated delay, `P_m x decode_ms_per_token / max_batch_size`.
    #[test]
    fn with_equal_confidences_it_picks_the_least_estimated_delay() {
        let mut d = ChimeraDispatcher::new(0.5, 0.05);
        let mut engines = [
            engine(0, 0, 0, 300.0),
            engine(0, 0, 0, 100.0),
            engine(0, 0, 0, 120.0),
        ];
        // Engine 2 is twice as fast per token: 120 x 10 / 64 beats 100 x 20 / 64.
        engines[2].decode_ms_per_token = 10.0;
        assert_eq!(d.route(&request(1, 0, &[0.0; 3]), &engines), 2);
        engines[2].decode_ms_per_token = 20.0;
        assert_eq!(d.route(&request(2, 0, &[0.0; 3]), &engines), 1);
    }

    #[test]
    fn the_margin_keeps_marginal_gains_on_the_fastest_engine() {
        let mut d = ChimeraDispatcher::new(1.0, 0.1);
        let engines = [engine(0, 0, 0, 100.0), engine(1, 0, 0, 150.0)];
        assert_eq!(d.route(&request(1, 0, &[0.50, 0.55]), &engines), 0);
        assert_eq!(d.route(&request(2, 0, &[0.50, 0.65]), &engines), 1);
        // Zero slack: only the fastest is eligible.
        let mut tight = ChimeraDispatcher::new(0.0, 0.0);
        assert_eq!(tight.route(&request(3, 0, &[0.1, 0.99]), &engines), 0);
    }
}
