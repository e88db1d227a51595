// Liveness over UDP datagrams (see liveness.hpp for why not the store). Plain POSIX sockets:
// c10d has no unreliable, whole-message channel, and one datagram per heartbeat is all this
// needs. Datagrams are text: "verlpp-beat <token> <rank> <stage>", "verlpp-query <token>
// <rank> <id>" and rank 0's "verlpp-reply <token> <id> <sentence>"; the token (random, per
// run) keeps a stray datagram of another run on a reused port out of the table.
#include "liveness.hpp"

#include <fmt/format.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

namespace verlpp::hw::detail {

namespace {

using Clock = std::chrono::steady_clock;

// Below the 65,507-byte UDP payload limit; a longer list of stopped ranks is cut.
constexpr size_t kMaxDatagram = 60000;

struct Entry {
  uint64_t beats = 0;
  std::string stage;
};

struct Query {
  sockaddr_in from{};
  std::string id;
  int32_t asker = 0;
  std::vector<uint64_t> before;
  Clock::time_point due;
};

// Splits "word word word rest..." into `n` words and the rest (which may hold spaces).
bool split_words(const std::string& text, size_t n, std::vector<std::string>& words, std::string& rest) {
  words.clear();
  size_t at = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t end = text.find(' ', at);
    if (end == std::string::npos) {
      if (i + 1 != n) return false;
      words.push_back(text.substr(at));
      rest.clear();
      return true;
    }
    words.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  rest = text.substr(at);
  return true;
}

bool parse_rank(const std::string& text, int32_t world_size, int32_t& rank) {
  if (text.empty() || text.size() > 9 || text.find_first_not_of("0123456789") != std::string::npos) return false;
  rank = int32_t(std::stol(text));
  return rank < world_size;
}

}  // namespace

struct Liveness::State {
  int32_t rank = 0;
  int32_t world_size = 1;
  std::chrono::milliseconds heartbeat{500};
  std::string token_text;  // 16 hex digits
  std::string where;       // rank 0's host:port, for the other ranks' messages
  std::string off_reason;
  int fd = -1;
  uint16_t port = 0;
  std::atomic<bool> stopping{false};
  std::thread thread;

  std::mutex mutex;  // the fields below
  std::condition_variable wake;
  std::vector<Entry> table;    // rank 0
  std::vector<Query> pending;  // rank 0: questions answered once their window has passed
  std::string stage;           // this rank's

  std::mutex asking;  // one question to rank 0 at a time
  uint64_t next_query = 0;

  ~State() {
    if (fd >= 0) ::close(fd);
  }

  std::vector<uint64_t> beats() {
    std::lock_guard<std::mutex> lock(mutex);
    std::vector<uint64_t> out;
    for (const Entry& e : table) out.push_back(e.beats);
    return out;
  }

  // The sentence for the ranks whose beat count did not move between `before` and `after`.
  std::string stopped(const std::vector<uint64_t>& before, const std::vector<uint64_t>& after, int32_t asker) {
    std::lock_guard<std::mutex> lock(mutex);
    std::string list;
    for (int32_t r = 1; r < world_size; ++r) {
      if (r == asker || after[size_t(r)] != before[size_t(r)]) continue;
      const Entry& e = table[size_t(r)];
      const std::string said = e.beats == 0 ? fmt::format("rank {} (no heartbeat ever arrived)", r)
                                            : fmt::format("rank {} (last stage: {})", r, e.stage);
      if (list.size() + said.size() > kMaxDatagram - 200) {
        list += ", and more";
        break;
      }
      list += (list.empty() ? "" : ", ") + said;
    }
    if (list.empty()) return "";
    return fmt::format("; stopped responding (no heartbeat for {} ms): {}", (heartbeat * 4).count(), list);
  }

