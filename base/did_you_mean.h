// did_you_mean.h — the one "did you mean" of every error message: the
// candidate a typo most likely meant (a config key, a scenario name, a verb,
// a flag); and where two long texts that should agree differ.
// Example:
//   closest("widht", {"width", "depth"})  // "width"
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace spikehunt {

// Optimal string alignment distance: insertions, deletions, substitutions and
// swaps of two neighbours ("widht" is one edit from "width").
size_t edit_distance(std::string_view a, std::string_view b);

// The candidate a typo most likely meant: with `containing`, one that contains
// the word (3 characters or more); else the nearest within max(min_edits,
// a third of the word's length) edits; "" when none is that close. Config keys
// and names use min_edits 1 and containing; the command line's verbs and flags,
// typed more loosely, 2 and not containing.
std::string closest(const std::string& word, const std::vector<std::string>& candidates, size_t min_edits = 1,
                    bool containing = true);

// Two texts shown where they first differ, `width` characters of each from a
// little before it ("...\"lr\": {\"set\": [0.1, 0.3]..."): two long values cut
// at the same place would look the same. Short texts are shown whole.
std::pair<std::string, std::string> where_they_differ(const std::string& a, const std::string& b, size_t width = 60);

}  // namespace spikehunt
