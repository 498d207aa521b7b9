"""DeviceArray and the exchange protocols: the plumbing that needs no GPU runs everywhere (capsule
structure, a third-party producer's capsule parsed, foreign __cuda_array_interface__ dicts, owner
lifetimes, device-mixing errors); copies to and from a GPU are skipped without one.

Fake device arrays below point at addresses nothing ever reads: every path they take stops at an
argument check before any GPU work."""
import gc
import weakref

import numpy as np
import pytest

from dsperf import cuda
from dsperf import cuda_array as CA
from dsperf.cuda_array import BF16, FP8, DeviceArray

G = cuda._G
OK, WHY = cuda.available()
needs_gpu = pytest.mark.skipif(not OK, reason=f"no usable GPU: {WHY}")
FAKE = 0x7F0000001000  # a device address for arrays whose memory is never touched


class Owner:
    """Stands for the producer that owns some memory."""


def fake(shape, dtype, device=0, owner=None):
    return DeviceArray._wrap(FAKE, shape, dtype, device, owner)


# ---- exporting -----------------------------------------------------------------------------------
def test_cuda_array_interface_v3_describes_the_memory():
    a = fake((3, 4), np.float32, device=1)
    cai = a.__cuda_array_interface__
    assert cai["version"] == 3
    assert cai["shape"] == (3, 4) and cai["typestr"] == "<f4"
    assert cai["data"] == (FAKE, False)
    assert cai["strides"] is None  # C-contiguous
    assert a.__dlpack_device__() == (2, 1)


@pytest.mark.parametrize("dtype, code, bits", [(np.float32, 2, 32), (BF16, 4, 16), (FP8, 10, 8),
                                               (np.int32, 0, 32), (np.int64, 0, 64), (np.uint8, 1, 8)])
def test_dlpack_capsule_round_trips_through_our_importer(dtype, code, bits):
    a = fake((2, 5, 7), dtype, device=3)
    cap = a.__dlpack__()
    info = G.dlpack_import(cap)
    assert info["ptr"] == FAKE and info["shape"] == (2, 5, 7) and info["strides"] is None
    assert (info["code"], info["bits"], info["lanes"]) == (code, bits, 1)
    assert (info["device_type"], info["device_id"]) == (2, 3)
    with pytest.raises(ValueError, match="already consumed"):
        G.dlpack_import(cap)
    b = CA._from_dlpack_info(info, "b")
    assert (b.ptr, b.shape, b.dtype, b.device) == (FAKE, (2, 5, 7), np.dtype(dtype), 3)


def test_dlpack_export_keeps_the_producer_alive_until_the_consumer_is_done():
    owner = Owner()
    w = weakref.ref(owner)
    a = fake((4,), np.float32, owner=owner)
    cap = a.__dlpack__()
    del a, owner
    gc.collect()
    assert w() is not None  # the capsule holds the array, which holds its owner
    info = G.dlpack_import(cap)
    del cap
    gc.collect()
    assert w() is not None  # consumed: the consumer's holder now keeps it
    del info
    gc.collect()
    assert w() is None  # the holder called the deleter


def test_an_unconsumed_capsule_releases_the_producer():
    owner = Owner()
    w = weakref.ref(owner)
    cap = fake((4,), np.float32, owner=owner).__dlpack__()
    del owner
    gc.collect()
    assert w() is not None
    del cap
    gc.collect()
    assert w() is None


def test_dlpack_export_refuses_copies_and_other_devices():
    a = fake((4,), np.float32, device=0)
    with pytest.raises(BufferError, match="copy"):
        a.__dlpack__(copy=True)
    with pytest.raises(BufferError, match="CUDA device 0"):
        a.__dlpack__(dl_device=(1, 0))


def test_reshape_and_view_share_the_memory():
    a = fake((4, 6), BF16)
    b = a.reshape(3, -1)
    assert b.shape == (3, 8) and b.ptr == a.ptr and b.dtype == BF16
    assert a.view(np.uint16).dtype == np.uint16
    with pytest.raises(ValueError, match="cannot reshape"):
        a.reshape(5, 5)
    with pytest.raises(ValueError, match="2 bytes"):
        a.view(np.float32)


def test_set_checks_before_copying():
    a = fake((3,), np.float32)
    with pytest.raises(ValueError, match="float32 \\(3,\\)"):
        a.set(np.zeros((2, 2), np.float32))
    with pytest.raises(TypeError, match="numpy array"):
        a.set([1.0, 2.0, 3.0])


# ---- importing -----------------------------------------------------------------------------------
def test_a_third_party_dlpack_capsule_parses():
    # numpy is a real DLPack producer (CPU memory): our reading of its struct must match its fields.
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    info = G.dlpack_import(a.__dlpack__())
    assert info["ptr"] == a.ctypes.data
    assert info["shape"] == (3, 4)
    assert info["strides"] in (None, (4, 1))
    assert (info["code"], info["bits"], info["lanes"]) == (0, 32, 1)
    assert info["device_type"] == 1  # kDLCPU


