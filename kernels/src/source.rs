//! The CUDA C sources of every kernel, compiled at run time with NVRTC (see `nvrtc`). They
//! need no CUDA headers: bf16 is carried as its 16 bits and converted by hand with the same
//! round-to-nearest-even as the CPU references. The tile size is a compile-time define.

/// bf16 helpers and the shared GEMM tile geometry.
pub const COMMON: &str = r#"
typedef unsigned short bf16_t;

#define TILE_N 64
#define TILE_K 16
#define GEMM_THREADS 256
#define ROW_GROUPS (GEMM_THREADS / TILE_N)
#define ROWS_PER_THREAD (EXPERTSIM_TILE_M / ROW_GROUPS)

__device__ __forceinline__ float bf16_to_f32(bf16_t v) {
    return __uint_as_float(((unsigned int)v) << 16);
}

__device__ __forceinline__ bf16_t f32_to_bf16(float f) {
    unsigned int bits = __float_as_uint(f);
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
        return (bf16_t)((bits >> 16) | 0x0040u);
    }
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (bf16_t)(bits >> 16);
}
"#;

/// Token grouping, the grouped tiled expert GEMMs and the weighted combine.
pub const MOE: &str = r#"
extern "C" __global__ void moe_histogram(const int* topk_ids, unsigned int n_assignments,
                                         unsigned int* counts) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n_assignments) {
        atomicAdd(&counts[topk_ids[i]], 1u);
    }
}

/* Exclusive prefix sums of rows and of tiles per expert (a single thread: expert counts are
   small), and the scatter cursors. */
extern "C" __global__ void moe_prefix_sum(const unsigned int* counts, unsigned int n_experts,
                                          unsigned int* offsets, unsigned int* tile_offsets,
                                          unsigned int* cursor) {
    if (blockIdx.x != 0 || threadIdx.x != 0) {
        return;
    }
    unsigned int rows = 0;
    unsigned int tiles = 0;
    for (unsigned int e = 0; e < n_experts; ++e) {
        offsets[e] = rows;
        tile_offsets[e] = tiles;
        cursor[e] = rows;
        rows += counts[e];
        tiles += (counts[e] + EXPERTSIM_TILE_M - 1) / EXPERTSIM_TILE_M;
    }
    offsets[n_experts] = rows;
    tile_offsets[n_experts] = tiles;
}

extern "C" __global__ void moe_scatter(const int* topk_ids, unsigned int n_assignments,
                                       unsigned int* cursor, unsigned int* sorted_assignments,
                                       unsigned int* position_of) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n_assignments) {
        unsigned int pos = atomicAdd(&cursor[topk_ids[i]], 1u);
        sorted_assignments[pos] = i;
        position_of[i] = pos;
    }
}

