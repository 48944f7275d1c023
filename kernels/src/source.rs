//! The CUDA C sources of every kernel of ours, compiled at run time with NVRTC (see `nvrtc`):
//! the MoE layer's grouping, gather, SwiGLU and combine, batched rerouting, and decode attention
//! (the GEMMs are cuBLAS's, `cuda`). They need no CUDA headers: bf16 is carried as its 16 bits
//! and converted by hand with the same round-to-nearest-even as the CPU references.

/// bf16 helpers and the 16-byte vector of 8 bf16 values the element-wise kernels move.
pub const COMMON: &str = r#"
typedef unsigned short bf16_t;

/* The element-wise kernels handle VEC consecutive bf16 values per thread: one 16-byte access
   when a row's width is a multiple of VEC (every row then starts 16-byte aligned), else one
   value at a time. */
#define VEC 8

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

/* VEC values at p (16 bytes, aligned) widened to f32. */
__device__ __forceinline__ void load_vec(const bf16_t* p, float* out) {
    uint4 v = *(const uint4*)p;
    unsigned int words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        out[2 * i] = bf16_to_f32((bf16_t)(words[i] & 0xffffu));
        out[2 * i + 1] = bf16_to_f32((bf16_t)(words[i] >> 16));
    }
}

/* VEC f32 values rounded to bf16 and stored at p (16 bytes, aligned). */
__device__ __forceinline__ void store_vec(bf16_t* p, const float* in) {
    unsigned int words[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        words[i] = (unsigned int)f32_to_bf16(in[2 * i]) |
                   ((unsigned int)f32_to_bf16(in[2 * i + 1]) << 16);
    }
    *(uint4*)p = make_uint4(words[0], words[1], words[2], words[3]);
}
"#;

/// Token grouping, the gather of each expert's rows, the SwiGLU between the two GEMMs and the
/// weighted combine.
pub const MOE: &str = r#"
#define ROUTE_THREADS 1024
#define MAX_ROUTE_EXPERTS 1024

/* Groups the assignments by expert in one block of ROUTE_THREADS threads (an MoE layer has at
   most a few thousand assignments per step; one block needs no second launch): the histogram,
   its exclusive prefix sum (offsets, with the total appended), and the scatter that gives each
   assignment its row (sorted_assignments, position_of). Within an expert the rows come in the
   order the atomics give; every row's arithmetic is independent of its place. Warp-aggregated
   atomics: the lanes of a warp with the same expert add once. n_experts <= MAX_ROUTE_EXPERTS. */
extern "C" __global__ void moe_route(const int* topk_ids, unsigned int n_assignments,
                                     unsigned int n_experts, unsigned int* counts,
                                     unsigned int* offsets, unsigned int* sorted_assignments,
                                     unsigned int* position_of) {
    __shared__ unsigned int count[MAX_ROUTE_EXPERTS];
    __shared__ unsigned int cursor[MAX_ROUTE_EXPERTS];
    __shared__ unsigned int warp_sum[ROUTE_THREADS / 32];
    unsigned int t = threadIdx.x;
    unsigned int lane = t & 31u;
    unsigned int warp = t >> 5;
    unsigned int below = (1u << lane) - 1u;
    for (unsigned int e = t; e < n_experts; e += ROUTE_THREADS) {
        count[e] = 0u;
    }
    __syncthreads();
    for (unsigned int base = 0; base < n_assignments; base += ROUTE_THREADS) {
        unsigned int a = base + t;
        int e = a < n_assignments ? topk_ids[a] : -1;
        unsigned int peers = __match_any_sync(0xffffffffu, e);
        if (e >= 0 && (peers & below) == 0u) {
            atomicAdd(&count[e], (unsigned int)__popc(peers));
        }
    }
    __syncthreads();
    /* Exclusive scan: thread t owns expert t. */
    unsigned int own = t < n_experts ? count[t] : 0u;
    unsigned int inclusive = own;
#pragma unroll
    for (unsigned int d = 1; d < 32; d <<= 1) {
        unsigned int v = __shfl_up_sync(0xffffffffu, inclusive, d);
        if (lane >= d) {
            inclusive += v;
        }
    }
    if (lane == 31u) {
        warp_sum[warp] = inclusive;
    }
    __syncthreads();
    if (warp == 0u) {
        unsigned int w = warp_sum[lane];
#pragma unroll
        for (unsigned int d = 1; d < 32; d <<= 1) {
            unsigned int v = __shfl_up_sync(0xffffffffu, w, d);
            if (lane >= d) {
                w += v;
            }
        }
        warp_sum[lane] = w;
    }
    __syncthreads();
    unsigned int start = (warp > 0u ? warp_sum[warp - 1u] : 0u) + inclusive - own;
    if (t < n_experts) {
        counts[t] = own;
        offsets[t] = start;
        cursor[t] = start;
    }
    if (t == 0u) {
        offsets[n_experts] = warp_sum[31];
    }
    __syncthreads();
    for (unsigned int base = 0; base < n_assignments; base += ROUTE_THREADS) {
        unsigned int a = base + t;
        int e = a < n_assignments ? topk_ids[a] : -1;
        unsigned int peers = __match_any_sync(0xffffffffu, e);
        unsigned int leader = __ffs(peers) - 1u;
        unsigned int first = 0u;
        if (e >= 0 && lane == leader) {
            first = atomicAdd(&cursor[e], (unsigned int)__popc(peers));
        }
        first = __shfl_sync(0xffffffffu, first, leader);
        if (e >= 0) {
            unsigned int pos = first + (unsigned int)__popc(peers & below);
            sorted_assignments[pos] = a;
            position_of[a] = pos;
        }
    }
}