  void handle(const std::string& datagram, const sockaddr_in& from) {
    std::vector<std::string> w;
    std::string rest;
    int32_t r = 0;
    if (!split_words(datagram, 3, w, rest) || w[1] != token_text || !parse_rank(w[2], world_size, r)) return;
    std::lock_guard<std::mutex> lock(mutex);
    if (w[0] == "verlpp-beat") {
      table[size_t(r)].beats += 1;
      table[size_t(r)].stage = rest;
    } else if (w[0] == "verlpp-query") {
      Query q;
      q.from = from;
      q.id = rest;
      q.asker = r;
      for (const Entry& e : table) q.before.push_back(e.beats);
      q.due = Clock::now() + heartbeat * 4;
      pending.push_back(std::move(q));
    }
  }

  void answer_due() {
    std::vector<Query> due;
    {
      std::lock_guard<std::mutex> lock(mutex);
      const auto now = Clock::now();
      for (size_t i = 0; i < pending.size();) {
        if (pending[i].due <= now) {
          due.push_back(std::move(pending[i]));
          pending.erase(pending.begin() + std::ptrdiff_t(i));
        } else {
          ++i;
        }
      }
    }
    if (due.empty()) return;
    const std::vector<uint64_t> now = beats();
    for (const Query& q : due) {
      const std::string reply = fmt::format("verlpp-reply {} {} {}", token_text, q.id, stopped(q.before, now, q.asker));
      ::sendto(fd, reply.data(), reply.size(), 0, reinterpret_cast<const sockaddr*>(&q.from), sizeof(q.from));
    }
  }

  // Rank 0's thread: the table, and answers to the others.
  void serve_loop() {
    std::vector<char> buffer(65536);
    while (!stopping) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 50) > 0 && (p.revents & POLLIN) != 0) {
        sockaddr_in from{};
        socklen_t len = sizeof(from);
        const ssize_t n = ::recvfrom(fd, buffer.data(), buffer.size(), 0, reinterpret_cast<sockaddr*>(&from), &len);
        if (n > 0) handle(std::string(buffer.data(), size_t(n)), from);
      }
      answer_due();
    }
  }

  void send_beat() {
    std::string datagram;
    {
      std::lock_guard<std::mutex> lock(mutex);
      datagram = fmt::format("verlpp-beat {} {} {}", token_text, rank, stage);
    }
    if (datagram.size() > kMaxDatagram) datagram.resize(kMaxDatagram);
    // A lost or refused datagram is what liveness reports on; nothing to do here.
    (void)::send(fd, datagram.data(), datagram.size(), 0);
  }

  // Another rank's thread: a heartbeat every period.
  void beat_loop() {
    std::unique_lock<std::mutex> lock(mutex);
    while (!stopping) {
      lock.unlock();
      send_beat();
      lock.lock();
      wake.wait_for(lock, heartbeat, [&] { return stopping.load(); });
    }
  }

  std::string ask_rank0() {
    std::lock_guard<std::mutex> one(asking);
    const std::string id = std::to_string(++next_query);
    const std::string query = fmt::format("verlpp-query {} {} {}", token_text, rank, id);
    const auto wait = heartbeat * 4 + std::chrono::milliseconds(3000);
    const auto deadline = Clock::now() + wait;
    auto resend = Clock::now();
    std::vector<char> buffer(65536);
    while (Clock::now() < deadline) {
      // Asked again each second: a datagram may be lost. The first answer counts.
      if (Clock::now() >= resend) {
        (void)::send(fd, query.data(), query.size(), 0);
        resend = Clock::now() + std::chrono::seconds(1);
      }
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0 || (p.revents & POLLIN) == 0) continue;
      const ssize_t n = ::recv(fd, buffer.data(), buffer.size(), 0);
      if (n <= 0) continue;  // ECONNREFUSED: nothing listens at rank 0's port (asked again)
      std::vector<std::string> w;
      std::string sentence;
      if (split_words(std::string(buffer.data(), size_t(n)), 3, w, sentence) && w[0] == "verlpp-reply" &&
          w[1] == token_text && w[2] == id)
        return sentence;
    }
    return fmt::format("; rank 0 did not answer a liveness question at {} within {} ms, so rank 0 has stopped", where,
                       wait.count());
  }
};

Liveness::Liveness(std::shared_ptr<State> state) : state_(std::move(state)) {}

Liveness::~Liveness() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stopping = true;
  }
  state_->wake.notify_all();
  if (state_->thread.joinable()) state_->thread.join();
}

