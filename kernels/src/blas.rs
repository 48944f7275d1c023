//! The GEMMs through cuBLAS (cudarc, loaded at run time): every dense and expert GEMM of the
//! kernels is the row-major `y[rows][n] = x[rows][k] . w[n][k]^T` in bf16 with f32
//! accumulation (`cublasGemmEx`, `CUBLAS_COMPUTE_32F`, bf16 A, B and C), as serving stacks run
//! a `Linear`. cuBLAS is column-major; [`RowMajorGemm::column_major`] derives its arguments
//! (tested on the CPU against a literal column-major GEMM). cuBLAS's presence is checked before
//! any call: cudarc panics on a missing library, the backend returns a typed error instead.
//!
//! Grouped expert GEMMs run as one cuBLAS GEMM per expert with tokens, back to back on one
//! stream. cuBLAS's grouped call (`cublasGemmGroupedBatchedEx`) is not used: cudarc 0.19's
//! wrapper of it passes host arrays where cuBLAS reads device arrays of pointers (see
//! docs/calibration.md, "Why not cuBLAS's grouped GEMM").

use crate::BackendError;
use cudarc::cublas::{CudaBlas, result, sys};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use std::sync::Arc;

/// Whether libcublas can be loaded (cudarc's check; every other call panics without it).
pub fn cublas_present() -> bool {
    // SAFETY: only tries to dlopen the library names cudarc knows.
    unsafe { sys::is_culib_present() }
}

/// The row-major GEMM `y[rows][n] = x[rows][k] . w[n][k]^T`: `x` and `y` row-major with leading
/// dimensions `k` and `n`, `w` a PyTorch `Linear` weight (`n` output rows of `k` inputs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowMajorGemm {
    pub rows: usize,
    pub k: usize,
    pub n: usize,
}

/// cuBLAS's arguments for a [`RowMajorGemm`]: `C = op(A) op(B)` with column-major `A`, `B`,
/// `C` of leading dimensions `lda`, `ldb`, `ldc`, `op(A)` `m x k`, `op(B)` `k x n`, `C` `m x n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ColumnMajorCall {
    pub transa: sys::cublasOperation_t,
    pub transb: sys::cublasOperation_t,
    pub m: i32,
    pub n: i32,
    pub k: i32,
    pub lda: i32,
    pub ldb: i32,
    pub ldc: i32,
}

impl RowMajorGemm {
    /// The column-major call that computes it, with `A = w`, `B = x`, `C = y`.
    ///
    /// A row-major `R x C` matrix with leading dimension `C` is, read column-major with the
    /// same leading dimension, its transpose (`C x R`). So the buffers hold, column-major:
    /// `w` as `W^T` (`k x n`, ld `k`), `x` as `X^T` (`k x rows`, ld `k`), `y` as `Y^T`
    /// (`n x rows`, ld `n`). Transposing `Y = X W^T` gives `Y^T = W X^T = op(A) op(B)` with
    /// `op(A) = (W^T)^T` (`transa = T`, `m = n`, over `k`) and `op(B) = X^T` as stored
    /// (`transb = N`, `n = rows`): `m = n`, `n = rows`, `k = k`, `lda = k`, `ldb = k`,
    /// `ldc = n`. Every size must fit cuBLAS's `int`.
    pub fn column_major(&self) -> Result<ColumnMajorCall, BackendError> {
        let int = |v: usize, what: &str| {
            i32::try_from(v).map_err(|_| {
                BackendError::Timing(format!("GEMM {what} = {v} exceeds cuBLAS's int range"))
            })
        };
        if self.rows == 0 || self.k == 0 || self.n == 0 {
            return Err(BackendError::Timing(format!(
                "an empty GEMM ({} x {} -> {}): nothing to run",
                self.rows, self.k, self.n
            )));
        }
        // Elements of each operand (`x`: rows x k, `w`: n x k, `y`: rows x n), so every
        // offset into one stays addressable. (Not the product of the largest two dimensions:
        // an output head's `n` is the vocabulary, which appears in `w` and `y` but never
        // squared.)
        for (operand, elements) in [
            ("x", self.rows.saturating_mul(self.k)),
            ("w", self.n.saturating_mul(self.k)),
            ("y", self.rows.saturating_mul(self.n)),
        ] {
            int(elements, &format!("operand {operand} size"))?;
        }
        Ok(ColumnMajorCall {
            transa: sys::cublasOperation_t::CUBLAS_OP_T,
            transb: sys::cublasOperation_t::CUBLAS_OP_N,
            m: int(self.n, "n")?,
            n: int(self.rows, "rows")?,
            k: int(self.k, "k")?,
            lda: int(self.k, "k")?,
            ldb: int(self.k, "k")?,
            ldc: int(self.n, "n")?,
        })
    }
}

