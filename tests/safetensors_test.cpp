// Tests harness/safetensors.h and harness/checkpoint.h: round trips, audits
// against planted values, pair comparison, and clear errors on hostile files.
#include <cmath>
#include <cstring>
#include <limits>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "harness/checkpoint.h"
#include "harness/safetensors.h"
#include "test_util.h"

namespace spikehunt {
namespace {

TensorBlob f32(const std::string& name, const std::vector<float>& values, std::vector<int64_t> shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(values.size())};
  TensorBlob b{name, DType::kF32, shape, std::string(values.size() * 4, '\0')};
  std::memcpy(b.bytes.data(), values.data(), b.bytes.size());
  return b;
}

std::string file_with_header(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

std::string parse_error(const std::string& bytes) {
  try {
    parse_safetensors(bytes, "ckpt.safetensors");
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(SafeTensors, RoundTripsTensorsAndMetadata) {
  const std::string bytes =
      serialize_safetensors({f32("w", {1, 2, 3, 4, 5, 6}, {2, 3}), f32("b", {7})}, {{"step", "12"}});
  EXPECT_EQ((bytes.size() - 8 - 28) % 8, 0u) << "data section aligned";
  const SafeTensors f = parse_safetensors(bytes, "x");
  EXPECT_EQ(f.metadata.at("step"), "12");
  ASSERT_EQ(f.tensors.size(), 2u);
  const TensorEntry* w = f.find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(element(*w, f.data(*w), 5), 6.0);
}

TEST(SafeTensors, AuditCountsPlantedNonFiniteValuesInEveryFloatType) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<TensorBlob> blobs = {f32("a", {1, nan, -inf, inf, -inf, -3})};
  // The same values as F16 (0x7e00 NaN, 0xfc00 -Inf, 0x7c00 +Inf, 0xc200 -3) and BF16.
  const uint16_t half[] = {0x3c00, 0x7e00, 0xfc00, 0x7c00, 0xfc00, 0xc200};
  const uint16_t bf16[] = {0x3f80, 0x7fc0, 0xff80, 0x7f80, 0xff80, 0xc040};
  blobs.push_back({"h", DType::kF16, {6}, std::string(reinterpret_cast<const char*>(half), 12)});
  blobs.push_back({"z", DType::kBF16, {6}, std::string(reinterpret_cast<const char*>(bf16), 12)});
  const double dbl[] = {1, std::nan(""), -INFINITY, INFINITY, -INFINITY, -3};
  blobs.push_back({"d", DType::kF64, {6}, std::string(reinterpret_cast<const char*>(dbl), 48)});
  const SafeTensors f = parse_safetensors(serialize_safetensors(blobs, {}), "x");
  const std::vector<TensorAudit> audits = audit(f);
  ASSERT_EQ(audits.size(), 4u);
  for (const TensorAudit& a : audits) {
    EXPECT_EQ(a.nan, 1) << a.name;
    EXPECT_EQ(a.pos_inf, 1) << a.name;
    EXPECT_EQ(a.neg_inf, 2) << a.name;
    EXPECT_EQ(a.max_abs, 3.0) << a.name;
    EXPECT_FALSE(a.finite());
  }
}

TEST(SafeTensors, ComparePairsNamesTheFirstDifference) {
  const SafeTensors a = parse_safetensors(serialize_safetensors({f32("a", {1, 2}), f32("b", {3, 4, 5})}, {}), "a");
  const SafeTensors same = parse_safetensors(serialize_safetensors({f32("b", {3, 4, 5}), f32("a", {1, 2})}, {{"k", "v"}}), "s");
  EXPECT_TRUE(compare(a, same).same) << "order and metadata do not matter";
  const SafeTensors diff = parse_safetensors(serialize_safetensors({f32("a", {1, 2}), f32("b", {3, 4.5f, 9})}, {}), "d");
  const PairDiff d = compare(a, diff);
  EXPECT_FALSE(d.same);
  EXPECT_EQ(d.first_tensor, "b");
  EXPECT_EQ(d.reason, "values");
  EXPECT_EQ(d.differing, 2);
  EXPECT_EQ(d.max_abs_diff, 4.0);
  EXPECT_EQ(d.max_diff_index, 2);
  const SafeTensors missing = parse_safetensors(serialize_safetensors({f32("a", {1, 2})}, {}), "m");
  EXPECT_EQ(compare(a, missing).reason, "missing in the second file");
  const SafeTensors reshaped = parse_safetensors(serialize_safetensors({f32("a", {1, 2}, {1, 2}), f32("b", {3, 4, 5})}, {}), "r");
  EXPECT_EQ(compare(a, reshaped).reason, "shape [2] vs [1,2]");
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const SafeTensors n1 = parse_safetensors(serialize_safetensors({f32("a", {nan, 2})}, {}), "n1");
  const SafeTensors n2 = parse_safetensors(serialize_safetensors({f32("a", {1, 2})}, {}), "n2");
  EXPECT_TRUE(std::isinf(compare(n1, n2).max_abs_diff)) << "NaN against a number is an infinite difference";
}

TEST(SafeTensors, HostileFilesGiveClearErrorsNamingFileAndField) {
  struct Case {
    std::string bytes;
    std::string expected;  // part of the error text
  };
  const std::vector<Case> cases = {
      {"abc", "ckpt.safetensors: header length = 3 bytes is missing"},
      {std::string("\xff\xff\xff\xff\xff\xff\xff\x7f{}", 10), "header length is not one: the first 8 bytes"},
      {std::string("\x40\0\0\0\0\0\0\0{}", 10), "exceeds the file"},
      {file_with_header("{\"a\":", ""), "header is not valid JSON"},
      {file_with_header("[]", ""), "is not a JSON object"},
      {file_with_header(R"({"a":{"dtype":"F8","shape":[1],"data_offsets":[0,1]}})", "x"),
       "a.dtype = \"F8\" is not a supported dtype"},
      {file_with_header(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "xxxx"), "a.shape"},
      {file_with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "xxxx"),
       "a.data_offsets = [0,8] is outside the data section (4 bytes)"},
      {file_with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "xxxx"),
       "spans 4 bytes, but shape [2] of F32 needs 8"},
      {file_with_header(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                        R"("b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}})",
                        "xxx"),
       "overlaps the tensor before it"},
      {file_with_header(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}})", "xxx"), "leaves a hole before it"},
      {file_with_header(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", "xxxx"),
       "has 2 bytes no tensor covers"},
      {file_with_header(R"({"__metadata__":{"k":1}})", ""), "__metadata__.k = 1 is not a string"},
      {file_with_header(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,0]}})", ""),
       "a.shape"},
  };
  for (const Case& c : cases) {
    const std::string e = parse_error(c.bytes);
    EXPECT_NE(e.find(c.expected), std::string::npos) << "expected \"" << c.expected << "\" in: " << e;
  }
}