std::unique_ptr<Liveness> Liveness::serve(int32_t world_size, std::chrono::milliseconds heartbeat) {
  auto s = std::make_shared<State>();
  s->rank = 0;
  s->world_size = world_size;
  s->heartbeat = heartbeat;
  std::random_device entropy;
  s->token_text = fmt::format("{:016x}", std::uniform_int_distribution<uint64_t>()(entropy));
  s->table.resize(size_t(world_size));
  s->fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(any);
  if (s->fd < 0 || ::bind(s->fd, reinterpret_cast<sockaddr*>(&any), sizeof(any)) != 0 ||
      ::getsockname(s->fd, reinterpret_cast<sockaddr*>(&any), &len) != 0) {
    s->off_reason = fmt::format("rank 0 could not open a UDP socket: {}", std::strerror(errno));
    if (s->fd >= 0) ::close(s->fd);
    s->fd = -1;
    return std::unique_ptr<Liveness>(new Liveness(s));
  }
  s->port = ntohs(any.sin_port);
  State* raw = s.get();
  s->thread = std::thread([raw] { raw->serve_loop(); });
  return std::unique_ptr<Liveness>(new Liveness(s));
}

std::unique_ptr<Liveness> Liveness::join(const std::string& host, uint16_t port, const std::string& token, int32_t rank,
                                         std::chrono::milliseconds heartbeat) {
  auto s = std::make_shared<State>();
  s->rank = rank;
  s->heartbeat = heartbeat;
  s->token_text = token;
  s->where = fmt::format("{}:{}", host, port);
  if (port == 0) {
    s->off_reason = "rank 0 has no liveness socket";
    return std::unique_ptr<Liveness>(new Liveness(s));
  }
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0 || found == nullptr) {
    s->off_reason = fmt::format("rank {} cannot resolve rank 0's address '{}': {}", rank, host, ::gai_strerror(rc));
    return std::unique_ptr<Liveness>(new Liveness(s));
  }
  s->fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  // Connected: send() goes to rank 0, and only rank 0's datagrams are received.
  const bool ok = s->fd >= 0 && ::connect(s->fd, found->ai_addr, found->ai_addrlen) == 0;
  const int error = errno;
  ::freeaddrinfo(found);
  if (!ok) {
    s->off_reason = fmt::format("rank {} cannot open a UDP socket to {}: {}", rank, s->where, std::strerror(error));
    if (s->fd >= 0) ::close(s->fd);
    s->fd = -1;
    return std::unique_ptr<Liveness>(new Liveness(s));
  }
  s->send_beat();  // the first at once: rank 0 hears of this rank before its first collective
  State* raw = s.get();
  s->thread = std::thread([raw] { raw->beat_loop(); });
  return std::unique_ptr<Liveness>(new Liveness(s));
}

std::string Liveness::address() const {
  if (state_->port == 0) return "off";
  return fmt::format("{} {}", state_->port, state_->token_text);
}

bool Liveness::parse_address(const std::string& text, uint16_t& port, std::string& token) {
  const size_t space = text.find(' ');
  if (space == std::string::npos || space == 0 || space > 5 || text.size() != space + 17) return false;
  const std::string p = text.substr(0, space), t = text.substr(space + 1);
  if (p.find_first_not_of("0123456789") != std::string::npos ||
      t.find_first_not_of("0123456789abcdef") != std::string::npos)
    return false;
  const unsigned long value = std::stoul(p);
  if (value == 0 || value > 65535) return false;
  port = uint16_t(value);
  token = t;
  return true;
}

void Liveness::set_stage(const std::string& stage) {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stage = stage;
  }
  if (state_->rank != 0 && state_->fd >= 0) state_->send_beat();
}

std::string Liveness::diagnose() const {
  State& s = *state_;
  if (s.fd < 0) return fmt::format("; which ranks stopped is unknown (liveness is off: {})", s.off_reason);
  if (s.rank != 0) return s.ask_rank0();
  const std::vector<uint64_t> before = s.beats();
  std::this_thread::sleep_for(s.heartbeat * 4);
  return s.stopped(before, s.beats(), 0);
}

}  // namespace verlpp::hw::detail