def test_a_cpu_dlpack_producer_is_not_a_gpu_array():
    class CpuTensor:
        def __init__(self):
            self.a = np.zeros(3, np.float32)

        def __dlpack__(self, stream=None):
            return self.a.__dlpack__()

        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(TypeError, match="x lives on the CPU"):
        cuda.as_device_array(CpuTensor(), "x")


class ForeignDlpack:
    """A framework tensor on GPU 1 (a torch.Tensor in spirit), FP8, exported with our exporter."""

    def __init__(self, device=1):
        self.device = device
        self.calls = []

    def __dlpack__(self, stream=None):
        self.calls.append(stream)
        return G.dlpack_export(FAKE + 256, [8, 128], 10, 8, 2, self.device, self)

    def __dlpack_device__(self):
        return (2, self.device)


def test_a_foreign_dlpack_gpu_tensor_comes_in_without_a_copy():
    t = ForeignDlpack()
    d = cuda.as_device_array(t, "w")
    assert (d.ptr, d.shape, d.dtype, d.device) == (FAKE + 256, (8, 128), FP8, 1)
    assert t.calls == [1]  # asked for the legacy default stream, where the kernels run


class TorchLikeFp8(ForeignDlpack):
    """Offers both protocols, as a torch.Tensor does: its __cuda_array_interface__ can only call
    an FP8 tensor '<V1' (no dtype), its DLPack capsule names it."""

    def __init__(self):
        super().__init__()
        self.__cuda_array_interface__ = dict(shape=(8, 128), typestr="<V1", data=(FAKE + 256, False),
                                             version=3, strides=None, stream=None)


def test_a_tensor_offering_both_protocols_comes_through_dlpack_where_the_interface_names_no_dtype():
    t = TorchLikeFp8()
    d = cuda.as_device_array(t, "w")
    assert (d.ptr, d.shape, d.dtype, d.device) == (FAKE + 256, (8, 128), FP8, 1)
    assert t.calls == [1]


class ForeignCai:
    def __init__(self, **changes):
        self.__cuda_array_interface__ = dict(shape=(4, 3), typestr="<f4", data=(FAKE, False), version=3,
                                             strides=None, stream=None)
        self.__cuda_array_interface__.update(changes)


def test_a_foreign_cuda_array_interface_comes_in_without_a_copy():
    obj = ForeignCai()
    d = cuda.from_cuda_array_interface(obj, "y", device=0)
    assert (d.ptr, d.shape, d.dtype, d.device) == (FAKE, (4, 3), np.float32, 0)
    # Explicit C-contiguous strides are fine too.
    d = cuda.from_cuda_array_interface(ForeignCai(strides=(12, 4)), "y", device=0)
    assert d.shape == (4, 3)


@pytest.mark.parametrize("changes, err, match", [
    (dict(strides=(4, 16)), ValueError, "y must be C-contiguous"),
    (dict(typestr="<V2"), TypeError, "DLPack"),
    (dict(mask=object()), ValueError, "masked"),
    (dict(typestr="<c16"), TypeError, "not supported"),
])
def test_bad_foreign_cuda_array_interfaces_are_named(changes, err, match):
    with pytest.raises(err, match=match):
        cuda.from_cuda_array_interface(ForeignCai(**changes), "y", device=0)


@pytest.mark.skipif(OK, reason="a GPU is present")
def test_without_a_gpu_a_foreign_address_cannot_be_placed():
    with pytest.raises(TypeError, match="does not know the address"):
        cuda.as_device_array(ForeignCai(), "y")


# ---- mixing host and device arrays in kernel calls -----------------------------------------------
def test_mixing_host_and_gpu_arrays_names_the_argument():
    x = fake((2, 8), np.float32)
    with pytest.raises(TypeError, match="weight is a numpy \\(host\\) array but x lives on GPU 0"):
        cuda.rmsnorm(x, np.ones(8, np.float32))
    with pytest.raises(TypeError, match="x is a numpy \\(host\\) array but weight lives on GPU 0"):
        cuda.rmsnorm(np.ones((2, 8), np.float32), fake((8,), np.float32))


def test_gpu_arrays_on_two_devices_are_refused():
    with pytest.raises(ValueError, match="x lives on GPU 0 but weight on GPU 1"):
        cuda.rmsnorm(fake((2, 8), np.float32, 0), fake((8,), np.float32, 1))


def test_foreign_gpu_arrays_mix_with_device_arrays():
    # A DLPack tensor on GPU 1 beside a DeviceArray on GPU 0: the device clash is found, which
    # shows the foreign tensor was taken as a GPU array.
    with pytest.raises(ValueError, match="on GPU 1"):
        cuda.grouped_gemm(fake((4, 128), FP8, 0), ForeignDlpack(1), offsets=fake((2,), np.int64, 0))