fn cublas_error(context: &'static str) -> impl Fn(result::CublasError) -> BackendError {
    move |e| BackendError::Cublas {
        context,
        message: format!("{:?}", e.0),
    }
}

/// Bytes of the workspace given to cuBLAS: NVIDIA's recommendation for Hopper (32 MiB), set
/// once so that no GEMM allocates (which a CUDA-graph capture would refuse).
pub const WORKSPACE_BYTES: usize = 32 << 20;

/// A cuBLAS handle on one stream, with its own workspace.
pub struct Blas {
    blas: CudaBlas,
    stream: Arc<CudaStream>,
    _workspace: CudaSlice<u8>,
    /// `cublasGetVersion`: e.g. 130100 for 13.1.0.
    pub version: i32,
}

impl Blas {
    /// A handle on `stream`. The caller has checked [`cublas_present`].
    pub fn new(stream: Arc<CudaStream>) -> Result<Blas, BackendError> {
        let blas = CudaBlas::new(stream.clone()).map_err(cublas_error("cublasCreate"))?;
        let workspace =
            stream
                .alloc_zeros::<u8>(WORKSPACE_BYTES)
                .map_err(|e| BackendError::Driver {
                    context: "cuMemAlloc (cuBLAS workspace)",
                    message: format!("{e:?}"),
                })?;
        let (pointer, _) = workspace.device_ptr(&stream);
        // SAFETY: the handle is live; the workspace outlives it (dropped after `blas`, a later
        // field) and is used on the handle's stream only. Set after the stream: setting a
        // stream resets the workspace to cuBLAS's own pool.
        unsafe { sys::cublasSetWorkspace_v2(*blas.handle(), pointer as *mut _, WORKSPACE_BYTES) }
            .result()
            .map_err(cublas_error("cublasSetWorkspace"))?;
        // The version is only reported: a cuBLAS without the symbol (cudarc panics on a missing
        // one) or a failing call leaves it 0 ("unknown") instead of stopping the run.
        let handle = *blas.handle();
        let version = std::panic::catch_unwind(move || {
            let mut version = 0;
            // SAFETY: the handle is live; the pointer is valid for the call.
            let status = unsafe { sys::cublasGetVersion_v2(handle, &mut version) };
            if status.result().is_ok() { version } else { 0 }
        })
        .unwrap_or(0);
        Ok(Blas {
            blas,
            stream,
            _workspace: workspace,
            version,
        })
    }

    /// `"13.1.0"` from the handle's version number (`"unknown"` when it could not be read).
    pub fn version_string(&self) -> String {
        let v = self.version;
        if v <= 0 {
            return "unknown".into();
        }
        format!("{}.{}.{}", v / 10_000, (v / 100) % 100, v % 100)
    }

