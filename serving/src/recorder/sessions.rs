//! The placed sessions of a run as its metric rows read them (MOSAIC's expert stage:
//! `serving_family::sessions` runs the workers, `serving_family::placement` plans them): the
//! workers' walls and their spread, the idle share, the loads, the expert tokens' rate, the
//! plan's prediction and its error, the MILP solver's report (docs/mosaic.md defines them).

/// What a placed run's workers did and what its plan predicted.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SessionSummary {
    /// When the last worker finished its last session, seconds (the expert stage's makespan).
    pub makespan_s: f64,
    /// Each worker's last session's end, seconds (0 for a worker that ran none).
    pub worker_walls_s: Vec<f64>,
    /// The workers' idle time (barrier waits and the tail) over workers x makespan, %.
    pub idle_pct: f64,
    /// Sessions that loaded their model, and their loads' total time, seconds.
    pub loads: u32,
    pub load_time_s: f64,
    /// Output tokens the sessions generated.
    pub output_tokens: u64,
    /// The makespan the plan predicts, where every model has a predicted session time.
    pub predicted_makespan_s: Option<f64>,
    /// The MILP solver's status code (`SolveStatus::code`: 1 optimal, 2 node limit, 3 gap, 4 no
    /// incumbent), relative gap and branch-and-bound nodes, where the policy solved one.
    pub solver: Option<(f64, f64, u64)>,
}

impl SessionSummary {
    /// The walls of the workers that ran a session, longest first.
    fn ranked(&self) -> Vec<f64> {
        let mut walls: Vec<f64> = self
            .worker_walls_s
            .iter()
            .copied()
            .filter(|&w| w > 0.0)
            .collect();
        walls.sort_by(|a, b| b.total_cmp(a));
        walls
    }

    /// The wall of the worker that finished first among those that ran a session (0 when none
    /// did).
    pub fn fastest_worker_s(&self) -> f64 {
        self.ranked().last().copied().unwrap_or(0.0)
    }

    /// The `rank`-th longest wall among the workers that ran a session (rank 1 is the slowest);
    /// 0 when fewer ran.
    pub fn worker_wall_ranked_s(&self, rank: usize) -> f64 {
        rank.checked_sub(1)
            .and_then(|i| self.ranked().get(i).copied())
            .unwrap_or(0.0)
    }

    /// The slowest worker's wall over the fastest's (1 when they finish together; 0 when no
    /// worker ran a session).
    pub fn worker_wall_ratio(&self) -> f64 {
        let fastest = self.fastest_worker_s();
        if fastest > 0.0 {
            self.worker_wall_ranked_s(1) / fastest
        } else {
            0.0
        }
    }

    /// Output tokens per second of the makespan (0 for an empty run).
    pub fn expert_tokens_per_s(&self) -> f64 {
        if self.makespan_s > 0.0 {
            self.output_tokens as f64 / self.makespan_s
        } else {
            0.0
        }
    }

    /// The predicted makespan, NaN (`null`) where the plan has none.
    pub fn predicted_makespan_s(&self) -> f64 {
        self.predicted_makespan_s.unwrap_or(f64::NAN)
    }

    /// The makespan against the prediction, % of the prediction (NaN without one).
    pub fn prediction_error_pct(&self) -> f64 {
        match self.predicted_makespan_s {
            Some(p) if p > 0.0 => 100.0 * (self.makespan_s - p) / p,
            _ => f64::NAN,
        }
    }

    /// The solver's status code, gap and nodes; 0 where no MILP was solved (as the mosaic
    /// family reports a heuristic's).
    pub fn ilp_status(&self) -> f64 {
        self.solver.map_or(0.0, |s| s.0)
    }

    pub fn ilp_gap(&self) -> f64 {
        self.solver.map_or(0.0, |s| s.1)
    }

    pub fn ilp_nodes(&self) -> f64 {
        self.solver.map_or(0.0, |s| s.2 as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Four workers, one of which ran no session (wall 0), by hand: fastest 40 s, ranks 100 /
    /// 70 / 40, ratio 2.5; 5,000 tokens over 100 s; 80 s predicted, +25 %; an optimal MILP.
    #[test]
    fn the_rows_by_hand() {
        let s = SessionSummary {
            makespan_s: 100.0,
            worker_walls_s: vec![100.0, 40.0, 0.0, 70.0],
            idle_pct: 0.0,
            loads: 3,
            load_time_s: 30.0,
            output_tokens: 5_000,
            predicted_makespan_s: Some(80.0),
            solver: Some((1.0, 0.0, 17)),
        };
        assert_eq!(s.fastest_worker_s(), 40.0);
        assert_eq!(
            [1, 2, 3, 4].map(|r| s.worker_wall_ranked_s(r)),
            [100.0, 70.0, 40.0, 0.0]
        );
        assert_eq!(s.worker_wall_ratio(), 2.5);
        assert_eq!(s.expert_tokens_per_s(), 50.0);
        assert_eq!(s.prediction_error_pct(), 25.0);
        assert_eq!(
            (s.ilp_status(), s.ilp_gap(), s.ilp_nodes()),
            (1.0, 0.0, 17.0)
        );
        // No prediction: null; no session anywhere: zeros; no MILP: zeros.
        let none = SessionSummary::default();
        assert!(none.predicted_makespan_s().is_nan() && none.prediction_error_pct().is_nan());
        assert_eq!(
            (
                none.fastest_worker_s(),
                none.worker_wall_ratio(),
                none.expert_tokens_per_s()
            ),
            (0.0, 0.0, 0.0)
        );
        assert_eq!(none.ilp_status(), 0.0);
    }
}
