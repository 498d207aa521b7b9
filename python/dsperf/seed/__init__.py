"""The seed analysis: DeepSeek-V3/R1's analytical cost model as its source document wrote it, in
its two modes (as_published: its arithmetic, quirks included; corrected: each quirk fixed by a named
Fix, docs/DEVIATIONS.md). C++ core: csrc/seed.

formulas    its formulas as DataFrames (prefill, prefill_mla, decode, decode_sweep, batch limits,
            parameter and FLOP tables)
tables      its printed tables, in its order, layout and precision (`dsperf tables`)
deviations  each fix's effect on the headline figures
compare     the model beside DeepSeek's published per-node throughput (`dsperf compare`)

The grounded, kernel-by-kernel model lives in dsperf.model (grounded, validation, explorer); the
public dsperf.decode / prefill / decode_sweep pick either model by mode (dsperf.model.api)."""
