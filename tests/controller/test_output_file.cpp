// The output path classifier and the checked writer (src/core/util/output_file.hpp), on the real
// file kinds: a character device made with mknod, a FIFO with a reader, /dev/full, folders,
// missing parents and symbolic links. Every case checks what is on disk afterwards, not only
// what the call returned.
#include "../../src/core/util/files.hpp"
#include "../../src/core/util/output_file.hpp"

#include <verlpp/core/error.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

using namespace verlpp;
using files::OutputFile;
using files::OutputKind;

namespace {

// A fresh folder under /tmp, removed with everything in it at the end of the test.
struct TempDir {
  std::string path;
  TempDir() {
    char name[] = "/tmp/verlpp-output-file-XXXXXX";
    REQUIRE(::mkdtemp(name) != nullptr);
    path = name;
  }
  ~TempDir() { files::remove_tree(path); }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

mode_t type_of(const std::string& path) {
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  return st.st_mode & S_IFMT;
}

// The message of the Error `f` throws ("" when it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A character device with the numbers of /dev/null (1, 3), made in `dir` (tests run as root).
std::string make_null_device(const TempDir& dir) {
  const std::string path = dir / "null";
  REQUIRE(::mknod(path.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0);
  REQUIRE(type_of(path) == S_IFCHR);
  return path;
}

}  // namespace

TEST_CASE("classify_output names each kind of output path", "[output]") {
  TempDir dir;
  std::ofstream(dir / "file") << "old";
  REQUIRE(::mkdir((dir / "folder").c_str(), 0755) == 0);
  REQUIRE(::mkfifo((dir / "fifo").c_str(), 0644) == 0);
  REQUIRE(::symlink((dir / "file").c_str(), (dir / "link").c_str()) == 0);
  REQUIRE(::symlink((dir / "absent").c_str(), (dir / "dangling").c_str()) == 0);
  const std::string device = make_null_device(dir);

  CHECK(files::classify_output("-").kind == OutputKind::kStdout);
  CHECK(files::classify_output(dir / "new.bin").kind == OutputKind::kNew);
  CHECK(files::classify_output(dir / "file").kind == OutputKind::kRegular);
  CHECK(files::classify_output(dir / "link").kind == OutputKind::kRegular);
  CHECK(files::classify_output(device).kind == OutputKind::kCharDevice);
  CHECK(files::classify_output("/dev/full").kind == OutputKind::kCharDevice);
  CHECK(files::classify_output(dir / "fifo").kind == OutputKind::kFifo);
  for (const std::string& ok : {std::string("-"), dir / "new.bin", dir / "file", device, dir / "fifo"})
    CHECK(files::classify_output(ok).writable());

  const auto folder = files::classify_output(dir / "folder");
  CHECK(folder.kind == OutputKind::kDirectory);
  CHECK_THAT(folder.problem, Catch::Contains("existing folder"));
  const auto missing = files::classify_output(dir / "no/such/out.bin");
  CHECK(missing.kind == OutputKind::kBadParent);
  CHECK_THAT(missing.problem, Catch::Contains(dir / "no/such") && Catch::Contains("does not exist"));
  const auto under_file = files::classify_output(dir / "file/out.bin");
  CHECK(under_file.kind == OutputKind::kBadParent);
  CHECK(files::classify_output(dir / "dangling").kind == OutputKind::kOther);
  CHECK(files::classify_output("").kind == OutputKind::kOther);

  // require_output: the label and the path in the message, nothing created.
  const std::string message = error_of([&] { files::require_output(dir / "folder", "--out"); });
  CHECK_THAT(message, Catch::Contains("--out " + dir / "folder") && Catch::Contains("existing folder"));
  CHECK_THAT(error_of([&] { files::require_output(dir / "no/such/out.bin", "--output"); }),
             Catch::Contains("--output " + dir / "no/such/out.bin") && Catch::Contains("does not exist"));
  CHECK(files::list_dir(dir.path) == std::vector<std::string>{"dangling", "fifo", "file", "folder", "link", "null"});
}

TEST_CASE("a regular file is replaced whole through a temporary file, or left as it was", "[output]") {
  TempDir dir;
  const std::string path = dir / "out.txt";
  std::ofstream(path) << "old contents";
  REQUIRE(::chmod(path.c_str(), 0640) == 0);
  {
    OutputFile out(path);
    out.write(std::string(200000, 'x'));  // beyond the buffer: part of it is already written
    out.flush();
    CHECK(slurp(path) == "old contents");          // readers see the old file until commit
    CHECK(files::list_dir(dir.path).size() == 2);  // the file and its temporary
    out.commit();
  }
  CHECK(slurp(path) == std::string(200000, 'x'));
  CHECK(files::list_dir(dir.path) == std::vector<std::string>{"out.txt"});
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0640);  // the replacement keeps the mode

