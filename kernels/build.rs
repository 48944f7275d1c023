//! Marks the NVRTC compile tests ignored (`cfg(nvrtc_missing)`) when libnvrtc cannot be loaded
//! where they are built, so a plain `cargo test` on a machine without NVRTC lists them as
//! ignored rather than passed. With `CI=true` (`.ci/run`) they are never ignored: there a
//! missing NVRTC fails them.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(nvrtc_missing)");
    println!("cargo::rerun-if-env-changed=CI");
    println!("cargo::rerun-if-env-changed=LD_LIBRARY_PATH");
    println!("cargo::rerun-if-changed=build.rs");
    let in_ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    if !in_ci && !nvrtc_loadable() {
        println!("cargo::rustc-cfg=nvrtc_missing");
    }
}

/// Whether one of the names cudarc tries for NVRTC on Linux loads.
fn nvrtc_loadable() -> bool {
    [
        "libnvrtc.so",
        "libnvrtc.so.12",
        "libnvrtc.so.11",
        "libnvrtc.so.10",
        "libnvrtc.so.9",
        "libnvrtc.so.1",
    ]
    .iter()
    // SAFETY: loading a shared library runs its initialisers; NVRTC's are the ones the tests
    // themselves would run.
    .any(|name| unsafe { libloading::Library::new(*name) }.is_ok())
}
