"""The explorer's default price table (data/prices.csv): every row names a shipped device and
carries a basis and a source, a broken file is refused naming its row, and the explorer charges
the table's price unless the caller gives one."""
import math

import pytest

from dsperf import explore
from dsperf.model import prices
from dsperf.model.devices import list_devices


def test_every_row_is_a_shipped_device_with_a_source():
    shipped = set(list_devices())
    assert prices.PRICES, "the price table is empty"
    for device, p in prices.PRICES.items():
        assert device in shipped, f"{device} in prices.csv has no device file"
        assert p.usd_per_gpu_hour > 0 and p.basis and p.source
        # A figure without a public source says so.
        assert ("assumed" == p.basis) == ("no public" in p.source), device


@pytest.mark.parametrize("body, fragment", [
    ("H100,-1,hyperscaler tier,somewhere\n", "usd_per_gpu_hour must be positive"),
    ("H100,abc,hyperscaler tier,somewhere\n", "usd_per_gpu_hour must be a number"),
    ("H100,1.0,,somewhere\n", "basis and source"),
    ("H100,1.0,assumed,x\nH100,2.0,assumed,y\n", "device must be given once"),
])
def test_a_broken_table_is_refused_naming_the_row(tmp_path, body, fragment):
    path = tmp_path / "prices.csv"
    path.write_text("# comment\ndevice,usd_per_gpu_hour,basis,source\n" + body)
    with pytest.raises(ValueError, match=fragment) as e:
        prices.load_prices(path)
    assert "row" in str(e.value)


def test_the_explorer_charges_the_table_unless_given_a_price():
    kw = dict(devices=("H100", "H800"), batch=(64.0,), ep=(8,), attn_tp=(1,), mtp=((0, 0.0),))
    table = explore.search(**kw)
    feasible = table[table["feasible"]]
    for device, rows in feasible.groupby("device"):
        usd = prices.PRICES[str(device)].usd_per_gpu_hour
        assert (rows["gpu_hour_usd"] == usd).all()
        expect = usd / 3600 / rows["tokens_per_gpu_s_served"] * 1e6
        assert ((rows["cost_per_m_output_usd"] - expect).abs() <= 1e-12 * expect).all()
    given = explore.search(**kw, gpu_hour_usd=3.0)
    assert (given.loc[given["feasible"], "gpu_hour_usd"] == 3.0).all()
    # A device without a row gets no cost, not a guess.
    no_row = explore.search(**{**kw, "devices": ("Ascend910C",)})
    assert no_row["gpu_hour_usd"].map(math.isnan).all()
