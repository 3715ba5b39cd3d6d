// json.h — what every JSON writer and strict reader of spikehunt shares:
// non-finite doubles as the strings "nan", "inf", "-inf" (so every line stays
// strict JSON), and integers read without undefined behaviour.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace spikehunt {

// Finite doubles as numbers, non-finite as "nan" / "inf" / "-inf".
nlohmann::json number(double v);
// ... and back; anything else throws nlohmann::json::type_error.
double number_from(const nlohmann::json& v);
// A JSON integer as int64; anything else (a float, an unsigned past INT64_MAX,
// a string) is an InputError naming `file` and `field`.
int64_t json_integer(const nlohmann::json& v, const std::string& field, const std::string& file);

}  // namespace spikehunt
