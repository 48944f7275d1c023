//! Integration tests of the policies inside the serving layer, linked as one test binary (one
//! link, not three, in CI's build from nothing).

mod families_in_serving;
mod serving_equivalence;
mod serving_mapping;
