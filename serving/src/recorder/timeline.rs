//! A run's timeline (`[output] timeline`, the `timeline` figure; MOSAIC's Figure 5): per row (a
//! replica's GPUs, or under `[placement]` a worker's), the intervals a model spends loading,
//! running steps and idle, over simulated time. Each replica records the intervals its steps
//! cover (`BusyIntervals`: steps that follow each other make one interval, and the count stays
//! bounded by merging gaps below a resolution that doubles when a replica passes
//! `MAX_INTERVALS`); `rows` lays the replicas' loads and busy intervals out on their rows and
//! fills every gap with idle time, so each row tiles [0, the run's end].

use crate::time::{SimDuration, SimTime};
use serde::Serialize;

/// Most busy intervals a replica keeps: past it, gaps below a coarser resolution are merged
/// until half as many are left.
pub const MAX_INTERVALS: usize = 256;

/// The first resolution a replica's intervals are merged at once it passes `MAX_INTERVALS`
/// (1 ms), doubled as often as needed.
const FIRST_RESOLUTION: SimDuration = SimDuration(1_000_000);

/// The time one replica spent in steps, as intervals in time order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BusyIntervals {
    intervals: Vec<(SimTime, SimTime)>,
    /// Gaps at most this long are merged into the busy time around them (zero until
    /// `MAX_INTERVALS` is passed).
    resolution: SimDuration,
    /// The start of the step in execution.
    step_start: Option<SimTime>,
}

impl BusyIntervals {
    /// A step starts at `now`.
    pub fn step_started(&mut self, now: SimTime) {
        self.step_start = Some(now);
    }

    /// The step in execution ends at `now`.
    pub fn step_ended(&mut self, now: SimTime) {
        if let Some(start) = self.step_start.take() {
            self.add(start, now);
        }
    }

    /// The replica was busy over [`start`, `end`] (`start` no earlier than the last interval's
    /// start).
    pub fn add(&mut self, start: SimTime, end: SimTime) {
        push_merged(&mut self.intervals, (start, end), self.resolution);
        if self.intervals.len() > MAX_INTERVALS {
            while self.intervals.len() > MAX_INTERVALS / 2 {
                self.resolution = FIRST_RESOLUTION.max(SimDuration(self.resolution.0 * 2));
                let mut merged = Vec::with_capacity(self.intervals.len());
                for &interval in &self.intervals {
                    push_merged(&mut merged, interval, self.resolution);
                }
                self.intervals = merged;
            }
        }
    }

    /// The busy intervals, in time order.
    pub fn intervals(&self) -> &[(SimTime, SimTime)] {
        &self.intervals
    }

    /// The longest gap merged into busy time (zero: every gap between steps is kept).
    pub fn resolution(&self) -> SimDuration {
        self.resolution
    }
}

/// Appends `interval` to `intervals`, extending the last one when the gap between them is at
/// most `resolution`.
fn push_merged(
    intervals: &mut Vec<(SimTime, SimTime)>,
    (start, end): (SimTime, SimTime),
    resolution: SimDuration,
) {
    match intervals.last_mut() {
        Some(last) if start <= last.1 + resolution => last.1 = last.1.max(end),
        _ => intervals.push((start, end)),
    }
}

/// One replica's place on the timeline.
#[derive(Clone, Debug)]
pub struct ReplicaTimeline<'a> {
    /// The model it serves.
    pub model: &'a str,
    /// The rows it occupies (its own; placed, its worker's, or every worker's for the
    /// aggregator that runs on them all).
    pub rows: Vec<usize>,
    /// When it loaded its model, where it did.
    pub load: Option<(SimTime, SimTime)>,
    /// When it ran steps.
    pub busy: &'a BusyIntervals,
}

/// One interval of a row: `kind` is "load", "run" or "idle" (no model).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Segment {
    pub kind: &'static str,
    pub model: Option<String>,
    pub start_s: f64,
    pub end_s: f64,
}

/// One row of the timeline: its label and its segments, tiling [0, the run's end].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    pub label: String,
    pub segments: Vec<Segment>,
}