/* xs[p] = x[sorted_assignments[p] / top_k] for every grouped row p (each expert's rows side by
   side, what its GEMM reads). Grid-stride over rows x chunks of VEC values. */
extern "C" __global__ void moe_gather(const bf16_t* x, const unsigned int* sorted_assignments,
                                      unsigned int rows, unsigned int top_k,
                                      unsigned int hidden, bf16_t* xs) {
    unsigned int chunks = (hidden + VEC - 1) / VEC;
    size_t total = (size_t)rows * chunks;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t p = i / chunks;
        unsigned int c = (unsigned int)(i % chunks) * VEC;
        const bf16_t* src = x + (size_t)(sorted_assignments[p] / top_k) * hidden + c;
        bf16_t* dst = xs + p * hidden + c;
        if (hidden % VEC == 0u) {
            *(uint4*)dst = *(const uint4*)src;
        } else {
            for (unsigned int j = 0; j < VEC && c + j < hidden; ++j) {
                dst[j] = src[j];
            }
        }
    }
}

/* h[p][n] = bf16(silu(g[p][n]) * g[p][ffn + n]): the gate/up GEMM's bf16 output g holds each
   row's gate values, then its up values (the fused w13 layout). */
extern "C" __global__ void moe_swiglu(const bf16_t* g, unsigned int rows, unsigned int ffn,
                                      bf16_t* h) {
    unsigned int chunks = (ffn + VEC - 1) / VEC;
    size_t total = (size_t)rows * chunks;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t p = i / chunks;
        unsigned int c = (unsigned int)(i % chunks) * VEC;
        const bf16_t* gate = g + p * 2 * ffn + c;
        const bf16_t* up = gate + ffn;
        bf16_t* out = h + p * ffn + c;
        if (ffn % VEC == 0u) {
            float gv[VEC];
            float uv[VEC];
            load_vec(gate, gv);
            load_vec(up, uv);
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                gv[j] = gv[j] / (1.0f + expf(-gv[j])) * uv[j];
            }
            store_vec(out, gv);
        } else {
            for (unsigned int j = 0; j < VEC && c + j < ffn; ++j) {
                float gj = bf16_to_f32(gate[j]);
                out[j] = f32_to_bf16(gj / (1.0f + expf(-gj)) * bf16_to_f32(up[j]));
            }
        }
    }
}

/* out[t][c] = bf16(sum_j topk_weights[t][j] * y[position_of[t][j]][c]), y the down GEMM's bf16
   output, the slots summed in order. */
extern "C" __global__ void moe_combine(const bf16_t* y, const float* topk_weights,
                                       const unsigned int* position_of, unsigned int tokens,
                                       unsigned int top_k, unsigned int hidden, bf16_t* out) {
    unsigned int chunks = (hidden + VEC - 1) / VEC;
    size_t total = (size_t)tokens * chunks;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t t = i / chunks;
        unsigned int c = (unsigned int)(i % chunks) * VEC;
        float acc[VEC];
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            acc[j] = 0.0f;
        }
        bool whole = hidden % VEC == 0u;
        for (unsigned int k = 0; k < top_k; ++k) {
            size_t a = t * top_k + k;
            float w = topk_weights[a];
            const bf16_t* row = y + (size_t)position_of[a] * hidden + c;
            if (whole) {
                float v[VEC];
                load_vec(row, v);
#pragma unroll
                for (int j = 0; j < VEC; ++j) {
                    acc[j] += w * v[j];
                }
            } else {
                for (unsigned int j = 0; j < VEC && c + j < hidden; ++j) {
                    acc[j] += w * bf16_to_f32(row[j]);
                }
            }
        }
        bf16_t* dst = out + t * hidden + c;
        if (whole) {
            store_vec(dst, acc);
        } else {
            for (unsigned int j = 0; j < VEC && c + j < hidden; ++j) {
                dst[j] = f32_to_bf16(acc[j]);
            }
        }
    }
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

/// The dense decode step's attention (its GEMM is cuBLAS's).
pub const DECODE: &str = r#"
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
    "moe_route",
    "moe_gather",
    "moe_swiglu",
    "moe_combine",
    "reroute_fused",
    "reroute_broadcast",
    "reroute_offsets",
    "reroute_gather",
    "decode_attention",
];

/// The whole program: every source.
pub fn program() -> String {
    format!("{COMMON}{MOE}{REROUTE}{DECODE}")
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
        let all = program();
        for name in KERNEL_NAMES {
            let definition = format!("__global__ void {name}(");
            assert_eq!(all.matches(&definition).count(), 1, "{name}");
        }
        assert_eq!(all.matches("__global__").count(), KERNEL_NAMES.len());
        assert_eq!(source_hash().len(), 16);
        assert_eq!(source_hash(), source_hash());
    }
}