@pytest.mark.parametrize("call, err, match", [
    (lambda: cuda.rmsnorm([[1.0]], np.ones(1, np.float32)), TypeError, "x must be a numpy array or a GPU array"),
    (lambda: cuda.rmsnorm(fake((2, 8), np.float64), fake((8,), np.float32)), TypeError, "x must have dtype float32"),
    (lambda: cuda.rmsnorm(fake((2, 8), np.float32), fake((7,), np.float32)), ValueError, "weight"),
    (lambda: cuda.moe_permute(fake((3, 8), BF16), fake((2,), np.int64)), TypeError, "source must have dtype int32"),
    (lambda: cuda.grouped_gemm(fake((4, 128), BF16), fake((2, 64, 128), FP8), offsets=fake((3,), np.int64)),
     ValueError, "b_scale"),
    (lambda: cuda.grouped_gemm(fake((4, 128), BF16), fake((2, 64, 128), BF16), offsets=fake((2,), np.int64)),
     ValueError, "offsets must have experts \\+ 1 = 3"),
    (lambda: cuda.grouped_gemm(fake((2, 8, 128), BF16), fake((2, 64, 96), BF16), counts=fake((2,), np.int32)),
     ValueError, "K = 96"),
    (lambda: cuda.grouped_gemm(fake((4, 128), FP8), fake((2, 64, 128), BF16), offsets=fake((3,), np.int64),
                               a_scale=fake((4, 1), np.float32)), TypeError, "FP8 a needs FP8 b"),
    (lambda: cuda.grouped_gemm(fake((4, 128), FP8), fake((2, 64, 128), FP8), offsets=fake((3,), np.int64),
                               a_scale=fake((4, 2), np.float32), b_scale=fake((2, 1, 1), np.float32)),
     ValueError, "a_scale must have shape \\(4, 1\\)"),
    (lambda: cuda.grouped_gemm(fake((4, 128), BF16), fake((2, 64, 128), BF16), offsets=fake((3,), np.int64),
                               out=fake((4, 65), np.float32)), ValueError, "out must be float32 \\(4, 64\\)"),
    (lambda: cuda.grouped_gemm(fake((4, 128), BF16), fake((2, 64, 128), BF16), offsets=fake((3,), np.int64),
                               out=fake((4, 64), np.float32, device=1)), ValueError, "out lives on GPU 1"),
    (lambda: cuda.grouped_gemm(np.ones((4, 128), BF16), np.ones((2, 64, 128), BF16), offsets=np.array([0, 2, 4]),
                               out=fake((4, 64), np.float32)), TypeError, "GPU arrays only"),
])
def test_device_arrays_are_checked_like_host_arrays(call, err, match):
    with pytest.raises(err, match=match):
        call()


# ---- real GPU memory -----------------------------------------------------------------------------
@needs_gpu
@pytest.mark.parametrize("dtype", [np.float32, BF16, FP8, np.int32])
def test_device_array_round_trip(dtype):
    a = (np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 7).astype(dtype)
    d = DeviceArray.from_numpy(a)
    assert d.shape == a.shape and d.dtype == a.dtype and d.device == 0
    np.testing.assert_array_equal(d.numpy().view(np.uint8), a.view(np.uint8))
    np.testing.assert_array_equal(d.copy().numpy().view(np.uint8), a.view(np.uint8))
    z = DeviceArray.zeros((5,), np.float32)
    np.testing.assert_array_equal(z.numpy(), np.zeros(5, np.float32))


@needs_gpu
def test_device_array_knows_its_device_through_cuda():
    d = DeviceArray.from_numpy(np.ones(4, np.float32))
    assert G.pointer_device(d.ptr) == 0
    view = cuda.from_cuda_array_interface(d, "d")  # device asked from CUDA
    assert view.ptr == d.ptr and view.device == 0


@needs_gpu
def test_torch_tensors_in_and_out_without_copies():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    t = torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4)
    d = cuda.as_device_array(t, "t")
    assert d.ptr == t.data_ptr() and d.shape == (3, 4)
    b = torch.ones(2, 64, dtype=torch.bfloat16, device="cuda")
    db = cuda.as_device_array(b, "b")  # DLPack: BF16 goes this way
    assert db.dtype == BF16 and db.ptr == b.data_ptr()
    back = torch.from_dlpack(DeviceArray.from_numpy(np.arange(6, dtype=np.float32)))
    assert back.device.type == "cuda" and back.cpu().tolist() == list(range(6))
    y = cuda.rmsnorm(t, torch.ones(4, device="cuda"))
    assert isinstance(y, DeviceArray)
