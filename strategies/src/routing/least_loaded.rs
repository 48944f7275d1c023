//! least_loaded: vLLM's data-parallel load balancer, the engine with the lowest weighted sum of
//! waiting and running requests (vLLM v1 weighs a waiting request 4x a running one). Requests are
//! routed one by one, without workflow stickiness or model awareness.

use expertsim_serving::serving::{EngineState, RouteRequest, Router};

/// Lowest `waiting_weight * waiting + running_weight * running`; ties to the lower index.
#[derive(Debug)]
pub struct LeastLoaded {
    waiting_weight: f64,
    running_weight: f64,
}

impl LeastLoaded {
    pub fn new(waiting_weight: f64, running_weight: f64) -> LeastLoaded {
        LeastLoaded {
            waiting_weight,
            running_weight,
        }
    }
    fn score(&self, engine: &EngineState) -> f64 {
        self.waiting_weight * engine.waiting as f64 + self.running_weight * engine.running as f64
    }
}

impl Router for LeastLoaded {
    fn name(&self) -> &'static str {
        "least_loaded"
    }
    fn reset(&mut self, _n_engines: usize) {}
    fn route(&mut self, _request: &RouteRequest<'_>, engines: &[EngineState]) -> usize {
        let mut best = 0;
        for (i, engine) in engines.iter().enumerate().skip(1) {
            if self.score(engine) < self.score(&engines[best]) {
                best = i;
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::testutil::engine;

    #[test]
    fn picks_the_lowest_weighted_count() {
        let request = RouteRequest {
            id: 0,
            workflow: 0,
            stage: 0,
            confidence: &[1.0, 0.0, 0.0],
            predicted_total_tokens: &[1.0; 3],
        };
        let mut r = LeastLoaded::new(4.0, 1.0);
        // Scores 4*1+0 = 4, 0+5 = 5, 4*0+3 = 3.
        let engines = [
            engine(0, 1, 0, 0.0),
            engine(1, 0, 5, 0.0),
            engine(2, 0, 3, 0.0),
        ];
        assert_eq!(r.route(&request, &engines), 2);
        // Ties go to the lower index.
        let engines = [engine(0, 0, 4, 0.0), engine(1, 1, 0, 0.0)];
        assert_eq!(r.route(&request, &engines), 0);
    }
}
