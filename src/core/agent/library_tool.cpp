// verlpp.tools.SharedLibrary: a tool whose call is a C function in a user's shared object
// (include/verlpp/agent/tool_abi.h), loaded with Boost.DLL as reward functions are.
#include "builtin_tools.hpp"

#include <verlpp/agent/tool_abi.h>
#include <verlpp/core/error.hpp>
#include <verlpp/core/python_json.hpp>

#include <boost/dll/shared_library.hpp>

namespace verlpp::agent {
namespace {

class LibraryTool : public Tool {
 public:
  LibraryTool(const nlohmann::ordered_json& schema, std::shared_ptr<boost::dll::shared_library> library,
              verlpp_tool_fn_v1 fn, size_t reply_bytes, const std::string& where)
      : Tool(schema, where), library_(std::move(library)), fn_(fn), reply_bytes_(reply_bytes) {}

  ToolResult call(const nlohmann::ordered_json& arguments, const nlohmann::json& create_kwargs) const override {
    std::string reply(reply_bytes_, '\0');
    double reward = 0.0;
    const std::string args = python_json_dumps(arguments);
    const std::string kwargs = create_kwargs.dump();
    const int status = fn_(name().c_str(), args.c_str(), kwargs.c_str(), reply.data(), reply.size(), &reward);
    reply.resize(std::min(reply.find('\0'), reply.size() - 1));  // a reply without its NUL is cut before the end
    if (status != 0) throw Error(name(), reply.empty() ? fmt::format("the tool's library returned {}", status) : reply);
    return ToolResult{reply, reward};
  }

 private:
  std::shared_ptr<boost::dll::shared_library> library_;  // kept loaded while the tool lives
  verlpp_tool_fn_v1 fn_;
  size_t reply_bytes_;
};

}  // namespace

std::unique_ptr<Tool> make_library_tool(const nlohmann::json& config, const nlohmann::ordered_json& schema,
                                        const std::string& where) {
  VERLPP_CHECK(config.contains("path") && config["path"].is_string() && !config["path"].get<std::string>().empty(),
               "{}.config.path: the tool library's path is missing (a shared object exporting a verlpp_tool_fn_v1)",
               where);
  VERLPP_CHECK(config.contains("symbol") && config["symbol"].is_string(),
               "{}.config.symbol: the tool function's name is missing", where);
  const std::string path = config["path"].get<std::string>(), symbol = config["symbol"].get<std::string>();
  size_t reply_bytes = 65536;
  if (config.contains("max_reply_bytes")) {
    const auto& n = config["max_reply_bytes"];
    VERLPP_CHECK(n.is_number_integer() && n.get<int64_t>() >= 2 && n.get<int64_t>() <= (int64_t(1) << 30),
                 "{}.config.max_reply_bytes: expected an integer in [2, 2^30], got {}", where, n.dump());
    reply_bytes = static_cast<size_t>(n.get<int64_t>());
  }
  std::shared_ptr<boost::dll::shared_library> library;
  try {
    library = std::make_shared<boost::dll::shared_library>(
        path, boost::dll::load_mode::rtld_lazy | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    throw Error(where + ".config.path", fmt::format("'{}' cannot be loaded: {}", path, e.what()));
  }
  VERLPP_CHECK(library->has(symbol), "{}.config.symbol: '{}' has no symbol '{}'", where, path, symbol);
  auto fn = library->get<int(const char*, const char*, const char*, char*, size_t, double*)>(symbol);
  return std::make_unique<LibraryTool>(schema, library, fn, reply_bytes, where);
}

}  // namespace verlpp::agent
