//! Integration tests of the figures crate, linked as one test binary (one link, not three, in
//! CI's build from nothing).

mod charts;
mod render;
mod scatter;
