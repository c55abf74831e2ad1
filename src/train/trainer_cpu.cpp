// trainer_cpu.cpp — the CPU optimizer step: forward, backward, clipping, AdamW on the schedule.
#include "train/trainer_cpu.h"

#include "core/error.h"

namespace lowbit {

namespace {

const TrainConfig& validated(const TrainConfig& c) {
    validate_train_config(c, "training config");
    return c;
}

}  // namespace

CpuTrainer::CpuTrainer(const TrainConfig& config) : CpuTrainer(config, dense_train_linears(validated(config).model)) {}

CpuTrainer::CpuTrainer(const TrainConfig& config, TrainLinears linears)
    : config_(validated(config)),
      layout_(config_.model),
      params_(init_params(layout_, config_.seed, config_.init_std)),
      grads_(size_t(layout_.total()), 0.0f),
      optimizer_(layout_, config_.optimizer),
      linears_(std::move(linears)) {}

StepStats CpuTrainer::step(const TokenBatch& batch) {
    LOWBIT_CHECK(batch.shape.n_seq == config_.batch_size && batch.shape.n_tok == config_.seq_len, ErrorKind::usage,
                 "training step: a batch of {} x {} tokens, but the config trains {} sequences of {}", batch.shape.n_seq,
                 batch.shape.n_tok, config_.batch_size, config_.seq_len);
    StepStats s;
    s.step = optimizer_.steps_done();
    s.loss = train_forward(layout_, params_.data(), linears_, batch, acts_);
    train_backward(layout_, params_.data(), linears_, batch, acts_, grads_.data());
    s.grad_norm = global_grad_norm(layout_, grads_.data());
    s.clip_scale = grad_clip_scale(s.grad_norm, config_.optimizer.grad_clip);
    s.lr = config_.schedule.lr_at(s.step, config_.optimizer.lr);
    optimizer_.step(params_.data(), grads_.data(), s.lr, s.clip_scale);
    return s;
}

double CpuTrainer::loss(const TokenBatch& batch) { return train_forward(layout_, params_.data(), linears_, batch, acts_); }

}  // namespace lowbit
