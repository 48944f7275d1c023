//! The `cuda` backend: device 0 through the CUDA driver API (cudarc, loaded at run time), all
//! work on one stream of its own: the GEMMs through cuBLAS (`blas`: bf16, f32 accumulation, one
//! GEMM per expert with tokens), the MoE layer's grouping, gather, SwiGLU and combine,
//! rerouting and decode attention through our kernels (`source`, compiled once with NVRTC for
//! the device's compute capability). Outputs are poisoned (NaN / all-ones) before every run.
//! Every failure is a `BackendError`: the driver, NVRTC and cuBLAS libraries are checked for
//! before any call, because cudarc panics when one is missing.
//!
//! Weights are uploaded once per `Weights` allocation and kept (a calibration's points and a
//! live run's steps reuse them), up to half the device's memory, least recently used first out.
//!
//! Timing (`time`): each sample is one replay of a CUDA graph holding `calls` back-to-back
//! runs of the workload between two device events, divided by `calls` (what CUDA-graph decode
//! sees: no host launch gaps). The runs rotate over copies of the weights whose total exceeds
//! twice the L2 cache, so no run finds its weights in L2 (as a serving layer never finds the
//! previous layer's there). Where a graph cannot be captured, the same runs are timed eagerly
//! (events around the back-to-back launches) and the device's `timing` says so.

use crate::backend::{Backend, BackendError, BackendKind, DeviceInfo, Output, Workload};
use crate::blas::{Blas, ColumnMajorCall, cublas_present, loaded_library};
use crate::decode::{DecodeOutput, DecodeProblem};
use crate::moe::{ExpertRows, Grouping, MoeOutput, MoeProblem, active_experts, group_tokens};
use crate::numeric::Weights;
use crate::reroute::RerouteVariant;
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaGraph, CudaSlice, CudaStream, DevicePtr, DeviceRepr,
    DriverError, LaunchConfig, PushKernelArg, sys,
};
use half::bf16;
use half::slice::HalfFloatSliceExt;
use std::collections::HashMap;
use std::sync::Arc;

/// Whether libcuda can be loaded (cudarc panics on any driver call without it).
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the library names cudarc knows.
    unsafe { sys::is_culib_present() }
}

fn driver_error(context: &'static str) -> impl Fn(DriverError) -> BackendError {
    move |e| BackendError::Driver {
        context,
        message: format!("{e:?}"),
    }
}

/// A bf16 NaN's bits: the poison of every bf16 output buffer (bf16 buffers hold their bits).
const NAN_BITS: u16 = 0x7fc0;

/// Threads per block of the element-wise and rerouting kernels.
const BLOCK: u32 = 256;
/// Threads of the one-block grouping kernel (`ROUTE_THREADS` in `source::MOE`).
const ROUTE_THREADS: u32 = 1024;
/// bf16 values each thread of the element-wise kernels handles (`VEC` in `source::COMMON`).
const VEC: usize = 8;
/// The most weight copies a timed workload rotates over.
pub const MAX_WEIGHT_COPIES: usize = 16;
/// The fewest runs one timed sample holds (so a graph launch's own latency is shared out).
pub const MIN_CALLS_PER_SAMPLE: usize = 4;

/// Copies of `bytes` of weights whose total exceeds twice an L2 cache of `l2_bytes`, so a
/// run that starts on the next copy finds none of its weights cached; between 1 and
/// [`MAX_WEIGHT_COPIES`]. Weights larger than twice the L2 need one copy.
pub fn weight_copies(bytes: usize, l2_bytes: usize) -> usize {
    if bytes == 0 {
        return 1;
    }
    (2 * l2_bytes).div_ceil(bytes).clamp(1, MAX_WEIGHT_COPIES)
}

/// A grid-stride launch over `items` work items (at most 65,535 blocks; each thread loops).
fn linear(items: usize) -> LaunchConfig {
    let blocks = items.div_ceil(BLOCK as usize).clamp(1, 65_535) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Work items of an element-wise kernel over `rows` rows of `width` bf16 values.
fn vector_items(rows: usize, width: usize) -> usize {
    rows * width.div_ceil(VEC)
}

/// bf16 values from their bits.
fn bf16s(bits: Vec<u16>) -> Vec<bf16> {
    bits.into_iter().map(bf16::from_bits).collect()
}

fn u32_of(n: usize, what: &str) -> Result<u32, BackendError> {
    u32::try_from(n).map_err(|_| BackendError::Timing(format!("{what} = {n} exceeds u32")))
}

/// The device address of `slice`, plus `elements` of its type.
fn address<T>(slice: &CudaSlice<T>, stream: &CudaStream, elements: usize) -> u64 {
    let (base, _) = slice.device_ptr(stream);
    base + (elements * std::mem::size_of::<T>()) as u64
}

/// The decode step's attention output of `len` values: without a cache (`context` 0) no
/// attention kernel runs (`enqueue`) and the output is zero by definition, as the CPU reference
/// computes it; otherwise what the kernel wrote (`download`).
fn attention_output(
    context: u32,
    len: usize,
    download: impl FnOnce() -> Result<Vec<f32>, BackendError>,
) -> Result<Vec<f32>, BackendError> {
    if context == 0 {
        Ok(vec![0.0; len])
    } else {
        download()
    }
}

/// One expert's two GEMMs, with cuBLAS's arguments.
#[derive(Clone, Copy, Debug)]
struct ExpertGemms {
    rows: ExpertRows,
    gate_up: ColumnMajorCall,
    down: ColumnMajorCall,
}

/// Device buffers of one prepared workload (one at a time, so variant sizes do not matter).
#[allow(clippy::large_enum_variant)]
enum Prepared {
    Moe {
        tokens: usize,
        hidden: usize,
        ffn: usize,
        n_experts: usize,
        top_k: usize,
        experts: Vec<ExpertGemms>,
        w13: Weights,
        w2: Weights,
        x: CudaSlice<u16>,
        ids: CudaSlice<i32>,
        weights: CudaSlice<f32>,
        counts: CudaSlice<u32>,
        offsets: CudaSlice<u32>,
        sorted: CudaSlice<u32>,
        position_of: CudaSlice<u32>,
        /// Grouped input rows, `[assignments][hidden]`.
        xs: CudaSlice<u16>,
        /// Gate/up GEMM output, `[assignments][2 ffn]`.
        g: CudaSlice<u16>,
        /// SwiGLU output, `[assignments][ffn]`.
        h: CudaSlice<u16>,
        /// Down GEMM output, `[assignments][hidden]`.
        y: CudaSlice<u16>,
        out: CudaSlice<u16>,
    },
    Reroute {
        variant: RerouteVariant,
        n: u32,
        top_k: u32,
        n_experts: u32,
        ids: CudaSlice<i32>,
        aids: CudaSlice<i32>,
        map: CudaSlice<i32>,
        broadcast: CudaSlice<i32>,
        offsets: CudaSlice<i32>,
        out: CudaSlice<i32>,
    },
    Decode {
        batch: usize,
        context: u32,
        out_features: usize,
        n_heads: u32,
        n_kv_heads: u32,
        head_dim: u32,
        gemm: ColumnMajorCall,
        w: Weights,
        x: CudaSlice<u16>,
        q: CudaSlice<u16>,
        k: CudaSlice<u16>,
        v: CudaSlice<u16>,
        scores: CudaSlice<f32>,
        y: CudaSlice<u16>,
        attention: CudaSlice<f32>,
    },
}

impl Prepared {
    /// The weights the workload reads (uploaded and rotated by the backend).
    fn weights(&self) -> Vec<Weights> {
        match self {
            Prepared::Moe { w13, w2, .. } => vec![w13.clone(), w2.clone()],
            Prepared::Decode { w, .. } => vec![w.clone()],
            Prepared::Reroute { .. } => vec![],
        }
    }
}

/// What `time` repeats: `calls` runs of a prepared workload over its weight rotations, timed
/// `repetitions` times after `warmup` untimed runs, between `events`.
struct Runs<'a> {
    prepared: &'a Prepared,
    rotations: &'a [Vec<u64>],
    calls: usize,
    warmup: usize,
    repetitions: usize,
    events: &'a (CudaEvent, CudaEvent),
}

