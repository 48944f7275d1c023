//! Progress of a calibration: a bar on a terminal (indicatif; hidden when stderr is not one)
//! with the points done, the time spent and the estimated time left, and the same estimate in
//! the log lines. The estimate assumes the points left take as long per unit of work
//! (`bench::Bench::work`: tile-padded multiply-adds plus a launch) as the points done did, so
//! it also carries the repetitions the stopping rule has needed so far.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// Points and work, done and in all.
pub struct Progress {
    bar: ProgressBar,
    started: Instant,
    points_done: usize,
    points_total: usize,
    work_done: f64,
    work_total: f64,
}

/// Seconds left when `done` of `total` work took `elapsed`: `elapsed x (total - done) / done`
/// (`None` before any work is done).
pub fn time_left(elapsed: Duration, done: f64, total: f64) -> Option<Duration> {
    (done > 0.0).then(|| elapsed.mul_f64(((total - done) / done).max(0.0)))
}

/// `1 h 02 min`, `3 min 05 s`, `12.3 s`.
pub fn human(duration: Duration) -> String {
    let s = duration.as_secs_f64();
    if s >= 3600.0 {
        format!(
            "{} h {:02} min",
            (s / 3600.0) as u64,
            ((s % 3600.0) / 60.0) as u64
        )
    } else if s >= 60.0 {
        format!("{} min {:02} s", (s / 60.0) as u64, (s % 60.0) as u64)
    } else {
        format!("{s:.1} s")
    }
}

impl Progress {
    /// A bar over `points_total` points of `work_total` work, drawn on stderr when it is a
    /// terminal and `draw` is true.
    pub fn new(points_total: usize, work_total: f64, draw: bool) -> Progress {
        let target = if draw {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let units = work_total.ceil().max(1.0) as u64;
        let bar = ProgressBar::with_draw_target(Some(units), target);
        let style =
            ProgressStyle::with_template("[{elapsed_precise}] {wide_bar} {msg}, about {left} left")
                .expect("a valid template")
                .with_key(
                    "left",
                    |state: &ProgressState, w: &mut dyn std::fmt::Write| {
                        let left = time_left(
                            state.elapsed(),
                            state.pos() as f64,
                            state.len().unwrap_or(0) as f64,
                        );
                        let _ = match left {
                            Some(d) => write!(w, "{}", human(d)),
                            None => write!(w, "?"),
                        };
                    },
                );
        bar.set_style(style);
        Progress {
            bar,
            started: Instant::now(),
            points_done: 0,
            points_total,
            work_done: 0.0,
            work_total,
        }
    }

    /// One more point of `work` done; `what` names it.
    pub fn point_done(&mut self, work: f64, what: &str) {
        self.points_done += 1;
        self.work_done += work;
        self.bar.set_position(self.work_done.round() as u64);
        self.bar.set_message(format!(
            "{}/{} points ({what})",
            self.points_done, self.points_total
        ));
    }

    /// `N/M points, X s so far, about Y left`, for log lines.
    pub fn summary(&self) -> String {
        let elapsed = self.started.elapsed();
        let mut line = format!(
            "{}/{} points, {} so far",
            self.points_done,
            self.points_total,
            human(elapsed)
        );
        if self.points_done < self.points_total
            && let Some(left) = time_left(elapsed, self.work_done, self.work_total)
        {
            let _ = write!(line, ", about {} left", human(left));
        }
        line
    }

    /// Prints `line` above the bar (or alone when the bar is hidden).
    pub fn println(&self, line: &str, log: &mut dyn FnMut(&str)) {
        if self.bar.is_hidden() {
            log(line);
        } else {
            self.bar.suspend(|| log(line));
        }
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_left_scales_the_elapsed_time_by_the_work_left() {
        let ten = Duration::from_secs(10);
        assert_eq!(time_left(ten, 25.0, 100.0), Some(Duration::from_secs(30)));
        assert_eq!(time_left(ten, 100.0, 100.0), Some(Duration::ZERO));
        assert_eq!(time_left(ten, 0.0, 100.0), None);
        assert_eq!(human(Duration::from_millis(12_345)), "12.3 s");
        assert_eq!(human(Duration::from_secs(185)), "3 min 05 s");
        assert_eq!(human(Duration::from_secs(3720)), "1 h 02 min");
    }
}
