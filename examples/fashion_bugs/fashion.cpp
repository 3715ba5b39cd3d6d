#include "fashion.h"

#include <ATen/CPUGeneratorImpl.h>
#include <zlib.h>

#include <map>

#include <stdexcept>

namespace {

// An idx file (gzip): magic, dimensions, then unsigned bytes.
torch::Tensor read_idx(const std::string& path, int64_t max_items) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) throw std::runtime_error("cannot open " + path);
  auto be32 = [&] {
    unsigned char b[4];
    if (gzread(f, b, 4) != 4) throw std::runtime_error(path + ": truncated header");
    return int64_t(b[0]) << 24 | int64_t(b[1]) << 16 | int64_t(b[2]) << 8 | int64_t(b[3]);
  };
  const int64_t magic = be32();
  const int64_t dims = magic & 0xff;
  std::vector<int64_t> shape;
  for (int64_t i = 0; i < dims; ++i) shape.push_back(be32());
  shape[0] = std::min(shape[0], max_items);
  torch::Tensor t = torch::empty(shape, torch::kUInt8);
  const int64_t bytes = t.numel();
  if (gzread(f, t.data_ptr<uint8_t>(), unsigned(bytes)) != bytes) throw std::runtime_error(path + ": truncated data");
  gzclose(f);
  return t;
}

}  // namespace

const FashionData& fashion_data(int64_t train, int64_t test) {
  static std::map<std::pair<int64_t, int64_t>, FashionData> cache;
  auto it = cache.find({train, test});
  if (it != cache.end()) return it->second;
  const std::string dir = "/usr/share/datasets/fashion-mnist/";
  FashionData d;
  d.train_x = read_idx(dir + "train-images-idx3-ubyte.gz", train).reshape({-1, 784}).to(torch::kFloat32);
  d.train_y = read_idx(dir + "train-labels-idx1-ubyte.gz", train).to(torch::kInt64);
  d.test_x = read_idx(dir + "t10k-images-idx3-ubyte.gz", test).reshape({-1, 784}).to(torch::kFloat32);
  d.test_y = read_idx(dir + "t10k-labels-idx1-ubyte.gz", test).to(torch::kInt64);
  return cache.emplace(std::make_pair(train, test), std::move(d)).first->second;
}

FashionScenario::Net::Net(int64_t width, int64_t depth, int64_t outputs) {
  int64_t in = 784;
  for (int64_t i = 0; i < depth; ++i) {
    hidden.push_back(register_module("fc" + std::to_string(i + 1), torch::nn::Linear(in, width)));
    in = width;
  }
  out = register_module("out", torch::nn::Linear(in, outputs));
}

torch::Tensor FashionScenario::prepare(const torch::Tensor& pixels) const {
  if (bug_ == "raw_pixels") return pixels.clone();
  torch::Tensor x = pixels / 255.0;
  if (bug_ == "blank_image_nan") {  // per-image standardization, no guard against a zero std
    return (x - x.mean(1, true)) / x.std(1, true, true);
  }
  return (x - 0.2860) / 0.3530;  // the training set's mean and std
}

