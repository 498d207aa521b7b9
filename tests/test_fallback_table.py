"""A device file's `fallback_table`: the families its own kernel table lacks are read from a sibling's
table through the device's roofline (the H20's InferSim table has no BF16 GEMM and no prefill
attention; both come from the H800 table, as H100 and H200 read all of it)."""
import pytest

from dsperf.model import devices, grounded


def _calls(result):
    return {c["kernel"]: c for c in result["calls"]}


def _h20_file(tmp_path, fallback_line):
    text = devices.shipped_device_file("H20").read_text().replace('fallback_table = "H800"\n', fallback_line)
    path = tmp_path / "H20-variant.toml"
    path.write_text(text.replace('name = "H20"', 'name = "H20-variant"'))
    return str(path)


def test_h20_prices_its_missing_families_from_the_h800_rows(tmp_path):
    pre = _calls(grounded.prefill(device="H20", tokens=8192, prompt_len=2048, ep=16))
    dec = _calls(grounded.decode(device="H20", batch=32, kv_len=4096, ep=16))
    assert pre["attention_core"]["from_table"] and dec["q_absorb_w_uk"]["from_table"]
    # Without the field the same calls run at the flat default efficiency.
    bare = _h20_file(tmp_path, "")
    pre0 = _calls(grounded.prefill(device=bare, tokens=8192, prompt_len=2048, ep=16))
    dec0 = _calls(grounded.decode(device=bare, batch=32, kv_len=4096, ep=16))
    assert not pre0["attention_core"]["from_table"] and not dec0["q_absorb_w_uk"]["from_table"]
    assert pre0["attention_core"]["efficiency"] == pytest.approx(grounded.DEFAULT_EFFICIENCY)
    # The H20's own rows still price the families it has (its FP8 GEMMs are not the H800's).
    assert pre["wq_a"]["us"] == pytest.approx(pre0["wq_a"]["us"])


@pytest.mark.parametrize("value", ['"H999"', "3", '"H20.csv"'])
def test_a_fallback_table_must_be_a_shipped_table(tmp_path, value):
    bad = _h20_file(tmp_path, f"fallback_table = {value}\n")
    with pytest.raises(ValueError, match="fallback_table"):
        grounded.decode(device=bad, batch=32, kv_len=4096, ep=16)
