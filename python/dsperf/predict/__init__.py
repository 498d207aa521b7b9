"""dsperf.predict: the kernel cost model, predicted against measured on this machine.

kernel_cost  kernel points -> parts -> predicted ms (the families of dsperf.ops)
harness      timing of each family's call; sweeps: the calibration and report sweeps
calibrate    `dsperf calibrate`: probes, fit, the device file
fit          efficiency fit, predicted-vs-measured frame, error summary (re-exported here)
plots        figures; report, report_ep: `dsperf report`
"""
from .fit import (COMPUTE_GRID, EFFICIENCY_CAP, MEMORY_GRID, OVERHEAD_GRID_US, efficiencies_table,  # noqa: F401
                  error_summary, fit_efficiencies, points_of, predict_frame)
