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
  if (bug_ == "head_not_optimized") {
    params.clear();
    for (auto& l : net_->hidden) {
      for (auto& p : l->parameters()) params.push_back(p);
    }
  }
  spikehunt::OptimizerConfig o = c.optimizer;
  if (bug_ == "lr_units") o.lr *= 1000;  // "lr is in per mille" — it is not
  optimizer_ = spikehunt::make_optimizer(o, params);
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
  }
  torch::Tensor logits = net_->out->forward(h);
  tap("logits", logits);
  if (bug_ == "softmax_twice") return torch::softmax(logits, 1);
  return logits;
}

torch::Tensor FashionScenario::loss(const torch::Tensor& outputs, const torch::Tensor& targets) {
  if (bug_ == "labels_float") return torch::nn::functional::cross_entropy(outputs, targets.to(torch::kFloat32));
  if (bug_ == "softmax_in_loss") return torch::nn::functional::cross_entropy(torch::softmax(outputs, 1), targets);
  if (bug_ == "sharp_log_softmax") {
    const torch::Tensor p = torch::softmax(outputs / 0.02, 1);
    return -(torch::one_hot(targets, 10).to(p.scalar_type()) * torch::log(p)).sum(1).mean();
  }
  return torch::nn::functional::cross_entropy(outputs, targets);
}

std::optional<spikehunt::Batch> FashionScenario::next_batch() {
  if (step_ >= steps_) return std::nullopt;
  const int64_t per_epoch = x_.size(0) / batch_size_;
  const int64_t epoch = step_ / per_epoch, b = step_ % per_epoch;
  if (b == 0) {  // a new shuffle each epoch, from the seed
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
                          "saturated_sigmoid", "deep_sigmoid", "blank_image_nan", "head_not_optimized"},
                         "the planted bug (fashion.h)"),
       ParamSpec::integer("hidden", 128, 1, 4096, "units per hidden layer"),
       ParamSpec::integer("train_images", 6000, 100, 60000, "training images used")});
}