/* The expert that owns tile `tile`: the last e with tile_offsets[e] <= tile. */
__device__ unsigned int moe_tile_expert(const unsigned int* tile_offsets, unsigned int n_experts,
                                        unsigned int tile) {
    unsigned int lo = 0;
    unsigned int hi = n_experts;
    while (hi - lo > 1) {
        unsigned int mid = (lo + hi) / 2;
        if (tile_offsets[mid] <= tile) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return lo;
}

/* The expert GEMMs' work items are (tile, column block) pairs, tile fastest. Each block
   loops over the items from blockIdx.x in steps of gridDim.x: one block per item (the grid the
   host launches by default), or a persistent grid of fewer blocks with bit-identical results,
   since an item's arithmetic does not depend on the block that computes it. The loop bounds
   are uniform within a block, so the barriers inside are reached by every thread. */

/* h[p][n] = bf16(silu(x_p . w_gate[e][n]) * (x_p . w_up[e][n])) for the rows p of one tile of
   expert e. Grid: (at most tiles x ceil(ffn / TILE_N)); block: GEMM_THREADS. The whole
   tile is computed (padding rows read zeros), as the CPU reference does. */
extern "C" __global__ void moe_gate_up(const bf16_t* x, const bf16_t* w_gate,
                                       const bf16_t* w_up, const unsigned int* offsets,
                                       const unsigned int* tile_offsets,
                                       const unsigned int* sorted_assignments,
                                       unsigned int n_experts, unsigned int top_k,
                                       unsigned int hidden, unsigned int ffn, bf16_t* h) {
    __shared__ float xs[EXPERTSIM_TILE_M][TILE_K + 1];
    __shared__ float gs[TILE_N][TILE_K + 1];
    __shared__ float us[TILE_N][TILE_K + 1];
    unsigned int tiles = tile_offsets[n_experts];
    unsigned int items = tiles * ((ffn + TILE_N - 1) / TILE_N);
    for (unsigned int item = blockIdx.x; item < items; item += gridDim.x) {
        unsigned int tile = item % tiles;
        unsigned int e = moe_tile_expert(tile_offsets, n_experts, tile);
        unsigned int seg_end = offsets[e + 1];
        unsigned int row0 = offsets[e] + (tile - tile_offsets[e]) * EXPERTSIM_TILE_M;
        unsigned int col = threadIdx.x % TILE_N;
        unsigned int group = threadIdx.x / TILE_N;
        unsigned int n0 = (item / tiles) * TILE_N;
        const bf16_t* wg = w_gate + (size_t)e * ffn * hidden;
        const bf16_t* wu = w_up + (size_t)e * ffn * hidden;
        float acc_g[ROWS_PER_THREAD];
        float acc_u[ROWS_PER_THREAD];
#pragma unroll
        for (int i = 0; i < ROWS_PER_THREAD; ++i) {
            acc_g[i] = 0.0f;
            acc_u[i] = 0.0f;
        }
        for (unsigned int k0 = 0; k0 < hidden; k0 += TILE_K) {
            for (unsigned int idx = threadIdx.x; idx < EXPERTSIM_TILE_M * TILE_K; idx += GEMM_THREADS) {
                unsigned int r = idx / TILE_K;
                unsigned int kk = idx % TILE_K;
                unsigned int p = row0 + r;
                unsigned int k = k0 + kk;
                float v = 0.0f;
                if (p < seg_end && k < hidden) {
                    unsigned int token = sorted_assignments[p] / top_k;
                    v = bf16_to_f32(x[(size_t)token * hidden + k]);
                }
                xs[r][kk] = v;
            }
            for (unsigned int idx = threadIdx.x; idx < TILE_N * TILE_K; idx += GEMM_THREADS) {
                unsigned int c = idx / TILE_K;
                unsigned int kk = idx % TILE_K;
                unsigned int n = n0 + c;
                unsigned int k = k0 + kk;
                float g = 0.0f;
                float u = 0.0f;
                if (n < ffn && k < hidden) {
                    g = bf16_to_f32(wg[(size_t)n * hidden + k]);
                    u = bf16_to_f32(wu[(size_t)n * hidden + k]);
                }
                gs[c][kk] = g;
                us[c][kk] = u;
            }
            __syncthreads();
#pragma unroll 4
            for (int kk = 0; kk < TILE_K; ++kk) {
                float g = gs[col][kk];
                float u = us[col][kk];
#pragma unroll
                for (int i = 0; i < ROWS_PER_THREAD; ++i) {
                    float xv = xs[group + i * ROW_GROUPS][kk];
                    acc_g[i] += xv * g;
                    acc_u[i] += xv * u;
                }
            }
            __syncthreads();
        }
        unsigned int n = n0 + col;
        if (n < ffn) {
#pragma unroll
            for (int i = 0; i < ROWS_PER_THREAD; ++i) {
                unsigned int p = row0 + group + i * ROW_GROUPS;
                if (p < seg_end) {
                    float g = acc_g[i];
                    h[(size_t)p * ffn + n] = f32_to_bf16(g / (1.0f + expf(-g)) * acc_u[i]);
                }
            }
        }
    }
}

/* y[p][n] = h_p . w_down[e][n] (f32) for the rows p of one tile of expert e.
   Grid: (at most tiles x ceil(hidden / TILE_N)). */
extern "C" __global__ void moe_down(const bf16_t* h, const bf16_t* w_down,
                                    const unsigned int* offsets, const unsigned int* tile_offsets,
                                    unsigned int n_experts, unsigned int hidden, unsigned int ffn,
                                    float* y) {
    __shared__ float hs[EXPERTSIM_TILE_M][TILE_K + 1];
    __shared__ float ws[TILE_N][TILE_K + 1];
    unsigned int tiles = tile_offsets[n_experts];
    unsigned int items = tiles * ((hidden + TILE_N - 1) / TILE_N);
    for (unsigned int item = blockIdx.x; item < items; item += gridDim.x) {
        unsigned int tile = item % tiles;
        unsigned int e = moe_tile_expert(tile_offsets, n_experts, tile);
        unsigned int seg_end = offsets[e + 1];
        unsigned int row0 = offsets[e] + (tile - tile_offsets[e]) * EXPERTSIM_TILE_M;
        unsigned int col = threadIdx.x % TILE_N;
        unsigned int group = threadIdx.x / TILE_N;
        unsigned int n0 = (item / tiles) * TILE_N;
        const bf16_t* wd = w_down + (size_t)e * hidden * ffn;
        float acc[ROWS_PER_THREAD];
#pragma unroll
        for (int i = 0; i < ROWS_PER_THREAD; ++i) {
            acc[i] = 0.0f;
        }
        for (unsigned int k0 = 0; k0 < ffn; k0 += TILE_K) {
            for (unsigned int idx = threadIdx.x; idx < EXPERTSIM_TILE_M * TILE_K; idx += GEMM_THREADS) {
                unsigned int r = idx / TILE_K;
                unsigned int kk = idx % TILE_K;
                unsigned int p = row0 + r;
                unsigned int k = k0 + kk;
                hs[r][kk] = (p < seg_end && k < ffn) ? bf16_to_f32(h[(size_t)p * ffn + k]) : 0.0f;
            }
            for (unsigned int idx = threadIdx.x; idx < TILE_N * TILE_K; idx += GEMM_THREADS) {
                unsigned int c = idx / TILE_K;
                unsigned int kk = idx % TILE_K;
                unsigned int n = n0 + c;
                unsigned int k = k0 + kk;
                ws[c][kk] = (n < hidden && k < ffn) ? bf16_to_f32(wd[(size_t)n * ffn + k]) : 0.0f;
            }
            __syncthreads();
#pragma unroll 4
            for (int kk = 0; kk < TILE_K; ++kk) {
                float w = ws[col][kk];
#pragma unroll
                for (int i = 0; i < ROWS_PER_THREAD; ++i) {
                    acc[i] += hs[group + i * ROW_GROUPS][kk] * w;
                }
            }
            __syncthreads();
        }
        unsigned int n = n0 + col;
        if (n < hidden) {
#pragma unroll
            for (int i = 0; i < ROWS_PER_THREAD; ++i) {
                unsigned int p = row0 + group + i * ROW_GROUPS;
                if (p < seg_end) {
                    y[(size_t)p * hidden + n] = acc[i];
                }
            }
        }
    }
}

/* out[t][c] = bf16(sum_j topk_weights[t][j] * y[position_of[t][j]][c]). */
extern "C" __global__ void moe_combine(const float* y, const float* topk_weights,
                                       const unsigned int* position_of, unsigned int tokens,
                                       unsigned int top_k, unsigned int hidden, bf16_t* out) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)tokens * hidden) {
        return;
    }
    size_t t = i / hidden;
    size_t c = i % hidden;
    float acc = 0.0f;
    for (unsigned int j = 0; j < top_k; ++j) {
        size_t a = t * top_k + j;
        acc += topk_weights[a] * y[(size_t)position_of[a] * hidden + c];
    }
    out[i] = f32_to_bf16(acc);
}
"#;

