//! Run-time compilation of the CUDA sources with NVRTC (loaded dynamically through cudarc):
//! the one code path the cuda backend and the CI compile check share. NVRTC's presence is
//! checked before any call, so a machine without it gets a typed error, never a panic.

use crate::BackendError;
use cudarc::nvrtc::{result, sys};
use std::ffi::{CStr, CString};

/// PTX text and whatever NVRTC logged (warnings) while producing it.
#[derive(Clone, Debug)]
pub struct CompiledPtx {
    pub ptx: String,
    /// NVRTC's log, trimmed; empty when it had nothing to say.
    pub log: String,
    /// The `--gpu-architecture` it was compiled for, e.g. `compute_90`.
    pub arch: String,
}

/// Whether libnvrtc can be loaded (cudarc's check; every other call panics without it).
pub fn nvrtc_present() -> bool {
    // SAFETY: only tries to dlopen the library names cudarc knows.
    unsafe { sys::is_culib_present() }
}

/// The NVRTC version, `(major, minor)`.
pub fn nvrtc_version() -> Result<(i32, i32), BackendError> {
    if !nvrtc_present() {
        return Err(BackendError::NoNvrtc);
    }
    let (mut major, mut minor) = (0, 0);
    // SAFETY: NVRTC is present; the pointers are valid for the call.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| BackendError::Nvrtc(format!("nvrtcVersion: {e:?}")))?;
    Ok((major, minor))
}

fn log_of(prog: sys::nvrtcProgram) -> String {
    // SAFETY: `prog` is a live program.
    match unsafe { result::get_program_log(prog) } {
        Ok(raw) => {
            let bytes: Vec<u8> = raw
                .iter()
                .take_while(|&&c| c != 0)
                .map(|&c| c as u8)
                .collect();
            String::from_utf8_lossy(&bytes).trim().to_string()
        }
        Err(e) => format!("(no log: {e:?})"),
    }
}

/// Compiles `source` to PTX for `compute_{major}{minor}` with every warning enabled.
pub fn compile(
    source: &str,
    name: &str,
    major: i32,
    minor: i32,
) -> Result<CompiledPtx, BackendError> {
    if !nvrtc_present() {
        return Err(BackendError::NoNvrtc);
    }
    let src = CString::new(source)
        .map_err(|_| BackendError::Nvrtc("the source contains a NUL byte".into()))?;
    let name = CString::new(name)
        .map_err(|_| BackendError::Nvrtc("the program name contains a NUL byte".into()))?;
    let arch = format!("compute_{major}{minor}");
    let options = [
        format!("--gpu-architecture={arch}"),
        "--std=c++17".to_string(),
        "--fmad=true".to_string(),
    ];
    let prog = result::create_program(&src, Some(name.as_c_str()))
        .map_err(|e| BackendError::Nvrtc(format!("nvrtcCreateProgram: {e:?}")))?;
    // SAFETY: `prog` was just created and is destroyed below, once.
    let compiled = unsafe { result::compile_program(prog, &options) };
    let log = log_of(prog);
    let outcome = match compiled {
        Err(e) => Err(BackendError::Nvrtc(format!("{e:?}: {log}"))),
        // SAFETY: compilation succeeded, so the program holds PTX.
        Ok(()) => match unsafe { result::get_ptx(prog) } {
            Ok(raw) => {
                // SAFETY: NVRTC's PTX is NUL-terminated.
                let text = unsafe { CStr::from_ptr(raw.as_ptr()) };
                Ok(CompiledPtx {
                    ptx: text.to_string_lossy().into_owned(),
                    log,
                    arch,
                })
            }
            Err(e) => Err(BackendError::Nvrtc(format!("nvrtcGetPTX: {e:?}"))),
        },
    };
    // SAFETY: `prog` is live and not used afterwards.
    let _ = unsafe { result::destroy_program(prog) };
    outcome
}

