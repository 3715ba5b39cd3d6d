#include "scenarios/dataset.h"

#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <cstring>
#include <sys/stat.h>

#include "base/error.h"
#include "base/files.h"
#include "base/rng.h"

namespace spikehunt {

// ---- idx files ----

namespace {

constexpr uint64_t kMaxDecompressed = uint64_t{1} << 30;  // 1 GiB: no zip bombs

std::string gunzip(std::string_view bytes, const std::string& file) {
  z_stream s{};
  if (inflateInit2(&s, 16 + MAX_WBITS) != Z_OK) {
    throw InputError(file, "", "", "cannot start gzip decompression");
  }
  s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  s.avail_in = static_cast<uInt>(std::min<size_t>(bytes.size(), UINT32_MAX));
  std::string out;
  int rc = Z_OK;
  while (rc == Z_OK) {
    if (out.size() >= kMaxDecompressed) {
      inflateEnd(&s);
      throw InputError(file, "", "", "decompresses to more than 1 GiB",
                       "idx datasets are far smaller; is this the right file?");
    }
    const size_t old = out.size();
    out.resize(old + (size_t{1} << 20));
    s.next_out = reinterpret_cast<Bytef*>(out.data() + old);
    s.avail_out = 1u << 20;
    rc = inflate(&s, Z_NO_FLUSH);
    out.resize(old + ((size_t{1} << 20) - s.avail_out));
    if (rc == Z_BUF_ERROR && s.avail_in == 0) break;  // input ended early
  }
  inflateEnd(&s);
  if (rc != Z_STREAM_END) {
    throw InputError(file, "", "",
                     rc == Z_DATA_ERROR ? "is a corrupt gzip stream" : "is a truncated gzip stream",
                     "download or reinstall the file");
  }
  return out;
}

uint32_t big_endian32(const unsigned char* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

}  // namespace

IdxArray parse_idx(std::string_view bytes, const std::string& file) {
  std::string inflated;
  if (bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
      static_cast<unsigned char>(bytes[1]) == 0x8b) {
    inflated = gunzip(bytes, file);
    bytes = inflated;
  }
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  if (bytes.size() < 4) {
    throw InputError(file, "header", std::to_string(bytes.size()) + " bytes",
                     "is too short for an idx header (4 bytes)", "is this an idx file?");
  }
  if (p[0] != 0 || p[1] != 0) {
    char magic[16];
    std::snprintf(magic, sizeof magic, "0x%02x%02x%02x%02x", p[0], p[1], p[2], p[3]);
    throw InputError(file, "magic", magic, "is not an idx magic number (0x0000TTDD)",
                     "idx files start with two zero bytes; is this an idx file?");
  }
  if (p[2] != 0x08) {
    char type[8];
    std::snprintf(type, sizeof type, "0x%02x", p[2]);
    throw InputError(file, "type", type, "is not supported; spikehunt reads unsigned-byte idx (0x08)");
  }
  const int ndims = p[3];
  if (ndims < 1 || ndims > 4) {
    throw InputError(file, "dimensions", std::to_string(ndims), "is not in [1, 4]");
  }
  const size_t header = 4 + 4 * size_t(ndims);
  if (bytes.size() < header) {
    throw InputError(file, "header", std::to_string(bytes.size()) + " bytes",
                     "is truncated: " + std::to_string(ndims) + " dimensions need " +
                         std::to_string(header) + " header bytes");
  }
  IdxArray a;
  uint64_t total = 1;
  for (int i = 0; i < ndims; ++i) {
    const uint32_t d = big_endian32(p + 4 + 4 * i);
    a.dims.push_back(d);
    if (d != 0 && total > kMaxDecompressed / d) {
      throw InputError(file, "dimensions", std::to_string(d), "make the array larger than 1 GiB");
    }
    total *= d;
  }
  const uint64_t have = bytes.size() - header;
  if (have < total) {
    throw InputError(file, "data", std::to_string(have) + " bytes",
                     "is truncated: the header promises " + std::to_string(total) + " bytes",
                     "download or reinstall the file");
  }
  if (have > total) {
    throw InputError(file, "data", std::to_string(have) + " bytes",
                     "has " + std::to_string(have - total) + " bytes after the " +
                         std::to_string(total) + " the header promises");
  }
  a.data.assign(bytes.begin() + header, bytes.end());
  return a;
}

IdxArray read_idx(const std::string& path) {
  return parse_idx(read_file(path, uint64_t{1} << 30), path);
}

namespace {

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string find_idx(const std::string& dir, const std::string& stem) {
  for (const std::string& name : {stem, stem + ".gz"}) {
    if (exists(dir + "/" + name)) return dir + "/" + name;
  }
  throw InputError(dir, "dataset.path", dir, "holds neither " + stem + " nor " + stem + ".gz",
                   "install dataset-fashion-mnist (scripts/setup.sh) or point dataset.path at an "
                   "idx directory");
}

ImageSet load_pair(const std::string& images_path, const std::string& labels_path) {
  const IdxArray images = read_idx(images_path);
  const IdxArray labels = read_idx(labels_path);
  if (images.dims.size() != 3) {
    throw InputError(images_path, "dimensions", std::to_string(images.dims.size()),
                     "is not 3 (count, rows, cols)", "is this an images file?");
  }
  if (labels.dims.size() != 1) {
    throw InputError(labels_path, "dimensions", std::to_string(labels.dims.size()),
                     "is not 1 (count)", "is this a labels file?");
  }
  if (images.dims[1] != 28 || images.dims[2] != 28) {
    throw InputError(images_path, "image size",
                     std::to_string(images.dims[1]) + "x" + std::to_string(images.dims[2]),
                     "is not 28x28", "the built-in models take 28x28 images");
  }
  if (images.dims[0] != labels.dims[0]) {
    throw InputError(labels_path, "count", std::to_string(labels.dims[0]),
                     "differs from the " + std::to_string(images.dims[0]) + " images in " + images_path);
  }
  if (images.dims[0] == 0) throw InputError(images_path, "count", "0", "holds no images");
  for (size_t i = 0; i < labels.data.size(); ++i) {
    if (labels.data[i] >= kNumClasses) {
      throw InputError(labels_path, "label[" + std::to_string(i) + "]", std::to_string(labels.data[i]),
                       "is not a class in [0, 9]");
    }
  }
  ImageSet set;
  set.images = images.data;
  set.labels = labels.data;
  return set;
}

}  // namespace

Dataset load_idx_dataset(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw InputError(dir, "dataset.path", dir, "is not a directory",
                     "install dataset-fashion-mnist (scripts/setup.sh) or point dataset.path at an "
                     "idx directory");
  }
  const std::string train_images = find_idx(dir, "train-images-idx3-ubyte");
  const std::string train_labels = find_idx(dir, "train-labels-idx1-ubyte");
  const std::string test_images = find_idx(dir, "t10k-images-idx3-ubyte");
  const std::string test_labels = find_idx(dir, "t10k-labels-idx1-ubyte");
  Dataset d;
  d.train = load_pair(train_images, train_labels);
  d.test = load_pair(test_images, test_labels);
  d.source = dir;
  return d;
}

// ---- synthetic ----

namespace {

constexpr uint64_t kSyntheticDataSeed = 0x5e1d'da7a'2026ULL;
constexpr int kSub = 16;  // sub-pixel units: integer geometry keeps the data bit-exact everywhere

struct Stroke {
  int x0, y0, x1, y1;  // endpoints in 1/kSub pixels
};

// Draws one stroke additively into a 28x28 int canvas: full intensity within
// `width` of the segment, falling off linearly in squared distance over one pixel.
void draw(const Stroke& s, int width, int intensity, int* canvas) {
  const int64_t abx = s.x1 - s.x0, aby = s.y1 - s.y0;
  const int64_t len2 = abx * abx + aby * aby;
  const int64_t inner = int64_t(width) * width;
  const int64_t outer = int64_t(width + kSub) * (width + kSub);
  // Only pixels whose centre lies within width + kSub of the segment's bounding
  // box can be drawn (the nearest point is inside the box): the same bytes, fewer pixels.
  const int reach = width + kSub;
  auto first = [](int lo) { return std::clamp((lo - kSub / 2 + kSub - 1) / kSub, 0, 27); };  // centre >= lo
  auto last = [](int hi) { return std::clamp((hi - kSub / 2) / kSub, 0, 27); };              // centre <= hi
  const int lo_x = std::min(s.x0, s.x1) - reach, hi_x = std::max(s.x0, s.x1) + reach;
  const int lo_y = std::min(s.y0, s.y1) - reach, hi_y = std::max(s.y0, s.y1) + reach;
  if (hi_x < kSub / 2 || hi_y < kSub / 2 || lo_x > 27 * kSub + kSub / 2 || lo_y > 27 * kSub + kSub / 2) return;
  for (int r = first(lo_y); r <= last(hi_y); ++r) {
    for (int c = first(lo_x); c <= last(hi_x); ++c) {
      const int64_t px = c * kSub + kSub / 2, py = r * kSub + kSub / 2;
      const int64_t apx = px - s.x0, apy = py - s.y0;
      int64_t t = apx * abx + apy * aby;
      t = std::clamp<int64_t>(t, 0, len2);
      const int64_t qx = len2 ? s.x0 + abx * t / len2 : s.x0;
      const int64_t qy = len2 ? s.y0 + aby * t / len2 : s.y0;
      const int64_t d2 = (px - qx) * (px - qx) + (py - qy) * (py - qy);
      if (d2 >= outer) continue;
      const int64_t v = d2 <= inner ? intensity : intensity * (outer - d2) / (outer - inner);
      canvas[r * 28 + c] += static_cast<int>(v);
    }
  }
}

void make_split(const std::vector<std::vector<Stroke>>& prototypes, int64_t per_class, uint64_t stream,
                ImageSet& out) {
  Rng rng(kSyntheticDataSeed, stream);
  const int64_t n = per_class * kNumClasses;
  out.images.assign(static_cast<size_t>(n) * 784, 0);
  out.labels.resize(static_cast<size_t>(n));
  int canvas[784];
  for (int64_t i = 0; i < n; ++i) {
    const int label = static_cast<int>(i % kNumClasses);  // interleaved classes
    out.labels[i] = static_cast<uint8_t>(label);
    std::fill(std::begin(canvas), std::end(canvas), 0);
    const int dx = static_cast<int>(rng.closed(-2 * kSub, 2 * kSub));
    const int dy = static_cast<int>(rng.closed(-2 * kSub, 2 * kSub));
    const int intensity = static_cast<int>(rng.closed(150, 255));
    for (const Stroke& p : prototypes[label]) {
      auto j = [&] { return static_cast<int>(rng.closed(-kSub * 3 / 2, kSub * 3 / 2)); };
      const Stroke s{p.x0 + dx + j(), p.y0 + dy + j(), p.x1 + dx + j(), p.y1 + dy + j()};
      draw(s, /*width=*/kSub * 3 / 4, intensity, canvas);
    }
    uint8_t* img = out.images.data() + static_cast<size_t>(i) * 784;
    for (int k = 0; k < 784; ++k) {
      const int noise = static_cast<int>(rng.closed(0, 40));
      img[k] = static_cast<uint8_t>(std::min(255, canvas[k] + noise));
    }
  }
}

}  // namespace

Dataset make_synthetic_dataset(int64_t train_per_class, int64_t test_per_class) {
  Rng proto_rng(kSyntheticDataSeed, /*stream=*/0);
  std::vector<std::vector<Stroke>> prototypes(kNumClasses);
  for (auto& strokes : prototypes) {
    for (int k = 0; k < 3; ++k) {
      auto coord = [&] { return static_cast<int>(proto_rng.closed(5 * kSub, 23 * kSub)); };
      strokes.push_back({coord(), coord(), coord(), coord()});
    }
  }
  Dataset d;
  make_split(prototypes, train_per_class, /*stream=*/1, d.train);
  make_split(prototypes, test_per_class, /*stream=*/2, d.test);
  d.source = "synthetic";
  return d;
}

// ---- text ----

TextSet split_text(const std::string& bytes) {
  TextSet t;
  for (size_t begin = 0, block = 0; begin < bytes.size(); begin += kTextBlock, ++block) {
    const size_t end = std::min(bytes.size(), begin + size_t(kTextBlock));
    std::vector<uint8_t>& to = (block % kTextHeldoutEvery == kTextHeldoutEvery - 1) ? t.heldout : t.train;
    to.insert(to.end(), bytes.begin() + long(begin), bytes.begin() + long(end));
  }
  return t;
}

Dataset load_text_dataset(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string value = "\"" + path + "\"";
  const fs::file_status st = fs::status(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory) {  // a symlink loop, a folder on the way not searchable
    throw InputError(path, "dataset.text_path", value, "cannot be read: " + ec.message(),
                     "give a text file or a directory of them that this user can read");
  }
  if (ec || !fs::exists(st)) {
    throw InputError(path, "dataset.text_path", value, "does not exist",
                     "give a text file or a directory of them (scripts/setup.sh installs the fortunes files)");
  }
  if (!fs::is_directory(st) && !fs::is_regular_file(st)) {  // a FIFO would block the open for ever
    throw InputError(path, "dataset.text_path", value, "is neither a regular file nor a directory",
                     "give a text file or a directory of them");
  }
  std::vector<std::string> files;
  if (fs::is_directory(st)) {
    fs::directory_iterator it(path, ec);
    if (ec) {
      throw InputError(path, "dataset.text_path", value, "cannot be read: " + ec.message(),
                       "give a directory this user can list");
    }
    for (const fs::directory_entry& e : it) {
      const std::string name = e.path().filename().string();
      if (e.is_symlink() || !e.is_regular_file() || name.empty() || name[0] == '.') continue;
      if (name.size() > 4 && name.compare(name.size() - 4, 4, ".dat") == 0) continue;
      files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(path);
  }
  std::string bytes;
  for (const std::string& f : files) bytes += read_file(f, uint64_t{1} << 31);
  if (int64_t(bytes.size()) < kTextHeldoutEvery * kTextBlock) {
    throw InputError(path, "dataset.text_path", "\"" + path + "\"",
                     "holds " + std::to_string(bytes.size()) + " bytes of text in " + std::to_string(files.size()) +
                         " files, fewer than " + std::to_string(kTextHeldoutEvery * kTextBlock),
                     "give at least 20 KiB of text: every 20th KiB is held out");
  }
  Dataset d;
  d.text = split_text(bytes);
  d.text.files = std::move(files);
  d.source = path;
  return d;
}

Dataset load_dataset(const DatasetConfig& config) {
  if (config.kind == DatasetKind::kIdx) return load_idx_dataset(config.path);
  if (config.kind == DatasetKind::kText) return load_text_dataset(config.text_path);
  return make_synthetic_dataset(config.synthetic_train_per_class, config.synthetic_test_per_class);
}

}  // namespace spikehunt