/// Batched rerouting: the fused kernel and the unfused broadcast / offsets / gather sequence.
pub const REROUTE: &str = r#"
extern "C" __global__ void reroute_fused(const int* topk_ids, const int* adapter_ids,
                                         const int* expert_map, unsigned int n_assignments,
                                         unsigned int top_k, unsigned int n_experts, int* out) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n_assignments) {
        int aid = adapter_ids[i / top_k];
        int id = topk_ids[i];
        out[i] = aid < 0 ? id : expert_map[(size_t)aid * n_experts + id];
    }
}

extern "C" __global__ void reroute_broadcast(const int* adapter_ids, unsigned int n_assignments,
                                             unsigned int top_k, int* broadcast_ids) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n_assignments) {
        broadcast_ids[i] = adapter_ids[i / top_k];
    }
}

extern "C" __global__ void reroute_offsets(const int* broadcast_ids, const int* topk_ids,
                                           unsigned int n_assignments, unsigned int n_experts,
                                           int* map_offsets) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n_assignments) {
        int aid = broadcast_ids[i];
        map_offsets[i] = aid < 0 ? -1 : aid * (int)n_experts + topk_ids[i];
    }
}

extern "C" __global__ void reroute_gather(const int* map_offsets, const int* topk_ids,
                                          const int* expert_map, unsigned int n_assignments,
                                          int* out) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n_assignments) {
        int off = map_offsets[i];
        out[i] = off < 0 ? topk_ids[i] : expert_map[off];
    }
}
"#;

