// The DLPack ABI (v0.8 "unversioned" DLManagedTensor, the form every producer still accepts),
// declared from the specification so that exporting and importing need no third-party header.
// Plain C layout, no CUDA types: the bindings use it with or without a CUDA build.
#pragma once
#include <cstdint>

namespace dsperf::dlpack {

enum DeviceType : int32_t { kCPU = 1, kCUDA = 2, kCUDAHost = 3, kCUDAManaged = 13 };
enum TypeCode : uint8_t { kInt = 0, kUInt = 1, kFloat = 2, kBfloat = 4, kBool = 6, kFloat8_e4m3fn = 10 };

struct Device {
    int32_t device_type;
    int32_t device_id;
};

struct DataType {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
};

struct Tensor {
    void* data;
    Device device;
    int32_t ndim;
    DataType dtype;
    int64_t* shape;
    int64_t* strides;  // in elements; null means C-contiguous
    uint64_t byte_offset;
};

struct ManagedTensor {
    Tensor dl_tensor;
    void* manager_ctx;
    void (*deleter)(ManagedTensor* self);
};

}  // namespace dsperf::dlpack
