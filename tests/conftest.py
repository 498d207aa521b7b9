import pytest

import dsperf


@pytest.fixture(scope="session")
def v3():
    return dsperf.load_model("DeepSeek-V3")


# The switches that pick a CUDA kernel: a test sets the ones it means, so that a shell's setting
# (a device run's DSPERF_CUDA_WGMMA=1, say) cannot change which kernel another test checks.
from dsperf.cuda._base import KERNEL_SWITCHES  # noqa: E402 - declared once, beside the kernels


@pytest.fixture(autouse=True)
def _no_kernel_switches_from_the_shell(monkeypatch):
    for name in KERNEL_SWITCHES:
        monkeypatch.delenv(name, raising=False)
