// Host-link copy times on one GPU: the link swapped-out KV blocks cross (docs/cost-model.md,
// "Links"). Measures cudaMemcpyAsync between page-locked host memory and device memory, each
// direction alone and both at once (two streams), and pageable host memory for reference, from
// 64 KiB to 1 GiB; each size is timed `REPS` times with CUDA events after a warm-up and the
// median, least and most are written as CSV on stdout.
//
//   nvcc -O2 -o host_link_bandwidth scripts/host_link_bandwidth.cu
//   ./host_link_bandwidth > profiles/measured/host-link/<gpu>.csv
//
// The CSV's columns: direction (h2d, d2h, both: bytes each way), host (pinned, pageable), bytes
// (per direction), median_us, min_us, max_us, reps. `cost::host_link::fit_copy_times` fits
// latency + bytes / bandwidth to it; a test holds `LinkSpec::PCIE5_X16` to the H200's file.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CHECK(call)                                                                      \
    do {                                                                                 \
        cudaError_t err_ = (call);                                                       \
        if (err_ != cudaSuccess) {                                                       \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                \
                    cudaGetErrorString(err_));                                           \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

static const int REPS = 15;

struct Stats {
    double median_us, min_us, max_us;
};

static Stats summarize(std::vector<float> ms) {
    std::sort(ms.begin(), ms.end());
    Stats s;
    s.median_us = 1000.0 * ms[ms.size() / 2];
    s.min_us = 1000.0 * ms.front();
    s.max_us = 1000.0 * ms.back();
    return s;
}

// Times one copy of `bytes` host->device (h2d), device->host (d2h) or both at once on two streams.
static Stats time_copies(const char *direction, char *host_a, char *host_b, char *dev_a, char *dev_b,
                         size_t bytes, cudaStream_t s0, cudaStream_t s1) {
    cudaEvent_t start, stop, joined;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    CHECK(cudaEventCreate(&joined));
    std::vector<float> ms;
    for (int rep = -2; rep < REPS; ++rep) {  // two warm-up copies, not kept
        CHECK(cudaEventRecord(start, s0));
        CHECK(cudaStreamWaitEvent(s1, start, 0));
        if (!strcmp(direction, "h2d") || !strcmp(direction, "both"))
            CHECK(cudaMemcpyAsync(dev_a, host_a, bytes, cudaMemcpyHostToDevice, s0));
        if (!strcmp(direction, "d2h"))
            CHECK(cudaMemcpyAsync(host_b, dev_b, bytes, cudaMemcpyDeviceToHost, s0));
        if (!strcmp(direction, "both")) {
            CHECK(cudaMemcpyAsync(host_b, dev_b, bytes, cudaMemcpyDeviceToHost, s1));
            CHECK(cudaEventRecord(joined, s1));
            CHECK(cudaStreamWaitEvent(s0, joined, 0));
        }
        CHECK(cudaEventRecord(stop, s0));
        CHECK(cudaEventSynchronize(stop));
        float t = 0;
        CHECK(cudaEventElapsedTime(&t, start, stop));
        if (rep >= 0) ms.push_back(t);
    }
    CHECK(cudaEventDestroy(start));
    CHECK(cudaEventDestroy(stop));
    CHECK(cudaEventDestroy(joined));
    return summarize(ms);
}

int main() {
    const size_t max_bytes = size_t(1) << 30;
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    fprintf(stderr, "device: %s, PCI %04x:%02x:%02x\n", prop.name, prop.pciDomainID, prop.pciBusID,
            prop.pciDeviceID);

    char *pinned_a, *pinned_b, *dev_a, *dev_b;
    CHECK(cudaMallocHost(&pinned_a, max_bytes));
    CHECK(cudaMallocHost(&pinned_b, max_bytes));
    char *pageable_a = static_cast<char *>(malloc(max_bytes));
    char *pageable_b = static_cast<char *>(malloc(max_bytes));
    if (!pageable_a || !pageable_b) {
        fprintf(stderr, "malloc of %zu bytes failed\n", max_bytes);
        return 1;
    }
    CHECK(cudaMalloc(&dev_a, max_bytes));
    CHECK(cudaMalloc(&dev_b, max_bytes));
    // Non-zero contents everywhere (a copy's time should not depend on them, but nothing is
    // timed on zeros).
    for (size_t i = 0; i < max_bytes; ++i) {
        char v = char((i * 2654435761u) >> 13);
        pinned_a[i] = v;
        pinned_b[i] = v ^ 0x5a;
        pageable_a[i] = v;
        pageable_b[i] = v ^ 0x3c;
    }
    CHECK(cudaMemcpy(dev_a, pinned_a, max_bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dev_b, pinned_b, max_bytes, cudaMemcpyHostToDevice));
    cudaStream_t s0, s1;
    CHECK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));

    printf("direction,host,bytes,median_us,min_us,max_us,reps\n");
    const char *directions[] = {"h2d", "d2h", "both"};
    for (size_t bytes = size_t(64) << 10; bytes <= max_bytes; bytes *= 4) {
        for (const char *direction : directions) {
            Stats s = time_copies(direction, pinned_a, pinned_b, dev_a, dev_b, bytes, s0, s1);
            printf("%s,pinned,%zu,%.3f,%.3f,%.3f,%d\n", direction, bytes, s.median_us, s.min_us,
                   s.max_us, REPS);
        }
        for (int d = 0; d < 2; ++d) {
            Stats s = time_copies(directions[d], pageable_a, pageable_b, dev_a, dev_b, bytes, s0, s1);
            printf("%s,pageable,%zu,%.3f,%.3f,%.3f,%d\n", directions[d], bytes, s.median_us,
                   s.min_us, s.max_us, REPS);
        }
        fflush(stdout);
    }
    // The copies landed: the first and last bytes of the last h2d copy are the host's.
    char check[2];
    CHECK(cudaMemcpy(&check[0], dev_a, 1, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&check[1], dev_a + max_bytes - 1, 1, cudaMemcpyDeviceToHost));
    if (check[0] != pageable_a[0] || check[1] != pageable_a[max_bytes - 1]) {
        fprintf(stderr, "copy check failed\n");
        return 1;
    }
    fprintf(stderr, "copy check passed\n");
    return 0;
}
