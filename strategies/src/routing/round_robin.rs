//! round_robin: engines in turn, ignoring load and confidence.

use expertsim_serving::serving::{EngineState, RouteRequest, Router};

/// Engine 0, 1, ..., n-1, 0, ...
#[derive(Debug, Default)]
pub struct RoundRobin {
    next: usize,
}

impl Router for RoundRobin {
    fn name(&self) -> &'static str {
        "round_robin"
    }
    fn reset(&mut self, _n_engines: usize) {
        self.next = 0;
    }
    fn route(&mut self, _request: &RouteRequest<'_>, engines: &[EngineState]) -> usize {
        let chosen = self.next % engines.len();
        self.next = chosen + 1;
        chosen
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::testutil::engine;

    #[test]
    fn cycles_through_the_engines() {
        let engines = [
            engine(0, 0, 0, 0.0),
            engine(1, 9, 9, 9.0),
            engine(2, 0, 0, 0.0),
        ];
        let request = RouteRequest {
            id: 0,
            workflow: 0,
            stage: 0,
            confidence: &[0.0; 3],
            predicted_total_tokens: &[1.0; 3],
        };
        let mut r = RoundRobin::default();
        r.reset(3);
        let picks: Vec<usize> = (0..7).map(|_| r.route(&request, &engines)).collect();
        assert_eq!(picks, vec![0, 1, 2, 0, 1, 2, 0]);
    }
}
