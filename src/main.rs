//! The expertsim command-line interface.
fn main() {}
