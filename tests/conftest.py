import pytest

import dsperf


@pytest.fixture(scope="session")
def v3():
    return dsperf.load_model("DeepSeek-V3")
