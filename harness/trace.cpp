#include "harness/trace.h"

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace spikehunt {

void Trace::push(const StepRecord& r) {
  if (!onset_seen_ && r.health != Health::kFinite) {
    onset_seen_ = true;
    before_onset_.assign(recent_.begin(), recent_.end());
  }
  recent_.push_back(r);
  if (recent_.size() > capacity_) recent_.pop_front();
  ++total_;
}

const StepRecord* Trace::find(int64_t step) const {
  for (const StepRecord& r : recent_) {
    if (r.step == step) return &r;
  }
  return nullptr;
}

TraceWriter::TraceWriter(std::string path) : path_(std::move(path)) {
  file_ = std::fopen((path_ + ".partial").c_str(), "wb");
  if (file_ == nullptr) {
    throw std::runtime_error("cannot write " + path_ + ".partial: " + std::strerror(errno));
  }
  // Read by nothing before close(): a large buffer, so a step's line (a few KB
  // per step) is a write(2) every few dozen steps instead of nearly every step.
  // glibc sizes a buffer it allocates itself by the file's block size (4 KB),
  // whatever size setvbuf is given: the buffer is the writer's own.
  buffer_ = std::make_unique<char[]>(kBufferBytes);
  std::setvbuf(file_, buffer_.get(), _IOFBF, kBufferBytes);
}

TraceWriter::~TraceWriter() {
  if (file_ != nullptr) {  // not closed: an error path; leave no partial file
    std::fclose(file_);
    std::remove((path_ + ".partial").c_str());
  }
}

void TraceWriter::write(const StepRecord& r) {
  line_.clear();
  append_trace_line(r, line_);
  line_ += '\n';
  if (std::fwrite(line_.data(), 1, line_.size(), file_) != line_.size()) {
    throw std::runtime_error("cannot write " + path_ + ".partial: " + std::strerror(errno));
  }
}

void TraceWriter::close() {
  if (file_ == nullptr) return;
  const bool ok = std::fflush(file_) == 0;
  std::fclose(file_);
  file_ = nullptr;
  if (!ok || std::rename((path_ + ".partial").c_str(), path_.c_str()) != 0) {
    std::remove((path_ + ".partial").c_str());
    throw std::runtime_error("cannot finish " + path_ + ": " + std::strerror(errno));
  }
}

}  // namespace spikehunt
