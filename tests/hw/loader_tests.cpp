// Plugin discovery and loading: every rejection reason, explicit requests that must fail
// loudly, scans that must only list failures, variants, de-duplication and older tables.
#include <catch2/catch.hpp>

#include "test_paths.hpp"

#include <verlpp/hw/device.hpp>
#include <verlpp/hw/kernels.hpp>
#include <verlpp/hw/plugin_registry.hpp>

#include <unistd.h>

#include <filesystem>
#include <cstdlib>
#include <fstream>
#include <iterator>

using namespace verlpp;
namespace fs = std::filesystem;

namespace {

hw::DiscoveryResult scan(std::vector<std::string> dirs, std::string requested = "") {
  hw::DiscoveryOptions o;
  o.search_dirs = std::move(dirs);
  o.requested = std::move(requested);
  return hw::discover_plugins(o);
}

const hw::RejectedPlugin* rejected_for(const hw::DiscoveryResult& r, const std::string& file_part) {
  for (const auto& x : r.rejected)
    if (x.path.find(file_part) != std::string::npos) return &x;
  return nullptr;
}

// Catches the Error an explicit request must raise and returns its text.
std::string explicit_failure(const std::string& requested, std::vector<std::string> dirs = {}) {
  try {
    scan(std::move(dirs), requested);
  } catch (const Error& e) {
    return e.what();
  }
  FAIL("loading '" << requested << "' did not fail");
  return {};
}

// Removes a test folder. Not std::filesystem::remove_all: LibTorch 2.x wheels export their own
// copy of it, which crashes when called from outside (seen with torch 2.11 on the GPU host).
void remove_tree(const fs::path& p) {
  std::string cmd = "rm -rf '" + p.string() + "'";
  REQUIRE(std::system(cmd.c_str()) == 0);
}

fs::path fresh_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("verlpp-test-" + name + "-" + std::to_string(::getpid()));
  remove_tree(p);
  fs::create_directories(p);
  return p;
}

}  // namespace

TEST_CASE("a path that does not exist is a specific error", "[hw][loader]") {
  std::string msg = explicit_failure("/nonexistent/libverlpp-plugin-nothing.so");
  CHECK_THAT(msg, Catch::Contains("/nonexistent/libverlpp-plugin-nothing.so") && Catch::Contains("no such file"));
}

TEST_CASE("a file that is not a shared object is rejected with the loader's message", "[hw][loader]") {
  fs::path dir = fresh_dir("garbage");
  fs::path file = dir / "libverlpp-plugin-garbage.so";
  std::ofstream(file) << "this is not an ELF file\n";
  std::string msg = explicit_failure(file.string());
  CHECK_THAT(msg, Catch::Contains(file.string()) && Catch::Contains("cannot be loaded as a shared object"));
  // In a scan it is listed, not fatal.
  auto r = scan({dir.string()});
  CHECK(r.loaded.empty());
  REQUIRE(rejected_for(r, "garbage") != nullptr);
  CHECK_THAT(rejected_for(r, "garbage")->reason, Catch::Contains("cannot be loaded as a shared object"));
  remove_tree(dir);
}

TEST_CASE("a shared object without the entry symbol", "[hw][loader]") {
  std::string path = test::plugin_case_file("no_entry", "noentry");
  std::string msg = explicit_failure(path);
  CHECK_THAT(msg, Catch::Contains(path) && Catch::Contains("has no symbol verlpp_plugin_get_api_v1"));
}

TEST_CASE("a plugin of another ABI major", "[hw][loader]") {
  SECTION("by its table") {
    std::string msg = explicit_failure(test::plugin_case_file("major2", "major"));
    CHECK_THAT(msg, Catch::Contains("built for plugin ABI major 2; this host speaks major 1"));
  }
  SECTION("by its symbol names") {
    std::string msg = explicit_failure(test::plugin_case_file("v2only", "future"));
    CHECK_THAT(msg, Catch::Contains("built for plugin ABI major 2"));
  }
}