/// The rows named `labels`, each with the loads and busy intervals of the replicas on it in
/// time order and idle time in every gap, up to `end` (or the last segment's end, if later).
/// Where intervals on a row overlap, the later one starts where the earlier ends.
pub fn rows(labels: Vec<String>, replicas: &[ReplicaTimeline<'_>], end: SimTime) -> Vec<Row> {
    let end = replicas
        .iter()
        .flat_map(|r| {
            r.load
                .iter()
                .map(|l| l.1)
                .chain(r.busy.intervals.last().map(|b| b.1))
        })
        .fold(end, SimTime::max);
    labels
        .into_iter()
        .enumerate()
        .map(|(row, label)| {
            // (start, end, kind, model): loads before runs that start with them.
            let mut on_row: Vec<(SimTime, SimTime, &'static str, &str)> = Vec::new();
            for r in replicas.iter().filter(|r| r.rows.contains(&row)) {
                if let Some((start, end)) = r.load.filter(|(s, e)| e > s) {
                    on_row.push((start, end, "load", r.model));
                }
                for &(start, end) in &r.busy.intervals {
                    on_row.push((start, end, "run", r.model));
                }
            }
            on_row.sort_by(|a, b| (a.0, a.2).cmp(&(b.0, b.2)));
            let mut segments = Vec::with_capacity(2 * on_row.len() + 1);
            let mut at = SimTime::ZERO;
            let mut push = |kind, model: Option<&str>, start: SimTime, end: SimTime| {
                segments.push(Segment {
                    kind,
                    model: model.map(str::to_string),
                    start_s: start.as_secs_f64(),
                    end_s: end.as_secs_f64(),
                });
            };
            for (start, stop, kind, model) in on_row {
                if stop <= at {
                    continue;
                }
                if start > at {
                    push("idle", None, at, start);
                }
                let start = start.max(at);
                push(kind, Some(model), start, stop);
                at = stop.max(at);
            }
            if end > at {
                push("idle", None, at, end);
            }
            Row { label, segments }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    //! Intervals by hand: steps back to back make one interval, a gap makes two, the count stays
    //! bounded; rows tile [0, end] with load, run and idle.

    use super::*;

    fn t(seconds: f64) -> SimTime {
        SimTime::from_secs_f64(seconds)
    }

    #[test]
    fn steps_back_to_back_are_one_interval_and_a_gap_starts_another() {
        let mut busy = BusyIntervals::default();
        for (start, end) in [(1.0, 2.0), (2.0, 3.5), (5.0, 6.0)] {
            busy.step_started(t(start));
            busy.step_ended(t(end));
        }
        assert_eq!(busy.intervals(), &[(t(1.0), t(3.5)), (t(5.0), t(6.0))]);
        assert_eq!(busy.resolution(), SimDuration::ZERO);
    }

    #[test]
    fn past_the_bound_short_gaps_merge_until_half_are_left() {
        let mut busy = BusyIntervals::default();
        // 1 ms steps with 1 ms gaps, then one 10 s gap.
        for i in 0..MAX_INTERVALS as u64 {
            busy.add(SimTime(2_000_000 * i), SimTime(2_000_000 * i + 1_000_000));
        }
        assert_eq!(busy.intervals().len(), MAX_INTERVALS);
        busy.add(t(20.0), t(21.0));
        // A 1 ms resolution closes every 1 ms gap, not the 10 s one.
        assert_eq!(busy.resolution(), SimDuration(1_000_000));
        assert_eq!(
            busy.intervals(),
            &[
                (
                    SimTime::ZERO,
                    SimTime(2_000_000 * (MAX_INTERVALS as u64 - 1) + 1_000_000)
                ),
                (t(20.0), t(21.0)),
            ]
        );
        // Later intervals merge at the same resolution.
        busy.add(SimTime(t(21.0).0 + 500_000), t(22.0));
        assert_eq!(busy.intervals().len(), 2);
        // Many widely spaced intervals never exceed the bound.
        for i in 0..10 * MAX_INTERVALS as u64 {
            busy.add(t(100.0 + 3.0 * i as f64), t(101.0 + 3.0 * i as f64));
            assert!(busy.intervals().len() <= MAX_INTERVALS);
        }
    }

    #[test]
    fn rows_tile_the_run_with_load_run_and_idle() {
        let mut a = BusyIntervals::default();
        a.add(t(10.0), t(30.0));
        let mut b = BusyIntervals::default();
        b.add(t(35.0), t(40.0));
        let mut agg = BusyIntervals::default();
        agg.add(t(45.0), t(50.0));
        let replicas = [
            ReplicaTimeline {
                model: "a",
                rows: vec![0],
                load: Some((t(0.0), t(10.0))),
                busy: &a,
            },
            ReplicaTimeline {
                model: "b",
                rows: vec![0],
                load: Some((t(30.0), t(35.0))),
                busy: &b,
            },
            ReplicaTimeline {
                model: "agg",
                rows: vec![0, 1],
                load: Some((t(40.0), t(45.0))),
                busy: &agg,
            },
        ];
        // Seconds as the rows report them (whole nanoseconds).
        let s = |seconds: f64| t(seconds).as_secs_f64();
        let rows = rows(vec!["w0".into(), "w1".into()], &replicas, t(48.0));
        fn shape(row: &Row) -> Vec<(&str, Option<&str>, f64, f64)> {
            row.segments
                .iter()
                .map(|s| (s.kind, s.model.as_deref(), s.start_s, s.end_s))
                .collect()
        }
        assert_eq!(
            shape(&rows[0]),
            vec![
                ("load", Some("a"), s(0.0), s(10.0)),
                ("run", Some("a"), s(10.0), s(30.0)),
                ("load", Some("b"), s(30.0), s(35.0)),
                ("run", Some("b"), s(35.0), s(40.0)),
                ("load", Some("agg"), s(40.0), s(45.0)),
                ("run", Some("agg"), s(45.0), s(50.0)),
            ]
        );
        // The end is the last segment's (50 s), past the given 48 s.
        assert_eq!(
            shape(&rows[1]),
            vec![
                ("idle", None, s(0.0), s(40.0)),
                ("load", Some("agg"), s(40.0), s(45.0)),
                ("run", Some("agg"), s(45.0), s(50.0)),
            ]
        );
    }
}