/// Compiles every kernel (the program `source::program()`).
pub fn compile_kernels(major: i32, minor: i32) -> Result<CompiledPtx, BackendError> {
    compile(
        &crate::source::program(),
        "expertsim_kernels.cu",
        major,
        minor,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// True when the NVRTC check must run: CI (`CI=true`) fails without NVRTC. Elsewhere a
    /// build without NVRTC marks these tests ignored (`cfg(nvrtc_missing)`, build.rs); one that
    /// found it at build time but not at run time reports itself skipped.
    fn nvrtc_or_skip(test: &str) -> bool {
        if nvrtc_present() {
            return true;
        }
        let in_ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        assert!(
            !in_ci,
            "{test}: CI=true but libnvrtc.so.12 cannot be loaded; .ci/run installs the \
             nvidia-cuda-nvrtc-cu12 wheel and puts it on LD_LIBRARY_PATH"
        );
        println!(
            "{test}: skipped (libnvrtc not found; set LD_LIBRARY_PATH, see docs/calibration.md)"
        );
        false
    }

    /// Every kernel compiles to PTX for sm_90 through the cuda backend's code path, with an
    /// empty log (no warnings), and the element-wise kernels move 16-byte vectors.
    #[test]
    #[cfg_attr(
        nvrtc_missing,
        ignore = "needs NVRTC: libnvrtc did not load when this was built (.ci/run installs it; docs/calibration.md)"
    )]
    fn every_kernel_compiles_for_sm_90_without_warnings() {
        if !nvrtc_or_skip("every_kernel_compiles_for_sm_90_without_warnings") {
            return;
        }
        let (major, minor) = nvrtc_version().unwrap();
        let compiled = compile_kernels(9, 0).unwrap_or_else(|e| panic!("{e}"));
        assert!(compiled.log.is_empty(), "NVRTC warned:\n{}", compiled.log);
        assert!(compiled.ptx.contains(".target sm_90"));
        for name in crate::source::KERNEL_NAMES {
            assert!(
                compiled.ptx.contains(&format!(".entry {name}(")),
                "no entry {name} in the PTX"
            );
        }
        // The gather, SwiGLU and combine load and store 8 bf16 values at once.
        assert!(
            compiled.ptx.contains("ld.global.v4.u32") || compiled.ptx.contains("ld.global.v4.b32")
        );
        println!("compiled every kernel with NVRTC {major}.{minor} for sm_90");
    }

    #[test]
    #[cfg_attr(
        nvrtc_missing,
        ignore = "needs NVRTC: libnvrtc did not load when this was built (.ci/run installs it; docs/calibration.md)"
    )]
    fn a_compile_error_is_a_typed_error_with_the_log() {
        if !nvrtc_or_skip("a_compile_error_is_a_typed_error_with_the_log") {
            return;
        }
        let error = compile(
            "extern \"C\" __global__ void k() { undefined_thing(); }",
            "bad.cu",
            9,
            0,
        )
        .unwrap_err();
        let message = error.to_string();
        assert!(message.starts_with("NVRTC failed: "), "{message}");
        assert!(message.contains("undefined_thing"), "{message}");
    }

    #[test]
    #[cfg_attr(
        nvrtc_missing,
        ignore = "needs NVRTC: libnvrtc did not load when this was built (.ci/run installs it; docs/calibration.md)"
    )]
    fn a_warning_shows_up_in_the_log() {
        if !nvrtc_or_skip("a_warning_shows_up_in_the_log") {
            return;
        }
        // A variable declared but never referenced is a front-end warning: the log the
        // compile check requires to be empty really carries warnings.
        let compiled = compile(
            "extern \"C\" __global__ void k(int* p) { int unused_variable; p[0] = 1; }",
            "warn.cu",
            9,
            0,
        )
        .unwrap();
        assert!(
            compiled.log.contains("unused_variable"),
            "log: {:?}",
            compiled.log
        );
    }
}