TEST_CASE("an API table smaller than the host's loads with defaults", "[hw][loader]") {
  hw::Plugin p = hw::load_plugin_file(test::plugin_case_file("small", "oldtable"));
  CHECK(p.name() == "oldtable");
  CHECK(p.plugin_table_size() == offsetof(verlpp_plugin_api, comm_create));
  // Slots past the plugin's table read as NULL even though its memory holds poison values.
  CHECK(p.api().comm_create == nullptr);
  CHECK(p.api().kernels == nullptr);
  CHECK(hw::Kernels(p).available().empty());
  hw::Device d(p, 0);
  CHECK(d.properties().name == "raw C device");
  // The host's fallbacks take over: default stream, plain host staging.
  hw::Stream s = d.create_stream();
  CHECK(s.handle() == nullptr);
  hw::PinnedBuffer staging = d.allocate_pinned(100);
  CHECK_FALSE(staging.is_pinned());
  hw::DeviceBuffer b = d.allocate(16);
  int in[4] = {1, 2, 3, 4}, out[4] = {0, 0, 0, 0};
  d.copy(b.data(), in, sizeof(in), VERLPP_COPY_HOST_TO_DEVICE);
  d.copy(out, b.data(), sizeof(out), VERLPP_COPY_DEVICE_TO_HOST);
  CHECK(std::equal(in, in + 4, out));
  CHECK_THROWS_WITH(d.create_event(), Catch::Contains("event_create") && Catch::Contains("not offered"));
}

TEST_CASE("an init that throws inside the plugin", "[hw][loader]") {
  std::string path = test::plugin_case_file("init_throws", "initfail");
  std::string msg = explicit_failure(path);
  CHECK_THAT(
      msg, Catch::Contains(path) && Catch::Contains("init failed") && Catch::Contains("boom: init failed on purpose"));
  auto r = scan({test::plugin_case_dir("init_throws")});
  CHECK(r.loaded.empty());
  REQUIRE(r.rejected.size() == 1);
  CHECK_THAT(r.rejected[0].reason, Catch::Contains("boom"));
}

TEST_CASE("a probe that returns 0", "[hw][loader]") {
  std::string msg = explicit_failure(test::plugin_case_file("probe_zero", "absent"));
  CHECK_THAT(msg,
             Catch::Contains("probe says it cannot run here") && Catch::Contains("no such device on this machine"));
}

TEST_CASE("a table whose name disagrees with the file name", "[hw][loader]") {
  std::string msg = explicit_failure(test::plugin_case_file("misnamed", "impostor"));
  CHECK_THAT(msg, Catch::Contains("somebody_else") && Catch::Contains("impostor"));
}

TEST_CASE("the best-scoring variant wins, by name or by scan", "[hw][loader]") {
  auto by_name = scan({test::plugin_case_dir("variants")}, "multi");
  REQUIRE(by_name.loaded.size() == 1);
  CHECK(by_name.loaded[0].variant() == "fast");
  CHECK(by_name.loaded[0].score() == 9);
  auto scanned = scan({test::plugin_case_dir("variants")});
  REQUIRE(scanned.loaded.size() == 1);
  CHECK(scanned.loaded[0].display_name() == "multi-fast");
  REQUIRE(rejected_for(scanned, "multi-slow") != nullptr);
  CHECK_THAT(rejected_for(scanned, "multi-slow")->reason, Catch::Contains("lost to 'fast'"));
}

TEST_CASE("the same plugin found in two folders loads once", "[hw][loader]") {
  fs::path a = fresh_dir("dup-a"), b = fresh_dir("dup-b");
  fs::copy_file(test::cpu_ref_path(), a / "libverlpp-plugin-cpu_ref.so");
  fs::copy_file(test::cpu_ref_path(), b / "libverlpp-plugin-cpu_ref.so");
  auto r = scan({a.string(), b.string(), a.string()});  // a twice: the same folder is searched once
  REQUIRE(r.loaded.size() == 1);
  CHECK(r.loaded[0].path().find(a.string()) == 0);
  REQUIRE(r.rejected.size() == 1);
  CHECK_THAT(r.rejected[0].reason, Catch::Contains("duplicate of " + (a / "libverlpp-plugin-cpu_ref.so").string()));
  CHECK(r.searched_dirs.size() == 2);
  remove_tree(a);
  remove_tree(b);
}

