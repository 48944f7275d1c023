//! The engine loop: a `Model` with its own event type, and `run`, which pops events in (time,
//! FIFO sequence) order until none is left. Each family's server is a `Model` whose event enum
//! carries what its handler needs (which engine finished a step, say), so no model keeps a second
//! queue beside the engine's and no handler has arms for events it never schedules.
//!
//! Simulated time saturates at `SimTime::MAX` rather than overflow (`crate::time`); an event
//! there means the run outlasted what integer nanoseconds hold. `run` notes it and `guarded`,
//! around a whole run of a family, turns it into an error, so no such run reports numbers.

use crate::event_queue::EventQueue;
use crate::time::SimTime;
use std::cell::Cell;

thread_local! {
    /// Whether a `run` on this thread handled an event at `SimTime::MAX` since `guarded` began.
    static RAN_OUT_OF_TIME: Cell<bool> = const { Cell::new(false) };
}

/// A serving system driven by events of its own type.
pub trait Model {
    /// The events this model schedules and handles.
    type Event;
    /// Schedules the first events.
    fn start(&mut self, events: &mut EventQueue<Self::Event>);
    /// Handles one event at `now`, scheduling any follow-ups.
    fn handle(&mut self, now: SimTime, event: Self::Event, events: &mut EventQueue<Self::Event>);
}

/// What the loop itself observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoopStats {
    pub events: u64,
    pub end: SimTime,
}

/// Runs `model` until its event queue is empty.
pub fn run<M: Model>(model: &mut M) -> LoopStats {
    let mut events = EventQueue::new();
    model.start(&mut events);
    let mut handled = 0u64;
    while let Some((now, event)) = events.pop() {
        if now == SimTime::MAX {
            RAN_OUT_OF_TIME.set(true);
        }
        model.handle(now, event, &mut events);
        handled += 1;
    }
    LoopStats {
        events: handled,
        end: events.now(),
    }
}

/// A run whose events reached `SimTime::MAX`: its numbers mean nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RanOutOfTime;

impl std::fmt::Display for RanOutOfTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "simulated time ran out: an event fell past the last nanosecond simulated time holds \
             (about 584 years), so a step or load lasted implausibly long; check the scenario's \
             speed factors, profiles and durations"
        )
    }
}

/// Runs `simulation` (one run of a family, any number of `run`s on this thread) and fails if
/// any of its events reached `SimTime::MAX`.
pub fn guarded<T>(simulation: impl FnOnce() -> T) -> Result<T, RanOutOfTime> {
    RAN_OUT_OF_TIME.set(false);
    let value = simulation();
    if RAN_OUT_OF_TIME.replace(false) {
        Err(RanOutOfTime)
    } else {
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::SimDuration;

    /// A clock that ticks `remaining` times, 10 ns apart, and records when and which tick.
    struct Ticker {
        remaining: u32,
        seen: Vec<(SimTime, u32)>,
    }
    /// The ticker's one event: the tick's number.
    struct Tick(u32);
    impl Model for Ticker {
        type Event = Tick;
        fn start(&mut self, events: &mut EventQueue<Tick>) {
            events.schedule(SimTime(0), Tick(0));
        }
        fn handle(&mut self, now: SimTime, Tick(n): Tick, events: &mut EventQueue<Tick>) {
            self.seen.push((now, n));
            self.remaining -= 1;
            if self.remaining > 0 {
                events.schedule(now + SimDuration(10), Tick(n + 1));
            }
        }
    }

    #[test]
    fn a_run_past_the_last_nanosecond_is_an_error_not_a_panic() {
        /// Ticks whose gap is so long that the second tick saturates at `SimTime::MAX`.
        struct Forever(u32);
        impl Model for Forever {
            type Event = ();
            fn start(&mut self, events: &mut EventQueue<()>) {
                events.schedule(SimTime(0), ());
            }
            fn handle(&mut self, now: SimTime, (): (), events: &mut EventQueue<()>) {
                self.0 += 1;
                if self.0 < 3 {
                    events.schedule(now + SimDuration(u64::MAX / 2 + 1), ());
                }
            }
        }
        let outcome = guarded(|| run(&mut Forever(0)));
        assert_eq!(outcome, Err(RanOutOfTime));
        let ticker = guarded(|| {
            run(&mut Ticker {
                remaining: 2,
                seen: vec![],
            })
        });
        assert!(
            ticker.is_ok(),
            "the flag is cleared by the next guarded run"
        );
    }

    #[test]
    fn runs_until_no_event_is_left() {
        let mut ticker = Ticker {
            remaining: 5,
            seen: vec![],
        };
        let stats = run(&mut ticker);
        assert_eq!(
            stats,
            LoopStats {
                events: 5,
                end: SimTime(40)
            }
        );
        assert_eq!(
            ticker.seen,
            (0..5u32)
                .map(|i| (SimTime(u64::from(i) * 10), i))
                .collect::<Vec<_>>()
        );
    }
}
