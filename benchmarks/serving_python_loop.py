"""The serving simulation as a plain-Python event loop: the baseline of bench_simulate.py.

The same roles and rules as csrc/serving (router -> per-rank continuous batching with a token
budget, chunked prefill, KV blocks with an LRU prefix cache and recompute preemption -> lock-stepped
EP groups -> KV hand-off between a prefill and a decode pool), written the way one would in Python,
with one difference in its favour: each rank's step time comes from the C++ step pricer's cached
table (dsperf._C.serving.StepPricer), the table the C++ run uses, not from Python.
"""
from __future__ import annotations

import heapq
from collections import OrderedDict, deque

WAITING, PREFILLING, DECODING, TRANSFERRING, DONE = range(5)


class Rank:
    def __init__(self, blocks, block_tokens, budget, max_running):
        self.free = blocks
        self.block = block_tokens
        self.budget = budget
        self.max_running = max_running
        self.waiting = deque()
        self.running = []
        self.cache = {}           # hash -> references
        self.lru = OrderedDict()  # unreferenced hashes, oldest first

    def blocks_for(self, tokens):
        return -(-tokens // self.block)

    def available(self):
        return self.free + len(self.lru)

    def alloc(self, n):
        if n > self.available():
            return False
        while self.free < n:
            h, _ = self.lru.popitem(last=False)
            del self.cache[h]
            self.free += 1
        self.free -= n
        return True

    def match(self, hashes):
        n = 0
        for h in hashes:
            if h not in self.cache:
                break
            n += 1
        return n

    def unref(self, req):
        for h in req["held"]:
            self.cache[h] -= 1
            if self.cache[h] == 0:
                self.lru[h] = None
        req["held"] = []

    def release(self, req):
        self.unref(req)
        self.free += req["blocks"]
        req["blocks"] = 0

    def admit(self, req):
        matched = 0
        if req["computed"] == 0:
            matched = min(self.match(req["hashes"]), (req["target"] - 1) // self.block)
            for h in req["hashes"][:matched]:
                if self.cache[h] == 0:
                    del self.lru[h]
                self.cache[h] += 1
                req["held"].append(h)
        done = req["computed"] >= req["target"]
        own = self.blocks_for(req["target"] + 1 if done else req["target"]) - matched
        if not self.alloc(own):
            self.unref(req)
            return False
        req["blocks"] = own
        if req["computed"] == 0:
            req["computed"] = matched * self.block
            req["cached"] = req["computed"]
        req["phase"] = DECODING if req["computed"] >= req["target"] else PREFILLING
        self.running.append(req)
        return True

    def preempt(self, req):
        self.release(req)
        req["computed"] = 0
        req["target"] = req["input"] + req["generated"]
        req["phase"] = WAITING
        req["preemptions"] += 1
        self.running.remove(req)
        self.waiting.appendleft(req)

    def plan(self, now):
        for req in list(self.running):
            if req["phase"] != DECODING or req not in self.running:
                continue
            need = self.blocks_for(req["target"] + 1) - (req["blocks"] + len(req["held"]))
            while need > 0:
                if self.alloc(need):
                    req["blocks"] += need
                    break
                victim = self.running[-1]
                self.preempt(victim)
                if victim is req:
                    break
        work, batch, ctx, chunk_tokens, end_sum, chunks = [], 0, 0.0, 0, 0.0, 0
        budget = self.budget
        for req in self.running:
            if req["phase"] == DECODING:
                work.append((req, 0))
                batch += 1
                ctx += req["target"]
                budget -= 1
        def chunk(req):
            nonlocal budget, chunk_tokens, end_sum, chunks
            c = min(req["target"] - req["computed"], budget)
            if c > 0:
                work.append((req, c))
                chunk_tokens += c
                end_sum += req["computed"] + c
                chunks += 1
                budget -= c
        for req in self.running:
            if req["phase"] == PREFILLING and budget > 0:
                chunk(req)
        while budget > 0 and self.waiting and len(self.running) < self.max_running:
            req = self.waiting[0]
            if not self.admit(req):
                break
            self.waiting.popleft()
            if req["phase"] == PREFILLING:
                chunk(req)
            else:
                if req["first"] is None:  # a hand-off: the decode instance streams the first token now
                    req["first"] = req["last"] = now
                work.append((req, 0))
                batch += 1
                ctx += req["target"]
                budget -= 1
        return work, batch, ctx, chunk_tokens, end_sum, chunks


def run(trace, decode_pricer, prefill_pricer, *, decode_ranks, prefill_ranks, block_tokens=512,
        decode_budget=8192, prefill_budget=16384, max_running=128, kv_gbps=50.0):
    """Disaggregated serving of `trace` (dsperf.serving.Trace), one EP group per pool, least-loaded
    routing, the first token streamed from the decode instance (serving.simulate's default). Returns one
    dict per request (arrival, first token, finish in ms)."""
    reqs = []
    for i in range(len(trace)):
        lo, hi = int(trace.hash_offsets[i]), int(trace.hash_offsets[i + 1])
        reqs.append({"arrival": float(trace.arrival_ms[i]), "input": int(trace.input_len[i]),
                     "output": int(trace.output_len[i]), "hashes": [int(h) for h in trace.hashes[lo:hi]],
                     "phase": WAITING, "target": int(trace.input_len[i]), "computed": 0, "blocks": 0, "held": [],
                     "generated": 0, "first": None, "finish": None, "preemptions": 0, "cached": 0, "last": 0.0})
    pools = {
        "prefill": {"ranks": [Rank(int(prefill_pricer.kv_tokens_per_rank // block_tokens), block_tokens, prefill_budget,
                                   max_running) for _ in range(prefill_ranks)], "pricer": prefill_pricer, "busy": False,
                    "plans": None, "handoff": True},
        "decode": {"ranks": [Rank(int(decode_pricer.kv_tokens_per_rank // block_tokens), block_tokens, decode_budget,
                                  max_running) for _ in range(decode_ranks)], "pricer": decode_pricer, "busy": False,
                   "plans": None, "handoff": False},
    }
    events, seq = [], 0
    bytes_per_token = prefill_pricer.kv_bytes_per_token

    def push(t, kind, arg):
        nonlocal seq
        heapq.heappush(events, (t, seq, kind, arg))
        seq += 1

    def route(pool, req):
        ranks = pool["ranks"]
        best = min(range(len(ranks)), key=lambda i: (len(ranks[i].waiting) + len(ranks[i].running), i))
        ranks[best].waiting.append(req)

    def kick(name, now):
        if not pools[name]["busy"]:
            pools[name]["busy"] = True
            push(now, "start", name)

    def start(name, now):
        pool = pools[name]
        plans, step = [], 0.0
        planned = [rank.plan(now) for rank in pool["ranks"]]
        # The experts serve the group's mean load; each rank's attention its own (as the simulator).
        n = len(pool["ranks"])
        mean_batch, mean_tokens = sum(p[1] for p in planned) / n, sum(p[3] for p in planned) / n
        for rank, (work, batch, ctx, tokens, end_sum, chunks) in zip(pool["ranks"], planned):
            plans.append((rank, work))
            if batch or tokens:
                step = max(step, pool["pricer"].step_ms(batch, ctx / batch if batch else 0.0, tokens, chunks,
                                                        end_sum / chunks if chunks else 0.0,
                                                        mean_batch / batch if batch else 1.0,
                                                        mean_tokens / tokens if tokens else 1.0))
        if step <= 0:
            pool["busy"] = False
            return
        pool["plans"] = plans
        push(now + step, "end", name)

    def end(name, now):
        pool = pools[name]
        for rank, work in pool["plans"]:
            left = False
            for req, c in work:
                if c > 0:
                    req["computed"] += c
                    if req["computed"] < req["target"]:
                        continue
                    held = len(req["held"])
                    for h in req["hashes"][held:rank.blocks_for(req["input"])]:
                        if h not in rank.cache:
                            rank.cache[h] = 1
                            req["held"].append(h)
                            req["blocks"] -= 1
                    if req["generated"] == 0:
                        req["generated"] = 1
                        # Streamed from the decode instance, the first token goes out there (plan), unless
                        # it is the only one.
                        if not (pool["handoff"] and req["output"] > 1):
                            req["first"] = req["last"] = now
                    if req["generated"] >= req["output"]:
                        rank.release(req)
                        req["phase"], req["finish"], left = DONE, now, True
                    elif pool["handoff"]:
                        rank.release(req)
                        req["phase"], left = TRANSFERRING, True
                        push(now + bytes_per_token * req["input"] / (kv_gbps * 1e9) * 1e3, "transfer", req)
                    else:
                        req["phase"] = DECODING
                else:
                    req["generated"] += 1
                    req["target"] += 1
                    req["computed"] += 1
                    req["last"] = now
                    if req["generated"] >= req["output"]:
                        rank.release(req)
                        req["phase"], req["finish"], left = DONE, now, True
            if left:
                rank.running = [q for q in rank.running if q["phase"] not in (DONE, TRANSFERRING)]
        start(name, now)

    nxt = 0
    while True:
        t_arr = reqs[nxt]["arrival"] if nxt < len(reqs) else float("inf")
        t_ev = events[0][0] if events else float("inf")
        if t_arr == float("inf") and t_ev == float("inf"):
            break
        if t_arr <= t_ev:
            route(pools["prefill"], reqs[nxt])
            kick("prefill", t_arr)
            nxt += 1
            continue
        now, _, kind, arg = heapq.heappop(events)
        if kind == "start":
            start(arg, now)
        elif kind == "end":
            end(arg, now)
        else:
            arg["phase"] = WAITING
            arg["target"] = arg["computed"] = arg["input"]
            route(pools["decode"], arg)
            kick("decode", now)
    return reqs