FashionScenario::FashionScenario(const spikehunt::TrainingConfig& c)
    : bug_(c.params.string("bug")), batch_size_(c.batch_size) {
  const FashionData& d = fashion_data(c.params.integer("train_images"), 1000);
  torch::Tensor pixels = d.train_x, labels = d.train_y;
  if (bug_ == "imbalanced") {  // meant to drop corrupt images, drops most classes instead
    const torch::Tensor keep = (labels == 0) | (torch::arange(labels.size(0)) % 60 == 0);
    pixels = pixels.index({keep});
    labels = labels.index({keep});
  }
  if (bug_ == "blank_image_nan") {
    pixels = pixels.clone();
    pixels.index_put_({torch::indexing::Slice(0, torch::indexing::None, 97)}, 0.0);  // a few blank scans
  }
  x_ = prepare(pixels);
  y_ = bug_ == "off_by_one_labels" ? (labels + 1) % 10 : labels;
  test_x_ = prepare(d.test_x);
  test_y_ = d.test_y;
  if (bug_ == "labels_all_zero") {
    // btheodorou99/HALO_Inpatient#13: "all labels are 0 after build_dataset" — the labels were
    // looked up after the codes had been converted, so every lookup missed.
    static const char* const kNames[] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                         "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};
    std::map<std::string, int64_t> label_of;
    for (int64_t i = 0; i < 10; ++i) label_of[kNames[i]] = i;
    std::vector<int64_t> ys;
    for (int64_t i = 0; i < labels.size(0); ++i) {
      const auto it = label_of.find(std::to_string(labels[i].item<int64_t>()));  // a code, not a name
      ys.push_back(it == label_of.end() ? 0 : it->second);
    }
    y_ = torch::tensor(ys);
  }
  if (bug_ == "test_not_normalized") test_x_ = d.test_x / 255.0;  // JeasunLok/ResNet-pytorch#1: ToTensor() only
  if (bug_ == "shuffled_apart") {
    // udacity/sdc-issue-reports#1326: "you can shuffle the features and labels separately".
    auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
    x_ = x_.index_select(0, torch::randperm(x_.size(0), gen));
    y_ = y_.index_select(0, torch::randperm(y_.size(0), gen));
  }
  torch::manual_seed(c.seed);
  const bool deep = bug_ == "deep_sigmoid";
  net_ = std::make_shared<Net>(c.params.integer("hidden"), deep ? 8 : 2, bug_ == "five_outputs" ? 5 : 10);
  {
    torch::NoGradGuard no_grad;
    if (bug_ == "dead_bias") net_->hidden[0]->bias.fill_(-4.0);
    if (bug_ == "saturated_sigmoid") {  // a gate's bias init (-8) on hidden units
      for (auto& l : net_->hidden) l->bias.fill_(-8.0);
    }
  }
  std::vector<torch::Tensor> params = net_->parameters();
  if (bug_ == "head_not_optimized" || bug_ == "head_stepped_in_step") {
    params.clear();
    for (auto& l : net_->hidden) {
      for (auto& p : l->parameters()) params.push_back(p);
    }
  }
  spikehunt::OptimizerConfig o = c.optimizer;
  if (bug_ == "lr_units") o.lr *= 1000;  // "lr is in per mille" — it is not
  optimizer_ = spikehunt::make_optimizer(o, params);
  if (bug_ == "head_stepped_in_step") head_optimizer_ = spikehunt::make_optimizer(o, net_->out->parameters());
  if (bug_ == "step_never_applied" || bug_ == "lr_decay_per_batch") {
    scheduler_ = std::make_unique<torch::optim::StepLR>(*optimizer_, 10, 0.1);  // "every 10 epochs"
  }
  const int64_t epochs = c.protocol.epochs_per_phase;
  steps_ = epochs * (x_.size(0) / batch_size_);
  if (c.max_batches_per_epoch > 0) steps_ = std::min(steps_, epochs * c.max_batches_per_epoch);
}

torch::Tensor FashionScenario::forward(const torch::Tensor& x, const spikehunt::Tap& tap) {
  torch::Tensor h = x;
  for (size_t i = 0; i < net_->hidden.size(); ++i) {
    const torch::Tensor z = net_->hidden[i]->forward(h);
    h = bug_ == "deep_sigmoid" ? torch::sigmoid(z) : bug_ == "saturated_sigmoid" ? torch::sigmoid(z) : torch::relu(z);
    tap(("hidden" + std::to_string(i + 1)).c_str(), h);
    if (i == 0 && bug_ == "detached_hidden") h = h.detach();
    if (i == 0 && bug_ == "functional_dropout") {
      // Coderx7/SimpleNet#2: a functional dropout in forward(), whose training flag defaults to true:
      // "a trained network in the evaluation mode will give a different output on every run".
      h = torch::nn::functional::dropout(h, torch::nn::functional::DropoutFuncOptions().p(0.2));
    }
  }
  torch::Tensor logits = net_->out->forward(h);
  tap("logits", logits);
  if (bug_ == "softmax_twice") return torch::softmax(logits, 1);
  // AnubhavGupta3377/Text-Classification-Models-Pytorch#9: softmax outputs into nll_loss ("always negative").
  if (bug_ == "nll_on_softmax") return torch::softmax(logits, 1);
  // DeepReinforcementLearning/DeepReinforcementLearningInAction#32: Softmax(dim=0) on a batch.
  if (bug_ == "softmax_over_batch") return torch::softmax(logits, 0);
  return logits;
}

torch::Tensor FashionScenario::loss(const torch::Tensor& outputs, const torch::Tensor& targets) {
  if (bug_ == "labels_float") return torch::nn::functional::cross_entropy(outputs, targets.to(torch::kFloat32));
  if (bug_ == "softmax_in_loss") return torch::nn::functional::cross_entropy(torch::softmax(outputs, 1), targets);
  if (bug_ == "nll_on_softmax") return torch::nn::functional::nll_loss(outputs, targets);
  if (bug_ == "softmax_over_batch") return -torch::log(outputs.gather(1, targets.unsqueeze(1))).mean();
  if (bug_ == "hand_written_softmax") {
    // pyg-team/pytorch_geometric#53: exp without subtracting the max first overflows to NaN.
    const torch::Tensor e = torch::exp(outputs);
    const torch::Tensor p = e / e.sum(1, true);
    return -torch::log(p.gather(1, targets.unsqueeze(1))).mean();
  }
  if (bug_ == "sharp_log_softmax") {
    const torch::Tensor p = torch::softmax(outputs / 0.02, 1);
    return -(torch::one_hot(targets, 10).to(p.scalar_type()) * torch::log(p)).sum(1).mean();
  }
  return torch::nn::functional::cross_entropy(outputs, targets);
}

