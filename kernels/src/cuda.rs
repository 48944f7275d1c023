//! The `cuda` backend: device 0 through the CUDA driver API (cudarc, loaded at run time),
//! kernels compiled with NVRTC for the device's compute capability (one module per tile size),
//! outputs poisoned (NaN / all-ones) before every run, timing with device events around each
//! repetition. Every failure is a `BackendError`; the driver and NVRTC libraries are checked
//! for before any call, because cudarc panics when they are missing.

use crate::backend::{
    Backend, BackendError, BackendKind, DeviceInfo, GridCapacity, Output, Workload,
};
use crate::decode::{DecodeOutput, DecodeProblem};
use crate::moe::{Grouping, MoeOutput, MoeProblem};
use crate::reroute::RerouteVariant;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DeviceRepr, DriverError,
    LaunchConfig, PushKernelArg, sys,
};
use half::bf16;
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

/// The CUDA backend on one device.
pub struct CudaBackend {
    info: DeviceInfo,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    modules: HashMap<usize, Arc<CudaModule>>,
    functions: HashMap<(usize, &'static str), CudaFunction>,
}

const BLOCK: u32 = 256;
/// Rerouting does not depend on the tile; its kernels come from the tile-64 module.
const REROUTE_TILE: usize = 64;

fn blocks_for(n: usize) -> u32 {
    n.div_ceil(BLOCK as usize).max(1) as u32
}

fn linear(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (blocks_for(n), 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn bits(values: &[bf16]) -> Vec<u16> {
    values.iter().map(|v| v.to_bits()).collect()
}

/// The launch of an expert GEMM over `width` output columns: one block per (tile, column
/// block) work item of the dense bound on tiles (every expert's partial tile can add one tile),
/// or at most `block_cap` blocks that loop over the items (see `source::MOE`).
fn gemm_grid(
    assignments: u32,
    tile: usize,
    n_experts: u32,
    width: u32,
    block_cap: Option<u32>,
) -> Result<LaunchConfig, BackendError> {
    let max_tiles = (assignments as usize).div_ceil(tile) + n_experts as usize;
    let items = max_tiles * width.div_ceil(64) as usize;
    // The grid's x limit; it also keeps `item + gridDim.x` in the kernels within u32.
    if items > i32::MAX as usize {
        return Err(BackendError::Timing(format!(
            "{items} expert-GEMM work items exceed the grid limit {}",
            i32::MAX
        )));
    }
    let blocks = block_cap.map_or(items as u32, |cap| cap.min(items as u32));
    Ok(LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    })
}

fn u32_of(n: usize, what: &str) -> Result<u32, BackendError> {
    u32::try_from(n).map_err(|_| BackendError::Timing(format!("{what} = {n} exceeds u32")))
}

/// Device buffers of one prepared workload (one at a time, so variant sizes do not matter).
#[allow(clippy::large_enum_variant)]
enum Prepared {
    Moe {
        tile: usize,
        block_cap: Option<u32>,
        tokens: u32,
        hidden: u32,
        ffn: u32,
        n_experts: u32,
        top_k: u32,
        x: CudaSlice<u16>,
        ids: CudaSlice<i32>,
        weights: CudaSlice<f32>,
        w_gate: CudaSlice<u16>,
        w_up: CudaSlice<u16>,
        w_down: CudaSlice<u16>,
        counts: CudaSlice<u32>,
        offsets: CudaSlice<u32>,
        tile_offsets: CudaSlice<u32>,
        cursor: CudaSlice<u32>,
        sorted: CudaSlice<u32>,
        position_of: CudaSlice<u32>,
        h: CudaSlice<u16>,
        y: CudaSlice<f32>,
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
        tile: usize,
        batch: u32,
        context: u32,
        hidden: u32,
        out_features: u32,
        n_heads: u32,
        n_kv_heads: u32,
        head_dim: u32,
        x: CudaSlice<u16>,
        w: CudaSlice<u16>,
        q: CudaSlice<u16>,
        k: CudaSlice<u16>,
        v: CudaSlice<u16>,
        scores: CudaSlice<f32>,
        y: CudaSlice<f32>,
        attention: CudaSlice<f32>,
    },
}

impl CudaBackend {
    /// Opens device `ordinal`: checks for the driver and NVRTC, then the device.
    pub fn open(ordinal: usize) -> Result<CudaBackend, BackendError> {
        if !driver_present() {
            return Err(BackendError::NoDriver);
        }
        if !crate::nvrtc::nvrtc_present() {
            return Err(BackendError::NoNvrtc);
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
        let name = ctx.name().map_err(driver_error("cuDeviceGetName"))?;
        let capability = ctx
            .compute_capability()
            .map_err(driver_error("cuDeviceGetAttribute"))?;
        let mut version = 0;
        // SAFETY: the driver is loaded and initialized; the pointer is valid for the call.
        let driver = match unsafe { sys::cuDriverGetVersion(&mut version) } {
            sys::cudaError_enum::CUDA_SUCCESS => {
                Some(format!("{}.{}", version / 1000, (version % 1000) / 10))
            }
            _ => None,
        };
        let stream = ctx.default_stream();
        Ok(CudaBackend {
            info: DeviceInfo {
                backend: BackendKind::Cuda,
                name,
                compute_capability: Some(capability),
                driver,
                timing: "device events",
            },
            ctx,
            stream,
            modules: HashMap::new(),
            functions: HashMap::new(),
        })
    }

    /// The module for `tile`, compiled on first use.
    fn module(&mut self, tile: usize) -> Result<Arc<CudaModule>, BackendError> {
        if let Some(module) = self.modules.get(&tile) {
            return Ok(module.clone());
        }
        let (major, minor) = self.info.compute_capability.unwrap_or((9, 0));
        let compiled = crate::nvrtc::compile_kernels(tile, major, minor)?;
        let module = self
            .ctx
            .load_module(cudarc::nvrtc::Ptx::from_src(compiled.ptx))
            .map_err(driver_error("cuModuleLoadData"))?;
        self.modules.insert(tile, module.clone());
        Ok(module)
    }

    /// Kernel `name` of the module for `tile`, looked up once and cached (so the timed loop
    /// does no compilation or lookup between its events).
    fn function(&mut self, tile: usize, name: &'static str) -> Result<CudaFunction, BackendError> {
        if let Some(function) = self.functions.get(&(tile, name)) {
            return Ok(function.clone());
        }
        let function = self
            .module(tile)?
            .load_function(name)
            .map_err(driver_error("cuModuleGetFunction"))?;
        self.functions.insert((tile, name), function.clone());
        Ok(function)
    }

    /// Compiles and looks up every kernel a workload launches, before anything is timed.
    fn preload(&mut self, workload: &Workload) -> Result<(), BackendError> {
        let tile = match workload {
            Workload::Moe(p) => p.tile_tokens,
            Workload::Decode(p) => p.tile_tokens,
            Workload::Reroute(..) => REROUTE_TILE,
        };
        for name in crate::source::KERNEL_NAMES {
            self.function(tile, name)?;
        }
        Ok(())
    }

    fn upload<T: DeviceRepr>(&self, values: &[T]) -> Result<CudaSlice<T>, BackendError> {
        self.stream
            .clone_htod(values)
            .map_err(driver_error("cuMemcpyHtoD"))
    }

    /// A buffer of `len` copies of `poison`: what a kernel does not write stays visibly wrong.
    fn poisoned<T: DeviceRepr + Copy>(
        &self,
        len: usize,
        poison: T,
    ) -> Result<CudaSlice<T>, BackendError> {
        self.upload(&vec![poison; len.max(1)])
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

    fn prepare(&mut self, workload: &Workload) -> Result<Prepared, BackendError> {
        workload.validate()?;
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
        Ok(Prepared::Moe {
            tile: p.tile_tokens,
            block_cap: p.block_cap,
            tokens: u32_of(p.tokens(), "tokens")?,
            hidden: u32_of(s.hidden, "hidden")?,
            ffn: u32_of(s.expert_ffn, "expert_ffn")?,
            n_experts: u32_of(s.n_experts, "n_experts")?,
            top_k: u32_of(s.top_k, "top_k")?,
            x: self.upload(&bits(&p.x))?,
            ids: self.upload(&p.topk_ids)?,
            weights: self.upload(&p.topk_weights)?,
            w_gate: self.upload(&bits(&p.w_gate))?,
            w_up: self.upload(&bits(&p.w_up))?,
            w_down: self.upload(&bits(&p.w_down))?,
            counts: self.poisoned(s.n_experts, u32::MAX)?,
            offsets: self.poisoned(s.n_experts + 1, u32::MAX)?,
            tile_offsets: self.poisoned(s.n_experts + 1, u32::MAX)?,
            cursor: self.poisoned(s.n_experts, u32::MAX)?,
            sorted: self.poisoned(a, u32::MAX)?,
            position_of: self.poisoned(a, u32::MAX)?,
            h: self.poisoned(a * s.expert_ffn, 0x7fc0u16)?,
            y: self.poisoned(a * s.hidden, f32::NAN)?,
            out: self.poisoned(p.tokens() * s.hidden, 0x7fc0u16)?,
        })
    }

    fn prepare_decode(&mut self, p: &DecodeProblem) -> Result<Prepared, BackendError> {
        let s = p.shape;
        Ok(Prepared::Decode {
            tile: p.tile_tokens,
            batch: u32_of(p.batch, "batch")?,
            context: u32_of(p.context, "context")?,
            hidden: u32_of(s.hidden, "hidden")?,
            out_features: u32_of(s.out_features, "out_features")?,
            n_heads: u32_of(s.n_heads, "n_heads")?,
            n_kv_heads: u32_of(s.n_kv_heads, "n_kv_heads")?,
            head_dim: u32_of(s.head_dim, "head_dim")?,
            x: self.upload(&bits(&p.x))?,
            w: self.upload(&bits(&p.w))?,
            q: self.upload(&bits(&p.q))?,
            k: self.poisoned_or(&bits(&p.k_cache))?,
            v: self.poisoned_or(&bits(&p.v_cache))?,
            scores: self.poisoned(p.batch * s.n_heads * p.context, f32::NAN)?,
            y: self.poisoned(p.batch * s.out_features, f32::NAN)?,
            attention: self.poisoned(p.batch * s.n_heads * s.head_dim, f32::NAN)?,
        })
    }

    /// Uploads `values`, or one dummy element when empty (zero-size allocations fail).
    fn poisoned_or(&self, values: &[u16]) -> Result<CudaSlice<u16>, BackendError> {
        if values.is_empty() {
            self.poisoned(1, 0u16)
        } else {
            self.upload(values)
        }
    }

    /// Enqueues every kernel of a prepared workload on the stream.
    fn launch(&mut self, prepared: &mut Prepared) -> Result<(), BackendError> {
        let launch_error = driver_error("cuLaunchKernel");
        match prepared {
            Prepared::Moe {
                tile,
                block_cap,
                tokens,
                hidden,
                ffn,
                n_experts,
                top_k,
                x,
                ids,
                weights,
                w_gate,
                w_up,
                w_down,
                counts,
                offsets,
                tile_offsets,
                cursor,
                sorted,
                position_of,
                h,
                y,
                out,
            } => {
                let tile = *tile;
                let a = *tokens * *top_k;
                let histogram = self.function(tile, "moe_histogram")?;
                let prefix = self.function(tile, "moe_prefix_sum")?;
                let scatter = self.function(tile, "moe_scatter")?;
                let gate_up = self.function(tile, "moe_gate_up")?;
                let down = self.function(tile, "moe_down")?;
                let combine = self.function(tile, "moe_combine")?;
                let stream = self.stream.clone();
                stream
                    .memset_zeros(counts)
                    .map_err(driver_error("cuMemsetD8Async"))?;
                // SAFETY (every launch below): argument types and order match the kernel
                // signatures in `source::MOE`; buffer sizes were validated in `prepare`.
                unsafe {
                    stream
                        .launch_builder(&histogram)
                        .arg(&*ids)
                        .arg(&a)
                        .arg(&mut *counts)
                        .launch(linear(a as usize))
                }
                .map_err(&launch_error)?;
                unsafe {
                    stream
                        .launch_builder(&prefix)
                        .arg(&*counts)
                        .arg(&*n_experts)
                        .arg(&mut *offsets)
                        .arg(&mut *tile_offsets)
                        .arg(&mut *cursor)
                        .launch(LaunchConfig {
                            grid_dim: (1, 1, 1),
                            block_dim: (1, 1, 1),
                            shared_mem_bytes: 0,
                        })
                }
                .map_err(&launch_error)?;
                unsafe {
                    stream
                        .launch_builder(&scatter)
                        .arg(&*ids)
                        .arg(&a)
                        .arg(&mut *cursor)
                        .arg(&mut *sorted)
                        .arg(&mut *position_of)
                        .launch(linear(a as usize))
                }
                .map_err(&launch_error)?;
                let (gate_up_grid, down_grid) = (
                    gemm_grid(a, tile, *n_experts, *ffn, *block_cap)?,
                    gemm_grid(a, tile, *n_experts, *hidden, *block_cap)?,
                );
                unsafe {
                    stream
                        .launch_builder(&gate_up)
                        .arg(&*x)
                        .arg(&*w_gate)
                        .arg(&*w_up)
                        .arg(&*offsets)
                        .arg(&*tile_offsets)
                        .arg(&*sorted)
                        .arg(&*n_experts)
                        .arg(&*top_k)
                        .arg(&*hidden)
                        .arg(&*ffn)
                        .arg(&mut *h)
                        .launch(gate_up_grid)
                }
                .map_err(&launch_error)?;
                unsafe {
                    stream
                        .launch_builder(&down)
                        .arg(&*h)
                        .arg(&*w_down)
                        .arg(&*offsets)
                        .arg(&*tile_offsets)
                        .arg(&*n_experts)
                        .arg(&*hidden)
                        .arg(&*ffn)
                        .arg(&mut *y)
                        .launch(down_grid)
                }
                .map_err(&launch_error)?;
                unsafe {
                    stream
                        .launch_builder(&combine)
                        .arg(&*y)
                        .arg(&*weights)
                        .arg(&*position_of)
                        .arg(&*tokens)
                        .arg(&*top_k)
                        .arg(&*hidden)
                        .arg(&mut *out)
                        .launch(linear(*tokens as usize * *hidden as usize))
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
                let stream = self.stream.clone();
                let cfg = linear(*n as usize);
                // Rerouting does not depend on the tile; any compiled module has its kernels.
                match variant {
                    RerouteVariant::Fused => {
                        let fused = self.function(REROUTE_TILE, "reroute_fused")?;
                        unsafe {
                            stream
                                .launch_builder(&fused)
                                .arg(&*ids)
                                .arg(&*aids)
                                .arg(&*map)
                                .arg(&*n)
                                .arg(&*top_k)
                                .arg(&*n_experts)
                                .arg(&mut *out)
                                .launch(cfg)
                        }
                        .map_err(&launch_error)?;
                    }
                    RerouteVariant::Unfused => {
                        let b = self.function(REROUTE_TILE, "reroute_broadcast")?;
                        let o = self.function(REROUTE_TILE, "reroute_offsets")?;
                        let g = self.function(REROUTE_TILE, "reroute_gather")?;
                        unsafe {
                            stream
                                .launch_builder(&b)
                                .arg(&*aids)
                                .arg(&*n)
                                .arg(&*top_k)
                                .arg(&mut *broadcast)
                                .launch(cfg)
                        }
                        .map_err(&launch_error)?;
                        unsafe {
                            stream
                                .launch_builder(&o)
                                .arg(&*broadcast)
                                .arg(&*ids)
                                .arg(&*n)
                                .arg(&*n_experts)
                                .arg(&mut *offsets)
                                .launch(cfg)
                        }
                        .map_err(&launch_error)?;
                        unsafe {
                            stream
                                .launch_builder(&g)
                                .arg(&*offsets)
                                .arg(&*ids)
                                .arg(&*map)
                                .arg(&*n)
                                .arg(&mut *out)
                                .launch(cfg)
                        }
                        .map_err(&launch_error)?;
                    }
                }
            }
            Prepared::Decode {
                tile,
                batch,
                context,
                hidden,
                out_features,
                n_heads,
                n_kv_heads,
                head_dim,
                x,
                w,
                q,
                k,
                v,
                scores,
                y,
                attention,
            } => {
                let tile = *tile;
                let gemm = self.function(tile, "dense_gemm")?;
                let attend = self.function(tile, "decode_attention")?;
                let stream = self.stream.clone();
                unsafe {
                    stream
                        .launch_builder(&gemm)
                        .arg(&*x)
                        .arg(&*w)
                        .arg(&*batch)
                        .arg(&*hidden)
                        .arg(&*out_features)
                        .arg(&mut *y)
                        .launch(LaunchConfig {
                            grid_dim: (batch.div_ceil(tile as u32), out_features.div_ceil(64), 1),
                            block_dim: (256, 1, 1),
                            shared_mem_bytes: 0,
                        })
                }
                .map_err(&launch_error)?;
                if *context == 0 {
                    stream
                        .memset_zeros(attention)
                        .map_err(driver_error("cuMemsetD8Async"))?;
                } else {
                    let scale = 1.0f32 / (*head_dim as f32).sqrt();
                    unsafe {
                        stream
                            .launch_builder(&attend)
                            .arg(&*q)
                            .arg(&*k)
                            .arg(&*v)
                            .arg(&*n_heads)
                            .arg(&*n_kv_heads)
                            .arg(&*head_dim)
                            .arg(&*context)
                            .arg(&scale)
                            .arg(&mut *scores)
                            .arg(&mut *attention)
                            .launch(LaunchConfig {
                                grid_dim: (*batch, *n_heads, 1),
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
        self.stream
            .synchronize()
            .map_err(driver_error("cuStreamSynchronize"))?;
        Ok(match prepared {
            Prepared::Moe {
                tokens,
                hidden,
                n_experts,
                top_k,
                counts,
                offsets,
                tile_offsets,
                sorted,
                position_of,
                out,
                ..
            } => {
                let e = *n_experts as usize;
                let a = (*tokens * *top_k) as usize;
                Output::Moe(MoeOutput {
                    grouping: Grouping {
                        counts: self.download(counts, e)?,
                        offsets: self.download(offsets, e + 1)?,
                        tile_offsets: self.download(tile_offsets, e + 1)?,
                        sorted_assignments: self.download(sorted, a)?,
                        position_of: self.download(position_of, a)?,
                    },
                    out: self
                        .download(out, *tokens as usize * *hidden as usize)?
                        .into_iter()
                        .map(bf16::from_bits)
                        .collect(),
                })
            }
            Prepared::Reroute { n, out, .. } => Output::Reroute(self.download(out, *n as usize)?),
            Prepared::Decode {
                batch,
                out_features,
                n_heads,
                head_dim,
                y,
                attention,
                ..
            } => Output::Decode(DecodeOutput {
                y: self.download(y, (*batch * *out_features) as usize)?,
                attention: self.download(attention, (*batch * *n_heads * *head_dim) as usize)?,
            }),
        })
    }
}

impl Backend for CudaBackend {
    fn device(&self) -> &DeviceInfo {
        &self.info
    }

    fn run(&mut self, workload: &Workload) -> Result<Output, BackendError> {
        let mut prepared = self.prepare(workload)?;
        self.launch(&mut prepared)?;
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
        let mut prepared = self.prepare(workload)?;
        self.preload(workload)?;
        for _ in 0..warmup {
            self.launch(&mut prepared)?;
        }
        let stream = self.stream.clone();
        stream
            .synchronize()
            .map_err(driver_error("cuStreamSynchronize"))?;
        let timed = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let mut samples = Vec::with_capacity(repetitions);
        for _ in 0..repetitions {
            let start = stream
                .record_event(timed)
                .map_err(driver_error("cuEventRecord"))?;
            self.launch(&mut prepared)?;
            let end = stream
                .record_event(timed)
                .map_err(driver_error("cuEventRecord"))?;
            end.synchronize()
                .map_err(driver_error("cuEventSynchronize"))?;
            let ms = start
                .elapsed_ms(&end)
                .map_err(driver_error("cuEventElapsedTime"))?;
            samples.push(f64::from(ms) * 1e6);
        }
        Ok(samples)
    }

    fn copy_to_device(&mut self, host: &[u8]) -> Result<f64, BackendError> {
        let stream = self.stream.clone();
        stream
            .synchronize()
            .map_err(driver_error("cuStreamSynchronize"))?;
        let start = std::time::Instant::now();
        let device = self.upload(host)?;
        stream
            .synchronize()
            .map_err(driver_error("cuStreamSynchronize"))?;
        let nanos = start.elapsed().as_nanos() as f64;
        drop(device);
        Ok(nanos)
    }

    fn moe_grid_capacity(
        &mut self,
        tile_tokens: usize,
    ) -> Result<Option<GridCapacity>, BackendError> {
        crate::moe::check_tile_tokens(tile_tokens)?;
        let multiprocessors = self
            .ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(driver_error("cuDeviceGetAttribute"))?;
        let mut blocks_per_multiprocessor = u32::MAX;
        for name in ["moe_gate_up", "moe_down"] {
            let resident = self
                .function(tile_tokens, name)?
                .occupancy_max_active_blocks_per_multiprocessor(256, 0, None)
                .map_err(driver_error("cuOccupancyMaxActiveBlocksPerMultiprocessor"))?;
            blocks_per_multiprocessor = blocks_per_multiprocessor.min(resident);
        }
        Ok(Some(GridCapacity {
            multiprocessors: multiprocessors.max(1) as u32,
            blocks_per_multiprocessor: blocks_per_multiprocessor.max(1),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::{DecodeShape, decode_step_cpu};
    use crate::moe::{MoeShape, moe_layer_cpu};
    use crate::reroute::{RerouteProblem, reroute_fused_cpu, reroute_unfused_cpu};

    /// The reason every GPU test gives for being `#[ignore]`d: a run without a GPU says they
    /// were not run instead of reporting them passed; `scripts/gpu_validate.sh` runs them.
    const NEEDS_A_GPU: &str = "needs a GPU: scripts/gpu_validate.sh";

    /// CUDA device 0 for a GPU test. The GPU tests run only when asked for (`--ignored`), so
    /// a machine without a usable device is a failure with the reason, never a silent pass.
    fn gpu() -> CudaBackend {
        CudaBackend::open(0).unwrap_or_else(|e| {
            panic!(
                "this test {NEEDS_A_GPU} (run with --ignored on a machine with a CUDA device); {e}"
            )
        })
    }

    /// Every tile size the kernels accept: the multiples of 4 up to 256
    /// (`moe::check_tile_tokens`).
    fn every_tile() -> impl Iterator<Item = usize> {
        (crate::moe::TILE_ROW_GROUPS..=crate::moe::MAX_TILE_TOKENS)
            .step_by(crate::moe::TILE_ROW_GROUPS)
    }

    #[test]
    fn every_tile_is_every_accepted_tile_size() {
        let tiles: Vec<usize> = every_tile().collect();
        assert_eq!(tiles.len(), 64);
        assert_eq!((tiles[0], tiles[63]), (4, 256));
        for tile in 1..=300 {
            assert_eq!(
                crate::moe::check_tile_tokens(tile).is_ok(),
                tiles.contains(&tile),
                "tile {tile}"
            );
        }
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
                        || message.starts_with("NVRTC not found"),
                    "{message}"
                );
            }
        }
    }

    #[test]
    #[ignore = "needs a GPU: scripts/gpu_validate.sh"]
    fn gpu_moe_layer_matches_the_cpu_reference() {
        let mut gpu = gpu();
        let shape = MoeShape {
            hidden: 200,
            expert_ffn: 136,
            n_experts: 8,
            top_k: 2,
        };
        // At every tile size: one token, one partial tile per expert, and (4 x tile + 3 tokens
        // over 8 experts of which 2 per token) experts with a full tile and a partial one.
        let cases =
            every_tile().flat_map(|tile| [(tile, 1), (tile, tile + 1), (tile, 4 * tile + 3)]);
        for (seed, (tile, tokens)) in (1..).zip(cases) {
            let p = MoeProblem::random(shape, tile, tokens, seed);
            let want = moe_layer_cpu(&p).unwrap();
            let Output::Moe(got) = gpu.run(&Workload::Moe(p)).unwrap() else {
                panic!("wrong output kind");
            };
            let case = format!("tile {tile} tokens {tokens}");
            assert_eq!(got.grouping.counts, want.grouping.counts, "{case}");
            assert_eq!(got.grouping.offsets, want.grouping.offsets, "{case}");
            assert_eq!(
                got.grouping.tile_offsets, want.grouping.tile_offsets,
                "{case}"
            );
            // Atomics order rows within an expert arbitrarily; each segment is a permutation.
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
                    "tile {tile} tokens {tokens} expert {e}"
                );
            }
            let scale = want.out.iter().fold(0.0f32, |m, v| m.max(v.to_f32().abs()));
            for (i, (g, w)) in got.out.iter().zip(&want.out).enumerate() {
                let (g, w) = (g.to_f32(), w.to_f32());
                assert!(
                    g.is_finite(),
                    "tile {tile} tokens {tokens}: out[{i}] not written"
                );
                assert!(
                    (g - w).abs() <= scale / 64.0,
                    "tile {tile} tokens {tokens}: out[{i}]: gpu {g} cpu {w}"
                );
            }
        }
    }

    #[test]
    #[ignore = "needs a GPU: scripts/gpu_validate.sh"]
    fn gpu_capped_moe_grid_is_bit_identical_to_the_uncapped_one() {
        let mut gpu = gpu();
        // Widths that leave partial column blocks, tiles that leave partial token tiles.
        let shape = MoeShape {
            hidden: 200,
            expert_ffn: 136,
            n_experts: 7,
            top_k: 3,
        };
        // At every tile size: one token, and 3 x tile + 1 tokens over 7 experts of which 3 per
        // token (partial tiles, some experts with more than one).
        let cases = every_tile().flat_map(|tile| [(tile, 1), (tile, 3 * tile + 1)]);
        for (seed, (tile, tokens)) in (1..).zip(cases) {
            let capacity = gpu.moe_grid_capacity(tile).unwrap().unwrap();
            assert!(capacity.multiprocessors >= 1 && capacity.blocks_per_multiprocessor >= 1);
            let p = MoeProblem::random(shape, tile, tokens, seed);
            let Output::Moe(want) = gpu.run(&Workload::Moe(p.clone())).unwrap() else {
                panic!("wrong output kind");
            };
            for cap in [1, 3, capacity.multiprocessors] {
                let capped = MoeProblem {
                    block_cap: Some(cap),
                    ..p.clone()
                };
                let Output::Moe(got) = gpu.run(&Workload::Moe(capped)).unwrap() else {
                    panic!("wrong output kind");
                };
                // Rows within an expert may be ordered differently by the scatter's atomics;
                // each assignment's result, found through its position, must be identical.
                for t in 0..tokens {
                    let (g, w) = (
                        &got.out[t * shape.hidden..(t + 1) * shape.hidden],
                        &want.out[t * shape.hidden..(t + 1) * shape.hidden],
                    );
                    let bits = |v: &[bf16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(g), bits(w), "tile {tile} cap {cap} token {t}");
                }
            }
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
        let shape = DecodeShape {
            hidden: 256,
            out_features: 300,
            n_heads: 8,
            n_kv_heads: 2,
            head_dim: 64,
        };
        // At every tile size: batch 1, a partial tile with no cache, and two tiles and a partial
        // one over a long cache.
        let cases =
            every_tile().flat_map(|tile| [(tile, 1, 1), (tile, 5, 0), (tile, 2 * tile + 3, 300)]);
        for (seed, (tile, batch, context)) in (1..).zip(cases) {
            let p = DecodeProblem::random(shape, tile, batch, context, seed, false);
            let want = decode_step_cpu(&p).unwrap();
            let Output::Decode(got) = gpu.run(&Workload::Decode(p)).unwrap() else {
                panic!("wrong output kind");
            };
            for (name, g, w) in [
                ("y", &got.y, &want.y),
                ("attention", &got.attention, &want.attention),
            ] {
                let scale = w.iter().fold(1e-6f32, |m, v| m.max(v.abs()));
                for (i, (g, w)) in g.iter().zip(w).enumerate() {
                    assert!(
                        g.is_finite(),
                        "tile {tile} batch {batch}: {name}[{i}] not written"
                    );
                    assert!(
                        (g - w).abs() <= scale * 1e-4,
                        "tile {tile} batch {batch} context {context}: {name}[{i}]: gpu {g} cpu {w}"
                    );
                }
            }
        }
    }

    #[test]
    #[ignore = "needs a GPU: scripts/gpu_validate.sh"]
    fn gpu_timing_returns_positive_event_times() {
        let mut gpu = gpu();
        let p = RerouteProblem::random(512, 64, 6, 4, 8, 1);
        let samples = gpu
            .time(&Workload::Reroute(p, RerouteVariant::Fused), 3, 20)
            .unwrap();
        assert_eq!(samples.len(), 20);
        assert!(samples.iter().all(|s| *s > 0.0));
    }
}
