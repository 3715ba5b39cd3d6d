// dotted_path.h — config fields named by dotted paths ("optimizer.lr",
// "model.gpt.width") walked in their JSON: what --set, a search space's
// dimensions and the per-factor tables all address fields by.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace spikehunt {

// "model.gpt.width" -> {"model", "gpt", "width"}; "" -> {""}.
std::vector<std::string> split_path(const std::string& path);
// The value at `path`, or nullptr when a part is missing or a non-object is
// on the way.
const nlohmann::json* find_path(const nlohmann::json& j, const std::string& path);
// The value at `path`, made (as null, inside new objects) when missing.
nlohmann::json& make_path(nlohmann::json& j, const std::string& path);

}  // namespace spikehunt
