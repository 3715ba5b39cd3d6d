// html.h — the one escaping of text spikehunt writes into HTML: every string
// from a config, a space, a tap, a name or an exception goes through
// html_escape (element text and double-quoted attributes) or script_json (a
// JSON data block inside <script type="application/json">). Fuzzed by
// fuzz/fuzz_html.cpp.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace spikehunt {

// &, <, >, " and ' as character references: safe in element text and in quoted attributes.
std::string html_escape(const std::string& text);

// j as JSON text that cannot end or change the <script> element it sits in: every '<', '>' and '&'
// (which JSON holds only inside strings) written as \u003c, \u003e, \u0026, so "</script", "<!--" and
// "<script" never appear; JSON.parse of it gives j back.
std::string script_json(const nlohmann::json& j);

}  // namespace spikehunt