/// Device copies of one weight allocation.
struct CachedWeights {
    host: Weights,
    copies: Vec<CudaSlice<u16>>,
    last_use: u64,
}

impl CachedWeights {
    fn bytes(&self) -> usize {
        self.copies.len() * self.host.len() * 2
    }
}

/// The CUDA backend on one device.
pub struct CudaBackend {
    info: DeviceInfo,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    blas: Blas,
    functions: HashMap<&'static str, CudaFunction>,
    l2_bytes: usize,
    /// The most bytes of weights kept on the device (half its memory).
    cache_budget: usize,
    cache: Vec<CachedWeights>,
    uses: u64,
    /// Whether timing captures CUDA graphs (until a capture fails).
    graphs: bool,
}

fn graph_timing(l2_bytes: usize) -> String {
    format!(
        "device events around CUDA-graph replays of at least {MIN_CALLS_PER_SAMPLE} back-to-back \
         runs each (time per run), the runs rotating over up to {MAX_WEIGHT_COPIES} weight copies \
         that exceed twice the {} MB L2 cache",
        l2_bytes >> 20
    )
}

impl CudaBackend {
    /// Opens device `ordinal`: checks for the driver, NVRTC and cuBLAS, then the device, and
    /// creates the stream and the cuBLAS handle.
    pub fn open(ordinal: usize) -> Result<CudaBackend, BackendError> {
        if !driver_present() {
            return Err(BackendError::NoDriver);
        }
        if !crate::nvrtc::nvrtc_present() {
            return Err(BackendError::NoNvrtc);
        }
        if !cublas_present() {
            return Err(BackendError::NoCublas);
        }
        let count = match CudaContext::device_count() {
            Ok(count) => count,
            Err(e) if e.0 == sys::cudaError_enum::CUDA_ERROR_NO_DEVICE => 0,
            Err(e) => return Err(driver_error("cuInit / cuDeviceGetCount")(e)),
        };
        if count <= ordinal as i32 {
            return Err(BackendError::NoDevice(format!(
                "the CUDA driver reports {count} device(s); device {ordinal} was requested"
            )));
        }
        let ctx = CudaContext::new(ordinal).map_err(driver_error("cuDevicePrimaryCtxRetain"))?;
        // One stream does all the work, so cudarc's cross-stream events are not needed; they
        // would also put event waits into captured graphs. Before any allocation.
        // SAFETY: every buffer is used on `stream` only.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(driver_error("cuStreamCreate"))?;
        let name = ctx.name().map_err(driver_error("cuDeviceGetName"))?;
        let capability = ctx
            .compute_capability()
            .map_err(driver_error("cuDeviceGetAttribute"))?;
        let l2_bytes = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)
            .map_err(driver_error("cuDeviceGetAttribute"))?
            .max(0) as usize;
        let (_, total) = ctx.mem_get_info().map_err(driver_error("cuMemGetInfo"))?;
        let mut version = 0;
        // SAFETY: the driver is loaded and initialized; the pointer is valid for the call.
        let driver = match unsafe { sys::cuDriverGetVersion(&mut version) } {
            sys::cudaError_enum::CUDA_SUCCESS => {
                Some(format!("{}.{}", version / 1000, (version % 1000) / 10))
            }
            _ => None,
        };
        let blas = Blas::new(stream.clone())?;
        let (nvrtc_major, nvrtc_minor) = crate::nvrtc::nvrtc_version()?;
        let path = |prefix: &str| loaded_library(prefix).unwrap_or_else(|| "?".into());
        let libraries = format!(
            "cuBLAS {} ({}), NVRTC {nvrtc_major}.{nvrtc_minor} ({})",
            blas.version_string(),
            path("libcublas."),
            path("libnvrtc."),
        );
        Ok(CudaBackend {
            info: DeviceInfo {
                backend: BackendKind::Cuda,
                name,
                compute_capability: Some(capability),
                driver,
                timing: graph_timing(l2_bytes),
                libraries: Some(libraries),
            },
            ctx,
            stream,
            blas,
            functions: HashMap::new(),
            l2_bytes,
            cache_budget: total / 2,
            cache: Vec::new(),
            uses: 0,
            graphs: true,
        })
    }

    /// Compiles every kernel once (the first time any is needed) and looks each one up.
    fn load_functions(&mut self) -> Result<(), BackendError> {
        if !self.functions.is_empty() {
            return Ok(());
        }
        let (major, minor) = self.info.compute_capability.unwrap_or((9, 0));
        let compiled = crate::nvrtc::compile_kernels(major, minor)?;
        let module = self
            .ctx
            .load_module(cudarc::nvrtc::Ptx::from_src(compiled.ptx))
            .map_err(driver_error("cuModuleLoadData"))?;
        for name in crate::source::KERNEL_NAMES {
            let function = module
                .load_function(name)
                .map_err(driver_error("cuModuleGetFunction"))?;
            self.functions.insert(name, function);
        }
        Ok(())
    }

    fn function(&self, name: &'static str) -> &CudaFunction {
        &self.functions[name]
    }

    fn upload<T: DeviceRepr>(&self, values: &[T]) -> Result<CudaSlice<T>, BackendError> {
        self.stream
            .clone_htod(values)
            .map_err(driver_error("cuMemcpyHtoD"))
    }

    /// A buffer of `len` copies of `poison` (at least one), filled on the device: what a kernel
    /// does not write stays visibly wrong.
    fn poisoned<T: DeviceRepr + Copy>(
        &self,
        len: usize,
        poison: T,
    ) -> Result<CudaSlice<T>, BackendError> {
        let len = len.max(1);
        // SAFETY: every element is written by the memset below before any use.
        let slice = unsafe { self.stream.alloc::<T>(len) }.map_err(driver_error("cuMemAlloc"))?;
        let at = address(&slice, &self.stream, 0);
        let stream = self.stream.cu_stream();
        // SAFETY: `at` holds `len` elements of the memset's width; `transmute_copy` reads the
        // bits of a plain 2- or 4-byte value.
        let status = unsafe {
            match std::mem::size_of::<T>() {
                2 => sys::cuMemsetD16Async(at, std::mem::transmute_copy(&poison), len, stream),
                4 => sys::cuMemsetD32Async(at, std::mem::transmute_copy(&poison), len, stream),
                _ => return self.upload(&vec![poison; len]),
            }
        };
        status.result().map_err(driver_error("cuMemsetAsync"))?;
        Ok(slice)
    }

    fn download<T: DeviceRepr + Default + Clone>(
        &self,
        slice: &CudaSlice<T>,
        len: usize,
    ) -> Result<Vec<T>, BackendError> {
        let mut all = self
            .stream
            .clone_dtoh(slice)
            .map_err(driver_error("cuMemcpyDtoH"))?;
        all.truncate(len);
        Ok(all)
    }

    fn synchronize(&self) -> Result<(), BackendError> {
        self.stream
            .synchronize()
            .map_err(driver_error("cuStreamSynchronize"))
    }

    /// Device addresses of at least `copies` copies of `host`, uploaded on first use and kept.
    /// Makes room by dropping the least recently used other weights (never those in `keep`).
    fn device_weights(
        &mut self,
        host: &Weights,
        copies: usize,
        keep: &[Weights],
    ) -> Result<Vec<u64>, BackendError> {
        self.uses += 1;
        // Weights nobody else holds can never be presented again: free them.
        self.cache.retain(|c| Arc::strong_count(&c.host) > 1);
        let index = match self.cache.iter().position(|c| Arc::ptr_eq(&c.host, host)) {
            Some(i) => i,
            None => {
                self.cache.push(CachedWeights {
                    host: host.clone(),
                    copies: Vec::new(),
                    last_use: self.uses,
                });
                self.cache.len() - 1
            }
        };
        let missing = copies.saturating_sub(self.cache[index].copies.len());
        if missing > 0 {
            let wanted = missing * host.len() * 2;
            loop {
                let cached: usize = self.cache.iter().map(CachedWeights::bytes).sum();
                if cached + wanted <= self.cache_budget {
                    break;
                }
                let victim = self
                    .cache
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| !keep.iter().any(|k| Arc::ptr_eq(k, &c.host)))
                    .filter(|(_, c)| !c.copies.is_empty())
                    .min_by_key(|(_, c)| c.last_use)
                    .map(|(i, _)| i);
                match victim {
                    Some(i) => self.cache[i].copies.clear(),
                    None => break,
                }
            }
            for _ in 0..missing {
                let copy = self.upload(host.reinterpret_cast())?;
                self.cache[index].copies.push(copy);
            }
            self.cache
                .retain(|c| !c.copies.is_empty() || Arc::ptr_eq(&c.host, host));
        }
        let index = self
            .cache
            .iter()
            .position(|c| Arc::ptr_eq(&c.host, host))
            .expect("the entry was just filled");
        let entry = &mut self.cache[index];
        entry.last_use = self.uses;
        Ok(entry
            .copies
            .iter()
            .take(copies)
            .map(|c| address(c, &self.stream, 0))
            .collect())
    }

    fn prepare(&mut self, workload: &Workload) -> Result<Prepared, BackendError> {
        workload.validate()?;
        self.load_functions()?;
        Ok(match workload {
            Workload::Moe(p) => self.prepare_moe(p)?,
            Workload::Reroute(p, variant) => {
                let n = p.topk_ids.len();
                Prepared::Reroute {
                    variant: *variant,
                    n: u32_of(n, "assignments")?,
                    top_k: u32_of(p.top_k, "top_k")?,
                    n_experts: u32_of(p.n_experts, "n_experts")?,
                    ids: self.upload(&p.topk_ids)?,
                    aids: self.upload(&p.adapter_ids)?,
                    map: self.upload(&p.expert_map)?,
                    broadcast: self.poisoned(n, i32::MIN)?,
                    offsets: self.poisoned(n, i32::MIN)?,
                    out: self.poisoned(n, i32::MIN)?,
                }
            }
            Workload::Decode(p) => self.prepare_decode(p)?,
        })
    }

    fn prepare_moe(&mut self, p: &MoeProblem) -> Result<Prepared, BackendError> {
        let s = p.shape;
        let a = p.topk_ids.len();
        // The GEMMs' sizes are the host's grouping of the router's choices (a grouped GEMM
        // takes its problem sizes from the host); the device groups the rows itself.
        let grouping = group_tokens(&p.topk_ids, s.n_experts);
        let experts = active_experts(&grouping.offsets)
            .into_iter()
            .map(|rows| {
                let [gate_up, down] = s.expert_gemms(rows.rows);
                Ok(ExpertGemms {
                    rows,
                    gate_up: gate_up.column_major()?,
                    down: down.column_major()?,
                })
            })
            .collect::<Result<Vec<_>, BackendError>>()?;
        Ok(Prepared::Moe {
            tokens: p.tokens(),
            hidden: s.hidden,
            ffn: s.expert_ffn,
            n_experts: s.n_experts,
            top_k: s.top_k,
            experts,
            w13: p.w13.clone(),
            w2: p.w2.clone(),
            x: self.upload(p.x.reinterpret_cast())?,
            ids: self.upload(&p.topk_ids)?,
            weights: self.upload(&p.topk_weights)?,
            counts: self.poisoned(s.n_experts, u32::MAX)?,
            offsets: self.poisoned(s.n_experts + 1, u32::MAX)?,
            sorted: self.poisoned(a, u32::MAX)?,
            position_of: self.poisoned(a, u32::MAX)?,
            xs: self.poisoned(a * s.hidden, NAN_BITS)?,
            g: self.poisoned(a * 2 * s.expert_ffn, NAN_BITS)?,
            h: self.poisoned(a * s.expert_ffn, NAN_BITS)?,
            y: self.poisoned(a * s.hidden, NAN_BITS)?,
            out: self.poisoned(p.tokens() * s.hidden, NAN_BITS)?,
        })
    }

    fn prepare_decode(&mut self, p: &DecodeProblem) -> Result<Prepared, BackendError> {
        let s = p.shape;
        let gemm = s.gemm(p.batch).column_major()?;
        Ok(Prepared::Decode {
            batch: p.batch,
            context: u32_of(p.context, "context")?,
            out_features: s.out_features,
            n_heads: u32_of(s.n_heads, "n_heads")?,
            n_kv_heads: u32_of(s.n_kv_heads, "n_kv_heads")?,
            head_dim: u32_of(s.head_dim, "head_dim")?,
            gemm,
            w: p.w.clone(),
            x: self.upload(p.x.reinterpret_cast())?,
            q: self.upload(p.q.reinterpret_cast())?,
            k: self.poisoned_or(&p.k_cache)?,
            v: self.poisoned_or(&p.v_cache)?,
            scores: self.poisoned(p.batch * s.n_heads * p.context, f32::NAN)?,
            y: self.poisoned(p.batch * s.out_features, NAN_BITS)?,
            attention: self.poisoned(p.batch * s.n_heads * s.head_dim, f32::NAN)?,
        })
    }

    /// Uploads `values`, or one dummy element when empty (zero-size allocations fail).
    fn poisoned_or(&self, values: &[bf16]) -> Result<CudaSlice<u16>, BackendError> {
        if values.is_empty() {
            self.poisoned(1, 0u16)
        } else {
            self.upload(values.reinterpret_cast())
        }
    }

    /// Enqueues every kernel and GEMM of a prepared workload on the stream, reading the
    /// weights at `weights` (one device address per entry of `Prepared::weights`). Allocates,
    /// frees and synchronizes nothing, so it can be captured into a CUDA graph.
    fn enqueue(&self, prepared: &Prepared, weights: &[u64]) -> Result<(), BackendError> {
        let launch_error = driver_error("cuLaunchKernel");
        let stream = &self.stream;
        match prepared {
            Prepared::Moe {
                tokens,
                hidden,
                ffn,
                n_experts,
                top_k,
                experts,
                x,
                ids,
                weights: topk_weights,
                counts,
                offsets,
                sorted,
                position_of,
                xs,
                g,
                h,
                y,
                out,
                ..
            } => {
                let (hidden, ffn) = (*hidden, *ffn);
                let a = *tokens * *top_k;
                let (a32, e32, k32) = (a as u32, *n_experts as u32, *top_k as u32);
                let (h32, f32_, t32) = (hidden as u32, ffn as u32, *tokens as u32);
                let (w13, w2) = (weights[0], weights[1]);
                let at = |slice: &CudaSlice<u16>, elements| address(slice, stream, elements);
                // SAFETY (every launch below): argument types and order match the kernel
                // signatures in `source::MOE`; buffer sizes were checked in `prepare`.
                unsafe {
                    stream
                        .launch_builder(self.function("moe_route"))
                        .arg(ids)
                        .arg(&a32)
                        .arg(&e32)
                        .arg(counts)
                        .arg(offsets)
                        .arg(sorted)
                        .arg(position_of)
                        .launch(LaunchConfig {
                            grid_dim: (1, 1, 1),
                            block_dim: (ROUTE_THREADS, 1, 1),
                            shared_mem_bytes: 0,
                        })
                }
                .map_err(&launch_error)?;
                unsafe {
                    stream
                        .launch_builder(self.function("moe_gather"))
                        .arg(x)
                        .arg(sorted)
                        .arg(&a32)
                        .arg(&k32)
                        .arg(&h32)
                        .arg(xs)
                        .launch(linear(vector_items(a, hidden)))
                }
                .map_err(&launch_error)?;
                for e in experts {
                    let (expert, row0) = (e.rows.expert, e.rows.row0);
                    // SAFETY: expert `expert`'s `2 ffn x hidden` weights, its rows of the
                    // grouped buffers; the sizes were checked in `prepare`.
                    unsafe {
                        self.blas.gemm_bf16(
                            &e.gate_up,
                            w13 + (expert * 2 * ffn * hidden * 2) as u64,
                            at(xs, row0 * hidden),
                            at(g, row0 * 2 * ffn),
                        )
                    }?;
                }
                unsafe {
                    stream
                        .launch_builder(self.function("moe_swiglu"))
                        .arg(g)
                        .arg(&a32)
                        .arg(&f32_)
                        .arg(h)
                        .launch(linear(vector_items(a, ffn)))
                }
                .map_err(&launch_error)?;
                for e in experts {
                    let (expert, row0) = (e.rows.expert, e.rows.row0);
                    // SAFETY: as above, with the `hidden x ffn` down weights.
                    unsafe {
                        self.blas.gemm_bf16(
                            &e.down,
                            w2 + (expert * hidden * ffn * 2) as u64,
                            at(h, row0 * ffn),
                            at(y, row0 * hidden),
                        )
                    }?;
                }
                unsafe {
                    stream
                        .launch_builder(self.function("moe_combine"))
                        .arg(y)
                        .arg(topk_weights)
                        .arg(position_of)
                        .arg(&t32)
                        .arg(&k32)
                        .arg(&h32)
                        .arg(out)
                        .launch(linear(vector_items(*tokens, hidden)))
                }
                .map_err(&launch_error)?;
            }
            Prepared::Reroute {
                variant,
                n,
                top_k,
                n_experts,
                ids,
                aids,
                map,
                broadcast,
                offsets,
                out,
            } => {
                let cfg = linear(*n as usize);
                match variant {
                    RerouteVariant::Fused => {
                        // SAFETY: as `source::REROUTE`'s signature; sizes checked in `prepare`.
                        unsafe {
                            stream
                                .launch_builder(self.function("reroute_fused"))
                                .arg(ids)
                                .arg(aids)
                                .arg(map)
                                .arg(n)
                                .arg(top_k)
                                .arg(n_experts)
                                .arg(out)
                                .launch(cfg)
                        }
                        .map_err(&launch_error)?;
                    }
                    RerouteVariant::Unfused => {
                        // SAFETY: as above.
                        unsafe {
                            stream
                                .launch_builder(self.function("reroute_broadcast"))
                                .arg(aids)
                                .arg(n)
                                .arg(top_k)
                                .arg(broadcast)
                                .launch(cfg)
                        }
                        .map_err(&launch_error)?;
                        unsafe {
                            stream
                                .launch_builder(self.function("reroute_offsets"))
                                .arg(broadcast)
                                .arg(ids)
                                .arg(n)
                                .arg(n_experts)
                                .arg(offsets)
                                .launch(cfg)
                        }
                        .map_err(&launch_error)?;
                        unsafe {
                            stream
                                .launch_builder(self.function("reroute_gather"))
                                .arg(offsets)
                                .arg(ids)
                                .arg(map)
                                .arg(n)
                                .arg(out)
                                .launch(cfg)
                        }
                        .map_err(&launch_error)?;
                    }
                }
            }
            Prepared::Decode {
                batch,
                context,
                n_heads,
                n_kv_heads,
                head_dim,
                gemm,
                x,
                q,
                k,
                v,
                scores,
                y,
                attention,
                ..
            } => {
                // SAFETY: `w` holds `out_features x hidden` values, `x` `batch x hidden`, `y`
                // `batch x out_features` (checked in `prepare`).
                unsafe {
                    self.blas.gemm_bf16(
                        gemm,
                        weights[0],
                        address(x, stream, 0),
                        address(y, stream, 0),
                    )
                }?;
                // Without a cache there is no attention to run: its output is zero by definition
                // (`read` returns zeros), and a prefill or head point times the GEMM alone.
                if *context > 0 {
                    let scale = 1.0f32 / (*head_dim as f32).sqrt();
                    let batch32 = *batch as u32;
                    // SAFETY: as `source::DECODE`'s signature; sizes checked in `prepare`.
                    unsafe {
                        stream
                            .launch_builder(self.function("decode_attention"))
                            .arg(q)
                            .arg(k)
                            .arg(v)
                            .arg(n_heads)
                            .arg(n_kv_heads)
                            .arg(head_dim)
                            .arg(context)
                            .arg(&scale)
                            .arg(scores)
                            .arg(attention)
                            .launch(LaunchConfig {
                                grid_dim: (batch32, *n_heads, 1),
                                block_dim: (128, 1, 1),
                                shared_mem_bytes: 0,
                            })
                    }
                    .map_err(&launch_error)?;
                }
            }
        }
        Ok(())
    }

    fn read(&self, prepared: &Prepared) -> Result<Output, BackendError> {
        self.synchronize()?;
        Ok(match prepared {
            Prepared::Moe {
                tokens,
                hidden,
                n_experts,
                top_k,
                counts,
                offsets,
                sorted,
                position_of,
                out,
                ..
            } => {
                let e = *n_experts;
                let a = *tokens * *top_k;
                Output::Moe(MoeOutput {
                    grouping: Grouping {
                        counts: self.download(counts, e)?,
                        offsets: self.download(offsets, e + 1)?,
                        sorted_assignments: self.download(sorted, a)?,
                        position_of: self.download(position_of, a)?,
                    },
                    out: bf16s(self.download(out, *tokens * *hidden)?),
                })
            }
            Prepared::Reroute { n, out, .. } => Output::Reroute(self.download(out, *n as usize)?),
            Prepared::Decode {
                batch,
                context,
                out_features,
                n_heads,
                head_dim,
                y,
                attention,
                ..
            } => {
                let len = *batch * *n_heads as usize * *head_dim as usize;
                Output::Decode(DecodeOutput {
                    y: bf16s(self.download(y, *batch * *out_features)?),
                    attention: attention_output(*context, len, || self.download(attention, len))?,
                })
            }
        })
    }

    /// The weight addresses of each of `copies` rotations of `prepared`'s weights.
    fn rotations(
        &mut self,
        prepared: &Prepared,
        copies: usize,
    ) -> Result<Vec<Vec<u64>>, BackendError> {
        let weights = prepared.weights();
        let mut per_weight = Vec::with_capacity(weights.len());
        for w in &weights {
            per_weight.push(self.device_weights(w, copies, &weights)?);
        }
        Ok((0..copies)
            .map(|i| per_weight.iter().map(|addresses| addresses[i]).collect())
            .collect())
    }

    /// One sample: `calls` runs back to back between two events, eagerly or as one replay.
    fn sample(
        &self,
        events: &(CudaEvent, CudaEvent),
        run: impl FnOnce() -> Result<(), BackendError>,
        calls: usize,
    ) -> Result<f64, BackendError> {
        events
            .0
            .record(&self.stream)
            .map_err(driver_error("cuEventRecord"))?;
        run()?;
        events
            .1
            .record(&self.stream)
            .map_err(driver_error("cuEventRecord"))?;
        events
            .1
            .synchronize()
            .map_err(driver_error("cuEventSynchronize"))?;
        let ms = events
            .0
            .elapsed_ms(&events.1)
            .map_err(driver_error("cuEventElapsedTime"))?;
        Ok(f64::from(ms) * 1e6 / calls as f64)
    }

    /// `runs` captured into a CUDA graph (the capture always ended, so that a failed one
    /// leaves the stream usable).
    fn capture(
        &self,
        runs: impl Fn() -> Result<(), BackendError>,
    ) -> Result<CudaGraph, BackendError> {
        self.stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
            .map_err(driver_error("cuStreamBeginCapture"))?;
        let captured = runs();
        let graph = self
            .stream
            .end_capture(sys::CUgraphInstantiate_flags(0))
            .map_err(driver_error("cuStreamEndCapture / cuGraphInstantiate"));
        captured?;
        let graph = graph?.ok_or_else(|| BackendError::Driver {
            context: "cuStreamEndCapture",
            message: "the capture produced no graph".into(),
        })?;
        graph.upload().map_err(driver_error("cuGraphUpload"))?;
        Ok(graph)
    }

    /// `repetitions` samples of `calls` back-to-back runs, each one replay of a captured CUDA
    /// graph or, without `as_graph`, the runs launched eagerly (host launch gaps included).
    fn time_runs(&self, runs: &Runs, as_graph: bool) -> Result<Vec<f64>, BackendError> {
        let Runs {
            prepared,
            rotations,
            calls,
            warmup,
            repetitions,
            events,
        } = *runs;
        let runs =
            || (0..calls).try_for_each(|i| self.enqueue(prepared, &rotations[i % rotations.len()]));
        let graph = if as_graph {
            Some(self.capture(runs)?)
        } else {
            None
        };
        let once = || match &graph {
            Some(graph) => graph.launch().map_err(driver_error("cuGraphLaunch")),
            None => runs(),
        };
        // A graph's first replay is warm-up even without any asked for.
        for _ in 0..warmup.div_ceil(calls).max(usize::from(as_graph)) {
            once()?;
        }
        self.synchronize()?;
        (0..repetitions)
            .map(|_| self.sample(events, once, calls))
            .collect()
    }
}

