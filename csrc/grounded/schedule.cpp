// A step's layers laid out in time under each overlap mode, from the stage times of one layer
// (step_stages): the layer schedule the step model and the explorer share.
#include <algorithm>

#include "grounded/step_model.hpp"

namespace dsperf {

namespace {
// Two streams, two micro-batches, `layers` MoE layers after the dense ones: each stage starts
// when its stream is free and its input is ready. Compute order per layer: attn A, attn B,
// moe A, moe B; communication order: dispatch A, dispatch B, combine A, combine B. The pattern
// repeats from the second layer on, so a few layers are simulated and the rest extrapolated.
double two_batch_moe_layers_ms(double attn, double dispatch, double moe, double combine, int layers) {
    double compute_free = 0, comm_free = 0;
    double ready[2] = {0, 0};  // when each micro-batch's input to the next layer is ready
    // One stage of both micro-batches on a stream: each starts when the stream is free and its
    // input is done.
    auto stage = [](double& stream_free, const double (&input)[2], double duration, double (&done)[2]) {
        for (int mb = 0; mb < 2; ++mb) done[mb] = stream_free = std::max(stream_free, input[mb]) + duration;
    };
    const int simulated = std::min(layers, 4);
    double end_prev = 0, end = 0;
    for (int l = 0; l < simulated; ++l) {
        double attn_done[2], disp_done[2], moe_done[2];
        stage(compute_free, ready, attn, attn_done);
        stage(comm_free, attn_done, dispatch, disp_done);
        stage(compute_free, disp_done, moe, moe_done);
        stage(comm_free, moe_done, combine, ready);
        end_prev = end;
        end = std::max(ready[0], ready[1]);
    }
    return (end + (layers - simulated) * (end - end_prev)) / 1e3;
}
}  // namespace

double schedule_ms(const ModelConfig& m, const StepStages& s, Overlap overlap) {
    const int n_moe = int(m.n_moe_layers());
    double moe_ms;
    switch (overlap) {
        case Overlap::kTwoBatch:
            moe_ms = two_batch_moe_layers_ms(s.attn, s.dispatch, s.moe, s.combine, n_moe);
            break;
        case Overlap::kSingleBatch:
            // Dispatch runs under the norm, gate and shared expert; combine is exposed.
            moe_ms = n_moe * (s.attn + std::max(s.dispatch, s.moe_shared) + (s.moe - s.moe_shared) + s.combine) / 1e3;
            break;
        default:
            moe_ms = n_moe * (s.attn + s.dispatch + s.moe + s.combine) / 1e3;
    }
    return double(m.n_dense_layers) * s.micro * s.dense / 1e3 + moe_ms + s.head_ms;
}

}  // namespace dsperf
