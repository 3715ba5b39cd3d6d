/// version.h — spikehunt's version. Semantic versioning from 0.2.0 on: the
/// public API is what the headers in include/spikehunt/ declare (not the
/// internal headers they include); a name leaves it only after one release
/// in which it is [[deprecated]], and CHANGELOG.md says what changed.
#pragma once

#define SPIKEHUNT_VERSION_MAJOR 0
#define SPIKEHUNT_VERSION_MINOR 2
#define SPIKEHUNT_VERSION_PATCH 0

namespace spikehunt {

/// "0.2.0": what `spikehunt --version`, results and repros record.
constexpr const char* kVersion = "0.2.0";

}  // namespace spikehunt
