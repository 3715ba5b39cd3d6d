// The precompiled header every LibTorch translation unit shares (see CMakeLists.txt).
#pragma once
#include <torch/torch.h>
#include <nlohmann/json.hpp>
