//! The engine loop: one closed `Event` enum, a `Model` that handles events, and `run`, which pops
//! events in (time, FIFO sequence) order until none is left. Families of serving systems are
//! `Model`s; the loop itself never changes.

use crate::event_queue::EventQueue;
use crate::time::SimTime;

/// Every event the simulator knows. Events carry no payload beyond what the model needs to find
/// its own state, which keeps the queue entries small and the loop fast.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The model's pending arrival reaches the system.
    RequestArrival,
    /// The periodic scheduler wakes up (CAPS `scheduling_interval_ms`).
    SchedulerTick,
    /// The batch in execution finishes.
    BatchComplete,
}

/// A serving system driven by events.
pub trait Model {
    /// Schedules the first events.
    fn start(&mut self, events: &mut EventQueue<Event>);
    /// Handles one event at `now`, scheduling any follow-ups.
    fn handle(&mut self, now: SimTime, event: Event, events: &mut EventQueue<Event>);
}

/// What the loop itself observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoopStats {
    pub events: u64,
    pub end: SimTime,
}

/// Runs `model` until its event queue is empty.
pub fn run(model: &mut impl Model) -> LoopStats {
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
mod tests {
    use super::*;
    use crate::time::SimDuration;

    /// A clock that ticks `remaining` times, 10 ns apart, and records when.
    struct Ticker {
        remaining: u32,
        seen: Vec<SimTime>,
    }
    impl Model for Ticker {
        fn start(&mut self, events: &mut EventQueue<Event>) {
            events.schedule(SimTime(0), Event::SchedulerTick);
        }
        fn handle(&mut self, now: SimTime, event: Event, events: &mut EventQueue<Event>) {
            assert_eq!(event, Event::SchedulerTick);
            self.seen.push(now);
            self.remaining -= 1;
            if self.remaining > 0 {
                events.schedule(now + SimDuration(10), Event::SchedulerTick);
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
            (0..5).map(|i| SimTime(i * 10)).collect::<Vec<_>>()
        );
    }
}
