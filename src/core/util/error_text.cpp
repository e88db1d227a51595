// error_text (see error_text.hpp).
#include <verlpp/core/error_text.hpp>

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

namespace verlpp {

std::string error_text(const std::exception& e) {
  if (const auto* torch_error = dynamic_cast<const c10::Error*>(&e)) {
    // LibTorch's what() is the message plus "Exception raised from ..." and a frame list.
    std::string text = torch_error->what_without_backtrace();
    const size_t raised = text.find("\nException raised from");
    if (raised != std::string::npos) text.resize(raised);
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    return "LibTorch: " + text;
  }
  if (dynamic_cast<const nlohmann::json::exception*>(&e) != nullptr) {
    // "[json.exception.type_error.302] type must be ..." -> "JSON: type must be ...".
    std::string text = e.what();
    const size_t close = text.find("] ");
    if (text.rfind("[json.exception.", 0) == 0 && close != std::string::npos) text = text.substr(close + 2);
    return "JSON: " + text;
  }
  return e.what();
}

}  // namespace verlpp
