//! Criterion benchmark of the bare engine loop: a model that keeps a fixed population of pending
//! events (each handled event schedules one successor at a pseudo-random later time), so the
//! measurement is heap push + pop + dispatch. Run: `cargo bench -p expertsim-core --bench event_loop`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use expertsim_core::engine::{Model, run};
use expertsim_core::event_queue::EventQueue;
use expertsim_core::time::{SimDuration, SimTime};
use std::hint::black_box;

const EVENTS: u64 = 1_000_000;
const IN_FLIGHT: u64 = 64;

struct Churn {
    remaining: u64,
    state: u64,
}

/// The churn's one event: which of the in-flight slots it belongs to.
#[derive(Clone, Copy, Debug)]
struct Wake(u64);

impl Model for Churn {
    type Event = Wake;
    fn start(&mut self, events: &mut EventQueue<Wake>) {
        for i in 0..IN_FLIGHT {
            events.schedule(SimTime(i), Wake(i));
        }
    }
    fn handle(&mut self, now: SimTime, event: Wake, events: &mut EventQueue<Wake>) {
        black_box(event.0);
        if self.remaining > 0 {
            self.remaining -= 1;
            // xorshift step for a cheap, deterministic delay
            self.state ^= self.state << 13;
            self.state ^= self.state >> 7;
            self.state ^= self.state << 17;
            events.schedule(now + SimDuration(1 + self.state % 1000), event);
        }
    }
}

fn event_loop(c: &mut Criterion) {
    let mut group = c.benchmark_group("engine");
    group.throughput(Throughput::Elements(EVENTS + IN_FLIGHT));
    group.bench_function("event_loop_1M_events", |b| {
        b.iter(|| {
            let mut model = Churn {
                remaining: EVENTS,
                state: 0x9e37_79b9_7f4a_7c15,
            };
            let stats = run(&mut model);
            assert_eq!(stats.events, EVENTS + IN_FLIGHT);
            stats
        })
    });
    group.finish();
}

criterion_group!(benches, event_loop);
criterion_main!(benches);
