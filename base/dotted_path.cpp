#include "base/dotted_path.h"

namespace spikehunt {

using json = nlohmann::json;

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    const size_t dot = path.find('.', start);
    parts.push_back(path.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) return parts;
    start = dot + 1;
  }
}

const json* find_path(const json& j, const std::string& path) {
  const json* node = &j;
  for (const std::string& part : split_path(path)) {
    if (!node->is_object()) return nullptr;
    const auto it = node->find(part);
    if (it == node->end()) return nullptr;
    node = &*it;
  }
  return node;
}

json& make_path(json& j, const std::string& path) {
  json* node = &j;
  for (const std::string& part : split_path(path)) node = &(*node)[part];
  return *node;
}

}  // namespace spikehunt