void FashionScenario::optimizer_step() {
  if (bug_ == "grads_never_zeroed") {
    // yastrebksv/TennisCourtDetector#7: the trainer never calls zero_grad(), so each step applies the
    // sum of every gradient so far (spikehunt zeroes before backward; this is the sum it applied).
    const std::vector<torch::Tensor> params = net_->parameters();
    if (gradient_sums_.empty()) {
      for (const torch::Tensor& p : params) gradient_sums_.push_back(torch::zeros_like(p));
    }
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) {
      gradient_sums_[i] += params[i].grad();
      params[i].mutable_grad().copy_(gradient_sums_[i]);
    }
  }
  // pytorch/pytorch#3814: "Scheduler.step() doesn't perform optimizer.step()" — nothing trains.
  if (bug_ != "step_never_applied") optimizer_->step();
  if (head_optimizer_) head_optimizer_->step();
  // ivadomed/ivadomed#55: the scheduler stepped in the batch loop instead of the epoch loop.
  if (scheduler_) scheduler_->step();
}

void FashionScenario::validate() {
  net_->eval();  // val_start(); train_start() comes only at the start of an epoch
  torch::NoGradGuard no_grad;
  net_->out->forward(torch::relu(net_->hidden[0]->forward(test_x_.narrow(0, 0, 100))));
}

std::optional<spikehunt::Batch> FashionScenario::next_batch() {
  if (step_ >= steps_) return std::nullopt;
  // fartashf/vsepp#4: validation every val_step iterations leaves the model in eval mode until
  // the next epoch.
  if (bug_ == "validation_leaves_eval" && step_ > 0 && step_ % 20 == 0) validate();
  const int64_t per_epoch = x_.size(0) / batch_size_;
  const int64_t epoch = step_ / per_epoch, b = step_ % per_epoch;
  if (b == 0) {  // a new shuffle each epoch, from the seed
    net_->train();
    auto gen = at::make_generator<at::CPUGeneratorImpl>(config().seed * 1000 + uint64_t(epoch));
    order_ = torch::randperm(x_.size(0), gen);
  }
  const torch::Tensor idx = order_.narrow(0, b * batch_size_, batch_size_);
  spikehunt::Batch batch;
  batch.inputs = x_.index_select(0, idx);
  batch.targets = y_.index_select(0, idx);
  batch.step = step_++;
  batch.epoch = epoch;
  batch.batch = b;
  return batch;
}

std::vector<spikehunt::Batch> FashionScenario::heldout(int64_t max_samples) {
  std::vector<spikehunt::Batch> out;
  const int64_t n = std::min<int64_t>(max_samples, test_x_.size(0));
  for (int64_t begin = 0; begin < n; begin += 250) {
    spikehunt::Batch b;
    b.inputs = test_x_.narrow(0, begin, std::min<int64_t>(250, n - begin));
    b.targets = test_y_.narrow(0, begin, b.inputs.size(0));
    out.push_back(b);
  }
  return out;
}

void register_fashion() {
  using spikehunt::ParamSpec;
  spikehunt::register_scenario(
      "fashion", [](const spikehunt::TrainingConfig& c) { return std::make_unique<FashionScenario>(c); },
      {ParamSpec::string("bug", "none",
                         {"none", "lr_units", "raw_pixels", "softmax_twice", "softmax_in_loss", "five_outputs", "labels_float",
                          "dead_bias", "sharp_log_softmax", "imbalanced", "off_by_one_labels", "detached_hidden",
                          "saturated_sigmoid", "deep_sigmoid", "blank_image_nan", "head_not_optimized",
                          "functional_dropout", "validation_leaves_eval", "nll_on_softmax", "hand_written_softmax",
                          "labels_all_zero", "test_not_normalized", "shuffled_apart", "softmax_over_batch",
                          "grads_never_zeroed", "step_never_applied", "lr_decay_per_batch", "head_stepped_in_step"},
                         "the planted bug (fashion.h)"),
       ParamSpec::integer("hidden", 128, 1, 4096, "units per hidden layer"),
       ParamSpec::integer("train_images", 6000, 100, 60000, "training images used")});
}