TEST_CASE("VERL_HARDWARE_PLUGIN=none disables plugins", "[hw][loader]") {
  auto r = scan({test::bin_dir()}, "none");
  CHECK(r.disabled);
  CHECK(r.loaded.empty());
}

TEST_CASE("short names, comma lists and unknown names", "[hw][loader]") {
  auto r = scan({test::bin_dir(), test::plugin_case_dir("variants")}, "cpu_ref, multi");
  REQUIRE(r.loaded.size() == 2);
  CHECK(r.loaded[0].name() == "cpu_ref");
  CHECK(r.loaded[1].display_name() == "multi-fast");
  std::string msg = explicit_failure("nosuchplugin", {test::bin_dir()});
  CHECK_THAT(msg, Catch::Contains("no plugin named 'nosuchplugin'") && Catch::Contains(test::bin_dir()));
  CHECK_THAT(explicit_failure("Bad Name!"), Catch::Contains("neither a path nor a plugin name"));
}

TEST_CASE("a scan lists broken plugins beside the good ones", "[hw][loader]") {
  fs::path dir = fresh_dir("mixed");
  fs::copy_file(test::cpu_ref_path(), dir / "libverlpp-plugin-cpu_ref.so");
  fs::copy_file(test::plugin_case_file("major2", "major"), dir / "libverlpp-plugin-major.so");
  fs::copy_file(test::plugin_case_file("init_throws", "initfail"), dir / "libverlpp-plugin-initfail.so");
  auto r = scan({dir.string()});
  REQUIRE(r.loaded.size() == 1);
  CHECK(r.loaded[0].name() == "cpu_ref");
  CHECK(r.rejected.size() == 2);
  remove_tree(dir);
}

TEST_CASE("a probe that crashes, aborts, exits, hangs or breaks its reason is rejected, not fatal",
          "[hw][loader][probe]") {
  struct Hostile {
    const char* folder;
    const char* stem;
    const char* reason;
  };
  const Hostile cases[] = {
      {"probe_segv", "probesegv", "crashed in its probe (signal SIGSEGV)"},
      {"probe_abort", "probeabort", "crashed in its probe (signal SIGABRT)"},
      {"probe_exit", "probeexit", "ended the process in its probe (exit status 7)"},
      {"probe_hang", "probehang", "its probe did not return within 2000 ms (the child process was killed)"},
      {"probe_unterminated", "probenonul", "its probe left the reason unterminated (no NUL within 512 bytes)"},
      {"probe_overflow", "probeoverflow", "its probe wrote past the 512 bytes of reason it was given"},
      {"load_segv", "loadsegv", "crashed while being loaded (its static initialisers) (signal SIGSEGV)"},
  };
  fs::path dir = fresh_dir("hostile");
  fs::copy_file(test::cpu_ref_path(), dir / "libverlpp-plugin-cpu_ref.so");
  for (const Hostile& h : cases)
    fs::copy_file(test::plugin_case_file(h.folder, h.stem), dir / (std::string("libverlpp-plugin-") + h.stem + ".so"));
  hw::DiscoveryOptions o;
  o.search_dirs = {dir.string()};
  o.probe_timeout_ms = 2000;  // long enough for a loaded machine to open the good files
  const auto r = hw::discover_plugins(o);
  // The scan goes on past every hostile file: cpu_ref loads, each of the others is listed.
  REQUIRE(r.loaded.size() == 1);
  CHECK(r.loaded[0].name() == "cpu_ref");
  CHECK(r.rejected.size() == std::size(cases));
  for (const Hostile& h : cases) {
    INFO(h.stem);
    const hw::RejectedPlugin* x = rejected_for(r, std::string("libverlpp-plugin-") + h.stem + ".so");
    REQUIRE(x != nullptr);
    CHECK(x->reason == h.reason);
  }
  // Named explicitly, the same plugin is an Error that names the file and the reason.
  o.requested = (dir / "libverlpp-plugin-probesegv.so").string();
  try {
    hw::discover_plugins(o);
    FAIL("a crashing probe named explicitly did not fail");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("libverlpp-plugin-probesegv.so") && Catch::Contains("signal SIGSEGV"));
  }
  remove_tree(dir);
}