/// The dense decode step: tiled weight-streaming GEMM and attention over the KV cache.
pub const DECODE: &str = r#"
/* y[b][n] = x_b . w[n] (f32). Grid: (ceil(batch / TILE_M), ceil(out / TILE_N)). */
extern "C" __global__ void dense_gemm(const bf16_t* x, const bf16_t* w, unsigned int batch,
                                      unsigned int hidden, unsigned int out_features, float* y) {
    __shared__ float xs[EXPERTSIM_TILE_M][TILE_K + 1];
    __shared__ float ws[TILE_N][TILE_K + 1];
    unsigned int row0 = blockIdx.x * EXPERTSIM_TILE_M;
    unsigned int col = threadIdx.x % TILE_N;
    unsigned int group = threadIdx.x / TILE_N;
    unsigned int n0 = blockIdx.y * TILE_N;
    float acc[ROWS_PER_THREAD];
#pragma unroll
    for (int i = 0; i < ROWS_PER_THREAD; ++i) {
        acc[i] = 0.0f;
    }
    for (unsigned int k0 = 0; k0 < hidden; k0 += TILE_K) {
        for (unsigned int idx = threadIdx.x; idx < EXPERTSIM_TILE_M * TILE_K; idx += GEMM_THREADS) {
            unsigned int r = idx / TILE_K;
            unsigned int kk = idx % TILE_K;
            unsigned int b = row0 + r;
            unsigned int k = k0 + kk;
            xs[r][kk] = (b < batch && k < hidden) ? bf16_to_f32(x[(size_t)b * hidden + k]) : 0.0f;
        }
        for (unsigned int idx = threadIdx.x; idx < TILE_N * TILE_K; idx += GEMM_THREADS) {
            unsigned int c = idx / TILE_K;
            unsigned int kk = idx % TILE_K;
            unsigned int n = n0 + c;
            unsigned int k = k0 + kk;
            ws[c][kk] = (n < out_features && k < hidden) ? bf16_to_f32(w[(size_t)n * hidden + k]) : 0.0f;
        }
        __syncthreads();
#pragma unroll 4
        for (int kk = 0; kk < TILE_K; ++kk) {
            float wv = ws[col][kk];
#pragma unroll
            for (int i = 0; i < ROWS_PER_THREAD; ++i) {
                acc[i] += xs[group + i * ROW_GROUPS][kk] * wv;
            }
        }
        __syncthreads();
    }
    unsigned int n = n0 + col;
    if (n < out_features) {
#pragma unroll
        for (int i = 0; i < ROWS_PER_THREAD; ++i) {
            unsigned int b = row0 + group + i * ROW_GROUPS;
            if (b < batch) {
                y[(size_t)b * out_features + n] = acc[i];
            }
        }
    }
}

#define ATTENTION_THREADS 128

/* Softmax attention of one (sequence, head) over its KV cache. Grid: (batch, n_heads);
   block: ATTENTION_THREADS. `scores` is a [batch][n_heads][context] f32 workspace. */
