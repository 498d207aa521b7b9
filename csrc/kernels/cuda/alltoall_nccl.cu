// All-to-all across GPUs with NCCL's grouped point-to-point calls (ncclSend / ncclRecv between
// ncclGroupStart and ncclGroupEnd), the way expert-parallel dispatch and combine move tokens.
//
// libnccl is loaded at run time (dlopen) so the module imports on machines without it; the
// header supplies the types. Every transfer is bytes (ncclInt8): rows of any dtype.
#include <dlfcn.h>

#include <algorithm>
#include <mutex>

#include "kernels/cuda/cuda_api.hpp"
#include "kernels/cuda/cuda_common.cuh"

#if !__has_include(<nccl.h>)
// A toolkit without NCCL's header: the exchanges exist and say why they cannot run.
namespace dsperf::cuda {
namespace {
const char* kNoNccl = "dsperf was built without nccl.h (NCCL's header was not found at build time)";
}
bool nccl_available(std::string* why) {
    if (why) *why = kNoNccl;
    return false;
}
std::string nccl_unique_id() { throw std::runtime_error(kNoNccl); }
uintptr_t nccl_init_rank(const std::string&, int, int, int) { throw std::runtime_error(kNoNccl); }
std::vector<uintptr_t> nccl_init_all(const std::vector<int>&) { throw std::runtime_error(kNoNccl); }
void nccl_destroy(uintptr_t) { throw std::runtime_error(kNoNccl); }
void nccl_alltoallv(const std::vector<AllToAllPart>&, int64_t) { throw std::runtime_error(kNoNccl); }
}  // namespace dsperf::cuda
#else
#include <nccl.h>

