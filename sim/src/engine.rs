//! The engine loop: a `Model` with its own event type, and `run`, which pops events in (time,
//! FIFO sequence) order until none is left. Each family's server is a `Model` whose event enum
//! carries what its handler needs (which engine finished a step, say), so no model keeps a second
//! queue beside the engine's and no handler has arms for events it never schedules.

use crate::event_queue::EventQueue;
use crate::time::SimTime;

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
        model.handle(now, event, &mut events);
        handled += 1;
    }
    LoopStats {
        events: handled,
        end: events.now(),
    }
}

#[cfg(test)]
#[path = "one_engine_checks.rs"]
mod one_engine_checks;

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