impl Backend for CudaBackend {
    fn device(&self) -> &DeviceInfo {
        &self.info
    }

    fn run(&mut self, workload: &Workload) -> Result<Output, BackendError> {
        let prepared = self.prepare(workload)?;
        let rotations = self.rotations(&prepared, 1)?;
        self.enqueue(&prepared, &rotations[0])?;
        self.read(&prepared)
    }

    fn time(
        &mut self,
        workload: &Workload,
        warmup: usize,
        repetitions: usize,
    ) -> Result<Vec<f64>, BackendError> {
        if repetitions == 0 {
            return Err(BackendError::Timing(
                "repetitions must be at least 1".into(),
            ));
        }
        let prepared = self.prepare(workload)?;
        let bytes: usize = prepared.weights().iter().map(|w| w.len() * 2).sum();
        let copies = weight_copies(bytes, self.l2_bytes);
        let rotations = self.rotations(&prepared, copies)?;
        let calls = copies.max(MIN_CALLS_PER_SAMPLE);
        // One untimed run first: cuBLAS picks and loads its kernels for these shapes outside
        // any capture.
        self.enqueue(&prepared, &rotations[0])?;
        self.synchronize()?;
        let timed = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let event = || {
            self.ctx
                .new_event(timed)
                .map_err(driver_error("cuEventCreate"))
        };
        let events = (event()?, event()?);
        let runs = Runs {
            prepared: &prepared,
            rotations: &rotations,
            calls,
            warmup,
            repetitions,
            events: &events,
        };
        let as_graph = self.graphs;
        match self.time_runs(&runs, as_graph) {
            Err(e) if as_graph => {
                eprintln!(
                    "cuda backend: a CUDA graph could not be captured or replayed ({e}); \
                     timing eagerly from now on"
                );
                self.graphs = false;
                self.info.timing = format!(
                    "device events around {MIN_CALLS_PER_SAMPLE} or more back-to-back runs \
                     launched eagerly (time per run; host launch gaps included: a CUDA graph \
                     could not be captured: {e}), the runs rotating over weight copies that \
                     exceed twice the L2 cache"
                );
                self.synchronize()?;
                self.time_runs(&runs, false)
            }
            timed => timed,
        }
    }

