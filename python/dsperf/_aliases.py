"""The modules' former flat names, kept importable: `import dsperf.harness`, `from dsperf import
kernel_cost` and the like give the very module object of the new home (so a patch of an attribute
reaches the one module). New code imports the new homes."""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

FORMER_NAMES = {
    "dsperf.hardware": "dsperf.model.devices",
    "dsperf.costmodel": "dsperf.seed.formulas",   # the seed's formulas (dsperf.decode & co.: dsperf.model.api)
    "dsperf.model.seed": "dsperf.seed.formulas",
    "dsperf.tables": "dsperf.seed.tables",
    "dsperf.model.tables": "dsperf.seed.tables",
    "dsperf.deviations": "dsperf.seed.deviations",
    "dsperf.model.deviations": "dsperf.seed.deviations",
    "dsperf.compare": "dsperf.seed.compare",
    "dsperf.model.compare": "dsperf.seed.compare",
    "dsperf.grounded": "dsperf.model.grounded",
    "dsperf.validation": "dsperf.model.validation",
    "dsperf.explore": "dsperf.model.explore",
    "dsperf.kernel_cost": "dsperf.predict.kernel_cost",
    "dsperf.harness": "dsperf.predict.harness",
    "dsperf.sweeps": "dsperf.predict.sweeps",
    "dsperf.calibrate": "dsperf.predict.calibrate",
    "dsperf.plots": "dsperf.predict.plots",
    "dsperf.report": "dsperf.predict.report",
    "dsperf.report_ep": "dsperf.predict.report_ep",
    "dsperf.cuda_array": "dsperf.cuda.arrays",
    "dsperf.cuda_nccl": "dsperf.cuda.nccl",
}


class _FormerNameFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        return importlib.util.spec_from_loader(fullname, self) if fullname in FORMER_NAMES else None

    def create_module(self, spec):
        return importlib.import_module(FORMER_NAMES[spec.name])

    def exec_module(self, module):
        pass  # already executed under its new name


def install() -> None:
    if not any(isinstance(f, _FormerNameFinder) for f in sys.meta_path):
        sys.meta_path.append(_FormerNameFinder())
