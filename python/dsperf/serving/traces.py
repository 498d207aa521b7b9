"""Request traces: JSONL files (plain or gzip) with one request per line, as Mooncake publishes
them: ``timestamp`` (ms), ``input_length``, ``output_length`` and optional ``hash_ids`` (one id
per prompt block, equal ids meaning equal prefixes). Two are shipped (data/traces/README.md):
``"conversation"`` and ``"synthetic"``."""
from __future__ import annotations

import gzip
import json
import math
import os
from dataclasses import dataclass
from importlib import resources

import numpy as np


SHIPPED = {"conversation": "mooncake_conversation.jsonl.gz", "synthetic": "mooncake_synthetic.jsonl.gz"}
# A request's prompt plus output must fit a C++ int and a rank's KV cache; no real prompt nears this.
MAX_REQUEST_TOKENS = 2 ** 24
MAX_HASH = 2 ** 64 - 1


@dataclass
class Trace:
    """A trace's requests as columns, sorted by arrival (stable: equal timestamps keep file order)."""
    name: str
    arrival_ms: np.ndarray    # float64
    input_len: np.ndarray     # int32
    output_len: np.ndarray    # int32
    hash_offsets: np.ndarray  # int64, len + 1: request i's hashes are hashes[off[i]:off[i+1]]
    hashes: np.ndarray        # uint64

    def __len__(self) -> int:
        return len(self.arrival_ms)

    @property
    def mean_rate(self) -> float:
        """Requests per second over the trace's span."""
        span_s = (self.arrival_ms[-1] - self.arrival_ms[0]) / 1e3 if len(self) > 1 else 0.0
        return (len(self) - 1) / span_s if span_s > 0 else math.inf

    def take(self, index) -> "Trace":
        """The requests at `index` (an index array or slice), in that order."""
        idx = np.arange(len(self))[index]
        starts, ends = self.hash_offsets[idx], self.hash_offsets[idx + 1]
        hashes = np.concatenate([self.hashes[s:e] for s, e in zip(starts, ends)]) if len(idx) else self.hashes[:0]
        offsets = np.concatenate([[0], np.cumsum(ends - starts)]).astype(np.int64)
        return Trace(self.name, self.arrival_ms[idx], self.input_len[idx], self.output_len[idx], offsets,
                     hashes.astype(np.uint64))


def trace_path(trace) -> str:
    """A shipped trace's name, or a path."""
    if isinstance(trace, str) and trace in SHIPPED:
        return str(resources.files("dsperf") / "data" / "traces" / SHIPPED[trace])
    if not isinstance(trace, (str, os.PathLike)):
        raise TypeError(f"trace must be a file path or one of {', '.join(SHIPPED)}, got {trace!r}")
    return os.fspath(trace)


def _int_field(obj, field, path, line, lo, hi):
    v = obj.get(field)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ValueError(f"{path}, line {line}: field '{field}' must be an integer in [{lo}, {hi}], got {v!r}")
    return v


def load_trace(trace) -> Trace:
    """Read a trace file (``.jsonl`` or ``.jsonl.gz``) or a shipped trace by name. A malformed line
    raises ValueError naming the file, the line and the field."""
    path = trace_path(trace)
    opener = gzip.open if path.endswith(".gz") else open
    arrival, inputs, outputs, offsets, hashes = [], [], [], [0], []
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            for line_no, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except ValueError as e:
                    raise ValueError(f"{path}, line {line_no}: not a JSON object ({e})") from None
                if not isinstance(obj, dict):
                    raise ValueError(f"{path}, line {line_no}: not a JSON object")
                ts = obj.get("timestamp")
                if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts) or ts < 0:
                    raise ValueError(f"{path}, line {line_no}: field 'timestamp' must be a finite number >= 0 (ms), "
                                     f"got {ts!r}")
                n_in = _int_field(obj, "input_length", path, line_no, 1, MAX_REQUEST_TOKENS)
                n_out = _int_field(obj, "output_length", path, line_no, 1, MAX_REQUEST_TOKENS)
                h = obj.get("hash_ids", [])
                if not isinstance(h, list) or any(isinstance(x, bool) or not isinstance(x, int) or not 0 <= x <= MAX_HASH
                                                  for x in h):
                    raise ValueError(f"{path}, line {line_no}: field 'hash_ids' must be a list of integers in "
                                     f"[0, 2**64)")
                arrival.append(float(ts))
                inputs.append(n_in)
                outputs.append(n_out)
                hashes.extend(h)
                offsets.append(len(hashes))
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise ValueError(f"trace file {path} cannot be read: {e}") from None
    if not arrival:
        raise ValueError(f"trace file {path} holds no request")
    t = Trace(os.path.basename(path), np.asarray(arrival, dtype=np.float64), np.asarray(inputs, dtype=np.int32),
              np.asarray(outputs, dtype=np.int32), np.asarray(offsets, dtype=np.int64),
              np.asarray(hashes, dtype=np.uint64))
    order = np.argsort(t.arrival_ms, kind="stable")
    if (order != np.arange(len(order))).any():
        t = t.take(order)
    return t


def empty_trace() -> Trace:
    return Trace("", np.zeros(0), np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(1, np.int64),
                 np.zeros(0, np.uint64))