    fn copy_to_device(&mut self, host: &[u8]) -> Result<f64, BackendError> {
        self.synchronize()?;
        let start = std::time::Instant::now();
        let device = self.upload(host)?;
        self.synchronize()?;
        let nanos = start.elapsed().as_nanos() as f64;
        drop(device);
        Ok(nanos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blas::RowMajorGemm;
    use crate::decode::{DecodeShape, decode_step_cpu};
    use crate::moe::{MoeShape, moe_layer_cpu};
    use crate::numeric::{random_bf16, relative_frobenius};
    use crate::reroute::{RerouteProblem, reroute_fused_cpu, reroute_unfused_cpu};

    /// The reason every GPU test gives for being `#[ignore]`d: a run without a GPU says they
    /// were not run instead of reporting them passed; `scripts/gpu_validate.sh` runs them.
    const NEEDS_A_GPU: &str = "needs a GPU: scripts/gpu_validate.sh";

    /// bf16 operands, f32 accumulation, bf16 outputs: a few roundings of 2^-9 each, so the
    /// relative Frobenius error between two such computations that sum in different orders
    /// stays near 1e-3; 1e-2 fails on any indexing or layout bug (those give errors near 1).
    const BF16_FROBENIUS: f64 = 1e-2;

    /// CUDA device 0 for a GPU test. The GPU tests run only when asked for (`--ignored`), so
    /// a machine without a usable device is a failure with the reason, never a silent pass.
    fn gpu() -> CudaBackend {
        CudaBackend::open(0).unwrap_or_else(|e| {
            panic!(
                "this test {NEEDS_A_GPU} (run with --ignored on a machine with a CUDA device); {e}"
            )
        })
    }

    fn widened(values: &[bf16]) -> Vec<f64> {
        values.iter().map(|v| f64::from(v.to_f32())).collect()
    }

    #[test]
    fn weight_copies_exceed_twice_the_l2_within_the_cap() {
        // An H100's 50 MiB L2: Qwen1.5-MoE's expert (w13 + w2, 17.3 MB) needs 7 copies
        // (121 MB, over the 105 MB of twice the L2; 6 are 104 MB).
        let l2 = 50 << 20;
        let expert = 3 * 2048 * 1408 * 2;
        assert_eq!(weight_copies(expert, l2), 7);
        assert!(7 * expert >= 2 * l2 && 6 * expert < 2 * l2);
        // The output head (622 MB) streams from memory by itself; tiny weights hit the cap.
        assert_eq!(weight_copies(151_936 * 2048 * 2, l2), 1);
        assert_eq!(weight_copies(64 * 64 * 2, l2), MAX_WEIGHT_COPIES);
        assert_eq!(weight_copies(0, l2), 1);
    }

    /// The first H200 run found a decode step without a cache returning its poisoned attention
    /// buffer ("attention[0] not written"): no kernel writes it then, so the output is the CPU
    /// reference's zeros and the device buffer is never read.
    #[test]
    fn a_decode_step_without_a_cache_returns_zero_attention_without_reading_the_device() {
        let zeros = attention_output(0, 6, || panic!("the buffer of a cacheless step was read"));
        assert_eq!(zeros.unwrap(), vec![0.0; 6]);
        let read = attention_output(3, 2, || Ok(vec![1.5, -2.0])).unwrap();
        assert_eq!(read, vec![1.5, -2.0]);
        let p = DecodeProblem::random(
            DecodeShape {
                hidden: 8,
                out_features: 4,
                n_heads: 2,
                n_kv_heads: 1,
                head_dim: 4,
            },
            4,
            3,
            0,
            1,
            false,
        );
        assert!(
            decode_step_cpu(&p)
                .unwrap()
                .attention
                .iter()
                .all(|&a| a == 0.0)
        );
    }

    #[test]
    fn element_wise_launches_cover_every_vector_and_stay_in_the_grid_limit() {
        assert_eq!(vector_items(3, 16), 6);
        assert_eq!(vector_items(3, 17), 9);
        let cfg = linear(vector_items(2048, 2048));
        assert_eq!(cfg.grid_dim.0, (2048 * 256) / 256);
        assert_eq!(linear(0).grid_dim.0, 1);
        assert_eq!(linear(usize::MAX / 2).grid_dim.0, 65_535);
    }

    #[test]
    fn without_a_gpu_opening_is_a_typed_error_not_a_panic() {
        match CudaBackend::open(0) {
            Ok(backend) => println!("a CUDA device is present: {}", backend.device().name),
            Err(e) => {
                let message = e.to_string();
                assert!(
                    message.starts_with("no CUDA driver found")
                        || message.starts_with("no device")
                        || message.starts_with("NVRTC not found")
                        || message.starts_with("cuBLAS not found"),
                    "{message}"
                );
            }
        }
    }

    #[test]
    #[ignore = "needs a GPU: scripts/gpu_validate.sh"]
    fn gpu_cublas_gemm_matches_an_f64_reference() {
        let gpu = gpu();
        // Odd sizes (cuBLAS's slow paths), a decode GEMV and Qwen1.5-MoE's gate/up GEMM.
        for (seed, (rows, k, n)) in
            (1..).zip([(1, 5, 3), (7, 67, 130), (1, 2048, 2816), (64, 2048, 2816)])
        {
            let gemm = RowMajorGemm { rows, k, n };
            let call = gemm.column_major().unwrap();
            let x = random_bf16(rows * k, 1.0, seed, "x");
            let w = random_bf16(n * k, 1.0 / (k as f32).sqrt(), seed, "w");
            let (dx, dw) = (
                gpu.upload(x.reinterpret_cast()).unwrap(),
                gpu.upload(w.reinterpret_cast()).unwrap(),
            );
            let dy = gpu.poisoned(rows * n, NAN_BITS).unwrap();
            let stream = gpu.stream.clone();
            // SAFETY: the buffers hold the sizes the call reads and writes.
            unsafe {
                gpu.blas
                    .gemm_bf16(
                        &call,
                        address(&dw, &stream, 0),
                        address(&dx, &stream, 0),
                        address(&dy, &stream, 0),
                    )
                    .unwrap();
            }
            let got = widened(&bf16s(gpu.download(&dy, rows * n).unwrap()));
            let f = |v: bf16| f64::from(v.to_f32());
            let want: Vec<f64> = (0..rows * n)
                .map(|i| {
                    (0..k)
                        .map(|l| f(x[(i / n) * k + l]) * f(w[(i % n) * k + l]))
                        .sum()
                })
                .collect();
            let error = relative_frobenius(&got, &want);
            assert!(
                error <= BF16_FROBENIUS,
                "{rows}x{k}->{n}: relative Frobenius error {error}"
            );
            println!("cuBLAS GEMM {rows}x{k}->{n}: relative Frobenius error {error:.2e}");
        }
    }

    #[test]
    #[ignore = "needs a GPU: scripts/gpu_validate.sh"]
    fn gpu_moe_layer_matches_the_cpu_reference() {
        let mut gpu = gpu();
        let small = MoeShape {
            hidden: 200,
            expert_ffn: 136,
            n_experts: 8,
            top_k: 2,
        };
        // Widths that are not multiples of 8 (the element-wise kernels' scalar path).
        let odd = MoeShape {
            hidden: 61,
            expert_ffn: 45,
            n_experts: 5,
            top_k: 3,
        };
        // Qwen1.5-MoE-A2.7B's expert width, 8 of its experts, top-4.
        let qwen = MoeShape {
            hidden: 2048,
            expert_ffn: 1408,
            n_experts: 8,
            top_k: 4,
        };
        let cases = [
            (small, 1),
            (small, 5),
            (small, 300),
            (odd, 1),
            (odd, 77),
            (qwen, 64),
        ];
        for (seed, (shape, tokens)) in (1..).zip(cases) {
            let p = MoeProblem::random(shape, 64, tokens, seed);
            let want = moe_layer_cpu(&p).unwrap();
            let Output::Moe(got) = gpu.run(&Workload::Moe(p)).unwrap() else {
                panic!("wrong output kind");
            };
            let case = format!("{shape:?} tokens {tokens}");
            assert_eq!(got.grouping.counts, want.grouping.counts, "{case}");
            assert_eq!(got.grouping.offsets, want.grouping.offsets, "{case}");
            // Atomics order rows within an expert arbitrarily; each segment is a permutation,
            // and position_of is its inverse.
            for e in 0..shape.n_experts {
                let (b, end) = (
                    want.grouping.offsets[e] as usize,
                    want.grouping.offsets[e + 1] as usize,
                );
                let mut g = got.grouping.sorted_assignments[b..end].to_vec();
                g.sort_unstable();
                assert_eq!(
                    g,
                    want.grouping.sorted_assignments[b..end],
                    "{case} expert {e}"
                );
            }
            for (a, &pos) in got.grouping.position_of.iter().enumerate() {
                assert_eq!(
                    got.grouping.sorted_assignments[pos as usize] as usize, a,
                    "{case}"
                );
            }
            let error = relative_frobenius(&widened(&got.out), &widened(&want.out));
            assert!(
                error <= BF16_FROBENIUS,
                "{case}: relative Frobenius error {error}"
            );
            println!("MoE layer {case}: relative Frobenius error {error:.2e}");
        }
    }

    #[test]
    #[ignore = "needs a GPU: scripts/gpu_validate.sh"]
    fn gpu_moe_layer_is_deterministic() {
        let mut gpu = gpu();
        let shape = MoeShape {
            hidden: 256,
            expert_ffn: 192,
            n_experts: 16,
            top_k: 4,
        };
        // Many rows per expert, so that the atomics order them differently between runs.
        let p = MoeProblem::random(shape, 64, 2000, 9);
        let run = |gpu: &mut CudaBackend| match gpu.run(&Workload::Moe(p.clone())).unwrap() {
            Output::Moe(out) => out.out.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            _ => panic!("wrong output kind"),
        };
        let first = run(&mut gpu);
        for _ in 0..3 {
            assert_eq!(run(&mut gpu), first);
        }
    }

    #[test]
    #[ignore = "needs a GPU: scripts/gpu_validate.sh"]
    fn gpu_rerouting_matches_the_cpu_reference() {
        let mut gpu = gpu();
        for (tokens, adapters, seed) in [(1, 1, 1), (1000, 5, 2), (4096, 20, 3)] {
            let p = RerouteProblem::random(tokens, 64, 6, adapters, 8, seed);
            let fused = reroute_fused_cpu(&p).unwrap();
            assert_eq!(fused, reroute_unfused_cpu(&p).unwrap().rerouted);
            for variant in [RerouteVariant::Fused, RerouteVariant::Unfused] {
                let Output::Reroute(got) = gpu.run(&Workload::Reroute(p.clone(), variant)).unwrap()
                else {
                    panic!("wrong output kind");
                };
                assert_eq!(got, fused, "{variant:?}");
            }
        }
    }

    #[test]
    #[ignore = "needs a GPU: scripts/gpu_validate.sh"]
    fn gpu_decode_step_matches_the_cpu_reference() {
        let mut gpu = gpu();
        let small = DecodeShape {
            hidden: 256,
            out_features: 300,
            n_heads: 8,
            n_kv_heads: 2,
            head_dim: 64,
        };
        let wide = DecodeShape {
            hidden: 2048,
            out_features: 4096,
            n_heads: 16,
            n_kv_heads: 16,
            head_dim: 128,
        };
        let cases = [
            (small, 1, 1),
            (small, 5, 0),
            (small, 67, 300),
            (wide, 1, 64),
            (wide, 33, 0),
        ];
        for (seed, (shape, batch, context)) in (1..).zip(cases) {
            let p = DecodeProblem::random(shape, 64, batch, context, seed, false);
            let want = decode_step_cpu(&p).unwrap();
            let Output::Decode(got) = gpu.run(&Workload::Decode(p)).unwrap() else {
                panic!("wrong output kind");
            };
            let case = format!("{shape:?} batch {batch} context {context}");
            let error = relative_frobenius(&widened(&got.y), &widened(&want.y));
            assert!(
                error <= BF16_FROBENIUS,
                "{case}: y: relative Frobenius error {error}"
            );
            // Attention is ours, in f32 throughout: within f32 rounding, element by element.
            let scale = want.attention.iter().fold(1e-6f32, |m, v| m.max(v.abs()));
            for (i, (g, w)) in got.attention.iter().zip(&want.attention).enumerate() {
                assert!(g.is_finite(), "{case}: attention[{i}] not written");
                assert!(
                    (g - w).abs() <= scale * 1e-4,
                    "{case}: attention[{i}]: gpu {g} cpu {w}"
                );
            }
        }
    }

    #[test]
    #[ignore = "needs a GPU: scripts/gpu_validate.sh"]
    fn gpu_timing_returns_positive_event_times() {
        let mut gpu = gpu();
        let reroute = Workload::Reroute(
            RerouteProblem::random(512, 64, 6, 4, 8, 1),
            RerouteVariant::Fused,
        );
        let shape = MoeShape {
            hidden: 512,
            expert_ffn: 256,
            n_experts: 8,
            top_k: 2,
        };
        let moe = Workload::Moe(MoeProblem::random(shape, 64, 100, 2));
        for workload in [reroute, moe] {
            let samples = gpu.time(&workload, 3, 20).unwrap();
            assert_eq!(samples.len(), 20);
            assert!(
                samples.iter().all(|s| s.is_finite() && *s > 0.0),
                "{samples:?}"
            );
        }
        println!("timing: {}", gpu.device().timing);
        println!("libraries: {:?}", gpu.device().libraries);
    }
}