extern "C" __global__ void decode_attention(const bf16_t* q, const bf16_t* k_cache,
                                            const bf16_t* v_cache, unsigned int n_heads,
                                            unsigned int n_kv_heads, unsigned int head_dim,
                                            unsigned int context, float scale, float* scores,
                                            float* out) {
    __shared__ float reduce[ATTENTION_THREADS];
    unsigned int b = blockIdx.x;
    unsigned int h = blockIdx.y;
    unsigned int kvh = h / (n_heads / n_kv_heads);
    const bf16_t* qv = q + ((size_t)b * n_heads + h) * head_dim;
    float* s = scores + ((size_t)b * n_heads + h) * context;
    float local_max = __int_as_float(0xff800000);
    for (unsigned int t = threadIdx.x; t < context; t += ATTENTION_THREADS) {
        const bf16_t* kv = k_cache + (((size_t)b * context + t) * n_kv_heads + kvh) * head_dim;
        float acc = 0.0f;
        for (unsigned int d = 0; d < head_dim; ++d) {
            acc += bf16_to_f32(qv[d]) * bf16_to_f32(kv[d]);
        }
        acc *= scale;
        s[t] = acc;
        local_max = fmaxf(local_max, acc);
    }
    reduce[threadIdx.x] = local_max;
    __syncthreads();
    for (unsigned int stride = ATTENTION_THREADS / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) {
            reduce[threadIdx.x] = fmaxf(reduce[threadIdx.x], reduce[threadIdx.x + stride]);
        }
        __syncthreads();
    }
    float row_max = reduce[0];
    __syncthreads();
    float local_sum = 0.0f;
    for (unsigned int t = threadIdx.x; t < context; t += ATTENTION_THREADS) {
        float e = expf(s[t] - row_max);
        s[t] = e;
        local_sum += e;
    }
    reduce[threadIdx.x] = local_sum;
    __syncthreads();
    for (unsigned int stride = ATTENTION_THREADS / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) {
            reduce[threadIdx.x] += reduce[threadIdx.x + stride];
        }
        __syncthreads();
    }
    float total = reduce[0];
    for (unsigned int d = threadIdx.x; d < head_dim; d += ATTENTION_THREADS) {
        float acc = 0.0f;
        for (unsigned int t = 0; t < context; ++t) {
            acc += s[t] * bf16_to_f32(v_cache[(((size_t)b * context + t) * n_kv_heads + kvh) * head_dim + d]);
        }
        out[((size_t)b * n_heads + h) * head_dim + d] = acc / total;
    }
}
"#;

/// Every kernel entry point, by the source that defines it.
pub const KERNEL_NAMES: &[&str] = &[
    "moe_histogram",
    "moe_prefix_sum",
    "moe_scatter",
    "moe_gate_up",
    "moe_down",
    "moe_combine",
    "reroute_fused",
    "reroute_broadcast",
    "reroute_offsets",
    "reroute_gather",
    "dense_gemm",
    "decode_attention",
];

/// The whole program for one tile size: the define, then every source.
pub fn program(tile_tokens: usize) -> String {
    format!("#define EXPERTSIM_TILE_M {tile_tokens}\n{COMMON}{MOE}{REROUTE}{DECODE}")
}

/// FNV-1a (64-bit) of every source, as 16 hex digits: profiles record it so a measurement
/// can be traced to the exact kernels. (A tiny function, not worth a hashing crate.)
pub fn source_hash() -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for source in [COMMON, MOE, REROUTE, DECODE] {
        for byte in source.bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_kernel_is_defined_once() {
        let all = program(64);
        for name in KERNEL_NAMES {
            let definition = format!("__global__ void {name}(");
            assert_eq!(all.matches(&definition).count(), 1, "{name}");
        }
        assert_eq!(all.matches("__global__").count(), KERNEL_NAMES.len());
        assert!(all.starts_with("#define EXPERTSIM_TILE_M 64\n"));
        assert_eq!(source_hash().len(), 16);
        assert_eq!(source_hash(), source_hash());
    }
}