namespace dsperf::cuda {
namespace {

struct Nccl {
    void* lib = nullptr;
    std::string why;
    decltype(&ncclGetUniqueId) get_unique_id = nullptr;
    decltype(&ncclCommInitRank) init_rank = nullptr;
    decltype(&ncclCommInitAll) init_all = nullptr;
    decltype(&ncclCommDestroy) destroy = nullptr;
    decltype(&ncclGroupStart) group_start = nullptr;
    decltype(&ncclGroupEnd) group_end = nullptr;
    decltype(&ncclSend) send = nullptr;
    decltype(&ncclRecv) recv = nullptr;
    decltype(&ncclGetErrorString) error_string = nullptr;
};

template <typename F>
void load(Nccl& n, F& fn, const char* name) {
    fn = reinterpret_cast<F>(dlsym(n.lib, name));
    if (!fn && n.why.empty()) n.why = std::string("libnccl lacks ") + name;
}

Nccl& nccl() {
    static Nccl n;
    static std::once_flag once;
    std::call_once(once, [] {
        for (const char* name : {"libnccl.so.2", "libnccl.so"}) {
            n.lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
            if (n.lib) break;
        }
        if (!n.lib) {
            n.why = "libnccl could not be loaded (dlopen libnccl.so.2 / libnccl.so failed)";
            return;
        }
        load(n, n.get_unique_id, "ncclGetUniqueId");
        load(n, n.init_rank, "ncclCommInitRank");
        load(n, n.init_all, "ncclCommInitAll");
        load(n, n.destroy, "ncclCommDestroy");
        load(n, n.group_start, "ncclGroupStart");
        load(n, n.group_end, "ncclGroupEnd");
        load(n, n.send, "ncclSend");
        load(n, n.recv, "ncclRecv");
        load(n, n.error_string, "ncclGetErrorString");
    });
    return n;
}

Nccl& need_nccl() {
    Nccl& n = nccl();
    if (!n.why.empty()) throw std::runtime_error(n.why);
    return n;
}

void check_nccl(ncclResult_t r, const char* what) {
    if (r != ncclSuccess)
        throw std::runtime_error(std::string("NCCL ") + what + ": " +
                                 (nccl().error_string ? nccl().error_string(r) : "?"));
}

// Restores the caller's current device on scope exit.
struct DeviceGuard {
    int saved = 0;
    DeviceGuard() { check(cudaGetDevice(&saved), "cudaGetDevice"); }
    ~DeviceGuard() { cudaSetDevice(saved); }
};

}  // namespace

bool nccl_available(std::string* why) {
    Nccl& n = nccl();
    if (why) *why = n.why;
    return n.why.empty();
}

std::string nccl_unique_id() {
    Nccl& n = need_nccl();
    ncclUniqueId id;
    check_nccl(n.get_unique_id(&id), "ncclGetUniqueId");
    return std::string(id.internal, sizeof id.internal);
}

uintptr_t nccl_init_rank(const std::string& unique_id, int nranks, int rank, int device) {
    if (unique_id.size() != sizeof(ncclUniqueId))
        throw std::invalid_argument("unique_id must hold " + std::to_string(sizeof(ncclUniqueId)) + " bytes, got " +
                                    std::to_string(unique_id.size()));
    if (nranks < 1 || rank < 0 || rank >= nranks)
        throw std::invalid_argument("rank must lie in [0, nranks), got rank " + std::to_string(rank) + " of " +
                                    std::to_string(nranks));
    Nccl& n = need_nccl();
    ncclUniqueId id;
    std::copy(unique_id.begin(), unique_id.end(), id.internal);
    DeviceGuard guard;
    set_device(device);
    ncclComm_t comm = nullptr;
    check_nccl(n.init_rank(&comm, nranks, id, rank), "ncclCommInitRank");
    return reinterpret_cast<uintptr_t>(comm);
}

std::vector<uintptr_t> nccl_init_all(const std::vector<int>& devices) {
    if (devices.empty()) throw std::invalid_argument("devices must not be empty");
    for (int d : devices)
        if (d < 0 || d >= device_count())
            throw std::invalid_argument("device " + std::to_string(d) + " is outside the " +
                                        std::to_string(device_count()) + " GPUs CUDA sees");
    Nccl& n = need_nccl();
    std::vector<ncclComm_t> comms(devices.size());
    check_nccl(n.init_all(comms.data(), int(devices.size()), devices.data()), "ncclCommInitAll");
    std::vector<uintptr_t> out;
    for (ncclComm_t c : comms) out.push_back(reinterpret_cast<uintptr_t>(c));
    return out;
}

void nccl_destroy(uintptr_t comm) {
    if (comm) check_nccl(need_nccl().destroy(reinterpret_cast<ncclComm_t>(comm)), "ncclCommDestroy");
}

void nccl_alltoallv(const std::vector<AllToAllPart>& parts, int64_t row_bytes) {
    if (row_bytes < 1) throw std::invalid_argument("row_bytes must be positive");
    if (parts.empty()) throw std::invalid_argument("nccl_alltoallv: no parts");
    const size_t nranks = parts[0].send_counts.size();
    for (size_t i = 0; i < parts.size(); ++i) {
        const AllToAllPart& p = parts[i];
        const std::string at = "part " + std::to_string(i) + ": ";
        if (!p.comm) throw std::invalid_argument(at + "no communicator");
        if (p.send_counts.size() != nranks || p.send_offsets.size() != nranks || p.recv_counts.size() != nranks ||
            p.recv_offsets.size() != nranks)
            throw std::invalid_argument(at + "counts and offsets need one entry per rank (" + std::to_string(nranks) +
                                        ")");
        for (size_t r = 0; r < nranks; ++r)
            if (p.send_counts[r] < 0 || p.recv_counts[r] < 0 || p.send_offsets[r] < 0 || p.recv_offsets[r] < 0)
                throw std::invalid_argument(at + "counts and offsets must be >= 0 (peer " + std::to_string(r) + ")");
    }
    Nccl& n = need_nccl();
    DeviceGuard guard;
    check_nccl(n.group_start(), "ncclGroupStart");
    try {
        for (const AllToAllPart& p : parts) {
            check(cudaSetDevice(p.device), "cudaSetDevice");
            const auto* send = static_cast<const char*>(p.send);
            auto* recv = static_cast<char*>(p.recv);
            auto comm = reinterpret_cast<ncclComm_t>(p.comm);
            for (size_t r = 0; r < nranks; ++r) {
                // Zero-byte transfers are skipped on both sides: the counts agree by construction
                // (each side's counts are the other's), so the pairs still match.
                if (p.send_counts[r])
                    check_nccl(n.send(send + p.send_offsets[r] * row_bytes, size_t(p.send_counts[r] * row_bytes),
                                      ncclInt8, int(r), comm, nullptr),
                               "ncclSend");
                if (p.recv_counts[r])
                    check_nccl(n.recv(recv + p.recv_offsets[r] * row_bytes, size_t(p.recv_counts[r] * row_bytes),
                                      ncclInt8, int(r), comm, nullptr),
                               "ncclRecv");
            }
        }
    } catch (...) {
        n.group_end();
        throw;
    }
    check_nccl(n.group_end(), "ncclGroupEnd");
    if (synchronous_launches())
        for (const AllToAllPart& p : parts) {
            check(cudaSetDevice(p.device), "cudaSetDevice");
            check(cudaDeviceSynchronize(), "all-to-all");
        }
}

}  // namespace dsperf::cuda
#endif  // nccl.h