    /// Enqueues `y = x . w^T` for `gemm` on the handle's stream. `w`, `x` and `y` are device
    /// addresses of bf16 buffers of at least `n x k`, `rows x k` and `rows x n` values.
    ///
    /// # Safety
    /// The addresses must point into live device allocations of those sizes, and no other
    /// work may write them until the GEMM has run.
    pub unsafe fn gemm_bf16(
        &self,
        gemm: &ColumnMajorCall,
        w: u64,
        x: u64,
        y: u64,
    ) -> Result<(), BackendError> {
        let (alpha, beta) = (1.0f32, 0.0f32);
        let bf16 = sys::cudaDataType_t::CUDA_R_16BF;
        // SAFETY: the caller's contract; alpha and beta are host f32 (the default host pointer
        // mode, read before the call returns, captured by value into a CUDA graph).
        unsafe {
            result::gemm_ex(
                *self.blas.handle(),
                gemm.transa,
                gemm.transb,
                gemm.m,
                gemm.n,
                gemm.k,
                (&alpha) as *const f32 as *const _,
                w as *const _,
                bf16,
                gemm.lda,
                x as *const _,
                bf16,
                gemm.ldb,
                (&beta) as *const f32 as *const _,
                y as *mut _,
                bf16,
                gemm.ldc,
                sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(cublas_error("cublasGemmEx"))
    }

    /// The stream the handle enqueues on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
}

/// The path of the loaded shared object whose file name starts with `prefix` (`"libcublas."`),
/// from `/proc/self/maps`: which of several installed copies the process really uses.
pub fn loaded_library(prefix: &str) -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .find(|path| {
            std::path::Path::new(path)
                .file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with(prefix))
        })
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};

    /// BLAS's GEMM as its reference implementation states it, column-major:
    /// `C[i + j ldc] = sum_l op(A)[i][l] op(B)[l][j]`, `op(A)[i][l]` = `A[i + l lda]` untransposed,
    /// `A[l + i lda]` transposed (and the same for B).
    fn column_major_gemm(call: &ColumnMajorCall, a: &[f64], b: &[f64], c: &mut [f64]) {
        let (m, n, k) = (call.m as usize, call.n as usize, call.k as usize);
        let (lda, ldb, ldc) = (call.lda as usize, call.ldb as usize, call.ldc as usize);
        let op_a = |i: usize, l: usize| match call.transa {
            CUBLAS_OP_N => a[i + l * lda],
            _ => a[l + i * lda],
        };
        let op_b = |l: usize, j: usize| match call.transb {
            CUBLAS_OP_N => b[l + j * ldb],
            _ => b[j + l * ldb],
        };
        for j in 0..n {
            for i in 0..m {
                c[i + j * ldc] = (0..k).map(|l| op_a(i, l) * op_b(l, j)).sum();
            }
        }
    }

    #[test]
    fn the_column_major_call_computes_x_times_w_transposed_in_row_major() {
        for (rows, k, n) in [(1, 1, 1), (1, 5, 3), (7, 67, 130), (16, 32, 8), (3, 2, 9)] {
            let gemm = RowMajorGemm { rows, k, n };
            let call = gemm.column_major().unwrap();
            assert_eq!((call.transa, call.transb), (CUBLAS_OP_T, CUBLAS_OP_N));
            assert_eq!(
                (call.m, call.n, call.k, call.lda, call.ldb, call.ldc),
                (
                    n as i32,
                    rows as i32,
                    k as i32,
                    k as i32,
                    k as i32,
                    n as i32
                )
            );
            // Distinct values everywhere, so a swapped index shows.
            let x: Vec<f64> = (0..rows * k).map(|i| 1.0 + i as f64 * 0.5).collect();
            let w: Vec<f64> = (0..n * k).map(|i| (i as f64 * 0.37).sin()).collect();
            let mut y = vec![f64::NAN; rows * n];
            column_major_gemm(&call, &w, &x, &mut y);
            for r in 0..rows {
                for c in 0..n {
                    let want: f64 = (0..k).map(|l| x[r * k + l] * w[c * k + l]).sum();
                    let got = y[r * n + c];
                    assert!(
                        (got - want).abs() <= 1e-9 * want.abs().max(1.0),
                        "{rows}x{k}->{n}: y[{r}][{c}] = {got}, want {want}"
                    );
                }
            }
        }
    }

    /// The output head of Qwen1.5-MoE-A2.7B (vocabulary 151,936 over hidden 2,048) at the
    /// calibration's largest batch: 311 M weights, well inside cuBLAS's int. The first H200 run
    /// refused it as "GEMM size = 23084548096" (151,936 squared) before every operand was
    /// counted on its own.
    #[test]
    fn an_output_head_gemm_fits_cublas_int() {
        let head = RowMajorGemm {
            rows: 256,
            k: 2048,
            n: 151_936,
        };
        let call = head.column_major().unwrap();
        assert_eq!((call.m, call.n, call.k), (151_936, 256, 2048));
        // One operand past i32::MAX is refused, naming it.
        let huge = RowMajorGemm {
            rows: 1,
            k: 1 << 16,
            n: 1 << 16,
        };
        let message = huge.column_major().unwrap_err().to_string();
        assert!(message.contains("operand w size"), "{message}");
    }

    #[test]
    fn a_gemm_that_does_not_fit_cublas_int_or_is_empty_is_an_error() {
        let big = RowMajorGemm {
            rows: 1 << 20,
            k: 1 << 12,
            n: 8,
        };
        assert!(
            big.column_major()
                .unwrap_err()
                .to_string()
                .contains("int range")
        );
        let empty = RowMajorGemm {
            rows: 0,
            k: 4,
            n: 4,
        };
        assert!(empty.column_major().is_err());
    }

    #[test]
    fn the_loaded_library_is_read_from_the_process_maps() {
        // The test binary maps the C library; no process maps a name that does not exist.
        assert!(loaded_library("libc.").is_some() || loaded_library("libc-").is_some());
        assert_eq!(loaded_library("libno-such-library-expertsim."), None);
    }
}
