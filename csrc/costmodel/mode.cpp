#include "costmodel/mode.hpp"

#include <stdexcept>

namespace dsperf {

Mode parse_mode(const std::string& text) {
    if (text == "as_published") return Mode::AsPublished;
    if (text == "corrected") return Mode::Corrected;
    throw std::invalid_argument("mode must be 'as_published' or 'corrected', got '" + text + "'");
}

const char* mode_name(Mode mode) {
    return mode == Mode::AsPublished ? "as_published" : "corrected";
}

}  // namespace dsperf