  // An error on the way (the writer destroyed without commit): the old file, no leftovers.
  {
    OutputFile out(path);
    out.write("half of a new file");
    out.flush();
  }
  CHECK(slurp(path) == std::string(200000, 'x'));
  CHECK(files::list_dir(dir.path) == std::vector<std::string>{"out.txt"});

  // Through a symbolic link: the link stays a link, its target gets the contents.
  REQUIRE(::symlink(path.c_str(), (dir / "link").c_str()) == 0);
  files::write_text(dir / "link", "through the link");
  CHECK(type_of(dir / "link") == S_IFLNK);
  CHECK(slurp(path) == "through the link");
  CHECK(files::list_dir(dir.path) == std::vector<std::string>{"link", "out.txt"});
}

TEST_CASE("a character device is written in place and stays a device", "[output]") {
  TempDir dir;
  const std::string device = make_null_device(dir);
  files::write_text(device, std::string(100000, 'y'));
  OutputFile out(device);
  out.write("more");
  out.commit();
  CHECK(type_of(device) == S_IFCHR);
  CHECK(files::list_dir(dir.path) == std::vector<std::string>{"null"});  // no temporary beside it
}

TEST_CASE("a FIFO is written in place to its reader", "[output]") {
  TempDir dir;
  const std::string fifo = dir / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  std::string received;
  std::thread reader([&] { received = slurp(fifo); });
  const std::string text = std::string(150000, 'z') + "\nend\n";
  files::write_text(fifo, text);
  reader.join();
  CHECK(received == text);
  CHECK(type_of(fifo) == S_IFIFO);
  CHECK(files::list_dir(dir.path) == std::vector<std::string>{"fifo"});
}

TEST_CASE("a write the system refuses is an error naming the file and the reason", "[output]") {
  // Small writes are buffered: the error comes with the flush (or commit).
  CHECK_THAT(error_of([] { files::write_text("/dev/full", "a line\n"); }),
             Catch::Equals("writing /dev/full: No space left on device"));
  // A write larger than the buffer fails in write() itself.
  OutputFile big("/dev/full");
  CHECK_THAT(error_of([&] { big.write(std::string(1 << 20, 'b')); }),
             Catch::Equals("writing /dev/full: No space left on device"));

  // A log appended to through a link to /dev/full (a full disk under metrics.jsonl).
  TempDir dir;
  const std::string log = dir / "metrics.jsonl";
  REQUIRE(::symlink("/dev/full", log.c_str()) == 0);
  OutputFile rows(log, OutputFile::Mode::kAppend);
  rows.write("{\"step\": 1}\n");
  CHECK_THAT(error_of([&] { rows.flush(); }), Catch::Equals("writing " + log + ": No space left on device"));
  CHECK(type_of(log) == S_IFLNK);

  // Opening a folder or under a missing folder: refused with the path, nothing made.
  CHECK_THAT(error_of([&] { OutputFile out(dir.path); }), Catch::Contains(dir.path) && Catch::Contains("folder"));
  CHECK_THAT(error_of([&] { files::write_text(dir / "gone/x.json", "{}"); }),
             Catch::Contains(dir / "gone") && Catch::Contains("does not exist"));
  CHECK(files::list_dir(dir.path) == std::vector<std::string>{"metrics.jsonl"});
}

TEST_CASE("append and stream modes write in place, visible after each flush", "[output]") {
  TempDir dir;
  const std::string log = dir / "metrics.jsonl";
  std::ofstream(log) << "row 1\n";
  {
    OutputFile rows(log, OutputFile::Mode::kAppend);
    rows.write("row 2\n");
    rows.flush();
    CHECK(slurp(log) == "row 1\nrow 2\n");
    rows.commit();
  }
  CHECK(slurp(log) == "row 1\nrow 2\n");

  const std::string results = dir / "results.jsonl";
  std::ofstream(results) << "from an earlier run\n";
  OutputFile out(results, OutputFile::Mode::kStream);
  CHECK(slurp(results).empty());  // truncated when opened
  out.write("sample 0\n");
  out.flush();
  CHECK(slurp(results) == "sample 0\n");  // under its name before the end (a kill keeps it)
  out.write("sample 1\n");
  out.commit();
  CHECK(slurp(results) == "sample 0\nsample 1\n");
  CHECK(files::list_dir(dir.path) == std::vector<std::string>{"metrics.jsonl", "results.jsonl"});
}