TEST(Checkpoint, TorchTensorsRoundTripInEveryDtype) {
  testing::TempDir dir;
  torch::manual_seed(0);
  std::vector<NamedTensor> tensors = {
      {"f32", torch::randn({3, 4})},
      {"f64", torch::randn({2}, torch::kFloat64)},
      {"bf16", torch::randn({5}).to(torch::kBFloat16)},
      {"f16", torch::randn({5}).to(torch::kFloat16)},
      {"i64", torch::arange(6, torch::kInt64).view({2, 3})},
      {"strided", torch::randn({4, 4}).t()},
  };
  write_checkpoint(dir.file("c.safetensors"), tensors, {{"step", "3"}});
  const std::vector<NamedTensor> back = read_checkpoint(dir.file("c.safetensors"));
  ASSERT_EQ(back.size(), tensors.size());
  for (const NamedTensor& t : tensors) {
    auto it = std::find_if(back.begin(), back.end(), [&](const NamedTensor& b) { return b.name == t.name; });
    ASSERT_NE(it, back.end());
    EXPECT_EQ(it->tensor.scalar_type(), t.tensor.scalar_type()) << t.name;
    EXPECT_TRUE(torch::equal(it->tensor, t.tensor)) << t.name;
  }
  EXPECT_EQ(read_safetensors(dir.file("c.safetensors")).metadata.at("step"), "3");
}

}  // namespace
}  // namespace spikehunt
