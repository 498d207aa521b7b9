// The calls of one layer of a grounded step, each priced on its own from the kernel tables: MLA's
// calls (the one list in model/mla_calls.hpp) with the norms and quantisation around them, the MoE
// (gate, dispatch, shared and routed experts, combine) and the dense MLP. Internal to the step
// model: step_model.cpp composes a step from these; layer_calls.cpp defines them.
#pragma once

#include <algorithm>
#include <array>
#include <vector>

#include "grounded/step_model.hpp"

namespace dsperf::layer {

// The calls of one layer for one micro-batch; each priced on its own.
class CallBuilder {
public:
    CallBuilder(const DeviceSpec& d, const KernelTables& t, double compute_slowdown, bool keep_calls = true)
        : d_(d), t_(t), slowdown_(compute_slowdown), keep_(keep_calls) {}

    std::vector<KernelCall> calls;  // kept only when asked for
    std::array<double, 7> stage_us{};  // per Stage
    const KernelTables& tables() const { return t_; }

    void compute(const char* name, TableFamily f, Stage stage, const KernelShape& s) {
        KernelCall c{name, f, stage};
        c.shape = s;
        // The table's efficiency is against the datasheet roofline at the clock its benchmarks ran
        // at; a deployment under sustained load runs its FLOPs at sustained_clock_ratio of it (the
        // roofline time in `w`, priced there).
        CallWork w;
        const TableLookup e = t_.lookup(f, s, &d_, d_.sustained_clock_ratio, &w);
        c.flops = w.work.flops, c.bytes = w.work.bytes;
        c.efficiency = e.value, c.from_table = e.found, c.clamped = e.clamped;
        double us = w.roofline_s / e.value * 1e6;
        if (!e.found) us = std::max(us, kMinKernelUs);
        c.us = us * slowdown_ + kGraphKernelGapUs;
        add(c);
    }

    // A transfer of `bytes` per GPU at the family's measured bandwidth at this EP (TP) size,
    // scaled by the device's link against the link the table was measured on.
    // domain_rows: read the device's own rows timed inside its scale-up domain
    // (KernelTables::add_domain_bandwidth) instead of the network table's.
    void comm(const char* name, TableFamily f, Stage stage, const KernelShape& s, double bytes,
              double link_gbps, double table_link_gbps, bool domain_rows = false) {
        KernelCall c{name, f, stage};
        c.shape = s;
        const TableLookup e = domain_rows ? t_.lookup_domain(f, s) : t_.lookup(f, s);
        const double gbps = e.found ? e.value * link_gbps / table_link_gbps : link_gbps * t_.default_efficiency;
        c.bytes = bytes, c.efficiency = gbps, c.from_table = e.found, c.clamped = e.clamped;
        c.us = bytes / (gbps * 1e9) * 1e6;
        if (!e.found) c.us = std::max(c.us, kMinKernelUs);
        add(c);
    }

    // A TP all-reduce of a `message` of bytes across `tp` GPUs: at the all-reduce table's measured
    // latency for that size where it has rows (the fixed cost of a small all-reduce dominates a
    // decode step's), over whole nodes at NCCL's (tp_allreduce_latency), else as ring traffic at the
    // all-reduce bandwidth (the old pricing).
    void allreduce(const char* name, Stage stage, double tp, double message) {
        const AllReduceLatency lat = tp_allreduce_latency(t_, d_, tp, message);
        if (!lat.found) {
            KernelShape s;
            s.tp = tp;
            return comm(name, TableFamily::kAllReduce, stage, s, message * 2 * (tp - 1) / tp, d_.nvlink_gbps,
                        kTableNvlinkGbps);
        }
        KernelCall c{name, TableFamily::kAllReduce, stage};
        c.shape.tp = tp, c.shape.bytes = message;
        c.bytes = message * 2 * (tp - 1) / tp;
        c.us = lat.us;
        c.efficiency = c.bytes / (c.us * 1e-6) / 1e9;  // GB/s of ring traffic, as the bandwidth rows
        c.from_table = true, c.clamped = lat.clamped;
        add(c);
    }

    void keep_all() { keep_ = true; }

    // A call priced elsewhere (a multiple of one priced here).
    void add(const KernelCall& c) {
        stage_us[int(c.stage)] += c.us;
        if (keep_) calls.push_back(c);
    }

private:
    const DeviceSpec& d_;
    const KernelTables& t_;
    double slowdown_;
    bool keep_;
};

// The dense MLP's TP: under attention TP every GPU of the group holds its activations, and the stacks
// split the dense MLP (over at least attn_tp), LM head and embedding over the group too
// (docs/GROUNDED_MODEL.md).
double dense_group_tp(const Deployment& dep);
// The experts share the attention TP group: its GPUs hold every token after the attention
// all-reduce, so the MoE needs no dispatch (moe_calls) and the shared experts split over it too.
bool experts_share_attention_group(const Deployment& dep);
double shared_expert_tp(const Deployment& dep);

// MLA over t tokens of this GPU (requests: decode requests per micro-batch on it), its norms and
// quantisation, and the attention TP all-reduce.
void attention_calls(CallBuilder& b, const ModelConfig& m, const Deployment& dep, double t,
                     double requests);
// A MoE layer's calls after attention, for t tokens of this GPU.
void moe_calls(CallBuilder& b, const ModelConfig& m, const Deployment& dep, const DeviceSpec& d, double t);
// A dense layer's MLP for t tokens of this GPU.
void dense_mlp_calls(CallBuilder& b, const ModelConfig& m, const Deployment& dep, double t);

}  // namespace dsperf::layer
