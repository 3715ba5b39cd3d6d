// dataset.h — labelled 28×28 grayscale images, from idx files (MNIST /
// Fashion-MNIST format, raw or gzip) or from the built-in synthetic set; and
// byte-level text (kind "text": the fortunes files or a user's own).
// Readers validate magic numbers, dimensions and counts; a truncated or
// corrupt file is an InputError naming the file.
// Example:
//   Dataset d = load_dataset(config.dataset);   // d.train.size() == 60000
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "scenarios/config.h"

namespace spikehunt {

// ---- idx files ----
struct IdxArray {
  std::vector<int64_t> dims;  // e.g. {60000, 28, 28}
  std::vector<uint8_t> data;  // row-major, product(dims) bytes
};

// Parses an idx file's bytes (gunzipped first when they start with the gzip
// magic). Only unsigned-byte idx (type 0x08) is accepted.
IdxArray parse_idx(std::string_view bytes, const std::string& file);
IdxArray read_idx(const std::string& path);

// ---- images ----
struct ImageSet {
  int64_t rows = 28;
  int64_t cols = 28;
  std::vector<uint8_t> images;  // (size, rows, cols), pixel 0..255
  std::vector<uint8_t> labels;  // (size), class 0..9
  int64_t size() const { return static_cast<int64_t>(labels.size()); }
};

// Byte-level text: each byte is a token (vocabulary kTextVocab). The stream
// is cut into blocks of kTextBlock bytes; every kTextHeldoutEvery-th block is
// held out, the rest is the training stream (the same split for every seed).
constexpr int64_t kTextBlock = 1024;
constexpr int64_t kTextHeldoutEvery = 20;
struct TextSet {
  std::vector<uint8_t> train;
  std::vector<uint8_t> heldout;
  std::vector<std::string> files;  // what was read, in order
  int64_t bytes() const { return int64_t(train.size() + heldout.size()); }
};

struct Dataset {
  ImageSet train;
  ImageSet test;         // held out
  TextSet text;          // kind text (train and test are then empty)
  std::string source;    // "synthetic", the idx directory, or the text path
};

// An idx directory holding train-images-idx3-ubyte, train-labels-idx1-ubyte,
// t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte (each optionally .gz).
Dataset load_idx_dataset(const std::string& dir);

// The synthetic set: each class is a fixed pattern of three strokes; every
// image draws it with random shift, stroke jitter, intensity and background
// noise. Fixed data seed: the same images for every training seed. Learnable
// (a small CNN separates the classes in a few hundred steps) and needs no files.
Dataset make_synthetic_dataset(int64_t train_per_class, int64_t test_per_class);

// A text file, or every regular file of a directory in name order (symlinks
// and fortune's *.dat indexes skipped), split as TextSet says. An InputError
// names the path when it is missing, unreadable or holds under 2 blocks.
Dataset load_text_dataset(const std::string& path);
// Splits a byte stream as TextSet says.
TextSet split_text(const std::string& bytes);

Dataset load_dataset(const DatasetConfig& config);

}  // namespace spikehunt
